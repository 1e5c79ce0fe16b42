"""The project's files on the command line: settings under the flags, and the ``agents``,
``config`` and ``run --show-system-prompt`` commands.

``run`` and ``chat`` call :func:`apply_project` on their command line: it reads the settings
files (flags over the workspace's file over the user's over the defaults: the one table of
settings, ``runtime/core/_config.py``, says what each key is), makes the frozen
:class:`RunOptions` from them, and loads the project (instructions, agent definitions, skills)
for :func:`~runtime.open_runtime`. Each file skipped or cut is one ``warning:`` line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.core import visible

from ._options import (
    RunOptions,
    UsageError,
    check_usage,
    effective_setting,
    flags_from_args,
    options_from_settings,
    stdio_is_terminal,
    warning_line,
)

if TYPE_CHECKING:
    from runtime.core import AgentTypes
    from runtime.project import Project, Settings


@contextmanager
def _usage_errors() -> Generator[None, None, None]:
    """A bad input file (the runtime's one-line errors) becomes a usage error: exit 2."""
    from runtime.core import AgentsError

    try:
        yield
    except AgentsError as exc:
        raise UsageError(str(exc)) from None


def _workspace(ns: argparse.Namespace) -> Path:
    workspace = Path(getattr(ns, "workspace", None) or ".").expanduser()
    if not workspace.is_dir():
        raise UsageError(f"workspace {str(workspace)!r} is not a folder")
    return workspace


def load_effective_settings(ns: argparse.Namespace) -> Settings:
    """The settings for the workspace of *ns* with its flags over them.

    Raises:
        UsageError: a bad settings file (file, line and key), workspace, or flags that
            contradict each other.
    """
    from runtime.project import load_settings

    from ._trust_cmd import settle, verdict_for

    flags = flags_from_args(ns)
    check_usage(flags)
    workspace = _workspace(ns)
    verdict = verdict_for(workspace)
    with _usage_errors():
        settings = load_settings(workspace.resolve(), flags=flags, trusted=verdict.trusted)
    # A run on a terminal asks; everything else (config, a pipe, --json) says what it ignored.
    can_ask = getattr(ns, "command", None) in ("run", "chat") and not getattr(ns, "json", False)
    if settle(settings, verdict, can_ask=can_ask and stdio_is_terminal()):
        with _usage_errors():
            settings = load_settings(workspace.resolve(), flags=flags, trusted=True)
    for line in settings.warnings:  # a hook's key this version does not know
        warning_line(line)
    return settings


def load_workspace_project(workspace: str | None, *, warn: bool = True) -> Project:
    """The project of *workspace*; its warnings printed on stderr (with *warn*)."""
    from runtime._tools import builtin_tools
    from runtime.project import load_project

    folder = Path(workspace or ".").expanduser()
    if not folder.is_dir():
        raise UsageError(f"workspace {str(folder)!r} is not a folder")
    project = load_project(folder, tools=[t.name for t in builtin_tools()])
    if warn:
        for line in project.warnings:
            warning_line(line)
    return project


def apply_project(ns: argparse.Namespace) -> RunOptions:
    """The run options of *ns* with the settings files under its flags, and the project
    loaded for the run.

    Raises:
        UsageError: a bad settings file or workspace.
    """
    settings = load_effective_settings(ns)
    project = load_workspace_project(settings["workspace"])
    with _usage_errors():  # a bad limit: one line
        return options_from_settings(settings, project=project, trusted=settings.trusted,
                                     hooks=settings.hooks)  # fmt: skip


# -- trio-agents run --show-system-prompt [TYPE] ---------------------------------------------


def agent_types_for(opts: RunOptions, project: Project) -> tuple[AgentTypes, list[str]]:
    """The run's agent types (built-ins, scenario, project files, ``--agents``) as
    :func:`~runtime.open_runtime` makes them, and the run's tool names."""
    import attrs

    from runtime._tools import builtin_tools
    from runtime.core import AgentTypes, load_agent_types
    from runtime.providers import Scenario, agent_types_from_scenario
    from runtime.wiring import tool_name_known

    tools = [t.name for t in builtin_tools()] + (["skill"] if project.skills else [])
    types = AgentTypes()
    if opts.scenario:
        for t in agent_types_from_scenario(Scenario.load(opts.scenario)):
            types.add(t)
    known = dict.fromkeys(tools)
    for t in project.agent_types:
        # As the run keeps them: MCP names and globs stay (their servers start with the run).
        kept = None if t.tools is None else tuple(n for n in t.tools if tool_name_known(n, known))
        types.add(attrs.evolve(t, tools=kept))
    for t in load_agent_types(opts.agents) if opts.agents else ():
        types.add(t)
    return types, tools


def show_system_prompt(opts: RunOptions, agent_type: str) -> int:
    """Print the system prompt an agent of *agent_type* would get in this run; exit 0.

    Raises:
        ConfigError: an unknown agent type or a bad input file (exit 2 by the caller).
    """
    project = _project_of(opts)
    with _usage_errors():
        types, tools = agent_types_for(opts, project)
        atype = types.lookup(agent_type)
    from runtime.core import select_tools

    # As a run gives them: MCP tools (their servers started and closed again here) go to a
    # type without a tool list, or to one whose list names or matches them.
    every = dict.fromkeys([*tools, *_mcp_tools(opts)])
    own_tools = list(every if atype.tools is None else select_tools(every, atype.tools))
    # The repository's words (instructions, descriptions, server instructions): shown, never
    # obeyed by the terminal.
    sys.stdout.write(visible(project.system_prompt()(atype, own_tools)) + "\n")
    return 0


def _mcp_tools(opts: RunOptions) -> list[str]:
    """The MCP tools a run with *opts* would have: its servers are started (as ``mcp list``
    does) and closed again; none without servers or with ``--no-mcp``."""
    from ._options import load_mcp_options

    if not load_mcp_options(opts).servers:
        return []
    import trio

    from ._mcp_cmd import mcp_tool_names

    return trio.run(mcp_tool_names, opts)


# -- trio-agents agents ----------------------------------------------------------------------


def _project_of(opts: RunOptions) -> Project:
    if opts.project is None:  # a caller's mistake, not the user's
        raise ValueError("the options have no project: made without apply_project")
    return opts.project


def _shown(path: Path, project: Project) -> str:
    for base, prefix in ((project.workspace, ""), (project.user_dir, "~config/")):
        try:
            return prefix + str(path.relative_to(base))
        except ValueError:
            continue
    return str(path)


def cmd_agents(opts: RunOptions, *, as_json: bool) -> int:
    """``trio-agents agents``: each known agent type, its tools, model and where it came from."""
    from runtime.core import default_agent_types

    project = _project_of(opts)
    with _usage_errors():
        types, _ = agent_types_for(opts, project)
    sources: dict[str, list[str]] = {t.name: ["built-in"] for t in default_agent_types()}
    if opts.scenario:
        from runtime.providers import Scenario

        for name in Scenario.load(opts.scenario).agents:  # loaded fine just above
            sources.setdefault(name, []).append(f"scenario {opts.scenario}")
    for d in project.agents:
        sources.setdefault(d.agent_type.name, []).append(_shown(d.path, project))
    if opts.agents:
        from runtime.core import load_agent_types

        for t in load_agent_types(opts.agents):
            sources.setdefault(t.name, []).append(f"--agents {opts.agents}")
    rows: list[dict[str, Any]] = []
    for name, t in types.items():
        rows.append({
            "name": name,
            "description": t.description,
            "tools": None if t.tools is None else list(t.tools),
            "model": t.model,
            "source": sources.get(name, ["?"]),
        })
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        tools = "all tools" if row["tools"] is None else ", ".join(row["tools"]) or "no tools"
        model = f"; model {row['model']}" if row["model"] else ""
        line = f"{row['name']}  ({tools}{model})  from {', refined by '.join(row['source'])}"
        print(visible(line, layout=False))
        if row["description"]:
            print(visible(f"    {_one_line(row['description'], 160)}", layout=False))
    return 0


def _one_line(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


# -- trio-agents config ----------------------------------------------------------------------


def _shown_item(item: Any) -> str:
    """One item of a list setting: a rule or a name as it is; a price row (``prices``) as
    ``MODEL (input_per_mtok=3, …)``."""
    if isinstance(item, tuple):
        model, row = item
        return f"{model} ({', '.join(f'{k}={v:g}' for k, v in row)})"
    return str(item)


def cmd_config(ns: argparse.Namespace, *, as_json: bool) -> int:
    """``trio-agents config``: every setting a file may set, its effective value and where it
    came from (the rows of the settings table with ``in_file``)."""
    from runtime.project import SETTINGS

    settings = load_effective_settings(ns)
    rows = [dict(zip(("key", "value", "source"), (n, *effective_setting(settings, n)), strict=True))
            for n in SETTINGS]
    if as_json:
        print(json.dumps({r["key"]: {"value": r["value"], "source": r["source"]} for r in rows},
                         indent=2))
        return 0
    width = max(len(r["key"]) for r in rows)
    for r in rows:
        value = r["value"]
        shown = "(unset)" if value is None else (
            ", ".join(map(_shown_item, value)) or "(none)" if isinstance(value, tuple) else
            str(value).lower() if isinstance(value, bool) else str(value)
        )
        print(visible(f"{r['key']:<{width}}  {shown}  [{r['source']}]", layout=False))
    files = ", ".join(str(f) for f in settings.files) or "none"
    print(visible(f"settings files read: {files}", layout=False))
    return 0
