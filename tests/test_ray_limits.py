"""The run's one rate limiter across Ray hosts, without Ray (docs/rate-limits.md, "Ray hosts").

Two :class:`RemoteLimiter` objects (two hosts) and the driver's :class:`LimiterService` in one
trio loop, their messages handed over as the placement hands them (the host's outbox, the
driver's grants): the driver's queue orders every host's calls, a refusal on one host pauses
the other, a cancelled wait leaves the queue, and a subtree that ends gives back what it held.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from runtime.cluster._limits import (
    CURRENT_CALL,
    LimiterAsked,
    LimiterReport,
    LimiterService,
    RemoteLimiter,
)
from runtime.core import Event
from runtime.providers import EndpointLimiter, RateLimit


class Link:
    """Two hosts and a driver: each host's messages reach the service at once, in order."""

    def __init__(self, nursery: trio.Nursery, limiter: EndpointLimiter) -> None:
        self.service = LimiterService(limiter, nursery, self._grant)
        self.hosts: dict[str, RemoteLimiter] = {}
        self.asks: list[tuple[str, LimiterAsked]] = []
        self.foreseen: list[float] = []

    def host(self, name: str) -> RemoteLimiter:
        def send(call_id: str, event: Event, urgent: bool) -> None:
            subtree = (name, call_id)
            if isinstance(event, LimiterAsked):
                self.asks.append((name, event))
                ticket = self.service.asked(subtree, name, call_id, event)
                self.foreseen.append(ticket.wait_s if ticket is not None else 0.0)
            else:
                assert isinstance(event, LimiterReport)
                self.service.report(subtree, event)

        remote = self.hosts[name] = RemoteLimiter("test endpoint", send)
        return remote

    def _grant(self, host: Any, grants: list[tuple[str, int]]) -> None:
        for _call_id, number in grants:
            self.hosts[host].granted(number)


def ask_alternately(
    hosts: list[RemoteLimiter], numbers: range
) -> list[tuple[RemoteLimiter, Any]]:
    """A call for each of *numbers* (its subtree ``c{i}``), asked on each host in turn."""
    tickets = []
    for i in numbers:
        CURRENT_CALL.set(f"c{i}")
        remote = hosts[i % len(hosts)]
        tickets.append((remote, remote.ask(10, asked_at=trio.current_time())))
    return tickets


async def first_calls(
    nursery: trio.Nursery, limiter: EndpointLimiter, n: int
) -> tuple[Link, list[RemoteLimiter], list[tuple[RemoteLimiter, Any]]]:
    """Two hosts, and *n* first calls asked on them in turn, every one granted (nothing known:
    the driver admits them all at once)."""
    link = Link(nursery, limiter)
    hosts = [link.host("h1"), link.host("h2")]
    tickets = ask_alternately(hosts, range(n))
    await trio.testing.wait_all_tasks_blocked()
    assert all(t.admitted for _, t in tickets)
    return link, hosts, tickets


async def call(remote: RemoteLimiter, call_id: str, order: list[str], name: str) -> None:
    """One model call through a host's limiter: ask, wait, done."""
    CURRENT_CALL.set(call_id)
    ticket = remote.ask(10, asked_at=trio.current_time(), agent_id=name)
    await remote.wait(ticket)
    order.append(name)
    remote.learn(ticket, {"x-ratelimit-limit-requests": "1200", "content-type": "text/plain"})
    remote.settle(ticket, 10, 5)
    remote.done(ticket)


def test_two_hosts_share_one_rate_and_one_queue_first_asked_first_served() -> None:
    order: list[str] = []

    async def main() -> None:
        limiter = EndpointLimiter("test endpoint", limit=RateLimit(rpm=1200))  # 20 a second
        async with trio.open_nursery() as nursery:
            link = Link(nursery, limiter)
            h1, h2 = link.host("h1"), link.host("h2")
            t0 = trio.current_time()
            async with trio.open_nursery() as calls:
                for i in range(30):
                    remote = h1 if i % 2 else h2
                    calls.start_soon(call, remote, f"c{i}", order, f"a{i}")
                    # Asked in this order, with no time between (a loaded machine's
                    # sleeps would let the rate refill between the asks).
                    await trio.testing.wait_all_tasks_blocked()
            wall = trio.current_time() - t0
            assert link.service.held == 0
            assert (limiter.waiting, limiter.in_flight) == (0, 0)
            nursery.cancel_scope.cancel()
        # 20 a second, a second's worth less the margin (18) at once: 30 calls take ~0.6 s.
        assert 0.55 < wall < 1.5, wall
        # The driver foresaw the waits, in line: later asks foresee longer.
        assert link.foreseen[-1] == pytest.approx(max(link.foreseen))
        assert link.foreseen[-1] > 0.5

    trio.run(main)
    assert order == [f"a{i}" for i in range(30)], "first asked, first served, across hosts"


async def test_a_refusal_on_one_host_pauses_the_other() -> None:
    limiter = EndpointLimiter("test endpoint", limit=RateLimit(rpm=6000))
    async with trio.open_nursery() as nursery:
        link = Link(nursery, limiter)
        h1, h2 = link.host("h1"), link.host("h2")
        CURRENT_CALL.set("c1")
        first = h1.ask(10, asked_at=trio.current_time())
        await h1.wait(first)
        pause = h1.refused(first, 429, 0.5)
        assert pause == pytest.approx(0.5)
        h1.done(first)
        CURRENT_CALL.set("c2")
        t0 = trio.current_time()
        other = h2.ask(10, asked_at=t0)
        await h2.wait(other)
        waited = trio.current_time() - t0
        h2.done(other)
        # The driver's pause: the Retry-After, plus up to a tenth more.
        assert 0.45 < waited < 0.7, waited
        # The refused call's next try says so, with the pause foreseen on its host.
        CURRENT_CALL.set("c1")
        again = h1.ask(10, asked_at=t0, refused=True)
        assert again.reason == "refused"
        h1.done(again)
        assert link.service.held == 0
        nursery.cancel_scope.cancel()


async def test_a_cancelled_wait_and_an_ended_subtree_give_back_their_places() -> None:
    limiter = EndpointLimiter("test endpoint", limit=RateLimit(rpm=60, max_concurrent=1))
    async with trio.open_nursery() as nursery:
        link = Link(nursery, limiter)
        h1, h2 = link.host("h1"), link.host("h2")
        CURRENT_CALL.set("holder")
        held = h1.ask(1, asked_at=trio.current_time())
        await h1.wait(held)  # in flight: the one slot
        CURRENT_CALL.set("waiter")
        with trio.move_on_after(0.2):
            await h2.wait(h2.ask(1, asked_at=trio.current_time()))
        await trio.testing.wait_all_tasks_blocked()
        assert limiter.waiting == 0, "the cancelled wait left the driver's queue"
        assert link.service.held == 1
        # The host of the holder is lost mid-call: its subtree is released, the slot comes back.
        link.service.release(("h1", "holder"))
        assert (limiter.in_flight, link.service.held) == (0, 0)
        # A grant that comes after its wait was given up is ignored on the host.
        h1.granted(held.order)
        assert h1.in_flight == 1  # the host's own count: its call is still out there
        nursery.cancel_scope.cancel()


def test_a_model_call_outside_a_subtree_is_a_bug_said_plainly() -> None:
    async def main() -> None:
        remote = RemoteLimiter("x", lambda *_: None)
        with pytest.raises(RuntimeError, match="outside a subtree"):
            remote.ask(1, asked_at=0.0)

    trio.run(main)


def test_only_rate_limit_headers_travel_to_the_driver() -> None:
    sent: list[Event] = []

    async def main() -> None:
        remote = RemoteLimiter("x", lambda _c, event, _u: sent.append(event))
        CURRENT_CALL.set("c")
        ticket = remote.ask(1, asked_at=trio.current_time())
        remote.learn(ticket, {"X-RateLimit-Remaining-Requests": "5", "set-cookie": "secret=1",
                              "retry-after-ms": "20", "authorization": "Bearer sk-1"})

    trio.run(main)
    report = sent[-1]
    assert isinstance(report, LimiterReport)
    assert dict(report.headers) == {"x-ratelimit-remaining-requests": "5",
                                    "retry-after-ms": "20"}


@pytest.mark.parametrize("probe_first", [False, True])
async def test_with_nothing_known_every_hosts_first_calls_go_at_once_unless_probed(
    probe_first: bool,
) -> None:
    """The driver's policy is the hosts' too: nothing known, a fan-out over two hosts starts
    every call; with ``probe_first`` one goes, and the rest when its reply's headers arrive
    (from its host, as a report)."""
    limiter = EndpointLimiter("test endpoint", limit=RateLimit(probe_first=probe_first))
    async with trio.open_nursery() as nursery:
        link = Link(nursery, limiter)
        h1, h2 = link.host("h1"), link.host("h2")
        tickets = []
        for i in range(6):
            remote = h1 if i % 2 else h2
            CURRENT_CALL.set(f"c{i}")
            tickets.append((remote, remote.ask(10, asked_at=trio.current_time())))
        await trio.testing.wait_all_tasks_blocked()
        granted = [t for _, t in tickets if t.admitted]
        assert len(granted) == (1 if probe_first else 6)
        if probe_first:
            first_host = next(r for r, t in tickets if t is granted[0])
            first_host.learn(granted[0], {"content-type": "text/event-stream"})  # no limits
            await trio.testing.wait_all_tasks_blocked()
            assert all(t.admitted for _, t in tickets)
        for remote, ticket in tickets:
            remote.done(ticket)
        assert (limiter.in_flight, link.service.held) == (0, 0)
        nursery.cancel_scope.cancel()


async def test_a_bursts_refusals_on_two_hosts_are_one_pause(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Six first calls over two hosts, five refused without a Retry-After: one step of the
    back-off on the driver and on each host (0.5 s), not one step per refusal (8 s)."""
    limiter = EndpointLimiter("test endpoint")
    async with trio.open_nursery() as nursery:
        _, _, tickets = await first_calls(nursery, limiter, 6)
        pauses = []
        for remote, ticket in tickets[1:]:
            pauses.append(remote.refused(ticket, 429, None))
            remote.done(ticket)
        assert pauses == [0.5] * 5
        assert limiter.refusals == 5
        assert 0.5 <= limiter._pause_until - trio.current_time() <= 0.55
        remote, ticket = tickets[0]
        remote.done(ticket)
        nursery.cancel_scope.cancel()


async def test_the_pace_learned_from_every_hosts_refusals_and_successes_is_the_drivers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Ten first calls over two hosts against a server that takes four at once: six refusals,
    met on both hosts, narrow the driver's window to the four still out; the next asks from
    either host get four turns, and the hosts' successes widen the window on the driver."""
    limiter = EndpointLimiter("test endpoint")
    async with trio.open_nursery() as nursery:
        link, hosts, tickets = await first_calls(nursery, limiter, 10)
        for remote, ticket in tickets[4:]:
            remote.refused(ticket, 429, 1.0)
            remote.done(ticket)
        assert limiter.window == 4
        await trio.sleep(3)  # the pause, and the learned rate's bucket full again
        for remote, ticket in tickets[:4]:
            remote.settle(ticket, 10, 5)
            remote.done(ticket)
        assert 4.9 < limiter.window < 5  # four successes: 4 + 4/4.5
        more = ask_alternately(hosts, range(10, 20))
        await trio.testing.wait_all_tasks_blocked()
        assert sum(t.admitted for _, t in more) == 4
        assert {r for r, t in more if t.admitted} == set(hosts)
        for remote, ticket in more:
            remote.done(ticket)
        await trio.testing.wait_all_tasks_blocked()
        assert (limiter.in_flight, link.service.held) == (0, 0)
        nursery.cancel_scope.cancel()
