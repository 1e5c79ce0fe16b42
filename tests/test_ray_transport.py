"""What travels between the parent and a Ray host (runtime/cluster/_host.py), held to the
straightforward way: the channel's batches (``pack_items``) and a submit's calls
(``pack_calls``) come out equal to what went in, for every event class, whatever the field
values; the host's outbox hands over what a plain queue would; a finished subtree leaves nothing
for the garbage collector. No Ray needed: the host module does not import it."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.cluster import _host as host_module
from runtime.cluster._host import (
    Batch,
    Envelope,
    SubtreeCall,
    _envelope,
    failed_outcome,
    pack_calls,
    unpack_calls,
    unpack_items,
)
from runtime.core import _events as events_module
from runtime.core._agent import AgentOutcome, AgentSpec
from runtime.core._agent_types import AgentType
from runtime.core._events import Event
from runtime.core._limits import Budget
from runtime.core._messages import Message, TextBlock


def _event_classes() -> list[type[Event]]:
    """Every event class the runtime defines (read from its modules: ``Event.__subclasses__``
    also lists other test modules' local classes, and the first class of each ``class``
    statement, which attrs replaces with a slotted copy, until it is collected)."""
    found = {
        obj
        for module in (events_module, host_module)
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, Event) and obj is not Event
    }
    return sorted(found, key=lambda c: c.__qualname__)


EVENT_CLASSES = _event_classes()

# What event fields hold: JSON-like data (tool inputs are dicts of anything JSON).
_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=8,
)


@st.composite
def _events(draw: st.DrawFn) -> Event:
    cls = draw(st.sampled_from(EVENT_CLASSES))
    fields = {a.name: draw(_values) for a in attrs.fields(cls)}
    return cls(**fields)


def _outcome(agent_id: str) -> Any:
    spec = AgentSpec(agent_id=agent_id, agent_type=AgentType(name="one"), prompt="p", depth=1)
    return failed_outcome(spec, "it failed", status="failed")


class _Outcome(AgentOutcome):
    """An outcome of a subclass: packed as itself."""


# Outcomes as a host reports them: any status and totals, with or without a history (the
# host drops it; a failed root's synthesised one keeps it), of the class itself or not.
_outcomes = st.builds(
    lambda cls, base, status, result, turns, tokens, undelivered, history, reason: cls(
        **{**attrs.asdict(base, recurse=False), "status": status, "result": result,
           "turns": turns, "input_tokens": tokens, "undelivered": undelivered,
           "state": attrs.evolve(base.state, messages=base.state.messages if history else [],
                                 turns=turns, continue_reason=reason)}),
    st.sampled_from([AgentOutcome, _Outcome]),
    st.text(min_size=1, max_size=8).map(_outcome),
    st.sampled_from(["completed", "failed", "cancelled", "budget_exceeded"]),
    st.none() | st.text(max_size=10),
    st.integers(0, 5),
    st.integers(0, 10**9),
    st.lists(st.text(max_size=5), max_size=2).map(tuple),
    st.booleans(),
    st.none() | st.sampled_from(["tool_use", "user_message"]),
)


_batches = st.builds(
    Batch,
    events=st.lists(_events(), max_size=6).map(tuple),
    outcome=st.none() | _outcomes,
    final=st.booleans(),
    error=st.none() | st.text(max_size=10),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=8), _batches), max_size=5))
def test_packed_batches_come_back_equal(items: list[tuple[str, Batch]]) -> None:
    envelope = _envelope(items, None)
    if items:
        assert envelope.data  # everything here can be packed
        assert not envelope.items
    assert list(envelope.batches()) == items
    if items:
        assert unpack_items(envelope.data) == items
        for (_, got), (_, want) in zip(envelope.batches(), items, strict=True):
            assert [type(e) for e in got.events] == [type(e) for e in want.events]
            assert type(got.outcome) is type(want.outcome)
            if want.outcome is not None:
                assert type(got.outcome.state) is type(want.outcome.state)


_types = st.sampled_from([
    AgentType(name="one"),
    AgentType(name="two", system="be brief", tools=("read", "grep"), placement="ray",
              max_turns=3),
])
_specs = st.builds(
    AgentSpec,
    agent_id=st.text(min_size=1, max_size=8),
    agent_type=_types,
    prompt=st.text(max_size=20),
    depth=st.integers(0, 5),
    parent_tool_use_id=st.none() | st.text(max_size=8),
    parent_agent_id=st.none() | st.text(max_size=8),
    history=st.lists(
        st.text(max_size=10).map(
            lambda t: Message(role="user", content=(TextBlock(text=t),))), max_size=2
    ).map(tuple),
    budget=st.none() | st.builds(Budget, tokens=st.none() | st.integers(1, 10**6),
                                 seconds=st.none() | st.floats(0.5, 100), tool_calls=st.none()),
    compact=st.none() | st.text(max_size=8),
)
_calls = st.builds(
    SubtreeCall,
    call_id=st.text(min_size=1, max_size=8),
    id_prefix=st.text(max_size=8),
    spec=_specs,
    max_agents=st.integers(1, 10**6),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_calls, max_size=6))
def test_packed_calls_come_back_equal(calls: list[SubtreeCall]) -> None:
    """A submit's calls, packed for Ray and unpacked on the host, are the calls sent."""
    got = unpack_calls(pack_calls(calls))
    assert got == tuple(calls)
    assert [type(c.spec.agent_type) for c in got] == [AgentType] * len(calls)


def test_a_call_with_its_own_settings_is_not_packed() -> None:
    spec = AgentSpec(agent_id="a", agent_type=AgentType(name="one"), prompt="p", depth=1)
    call = SubtreeCall(call_id="h1.1", id_prefix="h1.1.", spec=spec, config="settings",
                       max_agents=1)
    with pytest.raises(ValueError, match="own settings"):
        pack_calls([call])


def test_every_event_class_is_covered() -> None:
    names = {c.__name__ for c in EVENT_CLASSES}
    assert {"AgentStarted", "AgentFinished", "ToolStarted", "TextDelta", "PermissionAsked"} <= names


def test_what_cannot_be_packed_goes_as_objects() -> None:
    """A value the standard pickler refuses (a lambda in a tool's input) leaves the batches as
    objects for Ray's own pickling, as before."""
    event_cls = next(c for c in EVENT_CLASSES if c.__name__ == "ToolStarted")
    fields: dict[str, Any] = {a.name: "x" for a in attrs.fields(event_cls)}
    fields["input"] = {"f": lambda: 1}
    items = [("h1.1", Batch(events=(event_cls(**fields),)))]
    envelope = _envelope(items, "node lost: test")
    assert envelope.data == b""
    assert envelope.items == tuple(items)
    assert list(envelope.batches()) == items
    assert envelope.lost == "node lost: test"
    assert _envelope([], None) == Envelope()


# -- the host's outbox: every subtree's events, handed to the channel in batches --------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(["h1.1", "h1.2", "h1.3"])),
        st.tuples(st.just("finish"), st.sampled_from(["h1.1", "h1.2", "h1.3"])),
        st.tuples(st.just("take"), st.just("")),
        st.tuples(st.just("close"), st.just("")),
    ),
    max_size=60,
)


def _text(n: int, call_id: str) -> Event:
    from runtime.core._events import TextDelta

    return TextDelta(seq=n, ts=0.0, run_id="r", agent_id=call_id, parent_tool_use_id=None,
                     text=str(n))


@settings(max_examples=300, deadline=None)
@given(_ops)
def test_the_outbox_hands_over_what_a_plain_queue_would(ops: list[tuple[str, str]]) -> None:
    """The outbox (one per host, a list per subtree, issue 22) against the straightforward
    version, one queue of ``(call_id, event or end)`` in the order things happened: each
    subtree's events come out in order, each at most once per take as one batch, its end
    once and after all of them, nothing of it after its end, nothing lost; once closed (the
    node is lost) nothing more is taken in, and what was queued still leaves."""
    outbox = host_module._Outbox(max_pending=1_000, batch_max=4)
    plain: list[tuple[str, Any]] = []  # the straightforward version
    taken: list[tuple[str, Batch]] = []
    ended: set[str] = set()
    closed = False
    for n, (op, call_id) in enumerate(ops):
        if op == "add" and call_id not in ended:
            event = _text(n, call_id)
            outbox.add(call_id, event)
            if not closed:
                plain.append((call_id, event))
        elif op == "finish" and call_id not in ended:
            outbox.finish(call_id, None, f"end {call_id}")
            if not closed:
                plain.append((call_id, "end"))
            ended.add(call_id)
        elif op == "close":
            outbox.close()
            closed = True
        elif op == "take":
            items = outbox.take_nowait()
            assert len({c for c, _ in items}) == len(items), "one batch per subtree per take"
            taken += items
        assert outbox.has_room()
    taken += outbox.take_nowait()
    assert outbox.take_nowait() == []
    for call_id in ("h1.1", "h1.2", "h1.3"):
        want = [e for c, e in plain if c == call_id]
        got: list[Any] = []
        for c, batch in taken:
            if c == call_id:
                assert "end" not in got, "nothing after a subtree's end"
                got += batch.events
                if batch.final:
                    assert batch.error == f"end {call_id}"
                    got.append("end")
        assert got == want


async def test_a_full_outbox_holds_emitters_back_and_an_end_waits_at_most_its_grace(
    autojump_clock: Any,
) -> None:
    """The backpressure from Ray: a subtree's emits wait while the host's outbox is full
    (until the channel takes), and an end waits at most its grace, then goes anyway."""
    import trio

    from runtime.core._events import AgentFinished, TextDelta
    from runtime.core._secrets import NO_SECRETS

    outbox = host_module._Outbox(max_pending=2)
    bus = host_module._subtree_bus("r", NO_SECRETS, outbox, "h1.1")
    text: dict[str, Any] = {"agent_id": "a", "parent_tool_use_id": None, "text": "x"}
    await bus.emit(TextDelta(**text))
    await bus.emit(TextDelta(**text))
    assert not bus.has_room()
    with trio.move_on_after(5) as waited:
        await bus.emit(TextDelta(**text))
    assert waited.cancelled_caught, "a full outbox makes the emitter wait"
    assert len(outbox.take_nowait()[0][1].events) == 2
    await bus.emit(TextDelta(**text))  # room again
    await bus.emit(TextDelta(**text))
    t0 = trio.current_time()
    end: dict[str, Any] = {"agent_id": "a", "parent_tool_use_id": None, "status": "completed", "result": "",
           "error": None, "turns": 1, "input_tokens": 0, "output_tokens": 0, "duration_s": 0.0}
    await bus.emit_final(AgentFinished(**end), grace_s=3.0)
    assert trio.current_time() - t0 == 3
    await bus.emit_final(AgentFinished(**end), grace_s=3.0)  # stalled: no second wait
    assert trio.current_time() - t0 == 3
    events = outbox.take_nowait()[0][1].events
    assert [e.type for e in events] == ["text_delta", "text_delta", "agent_finished",
                                        "agent_finished"]
    assert [e.seq for e in events] == [3, 4, 5, 6], "the emit cut short used no seq"


def _host_config(workspace: str) -> Any:
    """The settings of a run whose ``w`` sub-agents each start a ``leaf`` of their own."""
    from runtime.cluster._host import ProviderConfig, RunConfig
    from runtime.core._limits import Limits
    from runtime.core._permissions import PermissionPolicy
    from runtime.providers._scenario import Scenario
    from tools import ToolLimits, builtin_tools

    call = {"name": "agent", "input": {"description": "d", "prompt": "p", "agent": "leaf"}}
    scenario = Scenario.from_obj({"agents": {
        "main": {"turns": [{"text": "x"}]},
        "w": {"turns": [{"text": "asking", "tool_calls": [call]}, {"text": "w done"}]},
        "leaf": {"turns": [{"text": "leaf done"}]}}})
    return RunConfig(
        run_id="run", agent_types=(AgentType(name="w"), AgentType(name="leaf")),
        provider=ProviderConfig(kind="scripted", name="scripted", scenario=scenario),
        tools=tuple(builtin_tools()), tool_limits=ToolLimits(), limits=Limits(),
        workspace=workspace, env={}, policy=PermissionPolicy(mode="deny"))


def test_a_finished_subtree_leaves_nothing_for_the_garbage_collector(tmp_path: Any) -> None:
    """A subtree's objects (its run context, bus, registry, broker, provider) are freed when it
    ends, not left in reference cycles for the collector, whose collections cost a busy host
    a good part of its time (bench/README.md). The host runs on a plain asyncio loop here, as
    in a Ray worker, without Ray."""
    import asyncio
    import gc

    from runtime.cluster._host import RayHost, SubtreeCall

    config = _host_config(str(tmp_path))

    def calls(round_: int) -> tuple[SubtreeCall, ...]:
        return tuple(
            SubtreeCall(call_id=f"r{round_}.{i}", id_prefix=f"r{round_}.{i}.", max_agents=100,
                        spec=AgentSpec(agent_id=f"agent-{i + 2}", agent_type=AgentType(name="w"),
                                       prompt="go", depth=1, parent_tool_use_id=f"tu-{i}",
                                       parent_agent_id="agent-1"))
            for i in range(8))

    async def burst(host: RayHost, channel: Any, round_: int) -> list[Batch]:
        submitted = calls(round_)
        open_calls = {c.call_id for c in submitted}
        ends = []
        await host.submit(submitted, (config,))
        while open_calls:
            for call_id, batch in (await channel.__anext__()).batches():
                if batch.final:
                    open_calls.discard(call_id)
                    ends.append(batch)
        return ends

    class _StoppableHost(RayHost):
        # Its trio loop lives as long as its worker; here it must end with the test: a guest
        # run abandoned with the asyncio loop breaks every later trio.run of this process.
        ended: asyncio.Future[object] | None = None

        def _trio_done(self, outcome: Any) -> None:
            if self.ended is not None:
                self.ended.set_result(outcome)

    async def stop(host: _StoppableHost) -> None:
        host.ended = asyncio.get_running_loop().create_future()
        assert host._token is not None
        assert host._nursery is not None
        host._token.run_sync_soon(host._nursery.cancel_scope.cancel)
        await host.ended

    async def main() -> tuple[list[Batch], list[str]]:
        host = _StoppableHost("h1", watch_node=False)
        channel = host.channel()
        await burst(host, channel, 0)  # what is made once per run or per host is made now
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            ends = await burst(host, channel, 1)
            await asyncio.sleep(0.05)  # the subtrees' tasks have ended
            gc.collect()
            kept = sorted({type(o).__qualname__ for o in gc.garbage
                           if type(o).__module__.startswith(("runtime", "tools"))})
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            await channel.aclose()
            await stop(host)
        return ends, kept

    threshold = gc.get_threshold()
    try:
        ends, kept = asyncio.run(main())
    finally:
        gc.unfreeze()  # the host froze this process's heap and changed its collection pace
        gc.set_threshold(*threshold)
    assert [(b.outcome.status, b.outcome.result) for b in ends if b.outcome] == [
        ("completed", "w done")] * 8
    assert kept == [], f"left for the collector: {kept}"
