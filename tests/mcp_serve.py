"""What the SDK-built test servers share when run as scripts (``python tests/X.py http``):
serving their app over streamable HTTP on a free loopback port, printed first on stdout."""

from __future__ import annotations

import socket

import anyio
from mcp.server.mcpserver import MCPServer


def serve_http(app: MCPServer) -> None:
    """Serve *app* over streamable HTTP on a free loopback port (printed first) until killed."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(app.streamable_http_app(), log_level="critical")
    anyio.run(uvicorn.Server(config).serve, [sock])
