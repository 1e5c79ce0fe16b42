"""Exporting a trace tree as OpenTelemetry spans, in the OTLP JSON file format.

Each agent becomes an ``invoke_agent`` span and each tool call an ``execute_tool`` span, named
and attributed per the OpenTelemetry GenAI semantic conventions (``gen_ai.operation.name``,
``gen_ai.agent.name``, ``gen_ai.agent.id``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
``gen_ai.usage.input_tokens`` / ``output_tokens``); what the conventions do not cover is under
``trio_agents.*``. A sub-agent's span is a child of its ``agent`` call's span, as in the tree.

The output is what the OpenTelemetry collector's file exporter writes and its ``otlpjsonfile``
receiver reads: one ``ExportTraceServiceRequest`` JSON object (``resourceSpans`` →
``scopeSpans`` → ``spans``) per line, with a bounded number of spans per line so a huge run
streams. IDs are lowercase hex (32 digits for the trace, derived from the run id; 16 for each
span, derived from the node id), times are nanosecond strings, enums are integers, as the OTLP
JSON mapping says.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from typing import Any, Final

import orjson

from ._tree import INTERRUPTED, RUNNING, AgentNode, ToolNode, TraceTree

SPAN_KIND_INTERNAL: Final = 1
STATUS_UNSET: Final = 0
STATUS_OK: Final = 1
STATUS_ERROR: Final = 2

_OK_STATUSES: Final = frozenset({"completed", "ok"})
_HEX32: Final = re.compile(r"[0-9a-f]{32}")


def trace_id(run_id: str) -> str:
    """The OTLP trace id of a run: its id if it is already 128-bit hex (a UUID), else a hash."""
    compact = run_id.replace("-", "").lower()
    if _HEX32.fullmatch(compact) and compact != "0" * 32:
        return compact
    return hashlib.sha256(run_id.encode()).hexdigest()[:32]


def span_id(run_id: str, node_id: str) -> str:
    """The OTLP span id of a node: a hash of the run and node ids (16 hex digits)."""
    return hashlib.sha256(f"{run_id}\0{node_id}".encode()).hexdigest()[:16]


def _ns(ts: float) -> str:
    # Microsecond rounding first: a float of unix seconds cannot carry nanoseconds anyway.
    return str(round(ts * 1_000_000) * 1000)


def _attr(key: str, value: str | int | float | bool) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    return {"key": key, "value": {"stringValue": value}}


def _status(node: AgentNode | ToolNode) -> dict[str, Any]:
    if node.status in _OK_STATUSES:
        return {"code": STATUS_OK}
    if node.status == RUNNING:
        return {"code": STATUS_UNSET}
    message = node.status
    if isinstance(node, AgentNode) and node.error:
        message = f"{node.status}: {node.error}"
    elif isinstance(node, ToolNode) and node.status != "cancelled" and node.output:
        message = f"{node.status}: {node.output[:500]}"
    if node.cancel is not None:
        message = f"cancelled by {node.cancel.by}: {node.cancel.reason}"
    return {"code": STATUS_ERROR, "message": message}


def _span(tree: TraceTree, node: AgentNode | ToolNode, fallback_start: float) -> dict[str, Any]:
    run_id = str(tree.run_id)
    start = node.started_ts if node.started_ts is not None else fallback_start
    end = start + (node.elapsed(tree.last_ts) or 0.0)
    attrs: list[dict[str, Any]] = [_attr("gen_ai.conversation.id", run_id)]
    if isinstance(node, AgentNode):
        name = f"invoke_agent {node.name}"
        attrs += [
            _attr("gen_ai.operation.name", "invoke_agent"),
            _attr("gen_ai.agent.name", node.name),
            _attr("gen_ai.agent.id", node.id),
            _attr("gen_ai.usage.input_tokens", node.input_tokens),
            _attr("gen_ai.usage.output_tokens", node.output_tokens),
            _attr("trio_agents.usage.total_input_tokens", node.total_input_tokens),
            _attr("trio_agents.usage.total_output_tokens", node.total_output_tokens),
            _attr("trio_agents.depth", node.depth),
            _attr("trio_agents.turns", node.turns),
        ]
    else:
        name = f"execute_tool {node.name}"
        attrs += [
            _attr("gen_ai.operation.name", "execute_tool"),
            _attr("gen_ai.tool.name", node.name),
            _attr("gen_ai.tool.call.id", node.id),
            _attr("gen_ai.tool.type", "function"),
            _attr("trio_agents.tool.summary", node.summary),
        ]
        if node.permission_intervals:
            attrs.append(_attr("trio_agents.permission.wait_s", node.permission_wait_s))
    attrs.append(_attr("trio_agents.status", node.status))
    if node.status not in _OK_STATUSES and node.status != RUNNING:
        attrs.append(_attr("error.type", node.status))
    if tree.config:
        for key, attr in (("provider", "gen_ai.provider.name"), ("model", "gen_ai.request.model")):
            value = tree.config.get(key)
            if isinstance(value, str):
                attrs.append(_attr(attr, value))
    span: dict[str, Any] = {
        "traceId": trace_id(run_id),
        "spanId": span_id(run_id, node.id),
        "name": name,
        "kind": SPAN_KIND_INTERNAL,
        "startTimeUnixNano": _ns(start),
        "endTimeUnixNano": _ns(max(start, end)),
        "attributes": attrs,
        "status": _status(node),
    }
    parent = node.parent
    if parent is not None:
        span["parentSpanId"] = span_id(run_id, parent.id)
    if node.cancel is not None:
        span["events"] = [
            {
                "timeUnixNano": _ns(node.cancel.ts),
                "name": "cancel_requested",
                "attributes": [
                    _attr("trio_agents.cancel.reason", node.cancel.reason),
                    _attr("trio_agents.cancel.by", node.cancel.by),
                ],
            }
        ]
    if node.status == INTERRUPTED:
        span.setdefault("events", []).append(
            {"timeUnixNano": _ns(max(start, end)), "name": "trace_ended_before_node_finished"}
        )
    return span


def otlp_requests(
    trees: Iterable[TraceTree], *, version: str = "0", spans_per_request: int = 1000
) -> Iterator[dict[str, Any]]:
    """Yield OTLP ``ExportTraceServiceRequest`` objects covering every node of *trees*."""
    resource: dict[str, Any] = {
        "attributes": [
            _attr("service.name", "trio-agents"),
            _attr("service.version", version),
        ]
    }
    scope: dict[str, Any] = {"name": "trio-agents", "version": version}
    for tree in trees:
        tree.rollup()
        fallback = tree.started_ts if tree.started_ts is not None else 0.0
        batch: list[dict[str, Any]] = []
        for node in tree.iter_nodes():
            parent = node.parent
            batch.append(_span(tree, node, parent.started_ts or fallback if parent else fallback))
            if len(batch) >= spans_per_request:
                yield {
                    "resourceSpans": [
                        {"resource": resource, "scopeSpans": [{"scope": scope, "spans": batch}]}
                    ]
                }
                batch = []
        if batch:
            yield {
                "resourceSpans": [
                    {"resource": resource, "scopeSpans": [{"scope": scope, "spans": batch}]}
                ]
            }


def otlp_json_lines(trees: Iterable[TraceTree], *, version: str = "0") -> Iterator[bytes]:
    """The OTLP JSON file format: one request object per line (newline included)."""
    for request in otlp_requests(trees, version=version):
        yield orjson.dumps(request, option=orjson.OPT_APPEND_NEWLINE)
