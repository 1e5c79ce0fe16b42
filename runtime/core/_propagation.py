"""W3C trace context on outgoing model calls (docs/observability.md#trace-context).

When a run sends live OpenTelemetry spans, each model call's HTTP request carries a
``traceparent`` naming the ``chat`` span it belongs to, so a provider or proxy that traces
requests (an LLM gateway, a collector in front of a local model) joins the run's trace. The
header maker is a context variable that ``open_runtime`` sets for the run's tasks (trio copies
the context into each task it starts); without live spans there is none and nothing is added.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

HeaderMaker = Callable[[str], Mapping[str, str]]
"""Given an agent id, the headers of that agent's next model call."""

_MAKER: ContextVar[HeaderMaker | None] = ContextVar("trio_agents_trace_headers", default=None)


def trace_headers(agent_id: str | None) -> dict[str, str]:
    """The trace-context headers for a model call of *agent_id* (empty when not tracing)."""
    make = _MAKER.get()
    if make is None or agent_id is None:
        return {}
    return dict(make(agent_id))


@contextmanager
def propagating(make: HeaderMaker) -> Generator[None, None, None]:
    """Model calls made from tasks started inside the block carry *make*'s headers."""
    token = _MAKER.set(make)
    try:
        yield
    finally:
        _MAKER.reset(token)
