"""The JSONL sinks: every event written, in order, never blocking or crashing the run."""

from __future__ import annotations

import io
from pathlib import Path

import trio
import trio.testing

from runtime import EventBus, TextDelta, decode_event
from runtime._sinks import JsonlSink


async def test_a_sink_writes_every_event_as_one_line_in_order(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    sink = JsonlSink(path.open("wb"), close_file=True)
    bus = EventBus("r")
    bus.add_tap(sink)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sink.run)
        for i in range(100):
            await bus.emit(TextDelta, agent_id="a", parent_tool_use_id=None, text=str(i))
        nursery.cancel_scope.cancel()
    sink.close()
    lines = path.read_bytes().splitlines()
    assert [decode_event(line).seq for line in lines] == list(range(1, 101))
    assert sink.lines_written == 100


async def test_the_flusher_writes_while_the_run_goes_on(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "t.jsonl"
    sink = JsonlSink(path.open("wb"), close_file=True, interval_s=0.02)
    bus = EventBus("r")
    bus.add_tap(sink)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sink.run)
        await bus.emit(TextDelta, agent_id="a", parent_tool_use_id=None, text="x")
        await trio.sleep(0.1)
        assert path.read_bytes().count(b"\n") == 1, "visible to `trace tail` before the end"
        nursery.cancel_scope.cancel()
    sink.close()


def test_a_big_buffer_is_written_at_once() -> None:
    out = io.BytesIO()
    sink = JsonlSink(out, max_buffer_bytes=1000)
    bus = EventBus("r")
    bus.add_tap(sink)
    for _ in range(50):
        bus.emit_nowait(TextDelta, agent_id="a", parent_tool_use_id=None, text="y" * 50)
    assert len(out.getvalue()) > 0, "no flusher task ran, yet the buffer stayed bounded"


class _BrokenPipe(io.BytesIO):
    def write(self, data: bytes) -> int:  # type: ignore[override]
        raise BrokenPipeError(32, "Broken pipe")


def test_a_consumer_that_went_away_stops_the_sink_not_the_run() -> None:
    sink = JsonlSink(_BrokenPipe(), name="json")
    bus = EventBus("r")
    bus.add_tap(sink)
    bus.emit_nowait(TextDelta, agent_id="a", parent_tool_use_id=None, text="1")
    sink.flush()
    assert sink.broken is not None
    assert "BrokenPipeError" in sink.broken
    bus.emit_nowait(TextDelta, agent_id="a", parent_tool_use_id=None, text="2")
    sink.close()
