"""OAuth 2.1 for remote (HTTP) MCP servers, on the official SDK's client (docs/mcp-oauth.md).

The protocol is the SDK's :class:`mcp.client.auth.OAuthClientProvider`: on a ``401`` it
discovers the authorization server (the protected resource metadata of RFC 9728, then the
server metadata of RFC 8414), registers a client where the server offers dynamic client
registration (RFC 7591), and runs the authorization code grant with PKCE (S256). What this
module adds is where that meets a user and a run:

* :func:`login` (``trio-agents mcp login NAME``): a loopback redirect listener on
  ``127.0.0.1`` (RFC 8252), the authorization URL printed and opened in the system browser
  where there is one, the code taken from the redirect, the tokens kept by
  :class:`~runtime.mcp._oauth_store.TokenStore` (0600, in the user's config folder).
* :class:`RunOAuth`: the ``httpx2.Auth`` of each HTTP server of a run. A stored login is
  used and refreshed before it expires (the refresh token, no person needed); a server that
  wants a login a run cannot do (none stored, or the refresh refused) fails to start with one
  line naming the command to run. A run never opens a browser and never registers a client.
* Every token and client secret a run holds is one of the run's secrets: the stored ones are
  in the run's :class:`~runtime.core.Secrets` before any event, and one refreshed mid-run is
  added to its server's mask (the server's tool results and errors) and to the log mask.
"""

from __future__ import annotations

import contextlib
import os
import sys
import urllib.parse
import webbrowser
from collections.abc import AsyncGenerator, Callable, Generator, Mapping
from contextlib import asynccontextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any

import attrs
import httpx2
import trio
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.oauth2 import OAuthContext
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)

from runtime.core import AgentsError, Secrets

from ._config import McpServerConfig
from ._oauth_store import StoredLogin, TokenStore, refresh_margin

__all__ = [
    "LOGIN_TIMEOUT_S",
    "McpLoginError",
    "RunOAuth",
    "browser_available",
    "login",
    "login_hint",
    "wants_oauth",
]

LOGIN_TIMEOUT_S = 300.0
"""How long ``mcp login`` waits for the browser to come back to the loopback redirect."""
CALLBACK_PATH = "/callback"
_MAX_REQUEST_BYTES = 16 * 1024
_CALLBACK_READ_S = 10.0
_CLIENT_NAME = "trio-agents"


class McpLoginError(AgentsError):
    """An MCP server's OAuth login is missing, was refused, or could not be done."""


def login_hint(name: str, source: str = ".mcp.json") -> str:
    """What a run says of a server that needs a login: the command that does it (with the
    ``--mcp-config`` file the server came from, when that is not a ``.mcp.json``)."""
    extra = (
        ""
        if source == "mcp_servers" or Path(source).name == ".mcp.json"
        else (f" --mcp-config {source}")
    )
    return f"it needs a login: run trio-agents mcp login {name}{extra}"


def wants_oauth(server: McpServerConfig) -> bool:
    """Whether OAuth applies to *server*: an HTTP server whose configuration does not set its
    own ``Authorization`` header (a configured token is the user's choice, used as it is)."""
    return server.transport == "http" and not any(
        k.lower() == "authorization" for k in server.headers
    )


# -- the SDK's storage, over the login file ---------------------------------------------------


class _Storage:
    """The SDK's ``TokenStorage`` (an async protocol; these never wait) over one login: in
    memory, and in *store* when given (a login is staged in memory until it is done; a run
    writes each refresh through)."""

    def __init__(
        self,
        login: StoredLogin,
        store: TokenStore | None,
        on_secrets: Callable[[list[str]], None],
    ) -> None:
        self.login = login
        self._store = store
        self._on_secrets = on_secrets

    async def get_tokens(self) -> OAuthToken | None:
        if not self.login.tokens:
            return None
        try:
            return OAuthToken.model_validate(self.login.tokens)
        except ValueError:
            return None  # a file not written by this runtime: as good as no login

    async def set_tokens(self, tokens: OAuthToken) -> None:
        data = tokens.model_dump(mode="json", exclude_none=True)
        if self._store is not None:
            self.login = self._store.save_tokens(data)
        else:
            lifetime = float(tokens.expires_in) if tokens.expires_in is not None else None
            self.login = attrs.evolve(
                self.login,
                tokens=data,
                expires_at=_now() + lifetime if lifetime is not None else None,
                lifetime_s=lifetime,
            )
        self._on_secrets(self.login.secrets())

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        if not self.login.client:
            return None
        try:
            return OAuthClientInformationFull.model_validate(self.login.client)
        except ValueError:
            return None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        data = client_info.model_dump(mode="json", exclude_none=True)
        if self._store is not None:
            self.login = self._store.save_client(data)
        else:
            self.login = attrs.evolve(self.login, client=data)
        self._on_secrets(self.login.secrets())


def _now() -> float:
    import time

    return time.time()  # the SDK's expiry clock (wall time), not trio's


class _Context(OAuthContext):
    """The SDK's flow state, with an access token counted as expired a little before it is
    (:func:`~runtime.mcp._oauth_store.refresh_margin`): refreshed before the server refuses
    it, not after (a refusal mid-run would need a person)."""

    def update_token_expiry(self, token: OAuthToken) -> None:
        super().update_token_expiry(token)
        if self.token_expiry_time is not None and token.expires_in is not None:
            self.token_expiry_time -= refresh_margin(float(token.expires_in))


class _Provider(OAuthClientProvider):
    """The SDK's provider with :class:`_Context`, and what a login stored put back: the
    token's expiry (the SDK would take a token read back from storage as valid for ever) and
    the discovered authorization server (else a refresh in a later process goes to the MCP
    server's own origin, which is not where the tokens come from)."""

    def __init__(self, *, storage: _Storage, **kwargs: Any) -> None:
        super().__init__(storage=storage, **kwargs)
        self._login_storage = storage
        old = self.context
        self.context = _Context(**{f.name: getattr(old, f.name) for f in fields(old) if f.init})

    async def _initialize(self) -> None:
        await super()._initialize()
        login = self._login_storage.login
        if self.context.current_tokens is not None and login.refresh_at is not None:
            # Never 0: the SDK reads an expiry of 0 as "does not expire".
            self.context.token_expiry_time = max(login.refresh_at, 1.0)
        found = login.discovery or {}
        try:
            if self.context.oauth_metadata is None and found.get("metadata"):
                self.context.oauth_metadata = OAuthMetadata.model_validate(found["metadata"])
            if self.context.protected_resource_metadata is None and found.get("resource"):
                self.context.protected_resource_metadata = ProtectedResourceMetadata.model_validate(
                    found["resource"]
                )
        except ValueError:
            pass  # not written here: discovered again on the next 401
        if self.context.auth_server_url is None and isinstance(
            found.get("authorization_server"), str
        ):
            self.context.auth_server_url = found["authorization_server"]

    async def _auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        """The SDK's flow, but a ``401`` to a token that had not expired yet is answered with
        a refresh first, once (the SDK would go straight to a new authorization, which needs
        a person: a token revoked or rotated at the server is refreshed without one)."""
        flow = super()._auth_flow(request)
        retried = False
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                if (
                    outgoing is request
                    and response.status_code == 401
                    and not retried
                    and self.context.is_token_valid()
                    and self.context.can_refresh_token()
                ):
                    retried = True
                    await flow.aclose()  # leaves the SDK's lock
                    self.context.token_expiry_time = 1.0  # due now: the flow refreshes first
                    flow = super()._auth_flow(request)
                    outgoing = await flow.__anext__()
                    continue
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()

    def discovery(self) -> dict[str, Any]:
        """What this flow discovered, to store with the login."""
        ctx = self.context
        return {
            "authorization_server": ctx.auth_server_url,
            "metadata": ctx.oauth_metadata.model_dump(mode="json", exclude_none=True)
            if ctx.oauth_metadata is not None
            else None,
            "resource": ctx.protected_resource_metadata.model_dump(mode="json", exclude_none=True)
            if ctx.protected_resource_metadata is not None
            else None,
        }


def _client_metadata(redirect_uri: str) -> OAuthClientMetadata:
    # A public native client (RFC 8252): no client secret of its own, PKCE for every grant.
    return OAuthClientMetadata.model_validate(
        {
            "client_name": _CLIENT_NAME,
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }
    )


# -- a run ------------------------------------------------------------------------------------


class _LoginRequired(httpx2.Auth):
    """A server with no stored login: its first ``401`` asking for a bearer token (or for
    nothing named: servers of the 2025-03-26 protocol) is the one line to log in. No
    discovery, no registration: a run asks nothing of an authorization server unasked."""

    requires_response_body = False

    def __init__(self, hint: str) -> None:
        self._hint = hint

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        response = yield request
        challenge = response.headers.get("www-authenticate", "").strip().lower()
        if response.status_code == 401 and (not challenge or challenge.startswith("bearer")):
            raise McpLoginError(self._hint)


class RunOAuth:
    """The OAuth of one run's HTTP servers (made by ``open_mcp_servers``).

    Args:
        folder: where the logins are kept (the user's, ``runtime/mcp/_oauth_store.py``).

    :meth:`stored_secrets` before the servers start (their tokens join the run's secrets),
    :meth:`auth_for` for each HTTP server's client, :meth:`close` when the run is over.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._known: set[str] = set()
        self._logs = contextlib.ExitStack()

    def stored_secrets(self, server: McpServerConfig) -> list[str]:
        """The tokens and client secret stored for *server* (none for a non-OAuth server)."""
        if not wants_oauth(server):
            return []
        login = TokenStore(server.url, self.folder).load()
        values = login.secrets() if login is not None else []
        self._known.update(values)
        return values

    def auth_for(
        self, server: McpServerConfig, on_secrets: Callable[[list[str]], None]
    ) -> httpx2.Auth | None:
        """The ``httpx2.Auth`` of *server*'s client, or ``None`` when OAuth does not apply.

        *on_secrets* is called with a server's secrets whenever they change (a refresh).
        """
        if not wants_oauth(server):
            return None
        store = TokenStore(server.url, self.folder)
        login = store.load()
        hint = login_hint(server.name, server.source)
        if login is None or not login.tokens:
            return _LoginRequired(hint)

        def new_secrets(values: list[str]) -> None:
            fresh = [v for v in values if v not in self._known]
            if fresh:
                self._known.update(fresh)
                self._logs.enter_context(Secrets(fresh).in_logs())
                on_secrets(fresh)

        async def cannot_log_in(*_: object) -> Any:  # noqa: RUF029 - the SDK awaits it
            raise McpLoginError(hint)

        redirect = _redirect_uris(login)
        return _Provider(
            server_url=server.url,
            client_metadata=_client_metadata(redirect[0] if redirect else _loopback(0)),
            storage=_Storage(login, store, new_secrets),
            redirect_handler=cannot_log_in,
            callback_handler=cannot_log_in,
        )

    def secrets(self) -> list[str]:
        """Every token and client secret this run has seen so far."""
        return sorted(self._known)

    def close(self) -> None:
        """Stop masking the run's tokens in log lines (the run is over)."""
        self._logs.close()


def _redirect_uris(login: StoredLogin | None) -> list[str]:
    uris = (login.client or {}).get("redirect_uris") if login is not None else None
    return [u for u in uris if isinstance(u, str)] if isinstance(uris, list) else []


def _loopback(port: int) -> str:
    return f"http://127.0.0.1:{port}{CALLBACK_PATH}"


# -- mcp login ----------------------------------------------------------------------------


class _Callback:
    """The loopback redirect: the first authorization response of this login that arrives
    (one whose ``state`` is the authorization request's: any local process can reach the
    port, and a forged answer must not end the login)."""

    def __init__(self, port: int) -> None:
        self.redirect_uri = _loopback(port)
        self._state: str | None = None
        self._send, self._recv = trio.open_memory_channel[AuthorizationCodeResult | str](1)

    def expect(self, authorization_url: str) -> None:
        """Take only answers to *authorization_url* (its ``state``)."""
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(authorization_url).query)
        states = query.get("state")
        self._state = states[0] if states else None

    async def wait(self) -> AuthorizationCodeResult:
        """The authorization code (the SDK's ``callback_handler``); a checkpoint.

        Raises:
            McpLoginError: the authorization server sent an error instead.
        """
        got = await self._recv.receive()
        if isinstance(got, str):
            raise McpLoginError(got)
        return got

    async def serve(self, stream: trio.SocketStream) -> None:
        """Answer one connection to the listener (a browser, or anything else local)."""
        async with stream:
            with trio.move_on_after(_CALLBACK_READ_S):
                head = await _read_head(stream)
                status, page = self._take(head)
                body = page.encode()
                await stream.send_all(
                    f"HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                    + body
                )

    def _take(self, head: bytes) -> tuple[str, str]:
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != "GET":
            return "400 Bad Request", _page("Not an authorization response.")
        target = urllib.parse.urlsplit(parts[1])
        if target.path != CALLBACK_PATH:
            return "404 Not Found", _page("Not found.")
        query = urllib.parse.parse_qs(target.query)

        def one(key: str) -> str | None:
            values = query.get(key)
            return values[0] if values else None

        if self._state is None or one("state") != self._state:
            return "400 Bad Request", _page("Not an answer to this login.")
        error, code = one("error"), one("code")
        got: AuthorizationCodeResult | str
        if error is not None:
            why = one("error_description")
            got = f"the authorization server refused the login: {error}" + (
                f" ({why})" if why else ""
            )
        elif code:
            got = AuthorizationCodeResult(code=code, state=one("state"), iss=one("iss"))
        else:
            return "400 Bad Request", _page("No authorization code.")
        with contextlib.suppress(trio.WouldBlock):  # the first answer counts, not a second
            self._send.send_nowait(got)
        if isinstance(got, str):
            return "200 OK", _page("The login was refused. You can close this tab.")
        return "200 OK", _page("Logged in. You can close this tab and return to the terminal.")


def _page(text: str) -> str:
    return f"<!doctype html><title>{_CLIENT_NAME}</title><p>{text}</p>\n"


async def _read_head(stream: trio.SocketStream) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data and len(data) < _MAX_REQUEST_BYTES:
        chunk = await stream.receive_some(4096)
        if not chunk:
            break
        data += chunk
    return data


@asynccontextmanager
async def _open_callback(port: int) -> AsyncGenerator[_Callback, None]:
    """A listener on ``127.0.0.1:PORT`` (any free port when *port* is 0 or taken)."""
    try:
        listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
    except OSError:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    callback = _Callback(listeners[0].socket.getsockname()[1])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, callback.serve, listeners)
        try:
            yield callback
        finally:
            nursery.cancel_scope.cancel(reason="the login is over")


def browser_available(env: Mapping[str, str] | None = None) -> bool:
    """Whether a system browser can be opened: macOS and Windows, or a graphical session
    (``DISPLAY``, ``WAYLAND_DISPLAY``) or a ``BROWSER`` set. Without one, Python would start
    a text browser in the terminal the command is using."""
    env = os.environ if env is None else env
    if sys.platform in ("darwin", "win32"):
        return True
    return any(env.get(k) for k in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER"))


async def login(
    server: McpServerConfig,
    *,
    folder: Path,
    show_url: Callable[[str], None],
    open_browser: bool,
) -> bool:
    """Log in to *server* (expanded) and keep the tokens; whether it asked for a login.

    Connects as a run does; when the server answers ``401``, the SDK discovers its
    authorization server and registers a client if needed; the authorization URL goes to
    *show_url* (and the system browser when *open_browser*), and the redirect comes back to a
    loopback listener. The tokens (and the registered client) are written to the store only
    once the login is done: a failed login leaves the old one as it was.

    Raises:
        McpLoginError: the server is not an OAuth one, the authorization server refused, or
            the flow failed (one line).

    Cancellation: closes the listener and the connection; nothing is written.
    """
    if not wants_oauth(server):
        raise McpLoginError(
            f"mcp server {server.name!r} is not a remote HTTP server using OAuth"
            + (
                " (its configuration sets an Authorization header)"
                if server.transport == "http"
                else ""
            )
        )
    store = TokenStore(server.url, folder)
    old = store.load()
    ports = [urllib.parse.urlsplit(u).port or 0 for u in _redirect_uris(old)]
    asked: list[str] = []

    async def redirect_handler(url: str) -> None:
        asked.append(url)
        callback.expect(url)
        show_url(url)
        if open_browser:
            await trio.to_thread.run_sync(webbrowser.open, url, abandon_on_cancel=True)

    with _flow_errors(server.name):
        async with _open_callback(ports[0] if ports else 0) as callback:
            keep = old is not None and callback.redirect_uri in _redirect_uris(old)
            staged = StoredLogin(server_url=server.url, client=old.client if keep and old else None)
            storage = _Storage(staged, None, lambda _: None)
            provider = _Provider(
                server_url=server.url,
                client_metadata=_client_metadata(callback.redirect_uri),
                storage=storage,
                redirect_handler=redirect_handler,
                callback_handler=callback.wait,
            )
            await _initialize_through(server, provider)
    if storage.login.tokens:
        store.save(attrs.evolve(storage.login, discovery=provider.discovery()))
    return bool(asked)


async def _initialize_through(server: McpServerConfig, auth: httpx2.Auth) -> None:
    """Connect to *server* as a run does, with *auth*, and say ``initialize`` (where a ``401``
    starts the SDK's flow)."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(
            headers=dict(server.headers), timeout=httpx2.Timeout(30.0, read=300.0), auth=auth
        ) as client,
        streamable_http_client(server.url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()


@contextlib.contextmanager
def _flow_errors(name: str) -> Generator[None, None, None]:
    """The SDK's errors (in task groups, as its transport raises them) as one line."""
    try:
        yield
    except Exception as exc:
        leaf: BaseException = exc
        while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
            leaf = leaf.exceptions[0]
        if isinstance(leaf, McpLoginError):
            raise McpLoginError(f"mcp server {name!r}: {leaf}") from None
        text = str(leaf) or type(leaf).__name__
        raise McpLoginError(
            f"mcp server {name!r}: the login failed: {type(leaf).__name__}: {text}"
        ) from None
