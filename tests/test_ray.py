"""The ``ray`` placement: sub-agent subtrees on a real local Ray cluster (loopback), with the same
events, tree and cancellation as in-process ones.

One cluster serves the whole module (starting one takes seconds); each run starts its own host
actor on it and kills it at the end.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import attrs
import psutil
import pytest
import trio

from runtime import (
    AgentFinished,
    AgentStarted,
    AgentType,
    CancelRequested,
    ConfigError,
    Event,
    Limits,
    PermissionRequested,
    PermissionResolved,
    RayOptions,
    Scenario,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    UserMessage,
    open_runtime,
)
from runtime.trace._tree import TraceTree
from tests.harness import EventLog, agent_call, run_scenario, turns
from tests.invariants import by_type, check_invariants

ray = pytest.importorskip(
    "ray",
    reason="Ray is not installed: install the 'ray' extra (pip install -e '.[dev,ray]') "
    "to run the Ray placement tests",
)

pytestmark = pytest.mark.usefixtures("ray_cluster")


def _remote(script: dict[str, Any]) -> dict[str, Any]:
    return {**script, "placement": "ray"}


def _shape(events: list[Event]) -> Any:
    """The tree as JSON with everything that differs between two equal runs left out."""
    tree = TraceTree.from_events(events).to_plain_json()

    def strip(node: dict[str, Any]) -> dict[str, Any]:
        children = [strip(c) for c in node.get("children", [])]
        return {
            "kind": node["kind"],
            "name": node["name"],
            "status": node["status"],
            "tokens": (node.get("input_tokens"), node.get("output_tokens")),
            # Parallel siblings may finish in any order, here as in-process.
            "children": sorted(children, key=repr),
        }

    return {"status": tree["status"], "roots": [strip(r) for r in tree["roots"]]}


def _tree_scenario(placement: str) -> dict[str, Any]:
    return {"agents": {
        "main": {"turns": [
            {"text": "Splitting the work.", "tool_calls": [
                agent_call("files", "filer"), agent_call("shell", "sheller"),
                agent_call("doomed", "doomed")]},
            {"text": "All parts are done."}]},
        "filer": {"placement": placement, "turns": [
            {"tool_calls": [{"name": "write", "input": {"path": "f.txt", "content": "x\n"}}]},
            {"tool_calls": [{"name": "read", "input": {"path": "f.txt"}},
                            {"name": "glob", "input": {"pattern": "*.txt"}}]},
            {"tool_calls": [agent_call("deeper", "leaf"), agent_call("deeper 2", "leaf")]},
            {"text": "filed"}]},
        "sheller": {"placement": placement, "turns": [
            {"thinking": "hmm", "text": "running", "tool_calls": [
                {"name": "bash", "input": {"command": "echo hi"}}]},
            {"tool_calls": [{"name": "read", "input": {"path": "missing.txt"}}]},
            {"text": "shelled"}]},
        "doomed": {"placement": placement, "turns": [{"text": "oops", "error": "model exploded"}]},
        "leaf": turns("leaf done")}}


async def test_the_same_scenario_gives_the_same_tree_locally_and_on_ray(
    workspace: Path, tmp_path: Path
) -> None:
    # Same path length: estimated input tokens count the paths in tool results.
    (tmp_path / "wl").mkdir()
    local_outcome, local = await run_scenario(_tree_scenario("local"), tmp_path / "wl")
    outcome, remote = await run_scenario(_tree_scenario("ray"), workspace)
    check_invariants(local)
    check_invariants(remote)
    assert _shape(remote) == _shape(local)
    assert len(remote) == len(local)
    assert (outcome.status, outcome.result) == (local_outcome.status, local_outcome.result)
    assert (workspace / "f.txt").read_text() == "x\n", "tools ran in the shared workspace"
    # Ids made on the worker carry the call's prefix, so they are unique in the run.
    started = by_type(remote, AgentStarted)
    deep = [e.agent_id for e in started if e.depth == 2]  # type: ignore[attr-defined]
    assert len(deep) == 2
    assert all(a is not None and a.startswith("h1.") for a in deep)
    doomed = next(e for e in by_type(remote, AgentFinished) if "exploded" in (e.error or ""))  # type: ignore[attr-defined]
    assert doomed.status == "failed"  # type: ignore[attr-defined]


def _pid_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def _wait_for_file(path: Path) -> str:
    # The bash tool starts its process after tool_started; the file says it is running. It is
    # written by a process on the Ray worker, so no trio event can tell the test: poll.
    apath = trio.Path(path)
    with trio.fail_after(10):
        while not (await apath.exists() and (text := (await apath.read_text()).strip())):  # noqa: ASYNC110
            await trio.sleep(0.01)
    return text


def _sleeper_scenario(pidfile: Path) -> dict[str, Any]:
    return {"agents": {
        "main": {"turns": [
            {"tool_calls": [agent_call("sleepy", "sleeper"), agent_call("steady", "steady")]},
            {"text": "carried on"}]},
        "sleeper": _remote({"tools": ["bash"], "turns": [
            {"tool_calls": [{"name": "bash",
                             "input": {"command": f"echo $$ > {pidfile}; exec sleep 30"}}]},
            {"text": "slept"}]}),
        "steady": _remote({"turns": [{"text": "steady result", "delay_s": 1.0}]})}}


@pytest.mark.parametrize("target", ["remote agent", "remote bash call", "local agent call"])
async def test_cancelling_one_remote_subtree_mid_bash_leaves_its_siblings_running(
    workspace: Path, target: str
) -> None:
    pidfile = workspace / "pid"
    events = EventLog()
    async with open_runtime(scenario=_sleeper_scenario(pidfile), workspace=workspace,
                            trace=False, permission_mode="allow-all", on_event=events) as rt:
        handle = await rt.start("go")
        pid = int(await _wait_for_file(pidfile))
        await events.wait_for(lambda evs: [e for e in by_type(evs, ToolStarted) if e.name == "bash"])  # type: ignore[attr-defined]
        await events.wait_for(lambda evs: len(by_type(evs, AgentStarted)) == 3)
        agents = {e.name: e for e in by_type(events, AgentStarted)}  # type: ignore[attr-defined]
        sleeper = agents["sleeper"]
        bash = next(e for e in by_type(events, ToolStarted) if e.name == "bash")  # type: ignore[attr-defined]
        node = {"remote agent": sleeper.agent_id, "remote bash call": bash.tool_use_id,  # type: ignore[attr-defined]
                "local agent call": sleeper.parent_tool_use_id}[target]
        assert node is not None
        t0 = trio.current_time()
        assert await rt.cancel(node, "enough sleeping")
        ended = await events.wait_for(
            lambda evs: [e for e in by_type(evs, ToolFinished) if e.tool_use_id == bash.tool_use_id])  # type: ignore[attr-defined]
        cancel_latency = trio.current_time() - t0
        assert not [e for e in by_type(events, AgentFinished)
                    if e.agent_id == agents["steady"].agent_id], "the sibling still runs"
        outcome = await handle.wait()
    check_invariants(events)
    assert ended[0].status == "cancelled"
    assert cancel_latency < 2.0
    [request] = by_type(events, CancelRequested)
    assert (request.target, request.reason) == (node, "enough sleeping")  # type: ignore[attr-defined]
    finished = {e.agent_id: e for e in by_type(events, AgentFinished)}
    calls = {e.tool_use_id: e for e in by_type(events, ToolFinished)}  # type: ignore[attr-defined]
    steady = finished[agents["steady"].agent_id]
    assert (steady.status, steady.result) == ("completed", "steady result")  # type: ignore[attr-defined]
    sleeper_end = finished[sleeper.agent_id]
    if target == "remote bash call":
        # Only the bash call was cancelled: the sleeper reads the result and carries on.
        assert (sleeper_end.status, sleeper_end.result) == ("completed", "slept")  # type: ignore[attr-defined]
        assert calls[sleeper.parent_tool_use_id].status == "ok"  # type: ignore[index]
    else:
        assert sleeper_end.status == "cancelled"  # type: ignore[attr-defined]
        assert "enough sleeping" in sleeper_end.error  # type: ignore[attr-defined]
        assert calls[sleeper.parent_tool_use_id].status == "cancelled"  # type: ignore[index]
        assert events.index(sleeper_end) < events.index(steady), "cancelled while steady ran"
    assert outcome.status == "completed"
    assert outcome.result == "carried on"
    assert _pid_gone(pid), "the cancelled bash left its process behind"


async def test_killing_the_host_mid_run_ends_its_nodes_failed_and_the_run_completes(
    workspace: Path,
) -> None:
    pidfile = workspace / "pid"
    scenario = _sleeper_scenario(pidfile)
    scenario["agents"]["steady"] = turns("steady result")  # local: not on the doomed host
    # The sleeper's own sub-agent runs the bash, on the same worker.
    # Its bash leaves a background job, a grandchild of the worker in bash's own group: Ray
    # ends a dead worker's children, not what they started.
    scenario["agents"]["inner"] = {"tools": ["bash"], "turns": [
        {"tool_calls": [{"name": "bash", "input": {
            "command": f"sleep 30 & echo $! > {pidfile}; wait"}}]},
        {"text": "slept"}]}
    scenario["agents"]["sleeper"]["tools"] = ["agent"]
    scenario["agents"]["sleeper"]["turns"] = [{"tool_calls": [agent_call("inner", "inner")]},
                                              {"text": "never"}]
    events = EventLog()
    pid = None
    try:
        async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                                permission_mode="allow-all", on_event=events) as rt:
            handle = await rt.start("go")
            pid = int(await _wait_for_file(pidfile))
            await events.wait_for(
                lambda evs: [e for e in by_type(evs, ToolStarted) if e.name == "bash"])  # type: ignore[attr-defined]
            [host] = rt._run.placements["ray"].hosts  # type: ignore[attr-defined]
            ray.kill(host)
            outcome = await handle.wait()
            # The worker could not stop its bash call's process group; its warden does, once
            # the worker is gone (SIGTERM, so well before the 2 s grace).
            with trio.move_on_after(10):
                while not _pid_gone(pid):  # noqa: ASYNC110 - another process's pid: poll
                    await trio.sleep(0.02)
            bash_outlived_the_worker = not _pid_gone(pid)
    finally:
        if pid is not None and not _pid_gone(pid):
            psutil.Process(pid).kill()
    assert not bash_outlived_the_worker
    check_invariants(events)
    assert (outcome.status, outcome.result) == ("completed", "carried on")
    started = {e.agent_id: e.name for e in by_type(events, AgentStarted)}  # type: ignore[attr-defined]
    ends = {started[e.agent_id]: e for e in by_type(events, AgentFinished)}
    for name in ("sleeper", "inner"):
        assert ends[name].status == "failed", name  # type: ignore[attr-defined]
        assert ends[name].error.startswith("worker died: ray host h1 ")  # type: ignore[attr-defined]
    assert ends["steady"].status == "completed"  # type: ignore[attr-defined]
    statuses = {e.name: e.status for e in by_type(events, ToolFinished)  # type: ignore[attr-defined]
                if e.agent_id != handle.agent_id}
    assert statuses == {"bash": "error", "agent": "error"}
    call = next(e for e in by_type(events, ToolFinished)
                if e.agent_id == handle.agent_id and "sleeper" in e.output)  # type: ignore[attr-defined]
    assert call.status == "error"  # type: ignore[attr-defined]
    assert "worker died" in call.output  # type: ignore[attr-defined]


async def test_a_budget_exceeded_remotely_ends_only_that_subtree(workspace: Path) -> None:
    glob = {"name": "glob", "input": {"pattern": "*"}}
    scenario = {"agents": {
        "main": {"turns": [
            {"tool_calls": [agent_call("greedy", "greedy", budget={"tool_calls": 2}),
                            agent_call("modest", "modest")]},
            {"text": "done anyway"}]},
        "greedy": _remote({"tools": ["glob"], "turns": [
            {"tool_calls": [glob]}, {"tool_calls": [glob]}, {"tool_calls": [glob]},
            *[{"tool_calls": [glob], "delay_s": 0.5}] * 20, {"text": "never"}]}),
        "modest": _remote({"turns": [{"text": "modest result", "delay_s": 0.5}]})}}
    outcome, events = await run_scenario(scenario, workspace)
    check_invariants(events)
    started = {e.agent_id: e.name for e in by_type(events, AgentStarted)}  # type: ignore[attr-defined]
    ends = {started[e.agent_id]: e for e in by_type(events, AgentFinished)}
    assert ends["greedy"].status == "budget_exceeded"  # type: ignore[attr-defined]
    assert "3 tool calls > 2" in ends["greedy"].error  # type: ignore[attr-defined]
    assert (ends["modest"].status, ends["modest"].result) == ("completed", "modest result")  # type: ignore[attr-defined]
    [request] = by_type(events, CancelRequested)
    assert (request.by, started[request.target]) == ("budget", "greedy")  # type: ignore[attr-defined]
    assert outcome.result == "done anyway"


async def test_a_remote_subtree_costs_its_calls_with_the_runs_prices_and_keeps_its_usd_budget(
    workspace: Path,
) -> None:
    # test-model has a price only in the run's own rows: a host that did not get them would
    # cost its calls unknown (docs/costs.md, "Where costs show"). $0.12 a turn; the third
    # call would pass $0.25, and the host refuses it before it starts.
    glob = {"name": "glob", "input": {"pattern": "*"}}
    spend = {"tool_calls": [glob], "usage": {"input_tokens": 2000, "output_tokens": 10}}
    scenario = {"agents": {
        "main": {"turns": [
            {"tool_calls": [agent_call("greedy", "greedy", budget={"usd": 0.25}),
                            agent_call("modest", "modest")]},
            {"text": "done anyway"}]},
        "greedy": _remote({"tools": ["glob"], "turns": [spend] * 10}),
        "modest": _remote({"turns": [
            {"text": "modest result", "usage": {"input_tokens": 100, "output_tokens": 1}}]})}}
    prices = {"test-model": {"input_per_mtok": 10.0, "output_per_mtok": 10_000.0}}
    outcome, events = await run_scenario(scenario, workspace, model="test-model", prices=prices)
    check_invariants(events)
    started = {e.agent_id: e.name for e in by_type(events, AgentStarted)}  # type: ignore[attr-defined]
    ends = {started[e.agent_id]: e for e in by_type(events, AgentFinished)}
    greedy, modest = ends["greedy"], ends["modest"]
    assert (greedy.status, greedy.turns) == ("budget_exceeded", 2)  # type: ignore[attr-defined]
    assert "spent, reserved and asked for > $0.25" in greedy.error  # type: ignore[attr-defined]
    assert greedy.cost_usd == pytest.approx(0.24)  # type: ignore[attr-defined]
    assert (modest.status, modest.cost_usd) == ("completed", pytest.approx(0.011))  # type: ignore[attr-defined]
    assert outcome.result == "done anyway"
    tree = TraceTree.from_events(events)
    tree.rollup()
    [root] = tree.roots
    assert root.subtree_cost_usd == pytest.approx(root.cost_usd + 0.24 + 0.011)


def _asker_scenario() -> dict[str, Any]:
    return {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("ask", "asker")]}, {"text": "asked"}]},
        "asker": _remote({"tools": ["bash"], "turns": [
            {"tool_calls": [{"name": "bash", "input": {"command": "echo granted-ran"}}]},
            {"text": "asker done"}]})}}


async def test_a_remote_permission_question_is_answered_through_the_parent(
    workspace: Path,
) -> None:
    events = EventLog()
    async with open_runtime(scenario=_asker_scenario(), workspace=workspace, trace=False,
                            permission_mode="ask", on_event=events) as rt:
        with rt.permission_answerer():
            handle = await rt.start("go")
            [request] = await events.wait_for(lambda evs: by_type(evs, PermissionRequested))
            assert [p.request_id for p in rt.pending_permissions()] == [request.request_id]
            assert rt.resolve_permission(request.request_id, True)
            await handle.wait()
    check_invariants(events)
    asker = next(e for e in by_type(events, AgentStarted) if e.name == "asker")  # type: ignore[attr-defined]
    assert (request.agent_id, request.parent_tool_use_id) == (asker.agent_id, asker.parent_tool_use_id)
    [resolved] = by_type(events, PermissionResolved)
    assert resolved.granted  # type: ignore[attr-defined]
    bash = next(e for e in by_type(events, ToolFinished) if e.name == "bash")  # type: ignore[attr-defined]
    assert (bash.status, bash.output.splitlines()[0]) == ("ok", "granted-ran")  # type: ignore[attr-defined]
    assert events.index(resolved) < events.index(bash)


async def test_cancelling_a_remote_call_that_waits_for_permission_withdraws_its_question(
    workspace: Path,
) -> None:
    """The remote bash call is cancelled while its question waits on the parent: the question
    is withdrawn (its ``permission_resolved`` before the call's ``tool_finished``), the call
    ends ``cancelled``, and the remote agent and the run carry on."""
    events = EventLog()
    async with open_runtime(scenario=_asker_scenario(), workspace=workspace, trace=False,
                            permission_mode="ask", on_event=events) as rt:
        with rt.permission_answerer():
            handle = await rt.start("go")
            [request] = await events.wait_for(lambda evs: by_type(evs, PermissionRequested))
            bash = next(e for e in by_type(events, ToolStarted) if e.name == "bash")  # type: ignore[attr-defined]
            assert await rt.cancel(bash.tool_use_id, "no longer needed")  # type: ignore[attr-defined]
            outcome = await handle.wait()
            assert rt.pending_permissions() == []
    check_invariants(events)
    [resolved] = by_type(events, PermissionResolved)
    assert resolved.request_id == request.request_id  # type: ignore[attr-defined]
    assert not resolved.granted  # type: ignore[attr-defined]
    finished = next(e for e in by_type(events, ToolFinished) if e.name == "bash")  # type: ignore[attr-defined]
    assert finished.status == "cancelled"  # type: ignore[attr-defined]
    assert events.index(resolved) < events.index(finished)
    assert outcome.result == "asked"


async def test_a_remote_question_with_nobody_to_answer_is_denied(workspace: Path) -> None:
    outcome, events = await run_scenario(_asker_scenario(), workspace, permission_mode="ask")
    check_invariants(events)
    [resolved] = by_type(events, PermissionResolved)
    assert not resolved.granted  # type: ignore[attr-defined]
    assert "nobody can answer" in resolved.reason  # type: ignore[attr-defined]
    bash = next(e for e in by_type(events, ToolFinished) if e.name == "bash")  # type: ignore[attr-defined]
    assert bash.status == "denied"  # type: ignore[attr-defined]
    assert outcome.result == "asked"


async def test_a_worker_that_cannot_see_the_workspace_fails_the_subtree_clearly(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "vanishing"
    ws.mkdir()
    scenario = {"agents": {
        "main": {"turns": [
            # The workspace disappears before the remote subtree starts: as on a worker
            # that does not mount it.
            {"tool_calls": [{"name": "bash", "input": {"command": f"cd / && rmdir {ws}"}}]},
            {"tool_calls": [agent_call("remote", "far")]},
            {"text": "noted"}]},
        "far": _remote(turns("never"))}}
    outcome, events = await run_scenario(scenario, ws)
    check_invariants(events)
    far = next(e for e in by_type(events, AgentFinished) if e.agent_id != events[1].agent_id)
    assert far.status == "failed"  # type: ignore[attr-defined]
    assert f"workspace {str(ws)!r} is not reachable on Ray worker" in far.error  # type: ignore[attr-defined]
    assert outcome.result == "noted"


async def test_max_parallel_applies_to_remote_subtrees(workspace: Path) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call(f"w{i}", "w") for i in range(6)]},
                           {"text": "ok"}]},
        "w": _remote({"turns": [{"text": "w", "delay_s": 0.2}]})}}
    peak = 0
    running = 0

    def count(event: Event) -> None:
        nonlocal peak, running
        if isinstance(event, AgentStarted) and event.depth == 1:
            running += 1
            peak = max(peak, running)
        elif isinstance(event, AgentFinished) and event.parent_tool_use_id is not None:
            running -= 1

    outcome, events = await run_scenario(scenario, workspace, limits=Limits(max_parallel=2),
                                         on_event=count)
    check_invariants(events)
    assert outcome.status == "completed"
    assert peak == 2


def test_an_exception_in_one_subtree_leaves_the_others_on_its_host_running(
    tmp_path: Path,
) -> None:
    from runtime.cluster._host import ProviderConfig, RayHost, RunConfig, SubtreeCall
    from runtime.core._agent import AgentSpec
    from runtime.core._permissions import PermissionPolicy
    from tools import ToolLimits, builtin_tools

    scenario = Scenario.from_obj({"agents": {"main": turns("x"),
                                             "w": {"turns": [{"text": "fine", "delay_s": 0.3}]}}})
    spec = AgentSpec(agent_id="agent-2", agent_type=AgentType(name="w"), prompt="go", depth=1,
                     parent_tool_use_id="tu-1", parent_agent_id="agent-1")
    config = RunConfig(
        run_id="run", agent_types=(AgentType(name="w"),),
        provider=ProviderConfig(kind="scripted", name="scripted", scenario=scenario),
        tools=tuple(builtin_tools()), tool_limits=ToolLimits(), limits=Limits(),
        workspace=str(tmp_path), env={}, policy=PermissionPolicy(mode="deny"))
    good = SubtreeCall(call_id="t.1", id_prefix="t.1.", spec=spec, config=ray.put(config),
                       max_agents=100)
    # Not a tool at all: the subtree breaks while it is set up on the worker.
    broken = attrs.evolve(config, tools=(functools.partial(print),))
    bad = SubtreeCall(call_id="t.2", id_prefix="t.2.", spec=spec, config=broken, max_agents=100)
    host = ray.remote(RayHost).options(num_cpus=0, max_concurrency=100).remote("t")
    batches: dict[str, list[Any]] = {"t.1": [], "t.2": []}
    try:
        ray.get(host.submit.remote((good, bad)), timeout=30)
        channel = host.channel.options(num_returns="streaming").remote()
        for ref in channel:
            for call_id, batch in ray.get(ref, timeout=30).batches():
                batches[call_id].append(batch)
            if all(b and b[-1].final for b in batches.values()):
                break
        assert ray.get(host.ping.remote(), timeout=30).startswith("t pid")
    finally:
        ray.kill(host)
    good_end, bad_end = batches["t.1"][-1], batches["t.2"][-1]
    assert bad_end.final
    assert "crashed" in bad_end.error
    assert bad_end.outcome is None
    assert good_end.final
    assert good_end.error is None
    assert (good_end.outcome.status, good_end.outcome.result) == ("completed", "fine")
    good_events = [e for b in batches["t.1"] for e in b.events]
    assert good_events[0].type == "agent_started"
    assert good_events[-1].type == "agent_finished"


def test_ray_runs_in_a_separate_process() -> None:
    # Sanity: the host really is another process (so the tests above cross a boundary).
    host = ray.remote(__import__("runtime.cluster._host", fromlist=["RayHost"]).RayHost).options(
        num_cpus=0).remote("p")
    try:
        where = ray.get(host.ping.remote(), timeout=30)
    finally:
        ray.kill(host)
    assert where.startswith("p pid ")
    assert int(where.split()[2]) != os.getpid()


async def test_http_provider_sub_agents_on_ray_get_the_key_through_the_runtime_env(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    from tests.llm_server import LLMServer
    from tests.test_provider_e2e import KEY, _openai_route

    server = LLMServer()
    await nursery.start(server.serve)
    server.route = _openai_route
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": server.url + "/v1", "PATH": "/usr/bin:/bin"}
    trace = tmp_path / "run.jsonl"
    events: list[Event] = []
    with trio.fail_after(30):
        async with open_runtime("openai", model="test-model", env=env, workspace=workspace,
                                trace=trace, on_event=events.append,
                                agent_types=[AgentType(name="general", placement="ray")]) as rt:
            outcome = await rt.run("Review the workspace")
    check_invariants(events)
    assert (outcome.status, outcome.result) == ("completed", "Both sub-agents reported back.")
    results = sorted(e.output for e in by_type(events, ToolFinished))  # type: ignore[attr-defined]
    assert results == ["The notes say hi.", "There are 2 files."]
    children = [e for e in by_type(events, AgentStarted) if e.parent_tool_use_id is not None]
    assert len(children) == 2
    # Every request, the two made on the worker included, carried the key.
    assert len(server.requests) == 4
    assert all(r.headers.get("authorization") == f"Bearer {KEY}" for r in server.requests)
    assert KEY not in trace.read_text()


def test_the_cli_starts_its_own_cluster_and_keeps_stdout_to_events(tmp_path: Path) -> None:
    import subprocess
    import sys

    from runtime import decode_event

    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("far", "far")]}, {"text": "done"}]},
        "far": _remote({"tools": ["bash"], "turns": [
            {"tool_calls": [{"name": "bash", "input": {"command": "echo from-the-worker"}}]},
            {"text": "far done"}]})}}))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    out = subprocess.run(
        [sys.executable, "-m", "runtime", "run", "go", "--scenario", str(scenario), "--json",
         "--permission-mode", "allow-all", "--workspace", str(workspace)],
        capture_output=True, timeout=120, env=env, check=False, cwd=tmp_path)
    assert out.returncode == 0, out.stderr.decode()
    events = [decode_event(line) for line in out.stdout.splitlines()]
    check_invariants(events)
    bash = next(e for e in by_type(events, ToolFinished) if e.name == "bash")  # type: ignore[attr-defined]
    assert bash.output.startswith("from-the-worker")  # type: ignore[attr-defined]
    assert events[-1].status == "completed"  # type: ignore[attr-defined]


async def test_a_host_that_cannot_be_made_is_refused_and_made_off_the_event_loop(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Making a host actor (the first in a process makes Ray export its class: 0.1-0.2 s of
    CPU) runs in a thread, not in the run's trio thread; when Ray cannot make it, the host is
    refused with Ray's reason and the subtree fails with it, the run carries on."""
    import threading

    from runtime.cluster import _placement

    on_loop: list[bool] = []
    loop_thread = threading.current_thread()

    class _NoHost:
        def options(self, **_: Any) -> _NoHost:
            return self

        def remote(self, *_: Any, **__: Any) -> Any:
            on_loop.append(threading.current_thread() is loop_thread)
            raise RuntimeError("no room for actors here")

    monkeypatch.setattr(_placement, "_remote_class", lambda cls: _NoHost())
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("far", "far")]}, {"text": "carried on"}]},
        "far": _remote(turns("never"))}}
    outcome, events = await run_scenario(scenario, workspace, ray=RayOptions(hosts_per_node=1))
    check_invariants(events)
    assert (outcome.status, outcome.result) == ("completed", "carried on")
    assert on_loop == [False]
    [call] = [e for e in by_type(events, ToolFinished) if e.name == "agent"]  # type: ignore[attr-defined]
    assert call.status == "error"  # type: ignore[attr-defined]
    assert "could not start: RuntimeError: no room for actors here" in call.output  # type: ignore[attr-defined]


def test_ray_options_come_from_the_cli_and_from_a_settings_table(tmp_path: Path) -> None:
    from runtime.cli._main import build_parser
    from runtime.cli._options import options_from_args, run_config

    ns = build_parser().parse_args(["run", "x", "--ray-hosts-per-node", "2",
                                    "--ray-strategy", "pack"])
    assert run_config(options_from_args(ns)).ray == RayOptions(
        hosts_per_node=2, strategy="pack")
    ns = build_parser().parse_args(["run", "x", "--ray-cpus-per-host", "4"])
    options = run_config(options_from_args(ns)).ray
    assert options is not None
    assert [options.hosts_on(c) for c in (1, 4, 9)] == [1, 1, 2]
    assert run_config(options_from_args(build_parser().parse_args(["run", "x"]))).ray is None
    assert RayOptions.from_mapping({"strategy": "spread", "host_timeout_s": 5}).host_timeout_s == 5
    for bad, message in [({"strategy": "wide"}, "ray.strategy: expected 'spread' or 'pack'"),
                         ({"hosts_per_node": 0}, "ray.hosts_per_node: expected a number > 0"),
                         ({"hosts": 2}, "ray.hosts: unknown key")]:
        with pytest.raises(ConfigError, match=message):
            RayOptions.from_mapping(bad)
    from runtime import load_agent_types

    path = tmp_path / "agents.toml"
    path.write_text('[agents.gpu]\nplacement = "ray"\nray_resources = { GPU = 1 }\n'
                    'ray_labels = { zone = "lab" }\n')
    [gpu] = load_agent_types(path)
    assert (dict(gpu.ray_resources), dict(gpu.ray_labels)) == ({"GPU": 1.0}, {"zone": "lab"})
    path.write_text('[agents.gpu]\nray_resources = { GPU = "one" }\n')
    with pytest.raises(ConfigError, match=r"agents.gpu.ray_resources: expected a table"):
        load_agent_types(path)


async def test_a_budget_of_an_agent_started_on_the_worker_is_kept_there(workspace: Path) -> None:
    glob = {"name": "glob", "input": {"pattern": "*"}}
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("boss", "boss")]}, {"text": "done"}]},
        "boss": _remote({"tools": ["agent"], "turns": [
            {"tool_calls": [agent_call("greedy", "greedy", budget={"tool_calls": 1}),
                            agent_call("modest", "modest")]},
            {"text": "boss done"}]}),
        "greedy": {"tools": ["glob"], "turns": [
            {"tool_calls": [glob]}, {"tool_calls": [glob]},
            *[{"tool_calls": [glob], "delay_s": 0.5}] * 20, {"text": "never"}]},
        "modest": {"turns": [{"text": "modest result", "delay_s": 0.3}]}}}
    outcome, events = await run_scenario(scenario, workspace)
    check_invariants(events)
    started = {e.agent_id: e.name for e in by_type(events, AgentStarted)}  # type: ignore[attr-defined]
    ends = {started[e.agent_id]: e for e in by_type(events, AgentFinished)}
    assert ends["greedy"].status == "budget_exceeded"  # type: ignore[attr-defined]
    assert (ends["modest"].status, ends["boss"].status) == ("completed", "completed")  # type: ignore[attr-defined]
    [request] = by_type(events, CancelRequested)
    assert (request.by, started[request.target]) == ("budget", "greedy")  # type: ignore[attr-defined]
    assert outcome.result == "done"


async def test_a_budget_trips_in_its_own_subtree_when_subtrees_share_a_host(
    workspace: Path,
) -> None:
    """The subtrees of one run on one host share a budget layer: a budget exceeded in one of
    them cancels that agent, in that subtree, and nothing in its sibling running beside it."""
    glob = {"name": "glob", "input": {"pattern": "*"}}
    scenario = {"agents": {
        # The budgeted subtree is the second one: a cancel must find it, not the first.
        "main": {"turns": [{"tool_calls": [agent_call("b2", "boss2"), agent_call("b1", "boss1")]},
                           {"text": "done"}]},
        "boss1": _remote({"tools": ["agent"], "turns": [
            {"tool_calls": [agent_call("greedy", "greedy", budget={"tool_calls": 1})]},
            {"text": "boss1 done"}]}),
        "boss2": _remote({"tools": ["agent"], "turns": [
            {"tool_calls": [agent_call("busy", "busy", budget={"tool_calls": 10})]},
            {"text": "boss2 done"}]}),
        "greedy": {"tools": ["glob"], "turns": [
            {"tool_calls": [glob]}, {"tool_calls": [glob]},
            *[{"tool_calls": [glob], "delay_s": 0.5}] * 20, {"text": "never"}]},
        "busy": {"tools": ["glob"], "turns": [
            *[{"tool_calls": [glob], "delay_s": 0.1}] * 5, {"text": "busy done"}]}}}
    outcome, events = await run_scenario(scenario, workspace)
    check_invariants(events)
    started = {e.agent_id: e.name for e in by_type(events, AgentStarted)}  # type: ignore[attr-defined]
    ends = {started[e.agent_id]: e for e in by_type(events, AgentFinished)}
    assert ends["greedy"].status == "budget_exceeded"  # type: ignore[attr-defined]
    assert ends["busy"].status == "completed"  # type: ignore[attr-defined]
    assert ends["busy"].result == "busy done"  # type: ignore[attr-defined]
    assert (ends["boss1"].status, ends["boss2"].status) == ("completed", "completed")  # type: ignore[attr-defined]
    [request] = by_type(events, CancelRequested)
    assert (request.by, started[request.target]) == ("budget", "greedy")  # type: ignore[attr-defined]
    # Both subtrees ran on the one host of this one-node cluster, side by side.
    hosts = {aid.split(".")[0] for aid, name in started.items() if name in ("greedy", "busy")}
    assert len(hosts) == 1
    assert outcome.result == "done"


async def test_sub_agents_on_ray_get_the_projects_instructions_in_their_system_prompt(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    from runtime.project import load_project
    from tests.llm_server import LLMServer
    from tests.test_provider_e2e import KEY, _openai_route

    server = LLMServer()
    await nursery.start(server.serve)
    server.route = _openai_route
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "AGENTS.md").write_text("RAY-RULE: be brief.")
    env = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": server.url + "/v1", "PATH": "/usr/bin:/bin"}
    with trio.fail_after(30):
        async with open_runtime("openai", model="test-model", env=env, workspace=workspace,
                                trace=False, project=load_project(workspace),
                                agent_types=[AgentType(name="general", placement="ray")]) as rt:
            outcome = await rt.run("Review the workspace")
    assert outcome.status == "completed"
    systems = [r.json["messages"][0]["content"] for r in server.requests]
    assert len(systems) == 4
    assert all("# Environment" in s and "RAY-RULE: be brief." in s for s in systems)


# -- secrets on the worker -------------------------------------------------------------------


def _remote_bash_route(command: str) -> Any:
    """The root asks a ``general`` sub-agent (placed on Ray) to run *command* with bash; the
    sub-agent's model calls bash, then reports back."""
    from tests.llm_server import (
        OPENAI_DONE,
        RecordedRequest,
        Reply,
        openai_chunk,
        openai_text_stream,
    )

    def call(name: str, arguments: dict[str, Any]) -> Reply:
        tool_call = {"index": 0, "id": f"call_{name}", "type": "function",
                     "function": {"name": name, "arguments": json.dumps(arguments)}}
        return Reply.stream([openai_chunk({"role": "assistant", "content": ""}),
                             openai_chunk({"tool_calls": [tool_call]}),
                             openai_chunk({}, finish="tool_calls"), OPENAI_DONE])

    def route(request: RecordedRequest) -> Reply:
        messages = request.json["messages"]
        first_user = str(next(m["content"] for m in messages if m["role"] == "user"))
        answered = any(m["role"] == "tool" for m in messages)
        if "RUN-BASH" in first_user:  # the sub-agent, on the worker
            if answered:
                return Reply.stream(openai_text_stream(["ran it"]))
            return call("bash", {"command": command})
        if answered:
            return Reply.stream(openai_text_stream(["done"]))
        return call("agent", {"description": "run it", "prompt": "RUN-BASH now",
                              "agent": "general"})

    return route


async def _run_remote_bash(
    nursery: trio.Nursery, tmp_path: Path, command: str, env: dict[str, str], **kwargs: Any
) -> tuple[list[Event], Any, Path]:
    """One run of :func:`_remote_bash_route` against the loopback LLM server: its events, the
    server (its recorded requests are what the models saw) and the trace file."""
    from tests.llm_server import LLMServer

    server = LLMServer()
    await nursery.start(server.serve)
    server.route = _remote_bash_route(command)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    trace = tmp_path / "run.jsonl"
    events: list[Event] = []
    env = {"OPENAI_BASE_URL": server.url + "/v1", "PATH": "/usr/bin:/bin", **env}
    with trio.fail_after(60):
        async with open_runtime("openai", model="test-model", env=env, workspace=workspace,
                                trace=trace, on_event=events.append, permission_mode="allow-all",
                                agent_types=[AgentType(name="general", placement="ray")],
                                **kwargs) as rt:
            outcome = await rt.run("Go")
    check_invariants(events)
    assert (outcome.status, outcome.result) == ("completed", "done")
    return events, server, trace


def _from_the_sub_agent(body: dict[str, Any]) -> bool:
    """Whether a request is the sub-agent's, after its bash call."""
    messages = body["messages"]
    first_user = str(next(m["content"] for m in messages if m["role"] == "user"))
    return "RUN-BASH" in first_user and any(m["role"] == "tool" for m in messages)


def _bash_output(events: list[Event]) -> str:
    [bash] = [e for e in by_type(events, ToolFinished) if e.name == "bash"]  # type: ignore[attr-defined]
    assert bash.status == "ok", bash.output  # type: ignore[attr-defined]
    return str(bash.output)  # type: ignore[attr-defined]


async def test_a_remote_bash_scanning_every_process_environment_finds_no_key(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    import secrets

    # A key of this test only: other runs on the machine hold the usual test key.
    key = f"sk-ray-scan-{secrets.token_hex(12)}"
    # What a command can do to get past the masking of the key's value: read it from another
    # process's environment and turn it around. Only lines with this test's key or its marker
    # are kept (the machine's other processes are none of this test's business).
    command = ("cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' "
               f"| grep -a -e {key[3:]} -e SCAN_MARKER | rev")
    events, server, trace = await _run_remote_bash(
        nursery, tmp_path, command, {"OPENAI_API_KEY": key, "SCAN_MARKER": "visible"})
    output = _bash_output(events)
    # The scan ran and read environments (its own at least)...
    assert "elbisiv=REKRAM_NACS" in output
    # ...but the key is nowhere: not in the worker's environment, so not (turned around) in
    # the output, the events, the trace or what the models were sent.
    leaked = {"output": output, "trace": trace.read_text(),
              "requests": "".join(r.body.decode() for r in server.requests)}
    for where, text in leaked.items():
        assert key[::-1] not in text, f"the key is in the {where}, turned around"
        assert key not in text, f"the key is in the {where}"
    # The sub-agent's requests still carried it (from the run's settings, not the environment).
    assert len(server.requests) == 4
    assert all(r.headers.get("authorization") == f"Bearer {key}" for r in server.requests)


async def test_a_drivers_secret_printed_by_a_remote_bash_is_masked_for_the_remote_model(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    import secrets

    from tools import ToolLimits

    secret = f"my-{secrets.token_hex(12)}"
    limit = 2000
    # Printed whole, then once more across the place where the output is cut (the head keeps
    # limit // 2 characters): masking after the cut would leave most of it unrecognised.
    pad = limit // 2 - (len(secret) + 1) - len(secret) // 2
    command = (f'echo "$MY_API_KEY"; head -c {pad} /dev/zero | tr "\\0" x; echo "$MY_API_KEY"; '
               f'head -c {3 * limit} /dev/zero | tr "\\0" y')
    events, server, trace = await _run_remote_bash(
        nursery, tmp_path, command,
        {"OPENAI_API_KEY": "sk-ray-e2e-0123456789", "MY_API_KEY": secret},
        allow_env=["MY_API_KEY"], tool_limits=ToolLimits(max_output_chars=limit))
    output = _bash_output(events)
    assert output.startswith("***\nxxx")
    assert "characters cut" in output
    pieces = {secret[i : i + 8] for i in range(len(secret) - 7)}
    sub_requests = [r.body.decode() for r in server.requests if _from_the_sub_agent(r.json)]
    assert len(sub_requests) == 1, "the sub-agent was sent its bash output once"
    for where, text in {"events": trace.read_text(), "remote model": sub_requests[0]}.items():
        found = [p for p in pieces if p in text]
        assert not found, f"{len(found)} pieces of the secret are in what the {where} saw"
    assert "***" in sub_requests[0]


async def test_a_remote_agents_text_reaches_the_stream_as_the_same_events_as_a_local_ones(
    workspace: Path, tmp_path: Path
) -> None:
    # A secret in the run's environment, and agents whose text ends with the start of it: the
    # bus that builds a text event holds that start back (the next piece could complete the
    # secret) and sends it once the agent's next event shows it did not. A remote agent's
    # events are built, masked and held back on its host; forwarded as they are, they must
    # be the events a local agent gives: no text held back twice (which had made one text
    # event an empty one and one more).
    secret = "zq-SECRETVALUE-0123456789"
    env = {**os.environ, "MY_API_KEY": secret}

    def scenario(placement: str) -> dict[str, Any]:
        return {"agents": {
            "main": {"turns": [{"tool_calls": [agent_call("look", "looker")]},
                               {"text": "done"}]},
            "looker": {"placement": placement, "turns": [
                {"text": "the key begins zq-SEC", "tool_calls": [
                    {"name": "bash", "input": {"command": "echo $MY_API_KEY"}}]},
                {"text": f"it was {secret} and ends zq-SECRETVAL"}]}}}

    (tmp_path / "wl").mkdir()
    _, local = await run_scenario(scenario("local"), tmp_path / "wl", env=env,
                                  allow_env=["MY_API_KEY"])
    outcome, remote = await run_scenario(scenario("ray"), workspace, env=env,
                                         allow_env=["MY_API_KEY"])
    assert outcome.status == "completed"
    check_invariants(remote)
    sub_local = [e for e in local if e.parent_tool_use_id is not None]
    sub_remote = [e for e in remote if e.parent_tool_use_id is not None]
    text_local = [(type(e).__name__, e.text) for e in sub_local if type(e).__name__ == "TextDelta"]  # type: ignore[attr-defined]
    text_remote = [(type(e).__name__, e.text) for e in sub_remote if type(e).__name__ == "TextDelta"]  # type: ignore[attr-defined]
    assert text_remote == text_local
    assert [type(e).__name__ for e in sub_remote] == [type(e).__name__ for e in sub_local]
    assert secret not in json.dumps([attrs.asdict(e) for e in remote])
    assert "zq-SEC" in "".join(t for _, t in text_remote), "a start that was no secret is kept"


def test_a_host_seals_its_workers_environment() -> None:
    import secrets

    from runtime.cluster._host import RayHost

    # A key the cluster gives its workers (here through Ray's runtime_env, as an admin would).
    token = f"tok-{secrets.token_hex(12)}"
    host = ray.remote(RayHost).options(
        num_cpus=0, runtime_env={"env_vars": {"WORKER_TOKEN": token, "WORKER_NOTE": "plain"}}
    ).remote("s", watch_node=False, seal_environ=True)
    try:
        pid = int(ray.get(host.ping.remote(), timeout=60).split()[2])
        try:
            environ: bytes | None = Path(f"/proc/{pid}/environ").read_bytes()
        except PermissionError:  # not root: the sealed worker is not dumpable, so unreadable
            environ = None
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    finally:
        ray.kill(host)
    assert token.encode() not in cmdline
    if environ is not None:
        assert token.encode() not in environ
        assert b"WORKER_NOTE=plain" in environ, "only secret-looking variables go"


_UNUSED_RAY_TYPE = r"""
import sys, trio, ray
from runtime import open_runtime

async def main() -> None:
    scenario = {"agents": {
        "main": {"turns": [{"text": "no sub-agent today"}]},
        "far": {"placement": "ray", "turns": [{"text": "never asked"}]}}}
    async with open_runtime(scenario=scenario, workspace=sys.argv[1], trace=False) as rt:
        outcome = await rt.run("go")
        print(outcome.result, ray.is_initialized(), flush=True)

trio.run(main)
"""


def test_a_run_that_places_nothing_on_ray_starts_no_cluster(tmp_path: Path) -> None:
    # A project with a ray-placed agent type used to start a private cluster (seconds) when
    # every run opened; it now starts on the first remote subtree.
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run([sys.executable, "-c", _UNUSED_RAY_TYPE, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["no", "sub-agent", "today", "False"]


async def test_worktree_agents_on_ray_edit_their_own_worktrees(workspace: Path) -> None:
    # The host shares this machine's file system: it sees the worktrees made here
    # (docs/worktrees.md, "Ray placement").
    from tests.test_worktree import _branches, _check_two_branches_kept, _git, _two_editors

    _git(workspace, "init", "-q", "-b", "main")
    (workspace / "shared.txt").write_text("base\n")
    _git(workspace, "add", "shared.txt")
    _git(workspace, "commit", "-q", "-m", "base")
    types = [AgentType(name=n, isolation="worktree", placement="ray") for n in ("ed_a", "ed_b")]
    _outcome, events = await _two_editors(workspace, "write", agent_types=types)
    _check_two_branches_kept(workspace, events)
    assert _branches(workspace)[0] == "main"
    writes = [e for e in by_type(events, ToolFinished) if e.name == "write"]
    assert len(writes) == 2
    assert all(e.tool_use_id.startswith("h") for e in writes), "the edits ran on Ray hosts"


def _background_on_ray(worker_turns: list[dict[str, Any]], tools: list[str] | None = None
                       ) -> dict[str, Any]:  # fmt: skip
    call = agent_call("side task", "worker", run_in_background=True)
    return {"agents": {
        "main": {"turns": [
            {"text": "Starting it.", "tool_calls": [call]},
            {"text": "Meanwhile, my own part."},
            {"text": "Both parts are in."}]},
        "worker": _remote({"tools": tools or [], "turns": worker_turns}),
    }}  # fmt: skip


async def test_a_background_child_of_a_ray_type_runs_on_a_host_and_reports_to_its_parent(
    workspace: Path,
) -> None:
    # Long enough that the parent's second turn surely comes first: it did not wait.
    scenario = _background_on_ray([{"text": "side result", "delay_s": 1.0}])
    outcome, events = await run_scenario(scenario, workspace)
    assert (outcome.status, outcome.turns, outcome.result) == ("completed", 3, "Both parts are in.")
    [child] = [e for e in by_type(events, AgentStarted) if e.name == "worker"]
    assert isinstance(child, AgentStarted)
    assert child.background
    assert child.parent_agent_id == outcome.agent_id
    [call] = [e for e in by_type(events, ToolFinished) if e.name == "agent"]
    assert isinstance(call, ToolFinished)
    assert call.status == "ok"
    assert call.output.startswith(f"Started sub-agent {child.agent_id} (side task) in the background")
    [end] = [e for e in by_type(events, AgentFinished) if e.agent_id == child.agent_id]
    assert (end.status, end.result) == ("completed", "side result")  # type: ignore[attr-defined]
    [report] = [e for e in by_type(events, UserMessage) if e.agent_id == outcome.agent_id]
    assert report.text == (  # type: ignore[attr-defined]
        f"[background sub-agent {child.agent_id} (side task) ended completed]\nside result"
    )
    second_turn = [e for e in by_type(events, TurnFinished) if e.agent_id == outcome.agent_id][1]
    parent_end = next(e for e in by_type(events, AgentFinished) if e.agent_id == outcome.agent_id)
    order = [events.index(e) for e in (call, second_turn, end, report, parent_end)]
    assert order == sorted(order)
    check_invariants(events)


@pytest.mark.parametrize("how", ["cancel of the parent", "parent out of turns"])
async def test_a_background_child_on_ray_ends_with_its_parent_agent(
    workspace: Path, how: str
) -> None:
    pidfile = workspace / "pid"
    scenario = _background_on_ray([
        {"tool_calls": [{"name": "bash", "input": {"command": f"echo $$ > {pidfile}; exec sleep 30"}}]},
        {"text": "never"}], tools=["bash"])  # fmt: skip
    limits = Limits(max_turns=2) if how == "parent out of turns" else None
    if limits is not None:
        # Its second turn waits in a call until the remote bash runs, then its limit ends it.
        wait = f"while [ ! -s {pidfile} ]; do sleep 0.05; done"
        scenario["agents"]["main"]["turns"][1]["tool_calls"] = [
            {"name": "bash", "input": {"command": wait}}]
        scenario["agents"]["main"]["tools"] = ["agent", "bash"]
    events = EventLog()
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False, limits=limits,
                            permission_mode="allow-all", on_event=events) as rt:  # fmt: skip
        handle = await rt.start("go")
        pid = int(await _wait_for_file(pidfile))
        if how == "cancel of the parent":
            assert await rt.cancel(handle.agent_id, "the user gave up")
        outcome = await handle.wait()
    check_invariants(events)
    [child] = [e for e in by_type(events, AgentStarted) if e.name == "worker"]
    [end] = [e for e in by_type(events, AgentFinished) if e.agent_id == child.agent_id]
    [bash] = [e for e in by_type(events, ToolFinished)
              if e.name == "bash" and e.agent_id == child.agent_id]  # fmt: skip
    assert bash.status == "cancelled"  # type: ignore[attr-defined]
    assert end.status == "cancelled"  # type: ignore[attr-defined]
    if how == "cancel of the parent":
        assert outcome.status == "cancelled"
        assert end.error == "cancelled: the user gave up"  # type: ignore[attr-defined]
    else:
        assert outcome.status == "max_turns"
        assert end.error == (  # type: ignore[attr-defined]
            f"cancelled: its parent agent {outcome.agent_id} ended (max_turns)"
        )
    assert _pid_gone(pid), "the cancelled remote bash left its process behind"


async def test_a_background_child_on_ray_over_a_loopback_openai_server(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    from tests.test_collaboration import background_child_over_http

    # The same run and checks as in-process; the child's requests come from the Ray worker.
    rt = await background_child_over_http(
        nursery, tmp_path, agent_types=[AgentType(name="general", placement="ray")]
    )
    assert len(rt._run.placements["ray"].start_latencies) == 1, "a host ran the child"
