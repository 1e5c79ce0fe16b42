"""The project's files on the command line: settings under the flags, and the ``agents``,
``config`` and ``run --show-system-prompt`` commands.

``run`` and ``chat`` call :func:`apply_project` on their options: it reads the settings files
(flags over the workspace's file over the user's over the defaults), fills every option the
command line left unset, and loads the project (instructions, agent definitions, skills) for
:func:`~runtime.open_runtime`. Each file skipped or cut is one ``warning:`` line on stderr.

A setting with a flag fills the :class:`RunOptions` field of that flag's name
(``--max-turns`` fills ``max_turns``): a new setting with a flag needs nothing here.
"""

from __future__ import annotations

import argparse
import dataclasses
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
    permission_mode,
    stdio_is_terminal,
    warning_line,
)

if TYPE_CHECKING:
    from runtime.core._agent_types import AgentTypes
    from runtime.project import Project, Settings

# Flags whose RunOptions field is not named after them.
_FIELD_OF_FLAG = {
    "--permission-timeout": "permission_timeout_s",
    "--no-trace": "trace",
    "--no-mcp": "no_mcp",
}


@contextmanager
def _usage_errors() -> Generator[None, None, None]:
    """A bad input file (the runtime's one-line errors) becomes a usage error: exit 2."""
    from runtime.core._errors import AgentsError

    try:
        yield
    except AgentsError as exc:
        raise UsageError(str(exc)) from None


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def flags_from_args(ns: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line, by setting name (unset ones left out)."""
    from runtime.project import SETTINGS

    out: dict[str, Any] = {}
    for name, setting in SETTINGS.items():
        if setting.flag is None:
            continue
        value = getattr(ns, _dest(setting.flag), None)
        if setting.flag in ("--no-trace", "--no-mcp"):
            value = False if value else None
        elif value is False:  # a switch not given (store_true): the files decide
            value = None
        if value is None or value == []:
            continue
        out[name] = tuple(value) if isinstance(value, list) else value
    return out


def load_effective_settings(opts: RunOptions, ns: argparse.Namespace) -> Settings:
    """The settings for *opts*' workspace with the flags of *ns* over them.

    Raises:
        UsageError: a bad settings file (file, line and key) or workspace.
    """
    from runtime.project import load_settings

    workspace = Path(opts.workspace or ".").expanduser()
    if not workspace.is_dir():
        raise UsageError(f"workspace {str(workspace)!r} is not a folder")
    with _usage_errors():
        return load_settings(workspace.resolve(), flags=flags_from_args(ns))


def load_workspace_project(opts: RunOptions, *, warn: bool = True) -> Project:
    """The project of *opts*' workspace; its warnings printed on stderr (with *warn*)."""
    from runtime.project import load_project
    from tools import builtin_tools

    workspace = Path(opts.workspace or ".").expanduser()
    if not workspace.is_dir():
        raise UsageError(f"workspace {str(workspace)!r} is not a folder")
    project = load_project(workspace, tools=[t.name for t in builtin_tools()])
    if warn:
        for line in project.warnings:
            warning_line(line)
    return project


def apply_project(opts: RunOptions, ns: argparse.Namespace) -> RunOptions:
    """*opts* with the settings under the flags, and the project loaded for the run.

    Raises:
        UsageError: a bad settings file or workspace.
    """
    from runtime.core._limits import Limits

    settings = load_effective_settings(opts, ns)
    fields = {f.name for f in dataclasses.fields(RunOptions)}
    changes: dict[str, Any] = {}
    for name, value in settings.values.items():
        flag = settings_flag(name)
        if flag is None or value.source == "default":
            continue
        field = _FIELD_OF_FLAG.get(flag, _dest(flag))
        if field not in fields:
            continue
        if name == "provider" and opts.scenario is not None:
            continue  # a scenario is the scripted provider, whatever the files say
        if field == "trace":  # trace.enabled = false, unless --trace FILE says otherwise
            if opts.trace is True:
                changes["trace"] = value.value
            continue
        if field == "no_mcp":  # mcp.enabled = false is --no-mcp
            changes["no_mcp"] = not value.value
            continue
        changes[field] = value.value
    if changes.get("sandbox_network"):
        changes["sandbox"] = True  # as on the command line: the network implies the sandbox
    limits = Limits(**{
        name.removeprefix("limits."): settings[name]
        for name in settings.values
        if name.startswith("limits.") and settings[name] is not None
    })
    extra = {
        **opts.extra,
        "project": load_workspace_project(opts),
        "trace_dir": settings["trace.dir"],
        "limits": limits,
    }
    return dataclasses.replace(opts, **changes, extra=extra)


def settings_flag(name: str) -> str | None:
    from runtime.project import SETTINGS

    return SETTINGS[name].flag


# -- trio-agents run --show-system-prompt [TYPE] ---------------------------------------------


def agent_types_for(opts: RunOptions, project: Project) -> tuple[AgentTypes, list[str]]:
    """The run's agent types (built-ins, scenario, project files, ``--agents``) as
    :func:`~runtime.open_runtime` makes them, and the run's tool names."""
    import attrs

    from runtime.core._agent_types import AgentTypes, load_agent_types
    from runtime.providers._scenario import Scenario, agent_types_from_scenario
    from runtime.wiring._open import tool_name_known
    from tools import builtin_tools

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
    project: Project = opts.extra["project"]
    with _usage_errors():
        types, tools = agent_types_for(opts, project)
        atype = types.lookup(agent_type)
    from runtime.core._loop import select_tools

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

    if opts.no_mcp or not load_mcp_options(opts).servers:
        return []
    import trio

    from ._mcp_cmd import mcp_tool_names

    return trio.run(mcp_tool_names, opts)


# -- trio-agents agents ----------------------------------------------------------------------


def _shown(path: Path, project: Project) -> str:
    for base, prefix in ((project.workspace, ""), (project.user_dir, "~config/")):
        try:
            return prefix + str(path.relative_to(base))
        except ValueError:
            continue
    return str(path)


def cmd_agents(opts: RunOptions, *, as_json: bool) -> int:
    """``trio-agents agents``: each known agent type, its tools, model and where it came from."""
    from runtime.core._agent_types import default_agent_types

    project: Project = opts.extra["project"]
    with _usage_errors():
        types, _ = agent_types_for(opts, project)
    sources: dict[str, list[str]] = {t.name: ["built-in"] for t in default_agent_types()}
    if opts.scenario:
        from runtime.providers._scenario import Scenario

        for name in Scenario.load(opts.scenario).agents:  # loaded fine just above
            sources.setdefault(name, []).append(f"scenario {opts.scenario}")
    for d in project.agents:
        sources.setdefault(d.agent_type.name, []).append(_shown(d.path, project))
    if opts.agents:
        from runtime.core._agent_types import load_agent_types

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


def cmd_config(opts: RunOptions, ns: argparse.Namespace, *, as_json: bool) -> int:
    """``trio-agents config``: every setting's effective value and where it came from."""
    from runtime.project import SETTINGS

    settings = load_effective_settings(opts, ns)
    rows: list[dict[str, Any]] = []
    for name in SETTINGS:
        value, source = settings[name], settings.source(name)
        if name == "permissions.mode" and source == "default":
            value = permission_mode(dataclasses.replace(opts, permission_mode=None))
            source = "default (" + (
                "stdin and stdout are terminals)" if stdio_is_terminal() else "no terminal)"
            )
        if name == "provider" and value is None:
            value, source = "openai", "default (scripted with --scenario)"
        if name == "model" and value is None:
            from runtime.providers import DEFAULT_MODELS

            provider = settings["provider"] or "openai"
            value, source = DEFAULT_MODELS.get(provider), f"default of {provider}"
        rows.append({"key": name, "value": value, "source": source})
    if as_json:
        print(json.dumps({r["key"]: {"value": r["value"], "source": r["source"]} for r in rows},
                         indent=2))
        return 0
    width = max(len(r["key"]) for r in rows)
    for r in rows:
        value = r["value"]
        shown = "(unset)" if value is None else (
            ", ".join(value) or "(none)" if isinstance(value, tuple) else
            str(value).lower() if isinstance(value, bool) else str(value)
        )
        print(visible(f"{r['key']:<{width}}  {shown}  [{r['source']}]", layout=False))
    files = ", ".join(str(f) for f in settings.files) or "none"
    print(visible(f"settings files read: {files}", layout=False))
    return 0
