"""Built-in agent tools (SPEC §5) and the interface every tool implements."""

from __future__ import annotations

from ._agent import AgentTool as AgentTool
from ._base import SubAgentSpawner as SubAgentSpawner
from ._base import TargetKind as TargetKind
from ._base import Tool as Tool
from ._base import ToolContext as ToolContext
from ._base import ToolLimits as ToolLimits
from ._base import one_line as one_line
from ._base import validate_input as validate_input
from ._bash import BashTool as BashTool
from ._builtins import file_and_shell_tools as file_and_shell_tools
from ._edit import EditTool as EditTool
from ._glob import GlobTool as GlobTool
from ._grep import GrepTool as GrepTool
from ._read import ReadTool as ReadTool
from ._registry import builtin_tools as builtin_tools
from ._write import WriteTool as WriteTool

__all__ = sorted(
    [
        "AgentTool",
        "BashTool",
        "EditTool",
        "GlobTool",
        "GrepTool",
        "ReadTool",
        "SubAgentSpawner",
        "TargetKind",
        "Tool",
        "ToolContext",
        "ToolLimits",
        "WriteTool",
        "builtin_tools",
        "file_and_shell_tools",
        "one_line",
        "validate_input",
    ]
)
