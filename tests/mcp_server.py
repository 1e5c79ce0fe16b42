"""An MCP server built with the SDK's MCPServer (FastMCP in SDK 1.x), for the MCP tests.

Run as a script: ``python tests/mcp_server.py http`` serves streamable HTTP on a free loopback
port and prints the port on stdout; ``python tests/mcp_server.py stdio`` speaks stdio. Tools:

* ``echo`` (read-only): returns its text.
* ``block``: reports progress, then waits until cancelled; each cancellation it sees (the
  server's handler cancelled by ``notifications/cancelled``) is recorded with the request id.
* ``cancellations``: the request ids whose ``block`` calls were cancelled, as JSON text.
* ``progress``: reports ``steps`` progress notifications, then returns ``done``.
* ``big``: returns a text of ``megabytes`` MB.
* ``picture``: an image and a text block.
* ``fail``: a tool error (``isError``).
* ``env``: the value of an environment variable (or ``<unset>``).
* ``spawn``: starts a grandchild process that sleeps, returns its pid.
* ``die``: the server exits at once, in the middle of the call.
* ``bad.name``: a tool whose name is not a valid model tool name.
* ``whoami``: the request's ``Authorization`` header, if any (HTTP only).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, TextContent, ToolAnnotations

app = MCPServer("test-server")
cancelled: list[str] = []


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
async def echo(text: str) -> str:
    """Return the text.

    It is a test tool."""
    return text


@app.tool()
async def block(ctx: Context, label: str = "") -> str:
    """Wait until cancelled."""
    await ctx.report_progress(1, 10, f"blocking {label}".strip())
    try:
        await anyio.sleep_forever()
    except anyio.get_cancelled_exc_class():
        cancelled.append(ctx.request_id)
        raise
    return "never"


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
async def cancellations() -> str:
    """The ids of the requests whose block calls were cancelled."""
    return json.dumps(cancelled)


@app.tool()
async def progress(ctx: Context, steps: int = 3) -> str:
    """Report progress steps, then finish."""
    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps, f"step {i}")
        await anyio.sleep(0.05)
    return "done"


@app.tool(structured_output=False)
async def big(megabytes: int = 50) -> str:
    """A long text."""
    return "x" * (megabytes * 1024 * 1024)


@app.tool()
async def picture() -> list[TextContent | ImageContent]:
    """An image."""
    return [
        TextContent(type="text", text="a red dot:"),
        ImageContent(
            type="image", data=base64.b64encode(bytes(1600)).decode(), mime_type="image/png"
        ),
    ]


@app.tool()
async def fail(message: str = "it went wrong") -> str:
    """Fail."""
    raise ToolError(message)


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
async def env(name: str) -> str:
    """An environment variable of the server."""
    return os.environ.get(name, "<unset>")


@app.tool()
async def spawn() -> str:
    """Start a grandchild that sleeps; return its pid."""
    # Popen returns at once: nothing here blocks the server's loop.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])  # noqa: ASYNC220  # noqa: ASYNC220 - returns at once
    return str(child.pid)


@app.tool()
async def die() -> str:
    """Exit the server mid-call."""
    os._exit(7)


@app.tool(name="bad.name")
async def bad_name() -> str:
    """A tool with a name no model API accepts."""
    return "?"


@app.tool()
async def whoami(ctx: Context) -> str:
    """The Authorization header of the request."""
    request = ctx.request_context.request
    headers = getattr(request, "headers", None) or {}
    return str(headers.get("authorization", "<none>"))


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "stdio":
        app.run("stdio")
        return
    from mcp_serve import serve_http  # beside this script

    serve_http(app)


if __name__ == "__main__":
    main()
