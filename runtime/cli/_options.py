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
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn

from runtime.core import GROUPS, SCHEMA, TABLE, Setting
from runtime.core import PERMISSION_MODES as PERMISSION_MODES
from runtime.core import PROVIDERS as PROVIDERS

if TYPE_CHECKING:
    import trio
    from rich.console import Console

    from runtime.core import AgentHandle, AgentOutcome, HookTable, Limits, Runtime
    from runtime.project import Project, Settings
    from runtime.trace import TraceTree
    from runtime.wiring import RunConfig

    from ._keyboard import Keyboard
    from ._live import LiveView, PlainView
    from ._picker import TerminalPrompts

from ._exit import EXIT_ABORTED as EXIT_ABORTED
from ._exit import EXIT_FAILED as EXIT_FAILED
from ._exit import EXIT_OK as EXIT_OK
from ._exit import EXIT_TERMINATED as EXIT_TERMINATED
from ._exit import EXIT_USAGE as EXIT_USAGE
from ._exit import PROG as PROG
from ._exit import TERMINATION
from ._exit import error_line as error_line
from ._exit import warning_line as warning_line

READER_GONE: Final = "stdout closed by its reader"
"""The cancel reason of a run whose stdout reader left (``| head``)."""

DEFAULT_MAX_TURNS: Final = SCHEMA["limits.max_turns"].default
DEFAULT_MAX_DEPTH: Final = SCHEMA["limits.max_depth"].default
DEFAULT_MAX_PARALLEL: Final = SCHEMA["limits.max_parallel"].default
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
#
# Every option below is a row of the one table of settings (runtime/core/_config.py): its flag,
# its kind (parse and check), its help and its default come from there, and its value lands in
# RunOptions at the row's dotted name (``limits.max_turns`` → ``opts.limits.max_turns``).


def _argparse_type(setting: Setting) -> Callable[[str], Any] | None:
    """The row's parse as an argparse ``type`` (its ``ValueError`` becomes argparse's one-line
    usage error naming the flag)."""
    parse = setting.kind.parse
    if parse is None:
        return None

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = setting.leaf  # argparse names it in its own messages
    return convert


def _help(setting: Setting, *, demo: bool) -> str:
    if demo and setting.demo_help:
        return setting.demo_help
    return setting.help


def _add_option(group: Any, setting: Setting, *, demo: bool) -> None:
    kwargs: dict[str, Any] = {"help": _help(setting, demo=demo)}
    if setting.flag_value is not None:  # a switch: given or not
        kwargs["action"] = "store_true"
    else:
        kwargs["type"] = _argparse_type(setting)
        kwargs["choices"] = setting.kind.choices
        # With choices, no metavar: argparse lists them ({ask,auto-edit,allow-all,deny}).
        kwargs["metavar"] = None if setting.kind.choices else (
            setting.metavar or setting.kind.metavar
        )
        if setting.merge == "append":
            kwargs.update(action="append", default=[])
    group.add_argument(*setting.flags, **kwargs)


def add_options(
    parser: argparse.ArgumentParser, groups: Iterable[str], *, demo: bool = False
) -> None:
    """Add the options of the table's *groups* (``model``, ``run``, ``permissions``,
    ``sandbox``, ``mcp``) to *parser*, one argument group each, in the table's order.

    Args:
        demo: word the help for ``demo``'s defaults, and leave out what it does not take.
    """
    for name in groups:
        title, description = GROUPS[name]
        group = parser.add_argument_group(title, description)
        exclusive: dict[str, Any] = {}
        for setting in TABLE:
            if setting.group != name or not setting.flags or (demo and setting.demo_help == ""):
                continue
            target = group
            if setting.exclusive:
                if setting.exclusive not in exclusive:
                    exclusive[setting.exclusive] = group.add_mutually_exclusive_group()
                target = exclusive[setting.exclusive]
            _add_option(target, setting, demo=demo)


def add_common_options(parser: argparse.ArgumentParser, *, demo: bool = False) -> None:
    """Add the options every running command (``run``, ``demo``, ``chat``) takes.

    They are described in docs/cli.md#options-of-run-demo-and-chat.

    Args:
        demo: word the help for ``demo``'s defaults (its own workspace, ``allow-all``).
    """
    add_options(parser, ("model", "run", "permissions", "sandbox", "mcp"), demo=demo)


def add_mcp_options(parser: argparse.ArgumentParser) -> None:
    """The MCP server options (docs/mcp.md), shared with ``mcp list``."""
    add_options(parser, ("mcp",))


@dataclass(frozen=True, kw_only=True)
class PermissionOptions:
    """``[permissions]``: see the rows ``permissions.*`` of the settings table."""

    mode: str | None = None
    """None: ``ask`` on a terminal, else ``deny`` (:func:`permission_mode`)."""
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    allow_env: tuple[str, ...] = ()
    timeout_s: float = SCHEMA["permissions.timeout_s"].default


@dataclass(frozen=True, kw_only=True)
class McpOptions:
    """``[mcp]``: more config files, whether servers start, how long they may take."""

    config: tuple[str, ...] = ()
    enabled: bool = True
    project_servers: tuple[str, ...] = ()
    start_timeout_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class SandboxOptions:
    """``[sandbox]``: bubblewrap around every ``bash`` call, and its network."""

    enabled: bool = False
    network: bool = False


@dataclass(frozen=True, kw_only=True)
class TraceOptions:
    """``[trace]``, and ``--trace FILE``."""

    path: str | None = None
    enabled: bool = True
    force: bool = False
    """Replace an existing ``--trace`` file (for ``replay``: also run writes for real outside a
    repository; docs/cli.md)."""
    dir: str = SCHEMA["trace.dir"].default

    @property
    def target(self) -> str | bool:
        """:func:`~runtime.open_runtime`'s ``trace``: the file given, else whether to write one."""
        return self.path if self.path is not None else self.enabled


@dataclass(frozen=True, kw_only=True)
class ViewOptions:
    """``[view]``: the live tree."""

    fps: float = SCHEMA["view.fps"].default


@dataclass(frozen=True, kw_only=True)
class RayCliOptions:
    """The ``--ray-*`` options (:class:`~runtime.RayOptions` fields given on the command line)."""

    address: str | None = None
    hosts_per_node: int | None = None
    cpus_per_host: int | None = None
    strategy: str | None = None


def _default_limits() -> Limits:
    from runtime.core import Limits

    return Limits()


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """What a running command was asked for, parsed and checked once, frozen.

    Its attributes are the rows of the settings table by their dotted names (``provider``,
    ``limits.max_turns``, ``permissions.mode``, …; :func:`options_from_settings` fills them),
    plus what a command loads for the run (the project) or names it (the run id).
    """

    provider: str | None = None
    model: str | None = None
    scenario: str | None = None
    agents: str | None = None
    workspace: str | None = None
    json: bool = False
    otlp: str | None = None
    """Where live spans go (``--otlp``); None: where the environment says."""
    control: str | None = None
    debug: bool = False
    verbose: bool = False
    permissions: PermissionOptions = field(default_factory=PermissionOptions)
    limits: Limits = field(default_factory=_default_limits)
    mcp: McpOptions = field(default_factory=McpOptions)
    sandbox: SandboxOptions = field(default_factory=SandboxOptions)
    trace: TraceOptions = field(default_factory=TraceOptions)
    view: ViewOptions = field(default_factory=ViewOptions)
    ray: RayCliOptions = field(default_factory=RayCliOptions)
    project: Project | None = None
    """The workspace's project files, loaded by ``run`` and ``chat`` (``cli/_project.py``)."""
    run_id: str | None = None
    """The run's id (``chat`` names its runs after the session); None: a new one."""
    trusted: bool = True
    """Whether the workspace is trusted (docs/configuration.md#trust): when not, its
    ``.mcp.json`` servers start only if approved by name (``mcp.project_servers``)."""
    middleware: tuple[object, ...] = ()
    """Layers around the run's tool and model calls (``demo``'s summary; docs/python-api.md)."""
    prices: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()
    """``[prices."MODEL"]`` rows of the settings files, in order (docs/costs.md)."""
    rate_limits: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()
    """``[rate_limits.NAME]`` of the settings files and ``--rate-limit`` entries, in order
    (docs/rate-limits.md)."""
    hooks: HookTable | None = None
    """The settings files' hooks (docs/hooks.md), read by ``run`` and ``chat``."""


def _make_limits(**values: Any) -> Limits:
    from runtime.core import Limits

    return Limits(**values)


_SECTIONS: Final[dict[str, Callable[..., Any]]] = {
    "permissions": PermissionOptions,
    "limits": _make_limits,
    "mcp": McpOptions,
    "sandbox": SandboxOptions,
    "trace": TraceOptions,
    "view": ViewOptions,
    "ray": RayCliOptions,
}
"""The class of each section of :class:`RunOptions` (a test checks it against the table)."""


def flags_from_args(ns: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line, by setting name (unset ones left out)."""
    out: dict[str, Any] = {}
    for setting in TABLE:
        if not setting.flags:
            continue
        value = getattr(ns, setting.dest, None)  # not every command takes every option
        if setting.flag_value is not None:
            value = setting.flag_value if value else None
        if value is None or value == []:
            continue
        out[setting.name] = tuple(value) if isinstance(value, list) else value
    return out


def check_usage(flags: Mapping[str, Any]) -> None:
    """Options that contradict each other on the command line.

    Raises:
        UsageError: naming both.
    """
    provider, scenario = flags.get("provider"), flags.get("scenario")
    if scenario is not None and provider not in (None, "scripted"):
        raise UsageError(
            f"--scenario runs the scripted provider; it cannot go with --provider {provider}"
        )
    if provider == "scripted" and scenario is None:
        raise UsageError("--provider scripted needs --scenario FILE")


def options_from_settings(settings: Settings, **loaded: Any) -> RunOptions:
    """The :class:`RunOptions` of effective *settings* (every row of the table).

    Two rules join rows: a scenario is the scripted provider whatever the files say, and
    ``sandbox.network`` implies ``sandbox.enabled`` (as on the command line).

    Args:
        loaded: the attributes that are not settings (``project``, ``run_id``).
    """
    values = {name: value.value for name, value in settings.values.items()}
    if values["scenario"] is not None and not settings.source("provider").startswith("flag"):
        values["provider"] = None
    if values["sandbox.network"]:
        values["sandbox.enabled"] = True
    sections: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        section, _, leaf = name.rpartition(".")
        sections.setdefault(section, {})[leaf] = value
    top = sections.pop("")
    made = {name: _SECTIONS[name](**fields) for name, fields in sections.items()}
    return RunOptions(**top, **made, **loaded)


def options_from_args(
    ns: argparse.Namespace, *, under: tuple[str, Mapping[str, Any]] | None = None
) -> RunOptions:
    """:class:`RunOptions` from the command line alone (defaults under the flags); ``run`` and
    ``chat`` put the settings files under the flags with
    :func:`runtime.cli._project.apply_project` instead.

    Args:
        under: ``(source, values)`` under the flags and over the defaults (``replay``: what the
            recorded run ran with).

    Raises:
        UsageError: options that contradict each other.
    """
    from runtime.project import load_settings

    flags = flags_from_args(ns)
    check_usage(flags)
    layers = [under] if under else []
    if getattr(ns, "command", None) == "demo":  # its own defaults (its own workspace)
        layers.insert(0, ("default of demo", {s.name: s.demo_default for s in TABLE
                                              if s.demo_default is not None}))
    return options_from_settings(load_settings(None, flags=flags, layers=layers))


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
    if opts.permissions.mode is not None:
        return opts.permissions.mode
    return "ask" if stdio_is_terminal() else "deny"


def effective_setting(settings: Settings, name: str) -> tuple[Any, str]:
    """A setting's value and source as a run would have them (``trio-agents config``): the
    defaults a run decides (the mode by the terminal, the provider and its model) in words."""
    value, source = settings[name], settings.source(name)
    if name == "permissions.mode" and source == "default":
        value = permission_mode(RunOptions())
        source = "default (" + (
            "stdin and stdout are terminals)" if stdio_is_terminal() else "no terminal)"
        )
    if name == "provider" and value is None:
        value, source = "openai", "default (scripted with --scenario)"
    if name == "model" and value is None:
        from runtime.providers import DEFAULT_MODELS

        provider = settings["provider"] or "openai"
        value, source = DEFAULT_MODELS.get(provider), f"default of {provider}"
    return value, source


def run_config(opts: RunOptions) -> RunConfig:
    """The :class:`~runtime.wiring.RunConfig` (what :func:`~runtime.open_runtime` takes) for
    *opts*, without taps or sinks: the files it names are read here (agent types, MCP config).

    Raises:
        ConfigError: a bad agent-types or MCP file (one line, naming the fault).
    """
    from runtime.core import load_agent_types
    from runtime.wiring import RunConfig

    sandbox: Any = False
    if opts.sandbox.enabled:
        from runtime.core import Sandbox

        sandbox = Sandbox(network=opts.sandbox.network)
    ray = None
    given = {k: v for k, v in vars(opts.ray).items() if k != "address" and v is not None}
    if given:
        from runtime.cluster import RayOptions

        ray = RayOptions(**given)
    return RunConfig(
        provider=opts.provider,
        scenario=opts.scenario,
        model=opts.model,
        agent_types=load_agent_types(opts.agents) if opts.agents else (),
        workspace=opts.workspace or ".",
        trace=opts.trace.target,
        trace_dir=opts.trace.dir,
        limits=opts.limits,
        permission_mode=permission_mode(opts),
        allow=opts.permissions.allow,
        deny=opts.permissions.deny,
        allow_env=opts.permissions.allow_env,
        permission_timeout_s=opts.permissions.timeout_s,
        ray_address=opts.ray.address,
        ray=ray,
        mcp_servers=load_mcp_options(opts),
        sandbox=sandbox,
        project=opts.project,
        run_id=opts.run_id,
        middleware=opts.middleware,
        otlp=opts.otlp,
        prices=_merged_rows(opts.prices),
        rate_limits=_merged_rows(opts.rate_limits),
        hooks=opts.hooks,
    )


def _merged_rows(
    rows: tuple[tuple[str, tuple[tuple[str, float], ...]], ...],
) -> dict[str, dict[str, float]] | None:
    """The settings' rows of prices or rate limits as ``open_runtime(prices=…,
    rate_limits=…)`` takes them: a later file's (or flag's) key wins over an earlier one's,
    for the same model (docs/costs.md) or endpoint (docs/rate-limits.md)."""
    out: dict[str, dict[str, float]] = {}
    for model, row in rows:
        out.setdefault(model, {}).update(row)
    return out or None


def load_mcp_options(opts: RunOptions) -> Any:
    """The MCP configuration of *opts*: the workspace's ``.mcp.json`` (if there), then each
    ``--mcp-config`` file; warnings go to stderr as one line each. With ``--no-mcp`` (or
    ``mcp.enabled = false``) none: no file is read and no server starts.

    Raises:
        ConfigError: a file that cannot be read or is malformed (naming it and the JSON path).
    """
    from runtime.mcp import DEFAULT_START_TIMEOUT_S, McpConfig, load_mcp_config

    if not opts.mcp.enabled:
        return McpConfig()

    project_file = Path(opts.workspace or ".") / ".mcp.json"
    config = load_mcp_config(
        opts.mcp.config,
        optional=[project_file],
        start_timeout_s=opts.mcp.start_timeout_s or DEFAULT_START_TIMEOUT_S,
        on_warning=warning_line,
    )
    if opts.trusted:
        return config
    # An untrusted workspace's own servers are commands and URLs the repository chose: none
    # starts (and no ${VAR} of theirs is expanded) unless the user approved it by name.
    kept: list[Any] = []
    held: list[Any] = []
    for server in config.servers:
        ours = Path(server.source).resolve() == project_file.resolve()
        (held if ours and server.name not in opts.mcp.project_servers else kept).append(server)
    if held:
        names = ", ".join(s.name for s in held)
        warning_line(
            f"not starting the MCP servers of {project_file} ({names}): the workspace is not "
            f"trusted; trust it with: trio-agents trust {Path(opts.workspace or '.').resolve()}"
        )
    import attrs

    return attrs.evolve(config, servers=tuple(kept))


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


# Library log lines the command line says itself, in its own words, once: the end of a run
# names the calls the permission mode denied (report_outcome), so the library's line would say
# it twice under -v.
_SAID_BY_THE_CLI = frozenset({"permission.denied_by_mode"})


def _drop_said_by_the_cli(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    if event_dict.get("event") in _SAID_BY_THE_CLI:
        import structlog

        raise structlog.DropEvent
    return event_dict


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

    Quiet, structlog is not even imported (the runtime's loggers then drop every line by the
    root logger's level, runtime/_logs.py), unless something imported it already: then it is
    configured to drop every line too (an earlier ``--debug`` run in this process may have
    configured it to print).
    """
    from runtime.core import RedactingLogFilter, redact_log_event

    level = logging.DEBUG if debug else logging.WARNING if verbose else _QUIET
    handler = logging.StreamHandler(_Stderr())
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingLogFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    if level > logging.CRITICAL and "structlog" not in sys.modules:
        return
    import structlog

    processors: list[Any] = [] if level <= logging.CRITICAL else [_drop_all]
    processors += [
        _drop_said_by_the_cli,
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

    from runtime.core import AgentsError

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
        code = exit_code_for_exception(exc, debug=debug)
    return EXIT_TERMINATED if TERMINATION.received else int(code)


async def serve_sigterm(
    signals: AsyncIterator[int], session: Session, scope: trio.CancelScope
) -> None:
    """SIGTERM ends the command as an abort does: every node ``cancelled``, the trace finished,
    MCP servers and bash calls stopped, exit 143 (a ``chat`` waiting at its prompt too: the
    session's scope is cancelled once the run is aborted).

    Cancellation: the way to stop it.
    """
    async for _ in signals:
        TERMINATION.received = True
        session.aborted = True
        await session.rt.abort("run terminated by SIGTERM")
        scope.cancel(reason="SIGTERM")


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
        from runtime.trace import TraceTree

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
    config: RunConfig | None = None,
    tree: TraceTree | None = None,
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
        config: the run's configuration, when the command changed what :func:`run_config`
            makes of *opts* (``replay``: its provider, types and tools).
        tree: the tree the view starts from (``resume``: the run so far, from its trace).

    Raises:
        ConfigError, ScenarioError: bad options or input files, before anything runs.

    Cancellation: cancelling the block cancels the run; every node still ends ``cancelled``.
    """
    import signal

    import attrs
    import trio

    from runtime.trace import TraceTree
    from runtime.wiring import open_run

    from ._control import ControlServer
    from ._live import announce_trace, print_outcome
    from ._picker import serve_sigint

    if config is None:
        config = run_config(opts)
    if interactive is None:
        interactive = is_interactive(opts)
    if opts.json:
        config = attrs.evolve(config, json_out=sys.stdout.buffer)
    tree = tree if tree is not None else TraceTree()
    view, prompts = _views(
        opts, tree, interactive=interactive, console=console, held=view_held, keyboard=keyboard,
        final_summary=final_summary,
    )

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
        with (
            trio.open_signal_receiver(signal.SIGINT) as sigint,
            trio.open_signal_receiver(signal.SIGTERM) as sigterm,
        ):
            async with trio.open_nursery() as nursery:
                try:
                    async with open_run(attrs.evolve(config, on_event=tap)) as rt:
                        trace_path = rt.trace_path
                        if final_summary:
                            announce_trace(trace_path, sys.stderr)
                        session = Session(rt, opts, view, prompts, on_abort, tree)
                        if view is not None:
                            await nursery.start(view.run)
                        if prompts is not None:
                            await nursery.start(prompts.run, session)
                        nursery.start_soon(serve_sigint, sigint, session)
                        nursery.start_soon(serve_sigterm, sigterm, session, nursery.cancel_scope)
                        if _stdout_is_pipe():
                            nursery.start_soon(watch_stdout_reader, session)
                        if control is not None:
                            await nursery.start(control.serve, rt)
                        answerer = rt.permission_answerer() if prompts else nullcontext()
                        # The terminal asks MCP servers' questions too (docs/mcp.md).
                        asker = rt.elicitation_answerer() if prompts else nullcontext()
                        with answerer, asker:
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
    if final_summary and not session.reader_gone:
        if view is not None:
            view.finish(trace_path=trace_path)
        else:  # --json: stdout holds the events only; the outcome goes to stderr all the same
            print_outcome(tree, trace_path, sys.stderr)


def _views(
    opts: RunOptions,
    tree: TraceTree,
    *,
    interactive: bool,
    console: Console | None,
    held: bool,
    keyboard: Keyboard | None,
    final_summary: bool = True,
) -> tuple[LiveView | PlainView | None, TerminalPrompts | None]:
    """The run's view (the live tree on a terminal, plain lines otherwise, none with
    ``--json``) and, for a person at a terminal, the prompts that ask through it."""
    from ._live import LiveView, PlainView
    from ._picker import TerminalPrompts

    view: LiveView | PlainView | None = None
    if opts.json:
        return None, None
    if interactive or shows_live_view(opts):
        # The one-line outcome goes to stderr whatever stdout is (docs/cli.md, "run").
        outcome = make_console(stderr=True) if final_summary else None
        view = LiveView(tree, console or make_console(), held=held, fps=opts.view.fps,
                        outcome=outcome)
    else:
        view = PlainView(tree, sys.stdout, outcome=sys.stderr)
    prompts: TerminalPrompts | None = None
    if interactive and isinstance(view, LiveView):
        if keyboard is not None:
            prompts = TerminalPrompts(tree, view, None, keyboard=keyboard)
        else:
            prompts = TerminalPrompts.open_for_stdin(tree, view)
        view.watch(prompts.WATCHED, prompts.tap)
    return view, prompts


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
    from ._live import denied_note

    note = denied_note(session.tree, permission_mode(session.opts))
    if note is not None:
        warning_line(note)
    if code == EXIT_ABORTED:
        if not session.interactive:
            error_line("the run was aborted")
    elif code != EXIT_OK:
        if outcome is None:
            error_line("the run ended without an outcome")
        else:
            error = outcome.cancel_reason or outcome.error  # "cancelled" said once, not twice
            detail = f": {error}" if error else ""
            ended = _ENDED.get(outcome.status, outcome.status)
            error_line(f"the {outcome.name} agent {ended}{detail}")


_ENDED: Final = {
    "failed": "failed",
    "cancelled": "was cancelled",
    "max_turns": "stopped at its turn limit",
    "budget_exceeded": "ran out of budget",
    "stopped": "was stopped",
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
    if opts.trace.path is not None:
        writable_path(opts.trace.path, "--trace")
        from runtime.trace import existing_trace

        held = existing_trace(Path(opts.trace.path))
        if held == "is being written by another run":
            raise UsageError(f"--trace {opts.trace.path} {held}; give this run another path")
        if held is not None and not opts.trace.force:
            raise UsageError(
                f"--trace {opts.trace.path} {held}; give another path, or --force to replace it"
            )
    if opts.control:
        check_control_path(opts.control)
        writable_path(opts.control, "--control", make_parents=False)
