"""MCP tools as runtime tools: ``mcp__SERVER__TOOL``, and how a result reads for the model."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import mcp_types
import trio

from runtime.core import Tool, ToolContext, ToolError, one_line

from ._client import Caller

if TYPE_CHECKING:
    from ._server import McpServer

__all__ = ["McpTool", "make_tools", "render_result", "tool_name"]

PROGRESS_INTERVAL_S = 0.1
"""The shortest time between two ``tool_progress`` events of one MCP call."""
MAX_RESULT_BLOCKS = 10_000
"""The most content blocks of one result the model reads; the rest are counted."""

# What both model APIs accept as a tool name.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def tool_name(server: str, tool: str) -> str:
    """The runtime's name for *tool* of *server* (Claude Code's convention)."""
    return f"mcp__{server}__{tool}"


class McpTool(Tool):
    """A tool of an MCP server. One subclass per remote tool (:func:`make_tools`): the name,
    description, schema and flags are class attributes, as for every tool.

    A tool the server marks ``readOnlyHint`` is read-only: it runs concurrently with the other
    calls of a turn and never asks permission; every other tool asks, like ``write``. Rules
    match the call's arguments as JSON text (``mcp__git__git_log(*"max_count"*)``).
    """

    server: ClassVar[McpServer]
    remote_name: ClassVar[str]
    permission_target_kind = "text"

    def summary(self, args: Mapping[str, Any]) -> str:
        return one_line(f"{self.name}: {_compact(args)}")

    def permission_target(self, args: Mapping[str, Any]) -> str:
        return _compact(args)

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        """Call the tool on its server.

        Cancellation: ends this request at once (``notifications/cancelled`` goes to the
        server); the server's connection stays up.
        """
        report = ctx.report_progress
        latest: list[tuple[float, float | None, str | None]] = []
        wake = trio.Event()
        state = {"forwarding": False, "done": False}

        async def forward() -> None:
            nonlocal wake
            assert report is not None
            while True:
                await wake.wait()
                wake = trio.Event()
                if latest:
                    await report(*latest.pop())
                # At most one event per interval: a flood keeps only its latest (docs/mcp.md).
                await trio.sleep(PROGRESS_INTERVAL_S)

        outcome: mcp_types.CallToolResult | BaseException
        async with trio.open_nursery() as nursery:

            async def on_progress(  # noqa: RUF029 - the SDK awaits its progress callback
                progress: float, total: float | None, message: str | None
            ) -> None:
                # Runs in the connection's reader task: never wait here. Keep the latest; the
                # forwarder emits it (a flood of notifications is coalesced, not queued). It
                # is started by the first notification: most calls have none.
                if state["done"]:
                    return
                latest[:] = [(progress, total, message)]
                wake.set()
                if not state["forwarding"]:
                    state["forwarding"] = True
                    nursery.start_soon(forward)

            try:
                outcome = await self.server.call_tool(
                    self.remote_name,
                    args,
                    on_progress if report is not None else None,
                    caller=Caller.of(ctx),
                )
            except Exception as exc:  # raised outside the nursery: not wrapped in a group
                outcome = exc
            finally:
                state["done"] = True
                nursery.cancel_scope.cancel(reason="the call is over")
        if isinstance(outcome, BaseException):
            raise outcome
        result = outcome
        # A tools/list_changed said during the call: the agent's next turn gets the new list.
        await self.server.tools_settled()
        if latest and report is not None:  # the last word of a flood that came meanwhile
            await report(*latest.pop())
        # The server's own mask: a token refreshed mid-run is not in the run's (docs/mcp-oauth.md).
        text = self.server.masked(render_result(result))
        if result.is_error:
            raise ToolError(text or f"{self.name} failed (the server gave no message)")
        return text


def _compact(args: Mapping[str, Any]) -> str:
    return json.dumps(args, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def render_result(result: mcp_types.CallToolResult) -> str:
    """The text the model reads for *result*.

    Text blocks are joined with newlines; an image or audio block is a one-line placeholder
    (``[image/png, 1.2 kB]``); an embedded text resource is its text, other resources a
    placeholder. ``structuredContent`` is the JSON text when the result has no text block
    (a server that sends both puts the same data in its text, as the MCP spec asks). The
    runtime cuts the whole to the tools' output cap.
    """
    parts: list[str] = []
    has_text = False
    for block in result.content[:MAX_RESULT_BLOCKS]:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
            has_text = True
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            parts.append(f"[{block.mime_type}, {_size(_b64_len(block.data))}]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            res = block.resource
            if isinstance(res, mcp_types.TextResourceContents):
                parts.append(res.text)
                has_text = True
            else:
                mime = getattr(res, "mime_type", None) or "application/octet-stream"
                size = _size(_b64_len(getattr(res, "blob", "")))
                parts.append(f"[{mime}, {size}: {res.uri}]")
        else:  # a resource link
            parts.append(f"[resource link: {block.uri}]")
    if len(result.content) > MAX_RESULT_BLOCKS:
        parts.append(f"[{len(result.content) - MAX_RESULT_BLOCKS} more content blocks not shown]")
    if result.structured_content is not None and not has_text:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _b64_len(data: str) -> int:
    """The decoded size of base64 *data*, without decoding it."""
    data = data.strip()
    return max(0, len(data) * 3 // 4 - (len(data) - len(data.rstrip("="))))


def _size(n: int) -> str:
    if n < 1000:
        return f"{n} B"
    if n < 1_000_000:
        return f"{n / 1000:.1f} kB"
    return f"{n / 1_000_000:.1f} MB"


def make_tools(servers: Iterable[McpServer], *, warn: Any) -> list[McpTool]:
    """One :class:`McpTool` per tool of each ready server; a tool whose name is not a valid
    model tool name, or whose input schema is not a JSON Schema object, is skipped with a
    warning."""
    import jsonschema

    out: list[McpTool] = []
    for server in servers:
        if server.state != "ready":
            continue
        seen: set[str] = set()
        for remote in server.tools:
            name = tool_name(server.name, remote.name)
            why = None
            if not _TOOL_NAME.fullmatch(name):
                why = (
                    f"{name!r} is not a valid tool name (letters, digits, '_' and '-', "
                    "at most 64 characters)"
                )
            elif name in seen:
                why = "listed twice"
            else:
                schema = remote.input_schema
                try:
                    jsonschema.validators.validator_for(schema).check_schema(schema)
                except jsonschema.exceptions.SchemaError as exc:
                    why = f"its input schema is not a JSON Schema: {one_line(exc.message, 200)}"
                else:
                    if schema.get("type", "object") != "object":
                        why = "its input schema does not describe an object"
            if why is not None:
                warn(f"mcp server {server.name!r}: tool {remote.name!r} skipped: {why}")
                continue
            seen.add(name)
            out.append(_tool_class(server, remote, name)())
    return out


def _tool_class(server: McpServer, remote: mcp_types.Tool, name: str) -> type[McpTool]:
    hints = remote.annotations
    read_only = bool(hints is not None and hints.read_only_hint)
    schema = dict(remote.input_schema)
    schema.setdefault("type", "object")
    description = remote.description or remote.title or f"{remote.name} (from {server.name})"
    attrs: dict[str, Any] = {
        "name": name,
        "description": description,
        "input_schema": schema,
        "read_only": read_only,
        "concurrency_safe": read_only,
        "needs_permission": not read_only,
        "server": server,
        "remote_name": remote.name,
        "__doc__": description,
    }
    return type(f"McpTool[{name}]", (McpTool,), attrs)
