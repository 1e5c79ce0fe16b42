"""The ``skill`` tool: loads a skill's instructions (``SKILL.md``) when the model needs them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol

import trio

from runtime.core import AgentsError, Tool, ToolContext, ToolError, one_line


class SkillSource(Protocol):
    """What the tool needs of a skill (``runtime.project.Skill`` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def folder(self) -> Path: ...

    def body(self) -> str:
        """``SKILL.md`` without its front matter. Raises AgentsError when unreadable."""
        ...

    def read(self, relative: str) -> str:
        """Another file of the skill's folder. Raises AgentsError when refused."""
        ...


class SkillTool(Tool):
    """Returns a skill's body and where its folder is; with ``file``, a file of that folder.

    Loading is read-only and asks no permission (a ``skill(NAME)`` deny rule still refuses).
    """

    name: ClassVar[str] = "skill"
    description: ClassVar[str] = (
        "Load a skill: its instructions for a kind of task (the skills and their descriptions "
        "are listed in the system prompt). Give `name`; the result is the skill's instructions "
        "and its folder. To read another file the instructions mention, call again with `file` "
        "(a path inside the skill's folder)."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "description": "the skill's name"},
            "file": {
                "type": "string",
                "minLength": 1,
                "description": "optional: a file in the skill's folder, e.g. reference.md",
            },
        },
        "required": ["name"],
        "additionalProperties": False,
    }
    read_only: ClassVar[bool] = True
    concurrency_safe: ClassVar[bool] = True
    needs_permission: ClassVar[bool] = False

    def __init__(self, skills: Iterable[SkillSource]) -> None:
        self.skills: Mapping[str, SkillSource] = {s.name: s for s in skills}

    def summary(self, args: Mapping[str, Any]) -> str:
        extra = f" {args['file']}" if args.get("file") else ""
        return one_line(f"skill: {args.get('name', '')}{extra}")

    def permission_target(self, args: Mapping[str, Any]) -> str:
        return str(args.get("name", ""))

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        """Read the skill's file (in a thread). Cancellation: a checkpoint; nothing to undo."""
        name = str(args["name"])
        skill = self.skills.get(name)
        if skill is None:
            known = ", ".join(sorted(self.skills)) or "none"
            raise ToolError(f"unknown skill {name!r}; skills: {known}")
        try:
            if args.get("file"):
                return await trio.to_thread.run_sync(skill.read, str(args["file"]))
            body = await trio.to_thread.run_sync(skill.body)
        except AgentsError as exc:
            raise ToolError(str(exc)) from None
        try:
            folder = f"{skill.folder.relative_to(ctx.workspace)} (in the workspace)"
        except ValueError:
            folder = f"{skill.folder} (outside the workspace: read its files with `file`)"
        return f"Skill {skill.name}; its folder: {folder}\n\n{body}"
