"""Sub-agent trees: the agent tool, fan-out, scoped cancellation, containment, limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
import pytest
import trio
import trio.testing

from runtime import (
    AgentFinished,
    AgentStarted,
    AgentType,
    CancelRequested,
    Limits,
    ToolFinished,
    ToolResultBlock,
    ToolStarted,
    open_runtime,
)
from tests.harness import agent_call, run_scenario, turns
from tests.invariants import by_type, check_invariants


def _results(outcome: Any, turn_index: int = 2) -> list[ToolResultBlock]:
    return [b for b in outcome.state.messages[turn_index].content
            if isinstance(b, ToolResultBlock)]


async def test_parallel_sub_agents_return_their_text_in_call_order(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    scenario = {"agents": {
        "main": {"turns": [
            {"text": "Splitting.", "tool_calls": [
                agent_call("slow", "slow"), agent_call("fast", "fast"), agent_call("mid", "mid")]},
            {"text": "All done."}]},
        "slow": {"turns": [{"text": "slow result", "delay_s": 3}]},
        "fast": {"turns": [{"text": "fast result", "delay_s": 1}]},
        "mid": {"turns": [{"text": "mid result", "delay_s": 2}]}}}
    outcome, events = await run_scenario(scenario, workspace)
    check_invariants(events)
    assert [r.content for r in _results(outcome)] == ["slow result", "fast result", "mid result"]
    assert trio.current_time() == pytest.approx(3.0), "the three ran at the same time"
    finished = [e.agent_id for e in by_type(events, AgentFinished)]
    started = {e.agent_id: e for e in by_type(events, AgentStarted)}
    assert [started[a].name for a in finished[:3]] == ["fast", "mid", "slow"]


async def test_every_event_of_a_sub_agent_carries_its_agent_call_id(workspace: Path) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("one", "child")]}, {"text": "ok"}]},
        "child": {"turns": [
            {"text": "working on it", "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]},
            {"tool_calls": [agent_call("deeper", "leaf")]},
            {"text": "child done"}]},
        "leaf": turns("leaf done")}}
    outcome, events = await run_scenario(scenario, workspace)
    check_invariants(events)
    calls = {e.tool_use_id: e for e in by_type(events, ToolStarted)}  # type: ignore[attr-defined]
    agents = {e.agent_id: e for e in by_type(events, AgentStarted)}
    for event in events:
        if event.agent_id is None:
            continue
        started = agents[event.agent_id]
        assert event.parent_tool_use_id == started.parent_tool_use_id
        if started.parent_tool_use_id is not None:
            assert calls[started.parent_tool_use_id].name == "agent"
    depths = sorted((a.depth, a.name) for a in agents.values())  # type: ignore[attr-defined]
    assert depths == [(0, "main"), (1, "child"), (2, "leaf")]
    assert outcome.result == "ok"


async def test_an_unknown_agent_type_is_an_error_naming_the_known_ones(workspace: Path) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("x", "wizard")]}, {"text": "ok"}]}}}
    outcome, events = await run_scenario(scenario, workspace)
    check_invariants(events)
    [result] = _results(outcome)
    assert result.is_error
    assert "unknown agent type 'wizard'" in result.content
    assert "general" in result.content
    assert len(by_type(events, AgentStarted)) == 1, "nothing was started"


async def test_an_agent_type_only_gets_its_own_tools_and_system_prompt(workspace: Path) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("x", "reader")]}, {"text": "ok"}]},
        "reader": {"system": "You only read.", "tools": ["read"], "turns": [
            {"tool_calls": [{"name": "bash", "input": {"command": "echo hi"}}]},
            {"text": "could not"}]}}}
    seen: list[Any] = []

    async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                            permission_mode="allow-all") as rt:
        provider = rt._run.provider
        original = provider.stream

        def spy(request: Any) -> Any:
            seen.append(request)
            return original(request)

        provider.stream = spy  # type: ignore[method-assign]
        outcome = await rt.run("go")
    reader_requests = [r for r in seen if r.agent_type == "reader"]
    assert reader_requests[0].system == "You only read."
    assert [t.name for t in reader_requests[0].tools] == ["read"]
    bash_result = next(b for b in reader_requests[1].messages[-1].content
                       if isinstance(b, ToolResultBlock))
    assert "unknown tool 'bash'" in bash_result.content
    assert outcome.status == "completed"


async def test_agent_types_from_the_python_api_refine_scenario_ones(workspace: Path) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("x", "helper")]}, {"text": "ok"}]},
        "helper": {"turns": [{"tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]}] * 5}}}
    outcome, events = await run_scenario(
        scenario, workspace, agent_types=[AgentType(name="helper", max_turns=2)])
    check_invariants(events)
    [result] = _results(outcome)
    assert "stopped after 2 turns (max_turns)" in result.content


async def test_max_depth_refuses_a_deeper_agent_and_starts_nothing(workspace: Path) -> None:
    recurse = {"turns": [{"tool_calls": [agent_call("deeper", "deep")]}, {"text": "up"}]}
    scenario = {"agents": {"main": recurse, "deep": recurse}}
    outcome, events = await run_scenario(scenario, workspace, limits=Limits(max_depth=2))
    check_invariants(events)
    depths = [e.depth for e in by_type(events, AgentStarted)]  # type: ignore[attr-defined]
    assert depths == [0, 1, 2]
    refused = [e for e in by_type(events, ToolFinished) if "max depth 2" in e.output]  # type: ignore[attr-defined]
    assert len(refused) == 1
    assert refused[0].status == "error"
    assert outcome.status == "completed"


async def test_a_thousand_parallel_sub_agents_complete(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call(f"n{i}", "w") for i in range(1000)]},
                           {"text": "all done"}]},
        "w": {"turns": [{"text": "ok", "delay_s": 1}]}}}
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                            limits=Limits(max_parallel=1000)) as rt:
        outcome = await rt.run("go")
        assert rt.peak_running_agents == 1001
    assert outcome.status == "completed"
    assert all(r.content == "ok" for r in _results(outcome))
    assert trio.current_time() == pytest.approx(1.0)


async def test_max_parallel_caps_running_sub_agents_and_the_rest_wait_visibly(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call(f"n{i}", "w") for i in range(1000)]},
                           {"text": "all done"}]},
        "w": {"turns": [{"text": "ok", "delay_s": 1}]}}}
    running = 0
    peak = 0
    started_calls = 0
    waiting_seen = 0

    def watch(event: Any) -> None:
        nonlocal running, peak, started_calls, waiting_seen
        if isinstance(event, ToolStarted):
            started_calls += 1
        elif isinstance(event, AgentStarted) and event.depth == 1:
            running += 1
            peak = max(peak, running)
            waiting_seen = max(waiting_seen, started_calls - running)
        elif isinstance(event, AgentFinished) and event.parent_tool_use_id is not None:
            running -= 1

    outcome, events = await run_scenario(scenario, workspace, limits=Limits(max_parallel=10),
                                         on_event=watch)
    check_invariants(events)
    assert outcome.status == "completed"
    assert peak == 10
    assert waiting_seen >= 900, "calls waiting for a slot already showed their tool_started"
    assert trio.current_time() == pytest.approx(100.0)


def _group_alive(pgid: int) -> list[psutil.Process]:
    alive = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and __import__("os").getpgid(proc.pid) == pgid:
                alive.append(proc)
        except (psutil.Error, ProcessLookupError):
            continue
    return alive


async def test_cancelling_one_of_three_sub_agents_mid_bash_leaves_its_siblings_running(
    workspace: Path,
) -> None:
    scenario = {"agents": {
        "main": {"turns": [
            {"tool_calls": [agent_call("a", "quick"), agent_call("slow one", "sleeper"),
                            agent_call("b", "quick")]},
            {"text": "carried on"}]},
        "sleeper": {"turns": [
            {"tool_calls": [{"name": "bash",
                             "input": {"command": "echo $$ > pid.txt; sleep 300 & sleep 300"}}]},
            {"text": "slept"}]},
        "quick": {"turns": [{"text": "quick done", "delay_s": 0.3}]}}}
    events: list[Any] = []
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                            permission_mode="allow-all", on_event=events.append) as rt:
        handle = await rt.start("go")
        with trio.fail_after(10):
            # The bash process writes this file: there is no event to wait on.
            while not (workspace / "pid.txt").exists() or not (workspace / "pid.txt").read_text():  # noqa: ASYNC110
                await trio.sleep(0.02)
        pgid = int((workspace / "pid.txt").read_text())
        assert _group_alive(pgid), "the bash process group is running"
        slow_call = next(e for e in by_type(events, ToolStarted)
                         if e.input.get("agent") == "sleeper")  # type: ignore[attr-defined]
        assert await rt.cancel(slow_call.tool_use_id, "taking too long")  # type: ignore[attr-defined]
        outcome = await handle.wait()
    check_invariants(events)
    assert not _group_alive(pgid), "no process of the cancelled bash call is left"
    results = _results(outcome)
    assert [(r.content, r.is_error) for r in results] == [
        ("quick done", False), ("cancelled: taking too long", True), ("quick done", False)]
    assert outcome.result == "carried on"
    [request] = by_type(events, CancelRequested)
    assert (request.target, request.by, request.agent_id) == (  # type: ignore[attr-defined]
        slow_call.tool_use_id, "user", outcome.agent_id)  # type: ignore[attr-defined]
    statuses = {e.agent_id: e.status for e in by_type(events, AgentFinished)}  # type: ignore[attr-defined]
    assert sorted(statuses.values()) == ["cancelled", "completed", "completed", "completed"]


async def test_cancelling_a_sub_agent_by_its_agent_id_cancels_its_call(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("x", "mid")]}, {"text": "fine"}]},
        "mid": {"turns": [{"tool_calls": [agent_call("y", "leaf")]}, {"text": "mid done"}]},
        "leaf": {"turns": [{"text": "leaf", "delay_s": 100}]}}}
    events: list[Any] = []
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                            on_event=events.append) as rt:
        handle = await rt.start("go")
        await trio.sleep(1)
        mid = next(e for e in by_type(events, AgentStarted) if e.name == "mid")  # type: ignore[attr-defined]
        assert await rt.cancel(mid.agent_id, "not needed")  # type: ignore[arg-type]
        outcome = await handle.wait()
        assert not await rt.cancel(mid.agent_id, "again"), "a finished node cannot be cancelled"  # type: ignore[arg-type]
        assert not await rt.cancel("no-such-node", "x")
    check_invariants(events)
    statuses = {e.agent_id: e.status for e in by_type(events, AgentFinished)}  # type: ignore[attr-defined]
    names = {e.agent_id: e.name for e in by_type(events, AgentStarted)}  # type: ignore[attr-defined]
    assert {names[a]: s for a, s in statuses.items()} == {
        "leaf": "cancelled", "mid": "cancelled", "main": "completed"}
    assert _results(outcome)[0].content == "cancelled: not needed"
    assert trio.current_time() < 2


async def test_a_failing_sub_agent_is_an_error_result_and_its_siblings_finish(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("bad", "broken"), agent_call("good", "ok")]},
                           {"text": "handled"}]},
        "broken": {"turns": [{"text": "partial", "error": "upstream 503"}]},
        "ok": {"turns": [{"text": "fine", "delay_s": 2}]}}}
    outcome, events = await run_scenario(scenario, workspace)
    check_invariants(events)
    results = _results(outcome)
    assert results[0].is_error
    assert "sub-agent broken failed: upstream 503" in results[0].content
    assert (results[1].content, results[1].is_error) == ("fine", False)
    assert outcome.result == "handled"


async def test_cancelling_the_root_aborts_the_whole_tree(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("a", "deep"), agent_call("b", "deep")]},
                           {"text": "never"}]},
        "deep": {"turns": [{"tool_calls": [agent_call("c", "leaf")]}, {"text": "never"}]},
        "leaf": {"turns": [{"text": "leaf", "delay_s": 100}]}}}
    events: list[Any] = []
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                            on_event=events.append) as rt:
        handle = await rt.start("go")
        await trio.sleep(1)
        await rt.abort("user pressed q")
        outcome = await handle.wait()
    check_invariants(events)
    assert outcome.status == "cancelled"
    assert {e.status for e in by_type(events, AgentFinished)} == {"cancelled"}  # type: ignore[attr-defined]
    assert {e.status for e in by_type(events, ToolFinished)} == {"cancelled"}  # type: ignore[attr-defined]
    assert len(by_type(events, AgentFinished)) == 5
    assert events[-1].status == "cancelled"  # type: ignore[attr-defined]


async def test_leaving_the_runtime_block_by_cancellation_still_closes_every_node(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("a", "leaf")]}, {"text": "never"}]},
        "leaf": {"turns": [{"text": "leaf", "delay_s": 100}]}}}
    events: list[Any] = []
    with trio.move_on_after(5):
        async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                                on_event=events.append) as rt:
            await rt.run("go")
    check_invariants(events)
    assert events[-1].status == "cancelled"  # type: ignore[attr-defined]


@pytest.mark.parametrize(("max_parallel", "fanout"), [(1, 1), (2, 2), (16, 16), (3, 10)])
async def test_sub_agents_waiting_for_their_own_sub_agents_never_deadlock(
    workspace: Path, autojump_clock: trio.testing.MockClock, max_parallel: int, fanout: int
) -> None:
    # An agent waiting for its children lends them its slot; holding it would let waiting
    # parents take every slot and the run would hang.
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call(f"m{i}", "mid") for i in range(fanout)]},
                           {"text": "done"}]},
        "mid": {"turns": [{"tool_calls": [agent_call("leaf", "leaf")]},
                          {"text": "mid done", "delay_s": 1}]},
        "leaf": {"turns": [{"text": "leaf done", "delay_s": 1}]}}}
    events: list[Any] = []
    peak = 0
    with trio.move_on_after(3600) as deadline:
        async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                                limits=Limits(max_parallel=max_parallel),
                                on_event=events.append) as rt:

            def count(_: Any) -> None:
                # Running = holding a slot; a mid waiting for its leaf has lent its slot.
                nonlocal peak
                peak = max(peak, rt._run.scheduler.slots_held)

            rt.add_tap(count)
            outcome = await rt.run("go")
    assert not deadline.cancelled_caught, "the run never finished"
    assert outcome.status == "completed"
    check_invariants(events)
    assert peak == min(max_parallel, fanout)


async def test_max_agents_caps_the_sub_agents_started_in_a_run(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call(f"n{i}", "w") for i in range(10)]},
                           {"text": "done"}]},
        "w": {"turns": [{"text": "ok", "delay_s": 1}]}}}
    outcome, events = await run_scenario(
        scenario, workspace, limits=Limits(max_parallel=2, max_agents=5))
    check_invariants(events)
    assert len([e for e in by_type(events, AgentStarted) if e.depth == 1]) == 5  # type: ignore[attr-defined]
    refused = [r for r in _results(outcome) if "max agents 5" in r.content]
    assert len(refused) == 5


async def test_an_agent_not_yet_announced_cannot_be_cancelled_by_id(workspace: Path) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("w", "w")]}, {"text": "ok"}]},
        "w": turns("w done")}}
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                            limits=Limits(max_parallel=1)) as rt:
        # A blocking subscriber we stop reading holds the next emit back: agent-2 is then
        # registered (its actor runs) but its agent_started is not out.
        with rt.subscribe(buffer=1, policy="block") as events:
            handle = await rt.start("go")
            async for event in events:
                if event.type == "turn_finished":
                    break  # the agent call's tool_started fills the buffer; agent-2's start waits
            await trio.testing.wait_all_tasks_blocked()
            assert "agent-2" in rt._run.registry
            assert not rt._run.scheduler.is_announced("agent-2")
            assert not await rt.cancel("agent-2", "too early")
        outcome = await handle.wait()
    assert outcome.status == "completed"
