"""The built-in file and shell tools, as one list."""

from __future__ import annotations

from runtime.core import Tool

from ._bash import BashTool
from ._edit import EditTool
from ._glob import GlobTool
from ._grep import GrepTool
from ._read import ReadTool
from ._write import WriteTool

__all__ = ["file_and_shell_tools"]


def file_and_shell_tools() -> list[Tool]:
    """A fresh instance of each file and shell tool: bash, read, write, edit, glob, grep.

    The ``agent`` tool is not included: it belongs to the runtime, which knows how to start
    sub-agents.
    """
    return [BashTool(), ReadTool(), WriteTool(), EditTool(), GlobTool(), GrepTool()]
