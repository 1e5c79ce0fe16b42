"""``trio-agents replay TRACE``: a recorded run played again (docs/replay.md, docs/cli.md).

The run goes through the same session as ``run`` (live view, ``--json``, ``--trace``, the
Ctrl+C picker, ``--control``); only its provider is the trace's recorded model turns
(:class:`runtime.replay.Replayer`), and with ``--mock-tools`` its tools answer with their
recorded outputs. Exit codes as ``run``'s, and 1 when ``--strict`` found a divergence or the
recording ended before the run did (a killed run).
"""

from __future__ import annotations

import argparse
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
        "--force",
        action="store_true",
        help="run recorded writes for real in a workspace that is not a git repository or a "
        "temporary folder",
    )
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
    from runtime.core._errors import AgentsError
    from runtime.replay import load_recording

    from ._options import check_control_path, run_command, setup_logging

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
    if opts.control:
        check_control_path(opts.control)
    try:
        rec = load_recording(ns.trace_file, run_id=ns.run)
        until = rec.find_node(ns.until) if ns.until is not None else None
    except AgentsError as exc:
        error_line(str(exc))
        return EXIT_USAGE
    opts = _recorded_defaults(opts, rec)
    workspace = Path(opts.workspace or ".")
    if not ns.mock_tools:
        _check_workspace(rec, workspace, force=ns.force)
    for note in rec.notes:
        print(f"{PROG}: replay: note: {note}", file=sys.stderr)
    setup_logging(opts.debug)

    async def main() -> int:
        return await _replay(ns, opts, rec, until)

    return run_command(main, debug=opts.debug)


def _recorded_defaults(opts: RunOptions, rec: Recording) -> RunOptions:
    """*opts* with what the user left out taken from the recorded run's settings: its permission
    mode (but ``ask``, which stays the usual default), its allow and deny rules, its limits."""
    import attrs

    from runtime.core import ConfigError
    from runtime.core._limits import Limits

    config = rec.config
    changes: dict[str, Any] = {}
    mode = config.get("permission_mode")
    if opts.permission_mode is None and mode in ("auto-edit", "allow-all", "deny"):
        changes["permission_mode"] = mode
    rules = config.get("permission_rules")
    if not opts.allow and not opts.deny and isinstance(rules, dict):
        changes["allow"] = tuple(str(r) for r in rules.get("allow") or ())
        changes["deny"] = tuple(str(r) for r in rules.get("deny") or ())
    recorded = config.get("limits")
    if isinstance(recorded, dict):
        known = {a.name for a in attrs.fields(Limits)}
        values = {k: v for k, v in recorded.items() if k in known}
        for name in ("max_turns", "max_depth", "max_parallel", "context_window"):
            if getattr(opts, name) is not None:
                values[name] = getattr(opts, name)
        if opts.compact_threshold is not None:
            values["compact_threshold"] = opts.compact_threshold
        # Limits another version wrote that this one refuses: the usual defaults then. A bad
        # value (a crafted or damaged trace) is bad input: one line, exit 2.
        try:
            changes["extra"] = {**opts.extra, "limits": Limits(**values)}
        except ConfigError as exc:
            raise UsageError(f"the recorded run's limits cannot be used: {exc}") from exc
        except (TypeError, ValueError):
            pass
    return dataclasses.replace(opts, **changes)


def _writing_tools(rec: Recording) -> list[str]:
    from tools import builtin_tools

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

    from runtime.core._agent_types import AgentType, default_agent_types, load_agent_types
    from runtime.core._provider import Provider
    from runtime.replay import Replayer
    from tools import builtin_tools

    from ._options import EXIT_OK, open_session

    async with AsyncExitStack() as stack:
        cont: Provider | None = None
        if ns.continue_provider == "scripted":
            from runtime.providers._scenario import Scenario
            from runtime.providers._scripted import ScriptedProvider

            cont = ScriptedProvider(Scenario.load(str(opts.scenario)), id_prefix="tu-fork-")
        elif ns.continue_provider is not None:
            from runtime.core._secrets import run_environ
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
            from runtime.providers._scenario import Scenario

            known.update(Scenario.load(opts.scenario).agents)
        types += [
            AgentType(name=name, description="replayed from a trace")
            for name in sorted({a.name for a in rec.agents.values()} - known)
        ]
        extra: dict[str, Any] = {"provider": replayer, "agent_types": types}
        changes: dict[str, Any] = {}
        if ns.mock_tools:
            extra["tools"] = replayer.mock_tools(builtin_tools())
            changes["no_mcp"] = True  # MCP tools are mocked too: no server is started
        session_opts = dataclasses.replace(opts, extra={**opts.extra, **extra}, **changes)
        outcome = None
        async with open_session(session_opts) as session:
            replayer.attach(session.rt._run)  # the replay cancels nodes as the recording did
            for root in rec.roots:
                handle = await session.start_root(root.prompt, agent_type=root.name)
                outcome = await handle.wait()
                if session.aborted or replayer.stopped or replayer.halted:
                    break
            replayer.finish()
        code = session.exit_code(outcome)
    _report(replayer)
    if code == EXIT_OK and (replayer.stopped or replayer.halted):
        code = EXIT_FAILED
    if code != EXIT_OK and not replayer.stopped and not replayer.halted and outcome is not None:
        detail = f": {outcome.error}" if outcome.error else ""
        error_line(f"the {outcome.name} agent ended {outcome.status}{detail}")
    return code


def _report(replayer: Any) -> None:
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
        return
    print(
        f"{PROG}: replay: {count} divergence{'s' if count != 1 else ''} from the recording:",
        file=sys.stderr,
    )
    for div in replayer.divergences[:MAX_LISTED]:
        print(f"  {div}", file=sys.stderr)
    if count > MAX_LISTED:
        print(f"  … and {count - MAX_LISTED} more (replay_diverged events)", file=sys.stderr)
