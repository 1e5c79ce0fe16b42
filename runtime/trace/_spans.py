"""The one mapping from a run's tree to OpenTelemetry spans (docs/observability.md#spans).

Both ways spans leave the runtime go through here, so they cannot drift apart: the offline
``trace export --format otlp-json`` (:mod:`runtime.trace._otlp` encodes these records as OTLP
JSON) and the live export (:mod:`runtime.trace._otel` turns the same records into the
OpenTelemetry SDK's spans, each as soon as its node finishes).

Each agent is an ``invoke_agent`` span, each tool call an ``execute_tool`` span, each model call
a ``chat`` span, named and attributed per the OpenTelemetry GenAI semantic conventions; what the
conventions do not cover is under ``trio_agents.*``. A sub-agent's span is a child of its
``agent`` call's span, a model call's a child of its agent's. IDs are derived, not random: the
trace id from the run id, a span id from the node id, so the same run gives the same ids live and
offline. Cancels, permission waits, compactions and model-call retries are span events.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from typing import Any, Final, NamedTuple

from ._tree import INTERRUPTED, RUNNING, AgentNode, Compaction, ToolNode, TraceTree
from ._turns import Turn, TurnLog

SPAN_KIND_INTERNAL: Final = 1
SPAN_KIND_CLIENT: Final = 3
STATUS_UNSET: Final = 0
STATUS_OK: Final = 1
STATUS_ERROR: Final = 2

_OK_STATUSES: Final = frozenset({"completed", "ok"})
_HEX32: Final = re.compile(r"[0-9a-f]{32}")

Attr = str | int | float | bool | tuple[str, ...]


class SpanEvent(NamedTuple):
    """A point in a span's life (a cancel, a permission answer, a retry)."""

    name: str
    time_ns: int
    attributes: dict[str, Attr]


class SpanRecord(NamedTuple):
    """One span, independent of how it is sent."""

    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_span_id: str | None
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Attr]
    status_code: int
    status_message: str | None
    events: tuple[SpanEvent, ...]


def trace_id(run_id: str) -> str:
    """The OTLP trace id of a run: its id if it is already 128-bit hex (a UUID), else a hash."""
    compact = run_id.replace("-", "").lower()
    if _HEX32.fullmatch(compact) and compact != "0" * 32:
        return compact
    return hashlib.sha256(run_id.encode()).hexdigest()[:32]


def span_id(run_id: str, node_id: str) -> str:
    """The OTLP span id of a node: a hash of the run and node ids (16 hex digits)."""
    return hashlib.sha256(f"{run_id}\0{node_id}".encode()).hexdigest()[:16]


def turn_node_id(agent_id: str, turn: int) -> str:
    """The id a model call's span id is derived from."""
    return f"{agent_id}#chat{turn}"


def ns(ts: float) -> int:
    """Unix seconds as nanoseconds, rounded to the microsecond (a float holds no more)."""
    return round(ts * 1_000_000) * 1000


def _status(node: AgentNode | ToolNode) -> tuple[int, str | None]:
    if node.status in _OK_STATUSES:
        return STATUS_OK, None
    if node.status == RUNNING:
        return STATUS_UNSET, None
    message = node.status
    if isinstance(node, AgentNode) and node.error:
        message = f"{node.status}: {node.error}"
    elif isinstance(node, ToolNode) and node.status != "cancelled" and node.output:
        message = f"{node.status}: {node.output[:500]}"
    if node.cancel is not None:
        message = f"cancelled by {node.cancel.by}: {node.cancel.reason}"
    return STATUS_ERROR, message


def subtree_tokens(agent: AgentNode) -> tuple[int, int]:
    """Input and output tokens of *agent* and every agent below it (no rollup needed)."""
    total_in = total_out = 0
    stack = [agent]
    while stack:
        node = stack.pop()
        total_in += node.input_tokens
        total_out += node.output_tokens
        for call in node.children:
            stack.extend(call.children)
    return total_in, total_out


def _common(tree: TraceTree) -> dict[str, Attr]:
    attrs: dict[str, Attr] = {"gen_ai.conversation.id": str(tree.run_id)}
    if tree.config:
        for key, attr in (("provider", "gen_ai.provider.name"), ("model", "gen_ai.request.model")):
            value = tree.config.get(key)
            if isinstance(value, str):
                attrs[attr] = value
    return attrs


def _cancel_events(node: AgentNode | ToolNode, end: int) -> list[SpanEvent]:
    events: list[SpanEvent] = []
    if node.cancel is not None:
        events.append(
            SpanEvent(
                "cancel_requested",
                ns(node.cancel.ts),
                {
                    "trio_agents.cancel.reason": node.cancel.reason,
                    "trio_agents.cancel.by": node.cancel.by,
                },
            )
        )
    if node.status == INTERRUPTED:
        events.append(SpanEvent("trace_ended_before_node_finished", end, {}))
    return events


def _compaction_event(c: Compaction) -> SpanEvent:
    return SpanEvent(
        "context_compacted",
        ns(c.ts),
        {
            "trio_agents.compaction.method": c.method,
            "trio_agents.compaction.tokens_before": c.tokens_before,
            "trio_agents.compaction.tokens_after": c.tokens_after,
        },
    )


def node_span(tree: TraceTree, node: AgentNode | ToolNode, fallback_start: float) -> SpanRecord:
    """The span of one agent or tool call (its subtree must be finished for the totals)."""
    run_id = str(tree.run_id)
    start = node.started_ts if node.started_ts is not None else fallback_start
    end = start + (node.elapsed(tree.last_ts) or 0.0)
    attrs = _common(tree)
    events: list[SpanEvent] = []
    if isinstance(node, AgentNode):
        name = f"invoke_agent {node.name}"
        total_in, total_out = subtree_tokens(node)
        attrs.update(
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": node.name,
                "gen_ai.agent.id": node.id,
                "gen_ai.usage.input_tokens": node.input_tokens,
                "gen_ai.usage.output_tokens": node.output_tokens,
                "trio_agents.usage.total_input_tokens": total_in,
                "trio_agents.usage.total_output_tokens": total_out,
                "trio_agents.depth": node.depth,
                "trio_agents.turns": node.turns,
            }
        )
        if node.compactions:  # rare: a scan of the run's compactions is fine
            events += [_compaction_event(c) for c in tree.compactions if c.agent_id == node.id]
    else:
        name = f"execute_tool {node.name}"
        attrs.update(
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": node.name,
                "gen_ai.tool.call.id": node.id,
                "gen_ai.tool.type": "function",
                "trio_agents.tool.summary": node.summary,
            }
        )
        if node.permission_intervals:
            attrs["trio_agents.permission.wait_s"] = node.permission_wait_s
            for asked, answered in node.permission_intervals:
                events.append(SpanEvent("permission_requested", ns(asked), {}))
                events.append(
                    SpanEvent(
                        "permission_resolved",
                        ns(answered),
                        {"trio_agents.permission.wait_s": round(answered - asked, 6)},
                    )
                )
    attrs["trio_agents.status"] = node.status
    if node.status not in _OK_STATUSES and node.status != RUNNING:
        attrs["error.type"] = node.status
    end_ns = ns(max(start, end))
    events += _cancel_events(node, end_ns)
    code, message = _status(node)
    parent = node.parent
    return SpanRecord(
        trace_id=trace_id(run_id),
        span_id=span_id(run_id, node.id),
        parent_span_id=span_id(run_id, parent.id) if parent is not None else None,
        name=name,
        kind=SPAN_KIND_INTERNAL,
        start_ns=ns(start),
        end_ns=end_ns,
        attributes=attrs,
        status_code=code,
        status_message=message,
        events=tuple(sorted(events, key=lambda e: e.time_ns)),
    )


def turn_span(tree: TraceTree, agent: AgentNode, turn: Turn) -> SpanRecord:
    """The ``chat`` span of one model call of *agent*."""
    run_id = str(tree.run_id)
    attrs = _common(tree)
    model = attrs.get("gen_ai.request.model")
    attrs.update(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.agent.name": agent.name,
            "gen_ai.agent.id": agent.id,
            "gen_ai.usage.input_tokens": turn.input_tokens,
            "gen_ai.usage.output_tokens": turn.output_tokens,
            "trio_agents.turn": turn.turn,
        }
    )
    if turn.stop_reason is not None:
        attrs["gen_ai.response.finish_reasons"] = (turn.stop_reason,)
    if turn.cost_usd is not None:
        attrs["trio_agents.usage.cost_usd"] = turn.cost_usd
    code, message = STATUS_OK, None
    if turn.status != "ok":
        attrs["error.type"] = turn.status
        code, message = STATUS_ERROR, f"the model call was cut short: the agent {turn.status}"
    events = tuple(
        SpanEvent(
            "provider_retry",
            ns(ts),
            {
                "trio_agents.retry.attempt": attempt,
                "trio_agents.retry.delay_s": delay,
                "trio_agents.retry.reason": reason,
            },
        )
        for ts, attempt, delay, reason in turn.retries
    )
    return SpanRecord(
        trace_id=trace_id(run_id),
        span_id=span_id(run_id, turn_node_id(agent.id, turn.turn)),
        parent_span_id=span_id(run_id, agent.id),
        name=f"chat {model}" if isinstance(model, str) else "chat",
        kind=SPAN_KIND_CLIENT,
        start_ns=ns(turn.start),
        end_ns=ns(max(turn.start, turn.end)),
        attributes=attrs,
        status_code=code,
        status_message=message,
        events=events,
    )


def run_spans(tree: TraceTree, turns: TurnLog | None = None) -> Iterator[SpanRecord]:
    """Every span of *tree*: its nodes depth first, each agent followed by its model calls."""
    fallback = tree.started_ts if tree.started_ts is not None else 0.0
    for node in tree.iter_nodes():
        parent = node.parent
        start = (parent.started_ts or fallback) if parent is not None else fallback
        yield node_span(tree, node, start)
        if turns is not None and isinstance(node, AgentNode):
            for turn in turns.turns_of(node.id):
                yield turn_span(tree, node, turn)


def record_dict(record: SpanRecord) -> dict[str, Any]:
    """*record* as a plain dict (for comparisons and tests)."""
    out = record._asdict()
    out["events"] = [e._asdict() for e in record.events]
    return out
