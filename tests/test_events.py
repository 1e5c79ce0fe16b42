"""Events: the JSON form of every event type, and clear errors for bad lines."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import runtime
from runtime import (
    EventDecodeError,
    ToolFinished,
    TurnFinished,
    UnknownEventType,
    decode_event,
    encode_event,
    event_from_dict,
    event_to_dict,
)
from runtime.core._events import EVENT_TYPES

_BASE: dict[str, Any] = {
    "seq": 1, "ts": 1.5, "run_id": "r", "agent_id": "agent-1", "parent_tool_use_id": "tu-1",
}
_SAMPLES: dict[str, dict[str, Any]] = {
    "run_started": {"version": "0.1.0", "config": {"provider": "scripted"}},
    "agent_started": {"name": "main", "parent_agent_id": None, "depth": 0, "prompt": "p",
                      "background": False},
    "text_delta": {"text": "héllo "},
    "thinking_delta": {"text": "hmm"},
    "tool_started": {"tool_use_id": "tu-2", "name": "bash", "input": {"command": "ls"},
                     "summary": "bash: ls", "depth": 1},
    "permission_requested": {"request_id": "perm-1", "tool_use_id": "tu-2", "name": "bash",
                             "summary": "bash: rm -rf /"},
    "permission_resolved": {"request_id": "perm-1", "tool_use_id": "tu-2", "granted": False,
                            "reason": "denied by user"},
    "tool_finished": {"tool_use_id": "tu-2", "name": "bash", "status": "ok", "output": "x",
                      "duration_s": 0.25, "input": None, "depth": 1},
    "turn_finished": {"turn": 1, "stop_reason": "tool_use", "input_tokens": 3, "output_tokens": 4,
                      "context_tokens": 1200, "context_window": 200000,
                      "tool_use_ids": ["tu-2", "tu-3"], "cost_usd": 0.000072,
                      "cache_read_tokens": 2, "cache_write_tokens": None},
    "user_message": {"text": "also check the tests"},
    "message_queued": {"text": "also check the tests"},
    "cancel_requested": {"target": "tu-2", "reason": "too slow", "by": "user"},
    "agent_finished": {"status": "cancelled", "result": None, "error": "cancelled: x", "turns": 1,
                       "input_tokens": 3, "output_tokens": 4, "duration_s": 1.0,
                       "cost_usd": None},
    "run_finished": {"status": "completed", "duration_s": 2.0},
    "tool_progress": {"tool_use_id": "tu-2", "progress": 3.0, "total": 10.0, "message": "3/10"},
    "provider_retry": {"attempt": 1, "delay_s": 1.5, "reason": "429 Too Many Requests"},
    "context_compacted": {"method": "summary", "tokens_before": 9000, "tokens_after": 4000,
                          "messages_before": 40, "messages_after": 5, "input_tokens": 8000,
                          "output_tokens": 600, "cost_usd": 0.033},
    "replay_diverged": {"node": "main \u203a reviewer, turn 3",
                        "detail": "read(src/x.py) returned 41 lines, recorded 38"},
    "rate_limited": {"wait_s": 0.3, "reason": "refused", "status": 429},
    "hook_finished": {"hook_event": "PreToolUse", "command": "./check.sh", "url": None,
                      "exit_code": 2, "decision": "block", "duration_s": 0.1,
                      "tool_use_id": "tu-2"},
    "stop_requested": {"target": "agent-2", "reason": "enough", "by": "control"},
    "agent_message": {"from_agent_id": "agent-2", "to_agent_id": "agent-3", "text": "hi"},
    "todo_updated": {"tool_use_id": "tu-1.1", "todos": [
        {"content": "Run the tests", "status": "in_progress", "activeForm": "Running the tests"}]},
    "run_resumed": {"version": "0.1.0", "gap_s": 12.5, "last_seq": 41, "cut_bytes": 0,
                    "source": None, "config": {"provider": "scripted"}, "rerun": ["tu-2.1"],
                    "interrupted": ["tu-3.1"]},
    # MCP servers asking the client (docs/mcp.md)
    "mcp_sampled": {"tool_use_id": "tu-3", "server": "everything", "model": "m", "status": "ok",
                    "reason": "", "input_tokens": 30, "output_tokens": 12},
    "elicitation_requested": {"request_id": "elicit-1", "tool_use_id": "tu-3",
                              "server": "everything", "message": "Who are you?", "mode": "form",
                              "requested_schema": {"type": "object"}, "url": None},
    "elicitation_resolved": {"request_id": "elicit-1", "tool_use_id": "tu-3",
                             "action": "decline", "reason": "declined by user"},
}


def test_turn_finished_without_context_fields_still_decodes() -> None:
    obj = {"type": "turn_finished", **_BASE, "turn": 1, "stop_reason": "end_turn",
           "input_tokens": 3, "output_tokens": 4}
    event = event_from_dict(obj)
    assert isinstance(event, TurnFinished)
    assert (event.context_tokens, event.context_window) == (None, None)
    assert event.tool_use_ids is None


def test_every_event_type_has_a_sample() -> None:
    assert set(_SAMPLES) == set(EVENT_TYPES)


@pytest.mark.parametrize("type_name", sorted(_SAMPLES))
def test_every_event_round_trips_through_its_json_line(type_name: str) -> None:
    obj = {"type": type_name, **_BASE, **_SAMPLES[type_name]}
    event = event_from_dict(obj)
    assert type(event).type == type_name
    assert event_to_dict(event) == obj
    line = encode_event(event)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert decode_event(line) == event


def test_the_type_key_comes_first_on_the_wire() -> None:
    obj = {"type": "text_delta", **_BASE, "text": "x"}
    assert encode_event(event_from_dict(obj)).startswith(b'{"type":"text_delta"')


def test_a_missing_field_is_named_with_the_line_number() -> None:
    line = b'{"type":"text_delta","seq":1,"ts":1,"run_id":"r","agent_id":"a","parent_tool_use_id":null}'
    with pytest.raises(EventDecodeError, match=r"^line 7: .*text_delta\.text") as info:
        decode_event(line, lineno=7)
    assert info.value.line == 7


def test_a_wrongly_typed_field_is_named() -> None:
    obj = {"type": "tool_finished", **_BASE, **_SAMPLES["tool_finished"], "status": "weird"}
    with pytest.raises(EventDecodeError, match=r"tool_finished\.status"):
        event_from_dict(obj)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"seq": 1}', "field 'type'"),
        (b'{"type": 5}', "field 'type'"),
    ],
)
def test_malformed_lines_raise_one_decode_error(line: bytes, message: str) -> None:
    with pytest.raises(EventDecodeError, match=message):
        decode_event(line, lineno=3)


def test_an_unknown_type_is_its_own_error_so_readers_can_skip_newer_events() -> None:
    with pytest.raises(UnknownEventType) as info:
        decode_event(b'{"type": "from_the_future", "seq": 1}', lineno=2)
    assert info.value.type_name == "from_the_future"
    assert isinstance(info.value, EventDecodeError)


def test_events_are_frozen() -> None:
    event = event_from_dict({"type": "tool_finished", **_BASE, **_SAMPLES["tool_finished"]})
    assert isinstance(event, ToolFinished)
    with pytest.raises(AttributeError):
        event.status = "error"  # type: ignore[misc]


@given(text=st.text(), seq=st.integers(min_value=1, max_value=2**53), ts=st.floats(0, 2e9))
def test_text_deltas_round_trip_any_unicode(text: str, seq: int, ts: float) -> None:
    event = runtime.TextDelta(seq=seq, ts=ts, run_id="r", agent_id="a", parent_tool_use_id=None,
                              text=text)
    assert decode_event(encode_event(event)) == event


@pytest.mark.parametrize("field", ["seq", "ts", "run_id"])
def test_a_line_without_the_fields_the_bus_stamps_is_refused(field: str) -> None:
    """An emitter leaves seq, ts and run_id to the bus (they have defaults for it), but every
    event on the wire has them: a line without one is a decode error naming it."""
    obj = {"type": "text_delta", **_BASE, "text": "x"}
    del obj[field]
    with pytest.raises(EventDecodeError, match=rf"text_delta\.{field}"):
        event_from_dict(obj)
