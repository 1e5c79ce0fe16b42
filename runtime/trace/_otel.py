"""Live OpenTelemetry: a run's spans sent over OTLP/HTTP while it goes (docs/observability.md).

:class:`LiveSpans` is a tap on the run's bus (events there are already masked). It keeps the
run's tree and model turns as the events come (O(1) per event, as the live view's tree) and,
when a node finishes, makes its span with the mapping ``trace export --format otlp-json`` uses
(:mod:`runtime.trace._spans`), then hands it to the OpenTelemetry SDK's batch processor. The
processor's own thread encodes and sends the batches, so the event loop never waits for the
network: a slow or dead collector costs the run nothing until its end, where the flush is
bounded (:data:`FLUSH_S`), and spans that do not fit the bounded queue are dropped by the SDK
with its warning, never held.

Configured as OpenTelemetry's exporters are, by the environment (``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``…_HEADERS``, ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SDK_DISABLED``), or by ``--otlp URL``. The SDK is an extra
(``trio-agents[otel]``) imported only when spans are to be sent.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs

from runtime.core import ConfigError

from ._spans import (
    SPAN_KIND_CLIENT,
    STATUS_ERROR,
    STATUS_OK,
    SpanRecord,
    node_span,
    span_id,
    trace_id,
    turn_node_id,
    turn_span,
)
from ._tree import AgentNode, TraceTree, _EventFields
from ._turns import TurnLog

if TYPE_CHECKING:
    from runtime.core import Event

FLUSH_S: Final = 5.0
"""The longest a run's end waits for its last spans to be sent."""
QUEUE_SPANS: Final = 65_536
"""Spans waiting to be sent, at most (a run of 1,000 agents makes about 10,000)."""
BATCH_SPANS: Final = 512
EXPORT_TIMEOUT_S: Final = 5.0
"""One export request, retries included (the SDK backs off between tries)."""
INSTALL_HINT: Final = "pip install 'trio-agents[otel]'"


@attrs.frozen(kw_only=True)
class OtlpSettings:
    """Where spans go and what they say about their source.

    Attributes:
        endpoint: the OTLP/HTTP traces URL (``…/v1/traces``).
        headers: sent with every request (an API key often: never logged, never in a span).
        service_name: ``service.name`` of the resource.
        resource: the other resource attributes.
    """

    endpoint: str
    headers: dict[str, str] = attrs.field(factory=dict, repr=False)
    service_name: str = "trio-agents"
    resource: dict[str, str] = attrs.field(factory=dict)


def _pairs(text: str) -> dict[str, str]:
    """``k=v,k2=v2`` with percent-encoding, as OpenTelemetry's variables write them."""
    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            out[urllib.parse.unquote(key.strip())] = urllib.parse.unquote(value.strip())
    return out


def _traces_url(base: str) -> str:
    return base.rstrip("/") + "/v1/traces"


def otlp_settings(env: Mapping[str, str], url: str | None = None) -> OtlpSettings | None:
    """The settings for *env* and an explicit *url* (``--otlp``), or None when spans stay home.

    *url* is a collector's base URL (``http://localhost:4318``; ``/v1/traces`` is added) or,
    when it has a path, the traces URL itself. Without it the standard variables decide.

    Raises:
        ConfigError: *url* (or a variable) is not an http(s) URL.
    """
    if url is None and env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if url is not None:
        path = urllib.parse.urlsplit(url).path
        endpoint = url if path not in ("", "/") else _traces_url(url)
        origin = "--otlp"
    elif env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        endpoint = env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
        origin = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    elif env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        endpoint = _traces_url(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
        origin = "OTEL_EXPORTER_OTLP_ENDPOINT"
    else:
        return None
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{origin}: not an http(s) URL: {endpoint!r}")
    headers = _pairs(env.get("OTEL_EXPORTER_OTLP_HEADERS", ""))
    headers.update(_pairs(env.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "")))
    resource = _pairs(env.get("OTEL_RESOURCE_ATTRIBUTES", ""))
    service = env.get("OTEL_SERVICE_NAME") or resource.pop("service.name", None) or "trio-agents"
    resource.pop("service.name", None)
    return OtlpSettings(endpoint=endpoint, headers=headers, service_name=service, resource=resource)


def sdk_missing() -> str | None:
    """Why the live export cannot work here (the SDK or its exporter is not installed), or None."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        return f"the OpenTelemetry SDK is not installed ({exc.name}): {INSTALL_HINT}"
    return None


class LiveSpans:
    """A bus tap sending each node's span as it finishes; :meth:`aclose` flushes, bounded.

    Args:
        settings: where to send.
        version: the runtime's version (``service.version``, the scope's version).
        exporter: the SDK exporter to use (default: OTLP/HTTP to ``settings.endpoint``).
    """

    def __init__(self, settings: OtlpSettings, *, version: str, exporter: Any = None) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(
                endpoint=settings.endpoint, headers=settings.headers, timeout=EXPORT_TIMEOUT_S
            )
        self.settings = settings
        self._processor = BatchSpanProcessor(
            exporter,
            max_queue_size=QUEUE_SPANS,
            max_export_batch_size=BATCH_SPANS,
            schedule_delay_millis=500,
        )
        self._resource = Resource(
            {
                **settings.resource,
                "service.name": settings.service_name,
                "service.version": version,
            }
        )
        self._scope = InstrumentationScope("trio-agents", version)
        self._tree = TraceTree(keep_details=False)
        self._turns = TurnLog()
        self.sent = 0
        """Spans handed to the SDK so far."""
        self._closed = False

    def __call__(self, event: Event) -> None:
        """The tap: O(1) per event, plus one span for an event that ends a node."""
        if self._closed:
            return
        tree = self._tree
        tree.apply(event)
        kind = event.type
        turn = self._turns.apply_dict(_EventFields(event))
        if turn is not None:
            agent = tree.agents.get(turn.agent_id)
            if agent is not None:
                self._send(turn_span(tree, agent, turn))
        if kind == "tool_finished":
            node: Any = tree.tools.get(str(getattr(event, "tool_use_id", "")))
        elif kind == "agent_finished":
            node = tree.agents.get(str(event.agent_id))
        else:
            return
        if node is not None:
            parent = node.parent
            fallback = (parent.started_ts if parent is not None else None) or node.started_ts
            self._send(node_span(tree, node, fallback or 0.0))

    def _send(self, record: SpanRecord) -> None:
        self._processor.on_end(self._readable(record))
        self.sent += 1

    def _readable(self, record: SpanRecord) -> Any:
        from opentelemetry.sdk.trace import Event as SpanEvent
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

        def context(span_hex: str) -> SpanContext:
            return SpanContext(
                trace_id=int(record.trace_id, 16),
                span_id=int(span_hex, 16),
                is_remote=False,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )

        code = {STATUS_OK: StatusCode.OK, STATUS_ERROR: StatusCode.ERROR}.get(
            record.status_code, StatusCode.UNSET
        )
        return ReadableSpan(
            name=record.name,
            context=context(record.span_id),
            parent=context(record.parent_span_id) if record.parent_span_id else None,
            resource=self._resource,
            attributes=dict(record.attributes),
            events=[SpanEvent(e.name, dict(e.attributes), e.time_ns) for e in record.events],
            kind=SpanKind.CLIENT if record.kind == SPAN_KIND_CLIENT else SpanKind.INTERNAL,
            status=Status(code, record.status_message),
            start_time=record.start_ns,
            end_time=record.end_ns,
            instrumentation_scope=self._scope,
        )

    def trace_headers(self, agent_id: str) -> dict[str, str]:
        """The ``traceparent`` of *agent_id*'s next model call: its ``chat`` span (the id is
        derived from the agent and the turn, so it is known before the span is made)."""
        run_id = self._tree.run_id
        if run_id is None:
            return {}
        span = span_id(run_id, turn_node_id(agent_id, self._turns.next_turn(agent_id)))
        return {"traceparent": f"00-{trace_id(run_id)}-{span}-01"}

    def unfinished_agents(self) -> list[AgentNode]:
        """Agents whose span has not gone out (none, once a run has ended cleanly)."""
        return [a for a in self._tree.agents.values() if not a.finished]

    def close(self) -> None:
        """Send what is queued and stop the SDK's thread (blocking, for as long as the exporter
        takes: run it through :meth:`aclose`). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._processor.shutdown()  # type: ignore[no-untyped-call]  # the SDK leaves it untyped

    async def aclose(self, timeout_s: float | None = None) -> None:
        """:meth:`close` in a worker thread, under a shielded bound: a dead or slow collector
        delays the end of a run by at most *timeout_s*, even while it is cancelled; the
        thread is then left to finish on its own (a daemon thread: it never holds up exit)."""
        import trio

        with trio.move_on_after(FLUSH_S if timeout_s is None else timeout_s, shield=True):
            await trio.to_thread.run_sync(self.close, abandon_on_cancel=True)


def open_live_spans(
    otlp: str | bool | None, env: Mapping[str, str], *, version: str, warn: Any = None
) -> LiveSpans | None:
    """The live export a run asked for, or None.

    Args:
        otlp: a URL (``--otlp``), ``False`` (never), or None (as the environment says).
        env: the environment to read the ``OTEL_*`` variables from.
        version: the runtime's version.
        warn: called with one line when the environment asks for spans the SDK cannot send.

    Raises:
        ConfigError: *otlp* is a URL but the SDK is missing, or a URL is bad.
    """
    if otlp is False:
        return None
    settings = otlp_settings(env, otlp if isinstance(otlp, str) else None)
    if settings is None:
        return None
    missing = sdk_missing()
    if missing is not None:
        if isinstance(otlp, str):
            raise ConfigError(f"--otlp {otlp}: {missing}")
        if warn is not None:
            warn(f"OTEL_EXPORTER_OTLP_* is set but no spans are sent: {missing}")
        return None
    return LiveSpans(settings, version=version)
