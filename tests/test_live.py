"""The views: the live tree (coalesced redraws, fitted to the screen, NO_COLOR) and plain lines.

The live view draws on a rich console writing to memory (a terminal as far as rich knows); runs
are real scripted runs, in real time where the cost of drawing is what is measured.
"""

from __future__ import annotations

import io
import re
import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel

from runtime import Limits, open_runtime
from runtime.cli._live import MAX_FPS, LiveView, PlainView
from runtime.trace._tree import TraceTree

# SGR colour parameters: 30-37, 38 (extended), 90-97 (foreground); 40-47, 48, 100-107 (background).
_COLOUR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-8]|9[0-7]|4[0-8]|10[0-7])(?:;[0-9;]*)?m")


def terminal(width: int = 120, height: int = 40) -> tuple[Any, io.StringIO]:
    from rich.console import Console

    out = io.StringIO()
    console = Console(
        file=out,
        force_terminal=True,
        width=width,
        height=height,
        color_system="truecolor",
        highlight=False,
    )
    return console, out


def fanout(n: int, *, words: int = 20, chunk_delay: float = 0.01) -> dict[str, Any]:
    """main starts *n* parallel workers that stream text, call a tool, and answer."""
    text = " ".join(f"word{i}" for i in range(words))
    calls = [
        {"name": "agent", "input": {"description": f"part {i}", "prompt": "go", "agent": "w"}}
        for i in range(n)
    ]
    return {
        "agents": {
            "main": {
                "turns": [{"text": "Fanning out.", "tool_calls": calls}, {"text": "All done."}]
            },
            "w": {
                "tools": ["glob"],
                "turns": [
                    {
                        "text": text,
                        "chunk_delay_s": chunk_delay,
                        "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}],
                    },
                    {"text": text, "chunk_delay_s": chunk_delay},
                ],
            },
        }
    }


async def live_run(
    scenario: dict[str, Any], workspace: Path, console: Any
) -> tuple[LiveView, float]:
    tree = TraceTree()
    view = LiveView(tree, console)
    async with (
        open_runtime(
            scenario=scenario,
            workspace=workspace,
            trace=False,
            permission_mode="allow-all",
            limits=Limits(max_parallel=200),
            on_event=view.tap,
        ) as rt,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(view.run)
        t0 = time.perf_counter()
        outcome = await rt.run("go")
        wall = time.perf_counter() - t0
        nursery.cancel_scope.cancel()
    assert outcome.status == "completed"
    return view, wall


async def test_redraws_are_coalesced_with_100_parallel_agents(workspace: Path) -> None:
    console, out = terminal()
    with trio.fail_after(30):
        view, wall = await live_run(fanout(100), workspace, console)
    events = len(view.tree.agents) + len(view.tree.tools)
    assert len(view.tree.agents) == 101
    # Thousands of events (every streamed word of 100 agents), a dozen frames a second at most
    # (an upper bound: a slower machine only makes it looser).
    assert view.frames <= wall * MAX_FPS + 2, (view.frames, wall)
    assert view.frames < events
    view.finish(trace_path=None)
    text = out.getvalue()
    assert "All done." in text
    assert "completed" in text


@pytest.mark.slow
async def test_drawing_takes_a_bounded_share_of_a_run_with_100_parallel_agents(
    workspace: Path,
) -> None:
    # A speed: drawing takes a bounded share of the trio thread, whatever the tree's size.
    console, _ = terminal()
    with trio.fail_after(30):
        view, wall = await live_run(fanout(100), workspace, console)
    assert view.render_s <= 0.5 * wall, (view.render_s, wall)
    print(
        f"\n100 agents: {wall:.2f}s wall, {view.frames} frames, "
        f"{view.render_s / max(1, view.frames) * 1000:.1f} ms/frame on average, "
        f"{view.max_frame_s * 1000:.1f} ms max, {view.render_s / wall:.0%} of the run"
    )
    view.finish(trace_path=None)


async def test_a_tall_tree_fits_the_screen_while_live(workspace: Path) -> None:
    from rich.console import Console

    console, _ = terminal(width=100, height=20)
    tree = TraceTree()
    view = LiveView(tree, console)
    async with open_runtime(
        scenario=fanout(30, words=3, chunk_delay=0.0),
        workspace=workspace,
        trace=False,
        permission_mode="allow-all",
        limits=Limits(max_parallel=200),
        on_event=view.tap,
    ) as rt:
        handle = await rt.start("go")
        # Stop half-way: every worker has started; some are running.
        while len(tree.agents) < 31 or all(a.finished for a in list(tree.agents.values())[1:]):
            await trio.lowlevel.checkpoint()
        frame = Console(width=100, height=20, file=io.StringIO(), force_terminal=True)
        with frame.capture() as captured:
            frame.print(view.renderable())
        lines = captured.get().splitlines()
        await handle.wait()
    assert len(lines) <= 20
    assert "more below (the whole tree is printed at the end)" in lines[-1]


async def test_root_text_streams_below_and_the_answer_stays(workspace: Path) -> None:
    console, out = terminal()
    scenario = {
        "agents": {
            "main": {
                "turns": [
                    {
                        "text": "First I look.",
                        "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}],
                    },
                    {"text": "The **answer** is 42.", "chunk_delay_s": 0.01},
                ]
            }
        }
    }
    with trio.fail_after(10):
        view, _ = await live_run(scenario, workspace, console)
    view.finish(trace_path=Path("t.jsonl"))
    text = out.getvalue()
    assert "First I look." in text  # a turn with tool calls is printed above the tree
    assert "answer" in text
    assert "is 42." in text
    assert "trio-agents trace show t.jsonl" in text


async def test_no_color_is_respected(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runtime.cli._options import make_console

    monkeypatch.setenv("NO_COLOR", "1")
    console = make_console()
    out = io.StringIO()
    console.file = out
    assert console.no_color
    with trio.fail_after(10):
        view, _ = await live_run(fanout(3, words=3, chunk_delay=0.0), workspace, console)
    view.finish(trace_path=None)
    text = out.getvalue()
    assert "All done." in text
    assert not _COLOUR.search(text), _COLOUR.search(text)


def test_the_tap_only_updates_the_tree() -> None:
    from runtime import AgentStarted, TextDelta

    console, out = terminal()
    view = LiveView(TraceTree(), console)
    common: dict[str, Any] = {"ts": 1.0, "run_id": "r", "parent_tool_use_id": None}
    view.tap(
        AgentStarted(
            seq=1, agent_id="a", name="main", parent_agent_id=None, depth=0, prompt="p", **common
        )
    )
    view.tap(TextDelta(seq=2, agent_id="a", text="hello ", **common))
    assert out.getvalue() == ""  # drawing is the view task's job, never the emitter's
    assert view.tree.agents["a"].text == "hello "


async def test_plain_lines_name_each_significant_event(workspace: Path) -> None:
    out = io.StringIO()
    tree = TraceTree()
    view = PlainView(tree, out)
    scenario = {
        "agents": {
            "main": {
                "turns": [
                    {
                        "text": "Asking.",
                        "tool_calls": [
                            {
                                "name": "agent",
                                "input": {
                                    "description": "shell work",
                                    "prompt": "x",
                                    "agent": "sh",
                                },
                            }
                        ],
                    },
                    {"text": "Over."},
                ]
            },
            "sh": {
                "tools": ["bash"],
                "turns": [
                    {"tool_calls": [{"name": "bash", "input": {"command": "echo hi"}}]},
                    {"text": "shell done"},
                ],
            },
        }
    }
    async with (
        open_runtime(
            scenario=scenario,
            workspace=workspace,
            trace=False,
            permission_mode="deny",
            on_event=view.tap,
        ) as rt,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(view.run)
        await rt.run("go")
        nursery.cancel_scope.cancel()
    view.finish(trace_path=Path("t.jsonl"))
    lines = out.getvalue().splitlines()
    assert lines[0] == "[main] agent started"
    assert "Asking." in lines
    assert any(line.startswith("[main] tool started: agent: sh: shell work (tu-") for line in lines)
    assert (
        "[main \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} sh] agent started: shell work"
        in lines
    )
    assert any(
        line.startswith(
            "[main \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} sh] tool denied: bash"
        )
        for line in lines
    )
    assert "Over." in lines
    assert lines[-3] == lines[-3]  # summary, then the trace lines
    assert lines[-2:] == ["Trace: t.jsonl", "Inspect it: trio-agents trace show t.jsonl"]
    assert lines[-3].startswith("run completed in ")
