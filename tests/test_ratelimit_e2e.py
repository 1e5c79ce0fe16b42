"""Fan-outs against a server that enforces rate limits per key (docs/rate-limits.md).

Real parts throughout: the providers over httpx on loopback, against
:class:`tests.ratelimit_server.RateLimitedServer`, which refuses what its token buckets cannot
take as the real APIs do. The server's buckets run on trio's clock: the tests that take an
``autojump_clock`` run in virtual time, in which the time a fan-out takes is the pace the
limiter and the server set, not this machine's speed (a loaded machine only makes them take
longer in real time); the others in real time.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

import attrs
import h11
import pytest
import structlog
import trio
import trio.testing

from runtime import AgentFinished, Event, RateLimited, open_runtime
from runtime.core._provider import RateLimitNotice, RetryNotice, TextChunk
from runtime.providers import open_provider
from tests.llm_server import collect, make_request
from tests.ratelimit_server import RateLimitedServer

KEY = "sk-ratelimit-test-key-0123456789"


@pytest.fixture
def logs() -> list[MutableMapping[str, Any]]:
    """Every structlog entry, at every level (the shared conftest keeps only errors)."""
    capture = structlog.testing.LogCapture()
    structlog.configure(
        processors=[capture], wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG)
    )
    return capture.entries


def machine_s() -> float:
    """Seconds this thread has run on a CPU or waited in the run queue for one (Linux's
    schedstat; elsewhere the CPU time only): what the machine, not the pace, adds to a run's
    wall time. A loaded machine makes a fan-out slower than its pace; this says by how much,
    so that a bound on the wall time can be the pace's plus this, instead of a guess."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            ran, waited, _ = f.read().split()
        return (int(ran) + int(waited)) / 1e9
    except OSError:
        return time.thread_time()


@attrs.frozen
class FanOut:
    """What one fan-out did: how its agents ended, how long it took, what the server saw."""

    statuses: list[str]
    wall_s: float
    stats: dict[str, Any]
    events: list[Event]
    # The run's machine_s(): its CPU time and its wait for a CPU (by name: a subclass's fields,
    # tests/test_ray_ratelimit.py's, follow by position).
    machine_s: float = attrs.field(default=0.0, kw_only=True)

    @property
    def completed(self) -> int:
        return self.statuses.count("completed")


async def fan_out(
    server: RateLimitedServer,
    n: int,
    workspace: Path,
    *,
    rate_limits: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> FanOut:
    """A root agent that starts *n* sub-agents at once through the real provider."""
    provider: Any = kwargs.pop("provider", server.mode)
    var = "OPENAI" if server.mode == "openai" else "ANTHROPIC"
    env = {f"{var}_BASE_URL": server.url, f"{var}_API_KEY": KEY}
    events: list[Event] = []
    server.reset()
    extra: dict[str, Any] = dict(kwargs)
    if rate_limits is not None:
        extra["rate_limits"] = rate_limits
    t0, m0 = trio.current_time(), machine_s()
    tap = extra.pop("on_event", None)

    def record(event: Event) -> None:
        events.append(event)
        if tap is not None:
            tap(event)

    async with open_runtime(provider, model="m", env=env, workspace=workspace, trace=False,
                            on_event=record, **extra) as rt:
        outcome = await rt.run(f"FANOUT {n}")
    wall = trio.current_time() - t0
    statuses = [e.status for e in events if isinstance(e, AgentFinished)]
    assert outcome.status in statuses
    return FanOut(statuses, wall, server.stats.as_json(), events, machine_s=machine_s() - m0)


async def test_thirty_parallel_sub_agents_against_ten_requests_a_second_all_complete(
    workspace: Path,
) -> None:
    async with trio.open_nursery() as nursery:
        server = await nursery.start(RateLimitedServer(rps=10).serve)
        run = await fan_out(server, 30, workspace)
        nursery.cancel_scope.cancel()
    assert run.completed == 31, (run.statuses, run.stats)
    # The minimum, requests ÷ rate: 32 requests at 10 a second.
    assert run.wall_s < 1.5 * 3.2, run.wall_s


async def serve(server: RateLimitedServer, nursery: trio.Nursery) -> RateLimitedServer:
    started: RateLimitedServer = await nursery.start(server.serve)
    return started


async def test_with_the_limit_configured_thirty_sub_agents_meet_no_429(workspace: Path) -> None:
    async with trio.open_nursery() as nursery:
        server = await serve(RateLimitedServer(rps=10), nursery)
        run = await fan_out(server, 30, workspace, rate_limits={"openai": {"rpm": 600}})
        nursery.cancel_scope.cancel()
    assert run.completed == 31
    assert run.stats["refused"] == 0, run.stats
    # The minimum, requests ÷ rate (docs/rate-limits.md): 32 requests at 10 a second.
    assert run.stats["span_s"] < 1.15 * 3.2, run.stats
    waits = [e for e in run.events if isinstance(e, RateLimited)]
    assert waits, "the agents that waited said so"
    assert {e.reason for e in waits} == {"requests"}
    assert all(e.agent_id != run.events[0].agent_id for e in waits)


async def test_three_hundred_sub_agents_with_and_without_a_configured_limit(
    workspace: Path,
) -> None:
    """The span is at most the pace's (the minimum, and half more) plus what the machine took
    (its CPU time and its wait for a CPU): 2.1 s here, unloaded; a limiter that went at half
    the rate would take 6 s, one call a second 300."""
    async with trio.open_nursery() as nursery:
        server = await serve(RateLimitedServer(rps=100), nursery)
        learned = await fan_out(server, 300, workspace)
        configured = await fan_out(server, 300, workspace,
                                   rate_limits={f"{server.url}": {"rpm": 6000}})
        nursery.cancel_scope.cancel()
    for run in (learned, configured):
        assert run.completed == 301, run.stats
        assert run.stats["requests"] == 302 + run.stats["refused"], run.stats
        # The minimum: 302 requests at 100 a second.
        assert run.stats["span_s"] < 1.5 * 3.02 + run.machine_s, (run.stats, run.machine_s)
    assert configured.stats["refused"] == 0
    # Unconfigured, the first reply's headers say the limit before the fan-out asks.
    assert learned.stats["refused"] <= 1, learned.stats


async def test_three_hundred_sub_agents_against_ten_requests_a_second(
    autojump_clock: trio.testing.MockClock, workspace: Path,
) -> None:
    """In virtual time (the test takes a second or so: the server's pace, 29.5 s here, is
    virtual), so the span is the pace's as long as the loopback delivers each reply before
    the loop finds itself idle; on a loaded machine it may not, and the virtual clock runs
    ahead: the machine's share of the span is allowed for as above."""
    async with trio.open_nursery() as nursery:
        server = await serve(RateLimitedServer(rps=10), nursery)
        run = await fan_out(server, 300, workspace)
        nursery.cancel_scope.cancel()
    assert run.completed == 301
    assert run.stats["refused"] <= 1
    assert run.stats["requests"] == 302 + run.stats["refused"], run.stats
    assert run.stats["span_s"] < 1.15 * 30.2 + run.machine_s, (run.stats, run.machine_s)


async def test_refusals_pause_every_agent_and_spend_no_try(workspace: Path) -> None:
    """A server that states no limits (10 a second, 2 at once): the fan-out meets 429s, the
    agents wait out each pause together, at the pace learned from the refusals, and
    all complete, although every agent's retry policy allows only one retry."""
    async with trio.open_nursery() as nursery:
        server = await serve(RateLimitedServer(rps=10, burst=2, rate_headers=False), nursery)
        env = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": KEY}
        async with open_provider("openai", model="m", env=env, max_retries=1) as provider:
            run = await fan_out(server, 30, workspace, provider=provider)
        nursery.cancel_scope.cancel()
    assert run.completed == 31, run.stats
    assert run.stats["refused"] >= 1
    refused = [e for e in run.events if isinstance(e, RateLimited) and e.reason == "refused"]
    assert len(refused) == run.stats["refused"]
    assert {e.status for e in refused} == {429}
    assert not [e for e in run.events if e.type == "provider_retry"]


async def test_anthropic_headers_and_529_overloaded(workspace: Path) -> None:
    async with trio.open_nursery() as nursery:
        server = await serve(RateLimitedServer(rps=10, mode="anthropic", overloaded=1), nursery)
        run = await fan_out(server, 30, workspace)
        nursery.cancel_scope.cancel()
    assert run.completed == 31, run.stats
    assert run.stats["overloaded"] == 1
    assert run.stats["refused"] <= 1, run.stats
    [first] = [e for e in run.events if isinstance(e, RateLimited) and e.reason == "refused"]
    assert first.status == 529
    # The root's first try met the 529; once it passed, the headers set the pace.
    assert run.stats["span_s"] < 1.5 * 3.2, run.stats


async def test_nonsense_headers_are_clamped_and_logged_once(
    workspace: Path, logs: list[MutableMapping[str, Any]]
) -> None:
    """Negative remaining counts, resets in the past and a two-day retry-after: the run still
    completes (the pause is clamped to a minute, so a short call deadline fails it first)."""
    async with trio.open_nursery() as nursery:
        server = await serve(
            RateLimitedServer(rps=5, burst=1, nonsense=True, advertised_rps=50), nursery
        )
        env = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": KEY}
        with trio.fail_after(30):
            async with open_provider("openai", model="m", env=env,
                                     call_deadline_s=3) as provider:
                run = await fan_out(server, 3, workspace, provider=provider)
        nursery.cancel_scope.cancel()
    nonsense = [e for e in logs if e.get("event") == "ratelimit.header_nonsense"]
    assert sorted(e["header"] for e in nonsense) == [
        "retry-after", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"]
    assert all(KEY not in str(e) for e in logs)
    # A refused call would wait out the clamped pause (a minute) past its deadline: it fails
    # at once, and says why.
    errors = [e.error for e in run.events if isinstance(e, AgentFinished) and e.error]
    assert errors
    assert all("rate limited" in (err or "") for err in errors), errors
    assert any("a pause of" in (err or "") for err in errors), errors


class LongWait:
    """A tap: every event, and the first ``rate_limited`` that foresees more than *wait_s*
    (``seen`` is set then)."""

    def __init__(self, wait_s: float = 2.0) -> None:
        self.wait_s = wait_s
        self.events: list[Event] = []
        self.first: RateLimited | None = None
        self.seen = trio.Event()

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        if isinstance(event, RateLimited) and event.wait_s > self.wait_s and self.first is None:
            self.first = event
            self.seen.set()

    async def wait(self) -> RateLimited:
        """The first long wait, once it is seen."""
        await self.seen.wait()
        assert self.first is not None
        return self.first


async def test_a_cancelled_waiting_subtree_leaves_the_queue_at_once(workspace: Path) -> None:
    """Ten sub-agents against 2 requests a second: the last waits seconds for its turn; cancelled
    while it waits, it ends at once, and the others keep their places."""
    env = {"OPENAI_BASE_URL": "", "OPENAI_API_KEY": KEY}
    tap = LongWait()
    events = tap.events
    cancelled_at: list[float] = []

    async with trio.open_nursery() as nursery:
        server = await serve(RateLimitedServer(rps=2), nursery)
        env["OPENAI_BASE_URL"] = server.url
        async with open_runtime("openai", model="m", env=env, workspace=workspace, trace=False,
                                on_event=tap) as rt:
            handle = await rt.start("FANOUT 10")
            waiting = await tap.wait()
            assert waiting.parent_tool_use_id is not None
            cancelled_at.append(trio.current_time())
            assert await rt.cancel(waiting.parent_tool_use_id, "not needed")
            outcome = await handle.wait()
        nursery.cancel_scope.cancel()
    ends = {e.agent_id: e for e in events if isinstance(e, AgentFinished)}
    mine = ends[waiting.agent_id]
    assert mine.status == "cancelled"
    assert mine.duration_s is not None
    assert outcome.status == "completed"
    assert sorted(e.status for e in ends.values()).count("completed") == 10
    assert server.stats.served == 11, "the cancelled agent's call never went out"


async def test_waiting_agents_show_as_waiting_and_trace_stats_adds_up_their_waits(
    workspace: Path,
) -> None:
    from runtime.trace import TraceTree, run_stats
    from runtime.trace._render import render_tree

    tree = TraceTree()
    seen_while_waiting: list[str] = []

    def tap(event: Event) -> None:
        tree.apply(event)
        if isinstance(event, RateLimited) and event.wait_s > 0.5 and not seen_while_waiting:
            lines = render_tree(tree, now=event.ts + 0.1, color=False)
            seen_while_waiting.extend(t.plain for t in lines.renderables)  # type: ignore[attr-defined]

    async with trio.open_nursery() as nursery:
        server = await serve(RateLimitedServer(rps=10), nursery)
        run = await fan_out(server, 20, workspace, on_event=tap)
        nursery.cancel_scope.cancel()
    assert run.completed == 21
    waiting = [line for line in seen_while_waiting if "(rate limit: requests)" in line]
    assert waiting, seen_while_waiting
    assert all("── ⏸ general" in line for line in waiting), waiting
    assert any("waiting " in line for line in waiting)
    assert "waiting on rate limits" in seen_while_waiting[0]
    # Once every call answered, no node says it is waiting.
    assert all(a.rate_wait is None for a in tree.agents.values())
    stats = run_stats(TraceTree.from_events(run.events))["rate_limits"]
    waits = [e for e in run.events if isinstance(e, RateLimited)]
    assert stats["agents_waited"] == len({e.agent_id for e in waits})
    assert stats["wait_s"] == pytest.approx(sum(e.wait_s for e in waits), abs=1e-5)
    root = stats["by_subtree"][0]
    assert (root["depth"], root["wait_s"]) == (0, stats["wait_s"])
    assert stats["refusals"] == 0


# -- the first calls, with no rate information (docs/rate-limits.md, "The first calls") --------


class GatedServer(RateLimitedServer):
    """A server that bounds calls in flight, not a rate, and can hold its answers.

    Every request counts as in flight from its arrival until its reply is sent. With
    ``hold``, an answer (but a fan-out root's) waits for :attr:`release`; with
    ``max_in_flight``, a request past it is refused at once (``429``, ``retry-after`` in whole
    seconds, no rate-limit headers: a gateway that bounds concurrency); ``answer_s`` is how
    long an answer takes.
    """

    def __init__(
        self, *, hold: bool = False, max_in_flight: int | None = None,
        retry_after: str = "1", answer_s: float = 0.0,
    ) -> None:
        super().__init__(rps=1e9, rate_headers=False, max_in_flight=max_in_flight,
                         answer_s=answer_s, retry_after=retry_after)
        self.release = trio.Event()
        if not hold:
            self.release.set()
        self._arrived = trio.Event()

    async def until_in_flight(self, n: int) -> None:
        """Wait until *n* requests are in flight at once."""
        while self.in_flight < n:
            await self._arrived.wait()

    async def _reply(
        self, stream: trio.SocketStream, conn: h11.Connection, head: h11.Request, body: bytes
    ) -> bool:
        self._arrived.set()
        self._arrived = trio.Event()
        return await super()._reply(stream, conn, head, body)

    async def _answer(
        self, head: h11.Request, body: bytes
    ) -> tuple[int, list[tuple[str, str]], list[bytes]]:
        crowded = self.max_in_flight is not None and self.in_flight > self.max_in_flight
        if b"FANOUT" not in body and not crowded:
            await self.release.wait()
        return await super()._answer(head, body)


class Alias(trio.abc.HostnameResolver):
    """Resolves one made-up host name to 127.0.0.1: a base URL that does not look local."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def getaddrinfo(
        self, host: bytes | None, port: bytes | str | int | None, family: int = 0,
        type: int = 0, proto: int = 0, flags: int = 0,
    ) -> Any:
        assert host is not None
        assert host.decode() == self.name, host
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "",
                 ("127.0.0.1", int(port or 0)))]

    async def getnameinfo(self, sockaddr: Any, flags: int) -> tuple[str, str]:
        raise NotImplementedError


async def _calls(provider: Any, n: int) -> list[list[Any]]:
    """*n* model calls asked together, each an agent's first: every call's items."""
    results: list[list[Any]] = []

    async def one(i: int) -> None:
        request = attrs.evolve(make_request(), agent_id=f"agent-{i}")
        results.append(await collect(provider, request))

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(one, i)
    return results


@pytest.mark.parametrize("host", ["127.0.0.1", "model.example.test"])
async def test_with_nothing_known_a_fan_out_of_n_starts_n_wherever_the_server_is(
    autojump_clock: trio.testing.MockClock, host: str
) -> None:
    n = 20
    if host != "127.0.0.1":
        trio.socket.set_custom_hostname_resolver(Alias(host))
    async with trio.open_nursery() as nursery:
        server = await serve(GatedServer(hold=True), nursery)
        env = {"OPENAI_BASE_URL": f"http://{host}:{server.port}/v1", "OPENAI_API_KEY": KEY}
        async with (
            open_provider("openai", model="m", env=env) as provider,
            trio.open_nursery() as calls,
        ):
            calls.start_soon(_calls, provider, n)
            with trio.fail_after(60):  # virtual time: fails only if the n never come
                await server.until_in_flight(n)
            # Every call is at the server, none answered: the limiter held none back.
            assert server.stats.served == 0
            server.release.set()
        nursery.cancel_scope.cancel()
    assert server.stats.served == n
    assert server.stats.connections == n


async def test_probe_first_sends_the_first_call_alone_then_the_rest(
    autojump_clock: trio.testing.MockClock,
) -> None:
    n = 20
    async with trio.open_nursery() as nursery:
        server = await serve(GatedServer(hold=True), nursery)
        env = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": KEY}
        limits = {server.url: {"probe_first": True}}
        async with open_provider("openai", model="m", env=env, rate_limits=limits) as provider:
            limiter = provider.limiter
            assert limiter is not None
            async with trio.open_nursery() as calls:
                calls.start_soon(_calls, provider, n)
                await server.until_in_flight(1)
                await trio.testing.wait_all_tasks_blocked()
                # One call out, the others waiting for its reply's headers.
                assert (limiter.in_flight, limiter.waiting, server.in_flight) == (1, n - 1, 1)
                server.release.set()
        nursery.cancel_scope.cancel()
    assert server.stats.served == n


async def test_a_burst_against_a_server_allowing_ten_at_once_completes_spending_no_try(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """100 first calls at once against a gateway that serves 10 at once and refuses the rest
    with ``retry-after: 1``: the 90 refusals are one pause, the refused calls go back to their
    places, and every call completes; none spends a try of its retry policy (max_retries=1)."""
    n = 100
    async with trio.open_nursery() as nursery:
        server = await serve(GatedServer(max_in_flight=10, answer_s=0.5), nursery)
        env = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": KEY}
        async with open_provider("openai", model="m", env=env, max_retries=1) as provider:
            limiter = provider.limiter
            assert limiter is not None
            results = await _calls(provider, n)
        nursery.cancel_scope.cancel()
    assert len(results) == n
    texts = {"".join(i.text for i in items if isinstance(i, TextChunk)) for items in results}
    assert texts == {"Child work done."}
    assert not [i for items in results for i in items if isinstance(i, RetryNotice)]
    refusals = [i for items in results for i in items if isinstance(i, RateLimitNotice)]
    assert server.stats.served == n
    assert server.stats.refused == limiter.refusals == len(refusals) >= n - 10
    assert (limiter.in_flight, limiter.waiting) == (0, 0)


# -- a strict server that states no limits (docs/rate-limits.md, "Learning the pace") ---------

STRICT = {
    # 8 answered at once, each in 0.25 s: at most 32 a second.
    "8-at-once": ({"rps": 1e9, "max_in_flight": 8, "answer_s": 0.25}, 32.0),
    # 10 a second, 2 at most at once, each answered at once.
    "10-a-second": ({"rps": 10, "burst": 2}, 10.0),
}


@pytest.mark.parametrize("shape", list(STRICT))
async def test_a_strict_server_that_states_no_limits_is_learned_not_crawled(
    autojump_clock: trio.testing.MockClock, workspace: Path, shape: str
) -> None:
    """300 sub-agents against a server that says nothing of its limits, refusing beyond them
    with ``429`` and ``retry-after: 1`` only. One call per ``retry-after`` would take 300 s
    (virtual time: the server's own pace, not this machine's); the pace learned from the
    refusals and successes finishes within five times the server's minimum, every agent
    completes, and after the first burst's refusals few more are met."""
    server_args, capacity = STRICT[shape]
    n = 300
    async with trio.open_nursery() as nursery:
        server = await serve(
            RateLimitedServer(rate_headers=False, retry_after="1", **server_args), nursery
        )
        run = await fan_out(server, n, workspace)
        nursery.cancel_scope.cancel()
    minimum = (n + 2) / capacity
    refused_at = run.stats["refused_after_s"]
    burst = [t for t in refused_at if t < refused_at[0] + 0.1] if refused_at else []
    summary = (shape, run.wall_s, run.stats["requests"], len(refused_at), len(burst))
    assert run.completed == n + 1, summary
    assert run.wall_s < 5 * minimum, summary  # one call per retry-after: about n seconds
    # After the first burst, at most one refusal in ten requests.
    assert len(refused_at) - len(burst) <= n / 10, summary
    assert run.stats["requests"] == n + 2 + len(refused_at), summary
