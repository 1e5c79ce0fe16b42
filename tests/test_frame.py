"""What the live view writes: tree lines as escapes, cell for cell what rich would draw, and a
region redrawn in place that leaves on screen exactly what a full redraw would."""

from __future__ import annotations

import io
import random
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from runtime.cli import _frame
from runtime.cli._frame import AnsiLines, LiveRegion
from runtime.trace import _render
from runtime.trace._render import StyledLine, styled_tree_lines, tree_lines
from tests.screen import Screen, styled_cells
from tests.trace_factory import agent_specs, run_events, to_events, wide_deep

CONSOLES: dict[str, dict[str, Any]] = {
    "truecolor": {"color_system": "truecolor"},
    "standard": {"color_system": "standard"},
    "no_color": {"color_system": "truecolor", "no_color": True},
    "no colours at all": {"color_system": None},
}
STYLES = ["", "bold", "dim", "green", "bold red", "dim italic", "blue", "bold cyan", "yellow"]
# ASCII, a guide, marks, an accented letter, a wide character (two cells), the ellipsis.
ALPHABET = "ab z0│├└─✓⠋→é⛔…"


def console_for(kind: str, width: int) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    console = Console(
        file=out, width=width, height=40, force_terminal=True, highlight=False, **CONSOLES[kind]
    )
    return console, out


def rich_cells(console: Console, out: io.StringIO, line: StyledLine) -> list[list[Any]]:
    """The line as rich prints it in a tree (a Group of lines), row by row."""
    from rich.console import Group

    out.seek(0)
    out.truncate()
    console.print(Group(line.to_text()))
    return [styled_cells(row) for row in out.getvalue().split("\n")[:-1]]


@st.composite
def styled_lines(draw: st.DrawFn) -> StyledLine:
    line = StyledLine(draw(st.text(ALPHABET, max_size=12)), draw(st.sampled_from(["", "dim"])))
    for _ in range(draw(st.integers(0, 8))):
        line.append(draw(st.text(ALPHABET, max_size=30)), draw(st.sampled_from(STYLES)))
    if len(line) and draw(st.booleans()):  # a description that gives way first
        start = draw(st.integers(0, len(line)))
        end = draw(st.integers(start, len(line)))
        line.desc = (start, end)
        line.essential = draw(st.one_of(st.none(), st.integers(end, len(line))))
    return line


@settings(max_examples=300, deadline=None)
@given(
    line=styled_lines(),
    width=st.integers(8, 90),
    kind=st.sampled_from(sorted(CONSOLES)),
)
def test_a_styled_line_is_drawn_cell_for_cell_as_rich_draws_it(
    line: StyledLine, width: int, kind: str
) -> None:
    console, out = console_for(kind, width)
    [(text, size)] = AnsiLines(console).line(line, width)
    [expected] = rich_cells(console, out, line)
    assert styled_cells(text) == expected
    assert size == len(expected) <= width


@settings(max_examples=60, deadline=None)
@given(
    spec=agent_specs(max_depth=2, max_fanout=3),
    seed=st.integers(0, 2**32 - 1),
    cut=st.floats(0.0, 1.0),
    width=st.integers(20, 140),
    kind=st.sampled_from(sorted(CONSOLES)),
    running=st.booleans(),
)
def test_a_tree_mid_run_is_drawn_line_for_line_as_trace_show_draws_it(
    spec: Any, seed: int, cut: float, width: int, kind: str, running: bool
) -> None:
    from rich.console import Group

    from runtime.trace._tree import TraceTree

    events = to_events(run_events(spec, order="random", rng=random.Random(seed)))
    tree = TraceTree.from_events(events[: int(len(events) * cut)], live=True)
    now = tree.last_ts + 1.5 if tree.last_ts > 0 else 0.0
    status = "running" if running else None
    console, out = console_for(kind, width)
    ansi = AnsiLines(console)
    ours = [
        styled_cells(text)
        for line in styled_tree_lines(tree, now=now, status=status)
        for text, _ in ansi.line(line, width)
    ]
    out.seek(0)
    out.truncate()
    console.print(Group(*tree_lines(tree, now=now, status=status)))
    assert ours == [styled_cells(row) for row in out.getvalue().split("\n")[:-1]]


def test_a_header_too_wide_wraps_as_in_trace_show() -> None:
    from runtime.trace._tree import TraceTree

    tree = TraceTree.from_events(to_events(run_events(wide_deep([3, 2]))))
    console, out = console_for("truecolor", 30)
    [header] = list(styled_tree_lines(tree))[:1]
    drawn = AnsiLines(console).line(header, 30)
    assert len(drawn) > 1
    assert [styled_cells(text) for text, _ in drawn] == rich_cells(console, out, header)


def test_control_characters_in_a_label_never_reach_the_terminal() -> None:
    console, _ = console_for("truecolor", 80)
    line = StyledLine("├── ", "dim")
    line.append("bash: printf '\x1b[2J\x07boom\r\n'", "bold")
    [(text, _)] = AnsiLines(console).line(line, 80)
    plain = "".join(char for char, _ in styled_cells(text))
    # Shown, not obeyed: the one sanitiser (runtime/core/_termtext.py) makes each visible.
    assert plain == "├── bash: printf '^[[2J^Gboom^M^J'"


def test_the_description_gives_way_as_in_fit_text() -> None:
    assert _frame._MIN_DESC == _render._MIN_DESC


# -- the region --------------------------------------------------------------------------------


class Model:
    """The straightforward region: everything printed, then the frame (when shown)."""

    def __init__(self) -> None:
        self.printed: list[str] = []
        self.frame: list[str] = []
        self.shown = False

    def screen(self) -> list[str]:
        lines = self.printed + (self.frame if self.shown else [])
        while lines and not lines[-1]:
            lines = lines[:-1]
        return lines


operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("draw"),
            st.lists(st.sampled_from(["", "a", "bb", "ccc dd", "a tree line", "x" * 30]), max_size=9),
        ),
        st.tuples(st.just("print"), st.sampled_from(["said", "more words", ""])),
        st.tuples(st.just("stdout"), st.sampled_from(["from print()", "x"])),
        st.tuples(st.just("hide"), st.none()),
        st.tuples(st.just("show"), st.none()),
    ),
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(ops=operations)
def test_the_region_leaves_what_a_full_redraw_would(ops: list[tuple[str, Any]]) -> None:
    console, out = console_for("truecolor", 60)
    region = LiveRegion(console)
    model = Model()
    screen = Screen()
    try:
        for op, arg in ops:
            if op == "draw":
                region.draw([(text, len(text)) for text in arg], 60)
                if model.shown:
                    model.frame = list(arg)
            elif op == "print":
                console.print(arg)
                model.printed.append(arg)
            elif op == "stdout":
                print(arg)  # redirected above the region while it is shown
                if model.shown:
                    model.printed.append(arg)
            elif op == "hide":
                region.hide()
                model.shown = False
                model.frame = []
            else:
                region.show()
                if not model.shown:
                    model.frame = []
                model.shown = True
            screen.feed(out.getvalue())
            out.seek(0)
            out.truncate()
            assert screen.lines() == model.screen(), (op, arg)
            assert screen.cursor_visible == (not model.shown)
    finally:
        region.hide()
    assert type(sys.stdout).__name__ != "FileProxy"  # given back


def test_an_unchanged_frame_writes_nothing_but_the_cursor_moves() -> None:
    console, out = console_for("truecolor", 40)
    region = LiveRegion(console)
    region.show()
    lines = [(f"line {i}", 6) for i in range(10)]
    region.draw(lines, 40)
    first = len(out.getvalue())
    region.draw(lines, 40)
    again = len(out.getvalue()) - first
    region.draw([*lines[:9], ("line X", 6)], 40)
    one_changed = len(out.getvalue()) - first - again
    region.hide()
    assert again < 30  # back to the top, nine line feeds
    assert one_changed < again + 20
    assert first > 10 * 6


@pytest.mark.parametrize("kind", sorted(CONSOLES))
def test_other_renderables_come_out_as_rich_draws_them(kind: str) -> None:
    from rich.console import Group
    from rich.text import Text

    console, out = console_for(kind, 30)
    text = Text("queued ", style="yellow")
    text.append("\N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} a message that is longer than the line", style="dim")
    text.no_wrap = True
    text.overflow = "ellipsis"
    [(drawn, size)] = AnsiLines(console).renderable(text, 30)
    console.print(Group(text))
    assert styled_cells(drawn) == styled_cells(out.getvalue().split("\n")[0])
    assert size == 30
