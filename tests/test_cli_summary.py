"""What the end of a run says (issue 21, items 6, 12 and 13): cancelled subtrees and failures are
counted, by whom, in the summary line and ``trace show``'s header; a cancel reason is said
once; counts agree with their nouns."""

from __future__ import annotations

from pathlib import Path

import trio

from runtime import Event, open_runtime
from runtime.cli._live import summary_line, turn_summary
from runtime.trace._render import render_header, tree_lines
from runtime.trace._tree import TraceTree

BLOCKED = {"tools": ["bash"], "turns": [
    {"tool_calls": [{"name": "bash", "input": {"command": "sleep 30"}}]}, {"text": "never"}]}
SCENARIO = {"agents": {
    "main": {"turns": [
        {"tool_calls": [
            {"name": "agent", "input": {"description": "slow", "prompt": "s", "agent": "slow"}},
            {"name": "agent", "input": {"description": "bad", "prompt": "b", "agent": "bad"}},
            {"name": "agent", "input": {"description": "ok", "prompt": "o", "agent": "ok"}}]},
        {"text": "done"}]},
    "slow": BLOCKED,
    "bad": {"turns": [{"error": "the model fell over"}]},
    "ok": {"turns": [{"text": "fine"}]},
}}


async def _run(tmp_path: Path) -> TraceTree:
    tree = TraceTree()
    started = trio.Event()

    def tap(event: Event) -> None:
        tree.apply(event)
        if event.type == "tool_started" and getattr(event, "name", "") == "bash":
            started.set()

    async with open_runtime(scenario=SCENARIO, workspace=tmp_path, trace=False,
                            permission_mode="allow-all", on_event=tap) as rt:
        handle = await rt.start("go")
        with trio.fail_after(10):
            await started.wait()
        assert await rt.cancel("tu-1.1", "picked with Ctrl+C", by="user")
        await handle.wait()
    return tree


async def test_the_summary_counts_cancelled_subtrees_and_failures(tmp_path: Path) -> None:
    tree = await _run(tmp_path)
    line = summary_line(tree, rich=False)
    assert line.startswith("run completed in ")
    assert line.endswith("· 4 agents · " + line.split(" · ")[2] +
                         " · 1 subtree cancelled by user, 1 failed")
    [root] = tree.roots
    assert turn_summary(tree, root.id, rich=False).endswith(
        "· 1 subtree cancelled by user, 1 failed")
    header = render_header(tree, color=False).plain
    assert "4 agents, 4 tool calls" in header
    assert header.endswith("1 subtree cancelled by user, 1 failed")


async def test_a_cancel_reason_is_said_once_per_line(tmp_path: Path) -> None:
    tree = await _run(tmp_path)
    for line in tree_lines(tree, color=False):
        assert line.plain.count("picked with Ctrl+C") <= 1, line.plain


async def test_one_agent_is_not_1_agents(tmp_path: Path) -> None:
    tree = TraceTree()
    async with open_runtime(scenario={"agents": {"main": {"turns": [{"text": "hi"}]}}},
                            workspace=tmp_path, trace=False, on_event=tree.apply) as rt:
        await rt.run("go")
    assert "1 agent, 0 tool calls" in render_header(tree, color=False).plain
    assert " · 1 agent · " in summary_line(tree, rich=False)
