"""Built-in agent tools."""

from __future__ import annotations

from ._base import SubAgentSpawner as SubAgentSpawner
from ._base import Tool as Tool
from ._base import ToolContext as ToolContext
from ._base import ToolLimits as ToolLimits
from ._base import one_line as one_line
from ._base import validate_input as validate_input

__all__ = sorted(
    ["SubAgentSpawner", "Tool", "ToolContext", "ToolLimits", "one_line", "validate_input"]
)
