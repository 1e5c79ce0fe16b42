"""The pool's HTTP/1.1 connection (runtime/providers/_h1.py), through the endpoint's real client
(``make_client``: httpx over the runtime's pool), against a loopback server that writes the
bytes each test gives it: framing, keep-alive, replies cut short or malformed, cancellation,
the deadline, TLS and the bound on a reply's head."""

from __future__ import annotations

import datetime
import ipaddress
import math
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import attrs
import httpcore
import httpx
import pytest
import trio
import trio.testing

from runtime.providers import _pool
from runtime.providers._h1 import MAX_HEAD_BYTES
from runtime.providers._pool import (
    DEADLINE,
    DeadlinePassed,
    PoolLimits,
    make_client,
    open_client,
)

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@attrs.define(eq=False)
class Peer:
    """The server's end of one connection: reads requests, writes whatever bytes it is given."""

    stream: trio.abc.Stream
    index: int
    buffer: bytearray = attrs.Factory(bytearray)
    requests: list[bytes] = attrs.Factory(list)
    first_reads: list[bytes] = attrs.Factory(list)

    async def request(self) -> bytes | None:
        """The next request (head and body, by Content-Length or chunked), or None at EOF."""
        reads = 0
        while b"\r\n\r\n" not in self.buffer:
            if not await self._fill(reads):
                return None
            reads += 1
        end = self.buffer.index(b"\r\n\r\n") + 4
        head = bytes(self.buffer[:end]).lower()
        if b"transfer-encoding: chunked" in head:
            while not self.buffer.endswith(b"0\r\n\r\n"):
                await self._fill(reads)
                reads += 1
            end = len(self.buffer)
        elif b"content-length:" in head:
            length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
            while len(self.buffer) < end + length:
                await self._fill(reads)
                reads += 1
            end += length
        request = bytes(self.buffer[:end])
        del self.buffer[:end]
        self.requests.append(request)
        return request

    async def _fill(self, reads: int) -> bool:
        try:
            data = await self.stream.receive_some(65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        if not reads:
            self.first_reads.append(bytes(data))
        self.buffer += data
        return bool(data)

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def serve(self, *replies: bytes) -> None:
        """Answer each request with the next reply, then wait for the client to close."""
        for reply in replies:
            if await self.request() is None:
                return
            await self.send(reply)
        await self.request()


Handler = Callable[[Peer], Awaitable[None]]


@attrs.define(eq=False)
class Server:
    """A loopback server running ``handler`` on each connection it accepts (and counting them)."""

    handler: Handler
    ssl_context: ssl.SSLContext | None = None
    peers: list[Peer] = attrs.Factory(list)
    port: int = 0
    closed: trio.Event = attrs.Factory(trio.Event)

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{self.port}"

    @property
    def connections(self) -> int:
        return len(self.peers)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners: list[Any] = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        if self.ssl_context is not None:
            listeners = [trio.SSLListener(ln, self.ssl_context, https_compatible=True) for ln in listeners]
        task_status.started()
        await trio.serve_listeners(self._one, listeners)

    async def _one(self, stream: trio.abc.Stream) -> None:
        peer = Peer(stream, len(self.peers))
        self.peers.append(peer)
        try:
            await self.handler(peer)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went away: some tests do that on purpose
        finally:
            await stream.aclose()
            self.closed.set()


@pytest.fixture
async def serve(nursery: trio.Nursery) -> Callable[..., Awaitable[Server]]:
    async def start(handler: Handler, ssl_context: ssl.SSLContext | None = None) -> Server:
        server = Server(handler, ssl_context)
        await nursery.start(server.serve)
        return server

    return start


def _client(
    server: Server, *, read_s: float = 30.0, **limits: Any
) -> AbstractAsyncContextManager[httpx.AsyncClient]:
    return open_client(PoolLimits(**limits), httpx.Timeout(30.0, read=read_s), server.url)


def _pool_of(client: httpx.AsyncClient) -> _pool._StackPool:
    return client._transport._pool  # type: ignore[attr-defined,no-any-return]


async def _always_ok(peer: Peer) -> None:
    """Answer every request with :data:`OK` until the client closes."""
    while await peer.request() is not None:
        await peer.send(OK)


def _first_then_ok(first: bytes) -> Handler:
    """The first connection answers its first request with ``first`` and closes; the others
    answer each request with :data:`OK`."""

    async def handler(peer: Peer) -> None:
        if peer.index == 0:
            await peer.request()
            await peer.send(first)
            return  # and close
        await _always_ok(peer)

    return handler


def _first_stalls(body: bytes) -> Handler:
    """The first connection answers its first request with a chunked head and ``body``, then
    sends nothing more; the others answer each request with :data:`OK`."""

    async def handler(peer: Peer) -> None:
        if peer.index == 0:
            await peer.request()
            await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
            await trio.sleep_forever()
        await _always_ok(peer)

    return handler


def _chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


# -- framing -------------------------------------------------------------------------------------


async def test_a_chunked_body_is_decoded_across_reads_and_its_connection_kept(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    """Chunks split between writes (a size line, a chunk's data, the last chunk) come out whole."""
    body = _chunked(b"data: one\n\n", b"data: two\n\n")

    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(0, len(body), 5):
            await peer.send(body[i : i + 5])
            await trio.testing.wait_all_tasks_blocked()  # the client reads each write on its own
        await peer.serve(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked(b"again"))

    server = await serve(handler)
    async with _client(server) as client:
        first = await client.get(server.url + "/a")
        second = await client.get(server.url + "/b")
    assert first.content == b"data: one\n\ndata: two\n\n"
    assert second.content == b"again"
    assert server.connections == 1


async def test_a_content_length_body_is_read_to_its_length_and_the_connection_reused(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 201 Created\r\nContent-Length: 11\r\nX-Id: 7\r\n\r\nhello")
        await trio.testing.wait_all_tasks_blocked()
        await peer.send(b" world")
        await peer.serve(OK)

    server = await serve(handler)
    async with _client(server) as client:
        first = await client.get(server.url)
        second = await client.get(server.url)
    assert (first.status_code, first.reason_phrase, first.content) == (201, "Created", b"hello world")
    assert first.headers["x-id"] == "7"
    assert first.http_version == "HTTP/1.1"
    assert second.content == b"ok"
    assert server.connections == 1
    assert _pool_of(client).opened == 1


async def test_sequential_calls_share_one_connection_counted_at_the_server(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    server = await serve(_always_ok)
    async with _client(server) as client:
        for _ in range(5):
            assert (await client.post(server.url, content=b"{}")).content == b"ok"
    assert server.connections == 1
    assert len(server.peers[0].requests) == 5


async def test_the_request_head_and_a_small_body_go_in_one_write(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    server = await serve(_always_ok)
    async with _client(server) as client:
        await client.post(server.url + "/v1/x?q=1", content=b"hello", headers={"X-Key": "k"})
    (request,) = server.peers[0].requests
    assert server.peers[0].first_reads[0] == request  # all of it in the first read
    head, _, body = request.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/x?q=1 HTTP/1.1"
    assert lines[1] == b"Host: 127.0.0.1:%d" % server.port
    assert b"Content-Length: 5" in lines
    assert b"X-Key: k" in lines
    assert body == b"hello"


async def test_a_streamed_request_body_is_sent_chunked_and_a_large_one_whole(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    async def parts() -> AsyncIterator[bytes]:
        yield b"ab"
        yield b""
        yield b"cde"

    big = bytes(range(256)) * 1024  # 256 KiB: several writes
    server = await serve(_always_ok)
    async with _client(server) as client:
        await client.post(server.url, content=parts())
        await client.post(server.url, content=big)
    chunked, whole = server.peers[0].requests
    assert chunked.endswith(b"\r\n\r\n2\r\nab\r\n3\r\ncde\r\n0\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in chunked
    assert whole.endswith(b"\r\n\r\n" + big)


async def test_a_header_that_would_inject_another_is_refused_before_anything_is_sent(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    server = await serve(_always_ok)
    async with _client(server) as client:
        with pytest.raises(httpx.LocalProtocolError, match="does not allow") as caught:
            await client.get(server.url, headers={"x-a": "secret\r\nX-Evil: 1"})
        assert "secret" not in str(caught.value)  # a value may be a key: never in the message
        with pytest.raises(httpx.LocalProtocolError, match="does not allow"):
            await client.get(server.url, headers={"bad name": "v"})
        assert (await client.get(server.url)).content == b"ok"
    assert [b"X-Evil" in r for p in server.peers for r in p.requests] == [False]


async def test_informational_replies_are_skipped(serve: Callable[..., Awaitable[Server]]) -> None:
    async def handler(peer: Peer) -> None:
        await peer.serve(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + OK, OK
        )

    server = await serve(handler)
    async with _client(server) as client:
        response = await client.get(server.url)
        assert (response.status_code, response.content) == (200, b"ok")
        assert "link" not in response.headers
        await client.get(server.url)
    assert server.connections == 1


async def test_head_204_and_304_have_no_body_and_keep_the_connection(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    async def handler(peer: Peer) -> None:
        await peer.serve(
            b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",  # HEAD: the length of a GET's body
            b"HTTP/1.1 204 No Content\r\n\r\n",
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 1000\r\n\r\n",
            OK,
        )

    server = await serve(handler)
    async with _client(server) as client:
        head = await client.head(server.url)
        empty = await client.get(server.url)
        same = await client.get(server.url)
        last = await client.get(server.url)
    assert (head.status_code, head.content) == (200, b"")
    assert (empty.status_code, empty.content) == (204, b"")
    assert (same.status_code, same.content) == (304, b"")
    assert last.content == b"ok"
    assert server.connections == 1


async def test_a_body_that_ends_with_the_connection_is_read_and_not_kept(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    server = await serve(_first_then_ok(b"HTTP/1.1 200 OK\r\n\r\nuntil the end"))
    async with _client(server) as client:
        assert (await client.get(server.url)).content == b"until the end"
        assert (await client.get(server.url)).content == b"ok"
    assert server.connections == 2


# -- keep-alive ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",  # as h11
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA",  # bytes past the reply's end
    ],
    ids=["connection-close", "http-1.0", "http-1.0-keep-alive", "bytes-past-the-end"],
)
async def test_a_connection_the_reply_does_not_keep_alive_is_not_reused(
    serve: Callable[..., Awaitable[Server]], reply: bytes
) -> None:
    async def handler(peer: Peer) -> None:
        await peer.serve(reply, reply)

    server = await serve(handler)
    async with _client(server) as client:
        for _ in range(2):
            assert (await client.get(server.url)).content == b"ok"
    assert server.connections == 2


async def test_a_request_saying_connection_close_does_not_reuse_its_connection(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    server = await serve(_always_ok)
    async with _client(server) as client:
        await client.get(server.url, headers={"connection": "close"})
        await client.get(server.url)
    assert server.connections == 2


async def test_an_idle_connection_the_server_closed_is_replaced_without_a_failure(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    # The first reply says nothing of closing; the server closes while the client is idle.
    server = await serve(_first_then_ok(OK))
    async with _client(server) as client:
        assert (await client.get(server.url)).content == b"ok"
        await server.closed.wait()
        assert (await client.get(server.url)).content == b"ok"
    assert server.connections == 2
    assert len(server.peers[1].requests) == 1  # not a retry: the dead one was never written to


# -- replies cut short or malformed ------------------------------------------------------------


@pytest.mark.parametrize(
    ("sent", "error"),
    [
        (b"", "Server disconnected without sending a response"),
        (b"HTTP/1.1 200 OK\r\nContent-Le", "in the middle of the reply's headers"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "without sending complete message body"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", "complete message body"),
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "not valid HTTP/1.1"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", "not valid"),
        (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", "switched protocols"),
    ],
    ids=["nothing", "mid-headers", "mid-body", "mid-chunk", "garbage", "ambiguous-length", "101"],
)
async def test_a_reply_cut_short_or_malformed_is_one_error_and_its_connection_dropped(
    serve: Callable[..., Awaitable[Server]], sent: bytes, error: str
) -> None:
    server = await serve(_first_then_ok(sent))
    async with _client(server) as client:
        with pytest.raises(httpx.RemoteProtocolError, match=error):
            await client.get(server.url)
        assert (await client.get(server.url)).content == b"ok"
        assert _pool_of(client)._permits.value == PoolLimits().max_connections
    assert server.connections == 2


async def test_a_header_section_past_the_bound_fails_clearly_and_one_within_it_is_read(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    line = b"X-Pad: " + b"p" * 1000 + b"\r\n"
    within = b"HTTP/1.1 200 OK\r\n" + line * 60 + b"Content-Length: 2\r\n\r\nok"
    assert len(within) < MAX_HEAD_BYTES

    async def handler(peer: Peer) -> None:
        if peer.index == 0:
            await peer.request()
            await peer.send(within)
            await peer.request()
            await peer.send(b"HTTP/1.1 200 OK\r\n")
            with trio.move_on_after(30):  # headers without end, until the client gives up
                while True:
                    await peer.send(line * 16)
            return
        await peer.serve(OK)

    server = await serve(handler)
    async with _client(server) as client:
        response = await client.get(server.url)
        assert (response.content, len(response.headers.get_list("x-pad"))) == (b"ok", 60)
        with pytest.raises(httpx.RemoteProtocolError, match="headers pass 64 KiB"):
            await client.get(server.url)
        assert (await client.get(server.url)).content == b"ok"
    assert server.connections == 2


async def test_a_large_body_streams_in_bounded_pieces(serve: Callable[..., Awaitable[Server]]) -> None:
    body = b"x" * (4 * 1024 * 1024)

    async def handler(peer: Peer) -> None:
        await peer.serve(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    server = await serve(handler)
    async with _client(server) as client, client.stream("GET", server.url) as response:
        sizes = [len(chunk) async for chunk in response.aiter_raw()]
    assert sum(sizes) == len(body)
    assert max(sizes) <= 64 * 1024


# -- cancellation, timeouts, the deadline --------------------------------------------------------


async def test_a_stream_cancelled_mid_body_closes_its_connection_and_gives_its_permit_back(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    gone = trio.Event()

    async def handler(peer: Peer) -> None:
        if peer.index == 0:
            await peer.request()
            await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"5\r\nfirst\r\n")
            assert await peer.request() is None  # the client closed it: EOF, not a request
            gone.set()
            return
        await peer.serve(OK)

    server = await serve(handler)
    async with _client(server, max_connections=1) as client:
        with trio.CancelScope() as scope:
            async with client.stream("GET", server.url) as response:
                async for chunk in response.aiter_raw():
                    assert chunk == b"first"
                    scope.cancel()
        assert scope.cancelled_caught
        with trio.fail_after(10):
            await gone.wait()
            # One connection in all: had the permit not come back, this would wait forever.
            assert (await client.get(server.url)).content == b"ok"
    assert server.connections == 2


async def test_a_reply_closed_before_its_end_closes_its_connection(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    async def handler(peer: Peer) -> None:
        if peer.index == 0:
            await peer.request()
            await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst")
        await peer.serve(OK)

    server = await serve(handler)
    async with _client(server) as client:
        response = await client.send(client.build_request("GET", server.url), stream=True)
        await response.aclose()  # its head read, not its body
        assert (await client.get(server.url)).content == b"ok"
    assert server.connections == 2


@pytest.mark.parametrize("direct", [False, True], ids=["through-httpx", "direct"])
async def test_the_call_deadline_ends_a_stalled_read(
    serve: Callable[..., Awaitable[Server]], autojump_clock: trio.testing.MockClock, direct: bool
) -> None:
    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n")
        await trio.sleep_forever()

    server = await serve(handler)
    async with _client(server, read_s=600) as client:
        deadline = trio.current_time() + 5
        response: Any
        if direct:  # the providers' path: _pool.post
            response = await _pool.post(client, server.url, {}, b"", deadline)
            body = response.stream
        else:
            request = client.build_request("GET", server.url, extensions={DEADLINE: deadline})
            response = await client.send(request, stream=True)
            body = response.aiter_raw()
        chunks: list[bytes] = []

        async def read() -> None:
            async for chunk in body:
                chunks.append(chunk)  # noqa: PERF401 - the error comes from the loop

        with pytest.raises(DeadlinePassed):
            await read()
        await response.aclose()
        assert chunks == [b"hi"]
        assert trio.current_time() == pytest.approx(deadline)
        assert _pool_of(client)._permits.value == PoolLimits().max_connections


async def test_the_read_timeout_ends_a_stalled_head(
    serve: Callable[..., Awaitable[Server]], autojump_clock: trio.testing.MockClock
) -> None:
    async def handler(peer: Peer) -> None:
        await peer.request()
        await trio.sleep_forever()

    server = await serve(handler)
    async with _client(server, read_s=2) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.get(server.url)
        assert _pool_of(client)._permits.value == PoolLimits().max_connections


async def test_the_read_timeout_ends_a_stalled_body_read_and_its_connection(
    serve: Callable[..., Awaitable[Server]], autojump_clock: trio.testing.MockClock
) -> None:
    """The watchdog's path (a read that waits, no cancel scope of its own): its timeout is
    httpx's ReadTimeout at its time, and the connection is not reused."""

    server = await serve(_first_stalls(b"2\r\nhi\r\n"))
    async with _client(server, read_s=2) as client:
        async with client.stream("GET", server.url) as response:
            chunks = response.aiter_raw()
            assert await anext(chunks) == b"hi"
            started = trio.current_time()
            with pytest.raises(httpx.ReadTimeout):
                await anext(chunks)
            assert trio.current_time() == pytest.approx(started + 2)
        assert (await client.get(server.url)).content == b"ok"
        assert _pool_of(client)._permits.value == PoolLimits().max_connections
    assert server.connections == 2


async def test_reads_that_each_wait_less_than_the_timeout_are_not_ended_by_an_earlier_one(
    serve: Callable[..., Awaitable[Server]], autojump_clock: trio.testing.MockClock
) -> None:
    """Each read's timeout counts from its own start: a stream's entry with the watchdog, made
    by an earlier read, ends no later one that is still inside its own timeout."""

    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in (b"a", b"b", b"c", b"d"):
            await trio.sleep(8)  # 8 s a read, 32 s in all, against a 10 s read timeout
            await peer.send(b"1\r\n%s\r\n" % piece)
        await peer.send(b"0\r\n\r\n")
        await _always_ok(peer)

    server = await serve(handler)
    async with _client(server, read_s=10) as client:
        start = trio.current_time()
        async with client.stream("GET", server.url) as response:
            assert [chunk async for chunk in response.aiter_raw()] == [b"a", b"b", b"c", b"d"]
        assert trio.current_time() == pytest.approx(start + 32)
        assert (await client.get(server.url)).content == b"ok"
    assert server.connections == 1


async def test_a_cancelled_waiting_read_leaves_nothing_for_the_watchdog(
    serve: Callable[..., Awaitable[Server]], autojump_clock: trio.testing.MockClock
) -> None:
    """Cancelled while it waits, a read ends at once, its connection is closed (not reused),
    and once its timeout has passed the watchdog holds no entry of it."""

    server = await serve(_first_stalls(b""))
    async with _client(server, read_s=5) as client:
        response = await client.send(client.build_request("GET", server.url), stream=True)
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(response.aread)
                await trio.testing.wait_all_tasks_blocked()
                started = trio.current_time()
                scope.cancel()
        assert scope.cancelled_caught
        assert trio.current_time() == started
        await response.aclose()
        watchdog = _pool_of(client).watchdog
        assert watchdog is not None
        assert len(watchdog._heap) == 1
        await trio.sleep(6)
        assert watchdog._heap == []
        assert (await client.get(server.url)).content == b"ok"
    assert server.connections == 2


async def test_an_idle_connection_past_its_expiry_is_not_reused(
    serve: Callable[..., Awaitable[Server]], autojump_clock: trio.testing.MockClock
) -> None:
    server = await serve(_always_ok)
    async with _client(server, keepalive_expiry_s=10) as client:
        await client.get(server.url)
        await trio.sleep(5)
        await client.get(server.url)
        await trio.sleep(11)
        await client.get(server.url)
    assert server.connections == 2


# -- TLS -----------------------------------------------------------------------------------------


def _certificate(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A self-signed certificate for 127.0.0.1 (with ``cryptography``): the server's context and
    a client's that trusts it."""
    x509 = pytest.importorskip("cryptography.x509", reason="TLS needs cryptography for a cert")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = tmp_path / "cert.pem"
    key_pem = tmp_path / "key.pem"
    cert_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ))
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert_pem, key_pem)
    return served, ssl.create_default_context(cafile=str(cert_pem))


async def test_tls_replies_stream_keep_their_connection_and_a_cut_one_fails(
    serve: Callable[..., Awaitable[Server]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served, trusting = _certificate(tmp_path)
    monkeypatch.setattr(_pool, "shared_ssl_context", lambda: trusting)

    async def handler(peer: Peer) -> None:
        if peer.index == 0:
            await peer.serve(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked(b"se", b"cure"),
                OK,
                OK,
            )
            return
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")

    server = await serve(handler, served)
    async with _client(server) as client:
        assert (await client.get(server.url)).content == b"secure"
        assert (await client.get(server.url)).content == b"ok"
        assert server.connections == 1
        await client.get(server.url, headers={"connection": "close"})  # a third on the first...
        with pytest.raises(httpx.RemoteProtocolError, match="complete message body"):
            await client.get(server.url)  # ...then the second connection's reply is cut
    assert server.connections == 2


async def test_a_server_that_does_not_speak_tls_is_a_connect_error(
    serve: Callable[..., Awaitable[Server]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, trusting = _certificate(tmp_path)
    monkeypatch.setattr(_pool, "shared_ssl_context", lambda: trusting)

    async def handler(peer: Peer) -> None:
        await peer.send(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    server = await serve(handler)
    async with make_client(PoolLimits(), httpx.Timeout(30.0), server.url) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"https://127.0.0.1:{server.port}")
        assert _pool_of(client)._permits.value == PoolLimits().max_connections


# -- the direct path (``_pool.post``: the providers' requests without an httpx.Request) ----------


async def test_the_direct_path_sends_the_request_httpx_would_and_keeps_the_connection(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    server = await serve(_always_ok)
    headers = {"content-type": "application/json", "authorization": "Bearer k", "accept": "x/y"}
    async with _client(server) as client:
        await client.post(server.url + "/v1/c?q=1", content=b'{"a":1}', headers=headers)
        for body in (b'{"a":1}', b"[]"):  # the second from the remembered head
            reply = await _pool.post(client, server.url + "/v1/c?q=1", headers, body, math.inf)
            assert reply is not None
            assert reply.status_code == 200
            assert reply.headers == {"content-length": "2"}
            assert b"".join([chunk async for chunk in reply.stream]) == b"ok"
            await reply.aclose()
    via_httpx, direct, second = server.peers[0].requests  # one connection for all three
    assert direct == via_httpx
    assert second == direct.replace(b"Content-Length: 7", b"Content-Length: 2").replace(
        b'{"a":1}', b"[]"
    )


async def test_the_direct_path_sends_the_client_headers_as_they_are_now(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    server = await serve(_always_ok)
    async with _client(server) as client:
        for extra in ("1", "2"):
            client.headers["x-extra"] = extra
            reply = await _pool.post(client, server.url, {"a": "b"}, b"", math.inf)
            assert reply is not None
            await reply.aclose()
    first, second = server.peers[0].requests
    assert b"x-extra: 1\r\n" in first
    assert b"x-extra: 2\r\n" in second


async def test_a_direct_head_that_would_inject_a_header_is_refused_before_a_connection(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    server = await serve(_always_ok)
    async with _client(server) as client:
        with pytest.raises(httpcore.LocalProtocolError, match="does not allow") as caught:
            await _pool.post(client, server.url, {"x-a": "secret\r\nX-Evil: 1"}, b"", math.inf)
        assert "secret" not in str(caught.value)  # a value may be a key: never in the message
        with pytest.raises(httpcore.LocalProtocolError, match="does not allow"):
            await _pool.post(client, server.url, {"bad name": "v"}, b"", math.inf)
        with pytest.raises(httpcore.LocalProtocolError, match="does not allow"):
            await _pool.post(client, server.url, {"x-b": "a\nb"}, b"", math.inf)
        assert _pool_of(client)._permits.value == PoolLimits().max_connections
    assert server.connections == 0


async def test_a_client_not_over_the_runtimes_pool_takes_httpx_path(
    serve: Callable[..., Awaitable[Server]], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await serve(_always_ok)
    async with httpx.AsyncClient() as own:  # a caller's client: its auth, hooks, proxies
        assert await _pool.post(own, server.url, {}, b"", math.inf) is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:1")
    monkeypatch.setenv("NO_PROXY", "")
    proxied = make_client(PoolLimits(), httpx.Timeout(1.0), "https://api.example")
    async with proxied:
        assert await _pool.post(proxied, "https://api.example/v1", {}, b"", math.inf) is None


@pytest.mark.parametrize("ended_by", ["deadline", "cancel"])
async def test_a_read_whose_bytes_are_there_still_ends_at_the_deadline_or_a_cancel(
    serve: Callable[..., Awaitable[Server]], autojump_clock: trio.testing.MockClock, ended_by: str
) -> None:
    more = trio.Event()

    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n")
        await more.wait()
        await peer.send(b"5\r\nlater\r\n")
        await trio.sleep_forever()

    server = await serve(handler)
    async with _client(server, read_s=600) as client:
        deadline = trio.current_time() + 5
        reply = await _pool.post(client, server.url, {}, b"", deadline)
        assert reply is not None
        chunks = aiter(reply.stream)
        assert await anext(chunks) == b"hi"
        more.set()
        if ended_by == "deadline":
            await trio.sleep(5)  # the rest of the body has come, and the deadline passed
        else:
            await trio.testing.wait_all_tasks_blocked()
        conn = reply.stream._conn.http  # type: ignore[union-attr]
        assert conn._stream.get_extra_info("is_readable")  # type: ignore[union-attr]
        if ended_by == "deadline":
            with pytest.raises(DeadlinePassed):
                await anext(chunks)
        else:
            with trio.CancelScope() as scope:
                scope.cancel()
                await anext(chunks)
            assert scope.cancelled_caught
        await reply.aclose()
        assert _pool_of(client)._permits.value == PoolLimits().max_connections


async def test_a_direct_request_waiting_for_a_connection_ends_at_its_deadline(
    serve: Callable[..., Awaitable[Server]], autojump_clock: trio.testing.MockClock
) -> None:
    server = await serve(_always_ok)
    async with _client(server, max_connections=1) as client:
        held = await _pool.post(client, server.url, {}, b"", math.inf)  # the one connection
        assert held is not None
        deadline = trio.current_time() + 5
        with pytest.raises(DeadlinePassed):
            await _pool.post(client, server.url, {}, b"", deadline)
        assert trio.current_time() == pytest.approx(deadline)
        await held.aclose()
        assert _pool_of(client)._permits.value == 1
        again = await _pool.post(client, server.url, {}, b"", math.inf)
        assert again is not None
        await again.aclose()


async def test_an_address_connects_straight_and_a_name_through_the_resolver(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    server = await serve(_always_ok)
    by_name = f"http://localhost:{server.port}"
    async with _client(server) as client:
        for url in (server.url, by_name):
            reply = await _pool.post(client, url, {}, b"", math.inf)
            assert reply is not None
            assert reply.status_code == 200
            await reply.aclose()
    assert server.connections == 2  # one per origin
    with trio.socket.socket() as probe:  # a port nothing listens on
        await probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    async with _client(server) as client:
        with pytest.raises(httpcore.ConnectError):
            await _pool.post(client, f"http://127.0.0.1:{closed}", {}, b"", math.inf)
        assert _pool_of(client)._permits.value == PoolLimits().max_connections


async def test_a_client_made_without_open_client_bounds_a_waiting_read_by_a_scope(
    serve: Callable[..., Awaitable[Server]], autojump_clock: trio.testing.MockClock
) -> None:
    """``make_client`` alone (no watchdog task): a stalled read still ends at its timeout."""
    server = await serve(_first_stalls(b""))
    async with make_client(PoolLimits(), httpx.Timeout(30.0, read=5), server.url) as client:
        assert _pool_of(client).watchdog is None
        start = trio.current_time()
        with pytest.raises(httpx.ReadTimeout):
            await client.get(server.url)
        assert trio.current_time() == pytest.approx(start + 5)


async def test_an_error_of_the_block_leaves_open_client_as_it_is() -> None:
    """The watchdog's nursery does not wrap the block's exception in a group, and the task is
    gone once the block has left."""
    pools: list[_pool._StackPool] = []

    async def block() -> None:
        async with open_client(PoolLimits(), httpx.Timeout(1.0), "http://127.0.0.1:9") as client:
            pools.append(_pool_of(client))
            assert pools[0].watchdog is not None
            raise KeyError("raised in the block")

    with pytest.raises(KeyError, match="raised in the block"):
        await block()
    assert pools[0].watchdog is None
