"""Agent definitions as Markdown, in Claude Code's format.

``.claude/agents/*.md`` and ``.trio-agents/agents/*.md`` in the workspace, and ``agents/*.md``
in the user's config folder::

    ---
    name: reviewer
    description: Reviews a diff for bugs; use it after a change.
    tools: Read, Grep, Glob        # or a YAML list; omitted: every tool
    model: inherit                 # or a model name
    isolation: worktree            # optional: a git worktree of its own (docs/worktrees.md)
    ---
    You review code. ...           (the body is the system prompt)

Claude Code's tool names map to ours (:data:`CLAUDE_TOOLS`); a name with no counterpart is
reported once and skipped. Our own keys of the TOML format (``max_turns``, ``budget``,
``placement``, ``output_type``, ``output_retries``) may be given too, and Claude Code's
``isolation: worktree``. Keys Claude Code knows
and we do not (``color``, ``permissionMode``, ``hooks``, ...) are ignored: nothing in a
definition grants a permission.
``disallowedTools`` is honoured (it only takes tools away).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any

import attrs

from runtime.core import AgentType, ConfigError, agent_types_from_mapping

from ._files import ProjectFileError, inside, read_text_capped, split_front_matter

MAX_DEFINITION_BYTES = 256 * 1024
MAX_DEFINITIONS = 256
MAX_DESCRIPTION_CHARS = 1024

CLAUDE_TOOLS: dict[str, str] = {
    "Read": "read",
    "Bash": "bash",
    "Edit": "edit",
    "MultiEdit": "edit",
    "Write": "write",
    "Glob": "glob",
    "Grep": "grep",
    "Task": "agent",
    "Agent": "agent",
    "Skill": "skill",
    "SendMessage": "send_message",
    "TodoWrite": "todo_write",
}
"""Claude Code's tool names and ours."""

# Claude Code's model aliases: another vendor's names, meaning "a model of that size"; here
# they (and ``inherit``) mean the run's model.
_INHERIT = {"inherit", "sonnet", "opus", "haiku"}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_OURS = ("max_turns", "budget", "placement", "output_type", "output_retries", "isolation")


@attrs.frozen
class AgentDefinition:
    """An agent type and the file it was read from."""

    agent_type: AgentType
    path: Path


@attrs.define
class ToolNames:
    """Maps tool names of definitions to the run's, reporting each unknown name once."""

    known: Collection[str]
    warn: Callable[[str], None]
    reported: set[str] = attrs.Factory(set)

    def map(self, names: Iterable[str], path: Path) -> tuple[str, ...]:
        out: list[str] = []
        for raw in names:
            name = raw.strip()
            if not name:
                continue
            ours = CLAUDE_TOOLS.get(name, name)
            if ours in self.known or ours.startswith("mcp__"):
                if ours not in out:
                    out.append(ours)
            elif name not in self.reported:
                self.reported.add(name)
                self.warn(f"{path}: tool {name!r} is not available here; skipped")
        return tuple(out)


def _tool_list(value: Any, key: str) -> list[str]:
    if isinstance(value, str):
        return value.split(",")
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise ConfigError(f"{key}: expected a comma-separated string or a list of tool names")


def read_definition(path: Path, tools: ToolNames) -> AgentType:
    """One agent definition file.

    Raises:
        ProjectFileError: unreadable, no front matter or not YAML, no ``name``, a bad value.
    """
    content = read_text_capped(path, MAX_DEFINITION_BYTES)
    if content.truncated:
        raise ProjectFileError(f"{path}: over {MAX_DEFINITION_BYTES // 1024} KiB")
    fm = split_front_matter(content.text, path)
    if not fm.present:
        raise ProjectFileError(f"{path}: no front matter (a '---' block with name, description)")
    data = fm.data
    name = data.get("name")
    if name is None or name == "":
        raise ProjectFileError(f"{path}: the front matter has no name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ProjectFileError(
            f"{path}: name {name!r}: expected letters, digits, '-', '_' or '.' (up to 64)"
        )
    spec: dict[str, Any] = {}
    try:
        if "description" in data:
            desc = data["description"]
            if not isinstance(desc, str | int | float) or isinstance(desc, bool):
                raise ConfigError("description: expected a string")
            desc = " ".join(str(desc).replace("\\n", "\n").split())
            if len(desc) > MAX_DESCRIPTION_CHARS:
                desc = desc[: MAX_DESCRIPTION_CHARS - 1] + "…"
            spec["description"] = desc
        if fm.body.strip():
            spec["system"] = fm.body.strip()
        if data.get("model") is not None:
            model = data["model"]
            if not isinstance(model, str):
                raise ConfigError("model: expected a string")
            if model.strip().lower() not in _INHERIT:
                spec["model"] = model.strip()
        if data.get("tools") is not None:
            spec["tools"] = list(tools.map(_tool_list(data["tools"], "tools"), path))
        if data.get("disallowedTools") is not None:
            banned = set(tools.map(_tool_list(data["disallowedTools"], "disallowedTools"), path))
            allowed = spec.get("tools", sorted(tools.known))
            spec["tools"] = [t for t in allowed if t not in banned]
        for key in _OURS:
            if key in data:
                spec[key] = data[key]
        [agent_type] = agent_types_from_mapping({"agents": {name: spec}})
    except ConfigError as exc:
        raise ProjectFileError(f"{path}: {str(exc).removeprefix(f'agents.{name}.')}") from None
    return agent_type


def load_definitions(
    folders: Iterable[tuple[Path, Path]], tools: ToolNames, warn: Callable[[str], None]
) -> list[AgentDefinition]:
    """The definitions in each ``(folder, root)`` of *folders* (``*.md``, by name within a
    folder, folders in order); a file leading out of its root (a symlink) is refused.

    A file that cannot be used is skipped with a warning; a name defined twice keeps the later
    definition, with a warning naming both files.
    """
    found: dict[str, AgentDefinition] = {}
    count = 0
    for folder, root in folders:
        try:
            paths = sorted(folder.glob("*.md")) if folder.is_dir() else []
        except OSError as exc:
            warn(f"{folder}: cannot list: {exc.strerror or exc}; skipped")
            continue
        for path in paths:
            if not path.is_file():
                continue
            if not inside(path, root):
                warn(f"{path}: leads out of {root}; refused")
                continue
            count += 1
            if count > MAX_DEFINITIONS:
                warn(f"{folder}: more than {MAX_DEFINITIONS} agent definitions; the rest skipped")
                return list(found.values())
            try:
                agent_type = read_definition(path, tools)
            except ProjectFileError as exc:
                warn(f"{exc}; skipped")
                continue
            old = found.pop(agent_type.name, None)
            if old is not None:
                warn(
                    f"agent {agent_type.name!r} is defined in {old.path} and {path}; "
                    f"{path} is used"
                )
            found[agent_type.name] = AgentDefinition(agent_type, path)
    return list(found.values())
