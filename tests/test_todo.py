"""The ``todo_write`` tool (docs/tools.md, "todo_write"): its event, the live tree's current
item, ``trace show``'s last lists, and one error result for bad input."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from runtime import Event, EventDecodeError, TodoUpdated, ToolFinished, open_runtime
from runtime.cli._live import LiveView, PlainView
from runtime.project import load_project
from runtime.project._agents import CLAUDE_TOOLS
from runtime.trace import TodoItem, TraceTree
from tests.harness import EventLog, agent_call, run_scenario
from tests.invariants import by_type, check_invariants
from tests.test_live import terminal

PLAN = [
    {"content": "Read the test", "status": "completed", "activeForm": "Reading the test"},
    {"content": "Fix the parser", "status": "in_progress", "activeForm": "Fixing the parser"},
    {"content": "Run the tests", "status": "pending", "activeForm": "Running the tests"},
]
DONE = [{**item, "status": "completed"} for item in PLAN]


def _todo(todos: Any) -> dict[str, Any]:
    return {"name": "todo_write", "input": {"todos": todos}}


def _planner(*lists: Any, last_delay_s: float = 0.0) -> dict[str, Any]:
    turns: list[dict[str, Any]] = [{"tool_calls": [_todo(t)]} for t in lists]
    turns.append({"text": "planned", "delay_s": last_delay_s})
    return {"turns": turns}


async def test_a_todo_list_is_one_event_and_a_short_result(workspace: Path) -> None:
    scenario = {"agents": {"main": _planner(PLAN, DONE)}}
    outcome, events = await run_scenario(scenario, workspace)
    check_invariants(events)
    assert outcome.result == "planned"
    updates = by_type(events, TodoUpdated)
    assert [(e.agent_id, e.todos) for e in updates] == [("agent-1", PLAN), ("agent-1", DONE)]
    calls = [e for e in by_type(events, ToolFinished) if e.name == "todo_write"]
    assert [e.tool_use_id for e in calls] == [e.tool_use_id for e in updates]
    assert [(e.status, e.output) for e in calls] == [
        ("ok", "Todo list saved (1 pending, 1 in progress, 1 completed). "
               "In progress: Fixing the parser."),
        ("ok", "Todo list saved (0 pending, 0 in progress, 3 completed)."),
    ]  # fmt: skip
    tree = TraceTree.from_events(events)
    agent = tree.agents["agent-1"]
    assert agent.todos == tuple(TodoItem(t["content"], "completed", t["activeForm"]) for t in DONE)
    assert agent.current_todo is None


async def test_input_that_is_not_a_list_or_has_a_bad_status_is_one_error_result(
    workspace: Path,
) -> None:
    bad_status = [{**PLAN[0], "status": "doing"}]
    scenario = {"agents": {"main": _planner("first this", bad_status, [{"content": "x"}])}}
    outcome, events = await run_scenario(scenario, workspace)
    check_invariants(events)
    assert outcome.result == "planned"
    assert by_type(events, TodoUpdated) == []
    calls = [e for e in by_type(events, ToolFinished) if e.name == "todo_write"]
    assert [(e.status, e.output) for e in calls] == [
        ("error", "invalid input for todo_write: input.todos: 'first this' is not of type "
                  "'array'"),
        ("error", "invalid input for todo_write: input.todos[0].status: 'doing' is not one of "
                  "['pending', 'in_progress', 'completed']"),
        ("error", "invalid input for todo_write: input.todos[0].status: required field missing"),
    ]  # fmt: skip


async def test_the_live_tree_shows_each_running_agents_item_in_progress(workspace: Path) -> None:
    child_plan = [{"content": "Scan", "status": "in_progress", "activeForm": "Scanning files"}]
    scenario = {"agents": {
        "main": {"turns": [
            {"tool_calls": [_todo(PLAN)]},
            {"tool_calls": [agent_call("scan", "scanner")]},
            {"text": "done"}]},
        "scanner": _planner(child_plan, last_delay_s=0.5)}}  # fmt: skip
    console, _ = terminal(width=120, height=30)
    tree = TraceTree()
    view = LiveView(tree, console)
    log = EventLog()

    def tap(event: Event) -> None:
        view.tap(event)
        log(event)

    async with open_runtime(
        scenario=scenario, workspace=workspace, trace=False, permission_mode="allow-all",
        on_event=tap,
    ) as rt:  # fmt: skip
        handle = await rt.start("go")
        await log.wait_for(lambda ev: len(by_type(ev, TodoUpdated)) == 2)
        frame = _frame(view)
        await handle.wait()
    [main] = [line for line in frame if " agent-1 " in line]
    [scanner] = [line for line in frame if " agent-2 " in line]
    assert "▸ Fixing the parser" in main
    assert "▸ Scanning files" in scanner
    assert "▸" not in "".join(_frame(view)), "a finished agent shows no current item"


def _frame(view: LiveView) -> list[str]:
    from rich.console import Console

    frame = Console(width=120, height=30, file=io.StringIO(), force_terminal=False)
    with frame.capture() as captured:
        frame.print(view.renderable())
    return captured.get().splitlines()


def test_trace_show_lists_each_agents_last_list(workspace: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({"agents": {
        "main": {"turns": [
            {"tool_calls": [_todo([PLAN[0]]), agent_call("fix", "fixer")]},
            {"tool_calls": [_todo(PLAN)]},
            {"text": "done"}]},
        "fixer": _planner(DONE[:1])}}))  # fmt: skip
    trace = tmp_path / "t.jsonl"
    run = _cli(["run", "go", "--scenario", str(scenario), "--trace", str(trace),
                "--permission-mode", "allow-all"], workspace)  # fmt: skip
    assert run.returncode == 0, run.stderr
    shown = _cli(["trace", "show", str(trace)], workspace)
    assert shown.returncode == 0, shown.stderr
    tail = shown.stdout.split("\n\n")[-1].splitlines()
    assert tail == [
        "todos of main agent-1",
        "  ✓ Read the test",
        "  ▸ Fix the parser",
        "  · Run the tests",
        "todos of fixer agent-2",
        "  ✓ Read the test",
    ]
    only_fixer = _cli(["trace", "show", str(trace), "--subtree", "agent-2"], workspace)
    assert only_fixer.stdout.split("\n\n")[-1].splitlines() == [
        "todos of fixer agent-2",
        "  ✓ Read the test",
    ]


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtime", *args], cwd=cwd, text=True, capture_output=True,
        timeout=120, check=False,
    )  # fmt: skip


def test_todowrite_in_an_agent_file_is_todo_write(workspace: Path) -> None:
    from runtime.project._project import BUILTIN_TOOLS
    from tools import builtin_tools

    assert CLAUDE_TOOLS["TodoWrite"] == "todo_write"
    assert tuple(t.name for t in builtin_tools()) == BUILTIN_TOOLS, "the project layer's copy"
    folder = workspace / ".claude" / "agents"
    folder.mkdir(parents=True)
    (folder / "p.md").write_text("---\nname: p\ntools: Read, TodoWrite\n---\nYou plan.\n")
    project = load_project(workspace, env={"XDG_CONFIG_HOME": str(workspace / "cfg")})
    [planner] = project.agents
    assert planner.agent_type.tools == ("read", "todo_write")
    assert project.warnings == ()


def test_a_trace_with_a_malformed_todo_list_is_refused_naming_the_field() -> None:
    tree = TraceTree()
    good = {"type": "todo_updated", "seq": 1, "ts": 1.0, "run_id": "r", "agent_id": "agent-1",
            "parent_tool_use_id": None, "tool_use_id": "tu-1", "todos": PLAN}  # fmt: skip
    tree.apply_dict(good)
    assert tree.agents["agent-1"].current_todo == "Fixing the parser"
    for todos in ("x", [{"content": "a", "status": "maybe", "activeForm": "b"}], [1]):
        with pytest.raises(EventDecodeError, match=r"^invalid todo_updated event: field 'todos'"):
            tree.apply_dict({**good, "todos": todos})
    assert tree.agents["agent-1"].current_todo == "Fixing the parser", "the last good list"


async def test_plain_lines_say_each_new_todo_list(workspace: Path) -> None:
    out = io.StringIO()
    view = PlainView(TraceTree(), out)
    scenario = {"agents": {"main": _planner(PLAN, DONE)}}
    async with (
        open_runtime(scenario=scenario, workspace=workspace, trace=False, on_event=view.tap) as rt,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(view.run)
        await rt.run("go")
        nursery.cancel_scope.cancel()
    lines = [line for line in out.getvalue().splitlines() if "todo list" in line]
    assert lines == [
        "[main] todo list: 1/3 done, now: Fixing the parser",
        "[main] todo list: 3/3 done",
    ]
