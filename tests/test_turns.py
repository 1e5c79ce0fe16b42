"""Each agent's model calls, inferred from the stream (runtime/trace/_turns.py)."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.trace._turns import TurnLog


def ev(kind: str, ts: float, agent: str = "a1", **fields: Any) -> dict[str, Any]:
    return {"type": kind, "ts": ts, "agent_id": agent, "run_id": "r", **fields}


def turn(ts: float, n: int, stop: str = "tool_use", agent: str = "a1") -> dict[str, Any]:
    return ev(
        "turn_finished", ts, agent, turn=n, stop_reason=stop, input_tokens=10 * n, output_tokens=n
    )


def feed(log: TurnLog, events: list[dict[str, Any]]) -> None:
    for event in events:
        log.apply_dict(event)


def test_a_call_starts_when_the_agent_does_and_again_when_its_tools_are_done() -> None:
    log = TurnLog()
    feed(log, [
        ev("agent_started", 0.0),
        turn(1.0, 1),
        ev("tool_started", 1.0, tool_use_id="t1"),
        ev("tool_started", 1.0, tool_use_id="t2"),
        ev("tool_finished", 1.5, tool_use_id="t1", status="ok"),
        ev("tool_finished", 3.0, tool_use_id="t2", status="ok"),
        turn(4.0, 2, "end_turn"),
        ev("agent_finished", 4.0, status="completed"),
    ])  # fmt: skip
    calls = log.turns_of("a1")
    assert [(t.start, t.end, t.turn, t.stop_reason, t.status) for t in calls] == [
        (0.0, 1.0, 1, "tool_use", "ok"),
        (3.0, 4.0, 2, "end_turn", "ok"),  # after the slower of the two calls
    ]
    assert calls[1].input_tokens == 20
    assert log.open_turn("a1") is None


def test_a_call_under_way_when_the_agent_is_cancelled_is_kept_cut_short() -> None:
    log = TurnLog()
    feed(
        log,
        [ev("agent_started", 0.0), ev("provider_retry", 0.5, attempt=1, delay_s=2.0, reason="429")],
    )
    assert log.open_turn("a1") == pytest.approx(0.0)
    cut = log.apply_dict(ev("agent_finished", 3.0, status="cancelled"))
    assert cut is not None
    assert (cut.start, cut.end, cut.turn, cut.status, cut.stop_reason) == (
        0.0,
        3.0,
        1,
        "cancelled",
        None,
    )
    assert cut.retries == ((0.5, 1, 2.0, "429"),)


def test_a_cancel_that_went_through_the_tools_makes_no_call() -> None:
    # Cancelling an agent cancels its running tools first: no model call followed them.
    log = TurnLog()
    feed(log, [
        ev("agent_started", 0.0), turn(1.0, 1), ev("tool_started", 1.0, tool_use_id="t1"),
        ev("tool_finished", 2.0, tool_use_id="t1", status="cancelled"),
    ])  # fmt: skip
    assert log.apply_dict(ev("agent_finished", 2.0, status="cancelled")) is None
    assert len(log.turns_of("a1")) == 1


def test_a_user_message_after_a_final_turn_starts_the_next_call() -> None:
    log = TurnLog()
    feed(
        log,
        [ev("agent_started", 0.0), turn(1.0, 1, "end_turn"), ev("user_message", 5.0, text="more")],
    )
    assert log.open_turn("a1") == pytest.approx(5.0)
    feed(log, [turn(6.0, 2, "end_turn")])
    assert [(t.start, t.end) for t in log.turns_of("a1")] == [(0.0, 1.0), (5.0, 6.0)]


def test_agents_are_apart_and_bad_events_are_ignored() -> None:
    log = TurnLog()
    feed(log, [
        ev("agent_started", 0.0, "a1"), ev("agent_started", 0.5, "a2"),
        turn(2.0, 1, "end_turn", agent="a2"), {"type": "turn_finished", "ts": "x"},
        turn(9.0, 1, "end_turn", agent="nobody"),
    ])  # fmt: skip
    assert [t.start for t in log.turns_of("a2")] == [0.5]
    assert log.turns_of("a1") == []
    assert log.open_turn("a1") == pytest.approx(0.0)
