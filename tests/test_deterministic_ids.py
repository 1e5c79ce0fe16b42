"""The same script gives the same ids and the same order, run after run (issue 21, item 4).

Tool-call ids follow the order the model emitted the calls, sub-agent ids the order of their
calls (given before any of them starts), and siblings are listed in call order in the tree, the
picker's list and ``trace show``, whatever order the parallel agents happen to run in. trio
shuffles the order in which ready tasks run, so several runs of a script whose parallel agents
all finish at the same instant would differ if anything depended on scheduling.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from runtime import Event, open_runtime
from runtime.trace._render import tree_lines
from runtime.trace._tree import TraceTree
from tests.invariants import check_invariants

RUNS = 4


def _fan_out(kinds: list[str]) -> dict[str, Any]:
    return {"tool_calls": [
        {"name": "agent", "input": {"description": f"part {k}", "prompt": k, "agent": k}}
        for k in kinds]}


# Parallel sub-agents with no delays: each makes tool calls and one starts its own sub-agents,
# so every id would be up for grabs if it were given out first come, first served.
SCENARIO = {"agents": {
    "main": {"turns": [_fan_out(["a", "b", "c"]), {"text": "done"}]},
    "a": {"turns": [{"tool_calls": [{"name": "glob", "input": {"pattern": "*"}}] * 2},
                    _fan_out(["d", "d"]), {"text": "a done"}]},
    "b": {"turns": [{"tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]},
                    {"tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]},
                    {"text": "b done"}]},
    "c": {"turns": [{"text": "c done"}]},
    "d": {"turns": [{"tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]},
                    {"text": "d done"}]},
}}


def _shape(tree: TraceTree) -> list[str]:
    """The tree as drawn, without what varies by nature (durations, run id)."""
    return [f"{node.kind} {node.id} {node.name} {node.status} "
            f"<{node.parent_tool_use_id if node.kind == 'agent' else ''}>"
            for node in tree.iter_nodes()]


async def _run_once(workspace: Path) -> tuple[list[str], list[str], list[str]]:
    events: list[Event] = []
    async with open_runtime(scenario=SCENARIO, workspace=workspace, trace=False,
                            on_event=events.append) as rt:
        outcome = await rt.run("go")
    assert outcome.status == "completed"
    check_invariants(events)
    tree = TraceTree.from_events(events)
    drawn = [line.plain.split("  ")[0] for line in tree_lines(tree, color=False, title=False)]
    started = [f"{e.agent_id} {e.tool_use_id}" for e in events  # type: ignore[attr-defined]
               if e.type == "tool_started" and e.agent_id == outcome.agent_id]
    return _shape(tree), drawn, started


async def test_a_scenario_run_twice_has_the_same_ids_in_the_same_order(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("x")
    runs = []
    with trio.fail_after(30):
        for _ in range(RUNS):
            runs.append(await _run_once(tmp_path))  # noqa: PERF401 - one run after another
    shape, drawn, started = runs[0]
    assert all(run == runs[0] for run in runs[1:]), "ids or order moved between runs"
    # The root's calls, in the order the model emitted them, and their tool_started too.
    assert started == ["agent-1 tu-1.1", "agent-1 tu-1.2", "agent-1 tu-1.3"]
    agents = [line for line in shape if line.startswith("agent ")]
    assert agents == [
        "agent agent-1 main completed <None>",
        "agent agent-2 a completed <tu-1.1>",
        "agent agent-5 d completed <tu-2.3>",
        "agent agent-6 d completed <tu-2.4>",
        "agent agent-3 b completed <tu-1.2>",
        "agent agent-4 c completed <tu-1.3>",
    ]
    tools_of_a = [line.split()[1] for line in shape if line.startswith("tool tu-2.")]
    assert tools_of_a == ["tu-2.1", "tu-2.2", "tu-2.3", "tu-2.4"]
    assert drawn[0].startswith("✓ main agent-1")


async def test_the_pickers_list_is_in_call_order(tmp_path: Path) -> None:
    """Three sub-agents that block: the running subtrees are listed as the calls were made."""
    blocked = {"turns": [{"tool_calls": [{"name": "bash", "input": {"command": "sleep 30"}}]},
                         {"text": "never"}]}
    scenario = {"agents": {"main": {"turns": [_fan_out(["x", "y", "z"]), {"text": "done"}]},
                           "x": blocked, "y": blocked, "z": blocked}}
    for _ in range(RUNS):
        tree = TraceTree()
        all_blocked = trio.Event()

        def tap(event: Event, tree: TraceTree = tree, all_blocked: trio.Event = all_blocked) -> None:
            tree.apply(event)
            if sum(1 for t in tree.tools.values() if t.name == "bash") == 3:
                all_blocked.set()

        async with open_runtime(scenario=scenario, workspace=tmp_path, trace=False,
                                permission_mode="allow-all", on_event=tap) as rt:
            handle = await rt.start("go")
            with trio.fail_after(10):
                await all_blocked.wait()
            order = [(s.tool_use_id, s.agent_name, s.agent_id) for s in
                     sorted(tree.running_subtrees(), key=lambda s: list(tree.tools).index(
                         s.tool_use_id))]
            assert order == [("tu-1.1", "x", "agent-2"), ("tu-1.2", "y", "agent-3"),
                             ("tu-1.3", "z", "agent-4")]
            ids = [n.id for n in tree.iter_nodes() if n.kind == "agent"]
            assert ids == ["agent-1", "agent-2", "agent-3", "agent-4"]
            await rt.abort("test over")
            await handle.wait()
