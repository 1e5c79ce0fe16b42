"""One endpoint of a run: its HTTP client, its connection pool, and what bounds calls in flight.

A run talks to each model endpoint (a base URL and a key) through one provider, made by
:func:`~runtime.providers.open_provider` and shared by every agent of the run, and so through:

* **one HTTP client**, so every agent's calls reuse the same kept-alive connections;
* **a connection pool that costs the same per request whatever its size** (:class:`_StackPool`):
  idle connections wait on a stack, a request takes the one on top and checks only that one is
  still open (httpx's own pool checks every pooled connection on every request and every
  release, which costs more than the request itself once the pool holds hundreds: the numbers
  are in bench/README.md, "HTTP fan-out");
* **HTTP/1.1 spoken by the pool's own connections** (:class:`~runtime.providers._h1.H1Connection`),
  replies parsed in C by llhttp (``httptools``) where httpcore's connections parse them with h11,
  in Python, which was a third of the client's CPU on a streamed reply (bench/README.md, "The
  HTTP/1.1 parser"); httpx still builds the requests and maps the errors, as for httpcore's;
* **no cookie jar** (a model API sets none, and httpx parses every response for them) and **one
  SSL context per process**, not one per client;
* **no cancel scope per network read**: a read bounded by the read timeout and the call's
  deadline at once (:data:`DEADLINE`), where httpcore's own streams open one scope for the
  timeout and the provider another for the deadline, around every event of a reply
  (bench/README.md, "HTTP fan-out"); a read on a plain socket that must wait is ended at its
  deadline by the client's one watchdog task (:class:`_Watchdog`, run by :func:`open_client`
  in a nursery of its own), TLS by a scope per read;
* **a bound on model calls in flight**, by default the pool's size, so a call never queues
  inside the pool; ``max_concurrent`` lowers it. The endpoint's limiter
  (``runtime/providers/_ratelimit.py``) holds it, with the endpoint's rate limits.

How concurrency and the pool are chosen and set: docs/configuration.md, "Concurrency and the
connection pool".
"""

from __future__ import annotations

import functools
import heapq
import importlib.util
import ipaddress
import logging
import math
import socket
import ssl
import urllib.request
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import httpcore
import httpx
import trio

from runtime.core import ConfigError, fan_out_default

from ._h1 import H1Connection, checked_lines

# The largest pool by default: as many connections as the open-files limit leaves, as many
# sub-agents as run at once by default (limits.max_parallel), so that a fan-out's calls all go
# at once; at most 10,000 (runtime/core/_config.py, fan_out_default).
DEFAULT_MAX_CONNECTIONS: Final = fan_out_default()
_HEADS: Final = 64
_httpx_log: Final = logging.getLogger("httpx")

DEADLINE: Final = "trio_agents.deadline"
"""The request extension that carries a call's deadline (a :func:`trio.current_time` value) to
the pool: every read of the reply ends by then (:class:`DeadlinePassed`)."""

# The clients whose pool is a _StackPool, which reads by DEADLINE (see reads_by_deadline).
_BOUNDED: weakref.WeakKeyDictionary[httpx.AsyncClient, _StackPool] = weakref.WeakKeyDictionary()


class DeadlinePassed(Exception):
    """A read of a reply reached its call's deadline (:data:`DEADLINE`)."""


def reads_by_deadline(client: httpx.AsyncClient) -> bool:
    """Whether every read of *client*'s replies ends by the request's :data:`DEADLINE`, so the
    caller need not bound the reads itself (a client of :func:`make_client` over its own
    pool; not a caller's client, nor httpx's pool for a proxy or HTTP/2)."""
    return client in _BOUNDED


def _positive(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and (isinstance(value, bool) or value <= 0):
        raise ConfigError(f"{attribute.name} must be positive, not {value!r}")


@attrs.frozen(kw_only=True)
class PoolLimits:
    """The connection pool of an endpoint and the calls it lets run at once.

    Attributes:
        max_connections: connections open at once; calls past it wait for one.
        max_keepalive: idle connections kept open for the next call (default
            ``max_connections``: a fan-out's second wave reuses the first wave's connections
            instead of opening new ones).
        keepalive_expiry_s: an idle connection older than this is closed, not reused.
        max_concurrent: model calls in flight at once on this endpoint (default
            ``max_connections``); the rest wait their turn, in order.
        http2: speak HTTP/2 where the server offers it (needs the ``h2`` package); many calls
            then share one connection.
    """

    max_connections: int = attrs.field(default=DEFAULT_MAX_CONNECTIONS, validator=_positive)
    max_keepalive: int | None = attrs.field(default=None, validator=_positive)
    keepalive_expiry_s: float = attrs.field(default=30.0, validator=_positive)
    max_concurrent: int | None = attrs.field(default=None, validator=_positive)
    http2: bool = False

    @property
    def concurrency(self) -> int:
        """Model calls in flight at once: ``max_concurrent``, else the pool's size."""
        return self.max_concurrent or self.max_connections


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """The process's one verifying SSL context (loading the CA bundle costs milliseconds)."""
    return httpx.create_ssl_context()


class _NoCookies(httpx.Cookies):
    """A jar that keeps nothing: model APIs set no cookies, and reading responses for them costs."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


@asynccontextmanager
async def open_client(
    limits: PoolLimits, timeouts: httpx.Timeout, base_url: str
) -> AsyncGenerator[httpx.AsyncClient, None]:
    """The HTTP client of one endpoint (:func:`make_client`), open for the block and closed
    after it, with the runtime's pool's read watchdog (:class:`_Watchdog`) running in a nursery
    of the block's own: the task lives exactly as long as the client.

    An exception of the block leaves unchanged (not in an exception group): the block runs
    inside the nursery, which holds only the watchdog, so the nursery is cancelled and closed
    first and the exception raised after it.
    """
    client = make_client(limits, timeouts, base_url)
    pool = _BOUNDED.get(client)
    async with client:
        if pool is None:  # httpx's own pool (a proxy, HTTP/2): its own timeouts, no watchdog
            yield client
            return
        failed: BaseException | None = None
        async with trio.open_nursery() as nursery:
            pool.watchdog = dog = _Watchdog()
            nursery.start_soon(dog.run, name="trio_agents.read_watchdog")
            try:
                yield client
            except BaseException as exc:  # re-raised below, outside the nursery
                failed = exc
            finally:
                pool.watchdog = None
                nursery.cancel_scope.cancel(reason="the endpoint's client closed")
        if failed is not None:
            raise failed


def make_client(limits: PoolLimits, timeouts: httpx.Timeout, base_url: str) -> httpx.AsyncClient:
    """The HTTP client of one endpoint (see the module docstring).

    A proxy set in the environment (``HTTPS_PROXY`` and friends) for ``base_url``'s host, or
    HTTP/2, gets httpx's own transport, which knows both.
    """
    verify = shared_ssl_context()
    if limits.http2 and importlib.util.find_spec("h2") is None:
        raise ConfigError("http2 needs the h2 package: pip install 'httpx[http2]'")
    if limits.http2 or _proxied(base_url):
        client = httpx.AsyncClient(
            timeout=timeouts,
            verify=verify,
            http2=limits.http2,
            limits=httpx.Limits(
                max_connections=limits.max_connections,
                max_keepalive_connections=limits.max_keepalive or limits.max_connections,
                keepalive_expiry=limits.keepalive_expiry_s,
            ),
        )
    else:
        transport = httpx.AsyncHTTPTransport(verify=verify)
        # httpx maps httpcore's errors and streams in this transport; only its pool is ours.
        pool = _StackPool(limits, verify)
        transport._pool = pool  # type: ignore[assignment]
        client = httpx.AsyncClient(timeout=timeouts, transport=transport, trust_env=False)
        _BOUNDED[client] = pool
    # Set in place: httpx copies a jar it is given into a plain one.
    client._cookies = _NoCookies()
    return client


class Reply:
    """A reply of :func:`post`, its head read: what a provider reads of an ``httpx.Response``.

    Attributes:
        status_code: the HTTP status.
        headers: each header by its lower-case name, as ``httpx.Headers.get`` gives it
            (several of one name joined by ``", "``).
        raw_headers: the headers as received.
        stream: the body's bytes; closing it gives the connection back to the pool.
    """

    __slots__ = ("headers", "http_version", "raw_headers", "reason_phrase", "status_code", "stream")

    def __init__(self, reply: Any, stream: _Returning) -> None:
        self.status_code: int = reply.status
        self.reason_phrase: str = reply.reason.decode("ascii", "replace")
        self.http_version: bytes = reply.http_version
        self.raw_headers: list[tuple[bytes, bytes]] = reply.headers
        self.headers = _header_map(reply.headers)
        self.stream = stream

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    def as_httpx(self, url: httpx.URL) -> httpx.Response:
        """The same reply as an ``httpx.Response`` (which decodes a compressed body), for the
        rarer replies: an error, a compressed stream."""
        return httpx.Response(
            self.status_code,
            headers=self.raw_headers,
            stream=self.stream,
            request=httpx.Request("POST", url),
            extensions={
                "http_version": self.http_version,
                "reason_phrase": self.reason_phrase.encode(),
            },
        )

    async def aclose(self) -> None:
        await self.stream.aclose()


def _header_map(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in raw:
        key = name.decode("latin-1").lower()
        try:
            text = value.decode("ascii")
        except UnicodeDecodeError:  # as httpx: UTF-8 if it is, else Latin-1
            try:
                text = value.decode("utf-8")
            except UnicodeDecodeError:
                text = value.decode("latin-1")
        old = headers.get(key)
        headers[key] = text if old is None else f"{old}, {text}"
    return headers


async def post(
    client: httpx.AsyncClient,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    deadline: float,
) -> Reply | None:
    """POST ``body`` to ``url`` through *client*'s own pool without an ``httpx.Request``, or
    ``None`` for a client that is not :func:`make_client`'s over its pool (the caller then
    sends through httpx).

    The request is the one httpx would send: the client's headers updated by ``headers`` (as
    ``Headers.update``), ``Host`` first, ``Content-Length`` last; the client's timeouts; the
    head checked as :func:`~runtime.providers._h1.checked_lines` checks it (made once per
    client headers, request headers and URL, then reused). Every read of the reply ends by
    ``deadline`` (:class:`DeadlinePassed`). Errors are httpcore's (the caller maps them as
    httpx does). What httpx adds that this client has not is left out: auth, cookies (none
    kept), event hooks, redirects (never followed for a stream). httpx's per-request
    ``Headers`` and ``Request`` were the largest share of a request's CPU left
    (bench/README.md, "CPU per sub-agent, third pass").
    """
    pool = _BOUNDED.get(client)
    if pool is None:
        return None
    lines, reusable, origin = pool.head(url, client.headers, headers)
    head = b"%bContent-Length: %d\r\n\r\n" % (lines, len(body))
    reply = await pool.send(origin, head, body, reusable, deadline, client.timeout.as_dict())
    if _httpx_log.isEnabledFor(logging.INFO):  # httpx's line for each request, as it logs it
        _httpx_log.info(
            'HTTP Request: %s %s "%s %d %s"',
            "POST",
            httpx.URL(url),
            reply.http_version.decode("ascii", "ignore"),
            reply.status_code,
            reply.reason_phrase,
        )
    return reply


def _proxied(base_url: str) -> bool:
    try:
        url = httpx.URL(base_url)
    except httpx.InvalidURL:
        return False
    proxies = urllib.request.getproxies()
    if url.scheme not in proxies and "all" not in proxies:
        return False
    return not urllib.request.proxy_bypass(url.host)


class _StackPool:
    """HTTP/1.1 connections (``_h1.py``), idle ones on a stack: a request costs the same
    however many there are.

    A request waits for one of ``max_connections`` permits, takes the most recently used idle
    connection to its origin (checking that one alone is still open: a server may have closed it),
    or opens a new one. When the reply is closed its connection goes back on top, or is closed if
    ``max_keepalive`` are idle already; the oldest idle one is closed once past its expiry.
    httpx's transport calls it as it would call httpcore's pool (``handle_async_request``,
    ``aclose``, ``async with``).
    """

    def __init__(self, limits: PoolLimits, ssl_context: ssl.SSLContext) -> None:
        self._limits = limits
        self._ssl = ssl_context
        self._keep = limits.max_keepalive or limits.max_connections
        self._permits = trio.Semaphore(limits.max_connections)
        self._idle: dict[tuple[bytes, bytes, int], list[_Conn]] = {}
        self._heads: dict[Any, tuple[bytes, bool, httpcore.Origin]] = {}
        self.opened = 0
        """Connections made since the pool was (for tests and the bench)."""
        self.watchdog: _Watchdog | None = None
        """Ends its waiting reads at their deadlines, while :func:`open_client` runs it."""

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        """Send ``request`` on a pooled connection (see the class docstring).

        Cancellation: cancelled while waiting for a permit, nothing is held; while sending, the
        connection is closed (it closes itself: it is in an unknown state) and the permit
        given back.
        """
        await self._permits.acquire()
        sent = False
        try:
            conn = await self._take(request.url.origin)
            conn.backend.deadline = request.extensions.get(DEADLINE, math.inf)
            response = await conn.http.handle_async_request(request)
            sent = True
        finally:
            if not sent:  # a failure or a cancel (any exception): the permit goes back
                self._permits.release()
        response.stream = _Returning(response.stream, self, conn, request.url.origin)
        return response

    def head(
        self, url: str, defaults: httpx.Headers, headers: Mapping[str, str]
    ) -> tuple[bytes, bool, httpcore.Origin]:
        """The checked lines of a request's head but its ``Content-Length`` (see :func:`post`),
        whether it lets the connection be reused, and its origin; remembered."""
        key = (url, tuple(defaults._list), tuple(headers.items()))  # httpx's raw list: cheap
        known = self._heads.get(key)
        if known is not None:
            return known
        parsed = httpx.URL(url)
        given = {name.lower() for name in headers}
        merged = [
            (raw, value)
            for raw, lower, value in defaults._list
            if lower.decode("ascii") not in given
        ]
        # Encoded as httpx encodes a str header (ASCII: anything else fails as it does there).
        merged += [(name.encode("ascii"), value.encode("ascii")) for name, value in headers.items()]
        if not any(raw.lower() == b"host" for raw, _ in merged):
            merged.insert(0, (b"Host", parsed.netloc))
        merged = [(raw, value) for raw, value in merged if raw.lower() != b"content-length"]
        lines, reusable = checked_lines(b"POST", parsed.raw_path, merged)
        scheme = parsed.raw_scheme
        port = parsed.port or {b"http": 80, b"https": 443}.get(scheme, 0)
        origin = httpcore.Origin(scheme, parsed.raw_host, port)
        if len(self._heads) >= _HEADS:  # a header that changes per request (a trace id)
            self._heads.clear()
        known = self._heads[key] = (lines, reusable, origin)
        return known

    async def send(
        self,
        origin: httpcore.Origin,
        head: bytes,
        body: bytes,
        reusable: bool,
        deadline: float,
        timeouts: Mapping[str, float | None],
    ) -> Reply:
        """Send a request made by :func:`post` on a pooled connection (as
        :meth:`handle_async_request`), every step of it by ``deadline``: the wait for a
        permit, the connect, the write and each read (:class:`DeadlinePassed`)."""
        permits = self._permits
        try:
            permits.acquire_nowait()  # the write below is the checkpoint
        except trio.WouldBlock:
            waited = False
            with trio.move_on_at(deadline):
                await permits.acquire()
                waited = True
            if not waited:
                raise DeadlinePassed("the call deadline passed") from None
        sent = False
        try:
            conn = await self._take(origin)
            conn.backend.deadline = deadline
            reply = await conn.http.send(head, body, reusable, timeouts)
            sent = True
        finally:
            if not sent:  # a failure or a cancel (any exception): the permit goes back
                self._permits.release()
        return Reply(reply, _Returning(reply, self, conn, origin))

    async def _take(self, origin: httpcore.Origin) -> _Conn:
        idle = self._idle.get(_key(origin))
        while idle:
            conn = idle.pop()
            if conn.http.is_idle() and not conn.http.has_expired():
                return conn
            await _close(conn)
        self.opened += 1
        backend = _Backend(self.watchdog)
        http = H1Connection(origin, self._ssl, self._limits.keepalive_expiry_s, backend)
        return _Conn(http, backend)

    async def give_back(self, conn: _Conn, origin: httpcore.Origin) -> None:
        """Put ``conn`` back once its reply is closed; called once per request."""
        try:
            conn.backend.deadline = math.inf
            if not conn.http.is_idle():  # closed, or left before the reply's end: not reusable
                await _close(conn)
                return
            idle = self._idle.setdefault(_key(origin), [])
            if len(idle) >= self._keep:
                await _close(conn)
                return
            idle.append(conn)
            if len(idle) > 1 and idle[0].http.has_expired():  # one check per release: the oldest
                await _close(idle.pop(0))
        finally:
            self._permits.release()

    async def aclose(self) -> None:
        """Close every idle connection (those in use close with their replies)."""
        idle = [conn for stack in self._idle.values() for conn in stack]
        self._idle.clear()
        for conn in idle:
            await _close(conn)

    async def __aenter__(self) -> _StackPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _key(origin: httpcore.Origin) -> tuple[bytes, bytes, int]:
    return (origin.scheme, origin.host, origin.port)  # httpcore's Origin is not hashable


async def _close(conn: _Conn) -> None:
    await conn.http.aclose()  # bounded, and done even when cancelled


@attrs.define(eq=False)
class _Conn:
    """A pooled connection and the backend its socket came from (which holds its deadline)."""

    http: H1Connection
    backend: _Backend


class _Backend(httpcore.AsyncNetworkBackend):
    """Opens one connection's socket as httpcore's trio backend does; each read on it also ends
    at the deadline of the call it carries (:data:`DEADLINE`, set by the pool per request)."""

    def __init__(self, watchdog: _Watchdog | None = None) -> None:
        self.deadline = math.inf
        self.watchdog = watchdog

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream: trio.SocketStream | None = None
        at = _bound(self.deadline, timeout)
        try:
            with trio.move_on_at(at):
                stream = await _open_tcp(host, port, local_address)
        except (trio.BrokenResourceError, OSError) as exc:
            raise httpcore.ConnectError(exc) from exc
        if stream is None:
            raise _late(at, self.deadline, httpcore.ConnectTimeout)
        for option in socket_options or ():
            stream.setsockopt(*option)
        return _Stream(stream, self)

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


def _bound(deadline: float, timeout: float | None) -> float:
    """When a step given ``timeout`` must end, the call's ``deadline`` included."""
    return deadline if timeout is None else min(deadline, trio.current_time() + timeout)


def _late(at: float, deadline: float, timed_out: type[Exception]) -> Exception:
    """The error of a step that reached ``at``: the call's deadline, or the step's timeout."""
    if at >= deadline:
        return DeadlinePassed("the call deadline passed")
    return timed_out("timed out")


@functools.lru_cache(maxsize=64)
def _ip_family(host: str) -> int | None:
    """The address family of an IP address written out, ``None`` for a name."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    return socket.AF_INET6 if address.version == 6 else socket.AF_INET


async def _open_tcp(host: str, port: int, local_address: str | None) -> trio.SocketStream:
    """A TCP connection to ``host``: an IP address straight to its socket (trio's
    ``open_tcp_stream`` makes a nursery and a task per connection for its happy eyeballs,
    which one address does not need), a name through trio's resolver and happy eyeballs."""
    family = _ip_family(host) if local_address is None else None
    if family is None:
        return await trio.open_tcp_stream(host, port, local_address=local_address)
    sock = trio.socket.socket(family, socket.SOCK_STREAM)
    try:
        await sock.connect((host, port))
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)


class _Stream(httpcore.AsyncNetworkStream):
    """A connection's socket (or TLS over it) for httpcore, as its trio stream but that a read
    has one cancel scope for its timeout and the call's deadline, and errors are mapped by
    ``except``, not a context manager per read. (The ``timeout`` parameters are httpcore's
    interface, ASYNC109's exception.)

    Over a plain socket a read or write first tries the socket at once, as trio's own does (a
    checkpoint for cancellation before, a yield after): most reads of a busy fan-out find their
    bytes there already, and a scope per read was a large share of a sub-agent's CPU
    (bench/README.md, "CPU per sub-agent, third pass"). A read that must wait opens no scope
    either: the client's :class:`_Watchdog` ends it at its deadline (a cancel of the reader's
    scopes still ends it at once, as any trio wait); a write that must wait opens one."""

    def __init__(self, stream: trio.SocketStream | trio.SSLStream[Any], owner: _Backend) -> None:
        self._stream = stream
        self._owner = owner
        self._due = math.inf  # when the read waiting now must end (inf: none waits)
        self._queued = math.inf  # the time of its latest entry in the watchdog's heap
        self._expired = False  # the watchdog ended the waiting read
        # The plain socket under trio's, for the try at once (TLS keeps trio's path).
        self._sock: Any = (
            stream.socket._sock  # type: ignore[attr-defined]
            if isinstance(stream, trio.SocketStream)
            else None
        )

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        deadline = self._owner.deadline
        sock = self._sock
        if sock is not None:
            await trio.lowlevel.checkpoint_if_cancelled()
            now = trio.current_time()
            if now >= deadline:
                raise DeadlinePassed("the call deadline passed")
            try:
                data: bytes = sock.recv(max_bytes)
            except BlockingIOError:
                pass  # nothing yet: wait below, under the deadline
            except OSError as exc:
                raise httpcore.ReadError(exc) from exc
            else:
                await trio.lowlevel.cancel_shielded_checkpoint()
                return data
            at = deadline if timeout is None else min(deadline, now + timeout)
            if at < math.inf:
                dog = self._owner.watchdog
                if dog is None:  # a client not opened by open_client: a scope bounds the wait
                    return await self._read_by(at, max_bytes)
                dog.watch(self, at)
            self._due = at
            try:
                while not self._expired:  # (a wake with nothing to read, past the deadline)
                    await trio.lowlevel.wait_readable(sock)
                    try:
                        return sock.recv(max_bytes)  # type: ignore[no-any-return]
                    except BlockingIOError:
                        pass
            except (OSError, trio.ClosedResourceError) as exc:  # closed under the wait, reset
                if not self._expired:
                    raise httpcore.ReadError(exc) from exc
            finally:
                self._due = math.inf
                self._expired = False
        else:
            at = _bound(deadline, timeout)
            try:
                with trio.move_on_at(at):
                    return bytes(await self._stream.receive_some(max_bytes))
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise httpcore.ReadError(exc) from exc
        raise _late(at, deadline, httpcore.ReadTimeout)

    async def _read_by(self, at: float, max_bytes: int) -> bytes:
        """A plain socket's read that waits under a cancel scope ending at ``at``."""
        sock = self._sock
        try:
            with trio.move_on_at(at):
                while True:
                    await trio.lowlevel.wait_readable(sock)
                    try:
                        return sock.recv(max_bytes)  # type: ignore[no-any-return]
                    except BlockingIOError:
                        pass
        except (OSError, trio.ClosedResourceError) as exc:  # closed under the wait, reset
            raise httpcore.ReadError(exc) from exc
        raise _late(at, self._owner.deadline, httpcore.ReadTimeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        sock = self._sock
        if sock is not None:
            await trio.lowlevel.checkpoint_if_cancelled()
            try:
                sent = sock.send(buffer)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                raise httpcore.WriteError(exc) from exc
            if sent == len(buffer):
                await trio.lowlevel.cancel_shielded_checkpoint()
                return
            buffer = buffer[sent:]  # the socket's buffer is full: trio waits for room
        deadline = self._owner.deadline
        at = _bound(deadline, timeout)
        try:
            with trio.move_on_at(at):
                await self._stream.send_all(buffer)
                return
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise httpcore.WriteError(exc) from exc
        raise _late(at, deadline, httpcore.WriteTimeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    def close_now(self) -> bool:
        """Close a plain socket at once, as trio's ``aclose`` does but for its checkpoint (the
        connection's close is shielded from cancellation anyway, and a scope to shield it cost
        as much as the close: bench/README.md, "CPU per sub-agent, third pass"); ``False``
        for TLS, whose close sends a notice first."""
        if self._sock is None:
            return False
        self._stream.socket.close()
        return True

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
    ) -> httpcore.AsyncNetworkStream:
        tls = trio.SSLStream(
            self._stream, ssl_context, server_hostname=server_hostname, https_compatible=True
        )
        deadline = self._owner.deadline
        at = _bound(deadline, timeout)
        try:
            with trio.move_on_at(at):
                await tls.do_handshake()
                return _Stream(tls, self._owner)
        except trio.BrokenResourceError as exc:
            await self.aclose()
            raise httpcore.ConnectError(exc) from exc
        await self.aclose()
        raise _late(at, deadline, httpcore.ConnectTimeout)

    def get_extra_info(self, info: str) -> Any:
        stream: Any = self._stream
        if info == "ssl_object":
            return stream._ssl_object if isinstance(stream, trio.SSLStream) else None
        while isinstance(stream, trio.SSLStream):
            stream = stream.transport_stream
        sock = stream.socket
        if info == "socket":
            return sock
        if info == "is_readable":
            return sock.is_readable()
        if info == "client_addr":
            return sock.getsockname()
        if info == "server_addr":
            return sock.getpeername()
        return None


class _Watchdog:
    """Ends the waiting reads of the pool's plain sockets at their deadlines (the read timeout
    or the call's deadline), for every connection of one client: a heap and one task (in
    :func:`open_client`'s nursery), where a cancel scope per waiting read was the largest cost
    of a read at full speed (bench/README.md, "CPU per sub-agent, third pass").

    A waiting read makes sure its stream has an entry in the heap at or before its deadline
    (one entry a stream: a later read whose deadline is later adds none). When an entry's time
    comes, the stream's read waiting then, if any, is ended if its own deadline has passed
    (:func:`trio.lowlevel.notify_closing` wakes it with ``ClosedResourceError``, which it reads
    as its timeout; the connection is then closed, as after any failed read), else looked at
    again at its deadline. A read that ends, or is cancelled, leaves its entry inert."""

    __slots__ = ("_heap", "_scope", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _Stream]] = []
        self._scope = trio.CancelScope()  # the task's sleep, its deadline the heap's first
        self._seq = 0

    def watch(self, stream: _Stream, at: float) -> None:
        """Look at ``stream``'s waiting read by ``at``."""
        if stream._queued <= at:
            return
        stream._queued = at
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, stream))
        if at < self._scope.deadline:
            self._scope.deadline = at

    async def run(self) -> None:
        heap = self._heap
        while True:
            with trio.CancelScope(deadline=heap[0][0] if heap else math.inf) as self._scope:
                await trio.sleep_forever()
            now = trio.current_time()
            while heap and heap[0][0] <= now:
                at, _, stream = heapq.heappop(heap)
                if stream._queued == at:
                    stream._queued = math.inf
                due = stream._due
                if due <= now:
                    stream._expired = True
                    trio.lowlevel.notify_closing(stream._sock)
                elif due < math.inf:
                    self.watch(stream, due)


class _Returning(httpx.AsyncByteStream):
    """A reply's body that gives its connection back to the pool when closed."""

    def __init__(
        self,
        stream: Any,
        pool: _StackPool,
        conn: _Conn,
        origin: httpcore.Origin,
    ) -> None:
        self._stream = stream
        self._pool = pool
        self._conn: _Conn | None = conn
        self._origin = origin

    def __aiter__(self) -> AsyncIterator[bytes]:
        # httpcore's own iterator, not a generator around it: no extra layer per chunk.
        return aiter(self._stream)

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        try:
            if hasattr(self._stream, "aclose"):
                await self._stream.aclose()
        finally:
            if conn is not None:
                await self._pool.give_back(conn, self._origin)
