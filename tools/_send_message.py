"""The ``send_message`` tool: a message to the calling agent's parent, a child or a sibling."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from runtime.core import MAX_MESSAGE_CHARS, Tool, ToolContext, ToolError, one_line


class SendMessageTool(Tool):
    """Send another agent of the run a message, read at its next step
    (docs/collaboration.md#messages-between-agents)."""

    name: ClassVar[str] = "send_message"
    description: ClassVar[str] = (
        "Send a message to another agent of this run; it reads it at its next step. You can "
        "message your parent (`to`: `parent`, the agent that started you), your sub-agents "
        "(by id, or by the description you started them with) and your siblings (the other "
        "sub-agents of your parent, by id), nobody else. Messages to yourself, to an agent "
        f"that has finished, or longer than {MAX_MESSAGE_CHARS} characters are refused."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "to": {
                "type": "string",
                "minLength": 1,
                "description": "`parent`, an agent id, or one of your sub-agents' descriptions",
            },
            "text": {"type": "string", "minLength": 1, "description": "the message"},
        },
        "required": ["to", "text"],
        "additionalProperties": False,
    }
    read_only: ClassVar[bool] = True
    concurrency_safe: ClassVar[bool] = True
    needs_permission: ClassVar[bool] = False

    def summary(self, args: Mapping[str, Any]) -> str:
        return one_line(f"send_message: to {args.get('to', '')}: {args.get('text', '')}")

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        """Deliver the message. Cancellation: a checkpoint; a message is delivered or not."""
        if ctx.messenger is None:
            raise ToolError("messages to other agents are not available here")
        return await ctx.messenger.send(str(args["to"]), str(args["text"]))
