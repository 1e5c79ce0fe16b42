"""``trio-agents trace``: show, stats, tail and export a JSONL trace (docs/cli.md#trace).

Imports are lazy: ``--help`` must start fast, and ``show --json`` / ``stats`` on a big file must
not pay for what they do not use (the cattrs converter, trio).

Exit codes: 0 done (whatever the run's own status); 2 bad usage or a bad file (missing, empty,
not a trace, no such node); 130 interrupted (``tail`` on Ctrl+C). Bad lines inside a trace are
warnings on stderr (``line N: …``), never a failure. No traceback unless ``--debug``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import os
import sys
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from rich.console import Console

    from runtime.core._errors import EventDecodeError
    from runtime.trace._tracefile import TraceLoader
    from runtime.trace._tree import AgentNode, ToolNode, TraceTree

PROG: Final = "trio-agents trace"
MAX_WARNINGS: Final = 20
"""Bad-line warnings printed before the rest are only counted."""
STATUSES: Final = (
    "completed",
    "cancelled",
    "failed",
    "max_turns",
    "budget_exceeded",
    "ok",
    "error",
    "denied",
    "running",
    "interrupted",
)


_PIPE_WIDTH: Final = 400


class _UsageError(Exception):
    """Bad usage found after parsing (exit 2)."""


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect a JSONL trace written by `trio-agents run` (or still being written).",
        parents=[common],
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    show = sub.add_parser(
        "show",
        parents=[common],
        help="the tree of agents and tool calls",
        description="Draw "
        "the tree: agents with status, duration, tokens (own and Σ subtree), result or error; "
        "tool calls with their summary; cancels with reason and who asked.",
    )
    show.add_argument("file", metavar="FILE")
    show.add_argument(
        "--json", action="store_true", help="the tree as JSON (docs/tree.md), one line per run"
    )
    show.add_argument(
        "--subtree", metavar="ID", help="only the subtree of this agent or tool call id"
    )
    show.add_argument(
        "--max-depth", metavar="N", type=_natural, help="sub-agents at most N levels deep"
    )
    show.add_argument(
        "--status",
        metavar="S",
        choices=STATUSES,
        help="only nodes with status S, with their ancestors",
    )
    show.add_argument(
        "--timeline", action="store_true", help="a text Gantt chart of agents over time"
    )
    show.add_argument(
        "--no-color", action="store_true", help="no colours (NO_COLOR is honoured too)"
    )
    show.set_defaults(func=_cmd_show)

    stats = sub.add_parser(
        "stats",
        parents=[common],
        help="counts, durations and tokens",
        description="Per agent type and per status: counts, tokens, durations (sum, p50, max); "
        "tool calls by name and status; the most agents running at once; the critical path; "
        "time spent waiting for permission.",
    )
    stats.add_argument("file", metavar="FILE")
    stats.add_argument("--json", action="store_true", help="as one JSON object")
    stats.add_argument("--no-color", action="store_true", help="no colours")
    stats.set_defaults(func=_cmd_stats)

    tail = sub.add_parser(
        "tail",
        parents=[common],
        help="follow a trace that is still being written",
        description="Follow FILE as it grows: a live tree on a terminal, one line per event "
        "otherwise. Exits 0 when the run finishes, 130 on Ctrl+C.",
    )
    tail.add_argument("file", metavar="FILE")
    tail.add_argument("--no-color", action="store_true", help="no colours")
    tail.add_argument("--poll", metavar="SECONDS", type=float, default=0.1, help=argparse.SUPPRESS)
    tail.set_defaults(func=_cmd_tail)

    export = sub.add_parser(
        "export",
        parents=[common],
        help="OTLP JSON spans or a Mermaid flowchart",
        description="otlp-json: one OTLP ExportTraceServiceRequest per line (the collector's "
        "file format), GenAI semantic-convention attributes. mermaid: a flowchart TD.",
    )
    export.add_argument("file", metavar="FILE")
    export.add_argument("--format", required=True, choices=("otlp-json", "mermaid"))
    export.add_argument("-o", "--output", metavar="OUT", help="write here instead of stdout")
    export.set_defaults(func=_cmd_export)
    return parser


def _natural(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def main(argv: Sequence[str]) -> int:
    """``trio-agents trace ARGV...``; returns the exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:  # argparse: 2 on bad usage, 0 after --help
        return exc.code if isinstance(exc.code, int) else 2
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        if func is _cmd_tail:
            return func(args)
        with _one_shot_heap():
            return func(args)
    except _UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # show/stats/export run without trio, so Ctrl+C arrives bare here (tail handles its
        # own, under trio, with except* and a signal receiver).
        return 130
    except BrokenPipeError:
        # `trace show x | head`: the reader left; say nothing, and stop Python's own complaint.
        _silence_stdout()
        return 0
    except Exception as exc:
        from runtime.core._errors import TraceError

        if args.debug:
            raise
        if isinstance(exc, TraceError):
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return 2
        print(f"{PROG}: internal error: {exc!r} (--debug shows where)", file=sys.stderr)
        return 1


@contextlib.contextmanager
def _one_shot_heap() -> Generator[None]:
    """Run a command that builds one big tree and then ends, without the cycle collector.

    The tree's nodes point at each other, and live until the process ends: the collector would
    only walk them again and again while they are built, and once more at exit (about a third
    of a second each on a million events). So it is off while the command runs; afterwards
    what exists is frozen (never walked again, nor freed at exit: the process is ending) and the
    collector is put back as it was.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


# --------------------------------------------------------------------------- loading


class _Warnings:
    """Bad-line warnings for stderr: the first :data:`MAX_WARNINGS`, then a count.

    Deferred (the default) they are printed by :meth:`finish`, once the file has proved to be
    a trace: a file that is not one gets its one-line error, not a warning per line first.
    """

    def __init__(self, path: str, *, defer: bool = True) -> None:
        self.path = path
        self.defer = defer
        self.count = 0
        self._held: list[str] = []

    def __call__(self, error: EventDecodeError) -> None:
        from runtime.core._errors import UnknownEventType

        self.count += 1
        if self.count > MAX_WARNINGS:
            return
        if isinstance(error, UnknownEventType):
            message = (
                f"line {error.line}: unknown event type {error.type_name!r} (a newer version?); "
                "skipping events of that type"
            )
        else:
            message = str(error)
        line = f"{PROG}: warning: {self.path}: {message}"
        if self.defer:
            self._held.append(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def note(self, message: str) -> None:
        """A warning about the file as a whole (not counted against the cap)."""
        line = f"{PROG}: warning: {self.path}: {message}"
        if self.defer:
            self._held.append(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def finish(self, loader: TraceLoader | None = None) -> None:
        if loader is not None:
            for tree in loader.traces.trees:
                for message in tree.anomalies():
                    self.note(f"run {tree.run_id}: {message}")
        for line in self._held:
            print(line, file=sys.stderr)
        self._held.clear()
        if self.count > MAX_WARNINGS:
            print(
                f"{PROG}: warning: {self.path}: {self.count - MAX_WARNINGS} more", file=sys.stderr
            )
        if loader is not None and loader.truncated:
            print(
                f"{PROG}: note: {self.path}: the last line is cut short (the writer was killed?); "
                "unfinished nodes are shown as interrupted",
                file=sys.stderr,
            )


def _load(path: str, *, keep_details: bool) -> list[TraceTree]:
    from runtime.trace._tracefile import TraceLoader, open_trace
    from runtime.trace._tree import TraceSet

    warnings = _Warnings(path)
    traces = TraceSet(keep_details=keep_details)
    loader = TraceLoader(traces, name=path, on_error=warnings)
    with open_trace(path) as f:
        loader.load(f)
    traces.end()
    warnings.finish(loader)
    return traces.trees


def _console(args: argparse.Namespace, *, stderr: bool = False) -> Console:
    from rich.console import Console

    no_color = bool(getattr(args, "no_color", False)) or bool(os.environ.get("NO_COLOR"))
    console = Console(stderr=stderr, no_color=no_color, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # Piped output: whole lines, not cut at an invented 80 columns.
        console = Console(stderr=stderr, no_color=no_color, highlight=False, width=_PIPE_WIDTH)
    return console


def _color(args: argparse.Namespace, console: Console) -> bool:
    return not (
        getattr(args, "no_color", False) or console.no_color or console.color_system is None
    )


def _write_bytes(chunks: Iterable[bytes], output: str | None = None) -> None:
    if output is None:
        out = sys.stdout.buffer
        for chunk in chunks:
            out.write(chunk)
        out.flush()
        return
    with open(output, "wb") as f:
        for chunk in chunks:
            f.write(chunk)


# --------------------------------------------------------------------------- show


def _cmd_show(args: argparse.Namespace) -> int:
    trees = _load(args.file, keep_details=not args.json)
    if args.subtree is not None:
        trees = [t for t in trees if t.find(args.subtree) is not None]
        if not trees:
            raise _UsageError(f"no agent or tool call with id {args.subtree!r} in {args.file}")
    if args.json:
        _write_bytes(
            piece
            for tree in trees
            for piece in tree.iter_json(
                subtree=args.subtree, max_depth=args.max_depth, status=args.status
            )
        )
        return 0
    from runtime.trace._render import render_header, render_timeline, tree_lines

    console = _console(args)
    color = _color(args, console)
    for i, tree in enumerate(trees):
        if i:
            console.print()
        if args.timeline:
            console.print(render_header(tree, color=color))
            console.print(render_timeline(tree, color=color, max_depth=args.max_depth))
            continue
        lines = tree_lines(
            tree,
            subtree=args.subtree,
            max_depth=args.max_depth,
            status=args.status,
            color=color,
            spinner=False,
        )
        if console.is_terminal:
            for line in lines:
                console.print(line)
        else:
            # Piped: plain text as it comes (rich would only strip what it added).
            out = sys.stdout
            for line in lines:
                out.write(line.plain)
                out.write("\n")
            out.flush()
    return 0


# --------------------------------------------------------------------------- stats


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"sum": 0.0, "p50": 0.0, "max": 0.0}
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    p50 = ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {"sum": round(sum(ordered), 6), "p50": round(p50, 6), "max": round(ordered[-1], 6)}


class _Group:
    __slots__ = ("count", "durations", "input_tokens", "output_tokens", "statuses")

    def __init__(self) -> None:
        self.count = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.durations: list[float] = []
        self.statuses: dict[str, int] = {}

    def add(
        self, status: str, duration: float | None, input_tokens: int = 0, output_tokens: int = 0
    ) -> None:
        self.count += 1
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        if duration is not None:
            self.durations.append(duration)
        self.statuses[status] = self.statuses.get(status, 0) + 1

    def to_json(self, *, tokens: bool = True, statuses: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"count": self.count}
        if tokens:
            out["input_tokens"] = self.input_tokens
            out["output_tokens"] = self.output_tokens
        out["duration_s"] = _summary(self.durations)
        if statuses:
            out["statuses"] = dict(sorted(self.statuses.items()))
        return out


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total = 0.0
    end = -float("inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _critical_path(tree: TraceTree) -> list[tuple[int, AgentNode | ToolNode]]:
    """The chain of nodes that set the run's wall time, as ``(level, node)`` in time order.

    An agent's time is its turns one after another, each waiting for its slowest tool call:
    calls that overlap in time form one turn's parallel group, and the one that ended last
    held the agent up. So the path goes through that call of every group, and on into the
    sub-agent it started, the same way; it starts at the root agent that ended last.
    """
    from runtime.trace._tree import AgentNode

    last = tree.last_ts

    def end(node: AgentNode | ToolNode) -> float:
        start = node.started_ts
        return -math.inf if start is None else start + (node.elapsed(last) or 0.0)

    roots = tree.roots
    if not roots:
        return []
    path: list[tuple[int, AgentNode | ToolNode]] = []
    stack: list[tuple[int, AgentNode | ToolNode]] = [(0, max(roots, key=end))]
    while stack:
        level, node = stack.pop()
        path.append((level, node))
        if isinstance(node, AgentNode):
            calls = sorted(
                (c for c in node.children if c.started_ts is not None),
                key=lambda c: c.started_ts or 0.0,
            )
            critical: list[ToolNode] = []
            group_end = -math.inf
            for call in calls:
                if critical and (call.started_ts or 0.0) < group_end:
                    if end(call) > end(critical[-1]):
                        critical[-1] = call
                    group_end = max(group_end, end(call))
                else:
                    critical.append(call)
                    group_end = end(call)
            stack.extend((level + 1, call) for call in reversed(critical))
        else:
            stack.extend((level + 1, child) for child in reversed(node.children))
    return path


def run_stats(tree: TraceTree) -> dict[str, Any]:
    """The statistics of one run, as JSON-ready data (what ``trace stats --json`` prints)."""
    tree.rollup()
    last = tree.last_ts
    by_type: dict[str, _Group] = {}
    by_status: dict[str, _Group] = {}
    edges: list[tuple[float, int]] = []
    for agent in tree.agents.values():
        duration = agent.elapsed(last)
        for key, groups in ((agent.name, by_type), (agent.status, by_status)):
            group = groups.get(key)
            if group is None:
                group = groups[key] = _Group()
            group.add(agent.status, duration, agent.input_tokens, agent.output_tokens)
        if agent.started_ts is not None:
            edges.append((agent.started_ts, 1))
            edges.append((agent.started_ts + (duration or 0.0), -1))
    tools: dict[str, _Group] = {}
    waits: list[tuple[float, float]] = []
    requests = 0
    wait_sum = 0.0
    for tool in tree.tools.values():
        group = tools.get(tool.name)
        if group is None:
            group = tools[tool.name] = _Group()
        group.add(tool.status, tool.elapsed(last))
        intervals = tool.permission_intervals
        if intervals:
            requests += len(intervals)
            wait_sum += tool.permission_wait_s
            waits.extend(intervals)
    # Most agents at once: a sweep over start/end edges; an end sorts before a start at the
    # same instant, so a hand-over is not counted as overlap.
    edges.sort()
    running = peak = 0
    peak_at: float | None = None
    for ts, step in edges:
        running += step
        if running > peak:
            peak, peak_at = running, ts
    compactions = {
        "count": len(tree.compactions),
        "trim": sum(1 for c in tree.compactions if c.method == "trim"),
        "summary": sum(1 for c in tree.compactions if c.method == "summary"),
        "tokens_before": sum(c.tokens_before for c in tree.compactions),
        "tokens_after": sum(c.tokens_after for c in tree.compactions),
        "input_tokens": sum(c.input_tokens for c in tree.compactions),
        "output_tokens": sum(c.output_tokens for c in tree.compactions),
    }
    wall = tree.duration_s
    start = tree.started_ts
    wait_wall = _union_length(waits)
    path = _critical_path(tree)
    return {
        "run_id": tree.run_id,
        "status": tree.status,
        "wall_s": wall,
        "agents": len(tree.agents),
        "tool_calls": len(tree.tools),
        "input_tokens": tree.total_input_tokens,
        "output_tokens": tree.total_output_tokens,
        "by_agent_type": {k: g.to_json() for k, g in sorted(by_type.items())},
        "by_status": {k: g.to_json(statuses=False) for k, g in sorted(by_status.items())},
        "tools": {k: g.to_json(tokens=False) for k, g in sorted(tools.items())},
        "max_parallel_agents": {
            "count": peak,
            "at_s": None if peak_at is None or start is None else round(peak_at - start, 6),
        },
        "critical_path": [
            {
                "level": level,
                "kind": node.kind,
                "id": node.id,
                "name": node.name,
                "status": node.status,
                "start_s": None
                if node.started_ts is None or start is None
                else round(node.started_ts - start, 6),
                "duration_s": node.elapsed(last),
            }
            for level, node in path
        ],
        "permission_wait": {
            "requests": requests,
            "sum_s": round(wait_sum, 6),
            "wall_s": round(wait_wall, 6),
            "share_of_wall": round(wait_wall / wall, 4) if wall else 0.0,
        },
        "compactions": compactions,
    }


def _cmd_stats(args: argparse.Namespace) -> int:
    trees = _load(args.file, keep_details=False)
    stats = [run_stats(tree) for tree in trees]
    if args.json:
        import orjson

        _write_bytes([orjson.dumps({"runs": stats}, option=orjson.OPT_APPEND_NEWLINE)])
        return 0
    console = _console(args)
    for i, run in enumerate(stats):
        if i:
            console.print()
        _print_stats(console, run, color=_color(args, console))
    return 0


def _print_stats(console: Console, run: dict[str, Any], *, color: bool) -> None:
    from rich.table import Table
    from rich.text import Text

    from runtime.trace._render import fmt_duration, fmt_tokens

    bold = "bold" if color else ""
    head = Text(f"run {run['run_id']}", bold)
    head.append(
        f"  {run['status']}  wall {fmt_duration(run['wall_s'])}  {run['agents']} agents  "
        f"{run['tool_calls']} tool calls  tokens {fmt_tokens(run['input_tokens'])}→"
        f"{fmt_tokens(run['output_tokens'])}"
    )
    console.print(head)

    def table(
        title: str, first: str, rows: dict[str, Any], *, tokens: bool, statuses: bool
    ) -> None:
        t = Table(title=title, title_justify="left", box=None, header_style=bold, pad_edge=False)
        t.add_column(first)
        t.add_column("count", justify="right")
        if tokens:
            t.add_column("tokens in→out", justify="right")
        for col in ("Σ time", "p50", "max"):
            t.add_column(col, justify="right")
        if statuses:
            t.add_column("statuses")
        for key, g in rows.items():
            d = g["duration_s"]
            cells = [key, str(g["count"])]
            if tokens:
                cells.append(f"{fmt_tokens(g['input_tokens'])}→{fmt_tokens(g['output_tokens'])}")
            cells += [fmt_duration(d["sum"]), fmt_duration(d["p50"]), fmt_duration(d["max"])]
            if statuses:
                cells.append(" ".join(f"{s}:{n}" for s, n in g["statuses"].items()))
            t.add_row(*cells)
        console.print()
        console.print(t)

    table("agents by type", "type", run["by_agent_type"], tokens=True, statuses=True)
    table("agents by status", "status", run["by_status"], tokens=True, statuses=False)
    table("tool calls", "tool", run["tools"], tokens=False, statuses=True)
    peak = run["max_parallel_agents"]
    console.print()
    at = "" if peak["at_s"] is None else f" (at +{fmt_duration(peak['at_s'])})"
    console.print(f"most agents running at once: {peak['count']}{at}")
    wait = run["permission_wait"]
    share = f"{wait['share_of_wall'] * 100:.1f}%"
    console.print(
        f"waiting for permission: {fmt_duration(wait['wall_s'])} of wall time ({share}), "
        f"{wait['requests']} request(s), {fmt_duration(wait['sum_s'])} summed over calls"
    )
    comp = run["compactions"]
    if comp["count"]:
        console.print(
            f"context compactions: {comp['count']} ({comp['trim']} trim, {comp['summary']} "
            f"summary), {fmt_tokens(comp['tokens_before'])} → {fmt_tokens(comp['tokens_after'])}"
            f" tokens in all; summaries cost {fmt_tokens(comp['input_tokens'])}→"
            f"{fmt_tokens(comp['output_tokens'])} tokens"
        )
    console.print()
    console.print(Text("critical path", bold))
    for step in run["critical_path"]:
        indent = "  " * step["level"]
        start = "" if step["start_s"] is None else f"+{fmt_duration(step['start_s'])} "
        console.print(
            f"  {indent}{step['kind']} {step['name']} {step['id']}  {start}"
            f"{fmt_duration(step['duration_s'])} {step['status']}",
            soft_wrap=True,
        )


# --------------------------------------------------------------------------- export


def _cmd_export(args: argparse.Namespace) -> int:
    trees = _load(args.file, keep_details=False)
    if args.format == "mermaid":
        from runtime.trace._render import render_mermaid

        _write_bytes(_masked([render_mermaid(trees).encode()]), args.output)
        return 0
    from runtime.core._version import VERSION as __version__
    from runtime.trace._otlp import otlp_json_lines

    _write_bytes(_masked(otlp_json_lines(trees, version=__version__)), args.output)
    return 0


def _masked(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """*chunks* with this process's known secrets masked. A trace is masked as it is written;
    this also covers one written by an older version, or by a run that did not know a key."""
    from runtime.core._secrets import redact_text

    for chunk in chunks:
        text = chunk.decode("utf-8", "surrogateescape")
        masked = redact_text(text)
        yield chunk if masked == text else masked.encode("utf-8", "surrogateescape")


# --------------------------------------------------------------------------- tail


def _cmd_tail(args: argparse.Namespace) -> int:
    import trio

    from runtime.core._errors import TraceError

    if not os.path.exists(args.file):
        raise TraceError(f"{args.file}: no such file")
    try:
        return trio.run(_tail, args)
    except* KeyboardInterrupt:  # a Ctrl+C before the signal handler was in place
        pass
    return 130


async def _tail(args: argparse.Namespace) -> int:
    """Follow the file until every run in it has finished (0) or SIGINT arrives (130)."""
    import signal
    import time

    import trio

    from runtime.trace._render import event_line, render_tree
    from runtime.trace._tracefile import TraceLoader, follow_lines
    from runtime.trace._tree import TraceSet

    console = _console(args)
    color = _color(args, console)
    traces = TraceSet()
    warnings = _Warnings(args.file, defer=False)
    loader = TraceLoader(traces, name=args.file, on_error=warnings)
    outcome = 130
    live_view = console.is_terminal
    arrived = time.monotonic()

    def draw() -> Any:
        from rich.console import Group

        trees = traces.trees
        # Running nodes tick from the last event's time by the time since it arrived: right
        # for a live run, and no "26000h running" for an old file that stopped growing.
        last = max((t.last_ts for t in trees), default=-math.inf)
        now = last + (time.monotonic() - arrived) if math.isfinite(last) else time.time()
        room = console.height - 1
        parts = []
        for t in trees:
            # Too tall for the screen while running: only what runs, and the paths to it.
            tall = len(t.agents) + len(t.tools) + 1 > room and not t.ended
            parts.append(render_tree(t, now=now, color=color, status="running" if tall else None))
        return Group(*parts) if parts else f"waiting for events in {args.file}…"

    def finished() -> bool:
        trees = traces.trees
        return bool(trees) and all(t.run_status is not None for t in trees)

    async def follow(cancel_scope: trio.CancelScope, live: Any) -> None:
        nonlocal outcome
        nonlocal arrived
        async with follow_lines(args.file, poll_s=args.poll) as batches:
            async for batch in batches:
                arrived = time.monotonic()
                for lineno, line in batch:
                    fields = loader.feed(lineno, line)
                    if fields is None or live is not None:
                        continue
                    tree = traces.by_run.get(fields.get("run_id"))  # type: ignore[arg-type]
                    text = event_line(tree, fields) if tree is not None else None
                    if text is not None:
                        print(text, flush=True)
                if finished():
                    outcome = 0
                    cancel_scope.cancel("every run finished")

    async def refresh(live: Any) -> None:
        while True:
            live.update(draw(), refresh=True)
            await trio.sleep(0.125)

    with trio.open_signal_receiver(signal.SIGINT) as signals:
        live_cm: Any
        if live_view:
            from rich.live import Live

            live_cm = Live(draw(), console=console, auto_refresh=False, transient=False)
        else:
            from contextlib import nullcontext

            live_cm = nullcontext(None)
        with live_cm as live:
            async with trio.open_nursery() as nursery:

                async def on_sigint() -> None:
                    async for _ in signals:
                        nursery.cancel_scope.cancel("interrupted")
                        return

                nursery.start_soon(on_sigint)
                nursery.start_soon(follow, nursery.cancel_scope, live)
                if live is not None:
                    nursery.start_soon(refresh, live)
            if live is not None:
                live.update(draw(), refresh=True)
    warnings.finish(loader)
    return outcome
