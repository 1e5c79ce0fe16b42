"""Exporting a trace tree as OpenTelemetry spans, in the OTLP JSON file format.

The spans are those of :mod:`runtime.trace._spans` (``invoke_agent`` per agent, ``execute_tool``
per tool call, ``chat`` per model call; the mapping the live export shares); this module only
encodes them.

The output is what the OpenTelemetry collector's file exporter writes and its ``otlpjsonfile``
receiver reads: one ``ExportTraceServiceRequest`` JSON object (``resourceSpans`` →
``scopeSpans`` → ``spans``) per line, with a bounded number of spans per line so a huge run
streams. IDs are lowercase hex (32 digits for the trace, derived from the run id; 16 for each
span, derived from the node id), times are nanosecond strings, enums are integers, as the OTLP
JSON mapping says.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from ._spans import Attr, SpanRecord, run_spans
from ._spans import span_id as span_id
from ._spans import trace_id as trace_id
from ._tree import TraceTree
from ._turns import TurnLog


def _value(value: Attr) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, tuple):
        return {"arrayValue": {"values": [_value(v) for v in value]}}
    return {"stringValue": value}


def _attrs(attrs: dict[str, Attr]) -> list[dict[str, Any]]:
    return [{"key": key, "value": _value(value)} for key, value in attrs.items()]


def span_json(record: SpanRecord) -> dict[str, Any]:
    """One span in the OTLP JSON mapping."""
    status: dict[str, Any] = {"code": record.status_code}
    if record.status_message is not None:
        status["message"] = record.status_message
    span: dict[str, Any] = {
        "traceId": record.trace_id,
        "spanId": record.span_id,
        "name": record.name,
        "kind": record.kind,
        "startTimeUnixNano": str(record.start_ns),
        "endTimeUnixNano": str(record.end_ns),
        "attributes": _attrs(record.attributes),
        "status": status,
    }
    if record.parent_span_id is not None:
        span["parentSpanId"] = record.parent_span_id
    if record.events:
        span["events"] = [
            {"timeUnixNano": str(e.time_ns), "name": e.name, "attributes": _attrs(e.attributes)}
            for e in record.events
        ]
    return span


def otlp_requests(
    trees: Iterable[TraceTree],
    *,
    version: str = "0",
    spans_per_request: int = 1000,
    turns: dict[str, TurnLog] | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield OTLP ``ExportTraceServiceRequest`` objects covering every node of *trees*.

    Args:
        trees: the runs.
        version: the writer's version (``service.version``).
        spans_per_request: at most this many spans in one request (a huge run streams).
        turns: each run's model calls by run id; a run without is exported without ``chat``
            spans.
    """
    resource: dict[str, Any] = {
        "attributes": _attrs({"service.name": "trio-agents", "service.version": version})
    }
    scope: dict[str, Any] = {"name": "trio-agents", "version": version}

    def request(batch: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "resourceSpans": [
                {"resource": resource, "scopeSpans": [{"scope": scope, "spans": batch}]}
            ]
        }

    for tree in trees:
        batch: list[dict[str, Any]] = []
        log = (turns or {}).get(str(tree.run_id))
        for record in run_spans(tree, log):
            batch.append(span_json(record))
            if len(batch) >= spans_per_request:
                yield request(batch)
                batch = []
        if batch:
            yield request(batch)


def otlp_json_lines(
    trees: Iterable[TraceTree], *, version: str = "0", turns: dict[str, TurnLog] | None = None
) -> Iterator[bytes]:
    """The OTLP JSON file format: one request object per line (newline included)."""
    for request in otlp_requests(trees, version=version, turns=turns):
        yield orjson.dumps(request, option=orjson.OPT_APPEND_NEWLINE)


_SKIP: tuple[bytes, ...] = (b'{"type":"text_delta",', b'{"type":"thinking_delta",')


def read_turns(lines: Iterable[bytes]) -> dict[str, TurnLog]:
    """Each run's model calls from a trace file's lines (deltas skipped unread; a bad line is
    skipped: the tree's reader reports those)."""
    logs: dict[str, TurnLog] = {}
    for line in lines:
        if line.startswith(_SKIP):
            continue
        try:
            fields = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(fields, dict) or not isinstance(fields.get("run_id"), str):
            continue
        log = logs.get(fields["run_id"])
        if log is None:
            log = logs[fields["run_id"]] = TurnLog()
        log.apply_dict(fields)
    return logs
