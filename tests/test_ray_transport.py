"""The Ray channel's packing of batches (runtime/cluster/_host.py: ``pack_items``), held to the
straightforward way: what comes out is equal to what went in, for every event class, whatever
the field values. No Ray needed: the host module does not import it."""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.cluster import _host as host_module
from runtime.cluster._host import Batch, Envelope, _envelope, failed_outcome, unpack_items
from runtime.core import _events as events_module
from runtime.core._agent import AgentSpec
from runtime.core._agent_types import AgentType
from runtime.core._events import Event


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


_batches = st.builds(
    Batch,
    events=st.lists(_events(), max_size=6).map(tuple),
    outcome=st.none() | st.text(min_size=1, max_size=8).map(_outcome),
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
