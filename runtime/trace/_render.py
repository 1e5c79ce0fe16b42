"""Drawing a :class:`~runtime.TraceTree`: rich renderables for the terminal, Mermaid text.

Every function here is a pure function of the tree and a ``now`` time (for the elapsed time and
the spinner frame of running nodes), so ``trace show`` and the live view of ``run`` draw the same
thing: the live view calls :func:`render_tree` again on each refresh.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

from rich.console import Group, RenderableType
from rich.text import Text

from ._tree import INTERRUPTED, RUNNING, AgentNode, ToolNode, TraceTree

SPINNER_FRAMES: Final = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_SPINNER_FPS: Final = 12.5

# status -> (mark, style)
AGENT_MARKS: Final[dict[str, tuple[str, str]]] = {
    "completed": ("✓", "green"),
    "failed": ("✗", "bold red"),
    "cancelled": ("⊘", "yellow"),
    "max_turns": ("⏱", "magenta"),
    "budget_exceeded": ("⏱", "magenta"),
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


def fmt_duration(seconds: float | None) -> str:
    """A short human duration: ``850ms``, ``1.2s``, ``2m03s``, ``1h02m``; ``?`` if unknown."""
    if seconds is None or math.isnan(seconds):
        return "?"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        minutes, secs = divmod(int(seconds), 60)
        return f"{minutes}m{secs:02d}s"
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours}h{rest // 60:02d}m"


def fmt_tokens(count: int) -> str:
    """A short token count: ``950``, ``12.3k``, ``4.1M``."""
    if count < 1000:
        return str(count)
    if count < 1_000_000:
        return f"{count / 1000:.1f}k"
    return f"{count / 1_000_000:.1f}M"


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

    def agent(self, node: AgentNode) -> Text:
        mark, style = status_mark(node.status, now=self.spin_at)
        label = Text()
        label.append(f"{mark} ", self.style(style))
        label.append(node.name, self.style("bold"))
        label.append(f" {node.id}", self.style("dim"))
        if node.status not in ("completed", RUNNING):
            label.append(f" {node.status}", self.style(style))
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
        if node.error:
            label.append(f"  {first_line(node.error)}", self.style("red"))
        elif node.result:
            label.append(f"  {first_line(node.result)}", self.style("italic"))
        elif node.status in (RUNNING, INTERRUPTED) and node.text:
            label.append(f"  {first_line(node.text[-200:])}", self.style("dim italic"))
        self._cancel(label, node.cancel)
        return label

    def label(self, node: AgentNode | ToolNode) -> Text:
        return self.agent(node) if isinstance(node, AgentNode) else self.tool(node)

    def tool(self, node: ToolNode) -> Text:
        mark, style = status_mark(node.status, tool=True, now=self.spin_at)
        label = Text()
        label.append(f"{mark} ", self.style(style))
        label.append(first_line(node.summary, 100) or node.name)
        if node.name == "agent":
            label.append(f" {node.id}", self.style("dim"))
        if node.status != "ok":
            label.append(f" {node.status}", self.style(style))
        if node.awaiting_permission:
            label.append(" awaiting permission", self.style("bold yellow"))
        label.append(f"  {fmt_duration(node.elapsed(self.now))}", self.style("blue"))
        if node.progress is not None:
            label.append(f"  {fmt_progress(*node.progress)}", self.style("cyan"))
        if node.permission_wait_s:
            label.append(f" (waited {fmt_duration(node.permission_wait_s)})", self.style("dim"))
        if node.status in ("error", "denied") and node.output:
            label.append(f"  {first_line(node.output)}", self.style("red"))
        self._cancel(label, node.cancel)
        return label

    def _cancel(self, label: Text, cancel: object) -> None:
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
    tree.rollup()
    at = tree.last_ts if now is None else now
    if not math.isfinite(at):
        at = 0.0
    roots, keep = tree.select(subtree=subtree, status=status)
    painter = _Painter(color=color, now=at, spinner=spinner)
    limit = math.inf if max_depth is None else max_depth
    guide = painter.style("dim")
    if title:
        yield _header(tree, painter)
    if not roots:
        what = f"no node with status {status!r}" if status else "no agents yet"
        yield _line(Text(f"({what})", painter.style("dim")))
    for root in roots:
        yield _line(painter.label(root))
        # Iterative, so a pathologically deep tree cannot hit the recursion limit. Entries are
        # (node or elision note, guide prefix, last among its siblings, agent level).
        stack: list[tuple[AgentNode | ToolNode | Text, str, bool, int]] = []
        _push_children(stack, root, "", 0, keep, limit, painter)
        while stack:
            node, prefix, last, level = stack.pop()
            line = Text(prefix + ("└── " if last else "├── "), guide)
            line.append_text(node if isinstance(node, Text) else painter.label(node))
            yield _line(line)
            if not isinstance(node, Text):
                _push_children(
                    stack, node, prefix + ("    " if last else "│   "), level, keep, limit, painter
                )


def _line(text: Text) -> Text:
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text


def _push_children(
    stack: list[tuple[AgentNode | ToolNode | Text, str, bool, int]],
    node: AgentNode | ToolNode,
    prefix: str,
    level: int,
    keep: set[AgentNode | ToolNode] | None,
    limit: float,
    painter: _Painter,
) -> None:
    children: list[AgentNode | ToolNode] = [c for c in node.children if keep is None or c in keep]
    if not children:
        return
    if isinstance(node, ToolNode):
        level += 1
        if level > limit:
            note = Text(f"… {_count(children)} below --max-depth", painter.style("dim italic"))
            stack.append((note, prefix, True, level))
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
    return _header(tree, _Painter(color=color, now=at if math.isfinite(at) else 0.0, spinner=False))


def _header(tree: TraceTree, painter: _Painter) -> Text:
    mark, style = status_mark(tree.status, now=painter.spin_at)
    head = Text()
    head.append(f"{mark} run {tree.run_id}", painter.style(f"bold {style}"))
    head.append(f"  {tree.status}", painter.style(style))
    duration = tree.duration_s
    if tree.status == RUNNING and tree.started_ts is not None:
        duration = max(0.0, painter.now - tree.started_ts)
    head.append(f"  {fmt_duration(duration)}", painter.style("blue"))
    head.append(
        f"  {len(tree.agents)} agents, {len(tree.tools)} tool calls, tokens "
        f"{fmt_tokens(tree.total_input_tokens)}→{fmt_tokens(tree.total_output_tokens)}",
        painter.style("dim"),
    )
    return head


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
        name = ("  " * node.depth + node.name)[:label_width]
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
    text = " ".join(text.split())
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
    elif kind == "context_compacted":
        what = f"{COMPACTED_MARK} {who}: {compaction_line(fields)}"
    elif kind == "cancel_requested":
        what = (
            f"⊘ cancel {fields.get('target')} requested by {fields.get('by')}: "
            f"{first_line(str(fields.get('reason') or ''))}"
        )
    if what is None:
        return None
    return f"{stamp} {indent}{what}"
