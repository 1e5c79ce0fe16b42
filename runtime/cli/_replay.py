"""``trio-agents replay TRACE``: a recorded run played again (docs/replay.md, docs/cli.md).

The run goes through the same session as ``run`` (live view, ``--json``, ``--trace``, the
Ctrl+C picker, ``--control``); only its provider is the trace's recorded model turns
(:class:`runtime.replay.Replayer`), and with ``--mock-tools`` its tools answer with their
recorded outputs. Exit codes as ``run``'s, and 1 when ``--strict`` found a divergence or the
recording ended before the run did (a killed run).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._options import (
    EXIT_FAILED,
    EXIT_USAGE,
    PROG,
    PROVIDERS,
    RunOptions,
    UsageError,
    error_line,
    existing_file,
    warning_line,
)

if TYPE_CHECKING:
    from runtime.replay import Recording

MAX_LISTED = 20
"""The most divergences listed on stderr at the end (the trace holds them all)."""


def add_replay_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``replay`` besides the common ones (docs/cli.md#replay)."""
    g = parser.add_argument_group("replay")
    g.add_argument("--run", metavar="RUN_ID", help="the run to replay, when the file holds several")
    g.add_argument(
        "--mock-tools",
        action="store_true",
        help="tools return their recorded outputs instead of running (no side effects)",
    )
    g.add_argument(
        "--strict",
        action="store_true",
        help="end the run failed (exit 1) at the first divergence from the recording",
    )
    g.add_argument("--realtime", action="store_true", help="wait each model turn's recorded time")
    g.add_argument(
        "--until",
        metavar="NODE_ID",
        help="fork: replay up to (not including) this tool call (tool_use_id) or turn "
        "(AGENT_ID#N), then go on live with --continue-provider",
    )
    g.add_argument(
        "--continue-provider",
        choices=PROVIDERS,
        metavar="PROVIDER",
        help="with --until: the provider the fork continues with (openai, anthropic, or "
        "scripted with --scenario)",
    )


def cmd_replay(ns: argparse.Namespace, opts: RunOptions) -> int:
    """``trio-agents replay TRACE``; returns the exit code."""
    from runtime.core import AgentsError
    from runtime.replay import load_recording

    from ._options import check_output_paths, run_command, setup_logging

    if opts.provider is not None:
        raise UsageError(
            "replay plays the trace's recorded model turns; --provider has no place here "
            "(to go on live from a point, use --until with --continue-provider)"
        )
    if (ns.until is None) != (ns.continue_provider is None):
        raise UsageError("--until and --continue-provider go together (a fork needs both)")
    if opts.scenario is not None and ns.continue_provider != "scripted":
        raise UsageError("--scenario is for --continue-provider scripted only")
    if ns.continue_provider == "scripted" and opts.scenario is None:
        raise UsageError("--continue-provider scripted needs --scenario FILE")
    existing_file(opts.scenario, "--scenario")
    existing_file(opts.agents, "--agents")
    check_output_paths(opts)  # --trace (an existing trace is kept unless --force), --control
    try:
        rec = load_recording(ns.trace_file, run_id=ns.run)
        until = rec.find_node(ns.until) if ns.until is not None else None
    except AgentsError as exc:
        error_line(str(exc))
        return EXIT_USAGE
    opts = _recorded_defaults(ns, opts, rec)
    workspace = Path(opts.workspace or ".")
    if not ns.mock_tools:
        _check_workspace(rec, workspace, force=ns.force)
    for note in rec.notes:
        print(f"{PROG}: replay: note: {note}", file=sys.stderr)
    setup_logging(opts.debug)

    async def main() -> int:
        return await _replay(ns, opts, rec, until)

    return run_command(main, debug=opts.debug)


_ASK_STAYS_DEFAULT = "ask"
"""A recorded ``ask`` is not taken: the usual default (ask on a terminal, else deny) stays."""


def _recorded_defaults(
    ns: argparse.Namespace, opts: RunOptions, rec: Recording, *, verb: str = "replay"
) -> RunOptions:
    """*opts* with what the user left out taken from the recorded run: each row of the settings
    table with an ``event_key`` is read from the trace's ``run_started.config`` (its permission
    mode but ``ask``, its rules unless a flag gives rules, its limits) as a layer under the
    flags, each value checked as a settings file's is. A key this version does not know is
    ignored (another version's); a value it refuses is a usage error.

    Raises:
        UsageError: one line naming the trace, the key and what is wrong with its value.
    """
    from runtime.core import RULES, TABLE

    from ._options import flags_from_args, options_from_args

    flags = flags_from_args(ns)
    rules_given = any(flags.get(s.name) for s in TABLE if s.kind is RULES)
    recorded: dict[str, Any] = {}
    refused: list[str] = []
    for setting in TABLE:
        if setting.event_key is None or (rules_given and setting.kind is RULES):
            continue
        value = _dig(rec.config, setting.event_key)
        if value is None or value == _ASK_STAYS_DEFAULT:
            continue
        try:
            checked = setting.kind.check(value)
        except Exception as exc:  # a check's ValueError, a rule's ConfigError
            raise UsageError(
                f"{ns.trace_file}: run_started config {setting.event_key}: {exc}"
            ) from None
        if not ns.mock_tools and setting.group == "permissions" and setting.trust.loosens(
            setting.default, checked
        ):
            if verb == "resume" and flags.get(setting.name) is not None:
                continue  # given again: the flag stands, nothing to warn about
            # The tools run for real: a trace is a file anyone can write, so what it recorded
            # never widens what runs (docs/replay.md, "Permissions"); the user's own mode does.
            refused.append(f"{setting.name} = {_shown(checked)}")
            continue
        recorded[setting.name] = checked
    if refused:
        warning_line(
            f"{ns.trace_file} was recorded with {'; '.join(refused)}: not applied, since this "
            f"{verb} runs the tools for real; it uses your permission mode and rules (deny "
            "without a terminal): give --permission-mode or --allow"
            + (", or use --mock-tools" if verb == "replay" else " again")
        )
    replayed = options_from_args(ns, under=(f"recording {ns.trace_file}", recorded))
    replayed = _unsettable_limits(replayed, rec.config.get("limits"))
    return dataclasses.replace(replayed, project=opts.project, run_id=opts.run_id)


def _shown(value: Any) -> str:
    return "[" + ", ".join(map(str, value)) + "]" if isinstance(value, tuple) else str(value)


def _dig(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _unsettable_limits(opts: RunOptions, recorded: Any) -> RunOptions:
    """The recorded limits no setting reaches (mailbox size, result size, finish grace: the
    Python API's), as recorded."""
    import attrs

    from runtime.core import SCHEMA, Limits

    if not isinstance(recorded, dict):
        return opts
    others = {
        a.name: recorded[a.name]
        for a in attrs.fields(Limits)
        if a.name in recorded and f"limits.{a.name}" not in SCHEMA
    }
    with contextlib.suppress(TypeError, ValueError):  # another version's: the defaults then
        return dataclasses.replace(opts, limits=attrs.evolve(opts.limits, **others))
    return opts


def _writing_tools(rec: Recording) -> list[str]:
    from runtime._tools import builtin_tools

    safe = {t.name for t in builtin_tools() if t.read_only}
    return sorted({c.name for c in rec.calls.values() if c.name not in safe})


def _check_workspace(rec: Recording, workspace: Path, *, force: bool) -> None:
    """Say that tools run for real here; refuse recorded writes where nothing can undo them.

    Raises:
        UsageError: the recording writes (or runs commands) and *workspace* is neither in a git
            work tree nor under the temporary folder, and not *force*.
    """
    where = workspace.resolve()
    writers = _writing_tools(rec)
    print(
        f"{PROG}: replay: tools run for real in {where} (no fresh copy is made; "
        "--mock-tools returns the recorded outputs instead)",
        file=sys.stderr,
    )
    if not writers or force:
        return
    in_git = any((p / ".git").exists() for p in (where, *where.parents))
    tmp = Path(tempfile.gettempdir()).resolve()
    in_tmp = where == tmp or tmp in where.parents
    if not (in_git or in_tmp):
        raise UsageError(
            f"the recording runs {', '.join(writers)} calls, and {where} is not in a git "
            "repository or a temporary folder (nothing could undo them): use --mock-tools, "
            "replay in a git work tree or a copy, or --force"
        )


async def _replay(ns: argparse.Namespace, opts: RunOptions, rec: Recording, until: Any) -> int:
    from contextlib import AsyncExitStack

    import attrs

    from runtime._tools import builtin_tools
    from runtime.core import AgentType, Provider, default_agent_types, load_agent_types
    from runtime.replay import Replayer

    from ._options import EXIT_OK, open_session, run_config

    async with AsyncExitStack() as stack:
        cont: Provider | None = None
        if ns.continue_provider == "scripted":
            from runtime.providers import Scenario, ScriptedProvider

            cont = ScriptedProvider(Scenario.load(str(opts.scenario)), id_prefix="tu-fork-")
        elif ns.continue_provider is not None:
            from runtime.core import run_environ
            from runtime.providers import open_provider

            cont = await stack.enter_async_context(
                open_provider(ns.continue_provider, model=opts.model, env=run_environ())
            )
        replayer = Replayer(
            rec,
            strict=ns.strict,
            realtime=ns.realtime,
            until=until,
            until_id=ns.until,
            continue_with=cont,
        )
        # The trace names agent types, not what they were: types the user does not give
        # (--agents, --scenario) are replayed as plain types with every tool.
        types = load_agent_types(opts.agents) if opts.agents else []
        known = {t.name for t in (*types, *default_agent_types())}
        if opts.scenario is not None:
            from runtime.providers import Scenario

            known.update(Scenario.load(opts.scenario).agents)
        types += [
            AgentType(name=name, description="replayed from a trace")
            for name in sorted({a.name for a in rec.agents.values()} - known)
        ]
        if ns.mock_tools:  # MCP tools are mocked too: no server is started
            opts = dataclasses.replace(opts, mcp=dataclasses.replace(opts.mcp, enabled=False))
        config = attrs.evolve(run_config(opts), provider=replayer, agent_types=types)
        if ns.mock_tools:
            config = attrs.evolve(config, tools=replayer.mock_tools(builtin_tools()))
        outcome = None
        async with open_session(opts, config=config) as session:
            replayer.attach(session.rt._run)  # the replay cancels nodes as the recording did
            for root in rec.roots:
                handle = await session.start_root(root.prompt, agent_type=root.name)
                outcome = await handle.wait()
                if session.aborted or replayer.stopped or replayer.halted:
                    break
            replayer.finish()
        code = session.exit_code(outcome)
    _report(replayer, whole=not (session.aborted or session.reader_gone))
    if code == EXIT_OK and (replayer.stopped or replayer.halted):
        code = EXIT_FAILED
    if code != EXIT_OK and not replayer.stopped and not replayer.halted and outcome is not None:
        detail = f": {outcome.error}" if outcome.error else ""
        error_line(f"the {outcome.name} agent ended {outcome.status}{detail}")
    return code


def _report(replayer: Any, *, whole: bool) -> None:
    """The replay's closing lines on stderr: why it stopped, its divergences, or (*whole*: it
    ran to its end) that there was none."""
    if replayer.stopped:
        error_line(f"replay stopped: {replayer.stopped}")
    elif replayer.recording.killed and not replayer.halted:
        print(
            f"{PROG}: replay: note: the recording has no run_finished (the recorded run was "
            "killed) but every agent's turns were there: the replay ran to its end",
            file=sys.stderr,
        )
    if replayer.halted:
        error_line(f"replay diverged (--strict): {replayer.halted}")
        return
    count = replayer.divergence_count
    if not count:
        if whole and not replayer.forked:  # a fork's live turns are compared with nothing
            strict = " (--strict)" if replayer.strict else ""
            print(f"{PROG}: replay: no divergence from the recording{strict}", file=sys.stderr)
        return
    print(
        f"{PROG}: replay: {count} divergence{'s' if count != 1 else ''} from the recording:",
        file=sys.stderr,
    )
    for div in replayer.divergences[:MAX_LISTED]:
        print(f"  {div}", file=sys.stderr)
    if count > MAX_LISTED:
        print(f"  … and {count - MAX_LISTED} more (replay_diverged events)", file=sys.stderr)
