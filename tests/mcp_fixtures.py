"""What the MCP tests share: configs for the test server, real PyPI servers, a loopback
HTTP server."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SERVER = Path(__file__).parent / "mcp_server.py"
BAD_SERVER = Path(__file__).parent / "mcp_bad_server.py"
GIGABYTE_SERVER = Path(__file__).parent / "mcp_gigabyte_server.py"
BIN = Path(sys.executable).parent


def stdio_server(*prefix_code: str, **extra: Any) -> dict[str, Any]:
    """The test server over stdio (*prefix_code*: Python run in the server process first)."""
    if prefix_code:
        code = "; ".join(
            [*prefix_code, f"import runpy; runpy.run_path({str(SERVER)!r}, run_name='__main__')"]
        )
        return {"command": sys.executable, "args": ["-c", code], **extra}
    return {"command": sys.executable, "args": [str(SERVER), "stdio"], **extra}


def time_server() -> dict[str, Any]:
    return {"command": str(BIN / "mcp-server-time"), "args": ["--local-timezone", "UTC"]}


def git_server(repo: Path) -> dict[str, Any]:
    return {"command": str(BIN / "mcp-server-git"), "args": ["--repository", str(repo)]}


def git_repo(path: Path) -> Path:
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "a.txt").write_text("hello\n")
    return path


@pytest.fixture(scope="session")
def http_url() -> Iterator[str]:
    """The test server over streamable HTTP on a loopback port, for the whole session."""
    yield from _serve_http(SERVER)


@pytest.fixture(scope="module")
def bad_http() -> Iterator[dict[str, Any]]:
    """tests/mcp_bad_server.py over streamable HTTP on a loopback port, for the module: a
    config for it."""
    for url in _serve_http(BAD_SERVER):
        yield {"type": "http", "url": url}


@pytest.fixture(scope="module", params=["json", "sse"])
def gigabyte_http(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """tests/mcp_gigabyte_server.py over streamable HTTP on a loopback port, answering with
    JSON bodies or with server-sent events: a config for it."""
    for url in _serve_http(GIGABYTE_SERVER, request.param):
        yield {"type": "http", "url": url}


def _serve_http(server: Path, mode: str = "http") -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, str(server), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()


def _everything() -> str:
    import os
    import shutil

    cached = Path.home() / ".cache/trio-agents/npm/node_modules/.bin/mcp-server-everything"
    found = os.environ.get("TRIO_AGENTS_EVERYTHING") or (
        str(cached) if cached.exists() else shutil.which("mcp-server-everything")
    )
    if not found or shutil.which("node") is None:
        pytest.skip(
            "server-everything is not installed (npm install --prefix "
            "~/.cache/trio-agents/npm @modelcontextprotocol/server-everything)"
        )
    return found


def everything_server() -> dict[str, Any]:
    """The reference server-everything (npm) over stdio; the test skips, saying how to get it,
    where it is not installed (.ci/run installs it where npm is)."""
    return {"command": _everything(), "args": ["stdio"]}


@pytest.fixture(scope="module")
def everything_http() -> Iterator[dict[str, Any]]:
    """server-everything over streamable HTTP on a loopback port (its ``streamableHttp``
    transport, the port from ``PORT``), for the module: a config for it."""
    import os
    import socket
    import threading

    script = Path(os.path.realpath(_everything()))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    loopback = Path(__file__).parent / "everything_loopback.mjs"
    proc = subprocess.Popen(
        ["node", "--import", loopback.as_uri(), str(script), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # its first line to stderr says it listens, or why not
        assert f"listening on port {port}" in line, line
        # The rest of stderr, read away so that the server never blocks on a full pipe.
        threading.Thread(target=proc.stderr.read, daemon=True).start()
        yield {"type": "http", "url": f"http://127.0.0.1:{port}/mcp"}
    finally:
        proc.terminate()
        proc.wait(10)
        assert proc.stderr is not None
        proc.stderr.close()
