"""Everything the runtime reads from a project and the user's config folder, in one place."""

from __future__ import annotations

import datetime
import os
import platform
from collections.abc import Collection, Mapping
from pathlib import Path

import attrs

from runtime.core import AgentType

from ._agents import AgentDefinition, ToolNames, load_definitions
from ._files import GitInfo, foreign_owner, git_info, user_config_dir
from ._instructions import InstructionFile, load_instructions
from ._prompt import SystemPrompt
from ._skills import Skill, load_skills

BUILTIN_TOOLS = (
    "bash", "read", "write", "edit", "glob", "grep", "agent", "send_message", "todo_write"
)
"""The tool names definitions may name when the caller does not say (the built-ins)."""


@attrs.frozen(kw_only=True)
class Project:
    """What :func:`load_project` found.

    Attributes:
        workspace: the workspace (resolved).
        root: the repository root holding it, or the workspace outside git.
        user_dir: the user's config folder.
        warnings: one line for each file skipped, cut or refused (the CLI prints them).
    """

    workspace: Path
    root: Path
    user_dir: Path
    git: GitInfo
    instructions: tuple[InstructionFile, ...] = ()
    agents: tuple[AgentDefinition, ...] = ()
    skills: tuple[Skill, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def agent_types(self) -> list[AgentType]:
        return [d.agent_type for d in self.agents]

    def system_prompt(self, *, today: datetime.date | None = None) -> SystemPrompt:
        """The builder of every agent's system prompt (see :mod:`runtime.project._prompt`)."""
        today = today or datetime.date.today()
        return SystemPrompt(
            workspace=str(self.workspace),
            platform=f"{platform.system() or os.name} ({platform.machine() or 'unknown'})",
            date=today.isoformat(),
            git_root=str(self.git.root) if self.git.root else None,
            git_branch=self.git.branch,
            skills=tuple((s.name, s.description) for s in self.skills),
            instructions=self.instructions,
        )


def load_project(
    workspace: str | os.PathLike[str],
    *,
    env: Mapping[str, str] | None = None,
    tools: Collection[str] = BUILTIN_TOOLS,
) -> Project:
    """Read a workspace's instructions, agent definitions and skills, and the user's.

    Bad files do not stop anything: each is skipped (or cut) with one line in
    :attr:`Project.warnings`. Reads the disk (synchronously; a few small files).

    Args:
        env: for ``XDG_CONFIG_HOME`` and ``HOME`` (default ``os.environ``).
        tools: the run's tool names; definitions naming others have them skipped (``skill``
            counts only when there are skills).
    """
    ws = Path(workspace).expanduser().resolve()
    user_dir = user_config_dir(env)
    warnings: list[str] = []
    warn = warnings.append
    git = git_info(ws)
    if git.root is not None and git.root != ws and (uid := foreign_owner(git.root)) is not None:
        # git's own rule (safe.directory): a repository above the workspace that another user
        # owns could have been planted there (/tmp/.git); its HEAD and instructions are theirs.
        warn(
            f"{git.root}: a repository owned by another user (uid {uid}); its .git and "
            "instruction files are not used (git's safe.directory rule)"
        )
        git = GitInfo()
    root = git.root or ws
    instructions = load_instructions(ws, root, user_dir, warn)
    skills = load_skills(
        [
            (user_dir / "skills", user_dir),
            (ws / ".claude" / "skills", ws),
            (ws / ".trio-agents" / "skills", ws),
        ],
        warn,
    )
    known = set(tools) | ({"skill"} if skills else set())
    agents = load_definitions(
        [
            (user_dir / "agents", user_dir),
            (ws / ".claude" / "agents", ws),
            (ws / ".trio-agents" / "agents", ws),
        ],
        ToolNames(known, warn),
        warn,
    )
    return Project(
        workspace=ws,
        root=root,
        user_dir=user_dir,
        git=git,
        instructions=tuple(instructions),
        agents=tuple(agents),
        skills=tuple(skills),
        warnings=tuple(warnings),
    )
