"""What the runtime reads from a project and from the user's config folder.

Settings (``.trio-agents/settings.toml``), instructions (``AGENTS.md``, ``CLAUDE.md`` and their
``@path`` imports), agent definitions (``.claude/agents/*.md``, ``.trio-agents/agents/*.md``)
and skills (``.claude/skills/NAME/SKILL.md``, ``.trio-agents/skills/``), and the system prompt
made from them. The layer of the providers: it stands on :mod:`runtime.core` alone. Which
files, in what order and with what caps: docs/configuration.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime._lazy import lazy_exports

if TYPE_CHECKING:
    from ._agents import CLAUDE_TOOLS as CLAUDE_TOOLS
    from ._agents import AgentDefinition as AgentDefinition
    from ._files import GitInfo as GitInfo
    from ._files import ProjectFileError as ProjectFileError
    from ._files import open_regular as open_regular
    from ._files import read_capped as read_capped
    from ._files import read_text_capped as read_text_capped
    from ._files import user_config_dir as user_config_dir
    from ._hooks import HookConfig as HookConfig
    from ._hooks import hook_sources as hook_sources
    from ._hooks import hooks_from_mapping as hooks_from_mapping
    from ._hooks import load_hooks as load_hooks
    from ._instructions import InstructionFile as InstructionFile
    from ._project import Project as Project
    from ._project import load_project as load_project
    from ._prompt import SystemPrompt as SystemPrompt
    from ._settings import SETTINGS as SETTINGS
    from ._settings import Setting as Setting
    from ._settings import Settings as Settings
    from ._settings import load_settings as load_settings
    from ._skills import Skill as Skill
    from ._trust import TrustStore as TrustStore
    from ._trust import TrustVerdict as TrustVerdict

_LAZY: dict[str, str] = {
    "AgentDefinition": "._agents",
    "CLAUDE_TOOLS": "._agents",
    "GitInfo": "._files",
    "HookConfig": "._hooks",
    "InstructionFile": "._instructions",
    "Project": "._project",
    "ProjectFileError": "._files",
    "SETTINGS": "._settings",
    "Setting": "._settings",
    "Settings": "._settings",
    "Skill": "._skills",
    "SystemPrompt": "._prompt",
    "TrustStore": "._trust",
    "TrustVerdict": "._trust",
    "hook_sources": "._hooks",
    "hooks_from_mapping": "._hooks",
    "load_hooks": "._hooks",
    "load_project": "._project",
    "load_settings": "._settings",
    "open_regular": "._files",
    "read_capped": "._files",
    "read_text_capped": "._files",
    "user_config_dir": "._files",
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
