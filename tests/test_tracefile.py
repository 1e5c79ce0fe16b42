"""Reading JSONL trace files: streaming, honest about broken lines, the fast path equal to the slow."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio
from trace_factory import AgentSpec, run_events, small_run, wide_deep, write_trace

from runtime.core._errors import EventDecodeError, TraceError, UnknownEventType
from runtime.core._events import Event
from runtime.trace._tracefile import SNIFF_LINES, follow_lines, load_traces, read_events
from runtime.trace._tree import TraceTree


def lines_of(dicts: list[dict[str, Any]]) -> list[bytes]:
    return [orjson.dumps(d, option=orjson.OPT_APPEND_NEWLINE) for d in dicts]


def write(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(lines))
    return path


def collect(path: Path, **kwargs: Any) -> tuple[list[TraceTree], list[EventDecodeError]]:
    errors: list[EventDecodeError] = []
    return load_traces(path, on_error=errors.append, **kwargs), errors


def test_the_fast_path_builds_the_same_trees_as_full_decoding(tmp_path: Path) -> None:
    dicts = list(run_events(wide_deep([3, 2]), order="random", rng=random.Random(1)))
    path = write(tmp_path / "t.jsonl", lines_of(dicts))
    fast, errors = collect(path)
    assert errors == []
    slow = TraceTree.from_events(read_events(path))
    assert [t.to_plain_json() for t in fast] == [slow.to_plain_json()]
    assert fast[0].roots[0].text == slow.roots[0].text
    without_text, _ = collect(path, keep_details=False)
    assert without_text[0].to_plain_json() == slow.to_plain_json()
    assert without_text[0].roots[0].text == ""


def test_a_report_of_a_truncated_trace_still_counts_unfinished_agents_turns(tmp_path: Path) -> None:
    # A report skips turn_finished lines when agent_finished has the totals; agents that never
    # finished get theirs from a second pass.
    lines = lines_of(list(run_events(wide_deep([3, 2]), order="time")))
    path = write(tmp_path / "t.jsonl", lines[: len(lines) * 2 // 3])
    report, errors = collect(path, keep_details=False)
    assert errors == []
    full = TraceTree.from_events(read_events(path))
    unfinished = [a for a in full.agents.values() if not a.finished and a.turns]
    assert unfinished
    assert report[0].to_plain_json() == full.to_plain_json()


def test_a_truncated_last_line_ends_the_file_quietly(tmp_path: Path) -> None:
    lines = lines_of(list(run_events(small_run())))
    cut = lines[: len(lines) // 2]
    cut[-1] = cut[-1][: len(cut[-1]) // 2]  # a killed writer: half a line, no newline
    trees, errors = collect(write(tmp_path / "t.jsonl", cut))
    assert errors == []
    (tree,) = trees
    assert tree.status == "interrupted"
    assert "interrupted" in {n.status for n in tree.iter_nodes()}
    assert "running" not in {n.status for n in tree.iter_nodes()}
    assert list(read_events(tmp_path / "t.jsonl"))  # the slow reader agrees


def test_bad_lines_are_reported_with_their_number_and_skipped(tmp_path: Path) -> None:
    lines = lines_of(list(run_events(small_run())))
    good = TraceTree.from_events(read_events(write(tmp_path / "good.jsonl", lines)))
    broken = list(lines)
    broken.insert(3, b"garbage here\n")
    broken.insert(7, b"[1, 2, 3]\n")
    broken.insert(9, b"\n")  # blank lines are not errors
    # A field the tree uses (the tree checks those; a delta's timestamp, say, it does not).
    bad_field = orjson.loads(next(line for line in lines if b'"tool_started"' in line))
    bad_field["ts"] = "yesterday"
    broken.insert(12, orjson.dumps(bad_field) + b"\n")
    trees, errors = collect(write(tmp_path / "t.jsonl", broken))
    assert [e.line for e in errors] == [4, 8, 13]
    assert "not JSON" in str(errors[0])
    assert "garbage here" in str(errors[0])
    assert "JSON object" in str(errors[1])
    assert "ts" in str(errors[2])
    assert str(errors[0]).startswith("line 4: ")
    assert trees[0].to_plain_json() == good.to_plain_json()


def test_an_event_the_tree_rejects_is_reported_with_the_decoders_reason(tmp_path: Path) -> None:
    lines = lines_of(list(run_events(small_run())))
    i = next(n for n, line in enumerate(lines) if b'"tool_finished"' in line)
    event = orjson.loads(lines[i])
    event["status"] = "exploded"
    lines[i] = orjson.dumps(event) + b"\n"
    _, errors = collect(write(tmp_path / "t.jsonl", lines))
    assert len(errors) == 1
    assert errors[0].line == i + 1
    assert "status" in str(errors[0])


def test_unknown_event_types_are_skipped_with_one_warning_per_type(tmp_path: Path) -> None:
    dicts = list(run_events(small_run()))
    future = [
        dict(dicts[2], type="mood_changed", mood="happy"),
        dict(dicts[3], type="mood_changed", mood="sad"),
        dict(dicts[4], type="telepathy"),
    ]
    lines = lines_of(dicts[:5] + future + dicts[5:])
    trees, errors = collect(write(tmp_path / "t.jsonl", lines))
    assert [type(e) for e in errors] == [UnknownEventType, UnknownEventType]
    assert [e.type_name for e in errors if isinstance(e, UnknownEventType)] == [
        "mood_changed",
        "telepathy",
    ]
    assert errors[0].line == 6
    assert trees[0].status == "completed"
    slow_errors: list[EventDecodeError] = []
    assert len(list(read_events(tmp_path / "t.jsonl", on_error=slow_errors.append))) == len(dicts)
    assert len(slow_errors) == 2


def test_a_rejected_line_does_not_invent_a_run(tmp_path: Path) -> None:
    lines = lines_of(list(run_events(small_run())))
    lines.insert(4, b'{"type": "tool_started", "run_id": "bogus", "seq": 1}\n')
    trees, errors = collect(write(tmp_path / "t.jsonl", lines))
    assert [t.run_id for t in trees] == ["run_0001"]
    assert [e.line for e in errors] == [5]


def test_two_runs_in_one_file_give_two_trees(tmp_path: Path) -> None:
    one = list(run_events(small_run(), run_id="run_a"))
    two = list(run_events(AgentSpec(name="solo"), run_id="run_b"))
    trees, _ = collect(write(tmp_path / "t.jsonl", lines_of(one + two)))
    assert [t.run_id for t in trees] == ["run_a", "run_b"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty trace file"),
        (b"\n\n  \n", "empty trace file"),
        (b'{"type": "run_st', "cut short"),
        (b"hello\n" * (SNIFF_LINES + 5), f"no event in its first {SNIFF_LINES} lines"),
        (b"# a readme\n\nnothing to see\n", "not a trace file"),
        (b"\x7fELF\x02\x01\x00\x00binary" * 10, "binary"),
        (b'{"name": "package.json", "version": "1.0"}\n', "not a trace file"),
    ],
)
def test_a_file_that_is_not_a_trace_is_refused_in_one_line(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message) as info:
        load_traces(path, on_error=lambda e: None)
    assert "\n" not in str(info.value)
    assert str(path) in str(info.value)
    with pytest.raises(TraceError):
        list(read_events(path))


def test_a_missing_file_or_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        load_traces(tmp_path / "nope.jsonl")
    with pytest.raises(TraceError, match="directory"):
        load_traces(tmp_path)


def test_delta_lines_are_only_skipped_when_well_formed(tmp_path: Path) -> None:
    dicts = list(run_events(small_run()))
    lines = lines_of(dicts)
    i = next(n for n, line in enumerate(lines) if b'"text_delta"' in line)
    lines.insert(i + 1, lines[i][:40] + b"\n")  # a delta cut in the middle of the file
    _, errors = collect(write(tmp_path / "t.jsonl", lines), keep_details=False)
    assert [e.line for e in errors] == [i + 2]


def test_read_events_yields_events_lazily(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", lines_of(list(run_events(small_run()))))
    events = read_events(path)
    first = next(events)
    assert isinstance(first, Event)
    assert first.type == "run_started"
    assert sum(1 for _ in events) == len(path.read_bytes().splitlines()) - 1


async def test_follow_lines_delivers_complete_lines_as_they_land(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    path = tmp_path / "live.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": ')
    got: list[tuple[int, bytes]] = []
    with trio.fail_after(60):
        async with follow_lines(path, poll_s=0.5) as batches:
            async for batch in batches:
                got.extend(batch)
                if len(got) == 1:
                    await trio.sleep(2)  # the writer is slow to finish its line
                    with path.open("ab") as f:
                        f.write(b'2}\n{"c": 3}\n')
                if len(got) == 3:
                    break
    assert got == [(1, b'{"a": 1}\n'), (2, b'{"b": 2}\n'), (3, b'{"c": 3}\n')]


async def test_follow_lines_refuses_a_missing_file(tmp_path: Path) -> None:
    async def follow() -> None:
        async with follow_lines(tmp_path / "nope") as batches:
            async for _ in batches:
                pass

    with pytest.raises(TraceError, match="no such file"):
        await follow()


def test_write_trace_round_trips(tmp_path: Path) -> None:
    n = write_trace(tmp_path / "t.jsonl", run_events(small_run()))
    assert n == len((tmp_path / "t.jsonl").read_bytes().splitlines())


@pytest.mark.slow  # a speed: linear time is asserted as a bound on real time
async def test_follow_lines_reads_a_long_growing_line_in_linear_time(tmp_path: Path) -> None:
    # 16 MB without a newline, read 4 KiB at a time: joining what came so far on every read
    # (as tail once did) copies ~32 GB; keeping the pieces copies the line once.
    path = tmp_path / "live.jsonl"
    path.write_bytes(b"x" * (16 << 20) + b'\n{"b": 2}\n')
    got: list[tuple[int, bytes]] = []
    start = time.monotonic()
    with trio.fail_after(60):
        async with follow_lines(path, chunk=4096) as batches:
            async for batch in batches:
                got.extend(batch)
                if len(got) == 2:
                    break
    assert time.monotonic() - start < 3.0
    assert got[0] == (1, b"x" * (16 << 20) + b"\n")
    assert got[1] == (2, b'{"b": 2}\n')


async def test_follow_lines_keeps_only_the_start_of_a_line_over_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "live.jsonl"
    path.write_bytes(b"y" * 10_000 + b'\n{"b": 2}\n')
    got: list[tuple[int, bytes]] = []
    with trio.fail_after(60):
        async with follow_lines(path, chunk=100, max_line=1000) as batches:
            async for batch in batches:
                got.extend(batch)
                if len(got) == 2:
                    break
    assert got == [(1, b"y" * 200 + b"...[line cut]\n"), (2, b'{"b": 2}\n')]
