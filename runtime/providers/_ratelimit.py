"""One limiter per model endpoint, shared by every agent of a run (docs/rate-limits.md).

An :class:`EndpointLimiter` decides when each try of each agent's model call may go out to one
endpoint (a base URL and a key). It holds:

* **token buckets** for requests, tokens (input and output together), and, as Anthropic counts
  them, input tokens and output tokens: each refills at its rate a second and holds at most one
  second's worth (both APIs say a minute's limit may be enforced over shorter intervals), less
  a tenth of a second's worth kept in hand for the jitter of the network, and
  a call may go while its bucket holds what the call will spend (a bucket may go below zero: a
  call bigger than a second's worth goes when the bucket is full, and the next ones wait for
  the debt to be paid). The rates come from ``[rate_limits.NAME]`` (``rpm``, ``tpm``) and from
  the servers' headers as replies arrive (the lower of the two wins); what a header says
  remains lowers a bucket, less what was sent since that request.
* **a pause**: a refusal (429, or Anthropic's 529 overloaded) pauses every call of the
  endpoint until its ``Retry-After`` (plus a little jitter); a refused call goes back to its
  place in the queue, and the others do not spend a try on it.
* **one queue, first asked first served**: a call keeps the time it first asked across its
  retries; only the head of the queue waits on a clock, the others wait for their turn. An
  agent has at most one call in the queue (its turns are one after another), so a call waits
  behind the agents that asked before it, never behind a subtree's future turns.
* **a bound on calls in flight** (``max_concurrent``, by default the connection pool's size).

With no rate information (nothing configured, nothing learned yet) every call goes at once:
a fan-out of N starts N. Each reply's headers are read as they arrive, so the first that say
little remains hold back the calls not yet gone; a server that refuses sets the pace with the
pause above, one pause for a whole burst of refusals (a refusal of a call sent before the last
one counted is the same burst: the pause does not grow with it). A server that sends no
rate-limit headers is not limited until it refuses a call. ``probe_first`` (a
``[rate_limits.NAME]`` key) chooses the other way: until the limits are known one call goes
out alone and the others wait for its reply's headers (one time to first byte, against a
burst of refusals).

**The pace a server does not state is learned** (additive increase, multiplicative decrease,
as TCP learns a path's room): a burst of refusals halves the *window* (the calls allowed in
flight; at the first burst, to the calls that were out and not refused) when the calls in
flight had filled it, and else the learned *request rate* (to half the rate sent in the last
second), unless a header states the rate; every success widens the window by one over its
size and speeds the rate by a request a second per second (a tenth a second above ten a
second). ``min_concurrent`` and ``min_rpm`` are the floors, ``max_concurrent`` the window's
ceiling; a configured ``rpm`` or a rate a header states holds instead of a learned one.

Nonsense from a server (a negative remaining count, a reset in the past, a ``Retry-After`` of
days) is clamped and logged once per endpoint and header; no wait is longer than
:data:`MAX_PAUSE_S`. Nothing here names a key: an endpoint is its public URL and a short hash
of its key.
"""

from __future__ import annotations

import bisect
import datetime
import hashlib
import itertools
import math
import random
import re
from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs
import trio

from runtime._logs import get_logger
from runtime.core import ConfigError, check_rate_limit_table

MAX_PAUSE_S: Final = 60.0
"""The longest pause one refusal may ask for: a ``Retry-After`` above it is clamped (and
logged); the call's deadline still bounds how long an agent waits in all."""
_WINDOW_S: Final = 1.0  # a bucket holds this many seconds of its rate (see the module docstring)
# What the limiter keeps in hand, in seconds of the rate: a request sent at the rate reaches the
# server a little earlier or later than the one before, and a server running at its limit
# refuses one that comes early. A tenth of a second of the rate absorbs that jitter.
_MARGIN_S: Final = 0.1
_JITTER: Final = 0.1  # a pause is lengthened by up to this share of itself, at random
_BACKOFF_S: Final = (0.5, 8.0)  # a refusal that names no wait: 0.5 s, doubling, at most 8 s
_DECREASE: Final = 0.5  # a burst of refusals multiplies the learned window or rate by this
_MIN_RPM: Final = 60.0  # the learned rate's floor unless min_rpm says otherwise: 1 a second
# A wait this short is none: a bucket's refill leaves float crumbs (a delay of 1e-16 s) that a
# deadline cannot land on, and the head would wake at once and spin until the clock moved.
_READY_S: Final = 1e-9

_log: Any = get_logger("trio_agents.providers")

Reason = Literal["refused", "paused", "requests", "tokens"]


def _positive(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ConfigError(f"{attribute.name} must be a number above 0, not {value!r}")


@attrs.frozen(kw_only=True)
class RateLimit:
    """The limits of one endpoint, as ``[rate_limits.NAME]`` sets them.

    Attributes:
        rpm: requests a minute.
        tpm: tokens a minute, input and output together.
        max_concurrent: calls in flight at once.
        probe_first: until the limits are known, the first call goes alone and the others
            wait for its reply's headers (by default they all go at once).
        min_concurrent: the floor of the learned window of calls in flight (default 1).
        min_rpm: the floor of the learned request rate, a minute (default 60).
    """

    rpm: float | None = attrs.field(default=None, validator=_positive)
    tpm: float | None = attrs.field(default=None, validator=_positive)
    max_concurrent: int | None = attrs.field(default=None, validator=_positive)
    probe_first: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    min_concurrent: int | None = attrs.field(default=None, validator=_positive)
    min_rpm: float | None = attrs.field(default=None, validator=_positive)


def check_rate_limits(obj: Any) -> dict[str, RateLimit]:
    """``rate_limits`` (``open_runtime(rate_limits=…)``, or a settings file's tables), checked
    (``runtime/core/_config.py`` holds the one check of the setting); :class:`RateLimit`
    values are taken as they are.

    Raises:
        ConfigError: one line naming the entry and key at fault.
    """
    if isinstance(obj, Mapping):
        given = {k: v for k, v in obj.items() if isinstance(v, RateLimit)}
        tables = {k: v for k, v in obj.items() if not isinstance(v, RateLimit)}
    else:
        given, tables = {}, obj
    try:
        checked = check_rate_limit_table(tables)
    except ValueError as exc:
        raise ConfigError(f"rate_limits: {exc}") from None
    made = {
        name: RateLimit(
            rpm=table.get("rpm"),
            tpm=table.get("tpm"),
            max_concurrent=int(table["max_concurrent"]) if "max_concurrent" in table else None,
            probe_first=bool(table.get("probe_first", False)),
            min_concurrent=int(table["min_concurrent"]) if "min_concurrent" in table else None,
            min_rpm=table.get("min_rpm"),
        )
        for name, table in checked.items()
    }
    return {**given, **made}


def limit_for(
    rate_limits: Mapping[str, RateLimit] | None, provider: str, base_url: str
) -> RateLimit | None:
    """The entry of *rate_limits* for an endpoint: its base URL's, else its provider's."""
    if not rate_limits:
        return None
    wanted = base_url.rstrip("/")
    for name, limit in rate_limits.items():
        if name.rstrip("/") == wanted:
            return limit
    return rate_limits.get(provider)


def endpoint_label(base_url: str, api_key: str | None) -> str:
    """How logs name an endpoint: its public URL and a short hash of its key, never the key."""
    if not api_key:
        return base_url
    digest = hashlib.sha256(api_key.encode()).hexdigest()[:8]
    return f"{base_url} (key #{digest})"


@attrs.define
class _Bucket:
    rate: float
    capacity: float
    level: float
    at: float
    learned: bool = False  # a rate learned from refusals, until a header states one

    @classmethod
    def full(cls, rate: float, now: float, *, learned: bool = False) -> _Bucket:
        capacity = max(1.0, rate * (_WINDOW_S - _MARGIN_S))
        return cls(rate, capacity, capacity, now, learned)

    def refill(self, now: float) -> None:
        if now > self.at:
            self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
        self.at = now

    def ready_in(self, amount: float, now: float) -> float:
        """Seconds until the bucket holds *amount* (a bucket above capacity needs it full)."""
        self.refill(now)
        need = min(amount, self.capacity)
        return 0.0 if self.level >= need else (need - self.level) / self.rate

    def set_rate(self, rate: float, now: float, *, learned: bool = False) -> None:
        self.refill(now)
        self.rate = rate
        self.capacity = max(1.0, rate * (_WINDOW_S - _MARGIN_S))
        self.level = min(self.level, self.capacity)
        self.learned = learned


@attrs.define(eq=False)
class Ticket:
    """One try's place in an endpoint's queue, then its slot while it is in flight.

    Attributes:
        asked_at: when the call first asked (kept across its retries: its place in line).
        tokens: the input tokens the try is expected to send.
        wait_s: the wait foreseen when it asked (0: none foreseen).
        reason: why it waits: ``refused`` (its own try was refused), ``paused`` (another's
            was), ``requests`` or ``tokens`` (the rate).
    """

    asked_at: float
    order: int
    tokens: int
    wait_s: float = 0.0
    reason: Reason = "requests"
    admitted: bool = False
    done: bool = False
    sent_mark: int = 0
    tokens_mark: int = 0
    settled: bool = False
    wake: trio.Event = attrs.Factory(trio.Event)

    def __lt__(self, other: Ticket) -> bool:
        return (self.asked_at, self.order) < (other.asked_at, other.order)


_OPENAI: Final = {"requests": "requests", "tokens": "tokens"}
_ANTHROPIC: Final = {
    "requests": "requests",
    "tokens": "tokens",
    "input-tokens": "input_tokens",
    "output-tokens": "output_tokens",
}


class EndpointLimiter:
    """When each model call to one endpoint may go (see the module docstring).

    A provider asks for a :class:`Ticket` before each try (:meth:`ask`), waits its turn
    (:meth:`wait`), tells the limiter what the reply's headers said (:meth:`learn`, and
    :meth:`refused` for a 429 or 529), what the call used (:meth:`settle`), and gives the
    ticket back when the try is over (:meth:`done`). Every method but :meth:`wait` is
    synchronous.

    The bookkeeping of a ticket's life (its slot, the counts, the refusals in a row) is
    here once, for this limiter and a Ray host's stand-in for it
    (``runtime/cluster/_limits.py``), which overrides only what happens next: here the
    buckets and the queue, there a message to the driver (:meth:`_used`, :meth:`_given_back`).

    Args:
        label: the endpoint in logs (:func:`endpoint_label`).
        limit: the configured limits, if any (``probe_first`` among them).
        max_concurrent: calls in flight at once (the pool's size unless *limit* says less).
    """

    def __init__(
        self,
        label: str,
        *,
        limit: RateLimit | None = None,
        max_concurrent: int = 1000,
        log: Any = _log,
        rng: random.Random | None = None,
    ) -> None:
        self.label = label
        self.limit = limit or RateLimit()
        self.max_concurrent = min(max_concurrent, self.limit.max_concurrent or max_concurrent)
        # The learned pace (the module docstring): the window of calls in flight (``inf``
        # until a burst of refusals says less) and its whole part, the bound _ready_in uses.
        self._window = math.inf
        self._cap = self.max_concurrent
        self._min_window = min(self.limit.min_concurrent or 1, self.max_concurrent)
        self._min_rate = (self.limit.min_rpm or _MIN_RPM) / 60
        self._learning = False  # a refusal has been met: successes widen what it narrowed
        self._window_cut = -1  # the burst (its mark) that narrowed the window
        # The tries sent lately, for the rate sent when a burst of refusals comes: a second
        # from the first try sent after the last one's end (a slot), and the slot before it:
        # what had been sent when each began, and when the one before ended. Kept by a
        # compare per try sent (:meth:`_admit`), and a little more once a second.
        self._slot_end = -math.inf
        self._slot_mark = self._prev_mark = 0
        self._prev_end = -math.inf
        self._log = log
        self._rng = rng or random.Random()
        now = trio.current_time()
        self._buckets: dict[str, _Bucket] = {}
        if self.limit.rpm:
            self._buckets["requests"] = _Bucket.full(self.limit.rpm / 60, now)
        if self.limit.tpm:
            self._buckets["tokens"] = _Bucket.full(self.limit.tpm / 60, now)
        # Only a probing endpoint waits for the limits to be known (the module docstring).
        self._known = bool(self._buckets) or not self.limit.probe_first
        self._queue: list[Ticket] = []
        self._order = itertools.count()
        self._in_flight = 0
        self._pause_until = -math.inf
        self._strikes = 0
        self._burst_mark = 0  # what had been sent when the last refusal in a row was counted
        self._sent = 0
        self._sent_tokens = 0
        self._warned: set[str] = set()
        self.refusals = 0
        """Refusals (429, 529) met on this endpoint."""

    @property
    def in_flight(self) -> int:
        """Calls out now."""
        return self._in_flight

    @property
    def waiting(self) -> int:
        """Calls waiting their turn."""
        return len(self._queue)

    def rates(self) -> dict[str, float]:
        """The rates a second the limiter goes by now, by bucket (for tests and logs)."""
        return {name: b.rate for name, b in self._buckets.items()}

    @property
    def window(self) -> float:
        """The learned window of calls in flight (``inf``: none learned; ``max_concurrent``
        bounds the calls in flight all the same)."""
        return self._window

    # -- a try's life ------------------------------------------------------------------------------

    def ask(
        self, tokens: int, *, asked_at: float, refused: bool = False, agent_id: str | None = None
    ) -> Ticket:
        """Join the queue for one try expected to send *tokens* input tokens.

        Args:
            asked_at: when the call first asked (its place in line, kept across retries).
            refused: the call's previous try was refused (the wait's reason says so).
            agent_id: the asking agent (unused here; a Ray host's limiter tells the driver,
                which reports the agent's wait: ``runtime/cluster/_limits.py``).
        """
        ticket = Ticket(asked_at, next(self._order), tokens)
        bisect.insort(self._queue, ticket)
        ticket.wait_s, ticket.reason = self._foresee(ticket)
        if refused:
            ticket.reason = "refused"
        return ticket

    async def wait(self, ticket: Ticket) -> None:
        """Wait until *ticket* may go; it then holds a slot until :meth:`done`.

        Cancellation: a checkpoint; cancelled while waiting, the ticket leaves the queue at
        once and holds nothing.
        """
        try:
            while True:
                if self._queue and self._queue[0] is ticket:
                    delay = self._ready_in(ticket)
                    if delay <= _READY_S:
                        self._admit(ticket)
                        return
                    with trio.move_on_after(delay):
                        await ticket.wake.wait()
                else:
                    await ticket.wake.wait()
                ticket.wake = trio.Event()
        finally:
            if not ticket.admitted:
                self._leave(ticket)

    def learn(self, ticket: Ticket | None, headers: Mapping[str, str]) -> None:
        """Read a reply's rate-limit headers (any status): the limits and what remains."""
        now = trio.current_time()
        found = False
        for prefix, names, style in (
            ("x-ratelimit-", _OPENAI, "openai"),
            ("anthropic-ratelimit-", _ANTHROPIC, "anthropic"),
        ):
            for wire, bucket in names.items():
                if style == "openai":
                    keys = (f"{prefix}limit-{wire}", f"{prefix}remaining-{wire}",
                            f"{prefix}reset-{wire}")
                else:
                    keys = (f"{prefix}{wire}-limit", f"{prefix}{wire}-remaining",
                            f"{prefix}{wire}-reset")
                limit = headers.get(keys[0])
                if limit is None:
                    continue
                found |= self._learn_bucket(
                    bucket, keys, limit, headers.get(keys[1]), headers.get(keys[2]), ticket, now
                )
        if found or not self._known:
            self._known = True
            self._wake_head()

    def refused(self, ticket: Ticket | None, status: int, retry_after_s: float | None) -> float:
        """A 429 or 529: pause the endpoint and slow its learned pace (:meth:`_slow_down`);
        returns the pause in seconds.

        The pause is the server's ``Retry-After`` (clamped to :data:`MAX_PAUSE_S`; without
        one, 0.5 s doubling with each refusal in a row, at most 8 s: :meth:`_refusal_pause`),
        plus up to a tenth more at random so that runs sharing a key do not come back in step.
        """
        now = trio.current_time()
        wait, first = self._refusal_pause(ticket, retry_after_s)
        self._slow_down(first, now)
        wait += self._rng.uniform(0, _JITTER * wait)
        self._pause_until = max(self._pause_until, now + wait)
        requests = self._buckets.get("requests")
        if requests is not None:
            # The server is out of requests until the pause ends: one is there then, and the
            # calls resume at the rate, not all at once.
            requests.refill(now)
            requests.level = min(
                requests.level, 1.0 - requests.rate * (self._pause_until - now + _MARGIN_S)
            )
        self._known = True
        self._log.debug("ratelimit.refused", endpoint=self.label, status=status,
                        pause_s=round(wait, 3))
        self._wake_head()
        return max(0.0, self._pause_until - now)

    def settle(self, ticket: Ticket, input_tokens: int, output_tokens: int) -> None:
        """What the call used, as the server reported it: the buckets are corrected."""
        if ticket.settled or not ticket.admitted:
            return
        ticket.settled = True
        self._strikes = 0
        self._used(ticket, input_tokens, output_tokens)

    def done(self, ticket: Ticket) -> None:
        """The try is over (or never went): its slot or its place is given back."""
        if ticket.done:
            return
        ticket.done = True
        if ticket.admitted:
            self._in_flight -= 1
        self._given_back(ticket)

    # -- the bookkeeping a Ray host's limiter shares ----------------------------------------------

    def _admitted(self, ticket: Ticket) -> None:
        """*ticket* holds a slot now: counted as sent (what a later header's remaining count
        is measured against, and which refusals are one burst)."""
        ticket.admitted = True
        self._in_flight += 1
        self._sent += 1
        self._sent_tokens += ticket.tokens
        ticket.sent_mark, ticket.tokens_mark = self._sent, self._sent_tokens

    def _refusal_pause(
        self, ticket: Ticket | None, retry_after_s: float | None
    ) -> tuple[float, bool]:
        """Count a refusal; the pause it asks for, before jitter, and whether it is the first
        of a burst.

        A refusal of a try sent before the last counted one arrived is the same burst (a
        fan-out's first calls refused together): it is not one more in a row, so the back-off
        does not double for each call of the burst.
        """
        self.refusals += 1
        first = ticket is None or not ticket.admitted or ticket.sent_mark > self._burst_mark
        if first:
            self._strikes += 1
            self._burst_mark = self._sent
        if retry_after_s is None:
            step: float = _BACKOFF_S[0] * 2.0 ** (max(self._strikes, 1) - 1)
            return min(_BACKOFF_S[1], step), first
        if retry_after_s > MAX_PAUSE_S:
            self._warn_once("retry-after", retry_after_s, f"clamped to {MAX_PAUSE_S:g} s")
            return MAX_PAUSE_S, first
        return max(retry_after_s, 0.0), first

    def _slow_down(self, first: bool, now: float) -> None:
        """A refusal: the multiplicative decrease of the learned pace (the module docstring).

        At the first refusal of a burst the calls out (this one among them) say which bound
        the server met: when they had filled the window (wider than its floor), the window is
        halved; else (or at the first burst, with no window yet) the learned rate is halved,
        from the rate sent in the last second, unless a rate is configured or stated by a
        header (that rate holds). A burst that narrowed the window narrows it on to the calls
        still out as its refusals come (the server took those), never below its floor.
        """
        self._learning = True
        flight = self._in_flight
        if first:
            unbounded = self._window == math.inf
            filled = not unbounded and flight >= self._cap > self._min_window
            if (unbounded or filled) and flight > self._min_window:
                self._set_window(_DECREASE * min(self._window, flight))
                self._window_cut = self._burst_mark
            if not filled:
                self._slow_rate(now)
        elif self._window_cut == self._burst_mark:
            self._set_window(min(self._window, flight - 1))

    def _slow_rate(self, now: float) -> None:
        requests = self._buckets.get("requests")
        if requests is not None and not requests.learned:
            return  # configured, or stated by the server's headers: that rate holds
        rate = min(requests.rate if requests is not None else math.inf, self._sent_lately(now))
        rate = max(self._min_rate, _DECREASE * rate)
        if requests is None:
            self._buckets["requests"] = _Bucket.full(rate, now, learned=True)
        else:
            requests.set_rate(rate, now, learned=True)

    def _sent_lately(self, now: float) -> float:
        """The tries sent in the last second, about (the slot before this one weighed by the
        share of it within the last second), at least one: the refused try was sent."""
        if now >= self._slot_end:
            self._roll(now)
        share = min(1.0, max(0.0, self._prev_end - (now - 1.0)))
        sent = self._sent - self._slot_mark + (self._slot_mark - self._prev_mark) * share
        return max(sent, 1.0)

    def _roll(self, now: float) -> None:
        """A new slot of a second, from *now* (see ``__init__``)."""
        if now < self._slot_end + 1.0:
            self._prev_mark, self._prev_end = self._slot_mark, self._slot_end
        else:  # nothing was sent in the second before
            self._prev_mark, self._prev_end = self._sent, -math.inf
        self._slot_mark, self._slot_end = self._sent, now + 1.0

    def _speed_up(self, now: float) -> None:
        """A success: the additive increase of the learned pace, up to its ceilings."""
        if self._window < self.max_concurrent:
            self._set_window(self._window + 1.0 / self._window)
        requests = self._buckets.get("requests")
        if requests is not None and requests.learned:
            requests.set_rate(requests.rate + max(1.0 / requests.rate, 0.1), now, learned=True)

    def _set_window(self, window: float) -> None:
        self._window = min(max(window, self._min_window), self.max_concurrent)
        self._cap = int(self._window)

    def _used(self, ticket: Ticket, input_tokens: int, output_tokens: int) -> None:
        """Settled (:meth:`settle`): the token buckets are corrected by what was used."""
        now = trio.current_time()
        for name, used, reserved in (
            ("tokens", input_tokens + output_tokens, ticket.tokens),
            ("input_tokens", input_tokens, ticket.tokens),
            ("output_tokens", output_tokens, 0),
        ):
            bucket = self._buckets.get(name)
            if bucket is not None and used != reserved:
                bucket.refill(now)
                bucket.level -= used - reserved
        if self._learning:
            self._speed_up(now)

    def _given_back(self, ticket: Ticket) -> None:
        """Done (:meth:`done`): the next in line may take the slot, or the place is left."""
        if ticket.admitted:
            self._wake_head()
        else:
            self._leave(ticket)

    # -- inside ------------------------------------------------------------------------------------

    def _weights(self, ticket: Ticket) -> dict[str, float]:
        return {"requests": 1.0, "tokens": ticket.tokens, "input_tokens": ticket.tokens,
                "output_tokens": 0.0}

    def _ready_in(self, ticket: Ticket) -> float:
        """Seconds until the head *ticket* may go (``inf``: until something changes)."""
        if self._in_flight >= self._cap:
            return math.inf
        if not self._known and self._in_flight:
            return math.inf  # probe_first: the first call's headers will say the limits
        now = trio.current_time()
        delay = self._pause_until - now
        if self._buckets:  # (no rate known: no weights to make)
            weights = self._weights(ticket)
            for name, bucket in self._buckets.items():
                delay = max(delay, bucket.ready_in(weights[name], now))
        return delay

    def _foresee(self, ticket: Ticket) -> tuple[float, Reason]:
        """The wait foreseen for *ticket* now: its place in line at the known rates."""
        now = trio.current_time()
        pause = self._pause_until - now
        best = max(pause, 0.0)
        reason: Reason = "paused"
        if not self._buckets:
            return best, reason
        place = bisect.bisect_left(self._queue, ticket)  # the calls ahead of it
        tokens_ahead: float | None = None
        for name, bucket in self._buckets.items():
            bucket.refill(now)
            if name == "requests":
                need = float(place + 1)
            elif name == "output_tokens":
                continue
            else:
                if tokens_ahead is None:  # only with a token limit: a pass over the queue
                    tokens_ahead = float(sum(t.tokens for t in self._queue[: place + 1]))
                need = tokens_ahead
            wait = max(0.0, pause, (need - bucket.level) / bucket.rate)
            if wait > best:
                best = wait
                reason = "requests" if name == "requests" else "tokens"
        return best, reason

    def _admit(self, ticket: Ticket) -> None:
        now = trio.current_time()
        self._queue.pop(0)
        if now >= self._slot_end:
            self._roll(now)
        self._admitted(ticket)
        if self._buckets:
            weights = self._weights(ticket)
            for name, bucket in self._buckets.items():
                bucket.refill(now)
                bucket.level -= weights[name]
        self._wake_head()

    def _leave(self, ticket: Ticket) -> None:
        ticket.done = True
        index = bisect.bisect_left(self._queue, ticket)
        if index < len(self._queue) and self._queue[index] is ticket:
            del self._queue[index]
            if index == 0:
                self._wake_head()

    def _wake_head(self) -> None:
        if self._queue:
            self._queue[0].wake.set()

    def _learn_bucket(
        self,
        name: str,
        keys: tuple[str, str, str],
        limit_text: str,
        remaining_text: str | None,
        reset_text: str | None,
        ticket: Ticket | None,
        now: float,
    ) -> bool:
        limit = _number(limit_text)
        if limit is None or limit <= 0:
            self._warn_once(keys[0], limit_text, "ignored")
            return False
        rate = limit / 60
        configured = {"requests": self.limit.rpm, "tokens": self.limit.tpm}.get(name)
        if configured:
            rate = min(rate, configured / 60)
        bucket = self._buckets.get(name)
        if bucket is None:
            bucket = self._buckets[name] = _Bucket.full(rate, now)
        elif bucket.rate != rate or bucket.learned:
            bucket.set_rate(rate, now)
        if remaining_text is not None:
            remaining = _number(remaining_text)
            if remaining is None or remaining < 0:
                self._warn_once(keys[1], remaining_text, "taken as 0")
                remaining = 0.0
            sent_since = 0.0
            if ticket is not None and ticket.admitted:
                sent_since = (
                    self._sent - ticket.sent_mark if name == "requests"
                    else self._sent_tokens - ticket.tokens_mark if name != "output_tokens"
                    else 0.0
                )
            bucket.refill(now)
            bucket.level = min(bucket.level, remaining - sent_since - bucket.rate * _MARGIN_S)
        if reset_text is not None and _reset_s(reset_text) is None:
            self._warn_once(keys[2], reset_text, "ignored")
        return True

    def _warn_once(self, header: str, value: object, action: str) -> None:
        if header in self._warned:
            return
        self._warned.add(header)
        self._log.warning(
            "ratelimit.header_nonsense", endpoint=self.label, header=header,
            value=str(value)[:40], action=action,
        )


def _number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


_DURATION: Final = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?"
                              r"(?:(\d+(?:\.\d+)?)s)?(?:(\d+(?:\.\d+)?)ms)?")


def _reset_s(text: str) -> float | None:
    """A reset header in seconds from now: OpenAI's ``1m30.5s`` / ``20ms`` or Anthropic's RFC
    3339 time; ``None`` for nonsense (unreadable, negative, or a time in the past)."""
    text = text.strip()
    match = _DURATION.fullmatch(text)
    if match and text:
        h, m, s, ms = (float(g) if g else 0.0 for g in match.groups())
        return h * 3600 + m * 60 + s + ms / 1000
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    left = (when - datetime.datetime.now(datetime.UTC)).total_seconds()
    return left if left >= -1.0 else None  # a second of clock skew is no nonsense
