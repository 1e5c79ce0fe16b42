"""Built-in agent tools (docs/tools.md) and the interface every tool implements."""

from __future__ import annotations

from runtime.core import SubAgentSpawner as SubAgentSpawner
from runtime.core import TargetKind as TargetKind
from runtime.core import Tool as Tool
from runtime.core import ToolContext as ToolContext
from runtime.core import ToolLimits as ToolLimits
from runtime.core import one_line as one_line
from runtime.core import publish_names as _publish_names
from runtime.core import validate_input as validate_input

from ._agent import AgentTool as AgentTool
from ._bash import BashTool as BashTool
from ._builtins import file_and_shell_tools as file_and_shell_tools
from ._edit import EditTool as EditTool
from ._glob import GlobTool as GlobTool
from ._grep import GrepTool as GrepTool
from ._guarded import open_guarded_process as open_guarded_process
from ._read import ReadTool as ReadTool
from ._registry import builtin_tools as builtin_tools
from ._send_message import SendMessageTool as SendMessageTool
from ._skill import SkillSource as SkillSource
from ._skill import SkillTool as SkillTool
from ._todo import TodoWriteTool as TodoWriteTool
from ._warden import warden as warden
from ._write import WriteTool as WriteTool

__all__ = sorted(
    [
        "AgentTool",
        "BashTool",
        "EditTool",
        "GlobTool",
        "GrepTool",
        "ReadTool",
        "SendMessageTool",
        "SkillSource",
        "SkillTool",
        "SubAgentSpawner",
        "TargetKind",
        "Tool",
        "ToolContext",
        "TodoWriteTool",
        "ToolLimits",
        "WriteTool",
        "builtin_tools",
        "file_and_shell_tools",
        "one_line",
        "open_guarded_process",
        "validate_input",
        "warden",
    ]
)


# The tool interface (Tool, ToolContext, …) is runtime's (``runtime.Tool``), re-exported here
# for tools written against this package; only the built-in tools are tools'.
_INTERFACE = {"SubAgentSpawner", "TargetKind", "Tool", "ToolContext", "ToolLimits", "one_line",
              "validate_input"}
_publish_names([globals()[name] for name in __all__ if name not in _INTERFACE], __name__)
_publish_names([globals()[name] for name in sorted(_INTERFACE)], "runtime")
