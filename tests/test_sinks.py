"""The JSONL sinks: every event written, in order, never blocking or crashing the run."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio
import trio.testing

from runtime import ConfigError, EventBus, TextDelta, decode_event
from runtime.trace._sinks import JsonlSink, PipeSink, open_pipe_writer, open_trace_file
from tests.harness import loop_ticks


async def test_a_sink_writes_every_event_as_one_line_in_order(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    sink = JsonlSink(path.open("wb"), close_file=True)
    bus = EventBus("r")
    bus.add_tap(sink)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sink.run)
        for i in range(100):
            await bus.emit(TextDelta(agent_id="a", parent_tool_use_id=None, text=str(i)))
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
        await bus.emit(TextDelta(agent_id="a", parent_tool_use_id=None, text="x"))
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
        bus.emit_nowait(TextDelta(agent_id="a", parent_tool_use_id=None, text="y" * 50))
    assert len(out.getvalue()) > 0, "no flusher task ran, yet the buffer stayed bounded"


class _BrokenPipe(io.BytesIO):
    def write(self, data: bytes) -> int:  # type: ignore[override]
        raise BrokenPipeError(32, "Broken pipe")


def test_a_consumer_that_went_away_stops_the_sink_not_the_run() -> None:
    sink = JsonlSink(_BrokenPipe(), name="json")
    bus = EventBus("r")
    bus.add_tap(sink)
    bus.emit_nowait(TextDelta(agent_id="a", parent_tool_use_id=None, text="1"))
    sink.flush()
    assert sink.broken is not None
    assert "BrokenPipeError" in sink.broken
    bus.emit_nowait(TextDelta(agent_id="a", parent_tool_use_id=None, text="2"))
    sink.close()


# ---------------------------------------------------------------------------- PipeSink


def _pipe() -> tuple[int, io.BufferedWriter, int]:
    """A pipe's read end, its write end as a file, and the sink's private descriptor."""
    read_end, write_end = os.pipe()
    out = os.fdopen(write_end, "wb")
    fd = open_pipe_writer(out)
    assert fd is not None
    return read_end, out, fd


def _read_all(fd: int) -> bytes:
    chunks = []
    while data := os.read(fd, 1 << 16):
        chunks.append(data)
    return b"".join(chunks)


async def test_a_stalled_pipe_reader_makes_emitters_wait_and_loses_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The pipe is real; the sink's stall timer runs on the virtual clock. That the event loop
    # stays free meanwhile is measured in real time by the slow test below.
    read_end, out, fd = _pipe()
    bus = EventBus("r")
    sink = PipeSink(fd, bus, buffer=64, stall_after_s=0.05)
    # The sink's descriptor is its own: the file (and a stderr sharing the pipe) stays blocking.
    assert os.get_blocking(out.fileno())
    emitted = 0

    async def emitter() -> None:
        nonlocal emitted
        for i in range(5000):  # ~500 KB: far more than the pipe and the buffer hold
            await bus.emit(TextDelta(agent_id="a", parent_tool_use_id=None, text=f"{i:0>60}"))
            emitted += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sink.run)
        nursery.start_soon(emitter)
        await trio.testing.wait_all_tasks_blocked()
        assert emitted < 5000, "nobody reads: the emitter must be held back"
        # An end does not wait its grace for a stalled reader (stalled after 0.05 s).
        with trio.fail_after(1):
            await bus.emit_final(
                TextDelta(
                    agent_id="b",
                    parent_tool_use_id=None,
                    text="end",
                ),
                grace_s=30,
            )
        # The reader comes back: everything arrives, in order, nothing lost.
        data = bytearray()
        while emitted < 5000:
            await trio.lowlevel.wait_readable(read_end)
            data += os.read(read_end, 1 << 16)
        nursery.cancel_scope.cancel()
    bus.close()
    sink.close()
    out.close()
    data += _read_all(read_end)
    os.close(read_end)
    seqs = [decode_event(line).seq for line in data.splitlines()]
    assert seqs == list(range(1, 5002))


@pytest.mark.slow
async def test_a_stalled_pipe_reader_leaves_the_event_loop_free() -> None:
    # Real time: a task sleeping 10 ms at a time must keep ticking while the sink waits on a
    # full pipe and the emitter on the sink.
    read_end, out, fd = _pipe()
    bus = EventBus("r")
    sink = PipeSink(fd, bus, buffer=64, stall_after_s=0.05)

    async def emitter() -> None:
        for i in range(5000):
            await bus.emit(TextDelta(agent_id="a", parent_tool_use_id=None, text=f"{i:0>60}"))

    async with loop_ticks() as ticks, trio.open_nursery() as nursery:
        nursery.start_soon(sink.run)
        nursery.start_soon(emitter)
        await trio.sleep(0.5)
        assert ticks.count >= 20, "the event loop must stay free"
        nursery.cancel_scope.cancel()
    bus.close()
    os.close(read_end)
    sink.close()
    out.close()


async def test_a_reader_that_went_away_holds_nothing_up() -> None:
    # `run --json | head`: the pipe breaks; the agents carry on as if nobody subscribed.
    read_end, out, fd = _pipe()
    os.close(read_end)
    bus = EventBus("r")
    sink = PipeSink(fd, bus, buffer=16)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sink.run)
        with trio.fail_after(5):
            for i in range(1000):
                await bus.emit(TextDelta(agent_id="a", parent_tool_use_id=None, text=str(i)))
        nursery.cancel_scope.cancel()
    assert sink.broken is not None
    assert "BrokenPipeError" in sink.broken
    bus.close()
    sink.close()
    out.close()


def test_close_gives_up_on_a_reader_that_takes_nothing() -> None:
    read_end, out, fd = _pipe()
    bus = EventBus("r")
    sink = PipeSink(fd, bus, final_timeout_s=0.2)  # run() never ran: close alone must cope
    for i in range(2000):
        bus.emit_nowait(TextDelta(agent_id="a", parent_tool_use_id=None, text=f"{i:0>100}"))
    bus.close()
    sink.close()  # nobody reads: bounded, not forever (the slow test below times it)
    out.close()
    os.close(read_end)


@pytest.mark.slow
def test_close_gives_up_on_a_silent_reader_after_its_final_timeout() -> None:
    read_end, out, fd = _pipe()
    bus = EventBus("r")
    sink = PipeSink(fd, bus, final_timeout_s=0.2)
    for i in range(2000):
        bus.emit_nowait(TextDelta(agent_id="a", parent_tool_use_id=None, text=f"{i:0>100}"))
    bus.close()
    started = time.monotonic()
    sink.close()
    assert time.monotonic() - started < 5
    out.close()
    os.close(read_end)


def test_only_a_pipe_gets_a_pipe_writer(tmp_path: Path) -> None:
    with (tmp_path / "f").open("wb") as f:
        assert open_pipe_writer(f) is None
    assert open_pipe_writer(io.BytesIO()) is None


# -- the trace file: private, locked, watched; and always ahead of everything else ----------


def test_a_trace_and_the_folders_it_needs_are_created_private(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "t.jsonl"
    open_trace_file(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o700


def test_a_second_writer_of_one_trace_is_refused_and_the_first_trace_kept(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.jsonl"
    first = open_trace_file(path)
    first.write(b"line of the first run\n")
    first.flush()
    with pytest.raises(ConfigError, match="being written by another run"):
        open_trace_file(path)
    assert path.read_bytes() == b"line of the first run\n"
    first.close()
    open_trace_file(path).close()  # free again once the first run closed it


def test_the_lock_of_a_killed_writer_goes_with_it(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    code = (
        "import sys, time; from pathlib import Path; "
        "from runtime.trace._sinks import open_trace_file; "
        "f = open_trace_file(Path(sys.argv[1])); print('locked', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"locked\n"
        with pytest.raises(ConfigError, match="another run"):
            open_trace_file(path)
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout:
            proc.stdout.close()
    open_trace_file(path).close()


def test_a_symlink_or_a_fifo_at_the_trace_path_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep me")
    link = tmp_path / "t.jsonl"
    link.symlink_to(target)
    with pytest.raises(ConfigError, match="symbolic link"):
        open_trace_file(link)
    assert target.read_text() == "keep me"
    fifo = tmp_path / "f.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        open_trace_file(fifo)


def test_an_existing_trace_is_made_private_when_it_is_reused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("old run\n")
    path.chmod(0o644)
    open_trace_file(path).close()
    assert path.read_bytes() == b""
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("change", ["replaced", "removed", "cut"])
def test_a_trace_changed_under_the_run_is_noticed(tmp_path: Path, change: str) -> None:
    path = tmp_path / "t.jsonl"
    sink = JsonlSink(open_trace_file(path), close_file=True, watch=path)
    bus = EventBus("r")
    bus.add_tap(sink)
    bus.emit_nowait(TextDelta(agent_id="a", parent_tool_use_id=None, text="one"))
    sink.flush()
    assert sink.replaced is None
    if change == "replaced":
        other = tmp_path / "planted"
        other.write_text("{}\n")
        other.replace(path)
    elif change == "removed":
        path.unlink()
    else:
        os.truncate(path, 0)
    bus.emit_nowait(TextDelta(agent_id="a", parent_tool_use_id=None, text="two"))
    sink.flush()
    assert sink.replaced is not None
    sink.close()


async def test_a_subscriber_gets_an_event_only_once_the_trace_has_written_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.jsonl"
    trace = JsonlSink(open_trace_file(path), close_file=True, interval_s=3600)
    bus = EventBus("r")
    bus.add_tap(trace)
    bus.set_gate(trace)
    with bus.subscribe() as sub:
        for i in range(3):
            bus.emit_nowait(TextDelta(agent_id="a", parent_tool_use_id=None, text=str(i)))
        assert path.read_bytes() == b""  # buffered: the flusher has not run
        first = await sub.receive()
        assert len(path.read_bytes().splitlines()) >= first.seq
        assert sub.receive_nowait().seq == 2
    trace.close()


def test_json_output_never_gets_ahead_of_the_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    trace = JsonlSink(open_trace_file(path), close_file=True, interval_s=3600)
    out = io.BytesIO()
    json_sink = JsonlSink(out, gate=trace)
    bus = EventBus("r")
    bus.add_tap(trace)
    bus.add_tap(json_sink)
    for i in range(5):
        bus.emit_nowait(TextDelta(agent_id="a", parent_tool_use_id=None, text=str(i)))
        json_sink.flush()
        assert path.read_bytes() == out.getvalue()
    trace.close()
