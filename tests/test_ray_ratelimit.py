"""Sub-agents on two Ray hosts share the run's one rate limit (docs/rate-limits.md, "Ray hosts").

Real parts: a local Ray cluster whose node runs two host actors (two worker processes), the
OpenAI provider over httpx on each host, and :class:`tests.ratelimit_server.RateLimitedServer`
in this process, refusing what its token bucket cannot take as the real APIs do. The driver's
limiter orders every host's calls (the hosts ask it over the placement's channel).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from runtime import (
    AgentFinished,
    AgentStarted,
    AgentType,
    Event,
    RateLimited,
    RayOptions,
    open_runtime,
)
from tests.invariants import check_invariants
from tests.ratelimit_server import RateLimitedServer
from tests.test_ratelimit_e2e import KEY, FanOut, LongWait

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[dev]')")

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.usefixtures("ray_cluster")]

_REMOTE = [AgentType(name="general", placement="ray")]
_TWO_HOSTS = RayOptions(hosts_per_node=2)


@attrs.frozen
class RemoteFanOut(FanOut):
    """A fan-out on Ray, with the most subtrees each host ran at once."""

    busiest: dict[str, int] = attrs.field(factory=dict)


async def _fan_out(
    server: RateLimitedServer, n: int, workspace: Path, *, warm_up: bool = True, **kwargs: Any
) -> RemoteFanOut:
    """A root that starts *n* remote sub-agents at once, after a warm-up fan-out of four in the
    same run (*warm_up*): the hosts start with the run's first remote sub-agent (seconds on 2
    CPUs shared with other work), which must stay out of the server's measured span."""
    env = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": KEY}
    events: list[Event] = []
    busiest: Counter[str] = Counter()
    placement: list[Any] = []

    def record(event: Event) -> None:
        events.append(event)
        if placement and isinstance(event, AgentStarted):
            for host in placement[0].pool():
                busiest[host["name"]] = max(busiest[host["name"]], host["active"])

    provider = kwargs.pop("provider", "openai")
    with trio.fail_after(120):
        async with open_runtime(provider, model="m", env=env, workspace=workspace, trace=False,
                                on_event=record, agent_types=_REMOTE, ray=_TWO_HOSTS,
                                **kwargs) as rt:
            placement.append(rt._run.placements["ray"])  # type: ignore[attr-defined]
            if warm_up:
                assert (await rt.run("FANOUT 4")).status == "completed"
            start = len(events)
            busiest.clear()
            server.reset()
            t0 = trio.current_time()
            outcome = await rt.run(f"FANOUT {n}")
            wall = trio.current_time() - t0
            limits = placement[0].limits
            assert (limits.held, limits.limiter.waiting, limits.limiter.in_flight) == (0, 0, 0)
    check_invariants(events)
    measured = events[start:]
    statuses = [e.status for e in measured if isinstance(e, AgentFinished)]
    assert outcome.status == "completed"
    return RemoteFanOut(statuses, wall, server.stats.as_json(), measured, dict(busiest))


async def test_two_hosts_share_a_configured_limit(workspace: Path) -> None:
    async with trio.open_nursery() as nursery:
        server: RateLimitedServer = await nursery.start(RateLimitedServer(rps=10).serve)
        run = await _fan_out(server, 30, workspace, rate_limits={"openai": {"rpm": 600}})
        nursery.cancel_scope.cancel()
    assert run.completed == 31, (run.statuses, run.stats)
    assert set(run.busiest) == {"h1", "h2"}
    assert min(run.busiest.values()) >= 5, run.busiest  # both ran many subtrees at once
    assert run.stats["refused"] <= 1, run.stats
    # One HTTP client per host, not one per subtree: the fan-out's calls (paced at the rate,
    # a second's worth at once) reuse the hosts' kept-alive connections, where a client per
    # subtree would open one for each of the 30.
    assert run.stats["connections"] <= 12, run.stats
    # The minimum, requests ÷ rate: 32 requests at 10 a second (the server serves its first
    # second's worth at once, so 2.2 s between its first and last request).
    assert run.stats["span_s"] < 1.15 * 3.2, run.stats
    waits = [e for e in run.events if isinstance(e, RateLimited)]
    assert waits, "the remote agents that waited said so (the driver reports their waits)"
    remote_ids = {e.agent_id for e in run.events if isinstance(e, AgentStarted)
                  and e.parent_tool_use_id is not None}
    remote_waits = [e for e in waits if e.agent_id in remote_ids]
    assert len({e.agent_id for e in remote_waits}) >= 10, waits
    assert all(e.parent_tool_use_id is not None and e.reason == "requests"
               for e in remote_waits)


async def test_two_hosts_learn_the_limit_from_the_headers(workspace: Path) -> None:
    async with trio.open_nursery() as nursery:
        server: RateLimitedServer = await nursery.start(RateLimitedServer(rps=10).serve)
        run = await _fan_out(server, 30, workspace)
        nursery.cancel_scope.cancel()
    assert run.completed == 31, (run.statuses, run.stats)
    assert min(run.busiest.values()) >= 5, run.busiest
    # The root's reply states the limit before its children ask: the hosts' calls go at it.
    assert run.stats["refused"] <= 1, run.stats
    assert run.stats["span_s"] < 1.5 * 3.2, run.stats


@asynccontextmanager
async def _two_hosts_at_two_a_second(
    workspace: Path, tap: LongWait
) -> AsyncGenerator[tuple[RateLimitedServer, Any], None]:
    """A run whose sub-agents go to two Ray hosts, against a server of 2 requests a second."""
    async with trio.open_nursery() as nursery:
        server: RateLimitedServer = await nursery.start(RateLimitedServer(rps=2).serve)
        env = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": KEY}
        async with open_runtime("openai", model="m", env=env, workspace=workspace,
                                trace=False, on_event=tap, agent_types=_REMOTE,
                                ray=_TWO_HOSTS) as rt:
            yield server, rt
        nursery.cancel_scope.cancel()


async def test_cancelling_a_waiting_remote_subtree_frees_its_place(workspace: Path) -> None:
    """Ten remote sub-agents against 2 requests a second: one that waits seconds for its turn
    is cancelled while it waits; it ends at once, its call never goes out, the others
    complete, and the driver's limiter holds nothing of it."""
    tap = LongWait()
    events = tap.events
    with trio.fail_after(60):
        async with _two_hosts_at_two_a_second(workspace, tap) as (server, rt):
            handle = await rt.start("FANOUT 10")
            waiting = await tap.wait()
            assert waiting.parent_tool_use_id is not None
            limits = rt._run.placements["ray"].limits  # type: ignore[attr-defined]
            queued = limits.limiter.waiting
            t0 = trio.current_time()
            assert await rt.cancel(waiting.parent_tool_use_id, "not needed")
            while limits.limiter.waiting >= queued:  # noqa: ASYNC110 - the host's news
                await trio.sleep(0.01)
            left_after = trio.current_time() - t0
            outcome = await handle.wait()
            held = limits.held
            in_flight = limits.limiter.in_flight
    check_invariants(events)
    ends = {e.agent_id: e for e in events if isinstance(e, AgentFinished)}
    assert ends[waiting.agent_id].status == "cancelled"
    assert outcome.status == "completed"
    assert [e.status for e in ends.values()].count("completed") == 10
    assert server.stats.served == 11, "the cancelled agent's call never went out"
    # Its place left the driver's queue within a round trip to its host, not at its turn.
    assert left_after < 1.0, left_after
    assert (held, in_flight) == (0, 0)


async def test_a_host_lost_while_its_calls_wait_leaves_nothing_held(workspace: Path) -> None:
    """Ten remote sub-agents on two hosts against 2 requests a second; one host is killed while
    its calls wait their turns: its subtrees end failed, the other host's complete, and the
    driver's limiter holds nothing of the lost host's calls (no slot, no place in line)."""
    tap = LongWait()
    events = tap.events
    with trio.fail_after(90):
        async with _two_hosts_at_two_a_second(workspace, tap) as (_, rt):
            placement = rt._run.placements["ray"]  # type: ignore[attr-defined]
            handle = await rt.start("FANOUT 10")
            await tap.wait()
            waiting_before = placement.limits.limiter.waiting
            victim = next(h for h in placement._hosts if h.state == "ready" and h.streams)
            lost = set(victim.streams)
            ray.kill(victim.actor)
            outcome = await handle.wait()
            limits = placement.limits
            held, queued, in_flight = (limits.held, limits.limiter.waiting,
                                       limits.limiter.in_flight)
    check_invariants(events)
    assert waiting_before >= 3
    assert outcome.status == "completed"
    children = [e for e in events if isinstance(e, AgentFinished)
                and e.agent_id != outcome.agent_id]
    failed = [e for e in children if e.status == "failed"]
    assert len(failed) == len(lost) >= 1, (lost, [e.status for e in children])
    assert all("worker died" in (e.error or "") or "node lost" in (e.error or "")
               for e in failed), [e.error for e in failed]
    assert [e.status for e in children].count("completed") == 10 - len(lost)
    assert (held, queued, in_flight) == (0, 0, 0)


async def test_refusals_on_either_host_pause_both_and_spend_no_try(workspace: Path) -> None:
    """A server that states no limits (10 a second, 2 at once): the two hosts' calls meet 429s;
    each refusal pauses every host (the driver's pause), is reported once (the refused agent's
    rate_limited, from its host), and spends no try, although the retry policy allows one."""
    from runtime.providers import open_provider

    async with trio.open_nursery() as nursery:
        server: RateLimitedServer = await nursery.start(
            RateLimitedServer(rps=10, burst=2, rate_headers=False).serve)
        env = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": KEY}
        async with open_provider("openai", model="m", env=env, max_retries=1) as provider:
            # No warm-up: its refusals would teach the limiter the pace before the fan-out,
            # which then meets none (or not, as the hosts' start-up spreads the warm-up).
            run = await _fan_out(server, 20, workspace, warm_up=False, provider=provider)
        nursery.cancel_scope.cancel()
    assert run.completed == 21, run.stats
    assert min(run.busiest.values()) >= 3, run.busiest
    assert run.stats["refused"] >= 1, run.stats
    refused = [e for e in run.events if isinstance(e, RateLimited) and e.reason == "refused"]
    assert len(refused) == run.stats["refused"], (refused, run.stats)
    assert {e.status for e in refused} == {429}
    assert not [e for e in run.events if e.type == "provider_retry"]
