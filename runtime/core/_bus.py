"""The event bus: where every agent's events merge into ONE flat stream.

``seq`` is assigned here, at the merge point, so it is strictly increasing with no gaps. An event
reaches consumers two ways:

* **core hooks** — the runtime's own bookkeeping (budget accounting, which agents are
  announced), run first for every event, in ``seq`` order, inside :meth:`EventBus.emit`. They are
  never removed: one that raises fails the run loudly (:attr:`EventBus.core_error`, and the
  ``on_core_failure`` callback the runtime uses to stop the run), since a run whose budgets or
  cancel-by-id silently stopped working is worse than one that ends.
* **taps** — synchronous callables run for every event in ``seq`` order, inside
  :meth:`EventBus.emit` (the trace file writer, the live view's tree, user observers). They must be
  cheap and must not emit themselves; one that raises is removed with a logged warning, and the
  stream goes on without it.
* **subscriptions** — bounded per-subscriber buffers read by a consumer task. Each chooses what a
  full buffer means: ``block`` (backpressure: emitters wait — for consumers that must see
  everything) or ``lag`` (the subscription is dropped and its reader gets
  :class:`SubscriberLagged` — a slow or stuck consumer never blocks the agents). A subscriber that
  closes simply disappears.

Every event takes ONE path into the stream (``EventBus._publish``), whichever way it comes: an
emitter builds it with its own class and hands it to :meth:`EventBus.emit` (or ``emit_nowait``,
``emit_final``), a held-back text is released, a Ray host's event is forwarded. On that path the
event is masked, given the next ``seq``, ``ts`` (a forwarded one keeps its own) and the run id,
in place (nobody else holds it yet), and delivered. What makes emitters wait is a
:class:`Backpressure` the bus is given: by default :class:`BlockingReaders` (the ``block``
subscriptions), on a Ray host the host's outbox.

Secrets are masked here, once for every consumer: the fields of each event that may hold text
(the event class says which: not ids, enums or numbers), at any depth (a tool's input, the run's
config), go through the run's :class:`~runtime.core._secrets.Secrets` before anyone sees the
event. A ``text_delta`` / ``thinking_delta`` whose end could be the start of a
secret holds that end back until the agent's next event shows whether it was (a secret streamed
over several deltas is masked whole); the held text goes out, masked, as a delta of its own before
that agent's next event of another kind.

A *gate* (:meth:`EventBus.set_gate`, the trace file's sink) is flushed before a subscription hands
out an event it has not written yet: whatever a subscriber shows or forwards outside the process
is already in the trace, so a ``kill -9`` never leaves the trace behind what was reported.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Collection
from typing import Any, Literal, Protocol, TypeVar

import attrs
import trio

from runtime._logs import get_logger

from ._errors import AgentsError
from ._events import Event, TextDelta, ThinkingDelta, searched_fields
from ._secrets import NO_SECRETS, Secrets

E = TypeVar("E", bound=Event)
Tap = Callable[[Event], None]
Policy = Literal["block", "lag"]

_log = get_logger("trio_agents.bus")
_STREAMED: tuple[type[TextDelta | ThinkingDelta], ...] = (TextDelta, ThinkingDelta)
# A reader that finds events waiting takes up to this many in a row before it yields to the
# scheduler (it checks for cancellation on every one): a backlog is read in one wake-up instead
# of one scheduler round per event, and other tasks still get in.
_READ_BURST = 64


class Gate(Protocol):
    """What the bus needs from the trace sink: how far it has written, and a way to write now."""

    written_seq: int

    def flush(self) -> None: ...


class SubscriberLagged(AgentsError):
    """A ``lag`` subscription fell more than its buffer behind and was dropped."""


class Subscription:
    """One consumer's view of the stream; iterate it with ``async for``.

    Ends with :class:`trio.EndOfChannel` (ending the ``async for``) once the bus closes and the
    buffer is drained.
    """

    def __init__(self, bus: EventBus, buffer: int, policy: Policy) -> None:
        if buffer < 1:
            raise ValueError("a subscription buffers at least one event")
        self._bus = bus
        self._buffer: deque[Event] = deque()
        self.max_buffer = buffer
        self.policy = policy
        self._readers = trio.lowlevel.ParkingLot()
        self._writers = trio.lowlevel.ParkingLot()
        self._ended = False
        self._lagged = False
        # A block reader that made a finishing event wait its whole grace period: not waited
        # for again (by emit_final) until it reads.
        self._stalled = False
        self._closed = False
        # Events taken since this reader last yielded (see _READ_BURST).
        self._burst = 0
        # Waiting emitters are woken once the buffer is down to this (hysteresis: a full
        # buffer refills in one go, not one event per scheduler round).
        self._low_water = buffer // 2

    # -- bus side ---------------------------------------------------------------
    def _full(self) -> bool:
        return len(self._buffer) >= self.max_buffer

    def _push(self, event: Event) -> None:
        if self._full():
            # Only ``lag`` subscriptions get here: ``block`` ones made the emitter wait first.
            self._lagged = True
            self._buffer.clear()
            self._bus._drop(self)
        else:
            self._buffer.append(event)
        if self._readers:
            self._readers.unpark_all()

    def _end(self) -> None:
        self._ended = True
        self._readers.unpark_all()
        self._writers.unpark_all()

    # -- consumer side ----------------------------------------------------------
    async def receive(self) -> Event:
        """The next event.

        Raises:
            trio.EndOfChannel: the run is over and everything was read.
            SubscriberLagged: this ``lag`` subscription fell too far behind.
            trio.ClosedResourceError: :meth:`close` was called.

        Cancellation: a checkpoint; a cancelled receive loses no event.
        """
        # The checkpoint comes first: between finding an event and taking it there is no
        # yield, so two readers of one subscription never both take the same last event.
        await trio.lowlevel.checkpoint()
        self._burst = 0
        while not self._buffer:
            if self._closed:
                raise trio.ClosedResourceError("subscription closed")
            if self._lagged:
                raise SubscriberLagged(f"subscriber fell more than {self.max_buffer} events behind")
            if self._ended:
                raise trio.EndOfChannel
            self._burst = 0
            await self._readers.park()
        return self._take()

    def _take(self) -> Event:
        event = self._buffer.popleft()
        self._bus._through_gate(event.seq)
        self._stalled = False
        if self._writers and len(self._buffer) <= self._low_water:
            # Room freed: wake one waiting emitter, not all of them (with a thousand agents
            # waiting, waking all on every read made a blocking reader quadratic); it passes
            # the turn on while room is left (EventBus._pass_turn).
            self._writers.unpark()
        return event

    def stall(self) -> None:
        """Say this reader cannot keep up for now (its output is blocked): ends emitted from now
        on (:meth:`EventBus.emit_final`) do not wait for it, until it next reads. Plain emits
        still wait: that is the backpressure."""
        self._stalled = True
        # Ends already waiting re-check (plain emits find it still full and wait on).
        self._writers.unpark_all()

    def receive_nowait(self) -> Event:
        """The next event if one is buffered, else :class:`trio.WouldBlock`."""
        if self._buffer:
            return self._take()
        if self._lagged:
            raise SubscriberLagged(f"subscriber fell more than {self.max_buffer} events behind")
        if self._ended:
            raise trio.EndOfChannel
        raise trio.WouldBlock

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        """The next event, as :meth:`receive` gives it, except that events already waiting
        are taken up to 64 in a row without yielding to other tasks (issue 20: a backlog is
        read in one wake-up, not one scheduler round per event).

        Cancellation: checks for cancellation every time (a cancelled step loses no event);
        a checkpoint whenever it waits, and at least at every 65th event.
        """
        if self._buffer and self._burst < _READ_BURST:
            # No yield between finding the event and taking it (see receive).
            await trio.lowlevel.checkpoint_if_cancelled()
            self._burst += 1
            return self._take()
        try:
            return await self.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    def close(self) -> None:
        """Stop receiving; the bus forgets this subscription at once and never waits for it."""
        self._closed = True
        self._buffer.clear()
        self._bus._drop(self)
        self._readers.unpark_all()
        self._writers.unpark_all()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Backpressure(Protocol):
    """What makes a bus's emitters wait: a strategy the bus is given (the default waits for
    full ``block`` subscriptions, :class:`BlockingReaders`; a Ray host's waits for its outbox).

    The bus asks :meth:`has_room` before every emit while the strategy is engaged, waits with
    :meth:`wait_for_room` when there is none, and calls :meth:`passed` after the event is out.
    An end (:meth:`EventBus.emit_final`) waits only while :meth:`final_must_wait`, at most its
    grace (:meth:`wait_final`), and then goes out anyway.
    """

    def has_room(self) -> bool: ...

    async def wait_for_room(self) -> None: ...

    def passed(self) -> None: ...

    def final_must_wait(self) -> bool: ...

    async def wait_final(self, grace_s: float) -> None: ...


class BlockingReaders:
    """The default :class:`Backpressure`: emitters wait while a ``block`` subscription is
    full; engaged only while the bus has one."""

    def __init__(self) -> None:
        self.readers: list[Subscription] = []

    def has_room(self) -> bool:
        # A loop, not all(...): called per streamed chunk, and a generator costs more here.
        for sub in self.readers:  # noqa: SIM110
            if len(sub._buffer) >= sub.max_buffer:
                return False
        return True

    async def wait_for_room(self) -> None:
        while self.readers:
            full = next((s for s in self.readers if s._full()), None)
            if full is None:
                return
            await full._writers.park()

    def passed(self) -> None:
        # A reader wakes one waiting emitter per event it takes. If there is still room after
        # this emit (the reader took several, or this emitter was woken by one subscription but
        # waited on another), wake the next, so a free slot never sits unused while emitters
        # wait for it.
        for sub in self.readers:
            if sub._writers and not sub._full():
                sub._writers.unpark()

    def _waits_for_final(self) -> Subscription | None:
        """A full ``block`` subscription whose reader is not known to be stalled."""
        return next((s for s in self.readers if s._full() and not s._stalled), None)

    def final_must_wait(self) -> bool:
        return self._waits_for_final() is not None

    async def wait_final(self, grace_s: float) -> None:
        with trio.move_on_after(grace_s, shield=True):
            # Re-checked on every wake-up: a reader may have been marked stalled meanwhile.
            while (sub := self._waits_for_final()) is not None:
                await sub._writers.park()
        for s in self.readers:
            if s._full() and not s._stalled:
                s.stall()  # and other ends waiting on it stop waiting too


class EventBus:
    """The merge point of a run's events. Create one per run.

    Events are built by their emitters with their own class (``TextDelta(agent_id=…,
    parent_tool_use_id=…, text=…)``, ``seq``, ``ts`` and ``run_id`` left to the bus) and handed
    to :meth:`emit`, :meth:`emit_nowait` or :meth:`emit_final`, which mask, stamp and deliver
    that very object and return it.

    Args:
        secrets: the run's secrets, masked in every event (see the module's docstring).
        backpressure: what makes emitters wait; by default the ``block`` subscriptions
            (:class:`BlockingReaders`). A bus given another (a Ray host's outbox) takes no
            ``block`` subscription.
        first_seq: the ``seq`` of the last event already in the stream: a resumed run's bus
            goes on from its trace's last one (docs/resume.md).
    """

    def __init__(
        self,
        run_id: str,
        *,
        secrets: Secrets | None = None,
        backpressure: Backpressure | None = None,
        first_seq: int = 0,
    ) -> None:
        self.run_id = run_id
        #: The run's secrets (:data:`~runtime.core._secrets.NO_SECRETS` when there are none):
        #: for text that is cut before it becomes an event, so it is masked before the cut
        #: (:meth:`masked`).
        self.secrets = secrets if secrets is not None else NO_SECRETS
        self._secrets = secrets if secrets else None  # None: nothing to mask (most runs)
        # Streamed text held back per (agent, kind): (text, parent_tool_use_id).
        self._held: dict[tuple[str | None, type[Event]], tuple[str, str | None]] = {}
        self._seq = first_seq
        # A resumed run's filter: events it refuses are the recorded prefix being rebuilt
        # (docs/resume.md), seen by the core hooks only, with no seq.
        self._admit: Callable[[Event], bool] | None = None
        self._core: tuple[Tap, ...] = ()
        #: The first exception a core hook raised (see :meth:`add_core_hook`), else ``None``.
        self.core_error: Exception | None = None
        #: Called once with that exception; the runtime sets it to stop the run.
        self.on_core_failure: Callable[[Exception], None] | None = None
        self._taps: list[Tap] = []
        #: Taps removed because they raised, with the error (see :meth:`add_tap`).
        self.failed_taps: list[str] = []
        self._subs: list[Subscription] = []
        self._readers = BlockingReaders() if backpressure is None else None
        # The strategy while it is engaged (always, for one given; while a block subscription
        # exists, for the readers), else None: the test on the path of nearly every event.
        self._pressure: Backpressure | None = backpressure
        # A snapshot iterated by emit, so a subscription dropped mid-delivery does not skip another.
        self._fanout: tuple[Subscription, ...] = ()
        self._closed = False
        self._gate: Gate | None = None

    @property
    def last_seq(self) -> int:
        """The ``seq`` of the last event emitted (0 before the first)."""
        return self._seq

    @property
    def closed(self) -> bool:
        return self._closed

    def add_tap(self, tap: Tap) -> None:
        """Run *tap* synchronously on every later event, in ``seq`` order.

        A tap that raises an :class:`Exception` is removed (and logged, and listed in
        :attr:`failed_taps`); the event still goes to every other tap and subscriber.
        """
        self._taps.append(tap)

    def set_filter(self, admit: Callable[[Event], bool] | None) -> None:
        """Pass every later event to *admit* first; one it refuses (False) reaches the core
        hooks only: no ``seq``, no tap, no subscriber, no sink. A resumed run rebuilds its
        agents' state by replaying what its trace holds, and those events are in the trace
        already (docs/resume.md)."""
        self._admit = admit

    def set_gate(self, gate: Gate | None) -> None:
        """Make subscriptions hand out an event only once *gate* has written it (the trace sink,
        which must also be a tap, added before any subscription reads)."""
        self._gate = gate

    def _through_gate(self, seq: int) -> None:
        gate = self._gate
        if gate is not None and gate.written_seq < seq:
            gate.flush()

    def add_core_hook(self, hook: Tap) -> None:
        """Run *hook* synchronously on every later event, before the taps, for as long as the
        bus lives. A hook that raises is kept, the event still reaches everyone else, and the
        run is failed (see the module docstring); hooks are the runtime's, not users'."""
        self._core = (*self._core, hook)

    def remove_tap(self, tap: Tap) -> None:
        if tap in self._taps:
            self._taps.remove(tap)

    def subscribe(self, *, buffer: int = 10_000, policy: Policy = "lag") -> Subscription:
        """A new subscription that sees every event emitted from now on.

        Raises:
            ValueError: a ``block`` subscription on a bus given its own backpressure.
        """
        if policy == "block" and self._readers is None:
            raise ValueError("this bus has a backpressure of its own: no block subscription")
        sub = Subscription(self, buffer, policy)
        if self._closed:
            sub._end()
            return sub
        self._subs.append(sub)
        if policy == "block" and self._readers is not None:
            self._readers.readers.append(sub)
            self._pressure = self._readers
        self._fanout = tuple(self._subs)
        return sub

    def _drop(self, sub: Subscription) -> None:
        if sub in self._subs:
            self._subs.remove(sub)
            self._fanout = tuple(self._subs)
        readers = self._readers
        if readers is not None and sub in readers.readers:
            readers.readers.remove(sub)
            sub._writers.unpark_all()
            if not readers.readers:
                self._pressure = None

    def masked(self, text: str, limit: int | None = None, *, how: str = "") -> str:
        """*text* with the run's secrets masked, then cut to *limit* characters (its head and
        tail kept around a note saying how much was cut, and *how*): for text an emitter cuts
        before it becomes an event field (a tool's output, an agent's result), masked first as
        a cut through a secret would leave two halves no search finds. Name the field in
        ``masked=`` when emitting it, so the bus does not search it again."""
        secrets = self._secrets
        if secrets is not None:
            text = secrets.text(text)
        if limit is None or len(text) <= limit:
            return text
        head = limit * 3 // 4
        tail = limit - head
        return f"{text[:head]}\n… [{len(text) - limit} characters cut{how}] …\n{text[-tail:]}"

    async def emit(self, event: E, /, *, masked: Collection[str] = ()) -> E:
        """Mask *event*, give it the next ``seq``, ``ts`` and the run id, and deliver it.

        Waits only while the bus's backpressure says so (a full ``block`` subscription);
        otherwise it completes without yielding, so events an agent emits back to back stay
        together.

        Args:
            event: built by the emitter with its own class, never emitted before.
            masked: fields the emitter already masked with :meth:`masked`: not searched again.

        Returns:
            *event* itself, masked and stamped.

        Raises:
            trio.ClosedResourceError: the bus is closed (the run has finished).
            ValueError: *event* was emitted before.

        Cancellation: cancelled only while waiting for room, in which case the event was not
        emitted and no ``seq`` was used.
        """
        if event.seq:
            raise _emitted(event)
        pressure = self._pressure
        if pressure is not None:
            if not pressure.has_room():
                await pressure.wait_for_room()
            self._publish(event, time.time(), True, masked)
            pressure.passed()
        else:
            self._publish(event, time.time(), True, masked)
        return event

    def has_room(self) -> bool:
        """Whether an :meth:`emit` now would deliver without waiting (no ``block`` subscription
        is full). Producers of streamed text use it to coalesce deltas while a reader is behind
        (see docs/events.md)."""
        pressure = self._pressure
        return pressure is None or pressure.has_room()

    async def wait_for_room(self) -> None:
        """Wait, as :meth:`emit` does, while there is no room; for producers that hand over
        events built elsewhere (:meth:`forward`).

        Cancellation: a checkpoint only while waiting.
        """
        pressure = self._pressure
        if pressure is not None and not pressure.has_room():
            await pressure.wait_for_room()

    async def emit_final(self, event: E, /, *, grace_s: float, masked: Collection[str] = ()) -> E:
        """Emit an event that reports an end (``*_finished``), typically from a ``finally``.

        Like :meth:`emit`, but it goes out even in a cancelled scope, and it always goes out:
        when there is no room it waits under a shield for at most *grace_s* seconds, then
        delivers anyway (that reader's buffer briefly exceeds its bound). An end is never lost;
        a reader that stalled is not waited for again until it reads.

        Cancellation: not a checkpoint; shielded, bounded by *grace_s*.
        """
        if event.seq:
            raise _emitted(event)
        pressure = self._pressure
        if pressure is not None:
            if pressure.final_must_wait():
                await pressure.wait_final(grace_s)
            # Nothing to wait for: no cancel scope needed (this is the common case, and a scope
            # per finished node is a measurable share of a 10,000-agent run).
            self._publish(event, time.time(), True, masked)
            pressure.passed()
        else:
            self._publish(event, time.time(), True, masked)
        return event

    def emit_nowait(self, event: E, /, *, masked: Collection[str] = ()) -> E:
        """Like :meth:`emit`, never waiting: a full ``block`` subscription gets the event anyway
        (its buffer briefly exceeds its bound). For the few events that must go out right now
        (the end of a run)."""
        if event.seq:
            raise _emitted(event)
        self._publish(event, time.time(), True, masked)
        return event

    def forward(self, event: Event, *, masked: bool = False, fresh: bool = False) -> Event:
        """Re-emit an event built elsewhere (another process) with this bus's next ``seq`` and
        run id, keeping its own ``ts`` (when it happened, not when it arrived here).

        Args:
            masked: the bus that built *event* masked it with at least this bus's secrets (a
                Ray host's bus masks the run's secrets and its own): it goes on as it is.
                Masking it again would cost the forwarding of every remote event, and hold
                back a second time a streamed text's end its first bus had held back and then
                released, turning one text event into an empty one and one more.
            fresh: *event* was made for this bus and nobody holds it yet (just unpacked from a
                host's envelope): stamped in place instead of copied, as nothing can have
                seen its old number.
        """
        if not fresh:
            event = _copier(type(event))(event)
        self._publish(event, event.ts, not masked, ())
        return event

    def _publish(
        self, event: Event, ts: float, mask: bool, masked: Collection[str], /
    ) -> None:
        """The one path every event takes into the stream: masked (unless *mask* is false),
        stamped with the next ``seq``, *ts* and the run id, then delivered."""
        if self._closed:
            raise trio.ClosedResourceError("the event bus is closed: the run has finished")
        admit = self._admit
        if admit is not None and not admit(event):
            _stamp(event, "ts", ts)
            _stamp(event, "run_id", self.run_id)
            for hook in self._core:
                try:
                    hook(event)
                except Exception as exc:
                    self._core_failed(hook, event, exc)
            return
        if mask and self._secrets is not None:
            self._mask(event, masked)
        self._seq += 1
        stamp = _stamp
        stamp(event, "seq", self._seq)
        stamp(event, "ts", ts)
        stamp(event, "run_id", self.run_id)
        # Delivered here, in this frame: this is the path of every event (bench/README.md).
        for hook in self._core:
            try:
                hook(event)
            except Exception as exc:  # the run fails, but the stream stays whole for the trace
                self._core_failed(hook, event, exc)
        for tap in self._taps:
            try:
                tap(event)
            except Exception as exc:  # a broken observer must not break the stream
                self._tap_failed(tap, exc)
        for sub in self._fanout:
            if sub.policy == "block":
                sub._buffer.append(event)
                if sub._readers:
                    sub._readers.unpark_all()
            else:
                sub._push(event)

    def _mask(self, event: Event, masked: Collection[str]) -> None:
        """Mask the secrets in *event*'s fields, in place (nobody holds it yet); this agent's
        held-back text released first, and a streamed text's possible start of a secret held."""
        secrets = self._secrets
        assert secrets is not None
        cls = type(event)
        agent_id = event.agent_id
        if self._held:
            for streamed in _STREAMED:
                if streamed is not cls and (agent_id, streamed) in self._held:
                    text, parent = self._held.pop((agent_id, streamed))
                    # The stream ended: no secret can follow, the rest goes out masked.
                    released = streamed(
                        agent_id=agent_id, parent_tool_use_id=parent, text=secrets.text(text)
                    )
                    self._publish(released, time.time(), False, ())
        if cls in _STREAMED:
            key = (agent_id, cls)
            held, _ = self._held.pop(key, ("", None))
            assert isinstance(event, TextDelta | ThinkingDelta)
            out, rest = secrets.split_stream(held + event.text)
            if rest:
                self._held[key] = (rest, event.parent_tool_use_id)
            _stamp(event, "text", out)
            return
        search = secrets.search
        assert search is not None
        for name in searched_fields(cls):
            value = getattr(event, name)
            kind = type(value)
            if kind is str:
                if search(value) is None:
                    continue
            elif (
                value is None or kind is int or kind is float or kind is bool
                or not secrets.holds_secret(value)
            ):
                continue
            if name not in masked:
                _stamp(event, name, secrets.value(value))

    def _tap_failed(self, tap: Tap, exc: Exception) -> None:
        # The event has already reached the taps before this one (the trace writer first), so
        # letting the exception out of emit would leave an event on record that its emitter
        # thinks never happened (an agent_started with no agent_finished). Drop the tap instead,
        # as a lagging subscription is dropped, and say so.
        self._taps = [t for t in self._taps if t is not tap]
        self.failed_taps.append(f"{tap!r}: {type(exc).__name__}: {exc}")
        _log.warning("event tap raised; removed", tap=repr(tap), error=repr(exc))

    def _core_failed(self, hook: Tap, event: Event, exc: Exception) -> None:
        _log.error(
            "core hook raised; the run fails", hook=repr(hook), kind=event.type, error=repr(exc)
        )
        if self.core_error is not None:
            return
        self.core_error = exc
        if self.on_core_failure is not None:
            self.on_core_failure(exc)

    def close(self) -> None:
        """End the stream: subscribers drain what they have, then see the end. The hooks and
        taps are let go (nothing reaches them any more): they often hold the run, which holds
        this bus, a cycle only the garbage collector would free."""
        if self._closed:
            return
        self._closed = True
        for sub in list(self._subs):
            sub._end()
        self._subs.clear()
        if self._readers is not None:
            self._readers.readers.clear()
            self._pressure = None
        self._fanout = ()
        self._core = ()
        self._taps = []


def _emitted(event: Event) -> ValueError:
    return ValueError(f"this {event.type} event was emitted already (seq {event.seq})")


_COPIERS: dict[type[Event], Callable[[Any], Any]] = {}
# Events are frozen; one the bus is handed (just built, or a fresh or copied forwarded one) is
# stamped and masked in place before anyone else sees it.
_stamp = object.__setattr__


def _copier(cls: type[Event]) -> Callable[[Any], Any]:
    """``copy(event)`` is ``attrs.evolve(event)`` for events of *cls*, written out for it (the
    way attrs writes its ``__init__``): a forwarded event is copied once per event of a remote
    subtree, and ``evolve``'s walk over the fields was most of that (bench/README.md)."""
    copy = _COPIERS.get(cls)
    if copy is None:
        fields = [a for a in attrs.fields(cls) if a.init]  # as evolve: by alias, init ones
        assert all(a.name.isidentifier() and a.alias.isidentifier() for a in fields)
        keywords = ", ".join(f"{a.alias}=event.{a.name}" for a in fields)
        source = f"def copy(event):\n    return cls({keywords})\n"
        namespace: dict[str, Any] = {"cls": cls}
        exec(compile(source, f"<event copier {cls.__qualname__}>", "exec"), namespace)
        copy = _COPIERS[cls] = namespace["copy"]
    return copy
