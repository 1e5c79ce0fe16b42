"""Remote subtrees on a local Ray cluster against the same runs in-process.

Figures, each printed as one JSON object ``{"name", "value", "floor", "ratio", "unit"}``
where the *floor* is the same run with every agent in-process (``placement = "local"``):

* ``ray_oneshot_wall_s`` — wall time of a run whose root starts N (200) remote sub-agents that
  each answer in one model call, median of ``--reps`` runs alternating with the in-process run
  (target of issue 22: at most twice the in-process time).
* ``ray_start_loop_stall_ms`` — the longest the run's trio loop goes without running a 1 ms
  ticker while a run starts its host actors (the worst of 3 runs after the process's first,
  whose figure is printed beside it as ``first_run``): what starting hosts costs the live view
  and every local agent of the run.
* ``ray_subtree_start_s`` — in those runs, from a subtree being queued for its host to its first
  events arriving back (median; p90 and max alongside): what a remote subtree costs to start.

* ``ray_fanout_wall_s`` — wall time of a run whose root starts N remote subtrees of 3 agents each
  (a sub-agent that starts two sub-agents of its own, on the worker), all at once.
* ``ray_fanout_events_per_s`` — events of that run delivered to a subscriber of the root stream,
  per second of wall time.
* ``ray_cancel_to_last_finished_s`` — from ``Runtime.cancel`` on the root of a 100-agent remote
  subtree (its 99 sub-agents waiting on their model) to the last ``agent_finished`` of that
  subtree in the root stream.

The cluster's start-up (seconds, once per process) is reported apart, as ``ray_init_s``, and the
host actors are started by a warm-up call before anything is timed. Ratios are value / floor
(for the rate, floor / value), so above 1 means "slower than in-process". With ``--nodes 3`` the
cluster is three Ray nodes on this machine (``ray.cluster_utils``, one CPU each), so the pool
has a host on each node and subtrees are spread over them.

Usage: ``python bench/bench_ray.py [--oneshot 200] [--reps 5] [--subtrees 1000]
[--cancel-agents 100] [--hosts-per-node N] [--nodes 1]``
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime import AgentFinished, AgentStarted, Event, Limits, RayOptions, open_runtime


def _call(agent: str, description: str = "part") -> dict[str, Any]:
    return {"name": "agent", "input": {"description": description, "prompt": "do it",
                                       "agent": agent}}


def _fanout(placement: str, subtrees: int) -> dict[str, Any]:
    return {"agents": {
        "main": {"turns": [{"text": "Fanning out.", "tool_calls": [_call("sub")] * subtrees},
                           {"text": "All parts done."}]},
        "warm": {"turns": [{"tool_calls": [_call("leafy")]}, {"text": "warm"}]},
        "leafy": {"placement": placement, "turns": [{"text": "warm"}]},
        "sub": {"placement": placement, "turns": [
            {"text": "Splitting in two.", "tool_calls": [_call("leaf"), _call("leaf")]},
            {"text": "sub done"}]},
        "leaf": {"turns": [{"text": "leaf result here"}]}}}


def _oneshot(placement: str, n: int) -> dict[str, Any]:
    return {"agents": {
        "main": {"turns": [{"tool_calls": [_call("one")] * n}, {"text": "done"}]},
        "warm": {"turns": [{"tool_calls": [_call("one")] * 4}, {"text": "warm"}]},
        "one": {"placement": placement, "turns": [{"text": "one call's answer"}]}}}


async def _oneshot_run(placement: str, n: int, workspace: Path,
                       options: RayOptions) -> tuple[float, list[float]]:
    """Wall time of the root's run, and the start latency of each remote subtree."""
    limits = Limits(max_parallel=n + 10)
    async with open_runtime(scenario=_oneshot(placement, n), workspace=workspace, trace=False,
                            limits=limits, ray=options) as rt:
        await rt.run("warm up", agent_type="warm")
        placement_obj = rt._run.placements.get("ray")
        if placement_obj is not None:
            placement_obj.start_latencies.clear()
        t0 = time.perf_counter()
        outcome = await rt.run("go")
        wall = time.perf_counter() - t0
        latencies = list(placement_obj.start_latencies) if placement_obj else []
    assert outcome.status == "completed", outcome
    return wall, list(latencies)


async def _start_stalls(workspace: Path, options: RayOptions, runs: int) -> list[float]:
    """For each of *runs* runs of one remote sub-agent (each starting its hosts), the longest
    the run's trio loop went without scheduling a 1 ms ticker, in seconds."""
    scenario = {"agents": {"main": {"turns": [{"tool_calls": [_call("one")]}, {"text": "ok"}]},
                           "one": {"placement": "ray", "turns": [{"text": "remote"}]}}}
    stalls = []
    for _ in range(runs):
        gaps = [0.0]

        async def ticker(gaps: list[float] = gaps) -> None:
            last = time.perf_counter()
            while True:
                await trio.sleep(0.001)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                                    ray=options) as rt:
                assert (await rt.run("go")).status == "completed"
            nursery.cancel_scope.cancel()
        stalls.append(max(gaps))
    return stalls


def _big(placement: str, agents: int) -> dict[str, Any]:
    return {"agents": {
        "main": {"turns": [{"tool_calls": [_call("big")]}, {"text": "carried on"}]},
        "warm": {"turns": [{"tool_calls": [_call("leafy")]}, {"text": "warm"}]},
        "leafy": {"placement": placement, "turns": [{"text": "warm"}]},
        "big": {"placement": placement, "turns": [
            {"tool_calls": [_call("waiter")] * (agents - 1)}, {"text": "never"}]},
        "waiter": {"turns": [{"text": "never", "delay_s": 600}]}}}


async def _fanout_run(placement: str, subtrees: int, workspace: Path,
                      options: RayOptions) -> tuple[float, int]:
    """Wall time from start to the root's ``agent_finished`` READ by a subscriber, and the
    number of events that subscriber read by then."""
    limits = Limits(max_parallel=subtrees + 10, max_turns=10)
    received = 0
    t_end = 0.0
    async with open_runtime(scenario=_fanout(placement, subtrees), workspace=workspace,
                            trace=False, limits=limits, ray=options) as rt:
        await rt.run("warm up", agent_type="warm")

        async def consume(task_status: trio.TaskStatus[None]) -> None:
            nonlocal received, t_end
            with rt.subscribe(buffer=1_000_000, policy="block") as events:
                task_status.started()
                async for event in events:
                    received += 1
                    if isinstance(event, AgentFinished) and event.parent_tool_use_id is None:
                        t_end = time.perf_counter()
                        return

        async with trio.open_nursery() as nursery:
            await nursery.start(consume)
            t0 = time.perf_counter()
            outcome = await rt.run("go")
    assert outcome.status == "completed", outcome
    return t_end - t0, received


async def _cancel_run(placement: str, agents: int, workspace: Path, options: RayOptions) -> float:
    limits = Limits(max_parallel=agents + 10, max_turns=10)
    started: list[str] = []
    ended: dict[str, float] = {}
    enough = trio.Event()

    def tap(event: Event) -> None:
        if isinstance(event, AgentStarted) and event.depth >= 1:
            started.append(event.agent_id or "")
            if len(started) == agents:
                enough.set()
        elif isinstance(event, AgentFinished) and event.agent_id in started:
            ended[event.agent_id or ""] = time.perf_counter()

    async with open_runtime(scenario=_big(placement, agents), workspace=workspace, trace=False,
                            limits=limits, on_event=tap, ray=options) as rt:
        await rt.run("warm up", agent_type="warm")
        started.clear()
        ended.clear()
        handle = await rt.start("go")
        with trio.fail_after(60):
            await enough.wait()
        big = started[0]
        t0 = time.perf_counter()
        assert await rt.cancel(big, "bench cancel")
        outcome = await handle.wait()
    assert outcome.result == "carried on", outcome
    assert len(ended) == agents, (len(ended), agents)
    return max(ended.values()) - t0


def _figure(name: str, value: float, floor: float, unit: str, **extra: Any) -> None:
    ratio = floor / value if unit.endswith("/s") else value / floor
    print(json.dumps({"name": name, "value": round(value, 4), "floor": round(floor, 4),
                      "ratio": round(ratio, 3), "unit": unit, **extra}), flush=True)


async def main(args: argparse.Namespace) -> None:
    import ray

    from runtime.cluster._placement import _init_ray

    options = (
        RayOptions() if args.hosts_per_node is None else RayOptions(hosts_per_node=args.hosts_per_node)
    )
    t0 = time.perf_counter()
    await trio.to_thread.run_sync(lambda: None)  # trio's thread pool warm, not timed below
    cluster = None
    if args.nodes > 1:
        from ray.cluster_utils import Cluster

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        store = 80 * 1024 * 1024
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "object_store_memory": store, "include_dashboard": False})
        for _ in range(args.nodes - 1):
            cluster.add_node(num_cpus=1, object_store_memory=store)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)
    else:
        _init_ray(ray, None, None)  # on the main thread: the cluster lives as long as we do
    init_s = time.perf_counter() - t0
    cpus = min(float(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n["Alive"])
    where = {"nodes": args.nodes, "hosts_per_node": options.hosts_on(cpus)}
    print(json.dumps({"name": "ray_init_s", "value": round(init_s, 3), "unit": "s", **where}),
          flush=True)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ws = Path(tmp)
            # First: the first host of this process is the one Ray exports the class for.
            stalls = await _start_stalls(ws, options, 4)
            print(json.dumps({
                "name": "ray_start_loop_stall_ms", "value": round(1000 * max(stalls[1:]), 1),
                "unit": "ms (longest the run's trio loop went unscheduled while a run started "
                        "its hosts, the worst of 3 runs; a 1 ms ticker)",
                "first_run": round(1000 * stalls[0], 1), **where}), flush=True)
            local_walls, ray_walls, latencies = [], [], []
            for _ in range(args.reps):
                local_walls.append((await _oneshot_run("local", args.oneshot, ws, options))[0])
                wall, lat = await _oneshot_run("ray", args.oneshot, ws, options)
                ray_walls.append(wall)
                latencies += lat
            local_wall, ray_wall = statistics.median(local_walls), statistics.median(ray_walls)
            print(json.dumps({
                "name": "ray_oneshot_wall_s", "value": round(ray_wall, 4),
                "floor": round(local_wall, 4), "ratio": round(ray_wall / local_wall, 3),
                "unit": f"s ({args.oneshot} one-call sub-agents, median of {args.reps})",
                "target": "ratio <= 2 (issue 22)", "met": ray_wall <= 2 * local_wall,
                "load_avg_1m": round(os.getloadavg()[0], 2), **where}), flush=True)
            latencies.sort()
            print(json.dumps({
                "name": "ray_subtree_start_s", "value": round(statistics.median(latencies), 4),
                "unit": "s (queued for a host to first events back, median)",
                "p90": round(latencies[int(0.9 * (len(latencies) - 1))], 4),
                "max": round(latencies[-1], 4), "subtrees": len(latencies), **where}),
                flush=True)
            if args.subtrees:
                local_wall, local_events = await _fanout_run("local", args.subtrees, ws, options)
                ray_wall, ray_events = await _fanout_run("ray", args.subtrees, ws, options)
                assert ray_events == local_events, (ray_events, local_events)
                extra = {"subtrees": args.subtrees, "agents": 3 * args.subtrees + 1,
                         "events": ray_events, **where}
                _figure("ray_fanout_wall_s", ray_wall, local_wall, "s", **extra)
                _figure("ray_fanout_events_per_s", ray_events / ray_wall,
                        local_events / local_wall, "events/s", **extra)
            if args.cancel_agents:
                local_cancel = await _cancel_run("local", args.cancel_agents, ws, options)
                ray_cancel = await _cancel_run("ray", args.cancel_agents, ws, options)
                _figure("ray_cancel_to_last_finished_s", ray_cancel, local_cancel, "s",
                        agents=args.cancel_agents, **where)
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--oneshot", type=int, default=200)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--subtrees", type=int, default=1000, help="0: skip the fan-out")
    parser.add_argument("--cancel-agents", type=int, default=100, help="0: skip")
    parser.add_argument("--hosts-per-node", type=int, default=None,
                        help="host actors per node (default: the placement's own, RayOptions)")
    parser.add_argument("--nodes", type=int, default=1)
    trio.run(main, parser.parse_args())
