"""The event bus: one stream, seq assigned at the merge point, bounded subscribers."""

from __future__ import annotations

import time

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import Event, EventBus, SubscriberLagged, TextDelta
from runtime.core import _events as events_module


async def _emit(bus: EventBus, agent: str, text: str) -> Event:
    return await bus.emit(TextDelta(agent_id=agent, parent_tool_use_id=None, text=text))


async def test_seq_strictly_increases_with_no_gaps_across_concurrent_emitters() -> None:
    bus = EventBus("r")
    seen: list[Event] = []
    bus.add_tap(seen.append)

    async def agent(name: str) -> None:
        for i in range(50):
            await _emit(bus, name, str(i))
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        for name in "abcde":
            nursery.start_soon(agent, name)
    assert [e.seq for e in seen] == list(range(1, 251))
    assert all(e.run_id == "r" for e in seen)


async def test_every_subscriber_sees_every_event_in_order_then_the_end() -> None:
    bus = EventBus("r")
    subs = [bus.subscribe(buffer=100) for _ in range(3)]
    for i in range(10):
        await _emit(bus, "a", str(i))
    bus.close()
    for sub in subs:
        assert [e.seq async for e in sub] == list(range(1, 11))


async def test_a_subscriber_only_sees_events_after_it_subscribed() -> None:
    bus = EventBus("r")
    await _emit(bus, "a", "early")
    sub = bus.subscribe()
    await _emit(bus, "a", "late")
    bus.close()
    assert [e.text async for e in sub] == ["late"]  # type: ignore[attr-defined]


async def test_a_lagging_subscriber_is_dropped_and_never_blocks_the_agents() -> None:
    bus = EventBus("r")
    slow = bus.subscribe(buffer=5, policy="lag")
    fast = bus.subscribe(buffer=1000)
    with trio.fail_after(1):
        for i in range(100):
            await _emit(bus, "a", str(i))
    with pytest.raises(SubscriberLagged):
        await slow.receive()
    bus.close()
    assert len([e async for e in fast]) == 100


async def test_a_blocking_subscriber_applies_backpressure_and_loses_nothing() -> None:
    bus = EventBus("r")
    sub = bus.subscribe(buffer=3, policy="block")
    got: list[int] = []

    async def producer() -> None:
        for i in range(20):
            await _emit(bus, "a", str(i))
        bus.close()

    async def consumer() -> None:
        async for event in sub:
            assert len(sub._buffer) <= 3
            got.append(event.seq)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(producer)
        nursery.start_soon(consumer)
    assert got == list(range(1, 21))


async def test_a_producer_waits_while_a_blocking_subscriber_is_full() -> None:
    bus = EventBus("r")
    sub = bus.subscribe(buffer=2, policy="block")
    await _emit(bus, "a", "1")
    await _emit(bus, "a", "2")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_emit, bus, "a", "3")
        await trio.testing.wait_all_tasks_blocked()
        assert len(nursery.child_tasks) == 1, "the producer waits"
        nursery.cancel_scope.cancel(reason="test")
    assert bus.last_seq == 2, "a cancelled emit uses no seq"
    await sub.receive()
    await _emit(bus, "a", "3")
    assert bus.last_seq == 3


async def test_a_closed_subscriber_is_forgotten_and_unblocks_producers() -> None:
    bus = EventBus("r")
    sub = bus.subscribe(buffer=1, policy="block")
    await _emit(bus, "a", "1")

    async def blocked() -> None:
        await _emit(bus, "a", "2")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(blocked)
        await trio.testing.wait_all_tasks_blocked()
        assert bus.last_seq == 1
        sub.close()
    assert bus.last_seq == 2
    with pytest.raises(trio.ClosedResourceError):
        await sub.receive()


async def test_a_subscription_used_as_context_manager_closes_on_exit() -> None:
    bus = EventBus("r")
    with bus.subscribe(buffer=1, policy="block") as sub:
        await _emit(bus, "a", "1")
        assert (await sub.receive()).seq == 1
    with trio.fail_after(1):
        for _ in range(5):
            await _emit(bus, "a", "more")


async def test_emitting_after_close_is_refused() -> None:
    bus = EventBus("r")
    bus.close()
    with pytest.raises(trio.ClosedResourceError):
        await _emit(bus, "a", "late")


async def test_subscribing_after_close_gives_an_ended_stream() -> None:
    bus = EventBus("r")
    bus.close()
    assert [e async for e in bus.subscribe()] == []


async def test_receive_nowait_reports_empty_lagged_and_ended() -> None:
    bus = EventBus("r")
    sub = bus.subscribe(buffer=1)
    with pytest.raises(trio.WouldBlock):
        sub.receive_nowait()
    await _emit(bus, "a", "1")
    assert sub.receive_nowait().seq == 1
    bus.close()
    with pytest.raises(trio.EndOfChannel):
        sub.receive_nowait()


def test_forward_gives_a_foreign_event_this_bus_seq() -> None:
    bus = EventBus("r")
    foreign = TextDelta(seq=99, ts=1.0, run_id="other", agent_id="x", parent_tool_use_id="tu-9",
                        text="hi")
    out = bus.forward(foreign)
    assert (out.seq, out.run_id, out.agent_id, out.parent_tool_use_id) == (1, "r", "x", "tu-9")
    assert out.ts == pytest.approx(1.0), "when it happened, not when it arrived"


def test_forward_masks_a_foreign_event_unless_its_own_bus_did() -> None:
    from runtime.core._secrets import Secrets

    secret = "zq-SECRETVALUE-0123456789"

    def delta(text: str) -> TextDelta:
        return TextDelta(seq=5, ts=1.0, run_id="o", agent_id="x", parent_tool_use_id="tu-1",
                         text=text)

    bus = EventBus("r", secrets=Secrets([secret]))
    assert bus.forward(delta(f"key {secret} here")).text == "key *** here"
    # A streamed text ending with the start of a secret is held back until the agent's next
    # event, then sent on its own...
    assert bus.forward(delta("ends zq-SEC")).text == "ends "
    # ...but an event its own bus masked (and held back, and released) goes on as it is.
    bus = EventBus("r", secrets=Secrets([secret]))
    assert bus.forward(delta("zq-SEC"), masked=True).text == "zq-SEC"
    assert [e.seq for e in (bus.forward(delta("more"), masked=True),)] == [2]


# What event fields hold: JSON-like data (tool inputs are dicts of anything JSON).
_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=6,
)


@st.composite
def _foreign_events(draw: st.DrawFn) -> Event:
    cls = draw(st.sampled_from(sorted(_event_classes(), key=lambda c: c.__qualname__)))
    return cls(**{a.name: draw(_values) for a in attrs.fields(cls)})


def _event_classes() -> set[type[Event]]:
    return {
        obj for obj in vars(events_module).values()
        if isinstance(obj, type) and issubclass(obj, Event) and obj is not Event
    }


@settings(max_examples=300, deadline=None)
@given(st.lists(_foreign_events(), min_size=1, max_size=8))
def test_forward_copies_an_event_as_attrs_evolve_would(foreign: list[Event]) -> None:
    """``forward`` copies through a copier written per class (issue 22); it must give what
    the straightforward ``attrs.evolve(event, seq=..., run_id=...)`` gives, for every class."""
    bus, fresh_bus = EventBus("r"), EventBus("r")
    for n, event in enumerate(foreign, start=1):
        out = bus.forward(event)
        assert out == attrs.evolve(event, seq=n, run_id="r")
        assert type(out) is type(event)
        # A fresh event (just unpacked, held by nobody) is numbered in place: the same result.
        mine = attrs.evolve(event)
        numbered = fresh_bus.forward(mine, fresh=True)
        assert numbered is mine
        assert numbered == out


async def test_two_readers_of_one_subscription_never_take_the_same_event() -> None:
    bus = EventBus("r")
    sub = bus.subscribe(buffer=10)
    got: list[int] = []

    async def reader() -> None:
        got.append((await sub.receive()).seq)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        await _emit(bus, "a", "only one")
        await trio.testing.wait_all_tasks_blocked()  # both readers woke and settled
        nursery.cancel_scope.cancel(reason="test")
    assert got == [1]


async def test_a_finishing_event_goes_out_even_past_a_stalled_blocking_reader(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bus = EventBus("r")
    seen: list[Event] = []
    bus.add_tap(seen.append)
    stalled = bus.subscribe(buffer=1, policy="block")
    await _emit(bus, "a", "fills it")
    start = trio.current_time()
    first = await bus.emit_final(
        TextDelta(
            agent_id="a",
            parent_tool_use_id=None,
            text="end 1",
        ),
        grace_s=2,
    )
    assert trio.current_time() - start == 2, "waited its grace period, then went out anyway"
    second = await bus.emit_final(
        TextDelta(
            agent_id="a",
            parent_tool_use_id=None,
            text="end 2",
        ),
        grace_s=2,
    )
    assert trio.current_time() - start == 2, "a stalled reader is not waited for twice"
    assert [e.seq for e in seen] == [1, first.seq, second.seq] == [1, 2, 3]
    assert len(stalled._buffer) == 3


async def test_an_end_already_waiting_goes_out_once_its_reader_is_marked_stalled() -> None:
    bus = EventBus("r")
    sub = bus.subscribe(buffer=1, policy="block")
    bus.emit_nowait(TextDelta(agent_id="a", parent_tool_use_id=None, text="fills it"))
    done = trio.Event()

    async def end() -> None:
        await bus.emit_final(TextDelta(agent_id="a", parent_tool_use_id=None, text="e"), grace_s=30)
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(end)
        await trio.testing.wait_all_tasks_blocked()
        assert not done.is_set(), "a full reader not known to be stalled is waited for"
        sub.stall()  # e.g. its output pipe has been full for a while
        with trio.fail_after(1):
            await done.wait()
    assert [sub.receive_nowait().text for _ in range(2)] == ["fills it", "e"]  # type: ignore[attr-defined]


async def test_a_raising_tap_is_dropped_and_the_stream_goes_on() -> None:
    bus = EventBus("r")
    seen: list[int] = []

    def bad(event: Event) -> None:
        raise ValueError("observer bug")

    bus.add_tap(bad)
    bus.add_tap(lambda e: seen.append(e.seq))
    for _ in range(3):
        await bus.emit(TextDelta(agent_id="a", parent_tool_use_id=None, text="x"))
    assert seen == [1, 2, 3]
    assert len(bus.failed_taps) == 1
    assert "observer bug" in bus.failed_taps[0]
    assert bus.core_error is None


async def test_a_raising_core_hook_is_kept_and_reports_the_failure_once() -> None:
    bus = EventBus("r")
    calls: list[int] = []
    failures: list[Exception] = []

    def hook(event: Event) -> None:
        calls.append(event.seq)
        raise ValueError("bookkeeping bug")

    bus.add_core_hook(hook)
    bus.on_core_failure = failures.append
    seen: list[int] = []
    bus.add_tap(lambda e: seen.append(e.seq))
    for _ in range(3):
        await bus.emit(TextDelta(agent_id="a", parent_tool_use_id=None, text="x"))
    assert calls == [1, 2, 3], "never removed"
    assert seen == [1, 2, 3], "the event still reaches everyone else"
    assert isinstance(bus.core_error, ValueError)
    assert len(failures) == 1


async def test_a_backlog_is_read_in_bursts_that_still_let_other_tasks_in() -> None:
    bus = EventBus("r")
    sub = bus.subscribe(buffer=1000, policy="block")
    for i in range(300):
        bus.emit_nowait(TextDelta(agent_id="a", parent_tool_use_id=None, text=str(i)))
    ticks = 0
    reads_between: list[int] = []
    read = 0

    async def ticker() -> None:
        nonlocal ticks, read
        while True:
            ticks += 1
            reads_between.append(read)
            read = 0
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        await trio.lowlevel.checkpoint()  # the ticker is running
        async for event in sub:  # async for reads a backlog in bursts (receive() does not)
            read += 1
            if event.seq == 300:
                break
        nursery.cancel_scope.cancel()
    # Never more than a burst without yielding (two bursts between two ticks at most: trio
    # runs each batch of ready tasks in a random order).
    assert max(reads_between) <= 2 * 65
    assert ticks < 300 // 8  # but not one scheduler round per event either


async def test_async_for_with_a_backlog_still_sees_a_cancel_and_loses_nothing() -> None:
    bus = EventBus("r")
    sub = bus.subscribe(buffer=100, policy="block")
    for i in range(10):
        bus.emit_nowait(TextDelta(agent_id="a", parent_tool_use_id=None, text=str(i)))
    assert (await sub.__anext__()).seq == 1  # mid-burst from here on
    with trio.CancelScope() as scope:
        scope.cancel()
        await sub.__anext__()
    assert scope.cancelled_caught
    assert (await sub.__anext__()).seq == 2  # the cancelled step took nothing


async def test_a_full_block_subscription_lets_emitters_refill_in_one_go() -> None:
    bus = EventBus("r")
    sub = bus.subscribe(buffer=10, policy="block")
    emitted = 0

    async def emitter() -> None:
        nonlocal emitted
        for i in range(100):
            await _emit(bus, "a", str(i))
            emitted += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(emitter)
        await trio.testing.wait_all_tasks_blocked()
        assert emitted == 10
        for _ in range(4):
            sub.receive_nowait()
        await trio.testing.wait_all_tasks_blocked()
        assert emitted == 10  # above the low-water mark: no emitter woken for one slot
        sub.receive_nowait()
        await trio.testing.wait_all_tasks_blocked()
        assert emitted == 15  # at half: the emitter fills every free slot
        for _ in range(95):
            await sub.receive()
    assert emitted == 100


# -- one stamping path, typed events, backpressure as a strategy ------------------------------


async def test_every_way_into_the_stream_stamps_seq_ts_and_run_id_the_same_way() -> None:
    """emit, emit_nowait, emit_final, a held-back text's release and forward all take the one
    path: the next seq (no gap), ts, this bus's run id; the very object handed in goes out."""
    from runtime.core._events import ToolFinished
    from runtime.core._secrets import Secrets

    bus = EventBus("r", secrets=Secrets(["zq-SECRETVALUE-0123"]))
    seen: list[Event] = []
    bus.add_tap(seen.append)
    before = time.time()
    draft = TextDelta(agent_id="a", parent_tool_use_id="tu-1", text="starts zq-SEC")
    assert (draft.seq, draft.ts, draft.run_id) == (0, 0.0, ""), "a draft: the bus stamps these"
    assert await bus.emit(draft) is draft
    assert draft.text == "starts ", "the possible start of a secret is held back"
    bus.emit_nowait(TextDelta(agent_id="b", parent_tool_use_id=None, text="other agent"))
    end = ToolFinished(agent_id="a", parent_tool_use_id="tu-1", tool_use_id="tu-2", name="x",
                       status="ok", output="done", duration_s=0.5)
    await bus.emit_final(end, grace_s=1)  # releases agent a's held text first
    foreign = TextDelta(seq=7, ts=12.5, run_id="host", agent_id="c", parent_tool_use_id=None,
                        text="remote")
    forwarded = bus.forward(foreign, masked=True)
    assert [e.seq for e in seen] == [1, 2, 3, 4, 5]
    assert {e.run_id for e in seen} == {"r"}
    released = seen[2]
    assert (released.type, released.agent_id, released.parent_tool_use_id) == (
        "text_delta", "a", "tu-1")
    assert released.text == "zq-SEC"  # type: ignore[attr-defined]
    assert seen[3] is end
    assert all(before <= e.ts <= time.time() for e in seen[:4])
    assert forwarded.ts == pytest.approx(12.5), "a forwarded event keeps when it happened"
    assert foreign.seq == 7, "forward copies an event it was not told is fresh"


async def test_an_event_is_emitted_once_and_a_refused_one_uses_no_seq() -> None:
    bus = EventBus("r")
    event = await _emit(bus, "a", "once")
    for again in (bus.emit(event), bus.emit_final(event, grace_s=1)):
        with pytest.raises(ValueError, match="emitted already"):
            await again
    with pytest.raises(ValueError, match="emitted already"):
        bus.emit_nowait(event)
    bus.close()
    with pytest.raises(trio.ClosedResourceError):
        await _emit(bus, "a", "late")
    assert bus.last_seq == 1


class _Gate:
    """A Backpressure with room for *room* events until it is opened again."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.passed_count = 0
        self.opened = trio.Event()

    def has_room(self) -> bool:
        return self.room > 0

    async def wait_for_room(self) -> None:
        await self.opened.wait()

    def passed(self) -> None:
        self.passed_count += 1
        self.room -= 1

    def final_must_wait(self) -> bool:
        return self.room <= 0 and not self.opened.is_set()

    async def wait_final(self, grace_s: float) -> None:
        with trio.move_on_after(grace_s, shield=True):
            await self.opened.wait()


async def test_a_bus_given_a_backpressure_waits_as_it_says(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Backpressure is a strategy the bus is given (a Ray host's outbox is one): emits wait
    while it has no room, cancellable and using no seq; an end waits at most its grace."""
    gate = _Gate(room=2)
    bus = EventBus("r", backpressure=gate)
    with pytest.raises(ValueError, match="backpressure of its own"):
        bus.subscribe(policy="block")
    lagging = bus.subscribe(policy="lag")  # a lag reader never makes anyone wait
    await _emit(bus, "a", "1")
    await _emit(bus, "a", "2")
    assert not bus.has_room()
    with trio.move_on_after(5) as waited:
        await _emit(bus, "a", "3")
    assert waited.cancelled_caught, "no room: the emitter waits"
    assert bus.last_seq == 2, "the emit cut short used no seq"
    start = trio.current_time()
    end = await bus.emit_final(TextDelta(agent_id="a", parent_tool_use_id=None, text="end"),
                               grace_s=3)
    assert trio.current_time() - start == 3, "an end waits its grace, then goes anyway"
    assert end.seq == 3
    gate.opened.set()
    await _emit(bus, "a", "4")
    assert gate.passed_count == 4
    assert [lagging.receive_nowait().seq for _ in range(4)] == [1, 2, 3, 4]
