"""``trio-agents resume TRACE``: a killed run goes on from its trace (docs/resume.md).

The run goes through the same session as ``run`` (live view, ``--json``, the Ctrl+C picker,
``--control``), opened with ``resume=``: every agent is rebuilt from the trace without a model
call or a tool run, and those the crash left running go on live. Before anything runs the
trace is checked (one line and exit 2 for what cannot be resumed; exit 0 for a run that
finished) and so is the workspace: a file a recorded call read or wrote that is not as it left
it stops the resume unless ``--force``. Exit codes as ``run``'s.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ._options import (
    EXIT_OK,
    EXIT_USAGE,
    PROG,
    RunOptions,
    UsageError,
    error_line,
    existing_file,
)

if TYPE_CHECKING:
    from runtime.replay import ResumeState
    from runtime.trace import TraceTree

MAX_LISTED = 20
"""The most changed files listed before a resume is refused."""


def note(text: str) -> None:
    """One ``trio-agents: resume: …`` line on stderr."""
    from runtime.core import visible

    print(f"{PROG}: resume: {visible(text)}", file=sys.stderr)


def cmd_resume(ns: argparse.Namespace, opts: RunOptions) -> int:
    """``trio-agents resume TRACE``; returns the exit code."""
    from runtime.core import AgentsError
    from runtime.replay import load_resume
    from runtime.trace import TraceTree

    from ._options import check_output_paths, run_command, setup_logging
    from ._replay import _recorded_defaults

    existing_file(opts.scenario, "--scenario")
    existing_file(opts.agents, "--agents")
    check_output_paths(opts)  # --trace NEW (an existing file is kept unless --force)
    tree = TraceTree()  # the live view starts from the run so far
    # What the trace is read into lives as long as the run: the cycle collector need not walk
    # it again and again (a trace of a million events leaves millions of objects;
    # bench/README.md, "Resume"), so it is frozen before the collector runs again: left on
    # after the reading, its first pass (of the youngest generation, which holds every object
    # made while it was off) walked them all once, a third of a second at a million events.
    # Only cyclic garbage is never freed once frozen, and the process ends with the run.
    gc.disable()
    try:
        state = load_resume(ns.trace_file, tree=tree)
    except AgentsError as exc:
        error_line(str(exc))
        return EXIT_USAGE
    finally:
        gc.freeze()
        gc.enable()
    rec = state.recording
    if state.finished:
        note(f"{ns.trace_file}: run {rec.run_id} finished ({rec.status}); nothing to resume")
        return EXIT_OK
    ns.mock_tools = False  # the recorded permission mode is taken as a replay's that runs tools
    opts = _recorded_defaults(ns, opts, rec, verb="resume")
    opts = _recorded_provider(opts, rec.config)
    setup_logging(opts.debug)

    async def main() -> int:
        return await _resume(ns, opts, state, tree)

    return run_command(main, debug=opts.debug)


def _recorded_provider(opts: RunOptions, config: dict[str, object]) -> RunOptions:
    """*opts* with the recorded provider (and scenario) when none is given."""
    if opts.provider is not None or opts.scenario is not None:
        return opts
    provider = config.get("provider")
    scenario = config.get("scenario")
    if provider == "scripted" and isinstance(scenario, str) and Path(scenario).is_file():
        return dataclasses.replace(opts, scenario=scenario)
    if provider in ("openai", "anthropic"):
        model = opts.model or config.get("model")
        return dataclasses.replace(
            opts, provider=provider, model=model if isinstance(model, str) else None
        )
    raise UsageError(
        f"the trace was recorded with provider {provider!r}: give --provider (and --model), "
        "or --scenario FILE for a scripted run"
    )


async def _check_workspace(state: ResumeState, workspace: Path, *, force: bool) -> None:
    """Say what changed since the recorded calls read or wrote the workspace.

    Raises:
        UsageError: something changed, and not *force*.
    """
    if not state.touched:  # no recorded read, write or edit: nothing to check
        return
    import trio

    from runtime._tools import builtin_tools
    from runtime.core import ToolContext, ToolLimits, get_logger, run_environ
    from runtime.replay import workspace_changes

    read_tool = next((t for t in builtin_tools() if t.name == "read"), None)
    ctx = ToolContext(
        workspace=Path(await trio.Path(workspace).resolve()),
        agent_id="resume-check",
        tool_use_id="resume-check",
        depth=0,
        env=run_environ(),
        limits=ToolLimits(),
        log=get_logger("trio_agents.resume"),
    )
    changes = await workspace_changes(state, workspace, read_tool, ctx)
    if not changes:
        return
    head = f"{len(changes)} file{'s' if len(changes) != 1 else ''} of {workspace} changed since"
    note(f"{head} the recorded calls read or wrote them:")
    for line in changes[:MAX_LISTED]:
        print(f"  {line}", file=sys.stderr)
    if len(changes) > MAX_LISTED:
        print(f"  … and {len(changes) - MAX_LISTED} more", file=sys.stderr)
    if not force:
        raise UsageError("the workspace is not as the run left it: --force resumes anyway")


def _summary(state: ResumeState, rerun: int, interrupted: int) -> str:
    rec = state.recording
    running = state.running_agents()
    done = len(rec.agents) - running
    gap = f"seq {state.last_seq}"
    return (
        f"run {rec.run_id} goes on after {gap}: {done} agent{'s' if done != 1 else ''} "
        f"finished, {running} go{'es' if running == 1 else ''} on; {rerun} interrupted call"
        f"{'s' if rerun != 1 else ''} run again (read-only or idempotent), {interrupted} "
        "reported to the model as interrupted"
    )


async def _resume(
    ns: argparse.Namespace, opts: RunOptions, state: ResumeState, tree: TraceTree
) -> int:
    import attrs

    from runtime.core import AgentType, default_agent_types, load_agent_types

    from ._options import open_session, run_config

    rec = state.recording
    await _check_workspace(state, Path(opts.workspace or "."), force=opts.trace.force)
    if state.cut_bytes:
        note(f"the last line of {ns.trace_file} was cut short by the crash: its "
             f"{state.cut_bytes} bytes are left out")
    # The trace names agent types, not what they were: types the user does not give
    # (--agents, --scenario) are plain types with every tool, as in a replay.
    types = load_agent_types(opts.agents) if opts.agents else []
    known = {t.name for t in (*types, *default_agent_types())}
    config = attrs.evolve(run_config(opts), resume=state)
    if opts.scenario is not None:
        from runtime.providers import Scenario

        scenario = Scenario.load(opts.scenario)  # read once: the run is given it, not its path
        known.update(scenario.agents)
        config = attrs.evolve(config, scenario=scenario)
    types += [
        AgentType(name=name, description="resumed from a trace")
        for name in sorted({a.name for a in rec.agents.values()} - known)
    ]
    config = attrs.evolve(config, agent_types=types)
    if opts.trace.path is None:
        config = attrs.evolve(config, trace=True)  # the same file, continued
    outcome = None
    async with open_session(opts, config=config, tree=tree) as session:
        resumer = session.rt._run.provider
        note(_summary(state, len(getattr(resumer, "rerun", ())),
                      len(getattr(resumer, "interrupted", ()))))
        for root in rec.roots:
            handle = await session.start_root(root.prompt, agent_type=root.name)
            outcome = await handle.wait()
            if session.aborted:
                break
    code = session.exit_code(outcome)
    if code != EXIT_OK and outcome is not None and not session.aborted:
        detail = f": {outcome.error}" if outcome.error else ""
        error_line(f"the {outcome.name} agent ended {outcome.status}{detail}")
    return code
