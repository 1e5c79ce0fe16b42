"""Drawing a :class:`~runtime.TraceTree`: rich renderables for the terminal, Mermaid text.

Every function here is a pure function of the tree and a ``now`` time (for the elapsed time and
the spinner frame of running nodes), so ``trace show`` and the live view of ``run`` draw the same
thing: the live view calls :func:`render_tree` again on each refresh.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

from rich.console import Group, RenderableType
from rich.text import Text

from runtime.core import visible

from ._tree import INTERRUPTED, RUNNING, AgentNode, RateWaitInfo, RetryInfo, ToolNode, TraceTree
from ._words import fmt_duration, fmt_tokens, fmt_usd, outcome_notes, plural

SPINNER_FRAMES: Final = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_SPINNER_FPS: Final = 12.5

# status -> (mark, style)
AGENT_MARKS: Final[dict[str, tuple[str, str]]] = {
    "completed": ("✓", "green"),
    "failed": ("✗", "bold red"),
    "cancelled": ("⊘", "yellow"),
    "max_turns": ("⏱", "magenta"),
    "budget_exceeded": ("⏱", "magenta"),
    "stopped": ("◼", "yellow"),
    INTERRUPTED: ("⚠", "bold yellow"),
    RUNNING: ("●", "cyan"),
}
TOOL_MARKS: Final[dict[str, tuple[str, str]]] = {
    "ok": ("✓", "green"),
    "error": ("✗", "red"),
    "cancelled": ("⊘", "yellow"),
    "denied": ("⛔", "red"),
    INTERRUPTED: ("⚠", "yellow"),
    RUNNING: ("●", "cyan"),
}


class FitText(Text):
    """A tree line whose description (a tool call's summary) gives way first when the line is
    wider than the screen, so its status and duration stay in view; what is left after that is
    cut at the end, as any line."""

    desc: tuple[int, int] | None = None
    """Where the description is in the text (start, end), if the line has one."""
    essential: int | None = None
    """Where what must stay in view ends (after the duration); None: the whole line."""

    def __rich__(self) -> Any:
        # Console.print joins plain Text objects into one before rendering; a renderable of
        # another kind is rendered as itself, at the width it is given.
        return _FitToWidth(self) if self.desc is not None else self

    def fitted_to(self, width: int) -> Text:
        """This line cut to *width*: the description first (down to a few characters)."""
        desc = self.desc
        needed = len(self) if self.essential is None else self.essential
        if needed < len(self):
            needed += 1  # room for the "…" that ends a line cut after its essential part
        if desc is None or needed <= width:
            return self.copy()  # a plain Text: rendered as is (cut at the end if need be)
        start, end = desc
        keep = max(_MIN_DESC, (end - start) - (needed - width) - 1)
        if keep >= end - start:
            return self.copy()
        fitted = self[:start]
        fitted.append_text(self[start : start + keep])
        fitted.append("…")
        fitted.append_text(self[end:])
        fitted.no_wrap = self.no_wrap
        fitted.overflow = self.overflow
        return fitted


class _FitToWidth:
    def __init__(self, line: FitText) -> None:
        self.line = line

    def __rich_console__(self, console: Any, options: Any) -> Any:
        yield self.line.fitted_to(options.max_width)


_MIN_DESC: Final = 12
"""The fewest characters of a description kept when a line is cut to fit."""


class StyledLine:
    """One line of a drawn tree as styled pieces: what both ways of drawing it start from.

    :meth:`to_text` makes the rich :class:`FitText` that ``trace show`` prints; the live view
    turns the pieces into terminal escapes itself (:mod:`runtime.cli._ansi`), which costs a
    small fraction of rich's rendering. Each character's style is *base* combined with its
    piece's style (pieces never overlap).

    Attributes:
        parts: ``(text, style)`` pieces, in order (style ``""``: only the base).
        base: the style under the whole line (the guides' ``dim``).
        desc: where the description is (start, end), if the line has one; it gives way first
            when the line is too wide (see :class:`FitText`).
        essential: where what must stay in view ends; None: the whole line.
        wrap: a line too wide for the screen wraps (the run's header) instead of being cut.
    """

    __slots__ = ("_len", "base", "desc", "essential", "parts", "wrap")

    def __init__(self, text: str = "", base: str = "", *, wrap: bool = False) -> None:
        text = visible(text, layout=False)  # names, summaries, results: from outside
        self.parts: list[tuple[str, str]] = [(text, "")] if text else []
        self.base = base
        self._len = len(text)
        self.desc: tuple[int, int] | None = None
        self.essential: int | None = None
        self.wrap = wrap

    def append(self, text: str, style: str = "") -> None:
        """Add *text* in *style* at the end (its control characters made visible)."""
        text = visible(text, layout=False)
        self.parts.append((text, style))
        self._len += len(text)

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return (
            f"StyledLine(parts={self.parts!r}, base={self.base!r}, desc={self.desc!r}, "
            f"essential={self.essential!r}, wrap={self.wrap!r})"
        )

    @property
    def plain(self) -> str:
        """The line's characters, without styles."""
        return "".join(text for text, _ in self.parts)

    def to_text(self) -> FitText:
        """The line as rich text, cut with ``…`` (unless :attr:`wrap`) when wider than the
        console."""
        if self.wrap:
            text = FitText(style=self.base)
        else:
            text = FitText(style=self.base, no_wrap=True, overflow="ellipsis")
        for piece, style in self.parts:
            text.append(piece, style or None)
        text.desc = self.desc
        text.essential = self.essential
        return text


def fmt_progress(progress: float, total: float | None, message: str | None) -> str:
    """A tool's latest progress: ``3/10 copying files`` (``42`` without a total)."""
    done = f"{progress:g}" + (f"/{total:g}" if total is not None else "")
    return f"{done} {first_line(message, 60)}" if message else done


def first_line(text: str | None, limit: int = 80) -> str:
    """The first non-empty line of *text*, cut to *limit* characters."""
    if not text:
        return ""
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


WAITING_MARK: Final = "⏸"
"""The mark of an agent waiting its turn at its endpoint's rate limit (docs/rate-limits.md)."""


def rate_wait_text(wait: RateWaitInfo, now: float) -> str:
    """``waiting 1.2s (rate limit: requests)`` while the wait foreseen runs, then ``waiting
    (rate limit: …)`` until the call answers (docs/rate-limits.md)."""
    left = wait.ts + wait.wait_s - now
    when = f"waiting {fmt_duration(left)}" if left > 0 else "waiting"
    why = wait.reason
    if wait.reason == "refused" and wait.status:
        why = f"refused, HTTP {wait.status}"
    return f"{when} (rate limit: {why})"


def retry_text(retry: RetryInfo, now: float) -> str:
    """``retrying in 1.2s (try 2): HTTP 429 …`` while the wait runs, then ``retrying (try 2)``."""
    left = retry.ts + retry.delay_s - now
    when = f"retrying in {fmt_duration(left)}" if left > 0 else "retrying"
    return f"{when} (try {retry.attempt + 1}): {first_line(retry.reason, 100)}"


def last_line(text: str | None, limit: int = 80) -> str:
    """The last non-empty line of *text* (what is being written now), cut to *limit*."""
    if not text:
        return ""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line:
            return line if len(line) <= limit else "…" + line[-(limit - 1) :]
    return ""


_INLINE_MARKDOWN: Final = re.compile(r"(\*\*|__|`+|~~)(?=\S)(.+?)(?<=\S)\1")
_BLOCK_MARKDOWN: Final = re.compile(r"^(#{1,6}\s+|[-*+]\s+|>\s*|\d+[.)]\s+)")


def plain_inline(line: str) -> str:
    """One line of Markdown as plain words: ``**shop**`` is ``shop``, a heading or list mark
    is dropped (a tree line has no room for formatting)."""
    line = _BLOCK_MARKDOWN.sub("", line)
    return _INLINE_MARKDOWN.sub(r"\2", line)


COMPACTED_MARK: Final = "⟲"


def compaction_line(fields: Mapping[str, Any]) -> str:
    """One line saying what a ``context_compacted`` event did (its fields by name).

    E.g. ``context compacted (summary): 152.3k → 31.0k tokens, 84 → 7 messages; the summary
    cost 60.1k→1.2k tokens``.
    """
    line = (
        f"context compacted ({fields.get('method')}): "
        f"{fmt_tokens(int(fields.get('tokens_before') or 0))} → "
        f"{fmt_tokens(int(fields.get('tokens_after') or 0))} tokens, "
        f"{fields.get('messages_before')} → {fields.get('messages_after')} messages"
    )
    cost_in = int(fields.get("input_tokens") or 0)
    cost_out = int(fields.get("output_tokens") or 0)
    if cost_in or cost_out:
        line += f"; the summary cost {fmt_tokens(cost_in)}→{fmt_tokens(cost_out)} tokens"
    return line


def status_mark(status: str, *, tool: bool = False, now: float | None = None) -> tuple[str, str]:
    """The mark and style of a status; a running node spins when *now* is given."""
    mark, style = (TOOL_MARKS if tool else AGENT_MARKS).get(status, ("?", "white"))
    if status == RUNNING and now is not None:
        mark = SPINNER_FRAMES[int(now * _SPINNER_FPS) % len(SPINNER_FRAMES)]
    return mark, style


class _Painter:
    """Builds the labels; ``color=False`` drops every style (marks and words stay)."""

    def __init__(self, *, color: bool, now: float, spinner: bool) -> None:
        self.color = color
        self.now = now
        self.spin_at = now if spinner else None

    def style(self, style: str) -> str:
        return style if self.color else ""

    def agent(self, node: AgentNode, label: StyledLine) -> None:
        mark, style = status_mark(node.status, now=self.spin_at)
        if node.status == RUNNING and node.rate_wait is not None:
            mark, style = WAITING_MARK, "yellow"  # waiting its turn, not running
        label.append(f"{mark} ", self.style(style))
        label.append(node.name, self.style("bold"))
        label.append(f" {node.id}", self.style("dim"))
        if node.status not in ("completed", RUNNING):
            label.append(f" {node.status}", self.style(style))
        elif node.status == "completed" and node.last_stop_reason in _STOP_NOTES:
            label.append(f" {_STOP_NOTES[node.last_stop_reason]}", self.style("yellow"))
        label.append(f"  {fmt_duration(node.elapsed(self.now))}", self.style("blue"))
        own = f"{fmt_tokens(node.input_tokens)}→{fmt_tokens(node.output_tokens)}"
        label.append(f"  tokens {own}", self.style("dim"))
        if (node.total_input_tokens, node.total_output_tokens) != (
            node.input_tokens,
            node.output_tokens,
        ):
            total = f"{fmt_tokens(node.total_input_tokens)}→{fmt_tokens(node.total_output_tokens)}"
            label.append(f" (Σ {total})", self.style("dim"))
        window = node.context_window
        if node.status == RUNNING and window and node.context_tokens is not None:
            share = node.context_tokens / window
            style = "yellow" if share >= 0.7 else "dim"
            label.append(f"  ctx {share:.0%} of {fmt_tokens(window)}", self.style(style))
        if node.compactions:
            n = node.compactions
            label.append(
                f"  {COMPACTED_MARK} {n} compaction{'s' if n > 1 else ''}", self.style("cyan")
            )
        if node.status == RUNNING and (doing := node.current_todo):
            mark = TODO_MARKS["in_progress"][0]
            label.append(f"  {mark} {first_line(doing)}", self.style("cyan"))
        retry = node.retry if node.status == RUNNING else None
        rate_wait = node.rate_wait if node.status == RUNNING else None
        if node.error and not (node.status == "cancelled" and node.cancel is not None):
            # (A cancelled node's reason is said once, by its "cancelled by" below.)
            label.append(f"  {first_line(node.error)}", self.style("red"))
        elif rate_wait is not None:
            label.append(f"  {rate_wait_text(rate_wait, self.now)}", self.style("yellow"))
        elif retry is not None:
            label.append(f"  {retry_text(retry, self.now)}", self.style("yellow"))
        elif node.result:
            label.append(f"  {plain_inline(first_line(node.result))}", self.style("italic"))
        elif node.status in (RUNNING, INTERRUPTED) and node.text_len:
            tail = last_line(node.text_tail(200))
            label.append(f"  {plain_inline(tail)}", self.style("dim italic"))
        self._cancel(label, node.cancel)

    def label(self, node: AgentNode | ToolNode, line: StyledLine) -> None:
        """Append *node*'s label to *line*."""
        if isinstance(node, AgentNode):
            self.agent(node, line)
        else:
            self.tool(node, line)

    def tool(self, node: ToolNode, label: StyledLine) -> None:
        mark, style = status_mark(node.status, tool=True, now=self.spin_at)
        label.append(f"{mark} ", self.style(style))
        start = len(label)
        label.append(first_line(node.summary, 100) or node.name)
        label.desc = (start, len(label))  # what gives way on a narrow screen
        if node.name == "agent":
            label.append(f" {node.id}", self.style("dim"))
        if node.status != "ok":
            label.append(f" {node.status}", self.style(style))
        if node.awaiting_permission:
            label.append(" awaiting permission", self.style("bold yellow"))
        label.append(f"  {fmt_duration(node.elapsed(self.now))}", self.style("blue"))
        if node.progress is not None:
            label.append(f"  {fmt_progress(*node.progress)}", self.style("cyan"))
        label.essential = len(label)  # up to the duration; what follows may be cut at the end
        if node.permission_wait_s:
            label.append(f" (waited {fmt_duration(node.permission_wait_s)})", self.style("dim"))
        for hook in node.hooks:  # those that decided something or failed (docs/hooks.md)
            if hook.decision is not None:
                bad = hook.decision in ("block", "deny", "error", "stop")
                label.append(f"  ⚑ {hook.hook_event} {hook.decision}",
                             self.style("yellow" if bad else "dim"))  # fmt: skip
        if node.status in ("error", "denied") and node.output:
            label.append(f"  {first_line(node.output)}", self.style("red"))
        self._cancel(label, node.cancel)

    def _cancel(self, label: StyledLine, cancel: object) -> None:
        if cancel is None:
            return
        reason = getattr(cancel, "reason", "")
        by = getattr(cancel, "by", "?")
        label.append(f"  cancelled by {by}", self.style("yellow"))
        if reason:
            label.append(f": {first_line(reason)}", self.style("yellow"))


def render_tree(
    tree: TraceTree,
    *,
    now: float | None = None,
    subtree: str | None = None,
    max_depth: int | None = None,
    status: str | None = None,
    color: bool = True,
    spinner: bool = True,
    title: bool = True,
) -> Group:
    """The tree as a rich renderable: one line per node, guides as ``├──``, ``│``, ``└──``.

    Lines longer than the console are cut with ``…``, not wrapped, so each node stays one line
    (a live view can count them). Built line by line (:func:`tree_lines`) rather than with
    rich's ``Tree``, which takes seconds on a hundred thousand nodes.

    Args:
        tree: what to draw.
        now: the time running nodes' elapsed time runs to (default: the tree's last event).
        subtree: draw only this agent's or tool call's subtree.
        max_depth: leave out sub-agents more than this many levels below the roots (a line says
            how many were left out).
        status: draw only nodes with this status and the paths to them.
        color: False draws no colours or styles (marks and words stay).
        spinner: running nodes show a spinner frame for *now* (else ``●``).
        title: put a run header line above the tree.

    Raises:
        KeyError: no node has the id *subtree*.
    """
    lines = tree_lines(
        tree,
        now=now,
        subtree=subtree,
        max_depth=max_depth,
        status=status,
        color=color,
        spinner=spinner,
        title=title,
    )
    return Group(*lines)


def tree_lines(
    tree: TraceTree,
    *,
    now: float | None = None,
    subtree: str | None = None,
    max_depth: int | None = None,
    status: str | None = None,
    color: bool = True,
    spinner: bool = True,
    title: bool = True,
) -> Iterator[Text]:
    """The lines of :func:`render_tree` (same arguments), one :class:`~rich.text.Text` each.

    A generator: ``trace show`` writes the ``plain`` text of each line as it comes when the
    output is not a terminal, so a huge tree is never held as one renderable.

    Raises:
        KeyError: no node has the id *subtree* (when the first line is asked for).
    """
    lines = styled_tree_lines(
        tree,
        now=now,
        subtree=subtree,
        max_depth=max_depth,
        status=status,
        color=color,
        spinner=spinner,
        title=title,
    )
    for line in lines:
        yield line.to_text()


def styled_tree_lines(
    tree: TraceTree,
    *,
    now: float | None = None,
    subtree: str | None = None,
    max_depth: int | None = None,
    status: str | None = None,
    color: bool = True,
    spinner: bool = True,
    title: bool = True,
    roots: tuple[list[AgentNode | ToolNode], set[AgentNode | ToolNode] | None] | None = None,
) -> Iterator[StyledLine]:
    """The lines of :func:`tree_lines` as :class:`StyledLine` pieces (same arguments).

    Args:
        roots: what :meth:`~runtime.TraceTree.select` returned for *subtree* and *status*, if
            the caller has it already.

    Raises:
        KeyError: no node has the id *subtree* (when the first line is asked for).
    """
    tree.rollup()
    at = tree.last_ts if now is None else now
    if not math.isfinite(at):
        at = 0.0
    tops, keep = tree.select(subtree=subtree, status=status) if roots is None else roots
    painter = _Painter(color=color, now=at, spinner=spinner)
    limit = math.inf if max_depth is None else max_depth
    if title:
        yield _header(tree, painter)
    if not tops:
        what = f"no node with status {status!r}" if status else "no agents yet"
        yield StyledLine(f"({what})", painter.style("dim"))
    for root in tops:
        yield from _subtree_lines(root, painter, keep, limit)


def node_lines(
    node: AgentNode | ToolNode, *, now: float | None = None, color: bool = True
) -> Iterator[Text]:
    """The lines of one node's subtree, drawn as in :func:`tree_lines` (token totals are those
    of the tree's last rollup)."""
    at = (
        now
        if now is not None
        else max((n.finished_ts or n.started_ts or 0.0 for n in _walk(node)), default=0.0)
    )
    painter = _Painter(color=color, now=at, spinner=False)
    for line in _subtree_lines(node, painter, None, math.inf):
        yield line.to_text()


TODO_MARKS: Final = {
    "completed": ("✓", "green"),
    "in_progress": ("▸", "cyan"),
    "pending": ("·", "dim"),
}
"""How a todo item's status is drawn (docs/tools.md, "todo_write")."""


def todo_lines(
    tree: TraceTree, *, subtree: str | None = None, color: bool = True
) -> list[StyledLine]:
    """Each agent's last todo list, for ``trace show`` after the tree: a line naming the agent,
    then one line an item (its mark, its ``content``); nothing when no agent wrote one.

    Args:
        subtree: only the agents under this node (as the tree shown).
    """
    if subtree is not None:
        root = tree.find(subtree)
        nodes: Iterable[AgentNode | ToolNode] = tree.iter_nodes([root]) if root else ()
    else:
        nodes = tree.iter_nodes()
    lines: list[StyledLine] = []
    for node in nodes:
        if not isinstance(node, AgentNode) or not node.todos:
            continue
        if not lines:
            lines.append(StyledLine())
        head = StyledLine()
        head.append("todos of ", "dim" if color else "")
        head.append(node.name, "bold" if color else "")
        head.append(f" {node.id}", "dim" if color else "")
        lines.append(head)
        for item in node.todos:
            mark, style = TODO_MARKS.get(item.status, ("?", ""))
            line = StyledLine()
            line.append(f"  {mark} ", style if color else "")
            line.append(first_line(item.content, 120))
            lines.append(line)
    return lines


def _walk(node: AgentNode | ToolNode) -> Iterator[AgentNode | ToolNode]:
    stack: list[AgentNode | ToolNode] = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(current.children)


def _subtree_lines(
    root: AgentNode | ToolNode,
    painter: _Painter,
    keep: set[AgentNode | ToolNode] | None,
    limit: float,
) -> Iterator[StyledLine]:
    guide = painter.style("dim")
    line = StyledLine()
    painter.label(root, line)
    yield line
    # Iterative, so a pathologically deep tree cannot hit the recursion limit. Entries are
    # (node or elision note, guide prefix, last among its siblings, agent level).
    stack: list[tuple[AgentNode | ToolNode | str, str, bool, int]] = []
    _push_children(stack, root, "", 0, keep, limit)
    while stack:
        node, prefix, last, level = stack.pop()
        line = StyledLine(prefix + ("└── " if last else "├── "), guide)
        if isinstance(node, str):
            line.append(node, painter.style("dim italic"))
        else:
            painter.label(node, line)
        yield line
        if not isinstance(node, str):
            _push_children(stack, node, prefix + ("    " if last else "│   "), level, keep, limit)


def _push_children(
    stack: list[tuple[AgentNode | ToolNode | str, str, bool, int]],
    node: AgentNode | ToolNode,
    prefix: str,
    level: int,
    keep: set[AgentNode | ToolNode] | None,
    limit: float,
) -> None:
    children: list[AgentNode | ToolNode] = [c for c in node.children if keep is None or c in keep]
    if not children:
        return
    if isinstance(node, ToolNode):
        level += 1
        if level > limit:
            stack.append((f"… {_count(children)} below --max-depth", prefix, True, level))
            return
    last = len(children) - 1
    stack.extend(
        (child, prefix, i == last, level) for i, child in reversed(list(enumerate(children)))
    )


def _count(agents: Iterable[AgentNode | ToolNode]) -> str:
    n = sum(1 for _ in agents)
    return f"{n} sub-agent" + ("" if n == 1 else "s")


def render_header(tree: TraceTree, *, now: float | None = None, color: bool = True) -> Text:
    """The one-line summary of a run that :func:`render_tree` puts above the tree."""
    at = tree.last_ts if now is None else now
    painter = _Painter(color=color, now=at if math.isfinite(at) else 0.0, spinner=False)
    return _header(tree, painter).to_text()


def _header(tree: TraceTree, painter: _Painter) -> StyledLine:
    mark, style = status_mark(tree.status, now=painter.spin_at)
    head = StyledLine(wrap=True)
    head.append(f"{mark} run {tree.run_id}", painter.style(f"bold {style}"))
    head.append(f"  {tree.status}", painter.style(style))
    duration = tree.duration_s
    if tree.status == RUNNING and tree.started_ts is not None:
        duration = max(0.0, painter.now - tree.started_ts)
    head.append(f"  {fmt_duration(duration)}", painter.style("blue"))
    head.append(
        f"  {plural(len(tree.agents), 'agent')}, {plural(len(tree.tools), 'tool call')}, tokens "
        f"{fmt_tokens(tree.total_input_tokens)}→{fmt_tokens(tree.total_output_tokens)}",
        painter.style("dim"),
    )
    cost = tree.total_cost_usd
    if cost:  # once the calls have a price (docs/costs.md, "Where costs show")
        head.append(f", {fmt_usd(cost)}", painter.style("dim"))
    if tree.resumes:  # the run went on after its process died (docs/resume.md)
        down = fmt_duration(sum(tree.resumes))
        times = "" if len(tree.resumes) == 1 else f" {len(tree.resumes)} times"
        head.append(f"  resumed{times} after {down} down", painter.style("yellow"))
    notes = outcome_notes(tree)
    if notes:
        head.append(f"  {notes}", painter.style("yellow"))
    if tree.status == RUNNING:
        waiting = sum(
            1 for a in tree.agents.values() if a.status == RUNNING and a.rate_wait is not None
        )
        if waiting:
            head.append(f"  {WAITING_MARK} {waiting} waiting on rate limits",
                        painter.style("yellow"))
    return head


_STOP_NOTES: Final = {"max_tokens": "(reply cut at max_tokens)", "refusal": "(refused)"}
"""What a completed agent's label says when its last reply did not end normally."""


def render_timeline(
    tree: TraceTree, *, width: int = 60, color: bool = True, max_depth: int | None = None
) -> RenderableType:
    """A text Gantt chart: one row per agent, a bar over the run's time showing when it ran.

    Overlapping bars are agents that ran in parallel; a bar ends in ``▶`` when the agent never
    finished. ``max_depth`` leaves out deeper agents.
    """
    start = tree.started_ts
    end = tree.last_ts
    if start is None or not math.isfinite(end) or end <= start:
        return Text("(no timing to draw)")
    span = end - start
    limit = math.inf if max_depth is None else max_depth
    rows = [n for n in tree.iter_nodes() if isinstance(n, AgentNode) and n.depth <= limit]
    label_width = min(40, max((2 * n.depth + len(n.name) for n in rows), default=10))
    out = Text()
    out.append(f"{'':{label_width}} |{fmt_duration(0):<{width // 2}}", "dim" if color else "")
    out.append(f"{fmt_duration(span):>{width - width // 2}}|\n", "dim" if color else "")
    for node in rows:
        if node.started_ts is None:
            continue
        begin = node.started_ts - start
        finish = begin + (node.elapsed(end) or 0.0)
        a = min(width - 1, int(begin / span * width))
        b = max(a + 1, min(width, math.ceil(finish / span * width)))
        _, style = status_mark(node.status)
        tail = "▶" if not node.finished else ""
        bar = "█" * (b - a - len(tail)) + tail
        name = visible("  " * node.depth + node.name, layout=False)[:label_width]
        out.append(f"{name:<{label_width}} |")
        out.append(" " * a)
        out.append(bar, style if color else "")
        out.append(" " * (width - b))
        out.append(f"| {fmt_duration(node.elapsed(end))} {node.status}\n", "dim" if color else "")
    out.rstrip()
    return out


def _mermaid_label(text: str) -> str:
    # Inside a quoted Mermaid label, '"' ends the label and '#...;' is an entity: escape both
    # (and the angle brackets, which Mermaid may read as HTML).
    text = visible(" ".join(text.split()), layout=False)
    for char, entity in (("#", "#35;"), ('"', "#quot;"), ("<", "#lt;"), (">", "#gt;")):
        text = text.replace(char, entity)
    return text


def render_mermaid(trees: Iterable[TraceTree]) -> str:
    """A Mermaid ``flowchart TD`` of the trees: agents as rounded boxes, tool calls as boxes.

    Node ids are generated (``n0``, ``n1``, …) so no id from the trace can break the syntax;
    labels are escaped. Nodes get a class per status for colour.
    """
    lines = ["flowchart TD"]
    counter = 0
    for tree in trees:
        tree.rollup()
        ids: dict[int, str] = {}
        lines.append(f'  subgraph run_{counter}["run {_mermaid_label(str(tree.run_id))}"]')
        # A subgraph lays itself out left to right unless it says otherwise (flowchart TD
        # applies to the top level only).
        lines.append("    direction TB")
        for node in tree.iter_nodes():
            nid = f"n{counter}"
            counter += 1
            ids[id(node)] = nid
            mark, _ = status_mark(node.status, tool=isinstance(node, ToolNode))
            duration = fmt_duration(node.duration_s)
            if isinstance(node, AgentNode):
                text = f"{mark} {node.name} · {node.status} · {duration}"
                tokens = f"{fmt_tokens(node.total_input_tokens)}→"
                tokens += fmt_tokens(node.total_output_tokens)
                lines.append(f'    {nid}("{_mermaid_label(text)} · {tokens} tok")')
            else:
                text = f"{mark} {first_line(node.summary, 60) or node.name} · {duration}"
                lines.append(f'    {nid}["{_mermaid_label(text)}"]')
            lines.append(f"    class {nid} {node.status}")
            parent = node.parent
            if parent is not None and id(parent) in ids:
                lines.append(f"    {ids[id(parent)]} --> {nid}")
        lines.append("  end")
        counter += 1
    lines += [
        "  classDef completed fill:#d4f7d4,stroke:#2e7d32",
        "  classDef ok fill:#d4f7d4,stroke:#2e7d32",
        "  classDef failed fill:#fbd5d5,stroke:#c62828",
        "  classDef error fill:#fbd5d5,stroke:#c62828",
        "  classDef denied fill:#fbd5d5,stroke:#c62828",
        "  classDef cancelled fill:#fff3c4,stroke:#f9a825",
        "  classDef interrupted fill:#ffe0b2,stroke:#ef6c00",
        "  classDef max_turns fill:#f3d9fa,stroke:#8e24aa",
        "  classDef budget_exceeded fill:#f3d9fa,stroke:#8e24aa",
        "  classDef stopped fill:#fff3c4,stroke:#6d4c41",
        "  classDef running fill:#d6eefa,stroke:#0277bd",
    ]
    return "\n".join(lines) + "\n"


def event_line(tree: TraceTree, fields: Mapping[str, Any]) -> str | None:
    """One plain line for a significant event (after it was applied to *tree*), else None.

    ``HH:MM:SS.mmm`` local time, indentation by depth, the acting agent, what happened. Deltas,
    turns and user messages are not significant: they would flood a log.
    """
    kind = fields.get("type")
    ts = fields.get("ts")
    stamp = time.strftime("%H:%M:%S", time.localtime(ts)) if isinstance(ts, (int, float)) else "?"
    if isinstance(ts, (int, float)):
        stamp += f".{int(ts * 1000) % 1000:03d}"
    agent = tree.agents.get(str(fields.get("agent_id")))
    indent = "  " * agent.depth if agent is not None else ""
    who = f"{agent.name} {agent.id}" if agent is not None else ""
    tool = tree.tools.get(str(fields.get("tool_use_id"))) if "tool_use_id" in fields else None
    what: str | None = None
    if kind == "run_started":
        what = f"run {tree.run_id} started"
    elif kind == "run_finished":
        what = f"run {tree.run_id} {tree.status} in {fmt_duration(tree.duration_s)}"
    elif kind == "agent_started" and agent is not None:
        what = f"▶ {who} started"
    elif kind == "agent_finished" and agent is not None:
        mark, _ = status_mark(agent.status)
        what = (
            f"{mark} {who} {agent.status} in {fmt_duration(agent.duration_s)}, tokens "
            f"{fmt_tokens(agent.input_tokens)}→{fmt_tokens(agent.output_tokens)}"
        )
        detail = first_line(agent.error or agent.result)
        if detail:
            what += f": {detail}"
    elif kind == "tool_started" and tool is not None:
        what = f"→ {who}: {first_line(tool.summary, 100) or tool.name} {tool.id}"
    elif kind == "tool_finished" and tool is not None:
        mark, _ = status_mark(tool.status, tool=True)
        what = f"{mark} {who}: {first_line(tool.summary, 100) or tool.name} {tool.status}"
        what += f" in {fmt_duration(tool.duration_s)}"
        if tool.status in ("error", "denied"):
            what += f": {first_line(tool.output)}"
    elif kind == "permission_requested" and tool is not None:
        what = f"? {who} asks permission: {first_line(tool.summary, 100) or tool.name}"
    elif kind == "permission_resolved" and tool is not None:
        answer = "granted" if fields.get("granted") else "denied"
        what = f"? {who} permission {answer} for {tool.id}"
    elif kind == "provider_retry" and agent is not None:
        delay = fields.get("delay_s")
        wait = fmt_duration(delay) if isinstance(delay, (int, float)) else "?"
        reason = first_line(str(fields.get("reason") or ""))
        what = f"↻ {who}: model call failed, retrying in {wait}: {reason}"
    elif kind == "rate_limited" and agent is not None:
        wait_s = fields.get("wait_s")
        shown = fmt_duration(wait_s) if isinstance(wait_s, (int, float)) else "?"
        status = fields.get("status")
        why = f"refused, HTTP {status}" if status else str(fields.get("reason") or "")
        what = f"⏸ {who}: waiting {shown} for the rate limit ({why})"
    elif kind == "context_compacted":
        what = f"{COMPACTED_MARK} {who}: {compaction_line(fields)}"
    elif kind == "hook_finished" and fields.get("decision") is not None:  # docs/hooks.md
        target = first_line(str(fields.get("command") or fields.get("url") or ""), 60)
        call = f" on {tool.id}" if tool is not None else ""
        what = f"⚑ {who or 'run'}: {fields.get('hook_event')} hook {fields.get('decision')}{call}"
        what += f" ({target}, exit {fields.get('exit_code')})"
    elif kind == "cancel_requested":
        what = (
            f"⊘ cancel {fields.get('target')} requested by {fields.get('by')}: "
            f"{first_line(str(fields.get('reason') or ''))}"
        )
    elif kind == "agent_message":
        what = (
            f"✉ {fields.get('from_agent_id')} → {fields.get('to_agent_id')}: "
            f"{first_line(str(fields.get('text') or ''), 100)}"
        )
    elif kind == "stop_requested":
        what = (
            f"◼ stop {fields.get('target')} requested by {fields.get('by')}: "
            f"{first_line(str(fields.get('reason') or ''))}"
        )
    if what is None:
        return None
    return visible(f"{stamp} {indent}{what}", layout=False)
