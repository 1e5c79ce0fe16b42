"""OAuth for remote MCP servers (docs/mcp-oauth.md), against a real authorization server and an
OAuth-protected MCP server on loopback (tests/mcp_oauth_server.py, the SDK's server-side auth):
``mcp login`` with an HTTP client playing the browser, a run calling the protected tool, the
tokens kept 0600 and masked everywhere, refreshed before they expire, ``mcp logout``, and no
login for an untrusted workspace's server."""

from __future__ import annotations

import functools
import json
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import attrs
import httpx2
import pytest
import trio

from runtime import decode_event
from runtime.mcp import (
    McpConfig,
    McpLoginError,
    TokenStore,
    load_mcp_config,
    login,
    open_mcp_servers,
    store_dir,
)
from tests.invariants import check_invariants
from tests.mcp_fixtures import http_url
from tests.oauth_browser import play
from tests.test_cli_run import Lines, child_env, cli, run_cli
from tests.test_mcp_cli import mcp_json, scenario

SERVER = Path(__file__).parent / "mcp_oauth_server.py"
BROWSER = Path(__file__).parent / "oauth_browser.py"
HINT = "it needs a login: run trio-agents mcp login p"

__all__ = ["http_url"]  # a fixture


@attrs.frozen
class OAuthServer:
    """The authorization server and the protected MCP server of one test."""

    issuer: str
    url: str

    async def stats(self) -> dict[str, int]:
        async with httpx2.AsyncClient() as client:
            return dict((await client.get(f"{self.issuer}/test/stats")).json())


@pytest.fixture
def oauth_server() -> Iterator[OAuthServer]:
    proc = subprocess.Popen(
        [sys.executable, str(SERVER)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert proc.stdout is not None
        as_port, rs_port = map(int, proc.stdout.readline().split())
        yield OAuthServer(f"http://127.0.0.1:{as_port}", f"http://127.0.0.1:{rs_port}/mcp")
    finally:
        proc.terminate()
        proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()


async def play_browser(auth_url: str, *, approve: bool = True) -> str:
    """:func:`tests.oauth_browser.play`, in a thread."""
    return await trio.to_thread.run_sync(lambda: play(auth_url, approve=approve))


def config_of(server: OAuthServer) -> McpConfig:
    return McpConfig.from_mapping({"p": {"type": "http", "url": server.url}})


async def log_in(server: OAuthServer, **kwargs: Any) -> bool:
    """``login`` in-process, the browser played as the URL is shown (its error unwrapped from
    the nursery's group)."""
    try:
        async with trio.open_nursery() as nursery:
            return await login(
                config_of(server).servers[0],
                folder=store_dir(),
                show_url=lambda url: nursery.start_soon(lambda: play_browser(url, **kwargs)),
                open_browser=False,
            )
    except ExceptionGroup as group:
        (only,) = group.exceptions
        raise only from None


def stored(server: OAuthServer) -> dict[str, Any]:
    return dict(json.loads(TokenStore(server.url, store_dir()).path.read_text()))


def edit_stored(server: OAuthServer, **changes: Any) -> None:
    path = TokenStore(server.url, store_dir()).path
    data = json.loads(path.read_text())
    for key, value in changes.items():
        if key in ("access_token", "refresh_token"):
            data["tokens"][key] = value
        else:
            data[key] = value
    path.write_text(json.dumps(data))


async def cli_login(
    workspace: Path, *extra: str, approve: bool = True
) -> tuple[int, list[str], str]:
    """``trio-agents mcp login p --no-browser`` in a subprocess, the browser played from the URL
    it prints; returns the exit code, its stderr lines and its stdout."""
    with trio.fail_after(60):
        proc = await trio.lowlevel.open_process(
            cli("mcp", "login", "p", "--no-browser", *extra),
            cwd=workspace,
            env=child_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stderr is not None
        assert proc.stdout is not None
        err, out = Lines(proc.stderr), Lines(proc.stdout)
        try:
            line = await err.until(lambda b: b.startswith((b"http", b"trio-agents: error")))
            if line.startswith(b"http"):
                page = await play_browser(line.decode(), approve=approve)
                assert ("Logged in" if approve else "refused") in page
            await err.drain()
            await out.drain()
            code = await proc.wait()
        finally:
            proc.kill()
        return code, [b.decode() for b in err.seen], "".join(f"{b.decode()}\n" for b in out.seen)


# -- login, then a run ------------------------------------------------------------------------


async def test_mcp_login_then_a_run_calls_the_protected_tool_and_no_token_is_in_its_output(
    tmp_path: Path, oauth_server: OAuthServer
) -> None:
    mcp_json(tmp_path / ".mcp.json", {"p": {"type": "http", "url": oauth_server.url}})
    code, err, out = await cli_login(tmp_path)
    assert code == 0, err
    assert err[0] == "open this URL in a browser to log in to mcp server 'p':"
    assert err[1].startswith(f"{oauth_server.issuer}/authorize?response_type=code&")
    assert "code_challenge_method=S256" in err[1]
    assert out == "logged in to mcp server 'p'\n"
    assert await oauth_server.stats() == {
        "registrations": 1,
        "authorizations": 1,
        "codes": 1,
        "refreshes": 0,
    }
    tokens = stored(oauth_server)["tokens"]

    scen = scenario(tmp_path / "s.json", ("mcp__p__add", {"a": 2, "b": 3}), ("mcp__p__whoami", {}))
    trace = tmp_path / "run.jsonl"
    proc = await run_cli(
        cli(
            "run",
            "go",
            "--scenario",
            str(scen),
            "--trace",
            str(trace),
            "--json",
            "--debug",
            "--allow",
            "mcp__p__*",
        ),
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    events = [decode_event(line) for line in proc.stdout.splitlines()]
    check_invariants(events)
    add, whoami = [e for e in events if e.type == "tool_finished"]
    assert (add.status, add.output) == ("ok", "5")  # type: ignore[attr-defined]
    # The server echoes the bearer token it was sent: the run shows it masked.
    assert whoami.output == "Bearer ***"  # type: ignore[attr-defined]
    for text in (proc.stdout, proc.stderr, trace.read_bytes()):
        assert tokens["access_token"].encode() not in text
        assert tokens["refresh_token"].encode() not in text


async def test_mcp_login_opens_the_system_browser_when_there_is_one(
    tmp_path: Path, oauth_server: OAuthServer
) -> None:
    mcp_json(tmp_path / ".mcp.json", {"p": {"type": "http", "url": oauth_server.url}})
    # The "system browser" is tests/oauth_browser.py, as webbrowser starts any: from $BROWSER.
    env = {k: v for k, v in child_env().items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["BROWSER"] = f"{sys.executable} {BROWSER} %s"
    with trio.fail_after(60):
        proc = await trio.run_process(
            cli("mcp", "login", "p"),
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.decode().splitlines()
    assert err[0] == "opening this URL in a browser to log in to mcp server 'p':"
    assert err[1].startswith(f"{oauth_server.issuer}/authorize?")
    assert proc.stdout == b"logged in to mcp server 'p'\n"
    assert stored(oauth_server)["tokens"]["access_token"].startswith("at_")


async def test_a_run_without_a_login_fails_that_server_with_one_line_and_registers_nothing(
    tmp_path: Path, oauth_server: OAuthServer
) -> None:
    mcp_json(tmp_path / ".mcp.json", {"p": {"type": "http", "url": oauth_server.url}})
    scen = scenario(tmp_path / "s.json")
    proc = await run_cli(cli("run", "go", "--scenario", str(scen), "--no-trace"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.decode().splitlines()[0] == (
        f"trio-agents: warning: mcp server 'p' did not start: {HINT}"
    )
    # A run asks nothing of the authorization server: no discovery, no registration.
    assert await oauth_server.stats() == {
        "registrations": 0,
        "authorizations": 0,
        "codes": 0,
        "refreshes": 0,
    }


async def test_the_login_line_names_the_mcp_config_file_the_server_came_from(
    tmp_path: Path, oauth_server: OAuthServer
) -> None:
    extra = mcp_json(tmp_path / "remote.json", {"p": {"type": "http", "url": oauth_server.url}})
    warnings: list[str] = []
    config = load_mcp_config([extra], on_warning=warnings.append)
    async with open_mcp_servers(config, env={}) as servers:
        assert servers.servers["p"].state == "failed"
    assert warnings == [f"mcp server 'p' did not start: {HINT} --mcp-config {extra}"]


async def test_a_401_asking_for_basic_auth_is_not_taken_for_an_oauth_login() -> None:
    async def basic_only(stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    return
                data += chunk
            await stream.send_all(
                b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=x\r\n"
                b"Content-Length: 0\r\nConnection: close\r\n\r\n"
            )

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(
            functools.partial(trio.serve_tcp, basic_only, 0, host="127.0.0.1")
        )
        port = listener.socket.getsockname()[1]
        config = McpConfig.from_mapping({"b": {"type": "http", "url": f"http://127.0.0.1:{port}/"}})
        async with open_mcp_servers(config, env={}) as servers:
            server = servers.servers["b"]
            assert server.state == "failed"
            assert server.error is not None
            assert "login" not in server.error, server.error
        nursery.cancel_scope.cancel(reason="the test is over")


async def test_mcp_list_says_which_server_needs_a_login(
    tmp_path: Path, oauth_server: OAuthServer
) -> None:
    mcp_json(tmp_path / ".mcp.json", {"p": {"type": "http", "url": oauth_server.url}})
    proc = await run_cli(cli("mcp", "list"), tmp_path)
    assert proc.returncode == 1
    assert proc.stdout.decode().splitlines() == [f"p  failed  http  {HINT}"]


# -- where the tokens are kept ------------------------------------------------------------


async def test_the_login_is_kept_0600_in_a_0700_folder_of_the_users_config(
    tmp_path: Path, oauth_server: OAuthServer, user_config_home: Path
) -> None:
    assert await log_in(oauth_server) is True
    path = TokenStore(oauth_server.url, store_dir()).path
    assert path.parent == user_config_home / "trio-agents" / "mcp-oauth"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    data = stored(oauth_server)
    assert data["server_url"] == oauth_server.url
    assert data["tokens"]["access_token"].startswith("at_")
    assert data["client"]["redirect_uris"][0].startswith("http://127.0.0.1:")
    assert data["discovery"]["authorization_server"] == f"{oauth_server.issuer}/"
    assert not list(tmp_path.rglob("*.json"))  # noqa: ASYNC240 - nothing in the workspace


async def test_a_second_login_reuses_the_registered_client_on_the_same_loopback_port(
    oauth_server: OAuthServer,
) -> None:
    await log_in(oauth_server)
    first = stored(oauth_server)
    await log_in(oauth_server)
    second = stored(oauth_server)
    assert second["client"]["client_id"] == first["client"]["client_id"]
    assert second["tokens"]["access_token"] != first["tokens"]["access_token"]
    assert (await oauth_server.stats())["registrations"] == 1


async def test_the_loopback_listener_takes_only_this_logins_answer(
    oauth_server: OAuthServer,
) -> None:
    async def forge_then_browse(auth_url: str) -> None:
        query = parse_qs(urlsplit(auth_url).query)
        redirect = query["redirect_uri"][0]
        async with httpx2.AsyncClient() as client:
            # Any local process can reach the port: a forged code, a forged error, a stray
            # request; none of them ends the login.
            forged = await client.get(redirect, params={"code": "evil", "state": "guess"})
            denied = await client.get(redirect, params={"error": "access_denied"})
            stray = await client.get(redirect.replace("/callback", "/favicon.ico"))
        assert (forged.status_code, denied.status_code, stray.status_code) == (400, 400, 404)
        assert "Logged in" in await play_browser(auth_url)

    async with trio.open_nursery() as nursery:
        asked = await login(
            config_of(oauth_server).servers[0],
            folder=store_dir(),
            show_url=lambda url: nursery.start_soon(forge_then_browse, url),
            open_browser=False,
        )
    assert asked is True
    assert stored(oauth_server)["tokens"]["access_token"].startswith("at_")


async def test_a_refused_consent_is_one_error_and_keeps_nothing(oauth_server: OAuthServer) -> None:
    with pytest.raises(McpLoginError) as caught:
        await log_in(oauth_server, approve=False)
    assert str(caught.value) == (
        "mcp server 'p': the authorization server refused the login: access_denied"
    )
    assert not TokenStore(oauth_server.url, store_dir()).path.exists()


async def test_mcp_login_refused_in_the_browser_is_one_error_line_and_exit_1(
    tmp_path: Path, oauth_server: OAuthServer
) -> None:
    mcp_json(tmp_path / ".mcp.json", {"p": {"type": "http", "url": oauth_server.url}})
    code, err, out = await cli_login(tmp_path, approve=False)
    assert code == 1
    assert err[2:] == [
        "trio-agents: error: mcp server 'p': the authorization server refused the login: "
        "access_denied"
    ]
    assert out == ""


async def test_mcp_login_to_a_server_that_needs_none_says_so_and_keeps_nothing(
    tmp_path: Path, http_url: str
) -> None:
    mcp_json(tmp_path / ".mcp.json", {"h": {"type": "http", "url": http_url}})
    proc = await run_cli(cli("mcp", "login", "h", "--no-browser"), tmp_path)
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert proc.stdout == b"mcp server 'h' answered without a login: nothing to keep\n"
    assert not TokenStore(http_url, store_dir()).path.exists()


async def test_mcp_logout_forgets_the_login_and_the_next_run_needs_one_again(
    tmp_path: Path, oauth_server: OAuthServer
) -> None:
    mcp_json(tmp_path / ".mcp.json", {"p": {"type": "http", "url": oauth_server.url}})
    await log_in(oauth_server)
    path = TokenStore(oauth_server.url, store_dir()).path
    assert path.exists()
    proc = await run_cli(cli("mcp", "logout", "p"), tmp_path)
    assert (proc.returncode, proc.stdout) == (0, b"logged out of mcp server 'p'\n"), proc.stderr
    assert not path.exists()
    again = await run_cli(cli("mcp", "logout", "p"), tmp_path)
    assert (again.returncode, again.stdout) == (0, b"mcp server 'p' had no login\n")
    listed = await run_cli(cli("mcp", "list"), tmp_path)
    assert listed.stdout.decode().splitlines() == [f"p  failed  http  {HINT}"]


# -- refresh --------------------------------------------------------------------------------


async def test_an_expired_token_is_refreshed_before_the_first_request_and_masked(
    oauth_server: OAuthServer,
) -> None:
    await log_in(oauth_server)
    old = stored(oauth_server)["tokens"]
    edit_stored(oauth_server, expires_at=0)
    async with open_mcp_servers(config_of(oauth_server), env={}) as servers:
        server = servers.servers["p"]
        assert server.state == "ready", server.error
        new = stored(oauth_server)["tokens"]
        assert new["access_token"] != old["access_token"]
        assert new["refresh_token"] != old["refresh_token"]  # rotated by the server
        # The run's secrets (what its bus masks) hold the refreshed tokens too.
        assert new["access_token"] in servers.secrets
        assert old["access_token"] in servers.secrets
        result = await server.call_tool("whoami", {})
    assert (await oauth_server.stats())["refreshes"] == 1
    assert result.content[0].text == f"Bearer {new['access_token']}"  # type: ignore[union-attr]


async def test_a_token_refreshed_mid_run_is_masked_in_the_servers_results(
    oauth_server: OAuthServer,
) -> None:
    await log_in(oauth_server)
    async with open_mcp_servers(config_of(oauth_server), env={}) as servers:
        server = servers.servers["p"]
        first = stored(oauth_server)["tokens"]["access_token"]
        assert (await server.call_tool("add", {"a": 1, "b": 1})).is_error is False
        # The token's time is up (as an hour later, without waiting an hour).
        server.auth.context.token_expiry_time = 1.0  # type: ignore[union-attr]
        result = await server.call_tool("whoami", {})
        fresh = stored(oauth_server)["tokens"]["access_token"]
        assert fresh != first
        assert fresh not in servers.secrets  # the run's were made at the start...
        echoed = result.content[0].text  # type: ignore[union-attr]
        assert echoed == f"Bearer {fresh}"
        assert server.masked(echoed) == "Bearer ***"  # ...the server's own mask has it
    assert (await oauth_server.stats())["refreshes"] == 1


async def test_a_token_the_server_stopped_taking_before_its_expiry_is_refreshed_once(
    oauth_server: OAuthServer,
) -> None:
    await log_in(oauth_server)
    async with open_mcp_servers(config_of(oauth_server), env={}) as servers:
        server = servers.servers["p"]
        first = stored(oauth_server)["tokens"]["access_token"]
        async with httpx2.AsyncClient() as client:  # revoked at the server, not expired here
            await client.post(f"{oauth_server.issuer}/test/expire")
        result = await server.call_tool("add", {"a": 2, "b": 2})
        assert (result.is_error, result.content[0].text) == (False, "4")  # type: ignore[union-attr]
        assert stored(oauth_server)["tokens"]["access_token"] != first
    assert (await oauth_server.stats())["refreshes"] == 1


async def test_a_refresh_the_server_refuses_is_the_login_line_not_a_browser(
    oauth_server: OAuthServer,
) -> None:
    await log_in(oauth_server)
    edit_stored(oauth_server, expires_at=0, refresh_token="rt_revoked")
    warnings: list[str] = []
    config = attrs.evolve(config_of(oauth_server), on_warning=warnings.append)
    async with open_mcp_servers(config, env={}) as servers:
        assert servers.servers["p"].state == "failed"
    assert warnings == [f"mcp server 'p' did not start: {HINT}"]
    assert (await oauth_server.stats())["authorizations"] == 1  # the login's own, no other


# -- trust ----------------------------------------------------------------------------------


async def test_an_untrusted_workspaces_server_never_starts_a_login(
    tmp_path: Path, oauth_server: OAuthServer
) -> None:
    (tmp_path / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"p": {"type": "http", "url": oauth_server.url}}})
    )
    proc = await run_cli(cli("mcp", "login", "p", "--no-browser"), tmp_path)
    assert proc.returncode == 2
    err = proc.stderr.decode().splitlines()
    assert err[0].startswith(
        "trio-agents: warning: not starting the MCP servers of .mcp.json (p): "
        "the workspace is not trusted"
    )
    assert err[1] == "trio-agents: error: no MCP server named 'p' (configured: none)"
    assert await oauth_server.stats() == {
        "registrations": 0,
        "authorizations": 0,
        "codes": 0,
        "refreshes": 0,
    }


async def test_login_refuses_a_stdio_server_and_one_with_its_own_authorization_header(
    tmp_path: Path,
) -> None:
    mcp_json(
        tmp_path / ".mcp.json",
        {
            "local": {"command": "true"},
            "keyed": {
                "type": "http",
                "url": "http://127.0.0.1:1/mcp",
                "headers": {"Authorization": "Bearer x"},
            },
        },
    )
    local = await run_cli(cli("mcp", "login", "local"), tmp_path)
    keyed = await run_cli(cli("mcp", "login", "keyed"), tmp_path)
    assert (local.returncode, keyed.returncode) == (2, 2)
    assert local.stderr == (
        b"trio-agents: error: mcp server 'local' is a stdio server: it has no OAuth login\n"
    )
    assert keyed.stderr == (
        b"trio-agents: error: mcp server 'keyed' sets its own Authorization header: it has no "
        b"OAuth login\n"
    )


# -- the official SDK's OAuth example --------------------------------------------------------

SIMPLE_AUTH = os.environ.get("TRIO_AGENTS_SDK_SIMPLE_AUTH") or str(
    Path(__file__).parent / "third_party"
)
"""Where the python-sdk's examples/servers/simple-auth package ``mcp_simple_auth`` is: vendored
in tests/third_party (its README says from which commit); the variable names another checkout's
simple-auth folder instead."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def sdk_example() -> Iterator[str]:
    """The SDK example's authorization server and resource server (``--port``s of their own, on
    localhost); yields the resource server's MCP URL."""
    assert Path(SIMPLE_AUTH, "mcp_simple_auth").is_dir(), SIMPLE_AUTH
    as_port, rs_port = _free_port(), _free_port()
    env = {**os.environ, "PYTHONPATH": SIMPLE_AUTH}
    run = "import sys; from mcp_simple_auth.{} import main; sys.exit(main())"
    servers = [
        ("auth_server", "--port", str(as_port)),
        ("server", "--port", str(rs_port), "--auth-server", f"http://localhost:{as_port}",
         "--transport", "streamable-http"),
    ]  # fmt: skip
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", run.format(module), *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for module, *args in servers
    ]
    try:
        for port in (as_port, rs_port):
            for _ in range(300):  # the servers import the SDK first: up to ~30 s here
                with socket.socket() as sock:
                    if sock.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.1)
        yield f"http://localhost:{rs_port}/mcp"
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)


async def test_the_sdks_own_oauth_example_logs_in_and_a_run_calls_its_tool_token_unseen(
    tmp_path: Path, sdk_example: str
) -> None:
    mcp_json(tmp_path / ".mcp.json", {"p": {"type": "http", "url": sdk_example}})
    code, err, out = await cli_login(tmp_path)
    assert code == 0, err
    assert err[0] == "open this URL in a browser to log in to mcp server 'p':"
    assert "code_challenge_method=S256" in err[1]
    assert out == "logged in to mcp server 'p'\n"
    store = TokenStore(sdk_example, store_dir())
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.path.parent.stat().st_mode) == 0o700
    token = json.loads(store.path.read_text())["tokens"]["access_token"]
    assert token.startswith("mcp_")  # the example's own tokens
    assert token not in "\n".join([*err, out])

    scen = scenario(tmp_path / "s.json", ("mcp__p__get_time", {}))
    trace = tmp_path / "run.jsonl"
    args = ["--scenario", str(scen), "--trace", str(trace), "--json", "--debug"]
    proc = await run_cli(cli("run", "go", *args, "--allow", "mcp__p__*"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    events = [decode_event(line) for line in proc.stdout.splitlines()]
    check_invariants(events)
    (call,) = [e for e in events if e.type == "tool_finished"]
    assert call.status == "ok"  # type: ignore[attr-defined]
    assert '"current_time"' in call.output  # type: ignore[attr-defined]
    for text in (proc.stdout, proc.stderr, trace.read_bytes()):
        assert token.encode() not in text


async def test_the_sdks_example_gives_no_refresh_token_so_an_expired_login_is_the_login_line(
    sdk_example: str,
) -> None:
    # Its provider issues no refresh token ("not supported in this example"): the refresh
    # itself is tested against tests/mcp_oauth_server.py above.
    config = McpConfig.from_mapping({"p": {"type": "http", "url": sdk_example}})
    async with trio.open_nursery() as nursery:
        asked = await login(
            config.servers[0],
            folder=store_dir(),
            show_url=lambda url: nursery.start_soon(play_browser, url),
            open_browser=False,
        )
    assert asked is True
    store = TokenStore(sdk_example, store_dir())
    data = json.loads(store.path.read_text())
    assert "refresh_token" not in data["tokens"]
    async with open_mcp_servers(config, env={}) as servers:  # the login works as it is
        result = await servers.servers["p"].call_tool("get_time", {})
        assert result.is_error is False
    store.path.write_text(json.dumps({**data, "expires_at": 0}))
    warnings: list[str] = []
    async with open_mcp_servers(attrs.evolve(config, on_warning=warnings.append), env={}) as late:
        assert late.servers["p"].state == "failed"
    assert warnings == [f"mcp server 'p' did not start: {HINT}"]


# -- the login file ---------------------------------------------------------------------------


def test_a_login_file_that_is_not_one_is_no_login(tmp_path: Path) -> None:
    store = TokenStore("https://a.example/mcp", tmp_path)
    assert store.load() is None
    store.save_tokens({"access_token": "at_1", "expires_in": 3600})
    assert store.load() is not None
    for bad in (b"{not json", b"[]", json.dumps({"server_url": "https://b.example/mcp"}).encode()):
        store.path.write_bytes(bad)
        assert store.load() is None


def test_each_write_is_0600_and_tightens_an_old_folder(tmp_path: Path) -> None:
    folder = tmp_path / "mcp-oauth"
    folder.mkdir(mode=0o755)
    store = TokenStore("https://a.example/mcp", folder)
    # A leftover of a writer killed mid-write (same pid) does not stop the next write.
    leftover = folder / f".{store.path.name}.{os.getpid()}.tmp"
    leftover.write_text("half")
    login = store.save_tokens({"access_token": "at_1", "refresh_token": "rt_1", "expires_in": 600})
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert not leftover.exists()
    assert sorted(login.secrets()) == ["at_1", "rt_1"]
    # Refreshed a tenth of its lifetime early (a minute at most).
    assert login.expires_at is not None
    assert login.refresh_at == login.expires_at - 60
    assert TokenStore("https://a.example/mcp", folder).delete() is True
    assert TokenStore("https://a.example/mcp", folder).delete() is False


def test_a_short_token_is_refreshed_a_tenth_of_its_lifetime_early(tmp_path: Path) -> None:
    login = TokenStore("https://a.example/mcp", tmp_path).save_tokens(
        {"access_token": "at_1", "expires_in": 30}
    )
    assert login.expires_at is not None
    assert login.refresh_at == pytest.approx(login.expires_at - 3)
