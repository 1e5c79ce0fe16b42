"""What the runtime reads from a project and from the user's config folder.

Settings (``.trio-agents/settings.toml``), instructions (``AGENTS.md``, ``CLAUDE.md`` and their
``@path`` imports), agent definitions (``.claude/agents/*.md``, ``.trio-agents/agents/*.md``)
and skills (``.claude/skills/NAME/SKILL.md``, ``.trio-agents/skills/``), and the system prompt
made from them. The layer of the providers: it stands on :mod:`runtime.core` alone. Which
files, in what order and with what caps: docs/configuration.md.
"""

from __future__ import annotations

from ._agents import CLAUDE_TOOLS as CLAUDE_TOOLS
from ._agents import AgentDefinition as AgentDefinition
from ._files import GitInfo as GitInfo
from ._files import ProjectFileError as ProjectFileError
from ._files import open_regular as open_regular
from ._files import read_capped as read_capped
from ._files import read_text_capped as read_text_capped
from ._files import user_config_dir as user_config_dir
from ._instructions import InstructionFile as InstructionFile
from ._project import Project as Project
from ._project import load_project as load_project
from ._prompt import SystemPrompt as SystemPrompt
from ._settings import SETTINGS as SETTINGS
from ._settings import Setting as Setting
from ._settings import Settings as Settings
from ._settings import load_settings as load_settings
from ._skills import Skill as Skill

__all__ = sorted(
    [
        "CLAUDE_TOOLS",
        "SETTINGS",
        "AgentDefinition",
        "GitInfo",
        "InstructionFile",
        "Project",
        "ProjectFileError",
        "Setting",
        "Settings",
        "Skill",
        "SystemPrompt",
        "load_project",
        "load_settings",
        "open_regular",
        "read_capped",
        "read_text_capped",
        "user_config_dir",
    ]
)
