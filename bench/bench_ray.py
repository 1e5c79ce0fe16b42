"""Remote subtrees on a local Ray cluster against the same runs in-process.

Three figures, each printed as one JSON object ``{"name", "value", "floor", "ratio", "unit"}``
where the *floor* is the same run with every agent in-process (``placement = "local"``):

* ``ray_fanout_wall_s`` — wall time of a run whose root starts N remote subtrees of 3 agents each
  (a sub-agent that starts two sub-agents of its own, on the worker), all at once.
* ``ray_fanout_events_per_s`` — events of that run delivered to a subscriber of the root stream,
  per second of wall time.
* ``ray_cancel_to_last_finished_s`` — from ``Runtime.cancel`` on the root of a 100-agent remote
  subtree (its 99 sub-agents waiting on their model) to the last ``agent_finished`` of that
  subtree in the root stream.

The cluster's start-up (seconds, once per process) is reported apart, as ``ray_init_s``, and the
host actor is started by a warm-up call before anything is timed. Ratios are value / floor (for
the rate, floor / value), so above 1 means "slower than in-process".

Usage: ``python bench/bench_ray.py [--subtrees 1000] [--cancel-agents 100] [--hosts 1]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime import AgentFinished, AgentStarted, Event, Limits, open_runtime


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


def _big(placement: str, agents: int) -> dict[str, Any]:
    return {"agents": {
        "main": {"turns": [{"tool_calls": [_call("big")]}, {"text": "carried on"}]},
        "warm": {"turns": [{"tool_calls": [_call("leafy")]}, {"text": "warm"}]},
        "leafy": {"placement": placement, "turns": [{"text": "warm"}]},
        "big": {"placement": placement, "turns": [
            {"tool_calls": [_call("waiter")] * (agents - 1)}, {"text": "never"}]},
        "waiter": {"turns": [{"text": "never", "delay_s": 600}]}}}


async def _fanout_run(placement: str, subtrees: int, workspace: Path) -> tuple[float, int]:
    """Wall time from start to the root's ``agent_finished`` READ by a subscriber, and the
    number of events that subscriber read by then."""
    limits = Limits(max_parallel=subtrees + 10, max_turns=10)
    received = 0
    t_end = 0.0
    async with open_runtime(scenario=_fanout(placement, subtrees), workspace=workspace,
                            trace=False, limits=limits) as rt:
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


async def _cancel_run(placement: str, agents: int, workspace: Path) -> float:
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
                            limits=limits, on_event=tap) as rt:
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

    os.environ["TRIO_AGENTS_RAY_HOSTS"] = str(args.hosts)
    t0 = time.perf_counter()
    await trio.to_thread.run_sync(lambda: None)  # trio's thread pool warm, not timed below
    _init_ray(ray, None, None)  # on the main thread: the cluster lives as long as we do
    init_s = time.perf_counter() - t0
    print(json.dumps({"name": "ray_init_s", "value": round(init_s, 3), "unit": "s"}), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        local_wall, local_events = await _fanout_run("local", args.subtrees, ws)
        ray_wall, ray_events = await _fanout_run("ray", args.subtrees, ws)
        assert ray_events == local_events, (ray_events, local_events)
        extra = {"subtrees": args.subtrees, "agents": 3 * args.subtrees + 1,
                 "events": ray_events, "hosts": args.hosts}
        _figure("ray_fanout_wall_s", ray_wall, local_wall, "s", **extra)
        _figure("ray_fanout_events_per_s", ray_events / ray_wall, local_events / local_wall,
                "events/s", **extra)
        local_cancel = await _cancel_run("local", args.cancel_agents, ws)
        ray_cancel = await _cancel_run("ray", args.cancel_agents, ws)
        _figure("ray_cancel_to_last_finished_s", ray_cancel, local_cancel, "s",
                agents=args.cancel_agents)
    ray.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subtrees", type=int, default=1000)
    parser.add_argument("--cancel-agents", type=int, default=100)
    parser.add_argument("--hosts", type=int, default=1)
    trio.run(main, parser.parse_args())
