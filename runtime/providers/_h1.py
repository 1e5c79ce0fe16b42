"""One pooled HTTP/1.1 connection, its replies parsed in C by llhttp (``httptools``).

The pool (``runtime/providers/_pool.py``) keeps these instead of httpcore's connections, whose
h11 parser is pure Python and was the largest share of the client's CPU on a streamed reply
(bench/README.md, "The HTTP/1.1 parser"). It speaks httpcore's connection interface, so
httpx's transport drives it and maps its errors as it maps httpcore's:

* :meth:`H1Connection.handle_async_request` sends an ``httpcore.Request`` and returns an
  ``httpcore.Response`` once the reply's head has come; its stream yields the body's bytes
  (llhttp undoes chunked encoding and counts ``Content-Length``);
* :meth:`~H1Connection.is_idle`, :meth:`~H1Connection.has_expired` and
  :meth:`~H1Connection.aclose`, for the pool.

What it keeps of httpcore's semantics: a connection is reused only when its reply was read to
its end and both sides keep it alive (HTTP/1.1 without ``Connection: close``; an HTTP/1.0 reply
never is); a reply closed before its end, an error, or a cancellation closes the connection;
informational (1xx) replies are skipped; a reply to ``HEAD`` and a 204 or 304 have no body; a
server that closes before answering, or answers with something that is not HTTP/1.1, is an
``httpcore.RemoteProtocolError``, a failed read an ``httpcore.ReadError`` (so the providers'
retries see what they saw through httpcore). A reply's head past :data:`MAX_HEAD_BYTES` is an
error, not a buffer that grows.

The request's head is written here, checked in one pass against HTTP's grammar (no CR, LF or
other control in a name or value: no header can be smuggled in); a body up to
:data:`_COALESCE` bytes goes in the same write as the head.
"""

from __future__ import annotations

import math
import re
import ssl
from collections.abc import AsyncIterable, Iterable, Mapping
from typing import Final, cast

import httpcore
import httptools
import trio

MAX_HEAD_BYTES: Final = 64 * 1024
"""The longest status line and header section a reply may have (h11's bound is 100 KiB)."""

_READ: Final = 64 * 1024
_COALESCE: Final = 64 * 1024
_CLOSE_S: Final = 5.0

_NEW, _ACTIVE, _IDLE, _CLOSED = range(4)

# The request's head, as HTTP/1.1 allows it (RFC 9110 §5.1, §5.5; RFC 9112 §3): a token method,
# a target of visible characters, then header lines "token: value" whose value holds no control
# character but a tab. Checked in one pass, on the head as it will be sent.
_TOKEN: Final = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_LINES: Final = re.compile(
    _TOKEN
    + rb" [\x21-\x7e\x80-\xff]+ HTTP/1\.1\r\n(?:"
    + _TOKEN
    + rb": [\t\x20-\x7e\x80-\xff]*\r\n)*"
)


class H1Connection:
    """An HTTP/1.1 connection to one origin, opened on its first request (see the module
    docstring).

    Args:
        origin: where it connects.
        ssl_context: the context of an ``https`` origin's TLS.
        keepalive_expiry_s: an idle connection older than this has expired.
        backend: opens the socket (the pool's, whose reads end at the call's deadline).
    """

    def __init__(
        self,
        origin: httpcore.Origin,
        ssl_context: ssl.SSLContext,
        keepalive_expiry_s: float,
        backend: httpcore.AsyncNetworkBackend,
    ) -> None:
        self._origin = origin
        self._ssl = ssl_context
        self._expiry = keepalive_expiry_s
        self._backend = backend
        self._stream: httpcore.AsyncNetworkStream | None = None
        self._state = _NEW
        self._expire_at = math.inf
        self.requests = 0
        """Requests sent on this connection (in its repr)."""

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        """Send ``request`` and read its reply's head; the response's stream reads the body.

        Cancellation: cancelled, or failed, before the head has come, the connection is closed
        (it is in an unknown state), as it is when its response is closed before its end.
        """
        extensions = request.extensions
        reply = await self._exchange(
            request, b"", b"", True, extensions.get("timeout", {}), extensions.get("sni_hostname")
        )
        return httpcore.Response(
            reply.status,
            headers=reply.headers,
            content=reply,
            extensions={"http_version": reply.http_version, "reason_phrase": reply.reason},
        )

    async def send(
        self, head: bytes, body: bytes, reusable: bool, timeouts: Mapping[str, float | None]
    ) -> _Reply:
        """Send a request whose head is written already (:func:`checked_lines`, then its last
        lines) and whose ``body`` its ``Content-Length`` counts; the reply, its head read, is
        the body's stream. The pool's direct path (no ``httpcore.Request``); otherwise as
        :meth:`handle_async_request`."""
        return await self._exchange(None, head, body, reusable, timeouts, None)

    async def _exchange(
        self,
        request: httpcore.Request | None,
        head: bytes,
        body: bytes,
        reusable: bool,
        timeouts: Mapping[str, float | None],
        sni: str | None,
    ) -> _Reply:
        """Send ``request`` (or ``head`` and ``body``), read the reply's head."""
        if self._state not in (_NEW, _IDLE):
            raise httpcore.ConnectionNotAvailable()
        self._state = _ACTIVE
        self.requests += 1
        done = False
        try:
            if request is not None:
                head, reusable = _request_head(request)  # a bad header opens no connection
            stream = self._stream
            if stream is None:
                stream = self._stream = await self._connect(sni, timeouts.get("connect"))
            try:
                if request is not None:
                    await _send(stream, head, request, timeouts.get("write"))
                elif len(body) <= _COALESCE:
                    await stream.write(head + body, timeouts.get("write"))
                else:
                    await stream.write(head, timeouts.get("write"))
                    await stream.write(body, timeouts.get("write"))
            except httpcore.WriteError:
                # As httpcore: a server may answer (an error) and close before reading all of
                # the request; its answer is then the better error.
                reusable = False
            head_only = request is not None and request.method == b"HEAD"
            reply = _Reply(self, stream, head_only, timeouts.get("read"))
            reply.reusable = reusable
            await reply.read_head()
            done = True
        finally:
            if not done:
                await self.aclose()
        return reply

    async def _connect(
        self,
        sni: str | None,
        timeout: float | None,  # noqa: ASYNC109 - httpcore's
    ) -> httpcore.AsyncNetworkStream:
        scheme = self._origin.scheme
        if scheme not in (b"http", b"https"):
            raise httpcore.UnsupportedProtocol(f"cannot speak {scheme.decode()!r} over HTTP/1.1")
        host = self._origin.host.decode("ascii")
        stream = await self._backend.connect_tcp(host, self._origin.port, timeout=timeout)
        if scheme == b"https":
            # As httpcore sets it, just before the handshake's SSL object is made.
            self._ssl.set_alpn_protocols(["http/1.1"])
            stream = await stream.start_tls(self._ssl, server_hostname=sni or host, timeout=timeout)
        return stream

    async def release(self, reusable: bool) -> None:
        """The reply is closed: idle again if ``reusable``, else closed."""
        if reusable and self._state == _ACTIVE:
            self._state = _IDLE
            self._expire_at = trio.current_time() + self._expiry
        else:
            await self.aclose()

    def is_idle(self) -> bool:
        """Whether it waits for a request (its last reply read to its end and kept alive)."""
        return self._state == _IDLE

    def has_expired(self) -> bool:
        """Whether it is too old to reuse, or its server has closed it (the socket is readable
        while no reply is due: it can only be the end of the stream)."""
        if trio.current_time() > self._expire_at:
            return True
        stream = self._stream
        return (
            self._state == _IDLE
            and stream is not None
            and bool(stream.get_extra_info("is_readable"))
        )

    def is_closed(self) -> bool:
        return self._state == _CLOSED

    async def aclose(self) -> None:
        """Close the socket (bounded, and done even when cancelled): a plain socket at once, TLS
        after its close notice."""
        self._state = _CLOSED
        stream, self._stream = self._stream, None
        if stream is not None:
            close_now = getattr(stream, "close_now", None)  # the pool's streams have it
            if close_now is not None and close_now():
                return
            with trio.move_on_after(_CLOSE_S, shield=True):
                await stream.aclose()

    def __repr__(self) -> str:
        names = ("new", "active", "idle", "closed")
        return f"<H1Connection {self._origin} {names[self._state]}, {self.requests} requests>"


def _request_head(request: httpcore.Request) -> tuple[bytes, bool]:
    """The request line and headers as sent, and whether the request lets the connection be
    reused (no ``Connection: close``). A ``Host`` header is added if the request has none."""
    url = request.url
    headers = request.headers
    if not any(name.lower() == b"host" for name, _ in headers):
        default = {b"http": 80, b"https": 443}.get(url.scheme)
        where = url.host if url.port in (None, default) else b"%s:%d" % (url.host, url.port)
        headers = [(b"Host", where), *headers]
    lines, reusable = checked_lines(request.method, url.target, headers)
    return lines + b"\r\n", reusable


def checked_lines(
    method: bytes, target: bytes, headers: Iterable[tuple[bytes, bytes]]
) -> tuple[bytes, bool]:
    """The request line and header lines (each ending in CR LF, not yet the blank line that
    ends the head), checked against HTTP/1.1's grammar, and whether they let the connection be
    reused (no ``Connection: close``).

    Raises:
        httpcore.LocalProtocolError: a control character (a CR or LF above all: a header
            smuggled in) or a space where the grammar allows none; the message never quotes
            the value, which may be a key.
    """
    parts = [method, b" ", target, b" HTTP/1.1\r\n"]
    reusable = True
    count = 1
    for name, value in headers:
        parts += (name, b": ", value, b"\r\n")
        count += 1
        if len(name) == 10 and name.lower() == b"connection" and b"close" in value.lower():
            reusable = False
    lines = b"".join(parts)
    # As many line ends as lines (a CR LF inside a value would make two lines that both match).
    if lines.count(b"\n") != count or _LINES.fullmatch(lines) is None:
        # Never the value itself: it may be a key.
        raise httpcore.LocalProtocolError(
            "the request's method, target or a header holds a character HTTP/1.1 does not allow"
            " there (a control character such as CR or LF, or a space in a name)"
        )
    return lines, reusable


def _framing(request: httpcore.Request) -> tuple[int | None, bool]:
    """The body's declared length and whether it is chunked (from its headers)."""
    length: int | None = None
    chunked = False
    for name, value in request.headers:
        lower = name.lower()
        if lower == b"content-length":
            try:
                length = int(value)
            except ValueError:
                raise httpcore.LocalProtocolError("the Content-Length is not a number") from None
        elif lower == b"transfer-encoding":
            chunked = _chunked(value)
    return length, chunked


def _chunked(coding: bytes) -> bool:
    return coding.lower().rstrip().endswith(b"chunked")


async def _send(
    stream: httpcore.AsyncNetworkStream,
    head: bytes,
    request: httpcore.Request,
    timeout: float | None,  # noqa: ASYNC109 - httpcore's interface
) -> None:
    """Write the head and the body, framed as its headers say; a small body in one write with
    the head, a large one in writes of about :data:`_COALESCE` bytes."""
    body = cast(AsyncIterable[bytes], request.stream)  # httpcore makes bytes a stream
    length, chunked = _framing(request)
    parts = [head]
    size = len(head)
    sent = 0
    async for chunk in body:
        if not chunk:
            continue
        sent += len(chunk)
        if chunked:
            parts += (b"%x\r\n" % len(chunk), chunk, b"\r\n")
        else:
            parts.append(chunk)
        size += len(chunk)
        if size >= _COALESCE:
            await stream.write(b"".join(parts), timeout)
            parts, size = [], 0
    if chunked:
        parts.append(b"0\r\n\r\n")
    elif sent != (length or 0):
        raise httpcore.LocalProtocolError(
            f"the request body is {sent} bytes, its Content-Length says {length or 0}"
        )
    await stream.write(b"".join(parts), timeout)


class _Reply:
    """One reply: llhttp's callbacks fill it, and it is the response's body stream (an async
    iterator of the body's bytes, closed by ``aclose``)."""

    __slots__ = (
        "_conn", "_head_only", "_parser", "_received", "_stream", "_timeout", "body", "complete",
        "extra", "head_done", "headers", "http_version", "reason", "reusable", "status",
    )

    def __init__(
        self,
        conn: H1Connection,
        stream: httpcore.AsyncNetworkStream,
        head_only: bool,
        timeout: float | None,
    ) -> None:
        self._conn: H1Connection | None = conn
        self._stream = stream
        self._head_only = head_only
        self._timeout = timeout
        self._parser = httptools.HttpResponseParser(self)
        self._received = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.reason = b""
        self.status = 0
        self.http_version = b"HTTP/1.1"
        self.head_done = False
        self.complete = False
        self.extra = False
        self.reusable = True
        self.body: list[bytes] = []

    # -- llhttp's callbacks (httptools calls them from feed_data)

    def on_message_begin(self) -> None:
        if self.complete:
            self.extra = True  # bytes past the reply's end: the next reply would be garbage

    def on_status(self, status: bytes) -> None:
        self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.head_done:  # trailers after a chunked body are read and dropped
            self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self._parser
        status = parser.get_status_code()
        if status < 200:  # informational: skipped (101, a switch of protocol, fails in feed)
            self.headers = []
            self.reason = b""
            return
        self.status = status
        self.head_done = True
        version = parser.get_http_version()
        if version != "1.1":
            self.http_version = b"HTTP/" + version.encode()
            self.reusable = False  # HTTP/1.0 is never kept alive (as h11)
        elif not parser.should_keep_alive():
            self.reusable = False
        if self._head_only:
            self.complete = True

    def on_body(self, body: bytes) -> None:
        if self.complete:
            self.extra = True  # a body after a reply to HEAD
        else:
            self.body.append(body)

    def on_message_complete(self) -> None:
        if self.status:  # not an informational reply's end
            self.complete = True

    # -- reading

    def _feed(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            if self.complete:  # past the reply's end: the reply stands, the connection goes
                self.extra = True
                return
            if self._parser.get_status_code() == 101:
                raise httpcore.RemoteProtocolError(
                    "the server switched protocols (101), which the request did not ask for"
                ) from None
            raise httpcore.RemoteProtocolError(f"the reply is not valid HTTP/1.1: {exc}") from None

    async def _read(self) -> bytes:
        data = await self._stream.read(_READ, self._timeout)
        self._received += len(data)
        return data

    async def read_head(self) -> None:
        """Read until the reply's status and headers have come (1xx replies skipped)."""
        while not self.head_done:
            data = await self._read()
            if not data:
                if not self._received:
                    raise httpcore.RemoteProtocolError(
                        "Server disconnected without sending a response."
                    )
                raise httpcore.RemoteProtocolError(
                    "the server closed the connection in the middle of the reply's headers"
                )
            self._feed(data)
            if not self.head_done and self._received > MAX_HEAD_BYTES:
                raise httpcore.RemoteProtocolError(
                    f"the reply's headers pass {MAX_HEAD_BYTES // 1024} KiB without ending"
                )

    def __aiter__(self) -> _Reply:
        return self

    async def __anext__(self) -> bytes:
        body = self.body
        while not body:
            if self.complete:
                raise StopAsyncIteration
            data = await self._read()
            if data:
                self._feed(data)
            elif self._until_close():
                self.complete = True
                self.reusable = False
            else:
                raise httpcore.RemoteProtocolError(
                    "peer closed connection without sending complete message body"
                )
        data = body[0] if len(body) == 1 else b"".join(body)
        body.clear()
        return data

    def _until_close(self) -> bool:
        """Whether the body ends where the connection does (RFC 9112 §6.3: a transfer coding
        that is not chunked, or neither it nor a length)."""
        names = {name.lower(): value for name, value in self.headers}
        coding = names.get(b"transfer-encoding")
        if coding is not None:
            return not _chunked(coding)
        return b"content-length" not in names

    async def aclose(self) -> None:
        """Close the reply: its connection is reused if the reply was read to its end and both
        sides keep it alive, else closed. Idempotent."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.release(self.complete and self.reusable and not self.extra)
