"""An MCP server's question (``elicitation_requested``, ``elicitation_resolved``: docs/events.md)
is an event of this version: the tree takes it (docs/resume.md: a resume refuses an event type
this version does not know, so a run that asked one could not be resumed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from runtime import TraceTree, open_runtime
from runtime.core import ElicitationRequested, ElicitationResolved, Limits, event_to_dict
from runtime.replay import load_resume


def _question(seq: int, base: dict[str, Any]) -> list[dict[str, Any]]:
    """A question asked and answered during *base*'s call (its run, agent and time)."""
    where = {"ts": base["ts"], "run_id": base["run_id"], "agent_id": base["agent_id"],
             "parent_tool_use_id": base["parent_tool_use_id"]}  # fmt: skip
    asked = ElicitationRequested(
        seq=seq, **where, request_id="elicit-1", tool_use_id="toolu_x", server="docs",
        message="Which folder?", mode="form",
    )  # fmt: skip
    answered = ElicitationResolved(
        seq=seq + 1, **where, request_id="elicit-1", tool_use_id="toolu_x", action="decline"
    )
    return [event_to_dict(asked), event_to_dict(answered)]


def test_the_tree_takes_a_question_and_its_answer() -> None:
    tree = TraceTree()
    base = {"ts": 1.0, "run_id": "r", "agent_id": "agent-1", "parent_tool_use_id": None}
    for fields in _question(1, base):
        tree.apply_dict(fields)
    assert tree.run_id == "r"


@pytest.fixture
async def asked(tmp_path: Path) -> Path:
    """A real run's trace, cut before its root's last turn, with a question asked and answered
    during the root's first turn."""
    scenario = {"agents": {"main": {"tools": ["glob"], "turns": [
        {"text": "Looking.", "tool_calls": [{"name": "glob", "input": {"pattern": "*.x"}}]},
        {"text": "Done."}]}}}  # fmt: skip
    trace = tmp_path / "t.jsonl"
    async with open_runtime(
        scenario=scenario, workspace=tmp_path, trace=trace, limits=Limits(max_parallel=2)
    ) as rt:
        assert (await rt.run("Look.")).status == "completed"
    events = [orjson.loads(line) for line in trace.read_bytes().splitlines()]
    at = next(i for i, e in enumerate(events) if e["type"] == "tool_started")
    last = next(i for i, e in enumerate(events) if e["type"] == "tool_finished")
    kept = events[: at + 1] + _question(0, events[at]) + events[at + 1 : last + 1]
    for seq, fields in enumerate(kept, 1):
        fields["seq"] = seq
    trace.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in kept))
    return trace


async def test_a_run_that_asked_a_question_is_resumed(asked: Path) -> None:
    tree = TraceTree()
    state = load_resume(asked, tree=tree)
    assert not state.finished
    assert state.running_agents() == 1
    assert [n.id for n in tree.roots] == ["agent-1"]
