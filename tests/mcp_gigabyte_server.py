"""An MCP server whose one resource, ``huge://gigabyte``, is 1 GB of text, written as it is
sent (the server never holds it), for the MCP client tests (docs/mcp.md, "Limits").

``python tests/mcp_gigabyte_server.py stdio`` speaks JSON-RPC on stdio; ``json`` and ``sse``
serve streamable HTTP on a loopback port (printed first), answering requests with a JSON body
or with one server-sent event. Everything else a client asks is answered as a bare server
would: the tools and templates lists empty, other requests "method not found".
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, BinaryIO

GIGABYTE = 1 << 30
_CHUNK = b"x" * (1 << 20)
_RESOURCE = {"uri": "huge://gigabyte", "name": "gigabyte", "mimeType": "text/plain"}


def _answer(message: dict[str, Any]) -> dict[str, Any] | None:
    """The answer to *message* (``None`` for a notification, or for the huge read)."""
    method, params = message.get("method"), message.get("params") or {}
    if "id" not in message or method == "resources/read":
        return None
    results: dict[str, Any] = {
        "initialize": {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}, "resources": {}},
            "serverInfo": {"name": "gigabyte", "version": "1"},
        },
        "tools/list": {"tools": []},
        "resources/list": {"resources": [_RESOURCE]},
        "resources/templates/list": {"resourceTemplates": []},
        "ping": {},
    }
    if method in results:
        return {"jsonrpc": "2.0", "id": message["id"], "result": results[method]}
    error = {"code": -32601, "message": f"method not found: {method}"}
    return {"jsonrpc": "2.0", "id": message["id"], "error": error}


def _write_huge(out: BinaryIO, request_id: Any, head: bytes = b"", tail: bytes = b"") -> None:
    """The answer to ``resources/read``: 1 GB of text, a megabyte at a time."""
    out.write(head + b'{"jsonrpc":"2.0","id":' + json.dumps(request_id).encode())
    out.write(b',"result":{"contents":[{"uri":"huge://gigabyte","mimeType":"text/plain","text":"')
    for _ in range(GIGABYTE // len(_CHUNK)):
        out.write(_CHUNK)
    out.write(b'"}]}}' + tail)
    out.flush()


def serve_stdio() -> None:
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        message = json.loads(line)
        if message.get("method") == "resources/read":
            _write_huge(out, message["id"], tail=b"\n")
        elif (answer := _answer(message)) is not None:
            out.write(json.dumps(answer).encode() + b"\n")
            out.flush()


def _handler(sse: bool) -> Callable[..., BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers["content-length"])))
            huge = message.get("method") == "resources/read"
            answer = _answer(message)
            if answer is None and not huge:
                self.send_response(202)
                self.send_header("content-length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream" if sse else "application/json")
            self.send_header("connection", "close")
            self.end_headers()
            head, tail = (b"event: message\ndata: ", b"\n\n") if sse else (b"", b"")
            try:
                if huge:
                    _write_huge(self.wfile, message["id"], head, tail)
                else:
                    self.wfile.write(head + json.dumps(answer).encode() + tail)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading: what a client with a cap does
            self.close_connection = True

        def do_GET(self) -> None:  # no stream of the server's own
            self.send_response(405)
            self.send_header("content-length", "0")
            self.end_headers()

        def do_DELETE(self) -> None:
            self.do_GET()

    return Handler


def serve_http(sse: bool) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(sse))
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "stdio":
        serve_stdio()
    else:
        serve_http(sse=mode == "sse")
