"""The live view's cost: a CPU-bound run drawn on a real terminal against the same run without it.

The run (scripted provider, zero delays, so every millisecond is CPU): a main agent starts
``--agents`` (100) sub-agents in one turn, all running at once (``--max-parallel 1000``); each
streams ``--words`` (500) one-word text deltas on lines of a dozen words, makes one ``glob``
call, streams as many again and answers: about 100,000 deltas, under a second of CPU.

Every side is the real command, ``trio-agents run --scenario FILE … go``, called in-process
through the console script's own entry point (``runtime.cli._main.main``: argument parsing, the
session, the view, the trace file, the final tree and summary), in a child process whose
stdin, stdout and stderr are the slave side of a pty sized ``--size`` (160x50) that is its
controlling terminal; this script drains the master side at once, as a terminal emulator
would. So the view finds a terminal exactly as when a person runs the command (the Ctrl+C
picker is armed too), and pays for every byte it writes to it.

* **view** (the value): stdout is the pty: the live tree redraws while the run goes; the final
  tree, answer and summary are printed at the end; all of it is counted.
* **none** (the floor): the same command with stdout sent to ``/dev/null`` and the view replaced
  by a tap that only feeds the session's tree (as the session does with ``--json``): the run
  with no view at all. The tree is fed either way (the session keeps it for the picker and the
  summary), so the difference is what the view adds: its tap, its frames, the final print.
  ``--json`` itself was not taken: it encodes every event once more for stdout, work the view
  does not do, which would flatter the view.
* **plain** (reported as ``plain_ms``/``ratio_to_plain``): ``trio-agents run … > /dev/null``,
  the plain-line view that a run without a terminal gets.

Each mode runs once to warm up (imports, caches), then ``--reps`` (15) times, the three
alternating in a rotating order, with a garbage collection before each; each figure is the mean
of a mode's fastest third of runs (the machine is shared: the fastest runs are the least
disturbed, and a third of them is steadier than the single fastest). Trace file on (the default),
``--permission-mode allow-all`` (nothing to ask). The target (issue 20) is that the view costs at
most 10 % of the run's wall time: ratio <= 1.10. ``cpu_ratio`` is the same for the process's
CPU time (steadier on a loaded machine); extra fields give the frames drawn, their time, the
final print's time, the time in terminal writes and in the garbage collector (of the fastest
run with the view), and the bytes written to the terminal per run.

Usage: ``python bench/bench_live.py [--reps N] [--agents N] [--words N] [--size COLSxROWS]``
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gc
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 1.10
MODES = ("view", "none", "plain")


def scenario(agents: int, words: int) -> dict[str, Any]:
    """The run: *agents* parallel workers, each streaming 2 x *words* deltas and one tool call."""
    # A dozen words a line, so the text has many lines.
    rows = range(0, words, 12)
    text = "\n".join(" ".join(f"w{j}" for j in range(i, min(words, i + 12))) for i in rows)
    calls = [
        {"name": "agent", "input": {"description": f"part {i}", "prompt": "go", "agent": "w"}}
        for i in range(agents)
    ]
    return {
        "agents": {
            "main": {
                "turns": [
                    {"text": "Fanning out to the workers.", "tool_calls": calls},
                    {"text": "All parts are done."},
                ]
            },
            "w": {
                "tools": ["glob"],
                "turns": [
                    {"text": text, "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]},
                    {"text": text},
                ],
            },
        }
    }


# -- the child: runs the command on its terminal ---------------------------------------------


class TreeOnly:
    """The floor's "view": feeds the session's tree and draws nothing (what the session does
    itself when there is no view, as with ``--json``, without ``--json``'s own output)."""

    def __init__(self, tree: Any, out: Any) -> None:
        self.tree = tree
        self.tap = tree.apply

    async def run(self, *, task_status: Any) -> None:
        import trio

        task_status.started()
        await trio.sleep_forever()

    def finish(self, *, trace_path: Any) -> None:
        pass


def child(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(ROOT))
    import runtime.cli._live as live
    from runtime.cli._main import main as cli_main

    stats: dict[str, float] = {}
    finish = live.LiveView.finish
    plain_view = live.PlainView

    def counting_finish(self: live.LiveView, **kwargs: Any) -> None:
        t0 = time.perf_counter()
        finish(self, **kwargs)
        stats["final_s"] = time.perf_counter() - t0
        stats["frames"] = self.frames
        stats["render_s"] = self.render_s
        stats["max_frame_s"] = self.max_frame_s

    live.LiveView.finish = counting_finish  # type: ignore[method-assign]
    import runtime.cli._frame as frame

    write = frame.LiveRegion.write

    def timed_write(self: frame.LiveRegion, data: str) -> None:
        t0 = time.perf_counter()
        write(self, data)
        stats["write_s"] = stats.get("write_s", 0.0) + time.perf_counter() - t0

    frame.LiveRegion.write = timed_write  # type: ignore[method-assign]
    gc_started = [0.0]

    def gc_timer(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_started[0] = time.perf_counter()
        else:
            stats["gc_s"] = stats.get("gc_s", 0.0) + time.perf_counter() - gc_started[0]
            key = f"gc{info['generation']}"
            stats[key] = stats.get(key, 0) + 1

    gc.callbacks.append(gc_timer)

    work = Path(args.work)
    argv_base = ["run", "--scenario", args.scenario, "--permission-mode", "allow-all"]
    argv_base += ["--workspace", str(work / "ws"), "--max-parallel", "1000", *args.extra]
    terminal_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)

    def one(mode: str, n: int) -> float:
        trace = work / f"trace-{mode}-{n}.jsonl"
        argv = [*argv_base, "--trace", str(trace), "go"]
        stats.clear()
        sys.stdout.flush()
        os.dup2(terminal_fd if mode == "view" else devnull, 1)
        live.PlainView = TreeOnly if mode == "none" else plain_view  # type: ignore[misc]
        gc.collect()
        profile = None
        if args.profile and n == args.reps - 1:  # the last repetition, profiled
            import cProfile

            profile = cProfile.Profile()
            profile.enable()
        t0 = time.perf_counter()
        c0 = time.process_time()
        code = cli_main(argv)
        wall = time.perf_counter() - t0
        stats["cpu_s"] = time.process_time() - c0
        if profile is not None:
            profile.disable()
            profile.dump_stats(str(Path(args.profile) / f"{mode}.prof"))
        sys.stdout.flush()
        os.dup2(terminal_fd, 1)
        trace.unlink()
        if code != 0:
            raise SystemExit(f"bench_live: the {mode} run exited {code}")
        if (mode == "view") != ("frames" in stats):
            raise SystemExit(f"bench_live: the {mode} run drew the live view: {mode == 'view'}")
        return wall

    rows: list[dict[str, Any]] = []
    for mode in MODES:  # warm-up: imports, first-call caches
        one(mode, -1)
    for rep in range(args.reps):
        order = MODES[rep % len(MODES) :] + MODES[: rep % len(MODES)]
        for mode in order:
            wall = one(mode, rep)
            rows.append({"mode": mode, "wall_s": wall, **stats})
    with os.fdopen(args.result_fd, "w") as out:
        json.dump(rows, out)
    return 0


# -- the parent: a terminal for the child ----------------------------------------------------


def run_on_terminal(args: argparse.Namespace, work: Path, scenario_path: Path) -> tuple[Any, int]:
    cols, rows = args.size
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    read_end, write_end = os.pipe()
    drained = [0]

    def drain() -> None:  # the terminal emulator: reads whatever is written, at once
        while True:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # EIO: every slave descriptor is closed
                return
            if not chunk:
                return
            drained[0] += len(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()

    def controlling_terminal() -> None:  # runs in the child before exec
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    env = {**os.environ, "TERM": os.environ.get("TERM") or "xterm-256color"}
    env.pop("NO_COLOR", None)
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        "--reps",
        str(args.reps),
        "--scenario",
        str(scenario_path),
        "--work",
        str(work),
        "--result-fd",
        str(write_end),
        *[f"--extra={x}" for x in args.extra],
        *(["--profile", str(Path(args.profile).resolve())] if args.profile else []),
    ]
    proc = subprocess.Popen(  # our own script, our own interpreter
        cmd,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        pass_fds=(write_end,),
        preexec_fn=controlling_terminal,
        cwd=work,
        env=env,
    )
    os.close(slave)
    os.close(write_end)
    with os.fdopen(read_end) as results:
        data = results.read()
    code = proc.wait()
    reader.join(timeout=5)
    os.close(master)
    if code != 0 or not data:
        raise SystemExit(f"bench_live: the measuring process exited {code}")
    return json.loads(data), drained[0]


def fastest(runs: list[dict[str, Any]], key: str, keep: int) -> float:
    """The mean of the *keep* fastest runs: the least disturbed ones on a shared machine, and
    steadier than the single fastest."""
    return statistics.mean(sorted(r[key] for r in runs)[:keep])


def size(text: str) -> tuple[int, int]:
    cols, _, rows = text.partition("x")
    return int(cols), int(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15, help="alternating repetitions (best of)")
    parser.add_argument("--agents", type=int, default=100, help="parallel sub-agents")
    parser.add_argument("--words", type=int, default=500, help="deltas per sub-agent turn")
    parser.add_argument("--size", type=size, default=(160, 50), help="terminal COLSxROWS")
    parser.add_argument("--extra", action="append", default=[], help="another `run` argument")
    parser.add_argument("--verbose", action="store_true", help="every run's figures on stderr")
    parser.add_argument(
        "--profile", metavar="DIR", help="write a cProfile of each mode's last run (MODE.prof)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--scenario", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--result-fd", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    with tempfile.TemporaryDirectory(prefix="bench-live-") as tmp:
        work = Path(tmp)
        (work / "ws").mkdir()
        for i in range(5):
            (work / "ws" / f"file{i}.txt").write_text("x\n")
        scenario_path = work / "scenario.json"
        scenario_path.write_text(json.dumps(scenario(args.agents, args.words)))
        rows, drained = run_on_terminal(args, work, scenario_path)
    if args.verbose:
        for r in rows:
            print(json.dumps(r), file=sys.stderr)
    by_mode = {mode: [r for r in rows if r["mode"] == mode] for mode in MODES}
    keep = max(1, args.reps // 3)
    wall = {mode: fastest(runs, "wall_s", keep) for mode, runs in by_mode.items()}
    cpu = {mode: fastest(runs, "cpu_s", keep) for mode, runs in by_mode.items()}
    median = {mode: statistics.median(r["wall_s"] for r in runs) for mode, runs in by_mode.items()}
    view = min(by_mode["view"], key=lambda r: r["wall_s"])  # its frames, for the extra fields
    ratio = wall["view"] / wall["none"]
    load = float("nan")
    with contextlib.suppress(OSError):
        load = os.getloadavg()[0]
    result = {
        "name": f"live_view_{args.agents}",
        "value": round(wall["view"] * 1000, 1),
        "floor": round(wall["none"] * 1000, 1),
        "ratio": round(ratio, 3),
        "unit": (
            f"ms (`run`: {args.agents} parallel sub-agents x {2 * args.words} deltas; live "
            f"view on a {args.size[0]}x{args.size[1]} pty vs no view)"
        ),
        "target": f"ratio <= {TARGET_RATIO:g} (issue 20: the view costs at most 10 %)",
        "met": ratio <= TARGET_RATIO,
        "cost": round(ratio - 1, 3),
        "cpu_ratio": round(cpu["view"] / cpu["none"], 3),
        "median_ratio": round(median["view"] / median["none"], 3),
        "plain_ms": round(wall["plain"] * 1000, 1),
        "ratio_to_plain": round(wall["view"] / wall["plain"], 3),
        "frames": view.get("frames"),
        "frames_ms": round(view.get("render_s", 0.0) * 1000, 1),
        "max_frame_ms": round(view.get("max_frame_s", 0.0) * 1000, 2),
        "final_print_ms": round(view.get("final_s", 0.0) * 1000, 1),
        "terminal_write_ms": round(view.get("write_s", 0.0) * 1000, 2),
        "gc_ms": round(view.get("gc_s", 0.0) * 1000, 1),
        "terminal_bytes_per_run": drained // (args.reps + 1),
        "reps": args.reps,
        "fastest_kept": keep,
        "loadavg_1m": round(load, 2),
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
