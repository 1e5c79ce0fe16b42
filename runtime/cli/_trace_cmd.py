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
import functools
import gc
import itertools
import math
import os
import sys
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from runtime.core import NODE_STATUSES

if TYPE_CHECKING:
    from rich.console import Console

    from runtime.core import EventDecodeError
    from runtime.trace import TraceLoader, TraceTree

PROG: Final = "trio-agents trace"
_ERR_PROG: Final = "trio-agents"
"""What every error line starts with, whatever the command (``trio-agents: error: …``)."""
MAX_WARNINGS: Final = 20
"""Bad-line warnings printed before the rest are only counted."""
STATUSES: Final = NODE_STATUSES


_PIPE_WIDTH: Final = 400
_FILE_HELP: Final = "a trace (JSONL) written by run, demo or chat (--trace)"


class _UsageError(Exception):
    """Bad usage found after parsing (exit 2)."""


def _parser() -> argparse.ArgumentParser:
    from ._options import CliParser

    common = CliParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    # Every command takes -v; the trace commands print their warnings anyway.
    common.add_argument("-v", "--verbose", action="store_true", help=argparse.SUPPRESS)
    parser = CliParser(
        prog=PROG,
        description="Inspect a JSONL trace written by `trio-agents run` (or still being written).",
        parents=[common],
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=CliParser
    )

    show = sub.add_parser(
        "show",
        parents=[common],
        help="the tree of agents and tool calls",
        description="Draw "
        "the tree: agents with status, duration, tokens (own and Σ subtree), result or error; "
        "tool calls with their summary; cancels with reason and who asked.",
    )
    show.add_argument("file", metavar="FILE", help=_FILE_HELP)
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
        help="only nodes with status S, with their ancestors; S is one of: " + ", ".join(STATUSES),
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
    stats.add_argument("file", metavar="FILE", help=_FILE_HELP)
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
    tail.add_argument("file", metavar="FILE", help=_FILE_HELP + "; waited for if missing")
    tail.add_argument("--no-color", action="store_true", help="no colours")
    tail.add_argument("--poll", metavar="SECONDS", type=float, default=0.1, help=argparse.SUPPRESS)
    tail.set_defaults(func=_cmd_tail)

    export = sub.add_parser(
        "export",
        parents=[common],
        help="OTLP JSON spans, a Mermaid flowchart, or a scenario file",
        description="otlp-json: one OTLP ExportTraceServiceRequest per line (the collector's "
        "file format), GenAI semantic-convention attributes. mermaid: a flowchart TD. "
        "scenario: the recorded model turns as a scenario file for run --scenario "
        "(docs/replay.md); what it cannot hold is noted on stderr.",
    )
    export.add_argument("file", metavar="FILE", help=_FILE_HELP)
    export.add_argument("--format", required=True, choices=("otlp-json", "mermaid", "scenario"))
    export.add_argument(
        "--run", metavar="RUN_ID", help="scenario: the run, when FILE holds several"
    )
    export.add_argument("-o", "--output", metavar="OUT", help="write here instead of stdout")
    export.set_defaults(func=_cmd_export)

    view = sub.add_parser(
        "view",
        parents=[common],
        help="the trace as one web page (tree, timeline, events)",
        description="Write one self-contained HTML page (no network; open it from disk): the "
        "tree with statuses, durations, tokens and cost per subtree, a timeline of agents and "
        "tool calls, search and status filters, each node's events on a click "
        "(docs/observability.md#the-page).",
    )
    view.add_argument("file", metavar="FILE", help=_FILE_HELP)
    view.add_argument(
        "-o",
        "--output",
        metavar="PAGE",
        help="where to write the page (default: FILE with .html for .jsonl; - for stdout)",
    )
    view.set_defaults(func=_cmd_view)

    serve = sub.add_parser(
        "serve",
        parents=[common],
        help="the page of `trace view`, following a trace as it grows",
        description="Serve the page of `trace view` on 127.0.0.1 (never another address), "
        "updated while FILE grows: running nodes are shown running. The address, with a random "
        "token in its path, is printed on stderr. Ctrl+C stops it (exit 130).",
    )
    serve.add_argument("file", metavar="FILE", help=_FILE_HELP + "; waited for if missing")
    serve.add_argument(
        "--port", metavar="N", type=_port, default=0, help="the port (default: any free one)"
    )
    serve.add_argument("--open", action="store_true", help="open the page in a web browser")
    serve.set_defaults(func=_cmd_serve)
    return parser


def _port(text: str) -> int:
    value = _natural(text)
    if value > 65535:
        raise argparse.ArgumentTypeError("a port is at most 65535")
    return value


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
        if func is _cmd_tail or func is _cmd_serve:
            return func(args)
        with _one_shot_heap():
            return func(args)
    except _UsageError as exc:
        print(f"{_ERR_PROG}: error: {exc}", file=sys.stderr)
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
        from runtime.core import TraceError

        if args.debug:
            raise
        if isinstance(exc, TraceError):
            print(f"{_ERR_PROG}: error: {exc}", file=sys.stderr)
            return 2
        print(
            f"{_ERR_PROG}: error: internal error: {exc!r} (--debug shows where)", file=sys.stderr
        )
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
        from runtime.core import UnknownEventType

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
        line = f"{_ERR_PROG}: warning: {self.path}: {message}"
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
                f"{_ERR_PROG}: warning: {self.path}: {self.count - MAX_WARNINGS} more",
                file=sys.stderr,
            )
        if loader is not None and loader.truncated:
            print(
                f"{_ERR_PROG}: note: {self.path}: the last line is cut short (the writer was "
                "killed?); unfinished nodes are shown as interrupted",
                file=sys.stderr,
            )


def _load(path: str, *, keep_details: bool) -> list[TraceTree]:
    from runtime.trace import TraceLoader, TraceSet, open_trace

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
    try:
        with open(output, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
    except OSError as exc:
        raise _UsageError(f"-o {output}: cannot write: {exc.strerror or exc}") from None


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
    from runtime.trace import render_header, render_timeline, todo_lines, tree_lines

    console = _console(args)
    color = _color(args, console)
    for i, tree in enumerate(trees):
        if i:
            console.print()
        if args.timeline:
            console.print(render_header(tree, color=color))
            console.print(render_timeline(tree, color=color, max_depth=args.max_depth))
            continue
        lines = itertools.chain(
            tree_lines(
                tree,
                subtree=args.subtree,
                max_depth=args.max_depth,
                status=args.status,
                color=color,
                spinner=False,
            ),
            # Each agent's last todo list (docs/tools.md, "todo_write").
            (t.to_text() for t in todo_lines(tree, subtree=args.subtree, color=color)),
        )
        if console.is_terminal:
            for line in lines:
                # Whole lines, wrapped by the terminal: a tree to read, not a live region to fit.
                console.print(line.copy())
        else:
            # Piped: plain text as it comes (rich would only strip what it added).
            out = sys.stdout
            for line in lines:
                out.write(line.plain)
                out.write("\n")
            out.flush()
    return 0


# --------------------------------------------------------------------------- stats


def _cmd_stats(args: argparse.Namespace) -> int:
    from runtime.trace import run_stats

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

    from runtime.core import visible_strings
    from runtime.trace import fmt_duration, fmt_tokens, fmt_usd

    run = visible_strings(run)  # agent types, tool names, ids: the trace's words
    bold = "bold" if color else ""
    head = Text(f"run {run['run_id']}", bold)
    head.append(
        f"  {run['status']}  wall {fmt_duration(run['wall_s'])}  {run['agents']} agents  "
        f"{run['tool_calls']} tool calls  tokens {fmt_tokens(run['input_tokens'])}→"
        f"{fmt_tokens(run['output_tokens'])}  {fmt_usd(run['cost_usd'])}"
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
            t.add_column("cost", justify="right")
        for col in ("Σ time", "p50", "max"):
            t.add_column(col, justify="right")
        if statuses:
            t.add_column("statuses")
        for key, g in rows.items():
            d = g["duration_s"]
            cells = [key, str(g["count"])]
            if tokens:
                cells.append(f"{fmt_tokens(g['input_tokens'])}→{fmt_tokens(g['output_tokens'])}")
                cost = g["cost_usd"]
                cells.append("?" if cost is None else fmt_usd(cost))
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
    _print_rate_limits(console, run["rate_limits"])
    comp = run["compactions"]
    if comp["count"]:
        console.print(
            f"context compactions: {comp['count']} ({comp['trim']} trim, {comp['summary']} "
            f"summary), {fmt_tokens(comp['tokens_before'])} → {fmt_tokens(comp['tokens_after'])}"
            f" tokens in all; summaries cost {fmt_tokens(comp['input_tokens'])}→"
            f"{fmt_tokens(comp['output_tokens'])} tokens"
        )
    hooks = run["hooks"]
    if hooks["runs"]:  # docs/hooks.md#seeing-hooks
        console.print(
            f"hooks: {hooks['runs']} run(s), {hooks['blocked']} blocked, {hooks['failed']} "
            f"failed, {fmt_duration(hooks['duration_s'])} in all"
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


def _print_rate_limits(console: Console, rate: dict[str, Any]) -> None:
    """The waits at the endpoints' rate limits, and the subtrees that waited longest."""
    from runtime.trace import fmt_duration

    if not rate["agents_waited"]:
        return
    console.print(
        f"waiting for rate limits: {fmt_duration(rate['wait_s'])} summed over "
        f"{rate['agents_waited']} agent(s), {rate['refusals']} refusal(s) (429/529) met"
    )
    for sub in rate["by_subtree"][:_SUBTREES_SHOWN]:
        console.print(
            f"  {'  ' * sub['depth']}{sub['name']} {sub['id']} (subtree): "
            f"{fmt_duration(sub['wait_s'])} waited, {sub['refusals']} refusal(s)",
            soft_wrap=True,
        )
    if len(rate["by_subtree"]) > _SUBTREES_SHOWN:
        console.print(f"  … {len(rate['by_subtree']) - _SUBTREES_SHOWN} more (--json has all)")


_SUBTREES_SHOWN = 10


# --------------------------------------------------------------------------- export


def _cmd_export(args: argparse.Namespace) -> int:
    if args.output is not None:
        from ._options import UsageError, writable_path

        try:  # before the trace is read: a bad -o costs nothing
            writable_path(args.output, "-o", make_parents=False)
        except UsageError as exc:
            raise _UsageError(str(exc)) from None
    if args.format == "scenario":
        return _export_scenario(args)
    trees = _load(args.file, keep_details=False)
    if args.format == "mermaid":
        from runtime.trace import render_mermaid

        _write_bytes(_masked([render_mermaid(trees).encode()]), args.output)
        return 0
    from runtime.core import VERSION as __version__
    from runtime.trace import open_trace, otlp_json_lines, read_turns

    with open_trace(args.file) as f:  # a second pass, for the model calls (chat spans)
        turns = read_turns(f)
    lines = otlp_json_lines(trees, version=__version__, turns=turns)
    _write_bytes(_masked(lines), args.output)
    return 0


def _export_scenario(args: argparse.Namespace) -> int:
    import orjson

    from runtime.replay import export_scenario, load_recording

    rec = load_recording(args.file, run_id=args.run)
    scenario, notes = export_scenario(rec)
    data = orjson.dumps(scenario, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    _write_bytes(_masked([data]), args.output)
    for note in [*rec.notes, *notes]:
        print(f"{PROG}: note: {note}", file=sys.stderr)
    return 0


def _masked(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """*chunks* with this process's known secrets masked. A trace is masked as it is written;
    this also covers one written by an older version, or by a run that did not know a key."""
    from runtime.core import redact_text

    for chunk in chunks:
        text = chunk.decode("utf-8", "surrogateescape")
        masked = redact_text(text)
        yield chunk if masked == text else masked.encode("utf-8", "surrogateescape")


# --------------------------------------------------------------------------- view


def _cmd_view(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ._options import UsageError, writable_path

    output = args.output
    if output is None:
        source = Path(args.file)
        output = str(source.with_suffix(".html") if source.suffix else Path(f"{source}.html"))
    if output != "-":
        try:  # before the trace is read: a bad -o costs nothing
            writable_path(output, "-o", make_parents=False)
        except UsageError as exc:
            raise _UsageError(str(exc)) from None
    page = _view_page(args.file)
    if output == "-":
        _write_bytes([page])
        return 0
    _write_bytes([page], output)
    where = Path(output).resolve().as_uri()
    print(f"{PROG}: wrote {output} ({len(page) / 1024:,.0f} KiB); open {where}", file=sys.stderr)
    return 0


def _view_page(path: str) -> bytes:
    from runtime.trace import PageBuilder, open_trace, render_page

    warnings = _Warnings(path)
    builder = PageBuilder(name=path, on_error=warnings)
    with open_trace(path) as f:
        builder.feed_all(f)
    builder.end()
    warnings.finish(builder.loader)
    page = render_page(builder.data())
    # Masked as it was written; this also masks a trace from a run that did not know a key.
    return b"".join(_masked([page]))


def _cmd_serve(args: argparse.Namespace) -> int:
    import trio

    from runtime.core import TraceError

    from ._trace_serve import serve_until_interrupted

    folder = os.path.dirname(args.file) or "."
    if not os.path.exists(args.file) and not os.path.isdir(folder):
        raise TraceError(f"{args.file}: no such file, and no folder {folder!r} to wait in")
    if os.path.isdir(args.file):
        raise TraceError(f"{args.file}: is a folder, not a trace")
    warnings = _Warnings(args.file, defer=False)
    try:
        trio.run(
            functools.partial(
                serve_until_interrupted, args.file, port=args.port, open_browser=args.open,
                on_error=warnings,
            )
        )
    except* KeyboardInterrupt:  # a Ctrl+C before the signal handler was in place
        pass
    except* OSError as group:
        raise _UsageError(f"--port {args.port}: cannot listen: {_leaf(group)}") from None
    except* TraceError as group:
        raise _leaf(group) from None
    return 130


def _leaf(group: BaseExceptionGroup[Any]) -> BaseException:
    """The first exception in *group* that is not a group (nurseries nest them)."""
    first: BaseException = group
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


# --------------------------------------------------------------------------- tail


def _cmd_tail(args: argparse.Namespace) -> int:
    import trio

    from runtime.core import TraceError

    folder = os.path.dirname(args.file) or "."
    if not os.path.exists(args.file) and not os.path.isdir(folder):
        # A run may yet create the file, not its folder: that is a typo.
        raise TraceError(f"{args.file}: no such file, and no folder {folder!r} to wait in")
    if os.path.isdir(args.file):
        raise TraceError(f"{args.file}: is a folder, not a trace")
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

    from runtime.trace import TraceLoader, TraceSet, event_line, follow_lines, render_tree

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
        if parts:
            return Group(*parts)
        if not os.path.exists(args.file):
            return f"waiting for {args.file} to be created… (Ctrl+C to stop)"
        return f"waiting for events in {args.file}…"

    def finished() -> bool:
        trees = traces.trees
        return bool(trees) and all(t.run_status is not None for t in trees)

    async def follow(cancel_scope: trio.CancelScope, live: Any) -> None:
        nonlocal outcome
        nonlocal arrived
        trace = trio.Path(args.file)
        if not await trace.exists():
            # As `tail -F`: the run that writes it may not have started yet. Polled, as the
            # file is once it exists (no file-system notifications needed).
            if live is None and sys.stderr.isatty():
                print(f"waiting for {args.file} (Ctrl+C to stop)", file=sys.stderr, flush=True)
            while True:
                await trio.sleep(args.poll)
                if await trace.exists():
                    break
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
