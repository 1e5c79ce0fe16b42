"""Drawing the tree: marks, colours, filters, the timeline, Mermaid, plain event lines."""

from __future__ import annotations

import re
from typing import Any

import pytest
from rich.console import Console
from trace_factory import AgentSpec, ToolSpec, agent_call, run_events, small_run, to_events

from runtime.trace._render import (
    SPINNER_FRAMES,
    event_line,
    first_line,
    fmt_duration,
    fmt_tokens,
    render_header,
    render_mermaid,
    render_timeline,
    render_tree,
    tree_lines,
)
from runtime.trace._tree import TraceTree

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def draw(renderable: Any, *, color: bool = False, width: int = 200) -> str:
    console = Console(
        width=width, record=True, force_terminal=color, color_system="truecolor" if color else None
    )
    console.print(renderable)
    return console.export_text(styles=color) if color else console.export_text()


def tree_of(dicts: list[dict[str, Any]], *, live: bool = False) -> TraceTree:
    return TraceTree.from_events(to_events(dicts), live=live)


def test_every_status_has_its_mark_and_cancels_say_who_and_why() -> None:
    text = draw(render_tree(tree_of(list(run_events(small_run())))))
    assert "✓ main agent_1" in text
    assert "✗ flaky agent_1.3 failed" in text
    assert "flaky ended failed" in text  # the error's first line
    assert "⊘ sleeper agent_1.2 cancelled" in text
    assert "cancelled by user: taking too long" in text
    assert "⛔ write: ls -la src/toolu_1.4 denied" in text
    assert "(waited 500ms)" in text
    assert "tokens 300→60 (Σ 800→160)" in text
    assert "run run_0001" in text


def test_interrupted_and_running_nodes() -> None:
    dicts = list(run_events(small_run()))
    cut = dicts[: len(dicts) // 2]
    live = tree_of(cut, live=True)
    now = live.last_ts + 10
    text = draw(render_tree(live, now=now))
    assert any(frame in text for frame in SPINNER_FRAMES)
    assert "●" not in text
    assert "●" in draw(render_tree(live, now=now, spinner=False))
    live.end()
    assert "⚠" in draw(render_tree(live))
    assert "interrupted" in draw(render_tree(live))


def test_a_running_tool_shows_its_latest_progress() -> None:
    dicts = list(run_events(small_run()))
    started = next(d for d in dicts if d["type"] == "tool_started")
    base = {k: started[k] for k in ("run_id", "agent_id", "parent_tool_use_id", "tool_use_id")}
    upto = dicts[: dicts.index(started) + 1]
    for i, (progress, total, message) in enumerate([(1, 10, "first"), (3, 10, "copying files")]):
        upto.append(
            {
                **base,
                "type": "tool_progress",
                "seq": 10_000 + i,
                "ts": started["ts"] + 0.1 * (i + 1),
                "progress": progress,
                "total": total,
                "message": message,
            }
        )
    upto.append(
        {
            **base,
            "type": "tool_progress",
            "seq": 10_002,
            "ts": started["ts"] + 0.3,
            "progress": 7,
            "total": None,
            "message": None,
        }
    )
    text = draw(render_tree(tree_of(upto[:-1], live=True)))
    assert "3/10 copying files" in text
    assert "first" not in text
    assert "  7" in draw(render_tree(tree_of(upto, live=True)))


def test_max_depth_says_what_it_left_out() -> None:
    spec = AgentSpec(
        turns=[
            [agent_call(AgentSpec(name="kid", turns=[[agent_call(AgentSpec(name="grandkid"))]]))]
        ]
    )
    tree = tree_of(list(run_events(spec)))
    text = draw(render_tree(tree, max_depth=1))
    assert "kid agent_1.1" in text
    assert "grandkid agent_" not in text
    assert "… 1 sub-agent below --max-depth" in text
    assert "grandkid agent_" in draw(render_tree(tree))


def test_status_filter_and_subtree() -> None:
    tree = tree_of(list(run_events(small_run())))
    text = draw(render_tree(tree, status="failed"))
    assert "flaky" in text
    assert "sleeper" not in text
    assert "no node with status 'running'" in draw(render_tree(tree, status="running"))
    sub = draw(render_tree(tree, subtree="toolu_1.2", title=False))
    assert sub.splitlines()[0].startswith("⊘ agent: sleeper part toolu_1.2")
    assert "worker" not in sub


def test_colour_can_be_turned_off() -> None:
    tree = tree_of(list(run_events(small_run())))
    coloured = draw(render_tree(tree), color=True)
    assert ANSI.search(coloured)
    plain = draw(render_tree(tree, color=False), color=True)
    assert not ANSI.search(plain)
    assert "✓ main" in plain


def test_header_and_timeline() -> None:
    tree = tree_of(list(run_events(small_run())))
    assert "4 agents, 7 tool calls" in draw(render_header(tree))
    timeline = draw(render_timeline(tree, width=40))
    rows = [line for line in timeline.splitlines() if "|" in line][1:]
    assert [row.split("|")[0].strip() for row in rows] == ["main", "worker", "sleeper", "flaky"]
    main_bar = rows[0].split("|")[1]
    assert main_bar.count("█") == 40  # the root spans the whole run
    assert "cancelled" in rows[2]
    live = tree_of(list(run_events(small_run()))[:30], live=True)
    assert "▶" in draw(render_timeline(live, width=40))


def test_mermaid_escapes_labels_and_links_every_node() -> None:
    spec = AgentSpec(name='evil"name#1<b>', turns=[[ToolSpec()]])
    tree = tree_of(list(run_events(spec)))
    text = render_mermaid([tree])
    assert text.startswith("flowchart TD\n")
    assert "evil#quot;name#35;1#lt;b#gt;" in text
    assert '"evil"' not in text
    nodes = re.findall(r"^    (n\d+)[\[(]", text, re.M)
    edges = re.findall(r"^    (n\d+) --> (n\d+)$", text, re.M)
    assert len(nodes) == 2
    assert edges == [(nodes[0], nodes[1])]


def test_mermaid_subgraphs_lay_out_top_to_bottom() -> None:
    """Issue 21, item 22: a subgraph ignores the chart's TD unless it has a direction."""
    trees = [tree_of(list(run_events(small_run()))), tree_of(list(run_events(small_run())))]
    lines = render_mermaid(trees).splitlines()
    opened = [i for i, line in enumerate(lines) if line.lstrip().startswith("subgraph ")]
    assert len(opened) == 2
    for i in opened:
        assert lines[i + 1] == "    direction TB"


def test_event_lines_for_plain_output() -> None:
    dicts = list(run_events(small_run()))
    tree = TraceTree()
    lines = []
    for d in dicts:
        tree.apply_dict(d)
        line = event_line(tree, d)
        if line is not None:
            lines.append(line)
    text = "\n".join(lines)
    assert re.search(r"^\d\d:\d\d:\d\d\.\d{3} run run_0001 started$", text, re.M)
    assert "▶ main agent_1 started" in text
    assert "  → worker agent_1.1: bash: ls -la src/toolu_1.1.1 toolu_1.1.1" in text
    assert "⊘ cancel toolu_1.2 requested by user: taking too long" in text
    assert "✗ flaky agent_1.3 failed in 100ms" in text
    assert "? main agent_1 asks permission" in text
    assert "run run_0001 completed in 3.0s" in text
    assert not any("text_delta" in line for line in lines)
    assert len(lines) < len(dicts)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "?"),
        (0.0004, "0ms"),
        (0.25, "250ms"),
        (1.24, "1.2s"),
        (125, "2m05s"),
        (3725, "1h02m"),
    ],
)
def test_fmt_duration(seconds: float | None, text: str) -> None:
    assert fmt_duration(seconds) == text


def test_fmt_tokens_and_first_line() -> None:
    assert [fmt_tokens(n) for n in (950, 12_300, 4_100_000)] == ["950", "12.3k", "4.1M"]
    assert first_line("\n\n  hello \nworld") == "hello"
    assert first_line("x" * 100, 10) == "x" * 9 + "…"
    assert first_line(None) == ""


def test_a_long_tool_line_keeps_its_status_and_duration_at_80_columns() -> None:
    """Issue 21, item 14: the description gives way, not the status and the duration."""
    import io

    from rich.console import Console

    from runtime import AgentFinished, AgentStarted, ToolFinished, ToolStarted

    command = "python3 -m unittest discover -s tests -p 'test_*.py' " + "-v " * 30
    common = {"run_id": "r", "agent_id": "a1", "parent_tool_use_id": None}
    events = [
        AgentStarted(seq=1, ts=0.0, name="main", parent_agent_id=None, depth=0, prompt="p",
                     **common),
        ToolStarted(seq=2, ts=0.0, tool_use_id="t1", name="bash", input={"command": command},
                    summary=f"bash: {command}", **common),
        ToolFinished(seq=3, ts=2.5, tool_use_id="t1", name="bash", status="error",
                     output="exit code 1", duration_s=2.5, **common),
        AgentFinished(seq=4, ts=3.0, status="completed", result="ok", error=None, turns=1,
                      input_tokens=1, output_tokens=1, duration_s=3.0, **common),
    ]
    tree = TraceTree.from_events(events)
    out = io.StringIO()
    console = Console(file=out, width=80, color_system=None, legacy_windows=False)
    console.print(render_tree(tree, color=False))
    [line] = [x for x in out.getvalue().splitlines() if "bash:" in x]
    assert len(line) <= 80
    assert "… error  2.5s" in line


def test_turns_do_not_run_together_and_markdown_is_plain_in_tree_lines() -> None:
    """Issue 21, item 11: no ``first.A small``, no ``**shop**`` in a tree line."""
    from runtime import AgentFinished, AgentStarted, TextDelta, TurnFinished

    common = {"run_id": "r", "agent_id": "a1", "parent_tool_use_id": None}
    turn = {"input_tokens": 1, "output_tokens": 1, "stop_reason": "tool_use"}
    events = [
        AgentStarted(seq=1, ts=0.0, name="main", parent_agent_id=None, depth=0, prompt="p",
                     **common),
        TextDelta(seq=2, ts=0.1, text="Looking first.", **common),
        TurnFinished(seq=3, ts=0.2, turn=1, **turn, **common),
        TextDelta(seq=4, ts=0.3, text="A small **shop** library", **common),
    ]
    tree = TraceTree.from_events(events, live=True)
    [line] = [t.plain for t in tree_lines(tree, color=False, title=False)]
    assert "first.A" not in line
    assert line.endswith("A small shop library")
    tree.apply(AgentFinished(seq=5, ts=1.0, status="completed", result="Review of **shop**",
                             error=None, turns=2, input_tokens=2, output_tokens=2,
                             duration_s=1.0, **common))
    [line] = [t.plain for t in tree_lines(tree, color=False, title=False)]
    assert line.endswith("Review of shop")
