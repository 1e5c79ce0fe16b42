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
* ``openai-agents``: the OpenAI Agents SDK over ``AsyncOpenAI`` (its client's 2 retries);
* ``pydantic-ai``: Pydantic AI's ``OpenAIChatModel`` over ``AsyncOpenAI`` (the same client).

A child that fails (its framework gave up on the 429s) is counted, not raised: the row says how
many of the ``n`` children completed, how many requests the server refused (``refused``: 429s)
and the wall time of the fan-out against the minimum, requests ÷ rate (``n + 2`` requests at
``rps`` a second). A peer not installed (``pip install -e '.[bench]'``) gets a row with
``skipped``.

Targets (docs/rate-limits.md, "Against the peers"): configured, wall within 1.15x of the minimum
and at most one 429; unconfigured, every child completes within 1.5x of the minimum; the
runtime completes more children than either peer.

Usage: ``python bench/bench_ratelimit.py [--ns 30,100] [--rps 10] [--clients …]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SERVER = "tests.ratelimit_server"  # run from ROOT (it shares tests/llm_server.py's HTTP)
CLIENTS = ("trio-agents", "trio-agents-configured", "openai-agents", "pydantic-ai")
CLIENT_TIMEOUT_S = 600
KEY = "bench-key-not-secret"
MODEL = "bench-ratelimit"


def _runtime_client(url: str, n: int, rps: float, configured: bool) -> Callable[[], int]:
    import trio

    from runtime import AgentFinished, open_runtime

    env = {"OPENAI_BASE_URL": url, "OPENAI_API_KEY": KEY}
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


def _agents_client(url: str, n: int, rps: float, configured: bool) -> Callable[[], int]:
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    async def go() -> int:
        completed = 0
        client = AsyncOpenAI(base_url=url, api_key=KEY)
        llm = OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
        child = Agent(name="general", instructions="Do the task.", model=llm)

        @function_tool
        async def agent(description: str, prompt: str) -> str:
            """Run a sub-agent on a task and return its answer."""
            nonlocal completed
            try:
                result = Runner.run_streamed(child, prompt)
                async for _ in result.stream_events():
                    pass
            except Exception as exc:  # the child gave up: counted, as the model would read it
                return f"failed: {exc}"
            completed += 1
            return str(result.final_output)

        root = Agent(name="main", instructions="Split the work.", model=llm, tools=[agent])
        with contextlib.suppress(Exception):  # the root's own last call may be refused too
            result = Runner.run_streamed(root, f"FANOUT {n}", max_turns=5)
            async for _ in result.stream_events():
                pass
        await client.close()
        return completed

    return lambda: asyncio.run(go())


def _pydantic_client(url: str, n: int, rps: float, configured: bool) -> Callable[[], int]:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    async def go() -> int:
        completed = 0
        provider = OpenAIProvider(base_url=url, api_key=KEY)
        llm = OpenAIChatModel(MODEL, provider=provider)
        child = Agent(llm, instructions="Do the task.")
        root = Agent(llm, instructions="Split the work.")

        @root.tool_plain
        async def agent(description: str, prompt: str) -> str:
            """Run a sub-agent on a task and return its answer."""
            nonlocal completed
            try:
                async with child.run_stream(prompt) as result:
                    async for _ in result.stream_text(delta=True):
                        pass
            except Exception as exc:  # the child gave up: counted, as the model would read it
                return f"failed: {exc}"
            completed += 1
            return "done"

        with contextlib.suppress(Exception):  # the root's own calls may be refused too
            await root.run(f"FANOUT {n}")
        return completed

    return lambda: asyncio.run(go())


_FACTORIES: dict[str, tuple[str, Callable[..., Callable[[], int]], bool]] = {
    "trio-agents": ("runtime", _runtime_client, False),
    "trio-agents-configured": ("runtime", _runtime_client, True),
    "openai-agents": ("agents", _agents_client, False),
    "pydantic-ai": ("pydantic_ai", _pydantic_client, False),
}


def run_client(name: str, url: str, n: int, rps: float) -> dict[str, Any]:
    """In the client subprocess: set up, run the fan-out once, count and time it."""
    module, factory, configured = _FACTORIES[name]
    try:
        __import__(module)
    except ImportError as exc:
        return {"skipped": f"{module} is not installed ({exc}): pip install -e '.[bench]'"}
    go = factory(url, n, rps, configured)
    t0 = time.perf_counter()
    completed = go()
    return {"wall_s": time.perf_counter() - t0, "completed": completed}


def _control(port: int, method: str, path: str) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=b"{}" if method == "POST" else None,
                     headers={"connection": "close", "content-type": "application/json"})
        return dict(json.loads(conn.getresponse().read()))
    finally:
        conn.close()


def measure(port: int, name: str, n: int, rps: float) -> dict[str, Any]:
    """One client's fan-out of ``n`` in a subprocess of its own; its row."""
    _control(port, "POST", "/__reset")
    row: dict[str, Any] = {"name": f"ratelimit_{n} {name}", "client": name, "n": n, "rps": rps}
    try:
        proc = subprocess.run(  # our own script, our interpreter
            [sys.executable, __file__, "--client", name, "--url", f"http://127.0.0.1:{port}/v1",
             "--n", str(n), "--rps", str(rps)],
            capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S, cwd=ROOT, check=False,
            env={**os.environ, "OPENAI_AGENTS_DISABLE_TRACING": "1"},
        )
    except subprocess.TimeoutExpired:
        row["error"] = f"not done in {CLIENT_TIMEOUT_S} s"
        return row
    stats = _control(port, "GET", "/__stats")
    if proc.returncode != 0:
        row["error"] = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return row
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skipped" in got:
        row["skipped"] = got["skipped"]
        return row
    minimum = (n + 2) / rps
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
    peers = [rows[p]["completed"] for p in ("openai-agents", "pydantic-ai")
             if "completed" in rows.get(p, {})]
    for name, factor, most_refused in (("trio-agents", 1.5, None),
                                       ("trio-agents-configured", 1.15, 1)):
        row = rows.get(name)
        if row is None or "completed" not in row:
            continue
        checks = [row["completed"] == row["n"], row["vs_minimum"] <= factor]
        if most_refused is not None:
            checks.append(row["refused"] <= most_refused)
        if peers:
            checks.append(row["completed"] > max(peers))
        row["target"] = (f"all {row['n']} complete, wall <= {factor} x minimum"
                         + (f", <= {most_refused} 429" if most_refused is not None else "")
                         + (", more complete than every peer" if peers else ""))
        row["met"] = all(checks)


def main(args: argparse.Namespace) -> None:
    server = subprocess.Popen(  # our own test server
        [sys.executable, "-m", SERVER, "--rps", str(args.rps)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        for n in args.ns:
            rows = {name: measure(port, name, n, args.rps) for name in args.clients}
            _targets(rows)
            for row in rows.values():
                print(json.dumps(row), flush=True)
    finally:
        assert server.stdin is not None
        server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


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
    args = parser.parse_args()
    if args.client:
        with contextlib.redirect_stdout(sys.stderr):
            result = run_client(args.client, args.url, args.n, args.rps)
        print(json.dumps(result))
    else:
        main(args)
