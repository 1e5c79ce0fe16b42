"""The public runtime: trace files, subscribers, permissions, secrets, configuration errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from runtime import (
    AgentFinished,
    AgentsError,
    AgentStarted,
    AgentType,
    ConfigError,
    Event,
    PermissionRequested,
    PermissionResolved,
    RunFinished,
    RunStarted,
    ScenarioError,
    SubscriberLagged,
    ToolFinished,
    decode_event,
    open_runtime,
)
from tests.harness import EventLog, agent_call, run_scenario, turns
from tests.invariants import by_type, check_invariants

_SIMPLE = {"agents": {"main": turns("hello")}}


def _read_trace(path: Path) -> list[Event]:
    return [decode_event(line) for line in path.read_bytes().splitlines()]


async def test_every_run_writes_a_complete_jsonl_trace(workspace: Path, tmp_path: Path) -> None:
    trace = tmp_path / "t" / "run.jsonl"
    live: list[Event] = []
    async with open_runtime(scenario=_SIMPLE, workspace=workspace, trace=trace,
                            on_event=live.append) as rt:
        assert rt.trace_path == trace
        await rt.run("go")
    written = _read_trace(trace)
    assert written == live
    check_invariants(written)
    assert isinstance(written[0], RunStarted)
    assert isinstance(written[-1], RunFinished)


async def test_the_default_trace_goes_under_dot_trio_agents(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    async with open_runtime(scenario=_SIMPLE, workspace=workspace) as rt:
        await rt.run("go")
    assert rt.trace_path is not None
    assert rt.trace_path.parent == Path(".trio-agents/traces")
    assert rt.trace_path.name == f"{rt.run_id}.jsonl"
    check_invariants(_read_trace(tmp_path / rt.trace_path))


async def test_a_cancelled_run_still_ends_its_trace(
    workspace: Path, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    trace = tmp_path / "run.jsonl"
    scenario = {"agents": {"main": {"turns": [{"text": "slow", "delay_s": 100}]}}}
    with trio.move_on_after(1):
        async with open_runtime(scenario=scenario, workspace=workspace, trace=trace) as rt:
            await rt.run("go")
    written = _read_trace(trace)
    check_invariants(written)
    assert written[-1].status == "cancelled"  # type: ignore[attr-defined]


async def test_a_cancelled_caller_of_run_cancels_its_agent_by_runtime_first(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    events: list[Event] = []
    scenario = {"agents": {"main": {"turns": [{"text": "slow", "delay_s": 100}]}}}
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                            on_event=events.append) as rt:
        with trio.move_on_after(1) as scope:
            await rt.run("go")
    assert scope.cancelled_caught
    check_invariants(events)
    kinds = [e.type for e in events]
    assert kinds == ["run_started", "agent_started", "cancel_requested", "agent_finished",
                     "run_finished"]
    request, end = events[2], events[3]
    assert (request.target, request.by, request.reason) == (  # type: ignore[attr-defined]
        "agent-1", "runtime", "the caller was cancelled")
    assert end.status == "cancelled"  # type: ignore[attr-defined]
    assert end.error == "cancelled: the caller was cancelled"  # type: ignore[attr-defined]


async def test_a_cancelled_caller_cancels_a_root_held_back_before_its_announcement(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # A block subscriber a full buffer behind holds the second root's agent_started back; its
    # caller gives up meanwhile. Once the reader catches up, that root is announced and then
    # cancelled by the runtime, at once, not left to run its course after the caller left.
    events: list[Event] = []
    scenario = {"agents": {"main": {"turns": [{"text": "slow", "delay_s": 100}]}}}
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                            on_event=events.append) as rt:
        with rt.subscribe(policy="block", buffer=1) as sub:
            first = await rt.start("fill the reader's buffer")

            async def read_later() -> None:
                await trio.sleep(2)
                async for _ in sub:
                    pass

            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_later)
                with trio.move_on_after(1) as scope:
                    await rt.run("held back")
                assert scope.cancelled_caught
                ended_at = trio.current_time()
                await first.cancel("the test is over")
                await first.wait()
                nursery.cancel_scope.cancel()
    check_invariants(events)
    assert ended_at < 10, "the caller waited for the held-back root to be cancelled"
    second = [e for e in events if e.agent_id == "agent-2"]
    kinds = [e.type for e in second]
    assert kinds == ["agent_started", "cancel_requested", "agent_finished"], kinds
    assert (second[1].by, second[1].reason) == (  # type: ignore[attr-defined]
        "runtime", "the caller was cancelled")
    assert second[2].status == "cancelled"  # type: ignore[attr-defined]


async def test_a_caller_of_run_cancelled_as_it_starts_leaves_no_agent_or_cancels_it_first(
    workspace: Path,
) -> None:
    # The cancel reaches the caller's wait right after the agent's task was spawned; whether
    # that task has begun by then is up to the scheduler (trio runs a batch in either order).
    # Either no agent starts (no event at all), or it starts and is cancelled by the runtime,
    # its cancel_requested before its end (or it finishes its one turn first: the cancel
    # itself is a checkpoint). Over enough tries, some leave no agent.
    events: list[Event] = []

    def history_that_cancels(scope: trio.CancelScope) -> Any:
        # Read after run()'s last cancellation check, before the agent's task is spawned.
        scope.cancel()
        yield from ()

    shapes = set()
    async with open_runtime(scenario=_SIMPLE, workspace=workspace, trace=False,
                            on_event=events.append) as rt:
        for _ in range(40):
            before = len(events)
            with trio.CancelScope() as scope:
                await rt.run("go", history=history_that_cancels(scope))
            assert scope.cancelled_caught
            await trio.testing.wait_all_tasks_blocked()
            kinds = tuple(e.type for e in events[before:])
            finished = ("agent_started", "text_delta", "turn_finished", "agent_finished")
            # (Or the cancel comes after its turn, at the schedule point of leaving the nursery
            # its background sub-agents would run in: docs/collaboration.md.)
            late = ("agent_started", "text_delta", "turn_finished", "cancel_requested",
                    "agent_finished")
            assert kinds in {(), ("agent_started", "cancel_requested", "agent_finished"),
                             finished, late}, kinds
            if kinds and kinds != finished:
                assert events[before + len(kinds) - 2].by == "runtime"  # type: ignore[attr-defined]
                assert events[before + len(kinds) - 1].status == "cancelled"  # type: ignore[attr-defined]
            shapes.add(kinds)
        assert () in shapes
        assert (await rt.run("again")).status == "completed"
    check_invariants(events)
    assert events[-1].status == "completed"  # type: ignore[attr-defined]


async def test_a_key_in_the_environment_never_reaches_a_tool_or_the_trace(
    workspace: Path, tmp_path: Path
) -> None:
    secret = "sk-test-1234567890abcdef"
    env = {"OPENAI_API_KEY": secret, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    (workspace / "leaked.txt").write_text(f"token={secret}\n")
    scenario = {"agents": {"main": {"turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": "echo key=$OPENAI_API_KEY; env"}}]},
        {"tool_calls": [{"name": "read", "input": {"path": "leaked.txt"}}]},
        {"text": "done"}]}}}
    trace = tmp_path / "run.jsonl"
    async with open_runtime(scenario=scenario, workspace=workspace, trace=trace, env=env,
                            permission_mode="allow-all") as rt:
        outcome = await rt.run("go")
    raw = trace.read_text()
    assert secret not in raw
    bash, read = by_type(_read_trace(trace), ToolFinished)
    assert "key=\n" in bash.output  # type: ignore[attr-defined]
    assert "OPENAI_API_KEY" not in bash.output  # type: ignore[attr-defined]
    assert "token=***" in read.output, "a secret read from a file is masked"  # type: ignore[attr-defined]
    assert outcome.status == "completed"


async def test_a_subscriber_that_stops_reading_never_blocks_the_run(
    workspace: Path, tmp_path: Path
) -> None:
    scenario = {"agents": {"main": turns(" ".join(["word"] * 500))}}
    trace = tmp_path / "run.jsonl"
    async with open_runtime(scenario=scenario, workspace=workspace, trace=trace) as rt:
        stuck = rt.subscribe(buffer=10)
        with trio.fail_after(5):
            outcome = await rt.run("go")
        with pytest.raises(SubscriberLagged):
            await stuck.receive()
    assert outcome.status == "completed"
    check_invariants(_read_trace(trace))


async def test_a_subscriber_that_closes_goes_away_quietly(workspace: Path, tmp_path: Path) -> None:
    scenario = {"agents": {"main": turns(" ".join(["word"] * 200))}}
    trace = tmp_path / "run.jsonl"
    seen = []
    async with open_runtime(scenario=scenario, workspace=workspace, trace=trace) as rt:
        sub = rt.subscribe(buffer=5, policy="block")

        async def reader() -> None:
            async for event in sub:
                seen.append(event)
                if len(seen) == 3:
                    sub.close()
                    return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            with trio.fail_after(5):
                await rt.run("go")
    assert len(seen) == 3
    check_invariants(_read_trace(trace))


async def test_a_live_subscriber_sees_the_whole_run_in_order(workspace: Path) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("a", "w"), agent_call("b", "w")]},
                           {"text": "done"}]},
        "w": turns("w done")}}
    got: list[Event] = []
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False) as rt:
        sub = rt.subscribe(policy="block")

        async def reader() -> None:
            # One at a time on purpose: the reader is cancelled before the stream ends.
            async for event in sub:
                got.append(event)  # noqa: PERF401

        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            await rt.run("go")
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    assert [e.seq for e in got] == list(range(2, 2 + len(got)))
    assert len(by_type(got, AgentFinished)) == 3


# -- permissions ---------------------------------------------------------------


def _three_writers() -> dict[str, Any]:
    return {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("a", "quick"), agent_call("w", "writer"),
                                           agent_call("b", "quick")]},
                           {"text": "done"}]},
        "writer": {"turns": [
            {"tool_calls": [{"name": "write", "input": {"path": "out.txt", "content": "x"}}]},
            {"text": "tried"}]},
        "quick": {"turns": [{"text": "quick done", "delay_s": 0.05},
                            ]}}}


async def test_a_permission_prompt_pauses_only_the_asking_call(workspace: Path) -> None:
    events = EventLog()
    async with open_runtime(scenario=_three_writers(), workspace=workspace, trace=False,
                            permission_mode="ask", on_event=events) as rt:
        with rt.permission_answerer():
            handle = await rt.start("go")
            await events.wait_for(lambda evs: by_type(evs, PermissionRequested))
            # The two other sub-agents finish while the question waits.
            await events.wait_for(lambda evs: len(by_type(evs, AgentFinished)) == 2)
            [request] = by_type(events, PermissionRequested)
            assert request.parent_tool_use_id is not None, "the request says which subtree asks"
            assert [p.request_id for p in rt.pending_permissions()] == [request.request_id]  # type: ignore[attr-defined]
            assert rt.resolve_permission(request.request_id, False)  # type: ignore[attr-defined]
            assert not rt.resolve_permission(request.request_id, True), "answered already"  # type: ignore[attr-defined]
            outcome = await handle.wait()
    check_invariants(events)
    [resolved] = by_type(events, PermissionResolved)
    assert (resolved.granted, resolved.reason) == (False, "denied by user")  # type: ignore[attr-defined]
    write = next(e for e in by_type(events, ToolFinished) if e.name == "write")  # type: ignore[attr-defined]
    assert (write.status, write.output) == ("denied", "permission denied: denied by user")  # type: ignore[attr-defined]
    assert not (workspace / "out.txt").exists()
    assert outcome.status == "completed"


async def test_with_nobody_to_answer_a_call_is_denied_at_once(workspace: Path) -> None:
    outcome, events = await run_scenario(_three_writers(), workspace, permission_mode="ask")
    check_invariants(events)
    [resolved] = by_type(events, PermissionResolved)
    assert not resolved.granted
    assert "nobody can answer" in resolved.reason
    assert outcome.status == "completed"


async def test_an_unanswered_request_is_denied_after_the_timeout(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    events: list[Event] = []
    async with open_runtime(scenario=_three_writers(), workspace=workspace, trace=False,
                            permission_mode="ask", permission_timeout_s=30,
                            on_event=events.append) as rt:
        with rt.permission_answerer():
            await rt.run("go")
    [resolved] = by_type(events, PermissionResolved)
    assert resolved.reason == "no answer within 30 s"  # type: ignore[attr-defined]
    assert trio.current_time() == pytest.approx(30, abs=1)


async def test_remember_grants_later_calls_of_the_same_kind(workspace: Path) -> None:
    scenario = {"agents": {"main": {"turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": "echo one"}}]},
        {"tool_calls": [{"name": "bash", "input": {"command": "echo one"}}]},
        {"tool_calls": [{"name": "bash", "input": {"command": "echo two"}}]},
        {"text": "done"}]}}}
    events = EventLog()

    async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                            permission_mode="ask", on_event=events) as rt:
        with rt.permission_answerer():
            handle = await rt.start("go")
            first = await events.wait_for(lambda evs: by_type(evs, PermissionRequested))
            assert rt.resolve_permission(first[0].request_id, True, remember=True)
            asked = await events.wait_for(lambda evs: by_type(evs, PermissionRequested)[1:])
            assert rt.resolve_permission(asked[0].request_id, False)
            await handle.wait()
    statuses = [e.status for e in by_type(events, ToolFinished)]  # type: ignore[attr-defined]
    assert statuses == ["ok", "ok", "denied"]
    assert len(by_type(events, PermissionRequested)) == 2, "the remembered call did not ask"


async def test_deny_rules_win_over_allow_all(workspace: Path) -> None:
    scenario = {"agents": {"main": {"turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": "rm -rf build"}}]},
        {"text": "done"}]}}}
    _, events = await run_scenario(scenario, workspace, deny=["bash(rm *)"])
    [finished] = by_type(events, ToolFinished)
    assert finished.status == "denied"  # type: ignore[attr-defined]
    assert "bash(rm *)" in finished.output  # type: ignore[attr-defined]


# -- configuration errors --------------------------------------------------------


async def test_a_missing_workspace_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a folder"):
        async with open_runtime(scenario=_SIMPLE, workspace=tmp_path / "nope"):
            pass  # pragma: no cover


async def test_an_agent_type_naming_an_unknown_tool_is_refused_before_running(
    workspace: Path,
) -> None:
    with pytest.raises(ConfigError, match="names unknown tool 'hammer'"):
        async with open_runtime(scenario=_SIMPLE, workspace=workspace, trace=False,
                                agent_types=[AgentType(name="x", tools=("hammer",))]):
            pass  # pragma: no cover


async def test_a_malformed_scenario_is_refused_before_anything_runs(
    workspace: Path, tmp_path: Path
) -> None:
    trace = tmp_path / "run.jsonl"
    with pytest.raises(ScenarioError, match=r"agents\.main\.turns: missing"):
        async with open_runtime(scenario={"agents": {"main": {}}}, workspace=workspace,
                                trace=trace):
            pass  # pragma: no cover
    assert not trace.exists()


async def test_the_scripted_provider_needs_a_scenario(workspace: Path) -> None:
    with pytest.raises(ConfigError, match="needs a scenario"):
        async with open_runtime("scripted", workspace=workspace, trace=False):
            pass  # pragma: no cover


async def test_an_unknown_root_agent_type_is_a_config_error(workspace: Path) -> None:
    async with open_runtime(scenario=_SIMPLE, workspace=workspace, trace=False) as rt:
        with pytest.raises(ConfigError, match="unknown agent type 'boss'"):
            await rt.start("go", agent_type="boss")


async def test_several_root_agents_share_one_run(workspace: Path) -> None:
    events: list[Event] = []
    async with open_runtime(scenario={"agents": {"main": turns("a", "b")}},
                            workspace=workspace, trace=False, on_event=events.append) as rt:
        first = await rt.run("one")
        second = await rt.run("two", history=first.state.messages)
    assert (first.result, second.result) == ("a", "b")
    check_invariants(events)
    assert len(by_type(events, AgentStarted)) == 2


async def test_a_failing_core_hook_fails_the_run_loudly_and_the_trace_stays_whole(
    workspace: Path, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    trace = tmp_path / "run.jsonl"
    scenario = {"agents": {"main": {"turns": [
        {"text": "working", "tool_calls": [{"name": "bash", "input": {"command": "true"}}]},
        {"text": "slow", "delay_s": 100}]}}}

    def broken(event: Any) -> None:
        if event.type == "tool_finished":
            raise RuntimeError("accounting bug")

    async def run() -> None:
        async with open_runtime(scenario=scenario, workspace=workspace, trace=trace,
                                permission_mode="allow-all") as rt:
            rt.bus.add_core_hook(broken)
            await rt.run("go")

    with pytest.raises(AgentsError, match=r"runtime's own bookkeeping raised.*accounting bug"):
        await run()
    written = _read_trace(trace)
    check_invariants(written)
    assert written[-1].status == "failed"  # type: ignore[attr-defined]
