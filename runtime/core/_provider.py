"""The provider protocol: how the agent loop talks to a model.

A provider streams one assistant turn as :data:`StreamItem` values: text and thinking deltas as
they arrive, each tool call once it is complete, and exactly one :class:`TurnEnd` last. The loop
consumes :meth:`Provider.stream` under ``contextlib.aclosing`` so a cancelled turn closes the
underlying connection at once.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

import attrs

from ._events import StopReason
from ._messages import Message


@attrs.frozen(kw_only=True)
class ToolSpec:
    """A tool as the model sees it."""

    name: str
    description: str
    input_schema: dict[str, Any]


@attrs.frozen(kw_only=True)
class ModelRequest:
    """One call to the model.

    Attributes:
        agent_type: the agent type's name (the scripted provider picks its script by it).
        agent_id: the calling agent, for logs.
        purpose: ``turn`` for the agent's own turns; ``compact`` for a request that asks for a
            summary of the conversation so far (docs/context.md), which the scripted provider
            answers from the scenario's ``compact`` agent type; ``sample`` for an MCP server's
            sampling request made during the agent's tool call (docs/mcp.md, "Sampling"),
            answered from the scenario's ``sample`` agent type.
        output_schema: see the attribute.
    """

    model: str
    system: str
    messages: Sequence[Message]
    tools: Sequence[ToolSpec]
    agent_type: str
    agent_id: str
    max_tokens: int = 4096
    purpose: Literal["turn", "compact", "sample"] = "turn"
    output_schema: dict[str, Any] | None = None
    """The JSON Schema the agent's final answer must match (its type's ``output_type``); a
    provider may pass it on natively (docs/python-api.md, "Typed outputs")."""


@attrs.frozen
class TextChunk:
    text: str


@attrs.frozen
class ThinkingChunk:
    text: str
    signature: str | None = None


@attrs.frozen
class ToolCall:
    """A complete tool call.

    A provider gives every call its id; a :class:`~runtime.FunctionProvider`'s function may
    leave it out (``ToolCall(name="read", input={"path": "a"})``) and gets one made for it.

    Attributes:
        error: set when the model's arguments could not be decoded (``input`` is then empty):
            the call becomes an ``error`` result the model reads, not a failed turn.
    """

    id: str = ""
    name: str = ""
    input: dict[str, Any] = attrs.Factory(dict)
    error: str | None = None
    provider_id: str | None = None
    """The id the provider gave, when the run gave the call another (a provider's id that an
    earlier call of the run already had): the agent's history keeps the provider's, events
    and the tree the run's."""

    @property
    def history_id(self) -> str:
        """The id the call has in the history sent back to the provider."""
        return self.provider_id or self.id


@attrs.frozen(kw_only=True)
class TurnEnd:
    """A turn's end and its usage. ``input_tokens`` counts cached input too; the two cache
    counts say how much of it was read from or written to the prompt cache (for its price,
    docs/costs.md)."""

    stop_reason: StopReason
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@attrs.frozen(kw_only=True)
class RetryNotice:
    """The call failed in a way worth retrying; the provider waits ``delay_s``, then tries again.

    Yielded before any other item of the turn (a failure after output is final), so the loop
    can report it (``provider_retry``) while the provider waits.

    Attributes:
        attempt: the try that failed, 1-based.
        delay_s: the wait before the next try.
        reason: what failed, one line, never a secret.
    """

    attempt: int
    delay_s: float
    reason: str


@attrs.frozen
class RateLimitNotice:
    """The call waits its turn at the endpoint's rate limit before its next try is sent.

    Yielded before any other item of the turn, so the loop can report it (``rate_limited``)
    while the provider waits (docs/rate-limits.md).

    Attributes:
        wait_s: the wait foreseen (the call's place in line at the rate known now).
        reason: ``refused`` (this call's try was refused: 429 or 529), ``paused`` (another
            call's was), ``requests`` or ``tokens`` (the endpoint's rate).
        status: for ``refused``: the HTTP status of the refusal.
    """

    wait_s: float
    reason: Literal["refused", "paused", "requests", "tokens"]
    status: int | None = None


StreamItem: TypeAlias = (
    TextChunk | ThinkingChunk | ToolCall | TurnEnd | RetryNotice | RateLimitNotice
)


@runtime_checkable
class Provider(Protocol):
    """A model behind a streaming API.

    ``name`` and :meth:`describe` go into ``run_started.config``; neither may hold a secret.
    """

    name: str

    def describe(self) -> dict[str, Any]:
        """Public settings (model, base URL, limits); never a key."""
        ...

    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        """Stream one assistant turn.

        An async generator. Raises :class:`~runtime.ProviderError` on failure (after any
        retries); a partial turn is then discarded by the caller. Cancellation closes the
        request at once.
        """
        ...
