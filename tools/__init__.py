"""Built-in agent tools (SPEC §5) and the interface every tool implements."""

from __future__ import annotations

from ._agent import AgentTool as AgentTool
from ._base import SubAgentSpawner as SubAgentSpawner
from ._base import Tool as Tool
from ._base import ToolContext as ToolContext
from ._base import ToolLimits as ToolLimits
from ._base import one_line as one_line
from ._base import validate_input as validate_input
from ._registry import builtin_tools as builtin_tools

__all__ = sorted(
    [
        "AgentTool",
        "SubAgentSpawner",
        "Tool",
        "ToolContext",
        "ToolLimits",
        "builtin_tools",
        "one_line",
        "validate_input",
    ]
)
