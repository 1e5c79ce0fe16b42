"""What ``run``, ``demo`` and ``chat`` share: their options, logging, and one CLI session.

A *session* (:func:`open_session`) is everything around a :class:`~runtime.Runtime` that a
command-line run needs, in one place so ``chat`` can reuse it::

    opts = options_from_args(namespace)
    async with open_session(opts) as session:      # runtime, view, Ctrl+C, prompts, --control
        handle = await session.start_root(prompt)
        outcome = await handle.wait()
    return session.exit_code(outcome)

The task tree of a session::

    open_session
    └── session nursery                      (cancelled once the runtime has closed)
        ├── serve_sigint        SIGINT → the picker (terminal) or an abort (no terminal / --json)
        ├── TerminalPrompts.run the one task that asks the terminal anything (picker, permissions)
        ├── LiveView.run        redraws the tree on a frame clock; PlainView.run flushes its lines
        └── serve_control       --control: one task per connected client
        open_runtime            (inside the nursery block, so the tasks above outlive its exit)

This module is imported for ``--help``: it imports only the standard library at the top; trio,
rich and the runtime are imported inside the functions that need them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn

if TYPE_CHECKING:
    from rich.console import Console

    from runtime.core._agent import AgentOutcome
    from runtime.core._runtime import AgentHandle, Runtime
    from runtime.trace._tree import TraceTree

    from ._keyboard import Keyboard
    from ._live import LiveView, PlainView
    from ._picker import TerminalPrompts

from ._exit import EXIT_ABORTED as EXIT_ABORTED
from ._exit import EXIT_FAILED as EXIT_FAILED
from ._exit import EXIT_OK as EXIT_OK
from ._exit import EXIT_USAGE as EXIT_USAGE
from ._exit import PROG as PROG
from ._exit import error_line as error_line
from ._exit import warning_line as warning_line

READER_GONE: Final = "stdout closed by its reader"
"""The cancel reason of a run whose stdout reader left (``| head``)."""

PERMISSION_MODES = ("ask", "auto-edit", "allow-all", "deny")
PROVIDERS = ("openai", "anthropic", "scripted")

# The Limits defaults, for --help (which must not import the runtime); a test keeps them equal.
DEFAULT_MAX_TURNS = 50
DEFAULT_MAX_DEPTH = 4
DEFAULT_MAX_PARALLEL = 1000
MAX_FPS_OPTION = 60.0
"""The most frames a second ``--fps`` may ask of the live view."""
GLOBAL_FLAGS = ("--debug", "-v", "--verbose")
"""Options every command takes, before or after its name."""


class UsageError(Exception):
    """Bad command-line usage found after parsing (exit 2); the message is one line."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs wrapped to the terminal, paragraph by paragraph; a paragraph
    with indented lines (a table, an example) is kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        out = []
        for paragraph in text.split("\n\n"):
            lines = paragraph.splitlines()
            if any(line[:1].isspace() for line in lines[1:]):
                out.append("\n".join(indent + line for line in lines))
            else:
                out.append(
                    textwrap.fill(
                        " ".join(paragraph.split()),
                        width,
                        initial_indent=indent,
                        subsequent_indent=indent,
                    )
                )
        return "\n\n".join(out)


class CliParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{PROG}: error: {message} (see {self.prog} --help)\n")


# -- options -------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text}")
    return value


def _fps(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected frames a second, got {text!r}") from None
    if not 0 < value <= MAX_FPS_OPTION:
        raise argparse.ArgumentTypeError(f"expected a number above 0, at most 60; got {text}")
    return value


def _env_name(text: str) -> str:
    from runtime.project._settings import env_names

    try:
        return env_names([text])[0]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _percent(text: str) -> float:
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage, got {text!r}") from None
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError(f"expected a percentage from 1 to 100, got {text}")
    return value / 100


def add_common_options(parser: argparse.ArgumentParser, *, demo: bool = False) -> None:
    """Add the options every running command (``run``, ``demo``, ``chat``) takes.

    They are described in docs/cli.md#options-of-run-demo-and-chat.

    Args:
        demo: word the help for ``demo``'s defaults (its own workspace, ``allow-all``).
    """
    g = parser.add_argument_group("model")
    if not demo:  # the demo plays its script on the scripted provider, and needs no model
        g.add_argument(
            "--provider",
            choices=PROVIDERS,
            help="the model provider (default: scripted with --scenario, else openai)",
        )
        g.add_argument("--model", help="the model name to ask the provider for")
    g.add_argument(
        "--scenario",
        metavar="FILE",
        help="play this scenario (JSON) instead of the built-in one"
        if demo
        else "a scripted-provider scenario (JSON); implies --provider scripted",
    )
    g.add_argument("--agents", metavar="FILE", help="agent types to add (TOML, [agents.NAME])")
    g = parser.add_argument_group("run")
    g.add_argument(
        "--workspace",
        metavar="DIR",
        help="the folder the tools work in"
        + (" (default: a fresh temporary project)" if demo else " (default: this folder)"),
    )
    trace = g.add_mutually_exclusive_group()
    trace.add_argument(
        "--trace",
        metavar="FILE",
        help="write the trace (JSONL) here (default: a new file under .trio-agents/traces/)",
    )
    trace.add_argument("--no-trace", action="store_true", help="write no trace file")
    g.add_argument(
        "--json",
        action="store_true",
        help="print every event as a JSON line on stdout, and nothing else there",
    )
    g.add_argument(
        "--max-turns",
        type=_positive_int,
        metavar="N",
        help=f"model turns per agent (default: {DEFAULT_MAX_TURNS})",
    )
    g.add_argument(
        "--max-depth",
        type=_positive_int,
        metavar="N",
        help="how deep sub-agents may nest: 1 lets only the main agent start them, 2 lets "
        f"those start their own, and so on (default: {DEFAULT_MAX_DEPTH})",
    )
    g.add_argument(
        "--max-parallel",
        type=_positive_int,
        metavar="N",
        help=f"sub-agents running at once in the whole run (default: {DEFAULT_MAX_PARALLEL})",
    )
    g.add_argument(
        "--context-window",
        type=_positive_int,
        metavar="N",
        help="every agent's context window in tokens (default: known from the model's name)",
    )
    g.add_argument(
        "--compact-threshold",
        type=_percent,
        metavar="PERCENT",
        help="compact an agent's history once it fills this much of the window (default: 80)",
    )
    g.add_argument(
        "--control",
        metavar="SOCK",
        help="serve a control socket (JSON lines: cancel, permission, message) at this path",
    )
    g.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="the Ray cluster for agent types placed on ray: host:port, or auto for the cluster "
        "this machine is a node of (default RAY_ADDRESS, else a private local cluster started "
        "for the run)",
    )
    g.add_argument(
        "--ray-hosts-per-node",
        type=_positive_int,
        metavar="N",
        help="Ray host actors (worker processes) per node (default 1)",
    )
    g.add_argument(
        "--ray-cpus-per-host",
        type=_positive_int,
        metavar="N",
        help="instead: one Ray host actor per N CPUs of a node",
    )
    g.add_argument(
        "--ray-strategy",
        choices=("spread", "pack"),
        help="spread: hosts on every node with CPUs (default); pack: on one node",
    )
    g.add_argument(
        "--fps",
        type=_fps,
        metavar="N",
        help="the most frames a second the live tree is redrawn on a terminal (default: 12)",
    )
    g.add_argument("--debug", action="store_true", help="debug logs and tracebacks on stderr")
    g.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="warnings on stderr too (retries, a sink that stopped writing); default: only the "
        "one-line outcome",
    )
    g = parser.add_argument_group("permissions")
    g.add_argument(
        "--permission-mode",
        choices=PERMISSION_MODES,
        help="allow-all in the demo's own workspace"
        if demo
        else "default: ask when stdin and stdout are terminals, else deny",
    )
    g.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="RULE",
        help="allow calls matching RULE without asking, e.g. 'bash(git status*)' (repeatable)",
    )
    g.add_argument(
        "--deny",
        action="append",
        default=[],
        metavar="RULE",
        help="refuse calls matching RULE, e.g. 'bash(rm *)' (repeatable)",
    )
    g.add_argument(
        "--allow-env",
        action="append",
        default=[],
        metavar="NAME",
        type=_env_name,
        help="let the tools see the environment variable NAME although it looks secret, e.g. "
        "GH_TOKEN for gh; its value is still masked in every event (repeatable)",
    )
    g.add_argument(
        "--permission-timeout",
        type=_positive_float,
        metavar="S",
        help="how long a permission question waits for an answer (default: 300)",
    )
    g = parser.add_argument_group(
        "sandbox",
        "bash is NOT confined by default: it runs as you, with your rights (files, network, "
        "keys); permission rules such as 'bash(rm *)' match the command's text only, a "
        "convenience, not a boundary. --sandbox is the boundary.",
    )
    g.add_argument(
        "--sandbox",
        action="store_true",
        help="run every bash call under bubblewrap (bwrap): the workspace read-write, a private "
        "/tmp, the rest read-only, ~/.ssh, ~/.aws and other secrets folders hidden, no network",
    )
    g.add_argument(
        "--sandbox-network",
        action="store_true",
        help="with --sandbox (implied): let sandboxed commands use the network",
    )
    add_mcp_options(parser)


def add_mcp_options(parser: argparse.ArgumentParser) -> None:
    """The MCP server options (docs/mcp.md), shared with ``mcp list``."""
    g = parser.add_argument_group("MCP servers")
    g.add_argument(
        "--mcp-config",
        action="append",
        default=[],
        metavar="FILE",
        help="MCP servers to add, in .mcp.json format; later files win (repeatable; the "
        "workspace's .mcp.json is read first)",
    )
    g.add_argument("--no-mcp", action="store_true", help="start no MCP server at all")
    g.add_argument(
        "--mcp-start-timeout",
        type=_positive_float,
        default=None,
        metavar="S",
        help="how long each MCP server may take to start (default: 30)",
    )


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """The common options, parsed and checked; see :func:`add_common_options`."""

    provider: str | None = None
    model: str | None = None
    scenario: str | None = None
    agents: str | None = None
    workspace: str | None = None
    trace: str | bool = True
    json: bool = False
    permission_mode: str | None = None
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    allow_env: tuple[str, ...] = ()
    permission_timeout_s: float = 300.0
    max_turns: int | None = None
    max_depth: int | None = None
    max_parallel: int | None = None
    context_window: int | None = None
    compact_threshold: float | None = None
    control: str | None = None
    ray_address: str | None = None
    ray: dict[str, Any] = field(default_factory=dict)
    """:class:`~runtime.RayOptions` fields given on the command line."""
    debug: bool = False
    verbose: bool = False
    mcp_config: tuple[str, ...] = ()
    no_mcp: bool = False
    mcp_start_timeout_s: float | None = None
    sandbox: bool = False
    sandbox_network: bool = False
    fps: float | None = None
    """The live view's most frames a second (None: its default)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """More :func:`~runtime.open_runtime` keyword arguments (a command's own)."""


def options_from_args(ns: argparse.Namespace) -> RunOptions:
    """Build :class:`RunOptions` from a namespace filled by :func:`add_common_options`.

    Raises:
        UsageError: options that contradict each other.
    """
    provider = getattr(ns, "provider", None)  # not an option of every command (demo)
    if ns.scenario is not None and provider not in (None, "scripted"):
        raise UsageError(
            f"--scenario runs the scripted provider; it cannot go with --provider {provider}"
        )
    if provider == "scripted" and ns.scenario is None:
        raise UsageError("--provider scripted needs --scenario FILE")
    trace: str | bool = False if ns.no_trace else (ns.trace if ns.trace is not None else True)
    return RunOptions(
        provider=provider,
        model=getattr(ns, "model", None),
        scenario=ns.scenario,
        agents=ns.agents,
        workspace=ns.workspace,
        trace=trace,
        json=ns.json,
        permission_mode=ns.permission_mode,
        allow=tuple(ns.allow),
        deny=tuple(ns.deny),
        allow_env=tuple(ns.allow_env),
        permission_timeout_s=300.0 if ns.permission_timeout is None else ns.permission_timeout,
        max_turns=ns.max_turns,
        max_depth=ns.max_depth,
        max_parallel=ns.max_parallel,
        context_window=ns.context_window,
        compact_threshold=ns.compact_threshold,
        control=ns.control,
        ray_address=ns.ray_address,
        ray={
            name: value
            for name, value in (
                ("hosts_per_node", ns.ray_hosts_per_node),
                ("cpus_per_host", ns.ray_cpus_per_host),
                ("strategy", ns.ray_strategy),
            )
            if value is not None
        },
        debug=ns.debug,
        verbose=getattr(ns, "verbose", False),
        mcp_config=tuple(ns.mcp_config),
        no_mcp=ns.no_mcp,
        mcp_start_timeout_s=ns.mcp_start_timeout,
        sandbox=ns.sandbox or ns.sandbox_network,
        sandbox_network=ns.sandbox_network,
        fps=getattr(ns, "fps", None),
    )


def stdio_is_terminal() -> bool:
    """Whether stdin and stdout are both terminals (someone can watch and answer)."""
    try:
        return os.isatty(sys.stdin.fileno()) and os.isatty(sys.stdout.fileno())
    except (AttributeError, ValueError, OSError):  # closed or replaced streams
        return False


def is_interactive(opts: RunOptions) -> bool:
    """Whether this run talks to a person: a terminal on stdin and stdout, and not ``--json``.

    Only then is there a Ctrl+C picker and permission questions on the terminal.
    """
    return not opts.json and stdio_is_terminal()


def shows_live_view(opts: RunOptions) -> bool:
    """Whether the live tree is drawn: stdout is a terminal and not ``--json`` (stdin may be a
    pipe, as with ``run -``: then there is a view but nobody to ask)."""
    if opts.json:
        return False
    try:
        return os.isatty(sys.stdout.fileno())
    except (AttributeError, ValueError, OSError):
        return False


def permission_mode(opts: RunOptions) -> str:
    """The mode to run with: the option, else ``ask`` on a terminal and ``deny`` otherwise."""
    if opts.permission_mode is not None:
        return opts.permission_mode
    return "ask" if stdio_is_terminal() else "deny"


def runtime_kwargs(opts: RunOptions) -> dict[str, Any]:
    """The :func:`~runtime.open_runtime` keyword arguments for *opts* (without taps/sinks).

    Raises:
        ConfigError: a bad agent-types file or limit (one line, naming the fault).
    """
    from runtime.core._agent_types import load_agent_types
    from runtime.core._limits import Limits

    # The limits given as options (the rest keep the runtime's defaults).
    limit_names = ("max_turns", "max_depth", "max_parallel", "context_window", "compact_threshold")
    limits = {n: getattr(opts, n) for n in limit_names if getattr(opts, n) is not None}
    kwargs: dict[str, Any] = {
        "provider": opts.provider,
        "scenario": opts.scenario,
        "model": opts.model,
        "agent_types": load_agent_types(opts.agents) if opts.agents else (),
        "workspace": opts.workspace or ".",
        "trace": opts.trace,
        "limits": Limits(**limits),
        "permission_mode": permission_mode(opts),
        "allow": opts.allow,
        "deny": opts.deny,
        "allow_env": opts.allow_env,
        "permission_timeout_s": opts.permission_timeout_s,
        "ray_address": opts.ray_address,
    }
    if not opts.no_mcp:
        kwargs["mcp_servers"] = load_mcp_options(opts)
    if opts.sandbox:
        from runtime.core._sandbox import Sandbox

        kwargs["sandbox"] = Sandbox(network=opts.sandbox_network)
    if opts.ray:
        from runtime.cluster._placement import RayOptions

        kwargs["ray"] = RayOptions(**opts.ray)
    kwargs.update(opts.extra)
    return kwargs


def load_mcp_options(opts: RunOptions) -> Any:
    """The MCP configuration of *opts*: the workspace's ``.mcp.json`` (if there), then each
    ``--mcp-config`` file; warnings go to stderr as one line each.

    Raises:
        ConfigError: a file that cannot be read or is malformed (naming it and the JSON path).
    """
    from runtime.mcp import DEFAULT_START_TIMEOUT_S, load_mcp_config

    return load_mcp_config(
        opts.mcp_config,
        optional=[Path(opts.workspace or ".") / ".mcp.json"],
        start_timeout_s=opts.mcp_start_timeout_s or DEFAULT_START_TIMEOUT_S,
        on_warning=warning_line,
    )


# -- logging -------------------------------------------------------------------------------


class _Stderr:
    """Writes to whatever ``sys.stderr`` is *now*: the live view swaps in a proxy that prints
    above the tree, and log lines must follow it instead of tearing the display."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _drop_all(_: Any, __: str, ___: dict[str, Any]) -> dict[str, Any]:
    import structlog

    raise structlog.DropEvent


def _drop_traceback(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    # Without --debug an error is one line: keep what went wrong, not where.
    exc_info = event_dict.pop("exc_info", None)
    if exc_info:
        exc = exc_info[1] if isinstance(exc_info, tuple) else sys.exc_info()[1]
        if isinstance(exc, BaseException):
            event_dict["error"] = f"{type(exc).__name__}: {exc}"
    return event_dict


_QUIET: Final = logging.CRITICAL + 10
"""Above every level: nothing is logged (stderr carries only the command's own lines)."""


def setup_logging(debug: bool, verbose: bool = False) -> None:
    """Send structlog (and stdlib logging) to stderr only: nothing by default, WARNING and up
    with *verbose* (``-v``), DEBUG with *debug*.

    Quiet by default: what a user needs (a retry, a failure) is in the view and the events;
    the one-line outcome is printed by the command. Stdout is left to the view or to
    ``--json`` events.
    """
    import structlog

    from runtime.core._secrets import RedactingLogFilter, redact_log_event

    level = logging.DEBUG if debug else logging.WARNING if verbose else _QUIET
    processors: list[Any] = [] if level <= logging.CRITICAL else [_drop_all]
    processors += [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="%H:%M:%S", utc=False),
    ]
    if debug:
        processors.append(structlog.processors.format_exc_info)
    else:
        processors.append(_drop_traceback)
    # Last before rendering: whatever the line holds by now (an error, a path) is masked.
    processors.append(redact_log_event)
    processors.append(
        structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback
        )
    )
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(min(level, logging.CRITICAL)),
        logger_factory=structlog.PrintLoggerFactory(file=_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(_Stderr())
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingLogFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


# -- errors and exit codes -----------------------------------------------------------------


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        out: list[BaseException] = []
        for inner in exc.exceptions:
            out.extend(_leaves(inner))
        return out
    return [exc]


def exit_code_for_exception(exc: BaseException, *, debug: bool) -> int:
    """Report an exception that ended a command and return its exit code.

    Bad input (usage, options, scenario or agent files) is one line and exit 2; Ctrl+C outside
    the session's own handling is exit 130; anything else is a bug: one line (the traceback with
    *debug*) and exit 1.
    """
    import traceback

    from runtime.core._errors import AgentsError

    leaves = _leaves(exc)
    if any(isinstance(e, KeyboardInterrupt) for e in leaves):
        return EXIT_ABORTED
    for e in leaves:
        if isinstance(e, UsageError | AgentsError):
            if debug:
                traceback.print_exception(e)
            error_line(str(e))
            return EXIT_USAGE
    if debug:
        traceback.print_exception(exc)
    first = leaves[0] if leaves else exc
    error_line(
        f"internal error: {type(first).__name__}: {first} (run with --debug for the traceback)"
    )
    return EXIT_FAILED


def run_command(main: Callable[[], Any], *, debug: bool) -> int:
    """Run ``trio.run(main)`` and turn its result or error into an exit code."""
    import trio

    try:
        code = trio.run(main)
    except BaseException as exc:  # the one place every failure becomes an exit code
        if isinstance(exc, SystemExit):
            raise
        return exit_code_for_exception(exc, debug=debug)
    return int(code)


# -- the session ---------------------------------------------------------------------------


class Session:
    """One command-line run around a :class:`~runtime.Runtime`; made by :func:`open_session`.

    Attributes:
        rt: the runtime.
        view: the live view (terminal) or plain-line view, None with ``--json``.
        tree: the run's tree, fed by every event (whatever the view).
        prompts: the terminal's question asker, None without a terminal.
        aborted: Ctrl+C (or ``q`` in the picker) aborted the run.
        interactive: a person is at the terminal (see :func:`is_interactive`).
    """

    def __init__(
        self,
        rt: Runtime,
        opts: RunOptions,
        view: LiveView | PlainView | None,
        prompts: TerminalPrompts | None,
        on_abort: Callable[[Session, str], Awaitable[None]] | None = None,
        tree: TraceTree | None = None,
    ) -> None:
        from runtime.trace._tree import TraceTree

        self.rt = rt
        self.opts = opts
        self.view = view
        self.tree = tree if tree is not None else view.tree if view is not None else TraceTree()
        self.prompts = prompts
        self.aborted = False
        self.reader_gone = False
        """Stdout is a pipe whose reader closed it (``| head``): the run was ended quietly."""
        self.interactive = prompts is not None
        self.abort_noun = "the run"
        """What an abort ends, in the picker's words (``chat``: the turn)."""
        self._on_abort = on_abort

    async def abort(self, reason: str = "run aborted by user (Ctrl+C)") -> None:
        """Abort the run: every running root agent (and so every node) ends ``cancelled``.

        A command may replace what an abort does (``chat`` cancels only the current turn) by
        passing ``on_abort`` to :func:`open_session`.

        Cancellation: a checkpoint while the cancel events are emitted.
        """
        if self._on_abort is not None:
            await self._on_abort(self, reason)
            return
        self.aborted = True
        await self.rt.abort(reason)

    async def start_root(self, prompt: str, **kwargs: Any) -> AgentHandle:
        """Start a root agent (:meth:`Runtime.start`) and apply an abort that came before it
        existed: Ctrl+C during start-up, or stdout's reader leaving after the first lines.

        Cancellation: as :meth:`Runtime.start`.
        """
        handle = await self.rt.start(prompt, **kwargs)
        if self.reader_gone:
            await self.rt.abort(READER_GONE, by="user")
        elif self.aborted:
            await self.rt.abort("run aborted by user (Ctrl+C)")
        return handle

    def exit_code(self, outcome: AgentOutcome | None) -> int:
        """0 when the root completed, 130 when aborted, 1 otherwise.

        A run ended because stdout's reader left (``| head``) exits 0, as ``cat`` does in a
        pipeline: the command the user sees is the reader's.
        """
        if self.reader_gone:
            return EXIT_OK
        if self.aborted:
            return EXIT_ABORTED
        if outcome is not None and outcome.status == "completed":
            return EXIT_OK
        return EXIT_FAILED


def make_console(*, stderr: bool = False) -> Console:
    """The rich console of the views (respects ``NO_COLOR``, ``TERM`` and the terminal width)."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


@asynccontextmanager
async def open_session(
    opts: RunOptions,
    *,
    console: Console | None = None,
    on_abort: Callable[[Session, str], Awaitable[None]] | None = None,
    interactive: bool | None = None,
    final_summary: bool = True,
    keyboard: Keyboard | None = None,
    view_held: bool = False,
) -> AsyncGenerator[Session, None]:
    """Open a runtime for *opts* with everything a command-line run needs around it.

    Around the runtime: SIGINT handled by a task (the picker on a terminal, else an abort), the
    live view on a terminal (or plain lines, or nothing with ``--json``), permission questions on
    the terminal in ``ask`` mode, and the ``--control`` socket. On leaving, running root agents
    are awaited (Ctrl+C still works meanwhile), the trace is closed, the view shows the final
    tree, and the control socket file is removed.

    Args:
        console: the console the view draws on (default: stdout).
        on_abort: what an abort does instead of ending the run (``chat``: cancel the turn).
        interactive: force (or deny) the terminal behaviour; default :func:`is_interactive`.
        final_summary: print the final tree, the answer and the trace path when done.
        keyboard: the chat's line editor, which already reads the terminal: the picker and the
            permission prompts ask through it instead of reading the terminal themselves.
        view_held: the live view starts held (no live region until ``view.release()``): the
            chat shows it only while a turn runs.

    Raises:
        ConfigError, ScenarioError: bad options or input files, before anything runs.

    Cancellation: cancelling the block cancels the run; every node still ends ``cancelled``.
    """
    import signal

    import trio

    from runtime.trace._tree import TraceTree
    from runtime.wiring._open import open_runtime

    from ._control import ControlServer
    from ._live import LiveView, PlainView
    from ._picker import TerminalPrompts, serve_sigint

    kwargs = runtime_kwargs(opts)
    if interactive is None:
        interactive = is_interactive(opts)
    tree = TraceTree()
    view: LiveView | PlainView | None = None
    if opts.json:
        kwargs["json_out"] = sys.stdout.buffer
    elif interactive or shows_live_view(opts):
        view = LiveView(tree, console or make_console(), held=view_held, fps=opts.fps)
    else:
        view = PlainView(tree, sys.stdout)

    prompts: TerminalPrompts | None = None
    if interactive and isinstance(view, LiveView):
        if keyboard is not None:
            prompts = TerminalPrompts(tree, view, None, keyboard=keyboard)
        else:
            prompts = TerminalPrompts.open_for_stdin(tree, view)
        view.watch(prompts.WATCHED, prompts.tap)

    # Runs for every event, inside whichever agent emitted it: tree updates and queueing only,
    # in as few calls as possible (a streaming run emits one event per word). The prompts see
    # their events after the tree: a question names the agent by its path.
    tap: Callable[[Any], None] = view.tap if view is not None else tree.apply

    control: ControlServer | None = None
    trace_path = None
    try:
        if opts.control:
            control = await ControlServer.bind(opts.control)  # a bad path fails before any run
        # The receiver is open before the first agent runs and until the last one has ended:
        # from here on Ctrl+C never raises KeyboardInterrupt, it is a message to serve_sigint.
        with trio.open_signal_receiver(signal.SIGINT) as sigint:
            async with trio.open_nursery() as nursery:
                try:
                    async with open_runtime(on_event=tap, **kwargs) as rt:
                        trace_path = rt.trace_path
                        session = Session(rt, opts, view, prompts, on_abort, tree)
                        if view is not None:
                            await nursery.start(view.run)
                        if prompts is not None:
                            await nursery.start(prompts.run, session)
                        nursery.start_soon(serve_sigint, sigint, session)
                        if _stdout_is_pipe():
                            nursery.start_soon(watch_stdout_reader, session)
                        if control is not None:
                            await nursery.start(control.serve, rt)
                        answerer = rt.permission_answerer() if prompts else nullcontext()
                        with answerer:
                            yield session
                finally:
                    nursery.cancel_scope.cancel(reason="the run is over")
    except BaseExceptionGroup as group:
        # The session's nursery wraps whatever the body or the runtime raised; a lone error
        # (a bad scenario, the caller's own exception) goes on as itself, so run_command maps
        # it to one clear line. Several errors stay a group (run_command reports the first).
        leaves = _leaves(group)
        if len(leaves) == 1:
            raise leaves[0] from None
        raise
    finally:
        if prompts is not None:
            prompts.close()
        if control is not None:
            control.close()
    if view is not None and final_summary:
        view.finish(trace_path=trace_path)


def _stdout_is_pipe() -> bool:
    import stat

    try:
        return stat.S_ISFIFO(os.fstat(sys.stdout.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):
        return False


async def watch_stdout_reader(session: Session) -> None:
    """End the run quietly once the reader of stdout (a pipe) has closed it, as ``cat`` ends
    under ``| head``: nobody will read what the run says, so it stops (every node ends
    ``cancelled``, the trace is complete) instead of working on unseen.

    The write end of a pipe never becomes readable: the event loop reports it so only when the
    pipe breaks (``POLLERR``), which is then checked with ``poll``.

    Cancellation: the way to stop it.
    """
    import select

    import trio

    fd = sys.stdout.fileno()
    while True:
        await trio.lowlevel.wait_readable(fd)
        poller = select.poll()
        poller.register(fd, 0)  # no events asked: only errors and hang-ups are reported
        if any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0)):
            break
        await trio.sleep(0.1)  # woken for another reason: look again, never spin
    session.reader_gone = True
    silence_stdout()
    await session.rt.abort(READER_GONE, by="user")  # a root not started yet: start_root


def silence_stdout() -> None:
    """Point stdout at /dev/null: its reader is gone, and Python's last flush would otherwise
    complain (``BrokenPipeError``) on stderr."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


async def run_prompt(opts: RunOptions, prompt: str, **session_kwargs: Any) -> int:
    """Run *prompt* in a CLI session (live view, Ctrl+C picker, prompts, control socket).

    Returns:
        The exit code: 0 completed, 1 ended otherwise, 130 aborted.

    Cancellation: cancels the run; every node ends ``cancelled``.
    """
    outcome = None
    async with open_session(opts, **session_kwargs) as session:
        handle = await session.start_root(prompt)
        outcome = await handle.wait()
    code = session.exit_code(outcome)
    report_outcome(session, outcome, code)
    return code


def report_outcome(session: Session, outcome: AgentOutcome | None, code: int) -> None:
    """One line on stderr when the run did not complete (the view already showed the rest)."""
    if session.reader_gone:
        return
    if code == EXIT_ABORTED:
        if not session.interactive:
            error_line("the run was aborted")
    elif code != EXIT_OK:
        if outcome is None:
            error_line("the run ended without an outcome")
        else:
            error = (outcome.error or "").removeprefix("cancelled: ")  # said once, not twice
            detail = f": {error}" if error else ""
            ended = _ENDED.get(outcome.status, outcome.status)
            error_line(f"the {outcome.name} agent {ended}{detail}")


_ENDED: Final = {
    "failed": "failed",
    "cancelled": "was cancelled",
    "max_turns": "stopped at its turn limit",
    "budget_exceeded": "ran out of budget",
}
"""How an agent that did not complete ended, in words (not ``ended failed``)."""


def check_control_path(path: str) -> None:
    """Refuse a ``--control`` path that cannot be a unix socket (too long for the OS).

    Raises:
        UsageError: naming the path.
    """
    if len(os.fsencode(path)) > 100:
        raise UsageError(
            f"--control {path}: the path is too long for a unix socket (max ~100 "
            "bytes); use a shorter one"
        )


def existing_file(path: str | None, option: str) -> None:
    """Fail early, with one line, when an input file does not exist."""
    if path is not None and not Path(path).is_file():
        raise UsageError(f"{option} {path}: no such file")


def writable_path(
    path: str | os.PathLike[str], option: str, *, folder: bool = False, make_parents: bool = True
) -> None:
    """Fail early, with one line naming the path and why, when an output path cannot be written.

    Checks what can be known before anything is written: the path is not a folder (or, with
    *folder*, not a file), the nearest existing folder above it is a folder we may write in,
    and (without *make_parents*) its parent folder exists. A failure found only while writing
    (a full disk) is still reported where the write happens.

    Args:
        option: how the user gave the path (``--trace``, ``-o``), for the message.
        folder: the path is a folder the command writes files into (``--sessions-dir``).
        make_parents: missing folders above the path are created by the command.

    Raises:
        UsageError: naming the path and the reason.
    """
    target = Path(path)
    where = f"{option} {os.fspath(path)}"
    if target.exists():
        if folder and not target.is_dir():
            raise UsageError(f"{where}: not a folder")
        if not folder and target.is_dir():
            raise UsageError(f"{where}: is a folder, not a file")
        probe = target if folder else target.parent
        if not os.access(probe, os.W_OK):
            raise UsageError(f"{where}: permission denied")
        return
    parent = target.parent
    if not make_parents and not parent.exists():
        raise UsageError(f"{where}: no such folder {os.fspath(parent)!r}")
    ancestor = parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UsageError(f"{where}: {os.fspath(ancestor)!r} is not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise UsageError(f"{where}: permission denied in {os.fspath(ancestor)!r}")


def check_output_paths(opts: RunOptions) -> None:
    """Check every output path of the common options (``--trace``, ``--control``).

    Raises:
        UsageError: one line naming the first path that cannot be written, and why.
    """
    if isinstance(opts.trace, str):
        writable_path(opts.trace, "--trace")
    if opts.control:
        check_control_path(opts.control)
        writable_path(opts.control, "--control", make_parents=False)
