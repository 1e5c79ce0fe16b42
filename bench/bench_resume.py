"""Benchmark: `trio-agents resume` of a killed run against `trace show --json` of the same trace.

A resume reads the whole trace and rebuilds every agent (docs/resume.md), so its floor is what
reading the trace costs: `trace show --json` of the same file, the fastest reader of a trace
the runtime has (bench/bench_trace.py holds it to the bare orjson floor). Each trace is a real
run of the scripted provider (a root fans out to workers; each worker streams its text in
word-sized deltas and makes read-only `glob` calls), recorded once and cached under /tmp, then
cut before the root's last turn as a crash there would leave it: the resume rebuilds
everything and asks for one live turn. Each figure is the best of --repeat runs, in a fresh
subprocess each (imports count), the two commands taking turns; every resume starts from a
fresh copy of the cut trace (not timed). Target: ratio <= 1.5.

Both commands also pay a start that does not depend on the trace: the interpreter and, for
the resume, trio and the runtime a run needs (importing trio alone takes longer on this
machine than `trace show --json` of ten thousand events). So a trace of --start events (one
worker) is measured first, and each larger row also says how the part that grows with the
trace compares: "growth_ratio" = (resume - resume of the start trace) / (floor - floor of the
start trace), wall and CPU ("growth_cpu_ratio").

Prints one JSON object per line: {"name", "value", "floor", "ratio", "unit", "cpu",
"floor_cpu", "cpu_ratio", "events", "target", "met"} (and the growth ratios), and with --base
DIR (another revision's source tree, timed in the same sitting) "base_cpu" and
"base_cpu_ratio".

    .venv/bin/python bench/bench_resume.py [--repeat 3] [--sizes 10000,1000000] [--start 100]
        [--base DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("TRIO_AGENTS_BENCH_DIR", "/tmp/trio-agents-bench"))
CACHE_VERSION = 1
WORDS = ["scan", "the", "repository", "for", "failing", "tests", "and", "summarise", "what", "broke", "in", "each", "module"]
TURNS = 4  # per worker: each a sentence of deltas and one glob call


def scenario(workers: int) -> dict[str, Any]:
    text = " ".join(WORDS + WORDS[:8])  # 20 deltas
    turn = {"text": text, "tool_calls": [{"name": "glob", "input": {"pattern": "*.none"}}]}
    call = {"name": "agent", "input": {"description": "part", "prompt": "do it", "agent": "worker"}}
    return {"agents": {
        "main": {"tools": ["agent"], "turns": [
            {"text": "Splitting the work.", "tool_calls": [call] * workers},
            {"text": "All parts are done."}]},
        "worker": {"tools": ["glob"], "turns": [*[turn] * TURNS, {"text": "My part is done."}]},
    }}


def events_per_worker() -> int:
    # agent_started, per turn 20 deltas + turn_finished + tool_started + tool_finished, the
    # last turn's 4 deltas + turn_finished, agent_finished; the root's agent call start and end.
    return 1 + TURNS * 23 + 5 + 1 + 2


async def record(workers: int, trace: Path, workspace: Path) -> None:
    from runtime import open_runtime
    from runtime.core import Limits

    async with open_runtime(
        scenario=scenario(workers), workspace=workspace, trace=trace,
        limits=Limits(max_parallel=64, max_agents=workers + 10),
    ) as rt:
        outcome = await rt.run("Split the work.")
    assert outcome.status == "completed", outcome


def cut_before_last_turn(trace: Path) -> int:
    """Keep the lines before the root's last turn streamed (a crash there); returns how many."""
    lines = trace.read_bytes().splitlines(keepends=True)
    root_calls_done = max(i for i, ln in enumerate(lines) if b'"tool_finished"' in ln
                          and b'"parent_tool_use_id":null' in ln)
    kept = lines[: root_calls_done + 1]
    trace.write_bytes(b"".join(kept))
    return len(kept)


def trace_for(size: int) -> tuple[Path, Path, int]:
    """The cached cut trace of about *size* events, its scenario file and its line count."""
    workers = max(1, size // events_per_worker())
    folder = CACHE / f"resume-v{CACHE_VERSION}-{workers}"
    trace, scen = folder / "cut.jsonl", folder / "scenario.json"
    if not trace.exists():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "ws").mkdir(exist_ok=True)
        scen.write_text(json.dumps(scenario(workers)))
        full = folder / "full.jsonl"
        t0 = time.perf_counter()
        trio.run(record, workers, full, folder / "ws")
        print(f"# recorded {workers} workers in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        shutil.copyfile(full, trace)
        cut_before_last_turn(trace)
    return trace, scen, trace.read_bytes().count(b"\n")


def timed(args: list[str], cwd: Path, tree: Path | None = None) -> tuple[float, float]:
    """Wall and CPU seconds of one command (its output to /dev/null); with *tree*, the
    runtime is imported from that source tree."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    before = os.times()
    t0 = time.perf_counter()
    proc = subprocess.run(args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          check=False, env=env)
    wall = time.perf_counter() - t0
    after = os.times()
    if proc.returncode != 0:
        raise SystemExit(f"{args} exited {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    return wall, (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )


def measure(size: int, repeat: int, base: Path | None = None) -> dict[str, Any]:
    trace, scen, lines = trace_for(size)
    cli = [sys.executable, "-m", "runtime"]
    resume_args = [*cli, "resume", "t.jsonl", "--scenario", str(scen), "--workspace", "ws"]
    show: list[tuple[float, float]] = []
    resume: list[tuple[float, float]] = []
    before: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "ws").mkdir()
        for _ in range(repeat):
            show.append(timed([*cli, "trace", "show", "--json", str(trace)], work))
            shutil.copyfile(trace, work / "t.jsonl")
            resume.append(timed(resume_args, work))
            if base is not None:
                shutil.copyfile(trace, work / "t.jsonl")
                before.append(timed(resume_args, work, base))
    floor = (min(w for w, _ in show), min(c for _, c in show))
    value = (min(w for w, _ in resume), min(c for _, c in resume))
    out: dict[str, Any] = {
        "name": f"resume_{lines}_events", "value": round(value[0], 3), "floor": round(floor[0], 3),
        "ratio": round(value[0] / floor[0], 3), "unit": "s (wall; floor: trace show --json)",
        "cpu": round(value[1], 3), "floor_cpu": round(floor[1], 3),
        "cpu_ratio": round(value[1] / floor[1], 3), "events": lines,
        "target": "ratio <= 1.5", "met": value[0] / floor[0] <= 1.5,
    }
    if before:
        out["base_cpu"] = round(min(c for _, c in before), 3)
        out["base_cpu_ratio"] = round(out["base_cpu"] / floor[1], 3)
    return out


def compile_runtime() -> None:
    """Bytecode caches, as an install writes them (bench/bench_trace.py says why)."""
    import compileall

    compileall.compile_dir(ROOT / "runtime", quiet=1)
    compileall.compile_dir(ROOT / "tools", quiet=1)


def main() -> None:
    compile_runtime()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", default="10000,1000000", help="events per trace")
    parser.add_argument("--start", type=int, default=100,
                        help="events of the start trace the growth ratios subtract (0: none)")
    parser.add_argument(
        "--base", type=Path, default=None,
        help="the source tree of another revision (git archive REV | tar -x -C DIR): its "
        "resume is timed in the same sitting, taking turns with this one's",
    )
    args = parser.parse_args()
    if args.base is not None:
        import compileall

        for package in ("runtime", "tools"):
            compileall.compile_dir(args.base / package, quiet=1)
    start = measure(args.start, args.repeat, args.base) if args.start else None
    if start is not None:
        print(json.dumps(start), flush=True)
    for size in (int(s) for s in args.sizes.split(",")):
        row = measure(size, args.repeat, args.base)
        if start is not None:
            row.update(growth(row, start))
        print(json.dumps(row), flush=True)


def growth(row: dict[str, Any], start: dict[str, Any]) -> dict[str, float]:
    """The part of *row* that grows with the trace, against the floor's: both less what the
    start trace costs them."""
    out: dict[str, float] = {}
    for key, value, floor in (("growth_ratio", "value", "floor"),
                              ("growth_cpu_ratio", "cpu", "floor_cpu")):
        floor_part = row[floor] - start[floor]
        if floor_part > 0:
            out[key] = round((row[value] - start[value]) / floor_part, 3)
    return out


if __name__ == "__main__":
    main()
