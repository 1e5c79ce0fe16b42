"""How a resume reads its trace (runtime/replay/_resume.py, ``_Reader``; docs/resume.md, "What
a resume costs"): once, a block at a time, the lines it never needs left undecoded (the deltas,
and the turns of agents that are not rebuilt, read for their place, agent and tokens only), the
rebuilt agents' lines decoded by a second reading. What that reading must keep: the same state
whatever the block size, every line counted (a missing one is a gap), a corrupt line refused
wherever the resume reads it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import TraceTree, open_runtime
from runtime.core import Limits, TraceError
from runtime.replay import _resume, load_resume

WORKERS = 3


def _scenario() -> dict[str, Any]:
    turn = {"text": "looking around", "tool_calls": [{"name": "glob", "input": {"pattern": "*.x"}}]}
    call = {"name": "agent", "input": {"description": "part", "prompt": "do it", "agent": "worker"}}
    return {"agents": {
        "main": {"tools": ["agent"], "turns": [
            {"text": "Splitting the work.", "tool_calls": [call] * WORKERS},
            {"text": "All parts are done."}]},
        "worker": {"tools": ["glob"], "turns": [turn, turn, {"text": "My part is done."}]},
    }}  # fmt: skip


@pytest.fixture
async def cut(tmp_path: Path) -> Path:
    """A run of a root and its workers, cut before the root's last turn (as a crash there
    leaves it): the workers finished, the root is rebuilt."""
    trace = tmp_path / "t.jsonl"
    async with open_runtime(
        scenario=_scenario(), workspace=tmp_path, trace=trace, limits=Limits(max_parallel=8)
    ) as rt:
        outcome = await rt.run("Split the work.")
    assert outcome.status == "completed"
    lines = trace.read_bytes().splitlines(keepends=True)
    last = max(i for i, ln in enumerate(lines)
               if b'"tool_finished"' in ln and b'"parent_tool_use_id":null' in ln)  # fmt: skip
    trace.write_bytes(b"".join(lines[: last + 1]))
    return trace


def _summary(trace: Path) -> Any:
    tree = TraceTree()
    state = load_resume(trace, tree=tree)
    rec = state.recording
    agents = [
        (a.id, a.status, a.result, a.tail_text,
         [(t.number, t.text, t.stop_reason, t.input_tokens, t.output_tokens, t.call_ids,
           [(c.id, c.name, c.turn, c.status, c.output) for c in t.calls]) for t in a.turns])
        for a in rec.agents.values()
    ]  # fmt: skip
    nodes = [(n.id, n.turns, n.input_tokens, n.output_tokens) for n in tree.agents.values()]
    return agents, nodes, state.last_seq, state.keep, state.agent_ids, state.next_agent


def _lines(trace: Path) -> list[bytes]:
    return trace.read_bytes().splitlines(keepends=True)


def _worker_turn(lines: list[bytes]) -> int:
    """The index of a finished worker's first turn line (one the first reading skips)."""
    return next(i for i, ln in enumerate(lines)
                if ln.startswith(b'{"type":"turn_finished"') and b'"agent_id":"agent-2"' in ln)  # fmt: skip


async def test_the_state_is_the_same_whatever_the_block_size(
    cut: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = _summary(cut)
    # Blocks smaller than a line: each line runs over several, the buffer grows to hold it.
    monkeypatch.setattr(_resume, "_BLOCK", 64)
    assert _summary(cut) == whole
    monkeypatch.setattr(_resume, "_BLOCK", 1000)
    assert _summary(cut) == whole


async def test_the_turns_the_first_reading_skips_are_counted(cut: Path) -> None:
    state = load_resume(cut)
    worker = state.recording.agents["agent-2"]
    # Not rebuilt (finished, under a finished call): its turns are numbered, with their
    # tokens and calls, but their text is not read.
    assert [t.number for t in worker.turns] == [1, 2, 3]
    assert all(t.input_tokens > 0 for t in worker.turns)
    assert [len(t.calls) for t in worker.turns] == [1, 1, 0]
    assert [c.turn for t in worker.turns for c in t.calls] == [1, 2]
    assert worker.turns[0].text == ""
    root = state.recording.agents["agent-1"]  # rebuilt: whole
    assert root.turns[0].text == "Splitting the work."
    assert len(root.turns[0].calls) == WORKERS


async def test_a_missing_skipped_line_is_a_gap(cut: Path, tmp_path: Path) -> None:
    lines = _lines(cut)
    gap = tmp_path / "gap.jsonl"
    at = _worker_turn(lines)
    gap.write_bytes(b"".join(lines[:at] + lines[at + 1 :]))
    with pytest.raises(TraceError, match="seq goes from"):
        load_resume(gap)


async def test_a_blank_line_is_passed_over(cut: Path, tmp_path: Path) -> None:
    lines = _lines(cut)
    blank = tmp_path / "blank.jsonl"
    at = _worker_turn(lines)
    blank.write_bytes(b"".join([*lines[:at], b"\n", *lines[at:]]))
    assert _summary(blank)[0] == _summary(cut)[0]


async def test_a_corrupt_line_is_refused_where_the_resume_reads_it(
    cut: Path, tmp_path: Path
) -> None:
    lines = _lines(cut)
    # A finished worker's turn: its place, agent, stop reason and tokens are read, the rest
    # (its context size, its cost) is not: a resume does not need it, and takes no figure
    # from it.
    at = _worker_turn(lines)
    tail = tmp_path / "tail.jsonl"
    broken = lines[at].replace(b'"cost_usd":null', b'"cost_usd":nul!')
    assert broken != lines[at]
    tail.write_bytes(b"".join([*lines[:at], broken, *lines[at + 1 :]]))
    state = load_resume(tail)
    assert state.recording.agents["agent-2"].turns[0].input_tokens > 0
    # Its tokens cut: the line is not as the writer lays it out, so it is decoded, and refused.
    head = tmp_path / "head.jsonl"
    broken = lines[at].replace(b'"input_tokens":', b'"input_tokens":x', 1)
    head.write_bytes(b"".join([*lines[:at], broken, *lines[at + 1 :]]))
    with pytest.raises(TraceError, match=f":{at + 1}: corrupt line"):
        load_resume(head)
    # The root's turn: the root is rebuilt, so its turns are decoded whole.
    root = next(i for i, ln in enumerate(lines)
                if ln.startswith(b'{"type":"turn_finished"') and b'"agent_id":"agent-1"' in ln)  # fmt: skip
    rebuilt = tmp_path / "rebuilt.jsonl"
    broken = lines[root].replace(b'"cost_usd":null', b'"cost_usd":nul!')
    rebuilt.write_bytes(b"".join([*lines[:root], broken, *lines[root + 1 :]]))
    with pytest.raises(TraceError, match=f":{root + 1}: corrupt line"):
        load_resume(rebuilt)
    # A line that is no event at all, anywhere.
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"".join([*lines[:at], b"not json\n", *lines[at:]]))
    with pytest.raises(TraceError, match=f":{at + 1}: corrupt line"):
        load_resume(garbage)


async def test_a_sub_agent_cut_mid_run_is_read_whole_whatever_the_block_size(
    cut: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Cut after a worker's second turn: it is rebuilt, and its lines come from a second
    # reading (a root's are found by the first).
    lines = _lines(cut)
    at = [i for i, ln in enumerate(lines)
          if ln.startswith(b'{"type":"turn_finished"') and b'"agent_id":"agent-3"' in ln][1]  # fmt: skip
    mid = tmp_path / "mid.jsonl"
    mid.write_bytes(b"".join(lines[: at + 1]))
    whole = _summary(mid)
    worker = next(a for a in whole[0] if a[0] == "agent-3")
    assert worker[1] is None  # running at the crash
    assert [t[1] for t in worker[4]] == ["looking around", "looking around"]
    monkeypatch.setattr(_resume, "_BLOCK", 100)
    assert _summary(mid) == whole
