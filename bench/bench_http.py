"""Parallel sub-agents through a real HTTP model: the runtime, its peers and raw httpx, one server.

A loopback OpenAI-compatible Chat Completions server runs in its own process (``--serve``): a
small asyncio HTTP/1.1 server with keep-alive that answers a function of the request:

* the last message is a user's ``FANOUT n``: ``n`` calls of the request's ``agent`` tool, in one
  streamed turn (each call's string arguments say which child it is);
* the last message is a tool result: the root's short final answer (3 deltas);
* anything else is a child: 20 streamed text deltas, ``pace`` seconds apart (the model name says
  it: ``bench-paced-50`` paces 50 ms, so an answer takes about a second; ``bench-instant`` none).

Streamed replies (``stream: true``) are SSE over chunked encoding, one chunk per event, the last
one with usage; a request with ``stream: false`` gets the same answer as one JSON object. The
server counts the connections it accepts and the requests it serves (``GET /__stats``,
``POST /__reset``).

Each client runs in a subprocess of its own (``--client NAME``), so its imports, heap and
garbage weigh on no other, and reports the CPU time (``getrusage``) and wall time of its fan-out
alone (imports and set-up excluded: the runtime opens a runtime once before the timing, as the
peers import theirs; ``--opts '{"cold": true}'`` leaves that out), its peak RSS and whether
the answers were right:

* ``trio-agents``: ``open_runtime("openai")``, the real provider, ``OPENAI_BASE_URL`` at the
  server; a root agent fans out ``n`` sub-agents with its ``agent`` tool.
* ``openai-agents`` and ``pydantic-ai``: the peers of ``bench/peers.py`` (shared with
  ``bench_ratelimit.py``), through their real ``AsyncOpenAI`` clients; every child must
  complete.
* ``raw-httpx`` (the floor): the same requests with httpx and httpx-sse from trio: open, stream,
  parse every event with orjson, close; no agents, no events, no history.

A peer not installed (``pip install -e '.[bench]'``) gets a row with ``skipped`` and the reason.

Rows (one JSON object per client, N and pacing): ``value`` is client CPU per sub-agent in ms
(instant) or wall time in s (paced); every row also carries ``wall_s``, ``cpu_ms_per_agent``,
``connections`` (opened, counted at the server), ``requests``, ``server_cpu_s``,
``peak_rss_mb``. The floor of a row is the raw-httpx figure of the same N and pacing, measured
in the same run. A paced runtime row also has ``ideal_s`` (its answer time plus the client's and
the server's CPU over the cores: :func:`_ideal`), ``client_ideal_s`` and ``one_thread_s``.

Usage: ``python bench/bench_http.py [--ns 10,100,500,2000] [--paced-ns 200,2000]
[--clients trio-agents,openai-agents,pydantic-ai,raw-httpx] [--pace-ms 50] [--reps 1]``
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers

CLIENTS = ("trio-agents", "openai-agents", "pydantic-ai", "raw-httpx")
DELTAS = 20
# The paced answers on a sub-agent's path: the root's turns are instant, each child answers once.
PACED_TURNS = 1


def default_pool() -> int:
    """The runtime's default pool on this machine (runtime/providers/_pool.py: the open-files
    limit less 256, at most 10,000): its connections must stay within it. Imported here, not
    at the top, so that a peer's client process does not import the runtime."""
    from runtime.core import fan_out_default

    return fan_out_default()


# --------------------------------------------------------------------------------- the server


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


@dataclasses.dataclass
class _Answer:
    """What the server answers one request: text deltas and/or tool calls."""

    texts: list[str]
    calls: list[tuple[str, str]]  # (name, JSON arguments)
    pace_s: float


def _answer(request: dict[str, Any], serial: int) -> _Answer:
    model = str(request.get("model", ""))
    pace_s = int(model.rsplit("-", 1)[1]) / 1000 if model.startswith("bench-paced-") else 0.0
    messages = request.get("messages") or [{}]
    last = messages[-1]
    if last.get("role") == "tool":
        return _Answer(["All ", "children ", "answered."], [], 0.0)
    content = last.get("content")
    if isinstance(content, list):  # content parts (some clients send a user message so)
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    text = str(content or "")
    if text.startswith("FANOUT "):
        n = int(text.split()[1])
        tool = next(
            t["function"]
            for t in request.get("tools", ())
            if "agent" in t["function"]["name"]
        )
        props = tool.get("parameters", {}).get("properties", {})
        required = tool.get("parameters", {}).get("required") or list(props)
        calls = []
        for i in range(n):
            args = {k: f"child {i}" for k in required if props.get(k, {}).get("type") == "string"}
            calls.append((tool["name"], json.dumps(args)))
        return _Answer([], calls, 0.0)
    return _Answer([f"tok{i} " for i in range(DELTAS)], [], pace_s)


class _Server:
    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        self.serial = 0
        self.cpu0 = 0.0
        self.arrivals: list[float] = []
        self.cache: dict[tuple[str, int], list[bytes]] = {}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                _method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if path.endswith("/__stats"):
                    ru = resource.getrusage(resource.RUSAGE_SELF)
                    stats = {"connections": self.connections, "requests": self.requests,
                             "cpu_s": ru.ru_utime + ru.ru_stime - self.cpu0,
                             "arrivals": _spread(self.arrivals)}
                    await self._json(writer, json.dumps(stats).encode())
                elif path.endswith("/__reset"):
                    self.connections = self.requests = 0
                    self.arrivals = []
                    ru = resource.getrusage(resource.RUSAGE_SELF)
                    self.cpu0 = ru.ru_utime + ru.ru_stime
                    await self._json(writer, b"{}")
                else:
                    self.requests += 1
                    self.arrivals.append(time.monotonic())
                    await self._complete(writer, json.loads(body))
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    @staticmethod
    def _text_events(base: dict[str, Any], answer: _Answer, usage: dict[str, int]) -> list[bytes]:
        def event(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
            return _chunk(_sse({**base, "id": "chatcmpl-bench", "choices": [choice]}))

        return [
            event({"role": "assistant", "content": ""}),
            *(event({"content": text}) for text in answer.texts),
            event({}, "stop"),
            _chunk(_sse({**base, "id": "chatcmpl-bench", "choices": [], "usage": usage})),
            _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n",
        ]

    async def _json(self, writer: asyncio.StreamWriter, body: bytes) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (len(body), body)
        )
        await writer.drain()

    async def _complete(self, writer: asyncio.StreamWriter, request: dict[str, Any]) -> None:
        self.serial += 1
        serial = self.serial
        answer = _answer(request, serial)
        cid = f"chatcmpl-{serial}"
        base = {"id": cid, "object": "chat.completion.chunk", "created": 0,
                "model": request.get("model")}
        finish = "tool_calls" if answer.calls else "stop"
        usage = {"prompt_tokens": 10, "completion_tokens": DELTAS, "total_tokens": DELTAS + 10}
        if not request.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": "".join(answer.texts) or None}
            if answer.calls:
                message["tool_calls"] = [
                    {"id": f"call_{serial}_{i}", "type": "function",
                     "function": {"name": name, "arguments": args}}
                    for i, (name, args) in enumerate(answer.calls)
                ]
            if answer.pace_s:
                await asyncio.sleep(answer.pace_s * len(answer.texts))
            obj = {**base, "object": "chat.completion", "usage": usage,
                   "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
            await self._json(writer, json.dumps(obj).encode())
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        if not answer.calls:
            # A child's (or the final) answer is the same bytes every time: encoded once, so
            # the server keeps pace with thousands of streams on a shared machine.
            key = (str(request.get("model")), len(answer.texts))
            events = self.cache.get(key)
            if events is None:
                events = self.cache[key] = self._text_events(base, answer, usage)
            for i, data in enumerate(events):
                if answer.pace_s and 1 < i <= len(answer.texts):
                    await writer.drain()
                    await asyncio.sleep(answer.pace_s)
                writer.write(data)
            await writer.drain()
            return

        def event(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
            return _chunk(_sse({**base, "choices": [choice]}))

        writer.write(event({"role": "assistant", "content": ""}))
        for i, text in enumerate(answer.texts):
            if answer.pace_s and i:
                await writer.drain()
                await asyncio.sleep(answer.pace_s)
            writer.write(event({"content": text}))
        for i, (name, args) in enumerate(answer.calls):
            writer.write(event({"tool_calls": [{
                "index": i, "id": f"call_{serial}_{i}", "type": "function",
                "function": {"name": name, "arguments": ""}}]}))
            writer.write(event({"tool_calls": [{"index": i, "function": {"arguments": args}}]}))
        writer.write(event({}, finish))
        writer.write(_chunk(_sse({**base, "choices": [], "usage": usage})))
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()


def _spread(times: list[float]) -> list[float]:
    """When requests arrived, from the first: the 0, 10, 50, 90 and 100th percentiles."""
    if not times:
        return []
    times = sorted(t - min(times) for t in times)
    return [round(times[min(len(times) - 1, len(times) * q // 100)], 3) for q in (0, 10, 50, 90, 100)]


def serve() -> None:
    """Serve on a free loopback port; print the port, serve until stdin closes."""
    peers.raise_fd_limit()

    async def main() -> None:
        server = _Server()
        listener = await asyncio.start_server(server.handle, "127.0.0.1", 0, backlog=4096)
        print(listener.sockets[0].getsockname()[1], flush=True)
        loop = asyncio.get_running_loop()
        # The parent closes our stdin to stop us (or dies, which closes it too).
        await loop.run_in_executor(None, sys.stdin.read)
        listener.close()

    asyncio.run(main())


# --------------------------------------------------------------------------------- the clients


def _usage() -> tuple[float, float]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def _runtime_client(url: str, n: int, model: str, opts: dict[str, Any]) -> Callable[[], Any]:
    import trio

    from runtime import Limits, open_runtime

    env = {"OPENAI_BASE_URL": url, "OPENAI_API_KEY": peers.KEY}
    limits = Limits(max_parallel=opts["max_parallel"]) if opts.get("max_parallel") else None

    async def go() -> str:
        async with open_runtime("openai", model=model, env=env, trace=False, limits=limits) as rt:
            outcome = await rt.run(f"FANOUT {n}")
        assert outcome.status == "completed", outcome
        return str(outcome.result)

    async def warm() -> None:
        async with open_runtime("openai", model=model, env=env, trace=False):
            pass  # no call: nothing reaches the server

    if not opts.get("cold"):
        # The runtime imports its providers, tools and HTTP stack lazily, when a run opens; the
        # peers' factories import theirs before the timing starts. Opening a runtime once here
        # (no call) puts the runtime's imports before the timing too, as in any process that
        # opened one before (bench/README.md, "HTTP fan-out": what that takes out).
        trio.run(warm)
    return lambda: trio.run(go)


def _raw_client(url: str, n: int, model: str, opts: dict[str, Any]) -> Callable[[], Any]:
    import httpx
    import httpx_sse
    import orjson
    import trio

    tool = {"type": "function", "function": {
        "name": "agent", "description": "Run a sub-agent.",
        "parameters": {"type": "object", "required": ["description", "prompt"], "properties": {
            "description": {"type": "string"}, "prompt": {"type": "string"}}}}}

    def body(messages: list[dict[str, Any]], tools: bool) -> bytes:
        obj: dict[str, Any] = {"model": model, "messages": messages, "stream": True,
                               "stream_options": {"include_usage": True}}
        if tools:
            obj["tools"] = [tool]
        return orjson.dumps(obj)

    async def stream(client: httpx.AsyncClient, content: bytes) -> list[Any]:
        chunks = []
        async with httpx_sse.aconnect_sse(
            client, "POST", url + "/chat/completions", content=content
        ) as source:
            async for sse in source.aiter_sse():
                if sse.data != "[DONE]":
                    chunks.append(orjson.loads(sse.data))  # noqa: PERF401 - as a client would
        return chunks

    async def go() -> str:
        limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
        async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(60, pool=None)) as c:
            first = [{"role": "user", "content": f"FANOUT {n}"}]
            chunks = await stream(c, body(first, True))
            calls = [tc for ch in chunks for choice in ch["choices"]
                     for tc in choice["delta"].get("tool_calls", ()) if "id" in tc]
            assert len(calls) == n, len(calls)

            async def child(i: int) -> None:
                got = await stream(c, body([{"role": "user", "content": f"child {i}"}], False))
                assert sum(bool(ch["choices"]) for ch in got) >= DELTAS

            async with trio.open_nursery() as nursery:
                for i in range(n):
                    nursery.start_soon(child, i)
            results = [{"role": "tool", "tool_call_id": tc["id"], "content": "ok"} for tc in calls]
            await stream(c, body([*first, {"role": "assistant", "content": None}, *results], True))
        return "done"

    return lambda: trio.run(go)


def _peer_client(name: str) -> Callable[..., Callable[[], Any]]:
    def factory(url: str, n: int, model: str, opts: dict[str, Any]) -> Callable[[], Any]:
        go = peers.PEERS[name][1](url, n, model)

        def checked() -> None:
            completed = go()
            assert completed == n, f"{completed} of {n} children completed"

        return checked

    return factory


_FACTORIES: dict[str, tuple[str, Callable[..., Callable[[], Any]]]] = {
    "trio-agents": ("runtime", _runtime_client),
    **{name: (module, _peer_client(name)) for name, (module, _) in peers.PEERS.items()},
    "raw-httpx": ("httpx_sse", _raw_client),
}


def run_client(name: str, url: str, n: int, model: str, opts: dict[str, Any]) -> dict[str, Any]:
    """In the client subprocess: set up, run the fan-out once, measure it."""
    peers.raise_fd_limit()
    module, factory = _FACTORIES[name]
    skipped = peers.missing(module)
    if skipped:
        return skipped
    go = factory(url, n, model, opts)
    cpu0, _ = _usage()
    t0 = time.perf_counter()
    go()
    wall = time.perf_counter() - t0
    cpu1, rss = _usage()
    return {"wall_s": wall, "cpu_s": cpu1 - cpu0, "peak_rss_mb": rss}


# --------------------------------------------------------------------------------- the driver


def measure(port: int, name: str, n: int, pace_ms: int, opts: dict[str, Any]) -> dict[str, Any]:
    """One client's fan-out of ``n`` in a subprocess of its own; its row."""
    model = f"bench-paced-{pace_ms}" if pace_ms else "bench-instant"
    peers.control(port, "POST", "/__reset")
    mode = "paced" if pace_ms else "instant"
    row: dict[str, Any] = {"name": f"http_{mode}_{n} {name}", "client": name, "n": n,
                           "pace_ms": pace_ms}
    got = peers.run_client(
        __file__,
        ["--client", name, "--url", f"http://127.0.0.1:{port}/v1", "--n", str(n),
         "--model", model, "--opts", json.dumps(opts)],
    )
    stats = peers.control(port, "GET", "/__stats")
    if "error" in got or "skipped" in got:
        return {**row, **got}
    row.update(
        wall_s=round(got["wall_s"], 3),
        cpu_ms_per_agent=round(got["cpu_s"] * 1000 / n, 3),
        connections=stats["connections"] - 1,  # less the control connection of the reset
        requests=stats["requests"],
        server_cpu_s=round(stats["cpu_s"], 2),
        arrivals_s=stats["arrivals"],
        peak_rss_mb=round(got["peak_rss_mb"], 1),
    )
    return row


def _targets(row: dict[str, Any], peer_rows: list[dict[str, Any]], pace_ms: int) -> None:
    """The runtime's targets (bench/README.md, "HTTP fan-out"), checked on its row."""
    key = "wall_s" if pace_ms else "cpu_ms_per_agent"
    checks = []
    if peer_rows:
        best_peer = min(p[key] for p in peer_rows)
        row.update(fastest_peer=best_peer, vs_fastest_peer=round(row[key] / best_peer, 3))
        checks.append(row[key] <= best_peer * (1 if pace_ms else 0.3))
    if pace_ms:
        row.update(_ideal(row, pace_ms))
        checks.append(row["wall_s"] <= 1.3 * row["client_ideal_s"])
        row["target"] = ("wall <= fastest peer's and <= 1.3 x (answer x turns + "
                         "client CPU / cores), the issue's; ideal_s adds the server's CPU")
    else:
        if "ratio" in row:
            checks.append(row["ratio"] <= 1.5)
        row["target"] = "CPU per sub-agent <= 1.5 x raw httpx and <= 0.3 x the fastest peer"
    checks.append(row["connections"] <= default_pool())
    row["met"] = all(checks)


def _ideal(row: dict[str, Any], pace_ms: int) -> dict[str, float]:
    """What a paced fan-out's wall time is held to (bench/README.md, "HTTP fan-out").

    ``ideal_s``: the paced answers on a sub-agent's path, plus all the CPU the run takes spread
    over the machine's cores: the client's and the loopback server's, since the server shares
    the cores. ``client_ideal_s`` leaves the server out. ``one_thread_s`` is the client's CPU
    alone: a trio client runs on one thread, so its wall time is never below it.
    """
    answer_s = pace_ms / 1000 * (DELTAS - 1) * PACED_TURNS
    client_s = row["cpu_ms_per_agent"] * row["n"] / 1000
    cores = os.cpu_count() or 1
    return {
        "ideal_s": round(answer_s + (client_s + row["server_cpu_s"]) / cores, 3),
        "client_ideal_s": round(answer_s + client_s / cores, 3),
        "one_thread_s": round(client_s, 3),
        "vs_ideal": round(row["wall_s"] / (answer_s + (client_s + row["server_cpu_s"]) / cores), 3),
        # The issue's own formula (answer time x turns + client CPU / cores): wall over it.
        "vs_client_ideal": round(row["wall_s"] / (answer_s + client_s / cores), 3),
    }


def _best(rows: list[dict[str, Any]]) -> dict[str, Any]:
    good = [r for r in rows if "wall_s" in r]
    if not good:
        return rows[0]
    return min(good, key=lambda r: (r["cpu_ms_per_agent"], r["wall_s"]))


def main(args: argparse.Namespace) -> None:
    opts = json.loads(args.opts)
    with peers.serving([__file__, "--serve"]) as port:
        plan = [(n, 0) for n in args.ns] + [(n, args.pace_ms) for n in args.paced_ns]
        for n, pace in plan:
            rows = {}
            for name in args.clients:
                rows[name] = _best([measure(port, name, n, pace, opts) for _ in range(args.reps)])
            floor = rows.get("raw-httpx", {})
            peer_rows = [rows[p] for p in peers.PEERS if "wall_s" in rows.get(p, {})]
            for name, row in rows.items():
                key = "wall_s" if pace else "cpu_ms_per_agent"
                row.update(unit="s" if pace else "ms/agent", value=row.get(key))
                if key in floor and key in row and name != "raw-httpx":
                    row["floor"] = floor[key]
                    row["ratio"] = round(row[key] / floor[key], 3)
                if name == "trio-agents" and key in row:
                    _targets(row, peer_rows, pace)
                print(json.dumps(row), flush=True)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--opts", default="{}", help="client options as JSON (max_parallel)")
    parser.add_argument("--ns", type=_ints, default=[10, 100, 500, 2000])
    parser.add_argument("--paced-ns", type=_ints, default=[200, 2000])
    parser.add_argument("--clients", type=lambda s: s.split(","), default=list(CLIENTS))
    parser.add_argument("--pace-ms", type=int, default=50)
    parser.add_argument("--reps", type=int, default=1)
    args = parser.parse_args()
    if args.serve:
        serve()
    elif args.client:
        peers.client_main(
            lambda: run_client(args.client, args.url, args.n, args.model, json.loads(args.opts))
        )
    else:
        main(args)
