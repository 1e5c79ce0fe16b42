"""The system prompt, assembled from parts, in this order:

1. the agent type's own prompt;
2. ``# Environment``: the workspace, the platform, today's date, the git repository and its
   branch (or that there is none), the tools this agent has;
3. ``# Skills``: each skill's name and description, when the agent has the ``skill`` tool;
4. ``# Instructions``: the instruction files (the user's, then the project's from the
   repository root down to the workspace, each followed by its imports), each under a line
   naming it.

Every agent gets them: the main agent and every sub-agent, whose type's prompt comes first.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from runtime.core import AgentType

from ._instructions import InstructionFile


@attrs.frozen(kw_only=True)
class SystemPrompt:
    """Builds each agent's system prompt from the project's parts; a picklable value, called
    as ``prompt(agent_type, tool_names)``."""

    workspace: str
    platform: str
    date: str
    git_root: str | None = None
    git_branch: str | None = None
    skills: tuple[tuple[str, str], ...] = ()
    instructions: tuple[InstructionFile, ...] = ()

    def __call__(self, agent_type: AgentType, tools: Sequence[str]) -> str:
        parts = [agent_type.system.strip(), self.environment(tools)]
        if self.skills and "skill" in tools:
            parts.append(self.skills_part())
        if self.instructions:
            parts.append(self.instructions_part())
        return "\n\n".join(p for p in parts if p)

    def environment(self, tools: Sequence[str]) -> str:
        if self.git_root is None:
            git = "no"
        elif self.git_branch:
            git = f"yes, {self.git_root}, branch {self.git_branch}"
        else:
            git = f"yes, {self.git_root}"
        return "\n".join([
            "# Environment",
            f"Workspace: {self.workspace}",
            f"Platform: {self.platform}",
            f"Today's date: {self.date}",
            f"Git repository: {git}",
            f"Tools: {', '.join(tools) if tools else 'none'}",
        ])

    def skills_part(self) -> str:
        lines = [
            "# Skills",
            "Skills are instructions for particular tasks. When a task matches a skill's "
            "description, load the skill with the `skill` tool before you start.",
        ]
        lines += [f"- {name}: {description}" for name, description in self.skills]
        return "\n".join(lines)

    def instructions_part(self) -> str:
        out = [
            "# Instructions",
            "The user's and the project's instruction files follow, the nearest to the work "
            "last; follow them.",
        ]
        for f in self.instructions:
            whose = "the user's instructions" if f.scope == "user" else "project instructions"
            via = f", imported by {f.imported_by}" if f.imported_by else ""
            cut = " (cut at the size cap)" if f.truncated else ""
            out.append(f"## {f.path} ({whose}{via}){cut}\n\n{f.text.strip()}")
        return "\n\n".join(out)
