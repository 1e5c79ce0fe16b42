"""What a command-line run shows: the live tree on a terminal, plain lines otherwise.

Both views are fed by a tap (:meth:`LiveView.tap`, :meth:`PlainView.tap`), called for every event
inside the emitting agent's task. A tap must never slow the agents, so it only updates the
:class:`~runtime.TraceTree` (O(1) per event) and notes what changed; the drawing happens in
the view's own task (:meth:`LiveView.run`).

:class:`LiveView` redraws on a frame clock, not per event: at most ``fps`` frames a second
(:data:`MAX_FPS` by default; ``--fps``), and fewer when a frame is expensive (the time between
frames is at least :data:`RENDER_SHARE`⁻¹ times the cost of the last one), so drawing takes a
bounded share of the one trio thread however many agents run — 100 parallel sub-agents streaming
text cost the same frames as one. Between frames the tap only marks the view dirty; a tick with
nothing new (and no running clock on screen) draws nothing. A frame is at most the terminal's
height: the tree (its running part when the whole does not fit, then a ``… N more`` line), then
the last lines of the root agent's current turn streaming below it. It is written by
:mod:`runtime.cli._frame` (escape codes straight from the tree's styled lines, only the lines
that changed), a small fraction of what rich takes for the same lines. A root turn that ends with
tool calls is printed above the live region for good; the final turn stays at the bottom and is
printed after the final tree when the run ends, so the last state is always on screen.

:class:`PlainView` (stdout not a terminal) prints one line per significant event — an agent
started or finished, a tool call started or finished, a permission asked or answered, a cancel —
and the root agent's text once each turn completes. Lines are queued by the tap and written by
the view's task, so a slow pipe reader delays the lines, not the agents (up to a bound, past
which the tap writes itself: backpressure rather than unbounded memory).

``chat`` uses one view for a whole session, one turn at a time: the view starts *held* (no live
region while the prompt waits), :attr:`LiveView.focus` draws only the current turn's root agent,
:attr:`LiveView.footer` adds the chat line under it, :meth:`LiveView.poke` redraws soon after a
key, and :meth:`LiveView.finish_turn` prints what stays of a turn. A message given to a root agent
while it works (``user_message``) is printed above the region, after an angle quote, when it
arrives.
"""

from __future__ import annotations

import contextlib
import shlex
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Final, TextIO

import trio

from runtime.core import (
    AgentFinished,
    AgentStarted,
    CancelRequested,
    ContextCompacted,
    Event,
    PermissionRequested,
    PermissionResolved,
    ProviderRetry,
    ReplayDiverged,
    RunFinished,
    TextDelta,
    TodoUpdated,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    UserMessage,
    visible,
)

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from runtime.trace import AgentNode, StyledLine, TraceTree

    from ._frame import Line

MAX_FPS = 12.0
"""The most frames a second the live view draws by default (spinners and clocks look smooth at
10-12); ``--fps`` (setting ``view.fps``) changes it."""
RENDER_SHARE = 0.05
"""The largest share of the trio thread's time the live view may spend drawing."""
ROOT_TEXT_LINES = 8
"""How many lines of the root's streaming text the live region shows."""
ROOT_TEXT_KEEP = 16384
"""How many trailing characters of the root's streaming turn a frame looks at (the text itself
is kept whole: it is the answer)."""
MORE_NOTE = "more below (the whole tree is printed at the end)"


def _path(tree: TraceTree, agent_id: str | None) -> str:
    from ._picker import agent_path

    return agent_path(tree, agent_id)


def _tokens(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


def _compaction_note(tree: TraceTree, event: ContextCompacted) -> str:
    """The one line both views print when an agent compacts its context."""
    from runtime.trace import COMPACTED_MARK, compaction_line

    fields = {a: getattr(event, a) for a in _COMPACTION_FIELDS}
    return f"{COMPACTED_MARK} [{_path(tree, event.agent_id)}] {compaction_line(fields)}"


_COMPACTION_FIELDS = (
    "method",
    "tokens_before",
    "tokens_after",
    "messages_before",
    "messages_after",
    "input_tokens",
    "output_tokens",
)


def _todo_note(event: TodoUpdated) -> str:
    """A plain line's words for an agent's new todo list (docs/tools.md, "todo_write")."""
    todos = event.todos
    done = sum(1 for t in todos if t.get("status") == "completed")
    doing = next((t.get("activeForm") for t in todos if t.get("status") == "in_progress"), None)
    return f"todo list: {done}/{len(todos)} done" + (f", now: {doing}" if doing else "")


def trace_hint(trace_path: Path | None) -> list[str]:
    """The closing lines naming the trace and the command that shows it."""
    if trace_path is None:
        return []
    from ._exit import command_name

    return [f"Trace: {trace_path}", f"Inspect it: {command_name()} trace show {trace_path}"]


class _RootText:
    """The root agents' text, turn by turn: what is streaming now, and what is complete.

    A delta is appended (O(1)); the frame's tail (:meth:`tail`) joins only what came since the
    last frame, and keeps at most :data:`ROOT_TEXT_KEEP` characters.
    """

    def __init__(self) -> None:
        self.current: list[str] = []
        self.last_turn = ""  # the latest completed turn not printed yet
        self._tail = ""
        self._joined = 0  # pieces of current already in _tail
        self._length = 0  # characters of current already in _tail

    def delta(self, text: str) -> None:
        self.current.append(text)

    def turn_done(self) -> str:
        text = "".join(self.current).strip()
        self.current.clear()
        self._tail = ""
        self._joined = self._length = 0
        if text:
            self.last_turn = text
        return text

    def tail(self) -> str:
        """The streaming turn's text to show: its end, from the start of a line when the text
        is longer than :data:`ROOT_TEXT_KEEP` (the end of a longer line is shown as is)."""
        current = self.current
        if self._joined < len(current):
            new = "".join(current[self._joined :])
            self._joined = len(current)
            self._length += len(new)
            self._tail = (self._tail + new)[-ROOT_TEXT_KEEP:]
        return _from_a_line(self._tail, cut=self._length > ROOT_TEXT_KEEP)


def _from_a_line(tail: str, *, cut: bool) -> str:
    """*tail* without the piece of a line it starts with, when it was cut from a longer text
    and a line starts in its first half."""
    if cut:
        start = tail.find("\n", 0, len(tail) // 2)
        if start >= 0:
            return tail[start + 1 :]
    return tail


_NOTED: Final[frozenset[type[Event]]] = frozenset({ContextCompacted, ReplayDiverged})
"""Events of any agent that the live view prints above the tree."""


class LiveView:
    """The live tree on a terminal, redrawn by :meth:`run` on a frame clock.

    Args:
        tree: the run's tree; this view feeds it in :meth:`tap`.
        console: the terminal console (``NO_COLOR`` and ``TERM`` are honoured as rich does).
        held: start held (see :meth:`hold`): no live region until :meth:`release`.
        fps: the most frames a second (default :data:`MAX_FPS`).
        outcome: where the closing summary line and the trace's path go (the command line
            gives a stderr console: docs/cli.md, "What stderr and stdout carry"); default
            *console*.
    """

    def __init__(
        self,
        tree: TraceTree,
        console: Console,
        *,
        held: bool = False,
        fps: float | None = None,
        outcome: Console | None = None,
    ) -> None:
        from ._frame import AnsiLines, LiveRegion

        self.tree = tree
        self.console = console
        self.outcome = console if outcome is None else outcome
        self.fps = MAX_FPS if fps is None else fps
        if not self.fps > 0:
            raise ValueError(f"fps must be above 0, got {fps!r}")
        self._apply = tree.apply
        self._noted: frozenset[type[Event]] = _NOTED
        self._watchers: dict[type[Event], list[Callable[[Event], None]]] = {}
        self._text = _RootText()
        self._to_print: list[str] = []
        self._region = LiveRegion(console)
        self._ansi = AnsiLines(console)
        self._running = False
        self._paused = 1 if held else 0
        self._dirty = True
        self._poked: trio.Event | None = None
        self.focus: str | None = None
        """Draw only this node's subtree (the chat's current turn); None: every root."""
        self.footer: Callable[[int], Sequence[RenderableType]] | None = None
        """Lines drawn at the bottom of the region, given the width (the chat line)."""
        self.frames = 0
        """Frames drawn so far."""
        self.render_s = 0.0
        """Time spent drawing so far, in seconds (the view's whole cost to the trio thread)."""
        self.max_frame_s = 0.0
        """The most expensive frame so far, in seconds."""

    # -- in the agents' tasks: cheap --------------------------------------------------------

    def tap(self, event: Event) -> None:
        """Apply *event* to the tree and note what to draw (never draws; O(1)).

        Called for every event, inside the agent that emitted it: a sub-agent's delta (most
        events) costs the tree's update, a flag and two checks.
        """
        self._apply(event)
        self._dirty = True
        if event.parent_tool_use_id is None or event.__class__ in self._noted:
            self._note(event)

    def watch(self, kinds: Iterable[type[Event]], callback: Callable[[Event], None]) -> None:
        """Also give events of these kinds to *callback*, after the tree has them (the
        terminal's permission prompts): one tap for the session instead of two."""
        for kind in kinds:
            self._watchers.setdefault(kind, []).append(callback)
        self._noted = frozenset({*_NOTED, *self._watchers})

    def _note(self, event: Event) -> None:
        if event.parent_tool_use_id is None and event.agent_id is not None:
            if isinstance(event, TextDelta):
                self._text.delta(visible(event.text))  # each delta: a split sequence too
            elif isinstance(event, TurnFinished):
                text = self._text.turn_done()
                if text and event.stop_reason == "tool_use":
                    self._to_print.append(text)  # more turns follow: this text is history now
                    self._text.last_turn = ""  # printed: the end must not repeat it
            elif isinstance(event, UserMessage):
                self._to_print.append(
                    f"\N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} {event.text}"
                )  # the conversation, in its order
        if isinstance(event, ContextCompacted):
            self._to_print.append(_compaction_note(self.tree, event))
        if isinstance(event, ReplayDiverged):
            self._to_print.append(f"replay diverged: {event.node}: {event.detail}")
        for callback in self._watchers.get(event.__class__, ()):
            callback(event)

    # -- the drawing task -------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Draw the live region until cancelled: a frame per tick of the frame clock.

        Cancellation: the way to stop it; the live region is cleared (the final tree is printed
        by :meth:`finish`).
        """
        self._running = True
        if not self._paused:
            self._start_live()
        task_status.started()
        try:
            while True:
                cost = self._frame()
                poked = self._poked = trio.Event()
                spacing = cost / RENDER_SHARE
                await trio.sleep(spacing)
                if not poked.is_set():
                    with trio.move_on_after(max(0.0, 1.0 / self.fps - spacing)):
                        await poked.wait()
        finally:
            self._running = False
            self._stop_live()

    def _start_live(self) -> None:
        # Transient: a pause or the end clears the region, and what stays on screen is printed
        # on purpose.
        self._region.show()
        self._dirty = True

    def _stop_live(self) -> None:
        self._region.hide()

    def poke(self) -> None:
        """Redraw soon (a key was typed), still no faster than :data:`RENDER_SHARE` allows."""
        self._dirty = True
        if self._poked is not None:
            self._poked.set()

    def _frame(self) -> float:
        """Draw one frame if anything can have changed; return what it cost in seconds."""
        region = self._region
        if not region.shown or self._paused:
            return 0.0
        t0 = time.perf_counter()
        self._print_pending()
        # A running run shows clocks and spinners: until it ends, every tick changes the frame.
        if self._dirty or self.tree.run_status is None:
            self._dirty = False
            size = self.console.size
            region.draw(self.frame_lines(size.width, size.height), size.width)
            self.frames += 1
        cost = time.perf_counter() - t0
        self.render_s += cost
        self.max_frame_s = max(self.max_frame_s, cost)
        return cost

    def _print_pending(self) -> None:
        """Print the root's finished turns above the live region (or above a prompt)."""
        if self._to_print:
            for text in self._to_print:
                self.console.print(visible(text), markup=False, highlight=False)
            self._to_print.clear()

    def frame_lines(self, width: int, height: int) -> list[Line]:
        """The frame for a *width* x *height* terminal: the tree, then the root's streaming
        text, then the footer; at most ``height - 1`` lines (at least 6)."""
        ansi = self._ansi
        height = max(6, height - 1)
        streaming = self._text.tail().rstrip()
        text_lines = _tail_lines(streaming, width, ROOT_TEXT_LINES) if streaming else []
        footer: list[Line] = []
        if self.footer is not None:
            for renderable in self.footer(width):
                footer += ansi.renderable(renderable, width)
        below = len(text_lines) + (1 if text_lines else 0) + len(footer) + (1 if footer else 0)
        lines = self._tree_frame(width, max(3, height - below))
        if text_lines:
            lines.append(("", 0))
            lines += [ansi.text(line, width) for line in text_lines]
        if footer:
            lines.append(("", 0))
            lines += footer
        return lines[: max(height, 3)]

    def _tree_frame(self, width: int, max_lines: int) -> list[Line]:
        """The tree's lines, at most *max_lines*: when the whole tree does not fit, only the
        running nodes and the paths to them, and a last line says how many more there are."""
        from runtime.trace import styled_tree_lines

        ansi = self._ansi
        tree = self.tree
        subtree = self.focus
        if subtree is None:
            nodes = len(tree.agents) + len(tree.tools)
            ended = tree.ended
        else:
            node = tree.find(subtree)
            if node is None:  # started, but its first event has not come yet
                return [ansi.text("starting…", width, "dim")]
            nodes = sum(1 for _ in tree.iter_nodes([node]))
            ended = tree.ended or node.finished
        title = subtree is None
        status = None if nodes + title <= max_lines or ended else "running"
        chosen = tree.select(subtree=subtree, status=status)
        _, keep = chosen
        total = title + (nodes if keep is None else len(keep))
        styled = styled_tree_lines(
            tree, now=time.time(), subtree=subtree, status=status, title=title, roots=chosen
        )
        budget = max(1, max_lines - 1)  # keep a line for the note
        out: list[Line] = []
        for shown, line in enumerate(styled):
            if title and shown == 0:
                _fit_header(line, tree.run_id)
            if len(out) >= budget:
                more = max(1, total - shown)
                out.append(ansi.text(f"… {more} {MORE_NOTE}", width, "dim"))
                break
            out += ansi.line(line, width)
        return out

    def renderable(self) -> RenderableType:
        """The frame as a rich renderable, for the console's size (what :meth:`run` draws)."""
        from rich.text import Text

        size = self.console.size
        lines = self.frame_lines(size.width, size.height)
        return Text("\n").join(Text.from_ansi(text) for text, _ in lines)

    @contextmanager
    def paused(self) -> Generator[None, None, None]:
        """Clear the live region while the caller talks to the terminal; agents keep running.

        Nested pauses are fine; the view comes back when the outermost ends.
        """
        self.hold()
        try:
            yield
        finally:
            self.release()

    def hold(self) -> None:
        """Clear the live region until the matching :meth:`release` (holds nest)."""
        self._paused += 1
        if self._paused == 1:
            self._stop_live()
            self._print_pending()

    def release(self) -> None:
        """End one :meth:`hold`; the live region comes back when the last one ends."""
        self._paused -= 1
        if self._paused == 0 and self._running:  # not when the run ended meanwhile
            self._start_live()

    # -- the end ----------------------------------------------------------------------------

    def _print_tree(self, subtree: str | None = None) -> None:
        """Print the whole tree (or *subtree*) for good, as ``trace show`` draws it."""
        console = self.console
        if not console.is_terminal:
            console.print(render_tree(self.tree, time.time(), max_lines=None, subtree=subtree))
            return
        from runtime.trace import styled_tree_lines

        width = console.width
        lines: list[str] = []
        for line in styled_tree_lines(
            self.tree, now=time.time(), subtree=subtree, title=subtree is None
        ):
            lines += [text for text, _ in self._ansi.line(line, width)]
        lines.append("")
        self._region.write("\n".join(lines))

    def finish_turn(self, root_id: str) -> None:
        """Print what stays of one chat turn: its tree (when it did more than answer), its
        answer and a summary line. Call it while the view is held."""
        console = self.console
        self._print_pending()
        node = self.tree.agents.get(root_id)
        if node is not None and node.children:
            self._print_tree(root_id)
        answer = self._text.turn_done() or self._text.last_turn
        self._text.last_turn = ""
        if answer:
            from rich.markdown import Markdown

            console.print(Markdown(answer))
        console.print(turn_summary(self.tree, root_id), highlight=False)

    def finish(self, *, trace_path: Path | None) -> None:
        """Print what stays on screen: the final tree, the answer, the trace and how to read it.

        Whatever came after the last frame is in them: the end always shows the last state.
        """
        self._stop_live()
        console = self.console
        self._print_pending()
        self._print_tree()
        answer = self._text.turn_done() or self._text.last_turn
        if not _completed(self.tree):
            answer = ""  # text cut short by an abort is not an answer (it is in the trace)
        if answer:
            from rich.markdown import Markdown

            console.print()
            console.print(Markdown(answer))
        console.print()
        console.file.flush()  # the tree and the answer before the outcome, when that is stderr
        outcome = self.outcome
        outcome.print(summary_line(self.tree), highlight=False)
        for line in trace_hint(trace_path):
            # Not wrapped by us: the terminal wraps it, and a copied command stays one line.
            outcome.print(line, style="dim", markup=False, highlight=False, soft_wrap=True)


class PlainView:
    """One plain line per significant event, for a pipe or a file (no terminal).

    Args:
        tree: the run's tree; this view feeds it in :meth:`tap`.
        out: where the lines go (stdout).
        max_queued: lines queued before the tap writes them itself.
        outcome: where the closing summary line and the trace's path go (the command line
            gives stderr); default *out*.
    """

    def __init__(
        self,
        tree: TraceTree,
        out: TextIO,
        *,
        max_queued: int = 2000,
        outcome: TextIO | None = None,
    ) -> None:
        self.tree = tree
        self.out = out
        self.outcome = out if outcome is None else outcome
        self._lines: list[str] = []
        self._max = max_queued
        self._wake: trio.Event | None = None
        self._text = _RootText()
        self.console = None
        # A pipe to a program that cannot decode some character must not crash the run.
        with contextlib.suppress(AttributeError, ValueError):
            out.reconfigure(errors="replace")  # type: ignore[attr-defined]

    def tap(self, event: Event) -> None:
        """Apply *event* to the tree and queue its line, if it has one."""
        tree = self.tree
        tree.apply(event)
        line = self._line(event)
        if line is None:
            return
        self._lines.append(visible(line))  # names, summaries, errors: from outside
        if len(self._lines) >= self._max:
            self.flush()
        elif self._wake is not None:
            self._wake.set()

    def _line(self, event: Event) -> str | None:
        tree = self.tree
        if isinstance(event, TextDelta):
            if event.parent_tool_use_id is None:
                self._text.delta(visible(event.text))
            return None
        if isinstance(event, TurnFinished):
            if event.parent_tool_use_id is None:
                text = self._text.turn_done()
                if text:
                    return text
            return None
        who = f"[{_path(tree, event.agent_id)}]"
        if isinstance(event, AgentStarted):
            node = tree.agents.get(event.agent_id or "")
            call = node.parent if node is not None else None
            desc = call.input.get("description") if call is not None else None
            return f"{who} agent started" + (f": {desc}" if isinstance(desc, str) else "")
        if isinstance(event, AgentFinished):
            tokens = event.input_tokens + event.output_tokens
            detail = f"{event.duration_s:.2f}s, {tokens:,} tokens"
            if event.cost_usd:  # priced (docs/costs.md)
                from runtime.trace import fmt_usd

                detail += f", {fmt_usd(event.cost_usd)}"
            extra = f": {event.error}" if event.error and event.status != "completed" else ""
            return f"{who} agent {event.status} ({detail}){extra}"
        if isinstance(event, ToolStarted):
            return f"{who} tool started: {event.summary} ({event.tool_use_id})"
        if isinstance(event, ToolFinished):
            extra = ""
            if event.status != "ok":
                first = event.output.strip().splitlines()[0] if event.output.strip() else ""
                extra = f": {first[:200]}" if first else ""
            return (
                f"{who} tool {event.status}: {event.name} "
                f"({event.tool_use_id}, {event.duration_s:.2f}s){extra}"
            )
        if isinstance(event, PermissionRequested):
            return f"{who} permission requested: {event.summary} ({event.request_id})"
        if isinstance(event, PermissionResolved):
            verdict = "granted" if event.granted else "denied"
            return f"{who} permission {verdict} ({event.request_id}): {event.reason}"
        if isinstance(event, CancelRequested):
            return f"{who} cancel requested: {event.target} by {event.by}: {event.reason}"
        if isinstance(event, UserMessage):
            return f"{who} user message: {event.text}"
        if isinstance(event, ProviderRetry):
            return (
                f"{who} model call failed (try {event.attempt}), retrying in "
                f"{event.delay_s:.1f}s: {event.reason}"
            )
        if isinstance(event, ContextCompacted):
            return _compaction_note(tree, event)
        if isinstance(event, ReplayDiverged):
            return f"replay diverged: {event.node}: {event.detail}"
        if isinstance(event, TodoUpdated):
            return f"{who} {_todo_note(event)}"
        if isinstance(event, RunFinished):
            return None
        return None

    def flush(self) -> None:
        """Write the queued lines now (a blocking write)."""
        if not self._lines:
            return
        lines, self._lines = self._lines, []
        try:
            self.out.write("\n".join(lines) + "\n")
            self.out.flush()
        except (BrokenPipeError, ValueError):
            pass  # the reader went away (| head): the run goes on without an audience

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write queued lines as they come (batched every few ms) until cancelled.

        Cancellation: the way to stop it; queued lines are written first.
        """
        self._wake = trio.Event()
        task_status.started()
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                await trio.sleep(0.01)  # batch a burst of events into one write
                self.flush()
        finally:
            self.flush()

    @contextmanager
    def paused(self) -> Generator[None, None, None]:
        """Nothing to pause in plain lines."""
        yield

    def finish_turn(self, root_id: str) -> None:
        """Print the end of one chat turn: its text not printed yet, and a summary line."""
        self.flush()
        text = self._text.turn_done()
        lines = [text] if text else []
        lines.append(turn_summary(self.tree, root_id, rich=False))
        try:
            self.out.write("\n".join(lines) + "\n")
            self.out.flush()
        except (BrokenPipeError, ValueError):
            pass

    def finish(self, *, trace_path: Path | None) -> None:
        """Print the end of the run: its status and the trace."""
        self.flush()
        text = self._text.turn_done()
        if text and _completed(self.tree):
            try:
                self.out.write(text + "\n")
                self.out.flush()
            except (BrokenPipeError, ValueError):
                pass
        print_outcome(self.tree, trace_path, self.outcome)


def print_outcome(tree: TraceTree, trace_path: Path | None, out: TextIO) -> None:
    """The run's closing lines as plain text: its summary line, then the trace and the command
    that shows it (docs/cli.md, "What stderr and stdout carry": on stderr from the command
    line, whatever stdout is)."""
    lines = [summary_line(tree, rich=False), *trace_hint(trace_path)]
    try:
        out.write("\n".join(lines) + "\n")
        out.flush()
    except (BrokenPipeError, ValueError):
        pass


_DENIED_BY_MODE = ("permission denied: mode deny", "permission denied: nobody can answer")


def denied_note(tree: TraceTree, mode: str) -> str | None:
    """One line saying that calls were denied by the permission mode alone (not by a rule the
    user wrote) and how to allow them, or None when none was.

    Without a terminal the default mode is ``deny``: a run whose ``bash`` calls were all
    refused otherwise looks like one that worked (docs/cli.md, "Permission prompts").
    """
    denied = [
        node for node in tree.tools.values()
        if node.status == "denied" and node.output.startswith(_DENIED_BY_MODE)
    ]
    if not denied:
        return None
    names = sorted({node.name for node in denied})
    first = denied[0]
    rule = first.name
    if first.name == "bash" and first.summary.startswith("bash: "):
        word = first.summary.removeprefix("bash: ").split(maxsplit=1)[0:1]
        rule = f"bash({word[0]} *)" if word else "bash"
    calls = f"{len(denied)} tool call{'s' * (len(denied) != 1)}"
    if mode == "ask":
        why = "permission mode ask, with no terminal or --control to answer"
    else:
        why = f"permission mode {mode} (the default without a terminal)"
    return (
        f"{calls} denied ({', '.join(names)}) by {why}: allow such calls with "
        f"--permission-mode allow-all or --allow {shlex.quote(rule)}"
    )


def announce_trace(trace_path: Path | None, out: TextIO) -> None:
    """Name the run's trace file as the run starts, so ``trace tail`` can follow it at once."""
    if trace_path is None:
        return
    try:
        out.write(f"Trace: {trace_path}\n")
        out.flush()
    except (BrokenPipeError, ValueError):
        pass


def _fit_header(line: StyledLine, run_id: str | None) -> None:
    """Make the run's header one line, as the node lines are: in a live frame a wrapped header
    would push the tree down by a line on every redraw at 80 columns. The run id gives way
    first (it is in the trace's name and on stderr), then the end is cut like a node line's."""
    line.wrap = False
    if not run_id or not line.parts:
        return
    first = line.parts[0][0]
    start = first.find(run_id)
    if start >= 0:
        line.desc = (start, start + len(run_id))


def _completed(tree: TraceTree) -> bool:
    roots = tree.roots
    return bool(roots) and roots[-1].status == "completed"


def outcome_notes(tree: TraceTree, root: AgentNode | None = None) -> str:
    from runtime.trace import outcome_notes as notes

    return notes(tree, root)


def _cost_note(usd: float | None) -> str:
    """`` · $0.046`` once the calls have a price; nothing for an unknown or zero cost (a
    warning said which model has none: docs/costs.md, "Where costs show")."""
    if not usd:
        return ""
    from runtime.trace import fmt_usd

    return f" · {fmt_usd(usd)}"


def summary_line(tree: TraceTree, *, rich: bool = True) -> str:
    """``completed in 6.1s · 5 agents · 12.3k tokens`` for the run's end."""
    status = tree.status
    roots = tree.roots
    if roots and tree.run_status is None:
        status = roots[-1].status
    duration = tree.duration_s or 0.0
    tokens = tree.total_input_tokens + tree.total_output_tokens
    agents = len(tree.agents)
    plural = "s" * (agents != 1)
    body = f"{status} in {duration:.1f}s · {agents} agent{plural} · {_tokens(tokens)} tokens"
    body += _cost_note(tree.total_cost_usd)
    notes = outcome_notes(tree)
    if notes:
        body += f" · {notes}"
    if not rich:
        return f"run {body}"
    style = {"completed": "bold green", "cancelled": "bold yellow"}.get(status, "bold red")
    return f"[{style}]{body}[/]"


def turn_summary(tree: TraceTree, root_id: str, *, rich: bool = True) -> str:
    """``turn completed in 2.1s · 3 agents · 1.2k tokens`` for one root agent's subtree."""
    node = tree.agents.get(root_id)
    if node is None:
        return "turn: no agent started"
    tree.rollup()
    agents = sum(1 for n in tree.iter_nodes([node]) if n.kind == "agent")
    tokens = node.total_input_tokens + node.total_output_tokens
    duration = node.elapsed(time.time()) or 0.0
    plural = "s" * (agents != 1)
    body = f"{node.status} in {duration:.1f}s · {agents} agent{plural} · {_tokens(tokens)} tokens"
    body += _cost_note(node.subtree_cost_usd)
    notes = outcome_notes(tree, node)
    if notes:
        body += f" · {notes}"
    if not rich:
        return f"turn {body}"
    style = {"completed": "green", "cancelled": "yellow"}.get(node.status, "red")
    return f"[{style}]{body}[/]"


def _tail_lines(text: str, width: int, count: int) -> list[str]:
    """The last *count* lines of *text* wrapped at *width* characters (from the end: only the
    lines shown are wrapped)."""
    lines: list[str] = []
    for raw in reversed(text.splitlines() or [""]):
        raw = raw.expandtabs()
        pieces = [raw[i : i + width] for i in range(0, len(raw), width)] or [""]
        lines[:0] = pieces
        if len(lines) >= count:
            break
    return lines[-count:]


def render_tree(
    tree: TraceTree, now: float, *, max_lines: int | None, subtree: str | None = None
) -> RenderableType:
    """The tree as drawn by :func:`runtime.trace._render.render_tree`, fitted to *max_lines*.

    A tree taller than the space the live region has shows only the running nodes and the paths
    to them (what is finished is in the final tree, and in the trace). With *subtree*, only that
    node's subtree, without the run's header line.
    """
    from runtime.trace import render_tree as draw

    if subtree is None:
        nodes = len(tree.agents) + len(tree.tools)
        ended = tree.ended
    else:
        node = tree.find(subtree)
        if node is None:  # started, but its first event has not come yet
            from rich.text import Text

            return Text("starting…", style="dim")
        nodes = sum(1 for _ in tree.iter_nodes([node]))
        ended = tree.ended or node.finished
    if max_lines is None or nodes + 1 <= max_lines or ended:
        return draw(tree, now=now, subtree=subtree, title=subtree is None)
    return draw(tree, now=now, status="running", subtree=subtree, title=subtree is None)
