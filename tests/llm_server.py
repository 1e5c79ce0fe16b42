"""A small HTTP/1.1 server on loopback that plays scripted LLM API replies, for tests and benchmarks.

It runs in the test's own trio loop (start it with ``await nursery.start(server.serve)``), on real
sockets, with ``h11`` for the HTTP framing, so the providers go through their whole stack:
httpx, the connection pool, chunked transfer, SSE parsing.

Each request takes the next :class:`Reply` from the queue (``server.push(...)``), whatever the
path, unless ``server.route`` picks one by the request's content, and is recorded (:class:`RecordedRequest`: path, headers, body) so a test can check the
wire format. A reply is a status, headers and body pieces (:class:`Piece`), each sent after an
optional delay, so a test controls exactly where the bytes split. A reply can also cut the
connection after N body bytes, or hang up without answering at all. While a reply streams, the
server watches the socket: a client that goes away is recorded in ``server.disconnects`` with
the (trio) time it was seen.

The ``openai_*`` and ``anthropic_*`` helpers build event streams shaped like the real services';
the client-side helpers at the end consume a provider the way the agent loop does.
"""

from __future__ import annotations

import http
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import aclosing
from typing import Any

import attrs
import h11
import orjson
import trio

from runtime.core._errors import ProviderError
from runtime.core._messages import Block, Message, TextBlock, ThinkingBlock, ToolUseBlock
from runtime.core._provider import (
    ModelRequest,
    Provider,
    StreamItem,
    TextChunk,
    ThinkingChunk,
    ToolCall,
    ToolSpec,
)

# -- scripted replies ------------------------------------------------------------------------


@attrs.frozen
class Piece:
    """Body bytes sent as one write, ``delay_s`` (trio time) after the previous one."""

    data: bytes
    delay_s: float = 0.0


@attrs.define(kw_only=True)
class Reply:
    """One scripted response.

    Attributes:
        status: the HTTP status; ``None`` hangs up without sending anything.
        headers: extra headers.
        pieces: the body, in writes.
        content_type: the Content-Type header.
        drop_after_bytes: close the connection (mid chunked body, so the client sees it cut)
            once this many body bytes have been sent.
    """

    status: int | None = 200
    headers: list[tuple[str, str]] = attrs.Factory(list)
    pieces: list[Piece] = attrs.Factory(list)
    content_type: str = "text/event-stream; charset=utf-8"
    drop_after_bytes: int | None = None

    @classmethod
    def stream(
        cls, events: Iterable[bytes | Piece], *, drop_after_bytes: int | None = None
    ) -> Reply:
        """An SSE reply; ``bytes`` items are sent in one write, ``Piece`` items as given."""
        pieces = [e if isinstance(e, Piece) else Piece(e) for e in events]
        return cls(pieces=pieces, drop_after_bytes=drop_after_bytes)

    @classmethod
    def error(
        cls,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        headers: Sequence[tuple[str, str]] = (),
        anthropic: bool = False,
    ) -> Reply:
        """A JSON error body as OpenAI (default) or Anthropic shape it."""
        error = {"type": kind, "message": message}
        body: dict[str, Any] = (
            {"type": "error", "error": error} if anthropic else {"error": {**error, "code": None}}
        )
        return cls(
            status=status,
            headers=list(headers),
            pieces=[Piece(orjson.dumps(body))],
            content_type="application/json",
        )

    @classmethod
    def hang_up(cls) -> Reply:
        """Close the connection without answering."""
        return cls(status=None)


@attrs.frozen
class RecordedRequest:
    index: int
    at: float
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return orjson.loads(self.body)


@attrs.frozen
class Disconnect:
    """The client went away while reply ``index`` was being sent."""

    index: int
    at: float
    body_bytes_sent: int


# -- the server --------------------------------------------------------------------------------


class LLMServer:
    """See the module docstring."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[RecordedRequest] = []
        self.disconnects: list[Disconnect] = []
        self.connections = 0
        self.port = 0
        # Picks a reply by the request's content; for agents calling in parallel, whose
        # requests arrive in any order. Returning None falls back to the queue.
        self.route: Callable[[RecordedRequest], Reply | None] | None = None
        self._changed = trio.Event()
        self.tls = False

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def push(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    async def serve(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        task_status: trio.TaskStatus[LLMServer] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on 127.0.0.1, a free port, until cancelled (over TLS with ``ssl_context``)."""
        tcp = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = tcp[0].socket.getsockname()[1]
        listeners: list[Any] = list(tcp)
        if ssl_context is not None:
            self.tls = True
            listeners = [trio.SSLListener(listener, ssl_context) for listener in tcp]
        async with trio.open_nursery() as nursery:
            task_status.started(self)
            await trio.serve_listeners(self._serve_connection, listeners, handler_nursery=nursery)

    async def wait_disconnects(self, count: int) -> None:
        """Wait until ``count`` disconnects have been seen."""
        while len(self.disconnects) < count:
            await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        await serve_requests(stream, self._serve_request)

    async def _serve_request(
        self, stream: trio.SocketStream, conn: h11.Connection, head: h11.Request, body: bytes
    ) -> bool:
        request = RecordedRequest(
            index=len(self.requests),
            at=trio.current_time(),
            method=head.method.decode(),
            path=head.target.decode(),
            headers={k.decode().lower(): v.decode() for k, v in head.headers},
            body=body,
        )
        self.requests.append(request)
        self._notify()
        reply = self.route(request) if self.route else None
        if reply is None:
            reply = self.replies.popleft() if self.replies else _NO_REPLY
        return await self._send_reply(stream, conn, reply, request.index)

    async def _send_reply(
        self, stream: trio.SocketStream, conn: h11.Connection, reply: Reply, index: int
    ) -> bool:
        """Send ``reply``; whether the connection is still good for another request."""
        if reply.status is None:
            return False
        headers = [("content-type", reply.content_type), *reply.headers]
        if not reply.content_type.startswith("text/event-stream"):
            headers.append(("content-length", str(sum(len(p.data) for p in reply.pieces))))
        head = h11.Response(status_code=reply.status, headers=headers, reason=_reason(reply.status))
        try:
            await stream.send_all(conn.send(head))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._disconnected(index, 0)
            return False
        sent = 0
        finished = False
        async with trio.open_nursery() as nursery:
            watching = trio.CancelScope()
            nursery.start_soon(
                self._watch, stream, watching, nursery.cancel_scope, index, lambda: sent
            )
            # Errors are caught here, in the body: leaving the nursery they would be grouped.
            # A body of known length is whole for the client with its last piece (its end
            # sends no bytes), so the watch stops before that piece goes.
            sized = "content-length" in (name for name, _ in headers)
            last = len(reply.pieces) - 1
            try:
                for i, piece in enumerate(reply.pieces):
                    if piece.delay_s:
                        await trio.sleep(piece.delay_s)
                    if sized and i == last and reply.drop_after_bytes is None:
                        watching.cancel()
                    data = piece.data
                    if reply.drop_after_bytes is not None:
                        data = data[: max(0, reply.drop_after_bytes - sent)]
                    if data:
                        await stream.send_all(conn.send(h11.Data(data=data)))
                        sent += len(data)
                    if reply.drop_after_bytes is not None and sent >= reply.drop_after_bytes:
                        break
                else:
                    # Before the reply's end: once it has it, the client may send its next request.
                    watching.cancel()
                    await stream.send_all(conn.send(h11.EndOfMessage()))
                    finished = True
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._disconnected(index, sent)
            nursery.cancel_scope.cancel()
        return finished

    async def _watch(
        self,
        stream: trio.SocketStream,
        watching: trio.CancelScope,
        scope: trio.CancelScope,
        index: int,
        sent: Any,
    ) -> None:
        # The client sends nothing while it reads a reply (httpx does not pipeline), so any
        # readable event here is the connection closing.
        with watching:
            try:
                data = await stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            assert not data, f"unexpected bytes from the client mid-reply: {data!r:.80}"
            self._disconnected(index, sent())
            scope.cancel()

    def _disconnected(self, index: int, sent: int) -> None:
        if not any(d.index == index for d in self.disconnects):
            self.disconnects.append(
                Disconnect(index=index, at=trio.current_time(), body_bytes_sent=sent)
            )
            self._notify()


# -- HTTP/1.1 on a socket, for this server and tests/ratelimit_server.py -----------------------

Answer = Callable[[trio.SocketStream, h11.Connection, h11.Request, bytes], Awaitable[bool]]
"""Answers one request (its head and body) on the connection; whether it is still good."""


async def serve_requests(stream: trio.SocketStream, answer: Answer) -> None:
    """Serve one connection's requests, one after another (keep-alive), until the client or
    *answer* is done with it; the socket is closed at the end."""
    conn = h11.Connection(h11.SERVER)
    async with stream:
        while True:
            request = await read_request(stream, conn)
            if request is None:
                return
            if not await answer(stream, conn, *request):
                return
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()


async def read_request(
    stream: trio.SocketStream, conn: h11.Connection
) -> tuple[h11.Request, bytes] | None:
    """The next request on *conn*: its head and body; ``None`` when the client is done."""
    head: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            try:
                data = await stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return None
            conn.receive_data(data)
        elif isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            return head, bytes(body)
        else:  # ConnectionClosed, PAUSED: the client is done with this connection.
            return None


def _reason(status: int) -> bytes:
    try:
        return http.HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


_NO_REPLY = Reply.error(500, "llm_server: no scripted reply left", kind="server_error")


# -- event streams shaped like the real services' ---------------------------------------------


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event; ``data`` is JSON-encoded unless it is already ``str``/``bytes``."""
    if isinstance(data, str):
        payload = data.encode()
    elif isinstance(data, bytes):
        payload = data
    else:
        payload = orjson.dumps(data)
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + payload + b"\n\n"


def openai_chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish: str | None = None,
    usage: dict[str, int] | None = None,
    no_choices: bool = False,
) -> bytes:
    """One ``chat.completion.chunk`` event as OpenAI streams it."""
    choices = (
        []
        if no_choices
        else [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}]
    )
    return sse(
        {
            "id": "chatcmpl-test",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": "gpt-test",
            "system_fingerprint": "fp_test",
            "choices": choices,
            "usage": usage,
        }
    )


def openai_usage(prompt: int, completion: int) -> bytes:
    """The last chunk with ``stream_options.include_usage``: no choices, the token counts."""
    return openai_chunk(
        no_choices=True,
        usage={
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    )


OPENAI_DONE = b"data: [DONE]\n\n"


def openai_text_stream(
    texts: Sequence[str],
    *,
    reasoning: Sequence[str] = (),
    reasoning_field: str = "reasoning_content",
    finish: str = "stop",
    usage: tuple[int, int] = (11, 7),
) -> list[bytes]:
    """A whole text turn: role chunk, reasoning deltas, content deltas, finish, usage, [DONE]."""
    events = [openai_chunk({"role": "assistant", "content": ""})]
    events += [openai_chunk({reasoning_field: r}) for r in reasoning]
    events += [openai_chunk({"content": t}) for t in texts]
    events += [openai_chunk({}, finish=finish), openai_usage(*usage), OPENAI_DONE]
    return events


def anthropic_event(kind: str, **fields: Any) -> bytes:
    return sse({"type": kind, **fields}, event=kind)


def anthropic_message_start(input_tokens: int = 25, **usage: int) -> bytes:
    return anthropic_event(
        "message_start",
        message={
            "id": "msg_test",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 1, **usage},
        },
    )


def anthropic_block(
    index: int, block: dict[str, Any], deltas: Sequence[dict[str, Any]]
) -> list[bytes]:
    """content_block_start, its deltas, content_block_stop."""
    return [
        anthropic_event("content_block_start", index=index, content_block=block),
        *(anthropic_event("content_block_delta", index=index, delta=d) for d in deltas),
        anthropic_event("content_block_stop", index=index),
    ]


def anthropic_text_block(index: int, texts: Sequence[str]) -> list[bytes]:
    return anthropic_block(
        index, {"type": "text", "text": ""}, [{"type": "text_delta", "text": t} for t in texts]
    )


def anthropic_thinking_block(index: int, texts: Sequence[str], signature: str) -> list[bytes]:
    deltas = [{"type": "thinking_delta", "thinking": t} for t in texts]
    deltas.append({"type": "signature_delta", "signature": signature})
    return anthropic_block(index, {"type": "thinking", "thinking": "", "signature": ""}, deltas)


def anthropic_tool_block(
    index: int, tool_id: str, name: str, fragments: Sequence[str]
) -> list[bytes]:
    return anthropic_block(
        index,
        {"type": "tool_use", "id": tool_id, "name": name, "input": {}},
        [{"type": "input_json_delta", "partial_json": f} for f in fragments],
    )


def anthropic_end(stop_reason: str = "end_turn", output_tokens: int = 9) -> list[bytes]:
    return [
        anthropic_event(
            "message_delta",
            delta={"stop_reason": stop_reason, "stop_sequence": None},
            usage={"output_tokens": output_tokens},
        ),
        anthropic_event("message_stop"),
    ]


def anthropic_text_stream(texts: Sequence[str], *, usage: tuple[int, int] = (25, 9)) -> list[bytes]:
    """A whole text turn: message_start, ping, one text block, message_delta, message_stop."""
    return [
        anthropic_message_start(usage[0]),
        anthropic_event("ping"),
        *anthropic_text_block(0, texts),
        *anthropic_end("end_turn", usage[1]),
    ]


def split_inside(data: bytes, char: str, *, delay_s: float = 0.01) -> list[Piece]:
    """``data`` as two writes split inside the first occurrence of the multi-byte ``char``."""
    encoded = char.encode()
    assert len(encoded) > 1, "split_inside needs a character of more than one byte"
    at = data.index(encoded) + 1
    return [Piece(data[:at]), Piece(data[at:], delay_s=delay_s)]


# -- client side -------------------------------------------------------------------------------


def user(text: str) -> Message:
    return Message(role="user", content=(TextBlock(text=text),))


def make_request(
    *messages: Message, system: str = "", tools: Sequence[ToolSpec] = (), model: str = ""
) -> ModelRequest:
    return ModelRequest(
        model=model,
        system=system,
        messages=messages or (user("hi"),),
        tools=tools,
        agent_type="main",
        agent_id="agent-1",
    )


async def collect(provider: Provider, request: ModelRequest) -> list[StreamItem]:
    """Every item of one turn, consumed the way the agent loop does (under ``aclosing``)."""
    async with aclosing(provider.stream(request)) as stream:
        return [item async for item in stream]


async def collect_until_error(
    provider: Provider, request: ModelRequest
) -> tuple[list[StreamItem], ProviderError]:
    """The items yielded before the turn failed, and the error; fails the test if it did not."""
    items: list[StreamItem] = []
    try:
        async with aclosing(provider.stream(request)) as stream:
            async for item in stream:
                items.append(item)  # noqa: PERF401 - the items before the failure are the point
    except ProviderError as exc:
        return items, exc
    raise AssertionError(f"the turn did not fail; it yielded {items}")


def assemble(items: Sequence[StreamItem]) -> Message:
    """The assistant message the agent loop makes of a turn's items (as ``runtime.core._loop``)."""
    thinking = "".join(i.text for i in items if isinstance(i, ThinkingChunk))
    signatures = [i.signature for i in items if isinstance(i, ThinkingChunk) and i.signature]
    text = "".join(i.text for i in items if isinstance(i, TextChunk))
    content: list[Block] = []
    if thinking or signatures:
        content.append(
            ThinkingBlock(text=thinking, signature=signatures[-1] if signatures else None)
        )
    if text:
        content.append(TextBlock(text=text))
    content.extend(
        ToolUseBlock(id=i.id, name=i.name, input=i.input) for i in items if isinstance(i, ToolCall)
    )
    return Message(role="assistant", content=tuple(content))


def error_chain(exc: BaseException) -> str:
    """The text of an exception and of every exception it was raised from or during."""
    parts = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return "\n".join(parts)
