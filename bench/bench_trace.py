"""Benchmark: `trio-agents trace show --json` and `trace stats` on a million-event trace (issue #7).

The floor is the unavoidable part, measured in the same run: read the file line by line and
decode every line with orjson (the JSON library the reader uses), nothing else. Each figure is
the best of --repeat runs, each in a fresh subprocess (so imports count, and peak memory is the
process's own: ``ru_maxrss``). Target: each command at most 1.5x the floor, memory growing with
the number of nodes in the tree, not with the number of events.

The trace is a wide and deep tree built by tests/trace_factory.py (about 1M events: every agent
streams text in deltas, calls tools, some ask permission, some fail or are cancelled), merged by
time as the runtime would write it; it is cached under /tmp.

Prints one JSON object per line: {"name", "value", "floor", "ratio", "unit", "peak_rss_mb"}.

    .venv/bin/python bench/bench_trace.py [--repeat 3] [--fanouts 10,8,8,8,6]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("TRIO_AGENTS_BENCH_DIR", "/tmp/trio-agents-bench"))
CACHE_VERSION = 1

# Each child prints {"wall": s, "cpu": s, "rss_mb": MB} on its last stdout line; the command's
# own output goes to /dev/null (writing it is part of the cost).
_CHILD_PRELUDE = """
import os, sys, time
t0 = time.perf_counter(); c0 = time.process_time()
out = os.dup(1)
devnull = os.open(os.devnull, os.O_WRONLY)
os.dup2(devnull, 1)
"""
_CHILD_EPILOGUE = """
sys.stdout.flush()
wall = time.perf_counter() - t0; cpu = time.process_time() - c0
# VmHWM, not ru_maxrss: the latter survives exec and would count the forked parent's pages.
with open("/proc/self/status") as status:
    rss = next(int(l.split()[1]) for l in status if l.startswith("VmHWM")) / 1024
os.write(out, ('{"wall": %f, "cpu": %f, "rss_mb": %f, "rc": %d}\\n' % (wall, cpu, rss, rc)).encode())
"""
FLOOR = """
import orjson
loads = orjson.loads
with open(PATH, "rb", buffering=BUFFER) as f:
    for line in f:
        loads(line)
rc = 0
"""
# A reference, not a target: the least a tree builder in CPython can do. It reads and decodes
# only the lines a report needs (the reader's own skip rule), keeps each node as a bare list of
# the values of its docs/tree.md JSON (no node objects, no checks of the fields, no rollup, no
# placeholders for out-of-order events) and writes the tree as nested arrays, without the keys.
# Whatever the real command costs above this figure is the price of correctness and of the
# documented output; this figure's own ratio is what no Python implementation of the tree beats
# on this machine.
BOUND = """
import gc
import orjson
gc.disable()  # as the reader does while it builds
SKIPS = (b'{"type":"text_delta","seq":', b'{"type":"thinking_delta","seq":',
         b'{"type":"turn_finished","seq":')
loads = orjson.loads
tools = {}
agents = {}
roots = []
with open(PATH, "rb", buffering=BUFFER) as f:
    for line in f:
        if line.startswith(SKIPS) and line.endswith(b"}\\n"):
            continue
        d = loads(line)
        t = d["type"]
        if t == "tool_started":
            node = ["tool", d["tool_use_id"], d["name"], "running", None, d["summary"], d["ts"],
                    "", 0.0, None, []]
            tools[d["tool_use_id"]] = node
            agents[d["agent_id"]][-1].append(node)
        elif t == "tool_finished":
            node = tools[d["tool_use_id"]]
            node[3] = d["status"]
            node[4] = d["duration_s"]
            node[7] = d["output"][:2000]
        elif t == "agent_started":
            parent = d["parent_tool_use_id"]
            node = ["agent", d["agent_id"], d["name"], "running", parent, None, 0, 0, 0, 0,
                    d["depth"], 0, d["ts"], None, None, None, []]
            agents[d["agent_id"]] = node
            (roots if parent is None else tools[parent][-1]).append(node)
        elif t == "agent_finished":
            node = agents[d["agent_id"]]
            node[3] = d["status"]
            node[5] = d["duration_s"]
            node[6] = d["input_tokens"]
            node[7] = d["output_tokens"]
            node[11] = d["turns"]
            node[13] = d["result"]
            node[14] = d["error"]
sys.stdout.buffer.write(orjson.dumps(roots))
rc = 0
"""
COMMAND = """
from runtime.cli._trace_cmd import main
rc = main(ARGV)
"""


def trace_file(fanouts: list[int]) -> tuple[Path, int]:
    """The cached benchmark trace for *fanouts* (generated on first use) and its line count."""
    CACHE.mkdir(parents=True, exist_ok=True)
    name = f"trace-v{CACHE_VERSION}-{'x'.join(map(str, fanouts))}.jsonl"
    path = CACHE / name
    count_file = path.with_suffix(".count")
    if path.exists() and count_file.exists():
        return path, int(count_file.read_text())
    sys.path.insert(0, str(ROOT / "tests"))
    import trace_factory as tf  # the tests' helper, only needed here

    started = time.perf_counter()
    tmp = path.with_suffix(".tmp")
    count = tf.write_trace(tmp, tf.run_events(tf.wide_deep(fanouts), order="time"))
    tmp.rename(path)
    count_file.write_text(str(count))
    print(
        f"# generated {path} ({count} events, {path.stat().st_size / 1e6:.0f} MB) "
        f"in {time.perf_counter() - started:.1f}s",
        file=sys.stderr,
    )
    return path, count


def run_child(body: str, **values: object) -> dict[str, float]:
    """Run *body* in a fresh interpreter; its timing and peak memory."""
    code = _CHILD_PRELUDE
    code += "".join(f"{key} = {value!r}\n" for key, value in values.items())
    code += body + _CHILD_EPILOGUE
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise SystemExit(f"benchmark child failed ({proc.returncode}):\n{proc.stderr}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    if result["rc"] != 0:
        raise SystemExit(f"command exited {result['rc']}:\n{proc.stderr}")
    return result


def compile_runtime() -> None:
    """Write the runtime's bytecode caches, as installing the package does.

    Where PYTHONDONTWRITEBYTECODE is set (this machine sets it), every child would otherwise
    compile runtime/*.py from source on import (about 30 ms, 0.04x of the floor): a cost a user's
    install never pays, and the floor (a compiled orjson) does not pay either.
    """
    compileall.compile_dir(ROOT / "runtime", quiet=1)


def warm(path: Path) -> None:
    """Read *path* so it is in the page cache: every job then starts from the same place and
    the figures compare work, not disk reads (this machine evicts idle cache pages)."""
    with path.open("rb") as f:
        while f.read(1 << 23):
            pass


def measure(
    path: Path, repeat: int, jobs: dict[str, tuple[str, dict[str, object]]]
) -> dict[str, dict[str, float]]:
    """The fastest of *repeat* runs of each job (the least disturbed by other work on the
    machine); the jobs take turns, so a busy spell slows them all alike."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in jobs}
    for _ in range(repeat):
        for name, (body, values) in jobs.items():
            warm(path)
            runs[name].append(run_child(body, **values))
    return {name: min(results, key=lambda r: r["wall"]) for name, results in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--fanouts", default="10,8,8,8,6", help="sub-agents per level")
    args = parser.parse_args()
    path, events = trace_file([int(x) for x in args.fanouts.split(",")])
    compile_runtime()
    print(
        f"# {events} events, {path.stat().st_size / 1e6:.0f} MB; best of {args.repeat}",
        file=sys.stderr,
    )
    commands = {
        "trace show --json": ["show", "--json", str(path)],
        "trace stats": ["stats", str(path)],
        "trace stats --json": ["stats", "--json", str(path)],
    }
    from runtime.trace._tracefile import READ_BUFFER  # the floor reads the file as the reader does

    files = {"PATH": str(path), "BUFFER": READ_BUFFER}
    jobs: dict[str, tuple[str, dict[str, object]]] = {"floor": (FLOOR, files)}
    jobs.update({name: (COMMAND, {"ARGV": argv}) for name, argv in commands.items()})
    jobs["bound: bare list tree, no checks"] = (BOUND, files)
    results = measure(path, args.repeat, jobs)
    floor = results.pop("floor")
    print(
        json.dumps(
            {
                "name": f"floor: read + orjson.loads every line ({events} events)",
                "value": round(floor["wall"], 3),
                "floor": round(floor["wall"], 3),
                "ratio": 1.0,
                "unit": "s",
                "peak_rss_mb": round(floor["rss_mb"], 1),
            }
        )
    )
    for name, result in results.items():
        print(
            json.dumps(
                {
                    "name": f"{name} ({events} events)",
                    "value": round(result["wall"], 3),
                    "floor": round(floor["wall"], 3),
                    "ratio": round(result["wall"] / floor["wall"], 3),
                    "unit": "s",
                    "peak_rss_mb": round(result["rss_mb"], 1),
                }
            )
        )
        print(
            f"# {name}: cpu {result['cpu']:.3f}s vs floor cpu {floor['cpu']:.3f}s "
            f"(ratio {result['cpu'] / floor['cpu']:.3f})",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
