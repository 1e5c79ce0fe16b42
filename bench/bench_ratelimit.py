"""Fan-outs against a rate-limited model server: the runtime and its peers, one server, one sitting.

The server is ``tests/ratelimit_server.py`` in a process of its own: an OpenAI-compatible Chat
Completions server that enforces ``--rps`` requests a second per key as the real API does (a
token bucket holding one second's worth; a refusal is a 429 with ``retry-after-ms``,
``retry-after`` and the ``x-ratelimit-*`` headers, which every reply carries). A root agent
fans out ``n`` sub-agents with its ``agent`` tool; each child makes one model call, the root two.

Each client runs in a subprocess of its own (``--client NAME``) with each framework's defaults:

* ``trio-agents``: ``open_runtime("openai")``, nothing configured (the limits are learned from
  the server's headers);
* ``trio-agents-configured``: the same with ``rate_limits={"openai": {"rpm": rps * 60}}``;
* ``openai-agents``, ``pydantic-ai``: the peers of ``bench/peers.py`` (shared with
  ``bench_http.py``), over ``AsyncOpenAI`` with its 2 retries.

A child that fails (its framework gave up on the 429s) is counted, not raised: the row says how
many of the ``n`` children completed, how many requests the server refused (``refused``: 429s)
and the wall time of the fan-out against the minimum, requests ÷ rate (``n + 2`` requests at
``rps`` a second). A peer not installed (``pip install -e '.[bench]'``) gets a row with
``skipped``.

Targets (docs/rate-limits.md, "Against the peers"): configured, wall within 1.15x of the minimum
and at most one 429; unconfigured, every child completes within 1.5x of the minimum; the
runtime completes more children than either peer.

``--strict concurrency`` or ``--strict rate``: the server states no limits at all and refuses
with ``429`` and ``retry-after: 1`` only (docs/rate-limits.md, "Learning the pace"), beyond 8
requests at once, each answered in 0.25 s (at most 32 a second: the minimum is ``(n + 2) /
32``), or beyond ``--rps`` a second, 2 at once (the minimum ``(n + 2) / rps``). Target: every
child completes within 5x the minimum (one call per ``retry-after`` would take ``n`` seconds).

``--admission N``: the CPU time of the limiter's own work per model call with nothing
configured and nothing refused (``ask``, ``wait``, ``settle``, ``done``; N calls, one at a time,
in one trio loop; ``getrusage``): what every call of an unlimited endpoint pays.

Usage: ``python bench/bench_ratelimit.py [--ns 30,100] [--rps 10] [--clients …] [--strict …]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers

ROOT = peers.ROOT
SERVER = "tests.ratelimit_server"  # run from ROOT (it shares tests/llm_server.py's HTTP)
CLIENTS = ("trio-agents", "trio-agents-configured", "openai-agents", "pydantic-ai")
MODEL = "bench-ratelimit"
STRICT_IN_FLIGHT, STRICT_ANSWER_S = 8, 0.25  # --strict concurrency: 8 at once, 0.25 s each


def _runtime_client(url: str, n: int, rps: float, configured: bool) -> Callable[[], int]:
    import trio

    from runtime import AgentFinished, open_runtime

    env = {"OPENAI_BASE_URL": url, "OPENAI_API_KEY": peers.KEY}
    limits = {"openai": {"rpm": rps * 60}} if configured else None

    async def go() -> int:
        done: list[str] = []

        def tap(event: Any) -> None:
            if isinstance(event, AgentFinished) and event.parent_tool_use_id is not None:
                done.append(event.status)

        async with open_runtime("openai", model=MODEL, env=env, trace=False, on_event=tap,
                                rate_limits=limits) as rt:
            await rt.run(f"FANOUT {n}")
        return done.count("completed")

    return lambda: trio.run(go)


def run_client(name: str, url: str, n: int, rps: float) -> dict[str, Any]:
    """In the client subprocess: set up, run the fan-out once, count and time it."""
    runtime = name.startswith("trio-agents")
    module = "runtime" if runtime else peers.PEERS[name][0]
    skipped = peers.missing(module)
    if skipped:
        return skipped
    if runtime:
        go = _runtime_client(url, n, rps, configured=name.endswith("configured"))
    else:
        go = peers.PEERS[name][1](url, n, MODEL, tolerant=True)
    t0 = time.perf_counter()
    completed = go()
    return {"wall_s": time.perf_counter() - t0, "completed": completed}


def measure(port: int, name: str, n: int, rps: float, strict: str | None = None) -> dict[str, Any]:
    """One client's fan-out of ``n`` in a subprocess of its own; its row."""
    peers.control(port, "POST", "/__reset")
    label = f"ratelimit_{n} {name}" + (f" strict-{strict}" if strict else "")
    row: dict[str, Any] = {"name": label, "client": name, "n": n, "rps": rps}
    if strict:
        row["strict"] = strict
    got = peers.run_client(__file__, ["--client", name, "--url", f"http://127.0.0.1:{port}/v1",
                                      "--n", str(n), "--rps", str(rps)])
    stats = peers.control(port, "GET", "/__stats")
    if "error" in got or "skipped" in got:
        return {**row, **got}
    capacity = STRICT_IN_FLIGHT / STRICT_ANSWER_S if strict == "concurrency" else rps
    minimum = (n + 2) / capacity
    row.update(
        completed=got["completed"],
        refused=stats["refused"],
        requests=stats["requests"],
        wall_s=round(got["wall_s"], 3),
        minimum_s=round(minimum, 3),
        vs_minimum=round(got["wall_s"] / minimum, 3),
    )
    # bench/run.py's columns: the wall time against the minimum.
    row.update(value=row["wall_s"], floor=row["minimum_s"], ratio=row["vs_minimum"], unit="s")
    return row


def _targets(rows: dict[str, dict[str, Any]]) -> None:
    peer_counts = [rows[p]["completed"] for p in ("openai-agents", "pydantic-ai")
             if "completed" in rows.get(p, {})]
    for name, factor, most_refused in (("trio-agents", 1.5, None),
                                       ("trio-agents-configured", 1.15, 1)):
        row = rows.get(name)
        if row is None or "completed" not in row:
            continue
        checks = [row["completed"] == row["n"], row["vs_minimum"] <= factor]
        if most_refused is not None:
            checks.append(row["refused"] <= most_refused)
        if peer_counts:
            checks.append(row["completed"] > max(peer_counts))
        row["target"] = (f"all {row['n']} complete, wall <= {factor} x minimum"
                         + (f", <= {most_refused} 429" if most_refused is not None else "")
                         + (", more complete than every peer" if peer_counts else ""))
        row["met"] = all(checks)


def _strict_targets(rows: dict[str, dict[str, Any]]) -> None:
    for row in rows.values():
        if "completed" in row:
            row["target"] = f"all {row['n']} complete, wall <= 5 x minimum"
            row["met"] = row["completed"] == row["n"] and row["vs_minimum"] <= 5


def main(args: argparse.Namespace) -> None:
    argv = ["-m", SERVER, "--rps", str(args.rps)]
    if args.strict:
        # A fan-out at one call per retry-after takes n seconds and more: let it finish.
        peers.CLIENT_TIMEOUT_S = max(peers.CLIENT_TIMEOUT_S, 1200)
        argv += ["--no-rate-headers", "--retry-after", "1"]
        if args.strict == "concurrency":
            argv += ["--rps", "1e9", "--max-in-flight", str(STRICT_IN_FLIGHT),
                     "--answer-s", str(STRICT_ANSWER_S)]
        else:
            argv += ["--burst", "2"]
    with peers.serving(argv) as port:
        for n in args.ns:
            rows = {name: measure(port, name, n, args.rps, args.strict)
                    for name in args.clients}
            (_strict_targets if args.strict else _targets)(rows)
            for row in rows.values():
                print(json.dumps(row), flush=True)


def admission(n: int) -> dict[str, Any]:
    """``--admission``: the limiter's CPU time per call, unlimited (see the module doc)."""
    import resource

    import trio

    from runtime.providers import EndpointLimiter

    async def go() -> float:
        limiter = EndpointLimiter("http://127.0.0.1:9/v1")
        t0 = resource.getrusage(resource.RUSAGE_SELF)
        for _ in range(n):
            ticket = limiter.ask(100, asked_at=trio.current_time())
            await limiter.wait(ticket)
            limiter.settle(ticket, 100, 7)
            limiter.done(ticket)
        t1 = resource.getrusage(resource.RUSAGE_SELF)
        return (t1.ru_utime + t1.ru_stime) - (t0.ru_utime + t0.ru_stime)

    cpu = trio.run(go)
    return {"name": "ratelimit_admission", "calls": n, "cpu_us_per_call": round(cpu / n * 1e6, 3)}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ns", type=_ints, default=[30, 100])
    parser.add_argument("--rps", type=float, default=10.0)
    parser.add_argument("--clients", type=lambda s: s.split(","), default=list(CLIENTS))
    parser.add_argument("--strict", choices=("concurrency", "rate"), default=None)
    parser.add_argument("--admission", type=int, default=None)
    args = parser.parse_args()
    if args.admission:
        print(json.dumps(admission(args.admission)))
    elif args.client:
        peers.client_main(lambda: run_client(args.client, args.url, args.n, args.rps))
    else:
        main(args)
