"""The views: the live tree (coalesced redraws, fitted to the screen, NO_COLOR) and plain lines.

The live view draws on a rich console writing to memory (a terminal as far as rich knows); runs
are real scripted runs, in real time where the cost of drawing is what is measured. The frame
clock is checked in virtual time (many events between two ticks make one frame showing the
latest state; a tick with nothing new draws nothing; the end shows the last state), the screen
read back with a small terminal emulator (tests/screen.py). What a frame's lines look like, cell
for cell against rich, is tests/test_frame.py's.
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
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import Limits, open_runtime
from runtime.cli._live import MAX_FPS, ROOT_TEXT_LINES, LiveView, PlainView, _tail_lines
from runtime.cli._options import UsageError
from runtime.trace._render import SPINNER_FRAMES
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


# -- the frame clock ----------------------------------------------------------------------------


class Run:
    """Events of a hand-made run: a main agent and sub-agents under one ``agent`` call each."""

    def __init__(self) -> None:
        self.seq = 0
        self.ts = time.time()

    def _common(self, agent_id: str | None, ptu: str | None) -> dict[str, Any]:
        self.seq += 1
        return {
            "seq": self.seq,
            "ts": self.ts,
            "run_id": "r",
            "agent_id": agent_id,
            "parent_tool_use_id": ptu,
        }

    def start(self) -> list[Any]:
        from runtime import AgentStarted, RunStarted

        return [
            RunStarted(version="0", config={}, **self._common(None, None)),
            AgentStarted(
                name="main", parent_agent_id=None, depth=0, prompt="go", **self._common("a0", None)
            ),
        ]

    def sub(self, n: int) -> list[Any]:
        from runtime import AgentStarted, ToolStarted

        call = ToolStarted(
            tool_use_id=f"tu-{n}",
            name="agent",
            input={"description": f"part {n}", "prompt": "go"},
            summary=f"agent: part {n}",
            **self._common("a0", None),
        )
        agent = AgentStarted(
            name="worker",
            parent_agent_id="a0",
            depth=1,
            prompt="go",
            **self._common(f"a{n}", f"tu-{n}"),
        )
        return [call, agent]

    def delta(self, n: int, text: str) -> Any:
        from runtime import TextDelta

        return TextDelta(text=text, **self._common(f"a{n}", None if n == 0 else f"tu-{n}"))

    def finish_sub(self, n: int) -> list[Any]:
        from runtime import AgentFinished, ToolFinished

        return [
            AgentFinished(
                status="completed",
                result=f"done {n}",
                error=None,
                turns=1,
                input_tokens=1,
                output_tokens=1,
                duration_s=0.1,
                **self._common(f"a{n}", f"tu-{n}"),
            ),
            ToolFinished(
                tool_use_id=f"tu-{n}",
                name="agent",
                status="ok",
                output=f"done {n}",
                duration_s=0.1,
                **self._common("a0", None),
            ),
        ]

    def end(self) -> list[Any]:
        from runtime import AgentFinished, RunFinished, TurnFinished

        return [
            TurnFinished(
                turn=1, stop_reason="end_turn", input_tokens=1, output_tokens=1,
                **self._common("a0", None),
            ),
            AgentFinished(
                status="completed",
                result="All parts are done.",
                error=None,
                turns=1,
                input_tokens=1,
                output_tokens=1,
                duration_s=0.1,
                **self._common("a0", None),
            ),
            RunFinished(status="completed", duration_s=0.2, **self._common(None, None)),
        ]


def screen_of(out: io.StringIO) -> list[str]:
    from tests.screen import Screen

    screen = Screen()
    screen.feed(out.getvalue())
    return screen.lines()


async def test_many_events_between_two_frames_make_one_redraw_showing_the_latest(
    autojump_clock: trio.testing.MockClock,
) -> None:
    console, out = terminal(width=120, height=30)
    view = LiveView(TraceTree(), console, fps=10)
    run = Run()
    for event in [*run.start(), *run.sub(1), *run.sub(2)]:
        view.tap(event)
    async with trio.open_nursery() as nursery:
        await nursery.start(view.run)
        await trio.testing.wait_all_tasks_blocked()
        assert view.frames == 1
        first = screen_of(out)
        # 3,000 events with no checkpoint between them, as a busy run delivers them.
        for i in range(1000):
            view.tap(run.delta(1, f"one{i} "))
            view.tap(run.delta(2, f"two{i} "))
            view.tap(run.delta(0, f"root{i}\n"))
        await trio.sleep(0.15)  # one tick of the 10 fps clock
        assert view.frames == 2
        latest = screen_of(out)
        nursery.cancel_scope.cancel()
    assert not any("one999" in line for line in first)
    assert any("worker a1" in line and "one999" in line for line in latest)
    assert any("worker a2" in line and "two999" in line for line in latest)
    assert latest[-8:] == [f"root{i}" for i in range(992, 1000)]  # the root's last lines
    assert len(latest) <= 30


async def test_a_tick_with_nothing_new_draws_nothing(autojump_clock: trio.testing.MockClock) -> None:
    console, _ = terminal()
    view = LiveView(TraceTree(), console, fps=10)
    run = Run()
    for event in [*run.start(), *run.sub(1), *run.finish_sub(1), *run.end()]:
        view.tap(event)  # the run is over: no clock runs on screen
    async with trio.open_nursery() as nursery:
        await nursery.start(view.run)
        await trio.sleep(0.35)
        frames = view.frames
        await trio.sleep(5)
        assert view.frames == frames == 1
        view.tap(run.delta(1, "late"))  # a change: the next tick draws it
        await trio.sleep(0.15)
        assert view.frames == 2
        nursery.cancel_scope.cancel()


async def test_the_last_state_is_on_screen_at_the_end_even_without_a_frame_after_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    console, out = terminal(width=120, height=30)
    view = LiveView(TraceTree(), console, fps=1)
    run = Run()
    async with trio.open_nursery() as nursery:
        for event in [*run.start(), *[e for n in range(1, 41) for e in run.sub(n)]]:
            view.tap(event)
        await nursery.start(view.run)
        await trio.testing.wait_all_tasks_blocked()
        spinning = [line for line in screen_of(out) if any(m in line for m in SPINNER_FRAMES)]
        assert spinning  # running nodes, drawn live
        for n in range(1, 41):  # everything ends before the next frame
            for event in run.finish_sub(n):
                view.tap(event)
        view.tap(run.delta(0, "All parts "))
        view.tap(run.delta(0, "are done."))
        for event in run.end():
            view.tap(event)
        frames = view.frames
        nursery.cancel_scope.cancel()
    assert view.frames == frames
    view.finish(trace_path=None)
    screen = screen_of(out)
    assert screen[0].startswith("✓ run r  completed")
    assert sum("✓ worker" in line for line in screen) == 40  # the whole tree, every node done
    assert "All parts are done." in screen  # the answer, streamed after the last frame
    assert screen[-1].startswith("completed in ")
    assert not any(mark in line for line in screen for mark in SPINNER_FRAMES)


def test_a_frame_fits_the_terminal_and_says_how_many_lines_are_left_out() -> None:
    console, _ = terminal(width=100, height=20)
    view = LiveView(TraceTree(), console)
    run = Run()
    for event in [*run.start(), *[e for n in range(1, 31) for e in run.sub(n)]]:
        view.tap(event)
    for n in range(1, 11):
        for event in run.finish_sub(n):
            view.tap(event)
    lines = [text for text, _ in view.frame_lines(100, 20)]
    assert len(lines) == 19
    # Running: main, 20 calls and their 20 agents, under the header: 42 lines, 18 shown.
    assert re.sub(r"\x1b\[[0-9;]*m", "", lines[-1]) == "… 24 more below (the whole tree is printed at the end)"


def test_the_frame_rate_is_checked() -> None:
    console, _ = terminal()
    with pytest.raises(ValueError, match="fps"):
        LiveView(TraceTree(), console, fps=0)
    from runtime.project import SETTINGS

    assert SETTINGS["view.fps"].default == MAX_FPS


async def test_a_lower_frame_rate_draws_fewer_frames(workspace: Path) -> None:
    console, _ = terminal()
    tree = TraceTree()
    view = LiveView(tree, console, fps=4)
    async with (
        open_runtime(
            scenario=fanout(20, words=10, chunk_delay=0.01),
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
        await rt.run("go")
        wall = time.perf_counter() - t0
        nursery.cancel_scope.cancel()
    assert view.frames <= wall * 4 + 2, (view.frames, wall)


# -- the root's text: a bounded tail, the same lines -------------------------------------------


def _tail_lines_before(text: str, width: int, count: int) -> list[str]:
    """The straightforward version (every line of the text wrapped, the last ones kept)."""
    lines: list[str] = []
    for raw in text.splitlines() or [""]:
        raw = raw.expandtabs()
        while len(raw) > width:
            lines.append(raw[:width])
            raw = raw[width:]
        lines.append(raw)
    return lines[-count:]


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(st.sampled_from("ab \t\n\r"), max_size=300),
    width=st.integers(1, 30),
    count=st.integers(1, 10),
)
def test_the_tail_lines_are_those_of_the_whole_text(text: str, width: int, count: int) -> None:
    assert _tail_lines(text, width, count) == _tail_lines_before(text, width, count)


@settings(max_examples=200, deadline=None)
@given(
    chunks=st.lists(
        st.one_of(
            st.text(st.sampled_from("ab \n"), max_size=20),
            st.builds(lambda n: "x" * n + "\n", st.integers(0, 3000)),
        ),
        max_size=60,
    ),
    frames=st.sets(st.integers(0, 60)),
    width=st.integers(20, 200),
)
def test_the_root_text_a_frame_shows_is_the_end_of_the_whole_turn(
    chunks: list[str], frames: set[int], width: int
) -> None:
    from runtime.cli import _live

    text = _live._RootText()
    for i, chunk in enumerate(chunks):
        text.delta(chunk)
        if i in frames:  # a frame reads the tail now and then: it joins only what is new
            text.tail()
        whole = "".join(chunks[: i + 1])
        tail = text.tail()
        # Bounded, and exactly what the whole text gives: its last characters, from a line's
        # start when cut.
        assert len(tail) <= _live.ROOT_TEXT_KEEP
        assert tail == _live._from_a_line(
            whole[-_live.ROOT_TEXT_KEEP :], cut=len(whole) > _live.ROOT_TEXT_KEEP
        )
        assert whole.endswith(tail)
        shown = _tail_lines(tail.rstrip(), width, ROOT_TEXT_LINES) if tail.rstrip() else []
        before = _tail_lines(whole.rstrip(), width, ROOT_TEXT_LINES) if whole.rstrip() else []
        assert shown == before  # lines of at most 3,000 characters: the same lines on screen
    assert text.turn_done() == "".join(chunks).strip()
    assert text.tail() == ""


def test_the_frame_rate_comes_from_the_flag_over_the_settings_file(tmp_path: Path) -> None:
    from runtime.cli._main import build_parser
    from runtime.cli._project import apply_project

    (tmp_path / ".trio-agents").mkdir()
    (tmp_path / ".trio-agents" / "settings.toml").write_text("[view]\nfps = 4\n")
    parser = build_parser()

    def fps(*flags: str) -> float | None:
        ns = parser.parse_args(["run", "--workspace", str(tmp_path), *flags, "go"])
        return apply_project(ns).view.fps

    assert fps() == pytest.approx(4)
    assert fps("--fps", "2.5") == pytest.approx(2.5)
    for bad in ("0", "61", "fast"):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(["run", "--fps", bad, "go"])
        assert exc.value.code == 2
    (tmp_path / ".trio-agents" / "settings.toml").write_text("[view]\nfps = 0\n")
    with pytest.raises(UsageError, match=r"view\.fps"):
        fps()


def test_at_80_columns_the_header_is_one_line_that_fits_with_its_counts() -> None:
    """A run id as the runtime makes them and two-digit counts: the header is wider than 80
    columns; live, it stays one line (the run id gives way first), as the node lines do."""
    import attrs

    from runtime.cli._frame import cells

    console, _ = terminal(width=80, height=30)
    view = LiveView(TraceTree(), console)
    run = Run()
    run.ts -= 700  # running for minutes: "11m40s"
    events = [*run.start(), *[e for n in range(1, 101) for e in run.sub(n)]]
    for event in events:
        event = attrs.evolve(event, run_id="20261201-195509-cad81e")
        view.tap(event)
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", text) for text, _ in view.frame_lines(80, 30)]
    header = lines[0]
    assert cells(header) <= 80
    assert " main a0 " in lines[1]  # the header did not wrap onto a second line
    assert "101 agents, 100 tool calls, tokens 0→0" in header
    assert "…" in header  # the id shortened, not the counts
