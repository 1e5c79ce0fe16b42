"""The built-in tool set (docs/tools.md)."""

from __future__ import annotations

from runtime.core import Tool

from ._agent import AgentTool
from ._builtins import file_and_shell_tools
from ._send_message import SendMessageTool
from ._todo import TodoWriteTool


def builtin_tools() -> list[Tool]:
    """One fresh instance of every built-in tool: bash, read, write, edit, glob, grep, agent,
    send_message, todo_write."""
    return [*file_and_shell_tools(), AgentTool(), SendMessageTool(), TodoWriteTool()]
