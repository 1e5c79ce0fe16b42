"""One rate limiter for the whole run, Ray hosts included (docs/rate-limits.md, "Ray hosts").

The driver's provider holds the endpoint's :class:`~runtime.providers.EndpointLimiter`; a Ray
host's provider holds a :class:`RemoteLimiter` in its place, which asks the driver's limiter
for every try over the placement's channel, the way a remote tool call asks the driver's
permission broker::

    host: RemoteLimiter                                 driver: LimiterService
    ask()    ── LimiterAsked (in the subtree's stream) ──▶  limiter.ask(); a task waits its turn
    wait()   ◀── RayHost.limiter_grant (control call) ───  granted: the ticket holds its slot
    learn(), refused(), settle(), done()
             ── LimiterReport (in the subtree's stream) ─▶  the same calls on the driver's ticket

The driver's queue so orders every call of the run, local or remote, first asked first
served, and a refusal met on one host pauses every host. A host's messages ride its channel
(an ask wakes it at once; the reports go with the next envelope); the grants of one round of
the driver's loop go to a host in one call. The driver reports a remote agent's wait
(``rate_limited``) as it foresees it, as an in-process agent's limiter does; a host reports the
wait after a refusal of its own try, from the server's ``Retry-After``.

Nothing leaks: a wait cancelled on the host leaves the driver's queue when its ``done``
arrives; a subtree that ends (or whose host is lost) gives back every ticket it held
(:meth:`LimiterService.release`).
"""

from __future__ import annotations

import contextvars
import itertools
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, Literal

import attrs
import trio

from runtime.core import Event
from runtime.providers import EndpointLimiter, Ticket

# The subtree a host's task runs for (set by the host for each subtree's task; its agents'
# tasks inherit it): where a RemoteLimiter sends that call's messages.
CURRENT_CALL: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "trio_agents_ray_call", default=None
)
_HEADERS: Final = ("x-ratelimit-", "anthropic-ratelimit-", "retry-after")


@attrs.frozen(kw_only=True)
class LimiterAsked(Event):
    """A host's try asks the driver's limiter for its turn (never forwarded).

    Attributes:
        ticket: the try's number on its host.
        tokens: the input tokens it is expected to send.
        age_s: how long ago its call first asked (its place in line, kept across tries).
        refused: its call's previous try was refused.
    """

    type: ClassVar[str] = "x_ray_limiter_asked"
    ticket: int
    tokens: int
    age_s: float
    refused: bool


@attrs.frozen(kw_only=True)
class LimiterReport(Event):
    """What a host's try met, for the driver's ticket of it (never forwarded).

    Attributes:
        what: ``learn`` (a reply's rate-limit *headers*), ``refused`` (*status*,
            *retry_after_s*), ``settle`` (the usage) or ``done`` (the try is over, or its wait
            was given up).
    """

    type: ClassVar[str] = "x_ray_limiter_report"
    ticket: int
    what: Literal["learn", "refused", "settle", "done"]
    headers: tuple[tuple[str, str], ...] = ()
    status: int = 0
    retry_after_s: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0


Send = Callable[[str, Event, bool], None]
"""How a host sends a message for subtree ``call_id``: ``send(call_id, event, urgent)``."""


class RemoteLimiter(EndpointLimiter):
    """A Ray host's stand-in for the driver's limiter of an endpoint (see the module doc).

    The same calls as :class:`~runtime.providers.EndpointLimiter`, so a provider cannot tell
    them apart; the decisions are the driver's (its admission policy too: with no rate
    information, every call at once). One per run on a host, shared by its subtrees (whose
    calls it tells apart by :data:`CURRENT_CALL`). A ticket's bookkeeping (its slot, the
    refusals in a row, ``settle`` and ``done`` once each) is the base class's; here each step
    becomes a message to the driver.

    Args:
        label: the endpoint in logs.
        send: how a message reaches the driver (the host's outbox).
    """

    def __init__(self, label: str, send: Send) -> None:
        super().__init__(label)
        self._send_message = send
        self._numbers = itertools.count(1)
        self._tickets: dict[int, tuple[Ticket, str]] = {}
        self._remote_pause = -math.inf

    @property
    def waiting(self) -> int:
        """This host's tries waiting for the driver's grant."""
        return sum(1 for t, _ in self._tickets.values() if not t.admitted)

    def ask(
        self, tokens: int, *, asked_at: float, refused: bool = False, agent_id: str | None = None
    ) -> Ticket:
        """Ask the driver for a turn (see :meth:`EndpointLimiter.ask`); the driver reports
        the wait it foresees, so the ticket foresees none, except after a refusal of the call's
        own try: the server's pause then."""
        call_id = CURRENT_CALL.get()
        if call_id is None:
            raise RuntimeError("a Ray host's model call outside a subtree")
        now = trio.current_time()
        ticket = Ticket(asked_at, next(self._numbers), tokens)
        if refused:
            ticket.wait_s, ticket.reason = max(0.0, self._remote_pause - now), "refused"
        self._tickets[ticket.order] = (ticket, call_id)
        self._send_message(
            call_id,
            LimiterAsked(agent_id=agent_id, parent_tool_use_id=None, ts=time.time(),
                         ticket=ticket.order, tokens=tokens, age_s=max(0.0, now - asked_at),
                         refused=refused),
            True,
        )
        return ticket

    async def wait(self, ticket: Ticket) -> None:
        """Wait for the driver's grant; cancelled, the driver's ticket is given back."""
        try:
            while not ticket.admitted:
                await ticket.wake.wait()
                ticket.wake = trio.Event()
        finally:
            if not ticket.admitted:
                self.done(ticket)

    def granted(self, number: int) -> None:
        """The driver's grant of ticket *number* (a ticket given up meanwhile: ignored)."""
        held = self._tickets.get(number)
        if held is None or held[0].done or held[0].admitted:
            return
        ticket = held[0]
        self._admitted(ticket)
        ticket.wake.set()

    def learn(self, ticket: Ticket | None, headers: Mapping[str, str]) -> None:
        """Send the reply's rate-limit headers (every reply: the first one tells the driver
        the endpoint's limits, or that it states none)."""
        if ticket is None or ticket.order not in self._tickets:
            return
        kept = tuple(
            (k.lower(), v) for k, v in headers.items() if k.lower().startswith(_HEADERS)
        )
        self._report(ticket, "learn", headers=kept)

    def refused(self, ticket: Ticket | None, status: int, retry_after_s: float | None) -> float:
        """Tell the driver of a refusal; the pause foreseen here: the server's ``Retry-After``
        (clamped as the driver clamps it), else the driver's back-off (a burst's refusals
        one step of it, as on the driver)."""
        now = trio.current_time()
        pause, _ = self._refusal_pause(ticket, retry_after_s)
        self._remote_pause = max(self._remote_pause, now + pause)
        if ticket is not None and ticket.order in self._tickets:
            self._report(ticket, "refused", status=status, retry_after_s=retry_after_s)
        return max(0.0, self._remote_pause - now)

    def _used(self, ticket: Ticket, input_tokens: int, output_tokens: int) -> None:
        """Settled: what the call used goes to the driver."""
        if ticket.order in self._tickets:
            self._report(ticket, "settle", input_tokens=input_tokens,
                         output_tokens=output_tokens)

    def _given_back(self, ticket: Ticket) -> None:
        """Done (the try is over, or gave up its wait): the driver's ticket is given back."""
        if ticket.order in self._tickets:
            self._report(ticket, "done", urgent=True)
            del self._tickets[ticket.order]

    def _warn_once(self, header: str, value: object, action: str) -> None:
        """Nothing: the driver's limiter, which gets the same refusal, logs the nonsense."""

    def _report(self, ticket: Ticket, what: Any, *, urgent: bool = False, **values: Any) -> None:
        call_id = self._tickets[ticket.order][1]
        self._send_message(
            call_id,
            LimiterReport(agent_id=None, parent_tool_use_id=None, ticket=ticket.order,
                          what=what, **values),
            urgent,
        )


@attrs.define(eq=False)
class _Remote:
    """The driver's ticket of one host's try, and the task waiting its turn."""

    ticket: Ticket
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)


class LimiterService:
    """The driver's side: every host's tries queue at the run's one limiter of the endpoint.

    Args:
        limiter: the driver's provider's limiter.
        nursery: where the waiting tasks run (the placement's).
        grant: sends the grants ``[(call_id, ticket)]`` of one round to one host (``key``).
    """

    def __init__(
        self,
        limiter: EndpointLimiter,
        nursery: trio.Nursery,
        grant: Callable[[Any, list[tuple[str, int]]], None],
    ) -> None:
        self.limiter = limiter
        self._nursery = nursery
        self._grant = grant
        # By subtree (its stream object), then by the host's ticket number.
        self._held: dict[Any, dict[int, _Remote]] = {}
        self._grants: dict[Any, list[tuple[str, int]]] = {}

    def asked(self, subtree: Any, host: Any, call_id: str, msg: LimiterAsked) -> Ticket | None:
        """A host's try asks: it joins the driver's queue. Returns its ticket when a wait is
        foreseen (``wait_s``, ``reason``: the caller reports it), else ``None`` (no wait, or a
        refused call's, which its host reports)."""
        ticket = self.limiter.ask(
            msg.tokens, asked_at=trio.current_time() - msg.age_s, refused=msg.refused
        )
        remote = _Remote(ticket)
        self._held.setdefault(subtree, {})[msg.ticket] = remote
        self._nursery.start_soon(self._wait, host, call_id, msg.ticket, remote)
        return ticket if ticket.wait_s > 0 and not msg.refused else None

    def report(self, subtree: Any, msg: LimiterReport) -> None:
        """What a host's try met: the same call on the driver's ticket."""
        held = self._held.get(subtree)
        remote = held.get(msg.ticket) if held is not None else None
        if remote is None:
            return  # its subtree has ended (released): nothing is held for it
        limiter, ticket = self.limiter, remote.ticket
        if msg.what == "learn":
            limiter.learn(ticket, dict(msg.headers))
        elif msg.what == "refused":
            limiter.refused(ticket, msg.status, msg.retry_after_s)
        elif msg.what == "settle":
            limiter.settle(ticket, msg.input_tokens, msg.output_tokens)
        else:
            assert held is not None
            del held[msg.ticket]
            self._give_back(remote)

    def release(self, subtree: Any) -> None:
        """The subtree has ended (or its host is lost): every ticket it held is given back."""
        for remote in self._held.pop(subtree, {}).values():
            self._give_back(remote)

    @property
    def held(self) -> int:
        """Tickets of remote tries the driver holds now (waiting or in flight)."""
        return sum(len(h) for h in self._held.values())

    def _give_back(self, remote: _Remote) -> None:
        remote.scope.cancel()
        self.limiter.done(remote.ticket)  # its slot, or its place in line

    async def _wait(self, host: Any, call_id: str, number: int, remote: _Remote) -> None:
        with remote.scope:
            if remote.ticket.done:
                return  # given back before this task started
            await self.limiter.wait(remote.ticket)
        if remote.ticket.admitted and not remote.ticket.done:
            grants = self._grants.get(host)
            if grants is None:
                grants = self._grants[host] = []
                self._nursery.start_soon(self._flush, host)
            grants.append((call_id, number))

    async def _flush(self, host: Any) -> None:
        # The grants of this round of the loop, in one call to the host.
        await trio.lowlevel.checkpoint()
        grants = self._grants.pop(host, [])
        if grants:
            self._grant(host, grants)
