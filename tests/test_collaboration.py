"""Agents that work together (docs/collaboration.md): a graceful stop beside cancel, the
partial work a stopped or cancelled sub-agent leaves its parent, background sub-agents,
messages between agents, and the tree's invariants with all of them mixed in (hypothesis)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import (
    AgentFinished,
    AgentMessage,
    AgentStarted,
    CancelRequested,
    Event,
    Limits,
    StopRequested,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TraceTree,
    TurnFinished,
    UserMessage,
    open_runtime,
    tool,
)
from runtime.core._context import stop_node
from tests.harness import EventLog, agent_call, run_scenario
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


def _main_and_talker(turns: list[dict[str, Any]]) -> dict[str, Any]:
    """A root that starts one ``talker`` sub-agent (with ``glob``) playing *turns*."""
    return {
        "agents": {
            "main": {"turns": [{"tool_calls": [agent_call("talker", agent="talker")]},
                               {"text": "ok"}]},
            "talker": {"tools": ["glob"], "turns": turns},
        }
    }  # fmt: skip


async def test_a_stop_cutting_a_later_turn_leaves_the_last_whole_turn_as_the_result(
    tmp_path: Path,
) -> None:
    # One cancel scope serves all of an agent's turns: a cut of its second reply ends it
    # with its first turn's text, and its first turn's tool call ran as ever.
    scenario = _main_and_talker([
        {"text": "looked around",
         "tool_calls": [{"name": "glob", "input": {"pattern": "*.none"}}]},
        {"text": "a long reply " * 50, "chunk_delay_s": 0.05},
    ])  # fmt: skip

    async def stop_in_second_reply(rt: Any, log: EventLog) -> None:
        def second_reply_streams(events: list[Event]) -> bool:
            mine = [e for e in events if e.agent_id == "agent-2"]
            first = next((i for i, e in enumerate(mine) if isinstance(e, TurnFinished)), None)
            return first is not None and any(isinstance(e, TextDelta) for e in mine[first:])

        await log.wait_for(second_reply_streams)
        assert await rt.stop("agent-2")

    with trio.fail_after(10):
        outcome, log = await _run_and(tmp_path, scenario, stop_in_second_reply)
    child = _finished(log, "agent-2")
    assert (child.status, child.turns, child.result) == ("stopped", 1, "looked around")
    assert _tool_end(log, "glob").status == "ok"
    assert outcome.status == "completed"
    check_invariants(log)


async def test_a_stop_cuts_the_reply_of_an_agent_that_may_start_sub_agents(
    tmp_path: Path,
) -> None:
    # An agent with the agent tool has a nursery for background children, which a cut must
    # not reach: its cut is a scope of its own, and it ends stopped with its last whole turn.
    scenario = {
        "agents": {
            "main": {"tools": ["agent", "glob"], "turns": [
                {"text": "first", "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]},
                {"text": "a long reply " * 50, "chunk_delay_s": 0.05},
            ]},
        }
    }  # fmt: skip

    async def stop_in_second_reply(rt: Any, log: EventLog) -> None:
        await log.wait_for(
            lambda ev: any(isinstance(e, TurnFinished) for e in ev)
            and isinstance(ev[-1], TextDelta)
        )
        assert await rt.stop("agent-1")

    with trio.fail_after(10):
        outcome, log = await _run_and(tmp_path, scenario, stop_in_second_reply)
    assert (outcome.status, outcome.turns, outcome.result) == ("stopped", 1, "first")
    check_invariants(log)


async def test_a_stop_as_the_reply_ends_keeps_the_turn_and_runs_none_of_its_calls(
    tmp_path: Path,
) -> None:
    # The stop is asked from inside the agent's own task (an on_event callback of its first
    # delta) and the short reply ends with no checkpoint left to cut it: the turn is whole
    # and reported, its tool call does not run, and the agent ends stopped with its text.
    scenario = _main_and_talker([
        {"text": "short", "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]},
        {"text": "never said"},
    ])  # fmt: skip
    log = EventLog()
    holder: list[Any] = []

    def stop_on_first_delta(event: Event) -> None:
        log(event)
        if isinstance(event, TextDelta) and event.agent_id == "agent-2" and len(holder) == 1:
            holder.append(stop_node(holder[0]._run, "agent-2", "stopped by test", by="user"))

    async with open_runtime(
        scenario=scenario, workspace=tmp_path, on_event=stop_on_first_delta, trace=False
    ) as rt:
        holder.append(rt)
        with trio.fail_after(10):
            outcome = await rt.run("go")
    assert holder[1:] == [True]
    child = _finished(log, "agent-2")
    assert (child.status, child.turns, child.result) == ("stopped", 1, "short")
    [turn] = [e for e in by_type(log, TurnFinished) if e.agent_id == "agent-2"]
    assert turn.tool_use_ids  # reported whole, with the call it asked for
    assert not [e for e in by_type(log, ToolStarted) if e.name == "glob"]
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


# -- background sub-agents ----------------------------------------------------------------


def _background(worker_turns: list[dict[str, Any]], main_turns: list[dict[str, Any]] | None = None
                ) -> dict[str, Any]:  # fmt: skip
    call = agent_call("side task", agent="worker", run_in_background=True)
    return {"agents": {
        "main": {"turns": main_turns or [
            {"text": "Starting it.", "tool_calls": [call]},
            {"text": "Meanwhile, my own part."},
            {"text": "Both parts are in."}]},
        "worker": {"tools": [], "turns": worker_turns},
    }}  # fmt: skip


def _started(events: list[Event], agent_id: str) -> AgentStarted:
    [start] = [e for e in by_type(events, AgentStarted) if e.agent_id == agent_id]
    assert isinstance(start, AgentStarted)
    return start


async def test_a_background_child_returns_at_once_and_reports_at_the_parents_next_step(
    tmp_path: Path, autojump_clock: Any
) -> None:
    scenario = _background([{"text": "side result", "delay_s": 5}])
    outcome, events = await run_scenario(scenario, tmp_path)
    assert (outcome.status, outcome.turns, outcome.result) == ("completed", 3, "Both parts are in.")
    call = _tool_end(events, "agent")
    assert (call.status, call.output) == ("ok", (
        "Started sub-agent agent-2 (side task) in the background. Its result comes to you as a "
        "message when it ends; go on with other work meanwhile, or end your turn to wait for it."
    ))  # fmt: skip
    assert _started(events, "agent-2").background
    assert not _started(events, "agent-1").background
    child_end = _finished(events, "agent-2")
    [report] = [e for e in by_type(events, UserMessage) if e.agent_id == "agent-1"]
    assert isinstance(report, UserMessage)
    assert report.text == "[background sub-agent agent-2 (side task) ended completed]\nside result"
    order = [events.index(e) for e in (call, child_end, report, _finished(events, "agent-1"))]
    assert order == sorted(order)  # the call returned first; the report came after the end
    # The parent's second turn came while the child still worked: it did not wait in the call.
    second_turn = [e for e in by_type(events, TurnFinished) if e.agent_id == "agent-1"][1]
    assert events.index(second_turn) < events.index(child_end)
    check_invariants(events)


async def test_a_failed_background_child_reports_its_failure(
    tmp_path: Path, autojump_clock: Any
) -> None:
    scenario = _background([{"error": "the model is down", "delay_s": 1}])
    outcome, events = await run_scenario(scenario, tmp_path)
    assert outcome.status == "completed"
    [report] = [e for e in by_type(events, UserMessage) if e.agent_id == "agent-1"]
    assert isinstance(report, UserMessage)
    assert report.text.startswith(
        "[background sub-agent agent-2 (side task) ended failed]\nsub-agent worker failed: "
    )
    check_invariants(events)


async def test_cancelling_the_parent_takes_its_background_children_with_it(
    tmp_path: Path, autojump_clock: Any
) -> None:
    scenario = _background([{"text": "never", "delay_s": 300}])

    async def cancel_parent(rt: Any, log: EventLog) -> None:
        await log.wait_for(lambda ev: any(isinstance(e, AgentStarted) and e.agent_id == "agent-2"
                                          for e in ev))  # fmt: skip
        await trio.sleep(1)
        assert await rt.cancel("agent-1", "the user gave up")

    outcome, log = await _run_and(tmp_path, scenario, cancel_parent)
    assert outcome.status == "cancelled"
    child = _finished(log, "agent-2")
    assert (child.status, child.error) == ("cancelled", "cancelled: the user gave up")
    check_invariants(log)


async def test_a_parent_out_of_turns_cancels_its_background_children(
    tmp_path: Path, autojump_clock: Any
) -> None:
    call = agent_call("side task", agent="worker", run_in_background=True)
    scenario = _background([{"text": "never", "delay_s": 300}], [
        {"tool_calls": [call]},
        {"text": "one more step", "tool_calls": [agent_call("quick", agent="quick")]},
        {"text": "a turn past the limit"}])  # fmt: skip
    scenario["agents"]["quick"] = {"turns": [{"text": "quick"}]}
    outcome, events = await run_scenario(scenario, tmp_path, limits=Limits(max_turns=2))
    assert outcome.status == "max_turns"
    child = _finished(events, "agent-2")
    assert (child.status, child.error) == (
        "cancelled", "cancelled: its parent agent agent-1 ended (max_turns)",
    )  # fmt: skip
    check_invariants(events)


async def test_a_stop_of_the_parent_stops_its_background_children_too(tmp_path: Path) -> None:
    scenario = _background(
        [{"text": "side work", "tool_calls": [{"name": "bash", "input": {"command": "sleep 1"}}]},
         {"text": "never"}],
    )  # fmt: skip
    scenario["agents"]["worker"]["tools"] = ["bash"]

    async def stop_parent(rt: Any, log: EventLog) -> None:
        await log.wait_for(_bash_started)
        assert await rt.stop("agent-1")

    outcome, log = await _run_and(tmp_path, scenario, stop_parent)
    assert outcome.status == "stopped"
    assert _finished(log, "agent-2").status == "stopped"
    assert _tool_end(log, "bash").status == "ok"
    check_invariants(log)


async def test_a_waiting_parent_lends_its_slot_to_its_background_child(
    tmp_path: Path, autojump_clock: Any
) -> None:
    # max_parallel 1: the middle agent holds the only slot; its background child can run
    # only while the middle agent waits for its report.
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("middle", agent="middle")]},
                           {"text": "done"}]},
        "middle": {"turns": [
            {"tool_calls": [agent_call("leaf", agent="leaf", run_in_background=True)]},
            {"text": "waiting for the leaf"},
            {"text": "middle done"}]},
        "leaf": {"tools": [], "turns": [{"text": "leaf done", "delay_s": 2}]},
    }}  # fmt: skip
    with trio.fail_after(60):
        outcome, events = await run_scenario(scenario, tmp_path, limits=Limits(max_parallel=1))
    assert outcome.status == "completed"
    assert _finished(events, "agent-3").status == "completed"
    [middle_call] = [e for e in by_type(events, ToolFinished) if e.agent_id == "agent-1"]
    assert isinstance(middle_call, ToolFinished)
    assert middle_call.output == "middle done"
    check_invariants(events)


async def test_run_in_background_on_another_tool_or_of_a_bad_type_is_one_error(
    tmp_path: Path,
) -> None:
    scenario = {"agents": {"main": {"tools": ["bash", "agent"], "turns": [
        {"tool_calls": [
            {"name": "bash", "input": {"command": "true", "run_in_background": True}},
            agent_call("x", agent="general", run_in_background="yes")]},
        {"text": "ok"}]}}}  # fmt: skip
    outcome, events = await run_scenario(scenario, tmp_path)
    assert outcome.status == "completed"
    ends = {e.name: (e.status, e.output) for e in by_type(events, ToolFinished)}  # type: ignore[attr-defined]
    assert ends["bash"] == ("error", (
        "invalid input for bash: run_in_background: only the agent tool runs in the background"
    ))  # fmt: skip
    assert ends["agent"][0] == "error"
    assert "run_in_background" in ends["agent"][1]
    assert len(by_type(events, AgentStarted)) == 1
    check_invariants(events)


async def test_the_tree_lists_a_running_background_child_for_the_picker_by_its_agent_id(
    tmp_path: Path, autojump_clock: Any
) -> None:
    scenario = _background([{"text": "side result", "delay_s": 5}])
    _, events = await run_scenario(scenario, tmp_path)
    call = _tool_end(events, "agent")
    child_end = _finished(events, "agent-2")
    while_running = TraceTree.from_events(events[: events.index(child_end)], live=True)
    [sub] = while_running.running_subtrees()
    assert (sub.tool_use_id, sub.agent_id, sub.background, sub.target) == (
        call.tool_use_id, "agent-2", True, "agent-2",
    )  # fmt: skip
    assert while_running.tools[call.tool_use_id].summary == (
        "agent: worker: side task (background)"
    )
    assert TraceTree.from_events(events).running_subtrees() == []


# -- messages between agents -----------------------------------------------------------------


def _say(to: str, text: str) -> dict[str, Any]:
    return {"name": "send_message", "input": {"to": to, "text": text}}


def _results(events: list[Event], agent_id: str, name: str = "send_message") -> list[str]:
    """The results of *agent_id*'s *name* calls, in call order (parallel ones end in any)."""
    ends = {e.tool_use_id: f"{e.status}: {e.output}" for e in by_type(events, ToolFinished)
            if e.agent_id == agent_id and e.name == name}  # type: ignore[attr-defined]  # fmt: skip
    starts = [e.tool_use_id for e in by_type(events, ToolStarted) if e.tool_use_id in ends]  # type: ignore[attr-defined]
    return [ends[i] for i in starts]


def _heard(events: list[Event], agent_id: str) -> list[str]:
    return [e.text for e in by_type(events, UserMessage) if e.agent_id == agent_id]  # type: ignore[attr-defined]


async def test_siblings_and_a_parent_get_messages_at_their_next_step(
    tmp_path: Path, autojump_clock: Any
) -> None:
    scenario = {"agents": {
        "main": {"turns": [
            {"tool_calls": [agent_call("alpha", agent="alpha", run_in_background=True),
                            agent_call("beta", agent="beta", run_in_background=True)]},
            {"text": "waiting for them"},
            {"text": "heard one"}, {"text": "heard two"}, {"text": "heard three"}]},
        "alpha": {"tools": ["send_message"], "turns": [
            {"tool_calls": [_say("agent-3", "hello beta")]}, {"text": "alpha done"}]},
        "beta": {"tools": ["send_message"], "turns": [
            {"delay_s": 1, "tool_calls": [_say("parent", "beta here")]},
            {"text": "beta done", "delay_s": 1}]},
    }}  # fmt: skip
    outcome, events = await run_scenario(scenario, tmp_path)
    assert outcome.status == "completed"
    sent = [(e.agent_id, e.from_agent_id, e.to_agent_id, e.text)
            for e in by_type(events, AgentMessage)]  # type: ignore[attr-defined]  # fmt: skip
    assert sent == [("agent-2", "agent-2", "agent-3", "hello beta"),
                    ("agent-3", "agent-3", "agent-1", "beta here")]  # fmt: skip
    assert _results(events, "agent-2") == [
        "ok: Delivered to agent-3 (beta); it reads it at its next step."]
    assert _heard(events, "agent-3") == ["[message from agent-2 (alpha)]\nhello beta"]
    assert "[message from agent-3 (beta)]\nbeta here" in _heard(events, "agent-1")
    # Read at beta's next step: after its first turn, before its second.
    beta_turns = [events.index(e) for e in by_type(events, TurnFinished) if e.agent_id == "agent-3"]
    [delivered] = [events.index(e) for e in by_type(events, UserMessage) if e.agent_id == "agent-3"]
    assert beta_turns[0] < delivered < beta_turns[1]
    check_invariants(events)


async def test_messages_to_nobody_it_may_reach_are_one_error_each(
    tmp_path: Path, autojump_clock: Any
) -> None:
    scenario = {"agents": {
        "main": {"tools": ["agent", "send_message"], "turns": [
            {"tool_calls": [agent_call("quick", agent="quick")]},
            {"tool_calls": [_say("agent-99", "x"), _say("agent-1", "x"), _say("parent", "x"),
                            _say("quick", "x"), _say("agent-2", "y" * 8001),
                            {"name": "send_message", "input": {"to": "agent-2"}}]},
            {"text": "done"}]},
        "quick": {"tools": ["agent", "send_message"], "turns": [
            {"tool_calls": [agent_call("leaf", agent="leaf")]}, {"text": "quick done"}]},
        "leaf": {"tools": ["send_message"], "turns": [
            {"tool_calls": [_say("agent-1", "hi grandparent"), _say("parent", "hi")]},
            {"text": "leaf done"}]},
    }}  # fmt: skip
    outcome, events = await run_scenario(scenario, tmp_path)
    assert outcome.status == "completed"
    assert _results(events, "agent-3") == [
        "error: agent-1 is not your parent, child or sibling; you can message: parent "
        "(agent-2 (quick))",
        "ok: Delivered to agent-2 (quick); it reads it at its next step.",
    ]
    assert _results(events, "agent-1") == [
        "error: no agent 'agent-99' here; you can message nobody now (no parent, child or "
        "sibling is running)",
        "error: that is your own id: a message to yourself is refused",
        "error: you have no parent agent: you are the root of this run",
        "error: agent-2 (quick) has finished (completed); it reads no more messages",
        "error: message of 8001 characters: at most 8000; send a shorter one (or write the "
        "rest to a file and name it)",
        "error: invalid input for send_message: input.text: required field missing",
    ]
    assert [e.to_agent_id for e in by_type(events, AgentMessage)] == ["agent-2"]  # type: ignore[attr-defined]
    check_invariants(events)


async def test_a_full_mailbox_refuses_with_a_clear_result(
    tmp_path: Path, autojump_clock: Any
) -> None:
    scenario = {"agents": {
        "main": {"turns": [
            {"tool_calls": [agent_call("busy", agent="busy", run_in_background=True),
                            agent_call("chatty", agent="chatty", run_in_background=True)]},
            {"text": "waiting"}, {"text": "one"}, {"text": "two"}, {"text": "three"}]},
        "busy": {"tools": [], "turns": [{"text": "busy done", "delay_s": 5}, {"text": "read"}]},
        "chatty": {"tools": ["send_message"], "turns": [
            {"tool_calls": [_say("agent-2", "first"), _say("agent-2", "second")]},
            {"text": "chatty done"}]},
    }}  # fmt: skip
    outcome, events = await run_scenario(scenario, tmp_path, limits=Limits(mailbox_size=1))
    assert outcome.status == "completed"
    # The two calls run in parallel: whichever comes second finds the mailbox full.
    assert sorted(_results(events, "agent-3")) == [
        "error: the mailbox of agent-2 (busy) is full (1 messages wait); try again later",
        "ok: Delivered to agent-2 (busy); it reads it at its next step.",
    ]
    check_invariants(events)


# -- the tree's invariants with background children and stops mixed in ------------------------


@tool
async def nap(seconds: float) -> str:
    """Sleep a while (virtual time in the tests).

    Args:
        seconds: how long.
    """
    await trio.sleep(seconds)
    return f"napped {seconds:g} s"


@st.composite
def _trees(draw: Any) -> dict[str, Any]:
    """A random scenario: nodes with 0-3 children each (depth at most 3), each child started in
    the background or not, each leaf napping in a tool call."""
    agents: dict[str, Any] = {}
    counter = [0]

    def node(name: str, depth: int) -> None:
        kids = draw(st.integers(0, 3 if depth < 3 else 0))
        if kids == 0:
            seconds = draw(st.sampled_from([1, 5, 20]))
            agents[name] = {"tools": ["nap"], "turns": [
                {"text": f"{name} naps", "tool_calls": [{"name": "nap", "input": {"seconds": seconds}}]},
                {"text": f"{name} done"}]}  # fmt: skip
            return
        calls = []
        for _ in range(kids):
            counter[0] += 1
            child = f"n{counter[0]}"
            node(child, depth + 1)
            calls.append(agent_call(child, agent=child, run_in_background=draw(st.booleans())))
        # One turn to start them, then one per report at most.
        agents[name] = {"tools": ["agent"], "turns": [
            {"text": f"{name} splits", "tool_calls": calls},
            *({"text": f"{name} step {i}"} for i in range(kids + 1))]}  # fmt: skip

    node("main", 0)
    return {"agents": agents}


_ACTIONS = st.lists(
    st.tuples(st.sampled_from(["stop", "cancel"]), st.integers(0, 50), st.floats(0, 25)),
    max_size=5,
)


def _under(events: list[Event], agent_id: str, kind: type[Event], before: int) -> bool:
    """Whether a *kind* event (stop or cancel) targets *agent_id*, its call, or an ancestor of
    either, before index *before*."""
    parent_of: dict[str, str | None] = {}
    call_of: dict[str, str | None] = {}
    for e in by_type(events, AgentStarted):
        parent_of[e.agent_id] = e.parent_agent_id  # type: ignore[index, attr-defined]
        call_of[e.agent_id] = e.parent_tool_use_id  # type: ignore[index]
    targets = {e.target for e in events[:before] if isinstance(e, kind)}  # type: ignore[attr-defined]
    cur: str | None = agent_id
    while cur is not None:
        if cur in targets or call_of.get(cur) in targets:
            return True
        cur = parent_of.get(cur)
    return False


def _cancelled_below(events: list[Event], tool_use_id: str) -> bool:
    """Whether a cancel targeted the call *tool_use_id* or the sub-agent it started."""
    children = {e.agent_id for e in by_type(events, AgentStarted)
                if e.parent_tool_use_id == tool_use_id}  # fmt: skip
    return any(e.target == tool_use_id or e.target in children  # type: ignore[attr-defined]
               for e in by_type(events, CancelRequested))  # fmt: skip


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=_trees(), actions=_ACTIONS)
def test_tree_invariants_hold_with_background_children_and_stops(
    scenario: dict[str, Any], actions: list[tuple[str, int, float]], tmp_path_factory: Any
) -> None:
    workspace = tmp_path_factory.mktemp("ws")
    events: list[Event] = []

    async def main() -> None:
        async with open_runtime(
            scenario=scenario, workspace=workspace, trace=False, on_event=events.append,
            extra_tools=[nap], permission_mode="allow-all",
        ) as rt:  # fmt: skip
            handle = await rt.start("go")
            for what, pick, at in sorted(actions, key=lambda a: a[2]):
                await trio.sleep_until(at)
                live = [e.agent_id for e in by_type(events, AgentStarted)
                        if e.agent_id not in {f.agent_id for f in by_type(events, AgentFinished)}]  # fmt: skip
                if not live or handle.done:
                    break
                target = live[pick % len(live)]
                assert target is not None
                await (rt.stop if what == "stop" else rt.cancel)(target)
            await handle.wait()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    check_invariants(events)
    for end in by_type(events, AgentFinished):
        assert isinstance(end, AgentFinished)
        at = events.index(end)
        assert end.agent_id is not None
        if end.status == "stopped":
            assert _under(events, end.agent_id, StopRequested, at), end
            stop = next(i for i in range(at) if _under(events, end.agent_id, StopRequested, i + 1))
            after = [e for e in events[stop:at] if e.agent_id == end.agent_id]
            # No call starts after the stop, none is cancelled, and no turn beyond the one
            # that may have ended at that very moment.
            assert not any(isinstance(e, ToolStarted) for e in after), end
            assert all(e.status == "ok" or _cancelled_below(events, e.tool_use_id)
                       for e in after if isinstance(e, ToolFinished)), end  # fmt: skip
            assert sum(isinstance(e, TurnFinished) for e in after) <= 1, end
        elif end.status == "cancelled":
            assert _under(events, end.agent_id, CancelRequested, at), end
        else:
            assert end.status == "completed", end


async def test_a_background_child_over_a_loopback_openai_server(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    await background_child_over_http(nursery, tmp_path)


async def background_child_over_http(nursery: trio.Nursery, tmp_path: Path, **kwargs: Any) -> Any:
    """A parent and its background child on a loopback OpenAI server: the parent's second
    request goes out before the child answers, its third carries the report. *kwargs* go to
    ``open_runtime`` (tests/test_ray.py places the child on Ray); returns the runtime, ended."""
    from tests.llm_server import (
        OPENAI_DONE,
        LLMServer,
        Piece,
        RecordedRequest,
        Reply,
        openai_chunk,
        openai_text_stream,
    )

    server = LLMServer()
    await nursery.start(server.serve)
    call = {"description": "slow lookup", "prompt": "SLOW lookup", "run_in_background": True}

    def route(request: RecordedRequest) -> Reply:
        messages = request.json["messages"]
        first_user = str(next(m["content"] for m in messages if m["role"] == "user"))
        if "SLOW" in first_user:  # the child: its answer takes a while
            late = [Piece(e, delay_s=0.3 if i == 1 else 0.0)
                    for i, e in enumerate(openai_text_stream(["found ", "it"]))]  # fmt: skip
            return Reply.stream(late)
        if "[background sub-agent" in orjson.dumps(messages).decode():
            return Reply.stream(openai_text_stream(["The lookup came back."]))
        if any(m["role"] == "tool" for m in messages):
            return Reply.stream(openai_text_stream(["Waiting for the lookup."]))
        calls = [{"index": 0, "id": "call_0", "type": "function",
                  "function": {"name": "agent", "arguments": orjson.dumps(call).decode()}}]
        return Reply.stream([openai_chunk({"role": "assistant", "content": ""}),
                             openai_chunk({"tool_calls": calls}),
                             openai_chunk({}, finish="tool_calls"), OPENAI_DONE])  # fmt: skip

    server.route = route
    env = {"OPENAI_API_KEY": "sk-test-0123456789", "OPENAI_BASE_URL": server.url + "/v1",
           "PATH": "/usr/bin:/bin"}  # fmt: skip
    events: list[Event] = []
    with trio.fail_after(20):
        async with open_runtime("openai", model="m", env=env, workspace=tmp_path, trace=False,
                                on_event=events.append, **kwargs) as rt:  # fmt: skip
            outcome = await rt.run("go")
    assert (outcome.status, outcome.result, outcome.turns) == (
        "completed", "The lookup came back.", 3,
    )  # fmt: skip
    assert _started(events, "agent-2").background
    [report] = [e for e in by_type(events, UserMessage) if e.agent_id == "agent-1"]
    assert isinstance(report, UserMessage)
    assert report.text == "[background sub-agent agent-2 (slow lookup) ended completed]\nfound it"
    # The parent's second request went out before the child answered; its third carries it.
    assert len(server.requests) == 4
    assert "[background sub-agent agent-2" in server.requests[-1].body.decode()
    check_invariants(events)
    return rt


async def test_a_background_sub_agent_past_the_depth_limit_is_one_error(tmp_path: Path) -> None:
    scenario = _background([{"tool_calls": [agent_call("deeper", agent="worker",
                                                        run_in_background=True)]},
                            {"text": "no deeper"}])  # fmt: skip
    scenario["agents"]["worker"]["tools"] = ["agent"]
    outcome, events = await run_scenario(scenario, tmp_path, limits=Limits(max_depth=1))
    assert outcome.status == "completed"
    [deep] = [e for e in by_type(events, ToolFinished) if e.agent_id == "agent-2"]
    assert isinstance(deep, ToolFinished)
    assert (deep.status, deep.output) == (
        "error", "max depth 1 reached: a sub-agent here would be at depth 2; do this work yourself",
    )  # fmt: skip
    check_invariants(events)
