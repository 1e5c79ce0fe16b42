"""Replay benchmark: ``replay --mock-tools`` of a 1,000-sub-agent trace against the same run
played from its scenario, in the same process.

``replay_fanout_1000`` — the fan-out of bench_core (a root starts 1,000 sub-agents in one turn;
each makes one ``echo`` call, then answers) is recorded once with the scripted provider. Then,
alternating within each repetition: the run from its scenario (the floor), and the replay of its
trace with mock tools (the value), reading the trace included. Wall time from opening the
runtime (and, for the replay, from reading the trace) to the trace closed; median of ``--reps``;
``cpu_ratio`` is the same ratio in CPU time of the process (steadier on a shared machine).
Target (issue 19): ratio <= 1.5.

Usage: ``python bench/bench_replay.py [--reps N] [--agents N]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))

from bench_core import EchoTool, _limits, _quiet_logs, fanout_scenario

from runtime import open_runtime
from runtime.core._agent_types import AgentType
from runtime.replay import Replayer, load_recording
from tools import builtin_tools


async def run_scenario(n: int, trace: Path, workdir: Path) -> float:
    t0 = time.perf_counter()
    async with open_runtime(
        scenario=fanout_scenario(n),
        workspace=workdir,
        trace=trace,
        extra_tools=[EchoTool()],
        limits=_limits(n),
    ) as rt:
        outcome = await rt.run("Split the work.")
    assert outcome.status == "completed", outcome
    return time.perf_counter() - t0


async def run_replay(n: int, recorded: Path, trace: Path, workdir: Path) -> float:
    t0 = time.perf_counter()
    rec = load_recording(recorded)
    replayer = Replayer(rec, strict=True)
    async with open_runtime(
        replayer,
        workspace=workdir,
        trace=trace,
        tools=replayer.mock_tools([*builtin_tools(), EchoTool()]),
        agent_types=[AgentType(name="worker", tools=("echo",))],
        limits=_limits(n),
    ) as rt:
        replayer.attach(rt._run)
        outcome = await rt.run(rec.roots[0].prompt)
        replayer.finish()
    assert outcome.status == "completed", outcome
    assert not replayer.divergences, replayer.divergences[:3]
    return time.perf_counter() - t0


async def bench(n: int, reps: int, workdir: Path) -> dict[str, object]:
    recorded = workdir / "recorded.jsonl"
    await run_scenario(n, recorded, workdir)
    await run_replay(n, recorded, workdir / "warm.jsonl", workdir)  # warm both paths
    scenario_s: list[float] = []
    replay_s: list[float] = []
    scenario_cpu: list[float] = []
    replay_cpu: list[float] = []
    for i in range(reps):
        cpu = time.process_time()
        scenario_s.append(await run_scenario(n, workdir / f"s{i}.jsonl", workdir))
        scenario_cpu.append(time.process_time() - cpu)
        cpu = time.process_time()
        replay_s.append(await run_replay(n, recorded, workdir / f"r{i}.jsonl", workdir))
        replay_cpu.append(time.process_time() - cpu)
    value = statistics.median(replay_s) * 1000
    floor = statistics.median(scenario_s) * 1000
    ratio = value / floor
    return {
        "name": f"replay_fanout_{n}",
        "value": round(value, 2),
        "floor": round(floor, 2),
        "ratio": round(ratio, 3),
        "unit": "ms (replay --mock-tools, trace read included / the same run from its scenario)",
        "target": "ratio <= 1.5",
        "met": ratio <= 1.5,
        # CPU time of this process: steadier than wall time on a shared machine.
        "cpu_ratio": round(statistics.median(replay_cpu) / statistics.median(scenario_cpu), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="repetitions (median)")
    parser.add_argument("--agents", type=int, default=1000, help="sub-agents in the fan-out")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    try:
        _quiet_logs()
        print(json.dumps(trio.run(bench, args.agents, args.reps, workdir)), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
