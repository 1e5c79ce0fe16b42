"""``trio-agents trace serve FILE``: the page of ``trace view``, following a trace as it grows.

One trio task follows the file (``follow_lines``, as ``trace tail`` does) into a
:class:`~runtime.trace._view.PageBuilder` and, at most every :data:`MIN_INTERVAL_S` (longer for a
big trace: ten times what building the page's data took), publishes a new version of the data.
The HTTP server is a small HTTP/1.1 over ``trio.serve_tcp`` speaking only ``GET``: the page, and
``events``, a server-sent-events stream sending the whole data again at each version (the page
redraws from it, keeping what is open and selected).

It listens on 127.0.0.1 only, and every path starts with a random token printed with the
address, so other users of the machine cannot read a trace the runtime keeps 0600; a request
whose ``Host`` is not the loopback address is refused (a web page elsewhere cannot reach it
through DNS rebinding).

Cancellation: Ctrl+C (SIGINT) stops the server and every open stream; exit 130, as ``trace tail``.
"""

from __future__ import annotations

import functools
import secrets
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import trio

if TYPE_CHECKING:
    from runtime.trace import OnError, PageBuilder

MIN_INTERVAL_S: Final = 0.25
"""The shortest time between two versions of the page's data."""
HEARTBEAT_S: Final = 15.0
"""A comment line on an idle event stream, so proxies and browsers keep it open."""
MAX_HEAD: Final = 8192
"""The largest request head read (a GET of this page needs a few hundred bytes)."""
HEAD_TIMEOUT_S: Final = 10.0
_LOOPBACK: Final = "127.0.0.1"


class Published:
    """The latest version of the page's data, and a way to wait for the next one."""

    def __init__(self) -> None:
        self.version = 0
        self.data = b""
        self._changed = trio.Event()

    def publish(self, data: bytes) -> None:
        self.version += 1
        self.data = data
        self._changed.set()
        self._changed = trio.Event()

    async def wait_newer(self, version: int) -> None:
        """Wait until a version newer than *version* is out (returns at once if it is)."""
        while self.version <= version:
            await self._changed.wait()


async def follow(
    path: str,
    builder: PageBuilder,
    published: Published,
    *,
    poll_s: float = 0.1,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Feed *path* into *builder* as it grows, publishing the page's data as it changes."""
    from runtime.trace import data_json, follow_lines

    started = False
    trace = trio.Path(path)
    while not await trace.exists():  # as `tail -F`: the run may not have created it yet
        if not started:
            published.publish(data_json(builder.data(live=True)))
            task_status.started()
            started = True
        await trio.sleep(poll_s)
    last = -float("inf")
    interval = MIN_INTERVAL_S
    async with follow_lines(path, poll_s=poll_s) as batches:
        while True:
            with trio.move_on_after(interval) as waited:
                batch = await batches.receive()
                for lineno, line in batch:
                    builder.feed(lineno, line)
            if not builder.changed and started:
                continue
            if waited.cancelled_caught or trio.current_time() - last >= interval or not started:
                t0 = time.perf_counter()
                published.publish(data_json(builder.data(live=True)))
                # A big trace: publishing ten times what it costs keeps the loop mostly free.
                interval = max(MIN_INTERVAL_S, 10 * (time.perf_counter() - t0))
                last = trio.current_time()
                if not started:
                    task_status.started()
                    started = True


def _response(status: str, body: bytes, content_type: str, *, extra: str = "") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
        f"{extra}Connection: close\r\n\r\n"
    )
    return head.encode() + body


async def _read_head(stream: trio.SocketStream) -> bytes | None:
    data = b""
    with trio.move_on_after(HEAD_TIMEOUT_S):
        while b"\r\n\r\n" not in data and len(data) < MAX_HEAD:
            chunk = await stream.receive_some(MAX_HEAD)
            if not chunk:
                return None
            data += chunk
        return data
    return None


class PageServer:
    """The HTTP side: routes requests on one connection each.

    Args:
        published: the data to serve.
        page: makes the page from the data (the latest version at each request).
        token: the secret first path segment.
        port: the port listened on (for the ``Host`` check).
    """

    def __init__(
        self, published: Published, page: Callable[[bytes], bytes], token: str, port: int
    ) -> None:
        self.published = published
        self.page = page
        self.token = token
        self.port = port

    def _host_ok(self, host: str) -> bool:
        return host in {f"{_LOOPBACK}:{self.port}", f"localhost:{self.port}"}

    async def handle(self, stream: trio.SocketStream) -> None:
        """Answer one connection (one request; a stream of events stays until cancelled)."""
        try:
            head = await _read_head(stream)
            if head is None:
                return
            await self._route(stream, head)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the browser went away
        finally:
            await stream.aclose()

    async def _route(self, stream: trio.SocketStream, head: bytes) -> None:
        lines = head.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            await stream.send_all(_response("400 Bad Request", b"bad request\n", "text/plain"))
            return
        method, target, _ = parts
        if not self._host_ok(headers.get("host", "")):
            await stream.send_all(_response("403 Forbidden", b"forbidden\n", "text/plain"))
            return
        if method != "GET":
            await stream.send_all(
                _response(
                    "405 Method Not Allowed", b"GET only\n", "text/plain", extra="Allow: GET\r\n"
                )
            )
            return
        path = target.split("?", 1)[0]
        if path == f"/{self.token}/":
            body = self.page(self.published.data)
            await stream.send_all(_response("200 OK", body, "text/html; charset=utf-8"))
        elif path == f"/{self.token}/events":
            await self._events(stream)
        else:
            await stream.send_all(_response("404 Not Found", b"not found\n", "text/plain"))

    async def _events(self, stream: trio.SocketStream) -> None:
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n"
            b"X-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\nretry: 1000\n\n"
        )
        seen = 0
        while True:
            with trio.move_on_after(HEARTBEAT_S):
                await self.published.wait_newer(seen)
            if self.published.version > seen:
                seen = self.published.version
                await stream.send_all(b"event: data\ndata: " + self.published.data + b"\n\n")
            else:
                await stream.send_all(b": still here\n\n")


def _live_page(data: bytes) -> bytes:
    import orjson

    from runtime.trace import render_page

    return render_page(orjson.loads(data))


async def serve(
    path: str,
    *,
    port: int = 0,
    open_browser: bool = False,
    poll_s: float = 0.1,
    announce: Callable[[str], None] | None = None,
    on_error: OnError | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the page of *path* until cancelled; ``task_status.started(url)`` once listening.

    Raises:
        OSError: the port cannot be listened on.
    """
    from runtime.trace import PageBuilder

    builder = PageBuilder(name=path, on_error=on_error)
    published = Published()
    token = secrets.token_urlsafe(12)
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(follow, path, builder, published, poll_s=poll_s))
        listeners = await trio.open_tcp_listeners(port, host=_LOOPBACK)
        bound = listeners[0].socket.getsockname()[1]
        server = PageServer(published, _live_page, token, bound)
        url = f"http://{_LOOPBACK}:{bound}/{token}/"
        await nursery.start(trio.serve_listeners, server.handle, listeners)
        if announce is not None:
            announce(url)
        if open_browser:
            import webbrowser

            nursery.start_soon(
                lambda: trio.to_thread.run_sync(webbrowser.open, url, abandon_on_cancel=True)
            )
        task_status.started(url)


async def serve_until_interrupted(
    path: str, *, port: int, open_browser: bool, on_error: OnError | None = None
) -> int:
    """``trace serve``: serve until SIGINT (returns 130)."""

    def announce(url: str) -> None:
        print(
            f"trio-agents trace: serving {path} at {url} (loopback only; Ctrl+C to stop)",
            file=sys.stderr,
            flush=True,
        )

    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def on_sigint() -> None:
                async for _ in signals:
                    nursery.cancel_scope.cancel("interrupted")
                    return

            nursery.start_soon(on_sigint)
            await nursery.start(
                functools.partial(
                    serve,
                    path,
                    port=port,
                    open_browser=open_browser,
                    announce=announce,
                    on_error=on_error,
                )
            )
    return 130
