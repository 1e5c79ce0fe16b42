"""What the fan-out benchmarks share: the peers' clients and one process per client or server.

``bench_http.py`` and ``bench_ratelimit.py`` both fan out ``n`` sub-agents against a loopback
OpenAI-compatible server in a process of its own, each client in a subprocess of its own, and
both drive the same peers through their real OpenAI clients:

* ``openai-agents``: the OpenAI Agents SDK, its Chat Completions model over ``AsyncOpenAI``;
  the root's ``agent`` function tool runs a child agent, streamed, as the runtime's does.
* ``pydantic-ai``: Pydantic AI's ``OpenAIChatModel`` over ``AsyncOpenAI``, the same tool.

Each peer's fan-out returns how many children completed: a child that fails (its framework gave
up) is counted, not raised, and the model reads its error as the runtime's would. With
``tolerant`` the root's own failure is swallowed too (a rate-limited server may refuse the
root's last call); without it, it is the client's error.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Every client run is bounded in time; the slowest peer at N = 2,000 takes a few minutes.
CLIENT_TIMEOUT_S = 600
KEY = "bench-key-not-secret"


def agents_fanout(url: str, n: int, model: str, *, tolerant: bool = False) -> Callable[[], int]:
    """The OpenAI Agents SDK's fan-out of ``n`` (imported here, before any timing)."""
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
        llm = OpenAIChatCompletionsModel(model=model, openai_client=client)
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
        with contextlib.suppress(Exception) if tolerant else contextlib.nullcontext():
            result = Runner.run_streamed(root, f"FANOUT {n}", max_turns=5)
            async for _ in result.stream_events():
                pass
        await client.close()
        return completed

    return lambda: asyncio.run(go())


def pydantic_fanout(url: str, n: int, model: str, *, tolerant: bool = False) -> Callable[[], int]:
    """Pydantic AI's fan-out of ``n`` (imported here, before any timing)."""
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    async def go() -> int:
        completed = 0
        provider = OpenAIProvider(base_url=url, api_key=KEY)
        llm = OpenAIChatModel(model, provider=provider)
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

        with contextlib.suppress(Exception) if tolerant else contextlib.nullcontext():
            await root.run(f"FANOUT {n}")
        return completed

    return lambda: asyncio.run(go())


# name -> (the module it needs, its fan-out)
PEERS: dict[str, tuple[str, Callable[..., Callable[[], int]]]] = {
    "openai-agents": ("agents", agents_fanout),
    "pydantic-ai": ("pydantic_ai", pydantic_fanout),
}


def missing(module: str) -> dict[str, str] | None:
    """A ``skipped`` row's body when *module* cannot be imported, else ``None``."""
    try:
        __import__(module)
    except ImportError as exc:
        return {"skipped": f"{module} is not installed ({exc}): pip install -e '.[bench]'"}
    return None


def raise_fd_limit() -> None:
    """Open files up to the hard limit: a fan-out of 2,000 holds a socket per call."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def control(port: int, method: str, path: str) -> dict[str, Any]:
    """A server's ``GET /__stats`` or ``POST /__reset``, on a connection of its own."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=b"{}" if method == "POST" else None,
                     headers={"connection": "close", "content-type": "application/json"})
        return dict(json.loads(conn.getresponse().read()))
    finally:
        conn.close()


@contextlib.contextmanager
def serving(argv: Sequence[str]) -> Generator[int, None, None]:
    """Run a server that prints its port and serves until its stdin closes; yield the port."""
    server = subprocess.Popen(  # our own server script, our interpreter
        [sys.executable, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=ROOT,
    )
    try:
        assert server.stdout is not None
        yield int(server.stdout.readline())
    finally:
        assert server.stdin is not None
        server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def run_client(script: str, argv: Sequence[str]) -> dict[str, Any]:
    """Run ``script --client …`` in a subprocess of its own: its last line of JSON, or an
    ``error`` (its last line of stderr, or the timeout)."""
    try:
        proc = subprocess.run(  # our own script, our interpreter
            [sys.executable, script, *argv], capture_output=True, text=True,
            timeout=CLIENT_TIMEOUT_S, cwd=ROOT, check=False,
            env={**os.environ, "OPENAI_AGENTS_DISABLE_TRACING": "1"},
        )
    except subprocess.TimeoutExpired:
        return {"error": f"not done in {CLIENT_TIMEOUT_S} s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["(no output)"])[-1]}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def client_main(run: Callable[[], dict[str, Any]]) -> None:
    """In the client subprocess: run, with anything the frameworks print sent to stderr, and
    print the result as the one line of stdout."""
    with contextlib.redirect_stdout(sys.stderr):
        result = run()
    print(json.dumps(result))
