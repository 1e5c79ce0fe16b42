"""Agents that work together (docs/collaboration.md): a graceful stop beside cancel, the
partial work a stopped or cancelled sub-agent leaves its parent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from runtime import (
    AgentFinished,
    Event,
    StopRequested,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    open_runtime,
)
from tests.harness import EventLog, agent_call
from tests.invariants import by_type, check_invariants


def _slow_child(command: str = "sleep 1; echo finished") -> dict[str, Any]:
    return {
        "agents": {
            "main": {
                "turns": [
                    {"tool_calls": [agent_call("slow part", agent="sleeper")]},
                    {"text": "main is done"},
                ]
            },
            "sleeper": {
                "tools": ["bash"],
                "turns": [
                    {"text": "Starting the slow part.",
                     "tool_calls": [{"name": "bash", "input": {"command": command}}]},
                    {"text": "a second turn that a stop must prevent"},
                ],
            },
        }
    }  # fmt: skip


def _finished(events: list[Event], agent_id: str) -> AgentFinished:
    [end] = [e for e in by_type(events, AgentFinished) if e.agent_id == agent_id]
    assert isinstance(end, AgentFinished)
    return end


def _tool_end(events: list[Event], name: str) -> ToolFinished:
    [end] = [e for e in by_type(events, ToolFinished) if e.name == name]
    assert isinstance(end, ToolFinished)
    return end


async def _run_and(
    tmp_path: Path, scenario: dict[str, Any], act: Any, **kwargs: Any
) -> tuple[Any, EventLog]:
    """Run *scenario*, calling ``await act(rt, log)`` while it runs; the outcome and events."""
    log = EventLog()
    async with open_runtime(
        scenario=scenario, workspace=tmp_path, on_event=log, trace=False,
        permission_mode="allow-all", **kwargs,
    ) as rt:  # fmt: skip
        handle = await rt.start("go")
        await act(rt, log)
        outcome = await handle.wait()
    return outcome, log


def _bash_started(events: list[Event]) -> bool:
    return any(isinstance(e, ToolStarted) and e.name == "bash" for e in events)


async def test_a_stop_lets_the_running_bash_call_finish_and_takes_no_new_turn(
    tmp_path: Path,
) -> None:
    async def stop_child(rt: Any, log: EventLog) -> None:
        await log.wait_for(_bash_started)
        assert await rt.stop("agent-2", "enough for now")

    outcome, log = await _run_and(tmp_path, _slow_child(), stop_child)
    assert outcome.status == "completed"
    bash = _tool_end(log, "bash")
    assert (bash.status, bash.output) == ("ok", "finished\n[exit code 0]")  # ran to its end
    child = _finished(log, "agent-2")
    assert (child.status, child.result, child.error) == (
        "stopped", "Starting the slow part.", "stopped: enough for now",
    )  # fmt: skip
    turns = [e for e in by_type(log, TurnFinished) if e.agent_id == "agent-2"]
    assert len(turns) == 1  # no new turn after the stop
    [stop] = by_type(log, StopRequested)
    assert isinstance(stop, StopRequested)
    assert (stop.target, stop.agent_id, stop.by, stop.reason) == (
        "agent-2", "agent-2", "user", "enough for now",
    )  # fmt: skip
    call = _tool_end(log, "agent")
    assert call.status == "ok"
    assert call.output == (
        "sub-agent sleeper was stopped: enough for now, before it finished its task\n"
        "Its partial work:\n"
        "Its last text: Starting the slow part.\n"
        "Tool calls it finished (1):\n"
        "- bash: sleep 1; echo finished (ok)"
    )
    check_invariants(log)


async def test_a_stop_by_the_agent_call_id_stops_the_sub_agent_under_it(tmp_path: Path) -> None:
    async def stop_call(rt: Any, log: EventLog) -> None:
        await log.wait_for(_bash_started)
        [call] = [e for e in log if isinstance(e, ToolStarted) and e.name == "agent"]
        assert isinstance(call, ToolStarted)
        assert await rt.stop(call.tool_use_id, by="control")
        assert not await rt.stop(call.tool_use_id)  # already stopping: refused
        assert not await rt.stop("agent-2")  # under a stop already

    outcome, log = await _run_and(tmp_path, _slow_child(), stop_call)
    assert outcome.status == "completed"
    assert _finished(log, "agent-2").status == "stopped"
    assert _tool_end(log, "bash").status == "ok"
    check_invariants(log)


async def test_stop_of_an_unknown_or_finished_id_is_refused(tmp_path: Path) -> None:
    async def nothing(rt: Any, log: EventLog) -> None:
        assert not await rt.stop("agent-99")

    _, log = await _run_and(tmp_path, _slow_child("true"), nothing)
    async with open_runtime(scenario=_slow_child("true"), workspace=tmp_path, trace=False,
                            permission_mode="allow-all") as rt:  # fmt: skip
        await rt.run("go")
        assert not await rt.stop("agent-2")
        assert not await rt.stop("agent-1")
    assert not by_type(log, StopRequested)


async def test_a_stop_cuts_a_reply_being_streamed_short(tmp_path: Path) -> None:
    scenario = {
        "agents": {
            "main": {"turns": [{"tool_calls": [agent_call("talker", agent="talker")]},
                               {"text": "ok"}]},
            "talker": {"tools": [], "turns": [
                {"text": "first answer"},
            ]},
        }
    }  # fmt: skip
    scenario["agents"]["talker"]["turns"][0] = {
        "text": "a long reply " * 50, "chunk_delay_s": 0.05,
    }

    async def stop_mid_reply(rt: Any, log: EventLog) -> None:
        await log.wait_for(
            lambda ev: any(isinstance(e, TextDelta) and e.agent_id == "agent-2" for e in ev)
        )
        assert await rt.stop("agent-2")

    with trio.fail_after(10):
        outcome, log = await _run_and(tmp_path, scenario, stop_mid_reply)
    child = _finished(log, "agent-2")
    assert (child.status, child.turns) == ("stopped", 0)
    assert outcome.status == "completed"
    check_invariants(log)


async def test_a_stopped_root_ends_stopped_with_its_last_text(tmp_path: Path) -> None:
    scenario = {
        "agents": {
            "main": {"tools": ["bash"], "turns": [
                {"text": "checking", "tool_calls": [
                    {"name": "bash", "input": {"command": "sleep 0.5; echo hi"}}]},
                {"text": "never said"},
            ]},
        }
    }  # fmt: skip

    async def stop_root(rt: Any, log: EventLog) -> None:
        await log.wait_for(_bash_started)
        assert await rt.stop("agent-1")

    outcome, log = await _run_and(tmp_path, scenario, stop_root)
    assert (outcome.status, outcome.result) == ("stopped", "checking")
    check_invariants(log)


async def test_a_cancelled_sub_agent_leaves_its_partial_work_to_its_parent(
    tmp_path: Path,
) -> None:
    scenario = _slow_child("sleep 30")
    scenario["agents"]["sleeper"]["turns"] = [
        {"text": "Listing first.", "tool_calls": [{"name": "bash", "input": {"command": "ls"}}]},
        {"text": "Now the slow part.",
         "tool_calls": [{"name": "bash", "input": {"command": "sleep 30"}}]},
        {"text": "never"},
    ]  # fmt: skip

    def slow_started(events: list[Event]) -> bool:
        return any(isinstance(e, ToolStarted) and e.input.get("command") == "sleep 30"
                   for e in events)  # fmt: skip

    for target in ("agent-2", "call"):

        async def cancel(rt: Any, log: EventLog, target: str = target) -> None:
            await log.wait_for(slow_started)
            if target == "call":
                [call] = [e for e in log if isinstance(e, ToolStarted) and e.name == "agent"]
                assert isinstance(call, ToolStarted)
                target = call.tool_use_id
            assert await rt.cancel(target, "taking too long")

        outcome, log = await _run_and(tmp_path, scenario, cancel)
        assert outcome.status == "completed"
        call = _tool_end(log, "agent")
        assert call.status == "cancelled"
        assert call.output == (
            "cancelled: taking too long\n"
            "Its partial work:\n"
            "Its last text: Now the slow part.\n"
            "Tool calls it finished (1):\n"
            "- bash: ls (ok)"
        ), target
        check_invariants(log)
