"""The ``ray`` placement on a simulated multi-node cluster: three Ray nodes on this machine
(``ray.cluster_utils.Cluster``: a head and two workers, one CPU and a small object store each),
with nodes added, removed and killed during runs.

Marked ``cluster``: ``pytest -m "not cluster"`` skips them for a quick run; CI runs them. One
cluster serves the module; a test that kills a node adds its own node first.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from runtime import (
    AgentFinished,
    AgentStarted,
    AgentType,
    Event,
    ToolStarted,
    decode_event,
    open_runtime,
)
from tests.harness import EventLog, agent_call
from tests.invariants import by_type, check_invariants

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[dev]')")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

_STORE = 80 * 1024 * 1024  # Ray's smallest object store is 75 MiB
_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A head and two worker nodes on this machine (the second labelled ``pool=special``),
    and this process connected to it."""
    if ray.is_initialized():
        ray.shutdown()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    c = cluster_utils.Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "object_store_memory": _STORE, "include_dashboard": False},
    )
    try:
        c.add_node(num_cpus=1, object_store_memory=_STORE)
        c.add_node(num_cpus=1, object_store_memory=_STORE, labels={"pool": "special"})
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False, logging_level=logging.ERROR)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def _remote(script: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {**script, "placement": "ray", **extra}


def _host_of(tool_use_id: str) -> str:
    return tool_use_id.split(".", 1)[0]  # "h2.7.tu-1" -> "h2"


def _node_of(node: Any) -> str:
    return str(node.node_id)


async def test_subtrees_spread_over_every_node_and_labels_choose_nodes(
    cluster: Any, workspace: Path
) -> None:
    glob = {"name": "glob", "input": {"pattern": "*"}}
    scenario = {"agents": {
        # The specials come in a turn of their own: placed beside the workers, they may take the
        # labelled node's host before the workers do (their only host is ready sooner), and
        # then the least loaded hosts for the workers are the other two.
        "main": {"turns": [
            {"tool_calls": [agent_call(f"w{i}", "worker") for i in range(6)]},
            {"tool_calls": [agent_call(f"s{i}", "special") for i in range(2)]},
            {"text": "all done"}]},
        "worker": _remote({"tools": ["glob"], "turns": [
            {"tool_calls": [glob]}, {"text": "w", "delay_s": 0.3}]}),
        "special": _remote({"tools": ["glob"], "turns": [
            {"tool_calls": [glob]}, {"text": "s"}]})}}
    special = AgentType(name="special", placement="ray", ray_labels={"pool": "special"})
    events = EventLog()
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                            agent_types=[special], on_event=events) as rt:
        outcome = await rt.run("go")
        pool = {h["name"]: h for h in rt._run.placements["ray"].pool()}  # type: ignore[attr-defined]
    check_invariants(events)
    assert outcome.result == "all done"
    nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert {h["node"] for h in pool.values()} == nodes, "one host on every node"
    names = {e.agent_id: e.name for e in by_type(events, AgentStarted)}  # type: ignore[attr-defined]
    used: dict[str, list[str]] = {"worker": [], "special": []}
    for call in by_type(events, ToolStarted):
        if call.name == "glob":  # type: ignore[attr-defined]
            host = pool[_host_of(call.tool_use_id)]  # type: ignore[attr-defined]
            used[names[call.agent_id]].append(host["node"])
    # The least loaded host takes the next subtree: two of the six on each of the three nodes.
    assert set(used["worker"]) == nodes
    assert sorted(Counter(used["worker"]).values()) == [2, 2, 2]
    labelled = next(n["NodeID"] for n in ray.nodes()
                    if n["Alive"] and n.get("Labels", {}).get("pool") == "special")
    assert set(used["special"]) == {labelled}


async def test_pack_keeps_every_subtree_on_this_machines_node(
    cluster: Any, workspace: Path
) -> None:
    from runtime import RayOptions

    glob = {"name": "glob", "input": {"pattern": "*"}}
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call(f"w{i}", "worker") for i in range(4)]},
                           {"text": "all done"}]},
        "worker": _remote({"tools": ["glob"], "turns": [{"tool_calls": [glob]}, {"text": "w"}]})}}
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                            ray=RayOptions(strategy="pack", hosts_per_node=2)) as rt:
        outcome = await rt.run("go")
        pool = rt._run.placements["ray"].pool()  # type: ignore[attr-defined]
    assert outcome.result == "all done"
    assert [h["node"] for h in pool] == [ray.get_runtime_context().get_node_id()] * 2


async def test_a_host_that_fails_its_workspace_check_leaves_the_pool(
    cluster: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runtime.cluster import _placement
    from runtime.cluster._host import RayHost

    blind = sorted(_node_of(n) for n in cluster.worker_nodes)[0]

    # A node that does not mount the workspace cannot be made on one machine (every "node"
    # sees the same file system), so the host on one node says what such a host says.
    class HalfBlindHost(RayHost):
        async def check(self, workspace: str) -> str | None:
            if ray.get_runtime_context().get_node_id() == blind:
                return f"workspace {workspace!r} is not reachable on Ray worker (this node)"
            return await super().check(workspace)

    monkeypatch.setattr(_placement, "RayHost", HalfBlindHost)
    glob = {"name": "glob", "input": {"pattern": "*"}}
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call(f"w{i}", "worker") for i in range(6)]},
                           {"tool_calls": [agent_call("later", "worker")]},
                           {"text": "all done"}]},
        "worker": _remote({"tools": ["glob"], "turns": [{"tool_calls": [glob]}, {"text": "w"}]})}}
    events = EventLog()
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                            on_event=events) as rt:
        outcome = await rt.run("go")
        pool = {h["name"]: h for h in rt._run.placements["ray"].pool()}  # type: ignore[attr-defined]
    check_invariants(events)
    assert outcome.result == "all done"
    assert all(e.status == "completed" for e in by_type(events, AgentFinished))  # type: ignore[attr-defined]
    [refused] = [h for h in pool.values() if h["node"] == blind]
    assert refused["state"] == "dead"
    assert "not reachable" in refused["reason"]
    hosts = {_host_of(e.tool_use_id) for e in by_type(events, ToolStarted) if e.name == "glob"}  # type: ignore[attr-defined]
    assert refused["name"] not in hosts
    assert len(hosts) == 2, "the other two nodes took every subtree"


async def test_a_node_that_joins_during_a_run_gets_a_host(cluster: Any, workspace: Path) -> None:
    from runtime import RayOptions

    glob = {"name": "glob", "input": {"pattern": "*"}}
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call(f"w{i}", "worker") for i in range(8)]},
                           {"text": "all done"}]},
        "worker": _remote({"tools": ["glob"], "turns": [{"tool_calls": [glob]},
                                                        {"text": "w", "delay_s": 0.2}]})}}
    events = EventLog()
    newcomer = None
    try:
        async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                                on_event=events,
                                ray=RayOptions(refresh_s=0.5, host_timeout_s=60)) as rt:
            placement = rt._run.placements["ray"]  # type: ignore[attr-defined]
            await rt.run("go")
            before = {h["node"] for h in placement.pool()}
            # Ray starts a node from the main thread only: the run waits meanwhile.
            newcomer = cluster.add_node(num_cpus=1, object_store_memory=_STORE)
            with trio.fail_after(30):
                while not [h for h in placement.pool()  # noqa: ASYNC110 - the keeper's work
                           if h["node"] == newcomer.node_id and h["state"] == "ready"]:
                    await trio.sleep(0.1)
            seen = len(events)
            await rt.run("go again")
            pool = {h["name"]: h["node"] for h in placement.pool()}
    finally:
        if newcomer is not None:
            cluster.remove_node(newcomer, allow_graceful=False)
    check_invariants(events)
    assert newcomer.node_id not in before
    used = {pool[_host_of(e.tool_use_id)] for e in by_type(events[seen:], ToolStarted)  # type: ignore[attr-defined]
            if e.name == "glob"}  # type: ignore[attr-defined]
    assert newcomer.node_id in used, "the new node's host took subtrees"


def _sleepers(n: int, pid_dir: Path) -> dict[str, Any]:
    # Each bash leaves a background job (bash's own group, a grandchild of the worker).
    command = f"sleep 60 & echo $! > $(mktemp -p {pid_dir} pid.XXXXXX); wait"
    return {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call(f"s{i}", "sleeper") for i in range(n)]},
                           {"text": "carried on"}]},
        "sleeper": _remote({"tools": ["bash"], "turns": [
            {"tool_calls": [{"name": "bash", "input": {"command": command}}]},
            {"text": "slept"}]})}}


async def _wait_for_pids(pid_dir: Path, n: int) -> list[int]:
    # Written by processes on the Ray workers: no trio event can tell the test, so poll.
    with trio.fail_after(30):
        while True:
            pids = [p.read_text().strip() for p in pid_dir.iterdir()]  # noqa: ASYNC240
            if len(pids) == n and all(pids):
                return [int(p) for p in pids]
            await trio.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_a_raylet_killed_with_sigkill_leaves_no_process_of_the_run(
    cluster: Any, tmp_path: Path
) -> None:
    victim = cluster.add_node(num_cpus=1, object_store_memory=_STORE)
    cluster.wait_for_nodes()
    workspace = tmp_path / "ws"
    pid_dir = tmp_path / "pids"
    workspace.mkdir()
    pid_dir.mkdir()
    events = EventLog()
    raylet = victim.all_processes["raylet"][0].process.pid
    survivors: list[int] = []
    try:
        async with open_runtime(scenario=_sleepers(4, pid_dir), workspace=workspace,
                                trace=False, permission_mode="allow-all",
                                on_event=events) as rt:
            handle = await rt.start("go")
            await _wait_for_pids(pid_dir, 4)
            # The run's processes on the victim node: its host worker and all it started.
            run_pids = [c.pid for c in psutil.Process(raylet).children()
                        if "RayHost" in " ".join(c.cmdline())]
            assert len(run_pids) == 1, "one host on the new node"
            run_pids += [c.pid for c in psutil.Process(run_pids[0]).children(recursive=True)]
            assert len(run_pids) >= 3, "the worker, bash and its background sleep"
            os.kill(raylet, signal.SIGKILL)
            t0 = trio.current_time()
            lost = await events.wait_for(lambda evs: [
                e for e in by_type(evs, AgentFinished) if "node lost" in (e.error or "")])  # type: ignore[attr-defined]
            failed_after = trio.current_time() - t0
            with trio.move_on_after(10):
                while any(_alive(p) for p in run_pids):  # noqa: ASYNC110 - other processes
                    await trio.sleep(0.05)
            survivors = [p for p in run_pids if _alive(p)]
            await rt.cancel(handle.agent_id, "the test is over")
            await handle.wait()
    finally:
        for pid in survivors:
            psutil.Process(pid).kill()
        cluster.remove_node(victim, allow_graceful=False)
    assert survivors == [], "a process of the run outlived its node's raylet"
    assert failed_after < 5.0, failed_after
    check_invariants(events)
    assert lost[0].status == "failed"  # type: ignore[attr-defined]
    assert "raylet" in lost[0].error  # type: ignore[attr-defined]


def _read_json_lines(proc: subprocess.Popen[bytes], until: Any, timeout: float) -> list[bytes]:
    """Lines of *proc*'s stdout until ``until(events)`` holds (or the stream ends)."""
    assert proc.stdout is not None
    lines: list[bytes] = []
    events: list[Event] = []
    deadline = time.monotonic() + timeout
    buf = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if not ready:
            continue
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            assert proc.stderr is not None
            raise AssertionError(f"the run ended early: {proc.stderr.read().decode()[-2000:]}")
        buf += chunk
        *whole, buf = buf.split(b"\n")
        for line in whole:
            lines.append(line)
            events.append(decode_event(line))
        if until(events):
            return lines
    raise AssertionError(f"not seen in {timeout} s; last lines: {lines[-3:]}")


def _env() -> dict[str, str]:
    # No address; but Ray's authentication settings stay (a cluster started by this process
    # after a private one uses token authentication, and says so only in the environment).
    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}


def _cli(*args: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "runtime", "run", "go", "--json", "--permission-mode",
         "allow-all", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=_ROOT)


def test_removing_a_node_during_a_json_run_keeps_stdout_to_events(
    cluster: Any, tmp_path: Path
) -> None:
    victim = cluster.add_node(num_cpus=1, object_store_memory=_STORE)
    cluster.wait_for_nodes()
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"agents": {
        "main": {"turns": [{"tool_calls": [agent_call(f"w{i}", "waiter") for i in range(6)]},
                           {"text": "carried on"}]},
        "waiter": _remote({"turns": [{"text": "waited", "delay_s": 4}]})}}))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = _env()
    proc = _cli("--scenario", str(scenario), "--workspace", str(workspace), "--no-trace",
                "--ray-address", cluster.address, env=env)
    try:
        head = _read_json_lines(
            proc, lambda evs: len([e for e in evs if e.type == "agent_started"]) == 7, 60)
        cluster.remove_node(victim, allow_graceful=False)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err.decode()[-2000:]
    lines = head + [line for line in out.split(b"\n") if line]
    events = [decode_event(line) for line in lines]  # every line is an event
    check_invariants(events)
    ends = by_type(events, AgentFinished)
    lost = [e for e in ends if "node lost" in (e.error or "")]  # type: ignore[attr-defined]
    errors = [e.error for e in ends]  # type: ignore[attr-defined]
    assert lost, f"the subtrees on the removed node ended failed, naming the loss: {errors}"
    assert all(e.status == "failed" for e in lost)  # type: ignore[attr-defined]
    assert ends[-1].result == "carried on"  # type: ignore[attr-defined]


def test_without_an_address_on_a_cluster_machine_a_run_starts_its_own_cluster(
    cluster: Any, tmp_path: Path
) -> None:
    # The cluster fixture made this machine a node of a cluster (Ray's ray_current_cluster
    # file), as `ray start` does. The remote bash prints the GCS address its raylet uses.
    command = ("r=$(awk '{print $4}' /proc/$PPID/stat); "
               "tr '\\0' '\\n' < /proc/$r/cmdline | grep -e '--gcs-address' | head -1")
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("far", "far")]}, {"text": "done"}]},
        "far": _remote({"tools": ["bash"], "turns": [
            {"tool_calls": [{"name": "bash", "input": {"command": command}}]},
            {"text": "far done"}]})}}))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = _env()
    proc = _cli("--scenario", str(scenario), "--workspace", str(workspace), "--no-trace",
                env=env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-2000:]
    events = [decode_event(line) for line in out.splitlines()]
    check_invariants(events)
    [bash] = [e for e in events if e.type == "tool_finished" and e.name == "bash"]  # type: ignore[attr-defined]
    assert bash.status == "ok"  # type: ignore[attr-defined]
    assert "--gcs-address=" in bash.output  # type: ignore[attr-defined]
    assert cluster.address not in bash.output, "it joined the machine's cluster"  # type: ignore[attr-defined]
    assert events[-1].status == "completed"  # type: ignore[attr-defined]


async def test_remote_agents_take_messages(cluster: Any, workspace: Path) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("far", "far")]}, {"text": "done"}]},
        "far": _remote({"turns": [{"text": "thinking", "delay_s": 1.0},
                                  {"text": "got it"}]})}}
    events = EventLog()
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                            on_event=events) as rt:
        handle = await rt.start("go")
        [far] = await events.wait_for(
            lambda evs: [e for e in by_type(evs, AgentStarted) if e.depth == 1])  # type: ignore[attr-defined]
        assert rt.send_message(far.agent_id, "also check the README")  # type: ignore[arg-type]
        await handle.wait()
    check_invariants(events)
    [message] = [e for e in events if e.type == "user_message"]
    assert (message.agent_id, message.text) == (far.agent_id, "also check the README")  # type: ignore[attr-defined]
    assert not rt.send_message(far.agent_id, "too late")  # type: ignore[arg-type]
