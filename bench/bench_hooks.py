"""What a hook costs a tool call (docs/hooks.md): a run with a no-op ``PreToolUse`` command hook
on every call, next to the same run without.

* ``tool_call_no_hook`` — a run whose root makes CALLS calls of a plain tool in one turn (one
  after another), then answers: us per call, against the bare-trio floor of the same events
  (floors.run_floor).
* ``tool_call_noop_hook`` — the same run with ``{"PreToolUse": [{"hooks": [{"type": "command",
  "command": "exit 0"}]}]}``: us per call, against the floor of a hook, which is a process
  start: ``trio.run_process(["bash", "-c", "exit 0"], ...)`` with the same JSON on stdin, its
  stdout and stderr read, in a session of its own (what a hook needs), measured in
  the same sitting (``ratio`` is this row's per-call *added* cost over that floor).
* ``hook_cpu`` — the CPU time a hook adds to a call (this process, and its children: the
  hooks' bash processes), against the CPU of the bare process start: it says more than the
  wall time on a loaded machine.

A hook is a process start (fork/exec of bash, its reading of stdin, its exit and reap): the
runtime's own part is what is left over the floor. No target: a report.

Usage: ``python bench/bench_hooks.py [--reps N] [--calls N]``
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import floors

from runtime import Tool, ToolContext, event_to_dict, open_runtime

NOOP = {"PreToolUse": [{"hooks": [{"type": "command", "command": "exit 0"}]}]}


class CountTool(Tool):
    name = "count"
    description = "Count the words in a text."
    input_schema: dict[str, Any] = {  # noqa: RUF012 - the Tool interface's class attribute
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    }
    needs_permission = False

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        return str(len(args["text"].split()))


def scenario(calls: int) -> dict[str, Any]:
    made = [{"name": "count", "input": {"text": f"a b c {i}"}} for i in range(calls)]
    return {"agents": {"main": {"turns": [{"tool_calls": made}, {"text": "counted"}]}}}


async def run_once(calls: int, workdir: Path, hooks: Any,
                   capture: list[dict[str, Any]] | None = None) -> float:
    events: list[Any] = []
    t0 = time.perf_counter()
    async with open_runtime(scenario=scenario(calls), workspace=workdir, trace=False,
                            extra_tools=[CountTool()], hooks=hooks,
                            on_event=events.append if capture is not None else None) as rt:
        outcome = await rt.run("Count.")
    elapsed = time.perf_counter() - t0
    assert outcome.status == "completed", outcome
    if capture is not None:
        capture.extend(event_to_dict(e) for e in events)
    return elapsed / calls


async def process_floor(calls: int, workdir: Path) -> float:
    """A hook's floor: bash started in its own session with the hook's JSON on stdin, its
    stdout and stderr read, waited for: per call."""
    bash = shutil.which("bash") or "/bin/sh"
    env = dict(os.environ)
    body = json.dumps({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "count",
                       "tool_input": {"text": "a b c"}}).encode()  # fmt: skip
    t0 = time.perf_counter()
    for _ in range(calls):
        await trio.run_process([bash, "-c", "exit 0"], stdin=body, capture_stdout=True,
                               capture_stderr=True, cwd=workdir, env=env,
                               start_new_session=True)
    return (time.perf_counter() - t0) / calls


def cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


async def bench(reps: int, calls: int, workdir: Path) -> list[dict[str, Any]]:
    captured: list[dict[str, Any]] = []
    await run_once(calls, workdir, None, captured)
    best = {"bare": float("inf"), "hook": float("inf"), "process": float("inf"),
            "floor": float("inf")}  # fmt: skip
    cpu_bare: list[float] = []
    cpu_hook: list[float] = []
    cpu_process: list[float] = []
    for _ in range(reps):  # alternate, so drift hits every row alike
        gc.collect()
        best["floor"] = min(best["floor"], await floors.run_floor(captured) / calls)
        c0 = cpu()
        best["bare"] = min(best["bare"], await run_once(calls, workdir, None))
        c1 = cpu()
        best["hook"] = min(best["hook"], await run_once(calls, workdir, NOOP))
        c2 = cpu()
        best["process"] = min(best["process"], await process_floor(calls, workdir))
        c3 = cpu()
        cpu_bare.append((c1 - c0) / calls)
        cpu_hook.append((c2 - c1) / calls)
        cpu_process.append((c3 - c2) / calls)
    added = best["hook"] - best["bare"]
    return [
        {"name": "tool_call_no_hook", "value": round(best["bare"] * 1e6, 1),
         "floor": round(best["floor"] * 1e6, 2), "ratio": round(best["bare"] / best["floor"], 2),
         "unit": f"us per call ({calls} calls in one turn, no hook)", "target": None,
         "met": None},
        {"name": "tool_call_noop_hook", "value": round(best["hook"] * 1e6, 1),
         "floor": round(best["process"] * 1e6, 1), "ratio": round(added / best["process"], 2),
         "unit": f"us per call with a no-op PreToolUse hook; ratio: added cost "
                 f"({added * 1e6:.0f} us) over a bare process start", "target": None,
         "met": None},
        {"name": "hook_cpu", "value": round((min(cpu_hook) - min(cpu_bare)) * 1e6, 1),
         "floor": round(min(cpu_process) * 1e6, 1),
         "ratio": round((min(cpu_hook) - min(cpu_bare)) / min(cpu_process), 2)
         if min(cpu_process) else None,
         "unit": "us CPU a hook adds to a call (this process and its children); floor: the "
                 "CPU of a bare process start", "target": None, "met": None},
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = trio.run(bench, args.reps, args.calls, Path(tmp))
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
