"""The ``agent`` tool: starts a sub-agent on a sub-task and returns its final text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from runtime.core import Tool, ToolContext, ToolError, one_line


class AgentTool(Tool):
    """Start a sub-agent. The runtime runs it inside this call's cancel scope, so cancelling
    the call (or the sub-agent by its id) cancels exactly that subtree."""

    name: ClassVar[str] = "agent"
    description: ClassVar[str] = (
        "Start a sub-agent on a focused sub-task and get its final answer. Several agent calls "
        "in one turn run in parallel. Give it a short `description` (a few words) and a complete, "
        "self-contained `prompt`: it sees nothing of your conversation. `agent` picks its type. "
        "With `run_in_background: true` the call returns at once with the sub-agent's id, and "
        "its result comes to you as a message when it ends; you do not finish while a "
        "background sub-agent of yours still runs."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "description": {
                "type": "string",
                "minLength": 1,
                "description": "a few words naming the sub-task",
            },
            "prompt": {
                "type": "string",
                "minLength": 1,
                "description": "the whole task for the sub-agent",
            },
            "agent": {
                "type": "string",
                "minLength": 1,
                "description": "the agent type (default: general)",
            },
            "run_in_background": {
                "type": "boolean",
                "description": "start it and go on: its result comes later, as a message",
            },
            "budget": {
                "type": "object",
                "description": "optional limits for this sub-agent's whole subtree",
                "properties": {
                    "tokens": {"type": "integer", "minimum": 1},
                    "seconds": {"type": "number", "exclusiveMinimum": 0},
                    "tool_calls": {"type": "integer", "minimum": 1},
                    "usd": {"type": "number", "exclusiveMinimum": 0},
                },
                "additionalProperties": False,
            },
        },
        "required": ["description", "prompt"],
        "additionalProperties": False,
    }
    read_only: ClassVar[bool] = True
    concurrency_safe: ClassVar[bool] = True
    needs_permission: ClassVar[bool] = False

    def summary(self, args: Mapping[str, Any]) -> str:
        kind = args.get("agent") or "general"
        later = " (background)" if args.get("run_in_background") is True else ""
        return one_line(f"agent: {kind}: {args.get('description', '')}{later}")

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        """Run the sub-agent to its end. Cancellation cancels the sub-agent's subtree."""
        if ctx.spawner is None:
            raise ToolError("sub-agents are not available here")
        if args.get("run_in_background") is True:
            return await ctx.spawner.start_background(
                agent_type=str(args.get("agent") or "general"),
                prompt=str(args["prompt"]),
                description=str(args["description"]),
                budget=args.get("budget"),
            )
        return await ctx.spawner.run_subagent(
            agent_type=str(args.get("agent") or "general"),
            prompt=str(args["prompt"]),
            description=str(args["description"]),
            budget=args.get("budget"),
        )
