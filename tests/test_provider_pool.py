"""One endpoint per run (runtime/providers/_pool.py): the shared client, the pool limits, the bound
on calls in flight and the concurrency defaults, against the loopback LLM server."""

from __future__ import annotations

import functools
import shutil
import ssl
import subprocess
from pathlib import Path

import httpx
import orjson
import pytest
import trio
from llm_server import (
    OPENAI_DONE,
    LLMServer,
    Piece,
    RecordedRequest,
    Reply,
    collect,
    make_request,
    openai_chunk,
    openai_text_stream,
)

from runtime import Limits, open_runtime
from runtime.core import fan_out_default
from runtime.core._errors import ConfigError
from runtime.core._provider import TextChunk
from runtime.providers import _pool, open_provider
from runtime.providers._pool import PoolLimits


@pytest.fixture
async def server(nursery: trio.Nursery) -> LLMServer:
    server = LLMServer()
    await nursery.start(server.serve)
    return server


def _env(server: LLMServer) -> dict[str, str]:
    return {"OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": "x", "PATH": "/usr/bin:/bin"}


def _fan_out_route(children: int, child_delay_s: float = 0.0) -> object:
    """The root asks for ``children`` sub-agents; each answers (after ``child_delay_s``)."""

    def route(request: RecordedRequest) -> Reply:
        messages = request.json["messages"]
        if messages[-1]["role"] == "tool":
            return Reply.stream(openai_text_stream(["all done"]))
        text = next(m["content"] for m in messages if m["role"] == "user")
        if text.startswith("child"):
            events = openai_text_stream(["answer"])
            return Reply.stream([Piece(events[0], delay_s=child_delay_s), *events[1:]])
        calls = [
            {"index": i, "id": f"call_{text}_{i}", "type": "function",
             "function": {"name": "agent", "arguments": orjson.dumps(
                 {"description": "part", "prompt": f"child {i}"}).decode()}}
            for i in range(children)
        ]
        return Reply.stream([
            openai_chunk({"tool_calls": calls}), openai_chunk({}, finish="tool_calls"), OPENAI_DONE,
        ])

    return route


async def test_every_agent_of_a_run_calls_through_one_pool(
    server: LLMServer, tmp_path: Path
) -> None:
    server.route = _fan_out_route(8)  # type: ignore[assignment]
    with trio.fail_after(20):
        async with open_runtime("openai", env=_env(server), workspace=tmp_path, trace=False) as rt:
            for task in ("first", "second"):
                outcome = await rt.run(task)
                assert outcome.status == "completed", outcome.error
    assert len(server.requests) == 2 * (1 + 8 + 1)
    # One client for the run: the root's connection serves a child, the second fan-out reuses
    # the first's (a client per agent would open 1 + 8 + 1 connections per fan-out).
    assert server.connections <= 8


async def test_a_fan_out_starts_every_sub_agent_at_once_by_default(
    server: LLMServer, tmp_path: Path
) -> None:
    """40 sub-agents: every child's request arrives before any child's answer has started."""
    assert Limits().max_parallel == PoolLimits().concurrency == fan_out_default() >= 40
    server.route = _fan_out_route(40, child_delay_s=1.0)  # type: ignore[assignment]
    with trio.fail_after(30):
        async with open_runtime("openai", env=_env(server), workspace=tmp_path, trace=False) as rt:
            outcome = await rt.run("go")
    assert outcome.status == "completed", outcome.error
    arrivals = [r.at for r in server.requests[1:-1]]
    assert len(arrivals) == 40
    # With the old default of 16 running at once, the 17th waited for a 1 s answer.
    assert max(arrivals) - min(arrivals) < 0.9


async def test_pool_limits_bound_the_connections(server: LLMServer) -> None:
    replies = [Reply.stream([Piece(b"", delay_s=0.05), *openai_text_stream(["hi"])])] * 6
    server.push(*replies)
    pool = PoolLimits(max_connections=2)
    with trio.fail_after(20):
        async with open_provider("openai", env=_env(server), pool=pool) as provider:
            texts: list[str] = []

            async def call() -> None:
                items = await collect(provider, make_request())
                texts.extend(i.text for i in items if isinstance(i, TextChunk))

            async with trio.open_nursery() as nursery:
                for _ in range(6):
                    nursery.start_soon(call)
    assert texts == ["hi"] * 6
    assert server.connections == 2


async def test_max_concurrent_bounds_the_calls_in_flight(server: LLMServer) -> None:
    """Three in flight of nine: the fourth request waits for one of the first three to end."""
    server.push(*[Reply.stream([Piece(b"", delay_s=0.5), *openai_text_stream(["hi"])])] * 9)
    pool = PoolLimits(max_connections=9, max_concurrent=3)
    with trio.fail_after(20):
        async with (
            open_provider("openai", env=_env(server), pool=pool) as provider,
            trio.open_nursery() as nursery,
        ):
            for _ in range(9):
                nursery.start_soon(collect, provider, make_request())
    arrivals = sorted(r.at for r in server.requests)
    assert arrivals[2] - arrivals[0] < 0.4
    assert arrivals[3] - arrivals[0] >= 0.45
    assert server.connections <= 3


def _self_signed(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A certificate for 127.0.0.1: the server's context, and a client's that trusts it."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(  # a fixed command of ours
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    return served, ssl.create_default_context(cafile=str(cert))


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl for a certificate")
async def test_calls_over_tls_stream_and_reuse_their_connection(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's own sockets speak TLS (start_tls) and answer httpcore's liveness checks."""
    served, trusting = _self_signed(tmp_path)
    server = LLMServer()
    await nursery.start(functools.partial(server.serve, ssl_context=served))
    monkeypatch.setattr(_pool, "shared_ssl_context", lambda: trusting)
    server.push(Reply.stream(openai_text_stream(["se", "cure"])), Reply.stream(openai_text_stream(["again"])))
    with trio.fail_after(20):
        async with open_provider("openai", env=_env(server)) as provider:
            first = await collect(provider, make_request())
            second = await collect(provider, make_request())
    assert [i.text for i in first if isinstance(i, TextChunk)] == ["se", "cure"]
    assert [i.text for i in second if isinstance(i, TextChunk)] == ["again"]
    assert server.connections == 1


async def test_a_client_of_your_own_carries_the_calls_and_stays_open(server: LLMServer) -> None:
    server.push(Reply.stream(openai_text_stream(["mine"])))
    seen: list[str] = []

    async def hook(request: httpx.Request) -> None:
        seen.append(request.url.path)

    async with httpx.AsyncClient(event_hooks={"request": [hook]}) as client:
        with trio.fail_after(10):
            async with open_provider("openai", env=_env(server), http_client=client) as provider:
                items = await collect(provider, make_request())
        assert not client.is_closed
    assert [i.text for i in items if isinstance(i, TextChunk)] == ["mine"]
    assert seen == ["/v1/chat/completions"]


@pytest.mark.parametrize(
    ("field", "value"), [("max_connections", 0), ("max_keepalive", -1), ("max_concurrent", 0)]
)
def test_a_pool_limit_that_is_not_positive_is_refused_naming_it(field: str, value: int) -> None:
    with pytest.raises(ConfigError, match=f"{field} must be positive"):
        PoolLimits(**{field: value})


async def test_a_connection_the_server_closes_is_not_reused(server: LLMServer) -> None:
    closing = Reply.stream(openai_text_stream(["one"]))
    closing.headers.append(("connection", "close"))
    server.push(closing, Reply.stream(openai_text_stream(["two"])), Reply.stream(openai_text_stream(["three"])))
    with trio.fail_after(10):
        async with open_provider("openai", env=_env(server)) as provider:
            texts = []
            for _ in range(3):
                items = await collect(provider, make_request())
                texts += [i.text for i in items if isinstance(i, TextChunk)]
    assert texts == ["one", "two", "three"]
    assert server.connections == 2  # a new one after the close, then that one kept alive
    assert len(server.requests) == 3  # nothing was retried


_DEFAULTS = (
    "from runtime import Limits; from runtime.providers import PoolLimits; "
    "print(Limits().max_parallel, PoolLimits().max_connections, PoolLimits().concurrency)"
)


@pytest.mark.parametrize(
    ("soft", "expected"),
    [(1024, 768), (4096, 3840), (12_000, 10_000), (300, 150), (12, 8)],
)
def test_the_fan_out_defaults_follow_the_open_files_limit(soft: int, expected: int) -> None:
    """A process with ``ulimit -n`` at *soft* runs that many less 256 sub-agents and
    connections at once by default (half under 512, at most 10,000): a fan-out never runs out
    of file descriptors by default, and one the limit allows is not split into waves."""
    import resource
    import sys

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < soft:
        pytest.skip(f"the hard open-files limit here is {hard}")

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    done = subprocess.run([sys.executable, "-c", _DEFAULTS], capture_output=True, text=True,
                          preexec_fn=lower, check=False, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(expected)] * 3
