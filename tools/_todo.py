"""The ``todo_write`` tool: the agent's plan, as Claude Code's ``TodoWrite`` keeps it.

Each call gives the whole list again (``todos``: ``content``, ``status``, ``activeForm``); the
runtime emits it as a ``todo_updated`` event, the live tree shows the agent's item in progress,
and ``trace show`` lists each agent's last list (docs/tools.md, "todo_write").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, ClassVar, Final

from runtime.core import Tool, ToolContext, ToolError, one_line

__all__ = ["MAX_TODOS", "TodoWriteTool"]

MAX_TODOS: Final = 100
"""The most items one list may hold."""
_MAX_CHARS: Final = 500
_STATUSES: Final = ("pending", "in_progress", "completed")


class TodoWriteTool(Tool):
    """Replaces the calling agent's todo list with ``todos``; changes nothing else.

    Read-only as far as permissions go (it touches no file and runs nothing), and
    concurrency-safe: it never holds up the other calls of its turn.
    """

    name: ClassVar[str] = "todo_write"
    description: ClassVar[str] = (
        "Write your todo list for a task of several steps: give the whole list each time, "
        "each item with `content` (what to do, imperative: 'Run the tests'), `status` "
        "(pending, in_progress or completed) and `activeForm` (the same, as it is being done: "
        "'Running the tests'). Keep one item in_progress at a time, mark it completed as soon "
        "as it is done, and skip the list for a task of one or two steps. The user sees the "
        "item in progress."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "maxItems": MAX_TODOS,
                "description": "the whole list, in order",
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string", "minLength": 1, "maxLength": _MAX_CHARS},
                        "status": {"enum": list(_STATUSES)},
                        "activeForm": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": _MAX_CHARS,
                        },
                    },
                    "required": ["content", "status", "activeForm"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["todos"],
        "additionalProperties": False,
    }
    read_only: ClassVar[bool] = True
    concurrency_safe: ClassVar[bool] = True
    needs_permission: ClassVar[bool] = False

    def summary(self, args: Mapping[str, Any]) -> str:
        todos = args.get("todos")
        if not isinstance(todos, list):
            return "todo_write"
        doing = next(
            (t.get("activeForm") for t in todos
             if isinstance(t, dict) and t.get("status") == "in_progress"),
            None,
        )  # fmt: skip
        return one_line(f"todo_write: {len(todos)} items" + (f", {doing}" if doing else ""))

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        """Emit the list (the input is checked against the schema before this runs).

        Cancellation: a checkpoint only while a ``block`` subscriber holds the event back.
        """
        todos = [
            {"content": str(t["content"]), "status": str(t["status"]),
             "activeForm": str(t["activeForm"])}
            for t in args["todos"]
        ]  # fmt: skip
        if ctx.report_todos is None:
            raise ToolError("todo_write is not available here (nothing shows the list)")
        await ctx.report_todos(todos)
        counts = Counter(t["status"] for t in todos)
        said = ", ".join(f"{counts[s]} {s.replace('_', ' ')}" for s in _STATUSES)
        doing = next((t["activeForm"] for t in todos if t["status"] == "in_progress"), None)
        return f"Todo list saved ({said})." + (f" In progress: {doing}." if doing else "")
