"""MCP servers as actors of a run.

Each configured server is one task, :meth:`McpServer.run`, that owns its connection: it starts
the transport (a child process, or an HTTP client), the SDK's :class:`mcp.ClientSession` over
it, says ``initialize`` and lists the tools, then waits until the connection is lost or the run
ends. Agents call tools through the same :class:`McpServer` object from their own tasks (one
connection per server per run, shared by every agent); each call is one JSON-RPC request, so
cancelling a call (a subtree cancel) cancels just that request: the SDK sends
``notifications/cancelled`` for it and the connection stays up for everyone else.

Task tree (inside :func:`open_mcp_servers`, entered by ``open_runtime`` before the agents'
nursery, so the servers outlive every agent and close after them)::

    mcp nursery
    └── McpServer.run                 one per server; restarts its connection once, on demand
        └── connection nursery        one per connection (start-up bounded by the start timeout)
            ├── transport             StdioTransport.run (process, pipes) or the HTTP client
            ├── ClientSession         the SDK's JSON-RPC session (its own reader task)
            └── _tell_roots           once ready: roots/list_changed when the worktrees change

States: ``starting`` → ``ready`` → ``lost`` (the server went away; the next call restarts it,
once per run) → ``starting`` …; ``failed`` (it could not start: its tools are not offered, or a
restart failed: its calls end ``error``); ``closed`` (the run is over).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio
import httpx2
import mcp_types
import trio
from mcp import ClientSession, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT

from runtime._logs import get_logger
from runtime.core import NO_SECRETS, Secrets, Tool, ToolError, one_line

from ._client import Caller, ServerRequests
from ._config import McpConfig, McpServerConfig
from ._oauth import McpLoginError, RunOAuth
from ._oauth_store import store_dir
from ._stdio import MAX_LINE_BYTES, StdioTransport

if TYPE_CHECKING:
    from runtime.core import RunContext


__all__ = ["McpServer", "McpServers", "ServerState", "open_mcp_servers"]

ServerState = Literal["starting", "ready", "lost", "failed", "closed"]
_T = TypeVar("_T")

RESTARTS = 1
"""How many times per run a server that went away is started again (on the next call)."""
_MAX_TOOL_PAGES = 100
MAX_RELISTS = 100
"""How many times per run a server's lists are listed again after a ``list_changed``."""
RELIST_WAIT_S = 5.0
"""How long a call waits for the lists its server said changed during it."""
COMPLETE_TIMEOUT_S = 3.0
"""How long the chat's Tab waits for a server's completions of a prompt argument."""
_LIST_CHANGED: Mapping[str, type] = {
    "notifications/tools/list_changed": mcp_types.ToolListChangedNotification,
    "notifications/resources/list_changed": mcp_types.ResourceListChangedNotification,
    "notifications/prompts/list_changed": mcp_types.PromptListChangedNotification,
}
MAX_LISTED = 10_000
"""The most resources, resource templates or prompts kept of one server."""
_CLIENT_INFO = mcp_types.Implementation(name="trio-agents", version="0.1.0")


class McpServer:
    """One configured server: the actor owning its connection, and the handle tools call.

    Attributes:
        name: the configured name.
        transport: ``stdio`` or ``http`` (``unsupported`` for a type this runtime does not speak).
        state: see the module docs.
        error: why it is ``failed`` or ``lost`` (one line, secrets masked).
        tools: the tools it listed when it started (SDK objects).
        resources, resource_templates, prompts: what else it listed then (where it offers
            them; at most :data:`MAX_LISTED` each).
        instructions: what the server said about itself in ``initialize``, if anything.
    """

    def __init__(
        self,
        config: McpServerConfig,
        *,
        env: Mapping[str, str],
        cwd: Path,
        start_timeout_s: float,
        secrets: Secrets,
        warn: Callable[[str], None],
    ) -> None:
        self.name = config.name
        self.transport = config.transport
        self.config = config
        self.state: ServerState = "starting"
        self.error: str | None = None
        self.tools: list[mcp_types.Tool] = []
        self.resources: list[mcp_types.Resource] = []
        self.resource_templates: list[mcp_types.ResourceTemplate] = []
        self.prompts: list[mcp_types.Prompt] = []
        self.instructions: str | None = None
        self.started = trio.Event()
        """Set once the first start has ended, whichever way."""
        self._env = env
        self._cwd = cwd
        self._start_timeout_s = start_timeout_s
        self._secrets = secrets
        self._warn = warn
        self._session: ClientSession | None = None
        self._generation = 0
        self._lost = trio.Event()
        self._changed = trio.Event()
        self._restart = trio.Event()
        self._restarts_left = RESTARTS
        self._stdio: StdioTransport | None = None
        self._bad_line_warned = False
        self.requests = ServerRequests(config.name, cwd, secrets)
        """What the server asks of the client (sampling, elicitation, roots, logging)."""
        self.on_tools_changed: Callable[[McpServer], None] | None = None
        """Called after the server's tools were listed again (``tools/list_changed``)."""
        self.on_resource_updated: Callable[[McpServer, str], None] | None = None
        """Called with the URI of a ``notifications/resources/updated`` the server sent."""
        self._stale: set[type] = set()
        self._settled = trio.Event()
        self._settled.set()
        self._relisting = False
        self._relists = 0
        # OAuth for a remote server (docs/mcp-oauth.md): set by open_mcp_servers.
        self.auth: httpx2.Auth | None = None

    # -- the actor -------------------------------------------------------------------------

    async def run(self) -> None:
        """Own the server's connection until cancelled (the end of the run).

        Cancellation: closes the connection (a stdio server's process group is terminated,
        then killed; bounded) and ends ``closed``.
        """
        try:
            first = True
            while True:
                if self.transport == "unsupported":
                    self._set("failed", self.config.problem)
                else:
                    await self._connect_and_serve(first)
                first = False
                self.started.set()
                if self.state != "lost":
                    await trio.sleep_forever()
                await self._restart.wait()
                self._restart = trio.Event()
        finally:
            self._session = None
            self._set("closed", self.error)
            self.started.set()

    async def _connect_and_serve(self, first: bool) -> None:
        """One connection, from start to loss; leaves the state ``failed`` or ``lost``."""
        self._set("starting", None)
        lost = self._lost = trio.Event()
        ready = False
        try:
            with trio.CancelScope(deadline=trio.current_time() + self._start_timeout_s) as start:
                async with trio.open_nursery() as nursery:
                    read, write = await nursery.start(self._run_transport, lost)
                    async with _Session(
                        self._mark_stale,
                        read,
                        write,
                        message_handler=self._on_message,
                        client_info=_CLIENT_INFO,
                        # Declaring these is what makes a server offer the tools that use
                        # them (server-everything's sampling and elicitation tools).
                        sampling_callback=self.requests.sample,
                        elicitation_callback=self.requests.elicit,
                        list_roots_callback=self.requests.list_roots,
                        logging_callback=self.requests.log,
                    ) as session:
                        init = await session.initialize()
                        tools = await _list_tools(session)
                        if first:
                            await self._list_extras(session, init.capabilities)
                        start.deadline = math.inf
                        if first:
                            self.tools = tools
                            self.instructions = init.instructions
                        ready = True
                        self._session = session
                        self._generation += 1
                        self._set("ready", None)
                        self.started.set()
                        nursery.start_soon(self._tell_roots, session)
                        await lost.wait()
                        self._session = None
                        nursery.cancel_scope.cancel(reason="the connection was lost")
        except Exception as exc:  # the transport's own task failed (HTTP connect, spawn)
            why = self._why(exc)
        else:
            if ready:
                why = self._lost_why()
            elif start.cancelled_caught:
                why = f"no answer within {self._start_timeout_s:g} s{self._tail()}"
            else:
                why = self._lost_why(starting=True)
        self._session = None
        if ready:
            self._set("lost", why)
            self._warn(f"mcp server {self.name!r} went away: {self.error}")
        else:
            self._set("failed", why)
            if not first:
                self._warn(f"mcp server {self.name!r} could not be restarted: {self.error}")

    async def _list_extras(
        self, session: ClientSession, caps: mcp_types.ServerCapabilities
    ) -> None:
        """The server's resources, resource templates and prompts, where it offers them
        (bounded, docs/mcp.md); a server that fails to list them keeps its tools."""
        try:
            if caps.resources is not None:
                self.resources = await _paged(session.list_resources, "resources")
                self.resource_templates = await _paged(
                    session.list_resource_templates, "resource_templates"
                )
            if caps.prompts is not None:
                self.prompts = await _paged(session.list_prompts, "prompts")
        except MCPError as exc:
            if exc.error.code == mcp_types.CONNECTION_CLOSED:
                raise
            self._warn(
                f"mcp server {self.name!r} could not list its resources or prompts: "
                f"{self._secrets.text(one_line(exc.error.message, 300))}"
            )

    async def _run_transport(
        self, lost: trio.Event, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED
    ) -> None:
        try:
            if self.transport == "stdio":
                self._stdio = StdioTransport(
                    self.config.command, self.config.args, self._env, str(self._cwd)
                )
                await self._stdio.run(task_status=task_status, eof=lost)
            else:
                timeout = httpx2.Timeout(30.0, read=300.0)
                async with (
                    httpx2.AsyncClient(
                        headers=dict(self.config.headers),
                        timeout=timeout,
                        auth=self.auth,
                        event_hooks={"response": [_cap_body]},
                    ) as client,
                    # A message may be as large over HTTP as over stdio (docs/mcp.md, "Each
                    # server is an actor of the run"): as a JSON body (_cap_body) or one event.
                    streamable_http_client(
                        self.config.url, http_client=client, max_sse_event_size=MAX_LINE_BYTES
                    ) as streams,
                ):
                    task_status.started(streams)
                    await trio.sleep_forever()
        finally:
            lost.set()

    async def _tell_roots(self, session: ClientSession) -> None:
        """Send ``notifications/roots/list_changed`` each time the run's worktrees change
        (docs/mcp.md, "Roots"), for as long as the connection lasts; the server asks for the
        list again if it cares."""
        while True:
            await self.requests.roots_changed()
            try:
                await session.send_notification(mcp_types.RootsListChangedNotification())
            # The SDK drops a notification after the connection closed; one that is closing
            # may still fail to take it: the loss is reported by the connection itself.
            except (MCPError, OSError, *_CLOSED) as exc:
                _log.debug("mcp.roots_not_told", server=self.name, error=type(exc).__name__)
                return

    def _mark_stale(self, method: str) -> None:
        # In receive order, before the answer of the call during which the server said it:
        # that call waits for the new list (tools_settled), so the agent's next turn has it.
        kind = _LIST_CHANGED.get(method)
        if kind is not None:
            self._stale.add(kind)
            if self._settled.is_set():
                self._settled = trio.Event()

    async def tools_settled(self) -> None:
        """Wait (at most :data:`RELIST_WAIT_S`) until the lists a ``list_changed`` made stale
        are listed again. Cancellation: a checkpoint."""
        with trio.move_on_after(RELIST_WAIT_S):
            await self._settled.wait()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, tuple(_LIST_CHANGED.values())):
            await self._relist(type(message))
            return
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            if self.on_resource_updated is not None:
                self.on_resource_updated(self, message.params.uri)
            return
        if isinstance(message, Exception) and not self._bad_line_warned:
            self._bad_line_warned = True
            self._warn(
                f"mcp server {self.name!r} wrote something that is not a JSON-RPC message "
                "(ignored; a stdio server must keep stdout for the protocol)"
            )

    async def _relist(self, kind: type) -> None:
        """List again what a ``notifications/*/list_changed`` says changed, then tell the run
        (:attr:`on_tools_changed`). A flood is coalesced: one listing at a time, one more after
        it when more notifications came meanwhile, at most :data:`MAX_RELISTS` per run."""
        self._stale.add(kind)
        if self._relisting:
            return
        self._relisting = True
        try:
            while self._stale and self._relists < MAX_RELISTS:
                self._relists += 1
                stale, self._stale = self._stale, set()
                session = self._session
                if session is None:
                    return
                try:
                    if mcp_types.ToolListChangedNotification in stale:
                        tools = await _list_tools(session)
                        self.tools = tools
                        if self.on_tools_changed is not None:
                            self.on_tools_changed(self)
                    if stale - {mcp_types.ToolListChangedNotification}:
                        caps = session.server_capabilities
                        if caps is not None:
                            await self._list_extras(session, caps)
                except MCPError as exc:
                    self._warn(
                        f"mcp server {self.name!r} said its lists changed but could not list "
                        f"them again: {self._secrets.text(one_line(exc.error.message, 300))}"
                    )
        finally:
            self._relisting = False
            self._stale.clear()  # past MAX_RELISTS, or the connection is gone: nothing waits
            self._settled.set()

    # -- calls -----------------------------------------------------------------------------

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any],
        on_progress: ProgressFnT | None = None,
        caller: Caller | None = None,
    ) -> mcp_types.CallToolResult:
        """Call tool *name* (its name on the server) and return the server's result.

        Waits while the server starts; starts it again if it went away (once per run).
        *caller* is whom the server's requests during the call are answered for (sampling,
        elicitation: docs/mcp.md); they are cancelled when the call ends.

        Raises:
            ToolError: the server is not running, went away during the call, or answered with
                a JSON-RPC error; the message names the server.

        Cancellation: cancels this request only: the SDK sends ``notifications/cancelled`` for
        it, and the connection stays usable by every other call.
        """

        async def call(session: ClientSession) -> mcp_types.CallToolResult:
            if caller is None:
                return await session.call_tool(
                    name, dict(arguments), progress_callback=on_progress
                )
            with self.requests.calling(caller):
                return await session.call_tool(
                    name, dict(arguments), progress_callback=on_progress
                )

        return await self._request(call, "the call")

    async def read_resource(self, uri: str) -> mcp_types.ReadResourceResult:
        """Read resource *uri* of this server (docs/mcp.md, "Resources").

        Raises:
            ToolError: as :meth:`call_tool` does.

        Cancellation: cancels this request only, as :meth:`call_tool`.
        """

        async def read(session: ClientSession) -> mcp_types.ReadResourceResult:
            return await session.read_resource(uri)

        return await self._request(read, "the read")

    async def get_prompt(
        self, name: str, arguments: Mapping[str, str]
    ) -> mcp_types.GetPromptResult:
        """Get prompt *name* of this server with *arguments* (docs/mcp.md, "Prompts").

        Raises:
            ToolError: as :meth:`call_tool` does.

        Cancellation: cancels this request only, as :meth:`call_tool`.
        """

        async def get(session: ClientSession) -> mcp_types.GetPromptResult:
            return await session.get_prompt(name, dict(arguments))

        return await self._request(get, "the request")

    @property
    def completes(self) -> bool:
        """Whether the server offers argument completions (``completion/complete``)."""
        session = self._session
        caps = session.server_capabilities if session is not None else None
        return caps is not None and caps.completions is not None

    async def complete(
        self,
        ref: mcp_types.PromptReference | mcp_types.ResourceTemplateReference,
        name: str,
        value: str,
        context: Mapping[str, str],
    ) -> list[str]:
        """The server's values for argument *name* of *ref* that start as *value* does, the
        arguments given so far in *context* (docs/mcp.md, "Prompts"); at most 100, as the
        protocol bounds them.

        Raises:
            ToolError: as :meth:`call_tool` does.

        Cancellation: cancels this request only, as :meth:`call_tool`.
        """

        async def ask(session: ClientSession) -> mcp_types.CompleteResult:
            argument = {"name": name, "value": value}
            return await session.complete(ref, argument, dict(context) or None)

        result = await self._request(ask, "the completion")
        return [v for v in result.completion.values[:100] if isinstance(v, str)]

    @property
    def subscribes(self) -> bool:
        """Whether the server takes ``resources/subscribe`` (its ``resources`` capability)."""
        session = self._session
        caps = session.server_capabilities if session is not None else None
        return caps is not None and caps.resources is not None and bool(caps.resources.subscribe)

    async def subscribe(self, uri: str, *, on: bool = True) -> None:
        """Subscribe to resource *uri* (or, ``on=False``, unsubscribe): the server then sends
        ``notifications/resources/updated`` when it changes (docs/mcp.md, "Resources").

        Raises:
            ToolError: as :meth:`call_tool` does.

        Cancellation: cancels this request only, as :meth:`call_tool`.
        """

        # The request itself, not the SDK's wrappers: they are deprecated for the 2026-07-28
        # protocol (which follows resources with a stream instead), and the servers that say
        # ``subscribe`` in their capabilities speak the 2025 one.
        async def send(session: ClientSession) -> object:
            params = mcp_types.SubscribeRequestParams(uri=uri)
            if on:
                request: Any = mcp_types.SubscribeRequest(params=params)
            else:
                request = mcp_types.UnsubscribeRequest(
                    params=mcp_types.UnsubscribeRequestParams(uri=uri)
                )
            return await session.send_request(request, mcp_types.EmptyResult)

        await self._request(send, "the subscription")

    async def _request(
        self, send: Callable[[ClientSession], Awaitable[_T]], what: str
    ) -> _T:
        """One request on the connection, its failures as :class:`ToolError` naming the
        server."""
        session, generation = await self._session_for_call()
        try:
            return await send(session)
        except MCPError as exc:
            if exc.error.code == mcp_types.CONNECTION_CLOSED:
                self._connection_lost(generation)
                # Over HTTP the SDK says why in the error (an SSE stream that failed or ended).
                why = self._stdio.closed_reason if self._stdio is not None else exc.error.message
                raise ToolError(
                    self._secrets.text(
                        f"mcp server {self.name!r} went away during {what}"
                        + (f" ({why})" if why else "")
                        + self._tail()
                    )
                ) from None
            raise ToolError(
                self._secrets.text(
                    f"mcp server {self.name!r} refused {what}: {exc.error.message}"
                )
            ) from None
        except RuntimeError as exc:  # an answer the SDK cannot take (say, input_required)
            raise ToolError(self._secrets.text(f"mcp server {self.name!r}: {exc}")) from None

    async def _session_for_call(self) -> tuple[ClientSession, int]:
        while True:
            session = self._session
            if self.state == "ready" and session is not None:
                return session, self._generation
            if self.state == "starting" or self.state == "ready":
                # Ready without a session: the connection is being closed; "lost" comes next.
                await self._changed.wait()
            elif self.state == "lost" and self._restarts_left > 0:
                self._restarts_left -= 1
                self._set("starting", None)
                self._restart.set()
            else:
                raise ToolError(
                    f"mcp server {self.name!r} is not running: {self.error or self.state}"
                )

    def _connection_lost(self, generation: int) -> None:
        if generation == self._generation and self.state == "ready":
            self._lost.set()

    # -- secrets (an OAuth token refreshed mid-run, docs/mcp-oauth.md) ------------------------

    def add_secrets(self, values: list[str]) -> None:
        """Mask *values* too in what this server's calls return and raise from now on."""
        self._secrets = self._secrets | values

    def masked(self, text: str) -> str:
        """*text* (a result of this server's) with the server's secrets masked."""
        return self._secrets.text(text)

    # -- state and messages ------------------------------------------------------------------

    def _set(self, state: ServerState, error: str | None) -> None:
        self.state = state
        self.error = self._secrets.text(error) if error else None
        changed, self._changed = self._changed, trio.Event()
        changed.set()

    def _tail(self) -> str:
        stdio = self._stdio
        if stdio is None:
            return ""
        tail = stdio.stderr_tail()
        return f"; its last stderr line: {tail}" if tail else ""

    def _lost_why(self, *, starting: bool = False) -> str:
        stdio = self._stdio
        if stdio is None:
            return "the connection closed"
        what = stdio.closed_reason or "it closed its stdout"
        if stdio.returncode is not None and what == "it closed its stdout":
            what = f"it exited with status {stdio.returncode}"
        if starting:
            what += " during start-up"
        if stdio.bad_lines:
            what += f" (after {stdio.bad_lines} line(s) on stdout that were not JSON-RPC)"
        return what + self._tail()

    def _why(self, exc: BaseException) -> str:
        leaf = _first_leaf(exc)
        if isinstance(leaf, FileNotFoundError) and self.transport == "stdio":
            return f"command {self.config.command!r} not found"
        if isinstance(leaf, PermissionError) and self.transport == "stdio":
            return f"command {self.config.command!r} cannot be run (permission denied)"
        if isinstance(leaf, McpLoginError):
            return str(leaf)
        if isinstance(leaf, MCPError):
            if leaf.error.code == mcp_types.CONNECTION_CLOSED:
                return self._lost_why(starting=True)
            return f"it refused to start: {leaf.error.message}"
        text = str(leaf) or type(leaf).__name__
        return f"{type(leaf).__name__}: {text}{self._tail()}"


class ResponseTooLarge(httpx2.StreamError):
    """An HTTP server's answer was over the cap of one message (docs/mcp.md, "Limits")."""


class _CappedBody(httpx2.AsyncByteStream):
    """A response body that raises :class:`ResponseTooLarge` once past *limit* bytes, before
    more of it is held (the SDK reads a JSON answer whole). An iterator, not a generator: one
    left unfinished holds nothing for the garbage collector to finalise."""

    def __init__(self, body: httpx2.AsyncByteStream, limit: int) -> None:
        self._body = body
        self._limit = limit
        self._chunks: AsyncIterator[bytes] | None = None
        self._seen = 0

    def __aiter__(self) -> AsyncIterator[bytes]:
        self._chunks = aiter(self._body)
        return self

    async def __anext__(self) -> bytes:
        assert self._chunks is not None
        chunk = await anext(self._chunks)
        self._seen += len(chunk)
        if self._seen > self._limit:
            raise ResponseTooLarge(f"it sent a message over {self._limit // (1024 * 1024)} MB")
        return chunk

    async def aclose(self) -> None:
        await self._body.aclose()


async def _cap_body(response: httpx2.Response) -> None:
    """Cap *response*'s body at :data:`MAX_LINE_BYTES` (:class:`_CappedBody`), but an event
    stream's: the SDK caps each event of it, however long it lasts. A response hook, so the
    client keeps its own transport (proxies from the environment)."""
    await trio.lowlevel.checkpoint()
    if not response.headers.get("content-type", "").lower().startswith("text/event-stream"):
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = _CappedBody(response.stream, MAX_LINE_BYTES)


class _Session(ClientSession):
    """The SDK's session, telling *on_list_changed* of a ``notifications/*/list_changed`` as
    it is received (in order with the answers), not later in a task of its own."""

    def __init__(self, on_list_changed: Callable[[str], None], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_list_changed = on_list_changed

    def _intercept_notification(self, method: str, params: Mapping[str, Any] | None) -> bool:
        if method in _LIST_CHANGED:
            self._on_list_changed(method)
        return super()._intercept_notification(method, params)


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


async def _list_tools(session: ClientSession) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_TOOL_PAGES):
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


async def _paged(fetch: Callable[..., Awaitable[Any]], field: str) -> list[Any]:
    """Every item of a paginated list, at most :data:`MAX_LISTED` (a server that pages on
    without end, or lists a million items, is cut there)."""
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(_MAX_TOOL_PAGES):
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await fetch(params=params)
        items.extend(getattr(page, field)[: MAX_LISTED - len(items)])
        cursor = page.next_cursor
        if not cursor or len(items) >= MAX_LISTED:
            break
    return items


class McpServers:
    """The MCP servers of one run (made by :func:`open_mcp_servers`).

    Attributes:
        servers: every configured server by name, started or not.
        tools: the tools of the servers that started (``mcp__SERVER__TOOL``), and
            ``list_mcp_resources``/``read_mcp_resource`` when one has resources, ready to add to
            the run's tools.
        secrets: the run's secrets with the servers' (expanded ``${VAR}``s, header values):
            what the run masks in its events, logs and errors.
        subscriptions: the resources the chat follows (docs/mcp.md, "Following a resource").
    """

    def __init__(
        self,
        servers: dict[str, McpServer],
        tools: list[Tool],
        secrets: Secrets,
        warn: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.servers = servers
        self.tools = tools
        self.secrets = secrets
        self._warn = warn
        from ._resources import Subscriptions

        self.subscriptions = Subscriptions(servers)

    async def expand_prompt(self, text: str) -> str:
        """A root prompt as the agent gets it: ``/mcp__SERVER__PROMPT [args]`` replaced by the
        server's prompt (docs/mcp.md, "Prompts"), then the resources it mentions as
        ``@server:uri`` attached ("Resources").

        Raises:
            ConfigError: a prompt command naming no prompt of a started server, with arguments
                the prompt does not take, or that the server refused (one line).

        Cancellation: cancels the request in flight (the connections stay up).
        """
        from ._resources import attach_mentions, expand_prompt_command

        if text.startswith("/mcp__"):
            text = await expand_prompt_command(self.servers, text)
        if "@" not in text:
            return text
        return await attach_mentions(self.servers, text)

    def prompt_command_names(self) -> list[str]:
        """The chat commands of the started servers' prompts (``/mcp__SERVER__PROMPT``)."""
        from ._resources import prompt_commands

        return [f"/{name}" for name in sorted(prompt_commands(self.servers.values()))]

    async def complete_line(self, line: str) -> list[str]:
        """The chat's Tab on ``/mcp__SERVER__PROMPT args…``: the values the last word may
        become, from the server (docs/mcp.md, "Prompts"); ``[]`` after
        :data:`COMPLETE_TIMEOUT_S` without an answer.

        Cancellation: cancels the request in flight (the connection stays up).
        """
        from ._resources import complete_prompt_line

        with trio.move_on_after(COMPLETE_TIMEOUT_S):
            return await complete_prompt_line(self.servers, line)
        return []

    def bind(self, run: RunContext) -> None:
        """Answer the servers' sampling and elicitation requests for *run* (its provider,
        permission broker and questions) from now on, and keep its tools up to date with the
        servers' (``tools/list_changed``: the agents get the new list at their next turn)."""
        for server in self.servers.values():
            server.requests.bind(run)
            server.on_tools_changed = lambda s, run=run: self._tools_changed(run, s)

    def _tools_changed(self, run: RunContext, server: McpServer) -> None:
        from ._tool import McpTool, make_tools

        tools = run.tools
        if not isinstance(tools, dict):  # a run whose tools cannot change (not open_runtime's)
            return
        old = {n for n, t in tools.items() if isinstance(t, McpTool) and t.server is server}
        made = make_tools([server], warn=self._warn)
        new = {t.name: t for t in made if t.name not in tools or t.name in old}
        for name in old - set(new):
            del tools[name]
        tools.update(new)
        self.tools = [t for t in self.tools if not (isinstance(t, McpTool) and t.server is server)]
        self.tools += new.values()
        run.type_setups.clear()  # every agent type's tool list is made again, at its next turn
        added, gone = sorted(set(new) - old), sorted(old - set(new))
        self._warn(
            f"mcp server {server.name!r} changed its tools"
            + (f"; new: {', '.join(added)}" if added else "")
            + (f"; gone: {', '.join(gone)}" if gone else "")
        )

    def describe(self) -> dict[str, dict[str, Any]]:
        """Each server's transport, state and the number of tools it offers (for
        ``run_started``: no secrets)."""
        from ._tool import McpTool

        offered: dict[str, int] = {}
        for tool in self.tools:
            if isinstance(tool, McpTool):
                offered[tool.server.name] = offered.get(tool.server.name, 0) + 1
        return {
            name: {"transport": s.transport, "state": s.state, "tools": offered.get(name, 0)}
            for name, s in self.servers.items()
        }


@asynccontextmanager
async def open_mcp_servers(
    config: McpConfig,
    *,
    env: Mapping[str, str],
    environ: Mapping[str, str] | None = None,
    workspace: str | os.PathLike[str] = ".",
    secrets: Secrets = NO_SECRETS,
) -> AsyncGenerator[McpServers, None]:
    """Start every configured server at the same time and keep them for the block.

    Args:
        config: the servers and the start timeout.
        env: the environment stdio servers start with (the one ``bash`` gets, secrets
            removed); each server's own ``env`` is added to it.
        environ: where ``${VAR}`` is looked up (default ``os.environ``).
        workspace: the folder stdio servers start in.
        secrets: the run's secrets so far (masked in warnings and errors, with the servers').

    An HTTP server uses its stored OAuth login, refreshed when due, and never starts one
    (docs/mcp-oauth.md); the login's tokens are among the secrets of what is yielded.

    Yields once every server has started or failed (each within the start timeout; so the
    wait is the slowest server's, not the sum). A server that cannot start costs one warning
    (``config.on_warning``) and its tools; nothing is raised for it.

    Raises:
        ConfigError: a ``${VAR}`` without a value and without a default (before anything
            starts).

    Cancellation: at the end of the block, or when cancelled, every server is closed (stdio:
    stdin closed, then its process group terminated, then killed; bounded by a few seconds).
    """
    from ._resources import resource_tools
    from ._tool import make_tools

    lookup = os.environ if environ is None else environ
    warn = config.on_warning or _log_warning
    expanded: list[McpServerConfig] = []
    found_here: list[str] = []
    oauth = RunOAuth(store_dir(lookup))
    for configured in config.servers:
        out, found = configured.expanded(lookup)
        expanded.append(out)
        found_here += found + oauth.stored_secrets(out)
    all_secrets = secrets | found_here
    _quiet_sdk_logs()
    for line in config.warnings:
        warn(line)
    cwd = Path(workspace)
    servers = {
        s.name: McpServer(
            s,
            env={**env, **s.env},
            cwd=cwd,
            start_timeout_s=config.start_timeout_s,
            secrets=all_secrets,
            warn=warn,
        )
        for s in expanded
    }
    for server in servers.values():
        server.auth = oauth.auth_for(server.config, server.add_secrets)
    async with trio.open_nursery() as nursery:
        for server in servers.values():
            nursery.start_soon(server.run, name=f"mcp server {server.name}")
        try:
            for server in servers.values():
                await server.started.wait()
                if server.state == "failed":
                    warn(f"mcp server {server.name!r} did not start: {server.error}")
            tools: list[Tool] = [*make_tools(servers.values(), warn=warn)]
            tools += resource_tools(servers)
            # With the tokens a start refreshed: the run's secrets are made from these.
            yield McpServers(servers, tools, all_secrets | oauth.secrets(), warn)
        finally:
            nursery.cancel_scope.cancel(reason="the run is over")
            oauth.close()


# A stream the SDK writes to that closed or broke, in either library's spelling.
_CLOSED = (
    trio.ClosedResourceError, trio.BrokenResourceError,
    anyio.ClosedResourceError, anyio.BrokenResourceError,
)  # fmt: skip

_log = get_logger("trio_agents.mcp")


def _log_warning(message: str) -> None:
    _log.warning(message)


def _quiet_sdk_logs() -> None:
    """The SDK logs transport trouble with tracebacks (and message contents); we report what
    matters as one line of our own, so its loggers speak only when the user configured them."""
    for name in ("mcp", "httpx2"):
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.CRITICAL)
