"""MCP servers as actors of a run: real servers over stdio and streamable HTTP, start-up,
failures, restarts, cancellation per call, and nothing left behind."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from runtime.core import ToolError
from runtime.mcp import McpConfig, McpServers, McpTool, open_mcp_servers, render_result
from tests.mcp_fixtures import git_repo, git_server, http_url, stdio_server, time_server

__all__ = ["http_url"]  # a fixture


def config(servers: dict[str, Any], timeout: float = 20.0) -> tuple[McpConfig, list[str]]:
    warnings: list[str] = []
    base = McpConfig.from_mapping(servers)
    return McpConfig(
        servers=base.servers, start_timeout_s=timeout, on_warning=warnings.append
    ), warnings


def others(warnings: list[str]) -> list[str]:
    """The warnings other than the one every test server gives (its tool named bad.name)."""
    return [w for w in warnings if "'bad.name' skipped" not in w]


def open_servers(cfg: McpConfig, workspace: Path, env: dict[str, str] | None = None) -> Any:
    import os

    return open_mcp_servers(cfg, env=env or {"PATH": os.environ["PATH"]}, workspace=workspace)


def tool(servers: McpServers, name: str) -> McpTool:
    return next(t for t in servers.tools if t.name == name)


async def test_real_time_and_git_servers_start_together_and_answer(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    cfg, warnings = config({"time": time_server(), "git": git_server(repo)})
    async with open_servers(cfg, tmp_path) as servers:
        assert {n: s.state for n, s in servers.servers.items()} == {"time": "ready", "git": "ready"}
        names = {t.name for t in servers.tools}
        assert {
            "mcp__time__get_current_time",
            "mcp__git__git_status",
            "mcp__git__git_commit",
        } <= names
        assert tool(servers, "mcp__time__get_current_time").read_only
        assert tool(servers, "mcp__git__git_status").read_only
        commit = tool(servers, "mcp__git__git_commit")
        assert (commit.read_only, commit.needs_permission, commit.concurrency_safe) == (
            False,
            True,
            False,
        )
        result = await servers.servers["time"].call_tool(
            "get_current_time", {"timezone": "Asia/Tokyo"}
        )
        assert json.loads(render_result(result))["timezone"] == "Asia/Tokyo"
        status = await servers.servers["git"].call_tool("git_status", {"repo_path": str(repo)})
        assert "a.txt" in render_result(status)
    assert warnings == []
    assert {s.state for s in servers.servers.values()} == {"closed"}


async def test_start_up_costs_the_slowest_server_not_the_sum(tmp_path: Path) -> None:
    hang = {"command": sys.executable, "args": ["-c", "import time; time.sleep(60)"]}
    cfg, warnings = config({"a": hang, "b": hang, "c": hang}, timeout=1.5)
    t0 = trio.current_time()
    async with open_servers(cfg, tmp_path) as servers:
        elapsed = trio.current_time() - t0
    # Each alone takes its 1.5 s timeout plus about 1 s to stop; in a row that would be 7 s.
    assert elapsed < 4.5
    assert {s.state for s in servers.servers.values()} == {"closed"}
    assert sorted(warnings) == [
        f"mcp server {n!r} did not start: no answer within 1.5 s" for n in "abc"
    ]


async def test_a_command_that_does_not_exist_is_one_warning_and_the_others_run(
    tmp_path: Path,
) -> None:
    cfg, warnings = config({"gone": {"command": "no-such-command-xyz"}, "time": time_server()})
    async with open_servers(cfg, tmp_path) as servers:
        assert servers.servers["gone"].state == "failed"
        assert servers.servers["time"].state == "ready"
        assert all(not t.name.startswith("mcp__gone__") for t in servers.tools)
    assert warnings == ["mcp server 'gone' did not start: command 'no-such-command-xyz' not found"]


async def test_an_unknown_transport_fails_to_start_with_one_warning(tmp_path: Path) -> None:
    cfg, warnings = config({"old": {"type": "sse", "url": "http://127.0.0.1:1/sse"}})
    async with open_servers(cfg, tmp_path) as servers:
        assert servers.servers["old"].state == "failed"
    assert warnings == [
        "mcp server 'old' did not start: unknown transport type 'sse' (this runtime speaks "
        "'stdio' and 'http')"
    ]


async def test_a_server_exiting_at_start_says_its_status_and_last_stderr_line(
    tmp_path: Path,
) -> None:
    code = "import sys; print('cannot open the database', file=sys.stderr); sys.exit(3)"
    cfg, warnings = config({"bad": {"command": sys.executable, "args": ["-c", code]}})
    async with open_servers(cfg, tmp_path):
        pass
    assert warnings == [
        "mcp server 'bad' did not start: it exited with status 3 during start-up; its last "
        "stderr line: cannot open the database"
    ]


async def test_a_server_that_writes_non_json_to_stdout_is_warned_once_and_still_works(
    tmp_path: Path,
) -> None:
    cfg, warnings = config(
        {"noisy": stdio_server("print('hello', flush=True); print('world', flush=True)")}
    )
    async with open_servers(cfg, tmp_path) as servers:
        result = await servers.servers["noisy"].call_tool("echo", {"text": "hi"})
        assert render_result(result) == "hi"
    assert others(warnings) == [
        "mcp server 'noisy' wrote something that is not a JSON-RPC message (ignored; a stdio "
        "server must keep stdout for the protocol)"
    ]


async def test_only_non_json_on_stdout_fails_the_start(tmp_path: Path) -> None:
    code = "print('I am not an MCP server')"
    cfg, warnings = config({"junk": {"command": sys.executable, "args": ["-c", code]}})
    async with open_servers(cfg, tmp_path):
        pass
    assert warnings[-1] == (
        "mcp server 'junk' did not start: it exited with status 0 during start-up (after 1 "
        "line(s) on stdout that were not JSON-RPC)"
    )


async def test_a_server_dying_mid_call_fails_the_call_naming_it_and_the_next_call_restarts_it_once(
    tmp_path: Path,
) -> None:
    cfg, warnings = config({"t": stdio_server()})
    async with open_servers(cfg, tmp_path) as servers:
        server = servers.servers["t"]
        first_pid = server._stdio.pid if server._stdio else None
        with pytest.raises(ToolError, match=r"^mcp server 't' went away during the call"):
            await server.call_tool("die", {})
        result = await server.call_tool("echo", {"text": "back"})
        assert render_result(result) == "back"
        assert server._stdio is not None
        assert server._stdio.pid != first_pid
        with pytest.raises(ToolError, match=r"^mcp server 't' went away during the call"):
            await server.call_tool("die", {})
        with pytest.raises(
            ToolError, match=r"^mcp server 't' is not running: it exited with status 7"
        ):
            await server.call_tool("echo", {"text": "again"})
    assert others(warnings) == ["mcp server 't' went away: it exited with status 7"] * 2


async def test_a_message_over_the_size_cap_ends_the_connection_with_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runtime.mcp import _stdio

    monkeypatch.setattr(_stdio, "MAX_LINE_BYTES", 1024 * 1024)
    cfg, warnings = config({"t": stdio_server()})
    async with open_servers(cfg, tmp_path) as servers:
        server = servers.servers["t"]
        with pytest.raises(
            ToolError,
            match=r"^mcp server 't' went away during the call \(it sent a message over 1 MB\)",
        ):
            await server.call_tool("big", {"megabytes": 2})
        assert render_result(await server.call_tool("echo", {"text": "restarted"})) == "restarted"
    assert others(warnings) == ["mcp server 't' went away: it sent a message over 1 MB"]


async def test_closing_kills_the_server_and_everything_it_started(tmp_path: Path) -> None:
    cfg, _ = config({"t": stdio_server()})
    async with open_servers(cfg, tmp_path) as servers:
        server = servers.servers["t"]
        assert server._stdio is not None
        assert server._stdio.pid is not None
        leader = server._stdio.pid
        grandchild = int(render_result(await server.call_tool("spawn", {})))
        assert psutil.pid_exists(grandchild)
    for pid in (leader, grandchild):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


async def test_a_stdio_server_gets_the_filtered_env_plus_its_own(tmp_path: Path) -> None:
    import os

    env = {"PATH": os.environ["PATH"], "VISIBLE": "yes"}
    cfg, _ = config({"t": stdio_server(env={"OWN": "${HOME_X:-mine}"})})
    async with open_servers(cfg, tmp_path, env=env) as servers:
        server = servers.servers["t"]

        async def get(name: str) -> str:
            return render_result(await server.call_tool("env", {"name": name}))

        assert await get("VISIBLE") == "yes"
        assert await get("OWN") == "mine"
        assert await get("OPENAI_API_KEY") == "<unset>"


async def test_http_cancelling_a_call_sends_notifications_cancelled_and_the_connection_stays(
    tmp_path: Path, http_url: str
) -> None:
    cfg, warnings = config({"h": {"type": "http", "url": http_url}})
    async with open_servers(cfg, tmp_path) as servers:
        server = servers.servers["h"]
        progress: list[tuple[float, float | None, str | None]] = []
        got_progress = trio.Event()

        async def on_progress(p: float, total: float | None, message: str | None) -> None:
            progress.append((p, total, message))
            got_progress.set()

        before = json.loads(render_result(await server.call_tool("cancellations", {})))
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(server.call_tool, "block", {"label": "x"}, on_progress)
                await got_progress.wait()
                t0 = trio.current_time()
                scope.cancel()
        assert trio.current_time() - t0 < 1.0  # ended at once, not when the server got to it
        assert progress == [(1.0, 10.0, "blocking x")]
        with trio.fail_after(10):
            # The server records the cancel when its handler unwinds (another process): poll.
            while len(  # noqa: ASYNC110
                after := json.loads(render_result(await server.call_tool("cancellations", {})))
            ) == len(before):
                await trio.sleep(0.05)
        assert len(after) == len(before) + 1
        assert render_result(await server.call_tool("echo", {"text": "still here"})) == "still here"
    assert warnings == [
        "mcp server 'h': tool 'bad.name' skipped: 'mcp__h__bad.name' is not a valid tool name (letters, digits, '_' and '-', at most 64 characters)"
    ]


async def test_http_connection_refused_is_one_warning(tmp_path: Path) -> None:
    cfg, warnings = config({"h": {"type": "http", "url": "http://127.0.0.1:1/mcp"}})
    async with open_servers(cfg, tmp_path) as servers:
        assert servers.servers["h"].state == "failed"
    assert len(warnings) == 1
    assert warnings[0].startswith("mcp server 'h' did not start: ConnectError: ")


async def test_expanded_values_never_reach_a_warning(tmp_path: Path) -> None:
    warnings: list[str] = []
    base = McpConfig.from_mapping(
        {"s": {"command": "${SECRET_BIN}", "args": ["--token", "${SECRET_BIN}"]}}
    )
    cfg = McpConfig(servers=base.servers, on_warning=warnings.append)
    async with open_mcp_servers(
        cfg, env={}, environ={"SECRET_BIN": "/nonexistent/s3cret-path"}, workspace=tmp_path
    ) as servers:
        assert "/nonexistent/s3cret-path" in servers.secrets
    assert warnings == ["mcp server 's' did not start: command '***' not found"]
