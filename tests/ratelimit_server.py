"""A loopback model server that enforces rate limits per key, as the real APIs do.

For the tests of docs/rate-limits.md and for ``bench/bench_ratelimit.py``. It speaks the OpenAI
Chat Completions API (``POST …/chat/completions``, streamed or not) or, with
``mode="anthropic"``, the Messages API (``POST …/v1/messages``), and answers a fan-out as
``bench/bench_http.py``'s server does:

* the last message is a user's ``FANOUT n``: ``n`` calls of the request's ``agent`` tool;
* the last message carries tool results: the root's short final answer;
* anything else is a child: a few text deltas.

Each key (the bearer token or ``x-api-key``) has a token bucket of requests (``rps`` a second,
``burst`` at most, by default one second's worth) and, with ``tps``, one of tokens (a request
costs the prompt tokens its usage reports, charged when it arrives; the completion tokens are
charged as it ends). A request the bucket cannot take is refused, as the real services refuse
it:

* OpenAI: ``429`` with ``retry-after-ms`` (the time until the bucket holds one more request),
  ``retry-after`` (the same, whole seconds, rounded up) and the ``x-ratelimit-*`` headers;
* Anthropic: ``429`` with ``retry-after`` and the ``anthropic-ratelimit-*`` headers; the first
  ``overloaded`` requests get ``529 overloaded_error`` instead of an answer.

With ``max_in_flight``, a request that arrives while that many are being answered is refused
too (a gateway that bounds concurrency); ``answer_s`` is how long each answer but a fan-out
root's takes. ``retry_after="1"`` sends that ``retry-after`` on every refusal and no
``retry-after-ms``: with ``rate_headers=False``, a strict server that says nothing of its
limits but "come back in a second".

Every answer carries the same rate-limit headers (limits per minute, what remains, when the
bucket is full again), so a client can learn the limit from its first reply. ``nonsense=True``
sends headers no real server should: a negative remaining count, a reset in the past, and on a
refusal a ``retry-after`` of two days.

In a test: ``server = await nursery.start(RateLimitedServer(rps=10).serve)``. As a process (the
bench): ``python -m tests.ratelimit_server --rps 10`` (from the repository) prints its port and serves until its stdin
closes; ``GET /__stats`` reports the counts, ``POST /__reset`` clears them and refills the
buckets.
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys
from typing import Any

import attrs
import h11
import orjson
import trio

from tests.llm_server import serve_requests

_CHILD_TEXTS = ("Child ", "work ", "done.")


@attrs.define
class Bucket:
    """A token bucket: ``rate`` a second, at most ``burst``; full when made."""

    rate: float
    burst: float
    level: float = attrs.field(init=False)
    at: float = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.level = self.burst
        self.at = trio.current_time()

    def refill(self) -> None:
        now = trio.current_time()
        self.level = min(self.burst, self.level + (now - self.at) * self.rate)
        self.at = now

    def take(self, amount: float) -> bool:
        """Take *amount* if the bucket holds it (a cost above ``burst`` needs a full bucket)."""
        self.refill()
        if self.level < min(amount, self.burst):
            return False
        self.level -= amount
        return True

    def charge(self, amount: float) -> None:
        """Take *amount* whatever is left (the bucket may go below zero)."""
        self.refill()
        self.level -= amount

    def wait_s(self, amount: float = 1.0) -> float:
        """How long until the bucket holds *amount*."""
        self.refill()
        return max(0.0, (min(amount, self.burst) - self.level) / self.rate)

    def full_in_s(self) -> float:
        self.refill()
        return max(0.0, (self.burst - self.level) / self.rate)


@attrs.define
class _Key:
    requests: Bucket
    tokens: Bucket | None


@attrs.define
class Stats:
    """What the server saw since it started (or was reset)."""

    requests: int = 0
    served: int = 0
    refused: int = 0
    overloaded: int = 0
    first_at: float | None = None
    last_at: float | None = None
    refused_at: list[float] = attrs.Factory(list)
    keys: set[str] = attrs.Factory(set)
    connections: int = 0

    def as_json(self) -> dict[str, Any]:
        start = self.first_at or 0.0
        return {
            "requests": self.requests,
            "served": self.served,
            "refused": self.refused,
            "overloaded": self.overloaded,
            "span_s": (self.last_at - start) if self.last_at is not None else 0.0,
            "refused_after_s": [round(t - start, 3) for t in self.refused_at],
            "keys": len(self.keys),
            "connections": self.connections,
        }


class RateLimitedServer:
    """See the module docstring.

    Args:
        rps: requests a second each key may make.
        burst: the most requests a key may make at once (default: one second's worth).
        tps: tokens a second each key may use (default: no limit on tokens).
        mode: ``openai`` or ``anthropic``.
        overloaded: Anthropic: the first this many requests are answered ``529``.
        nonsense: send nonsense rate-limit headers (see the module docstring).
        advertised_rps: the requests a second the headers state (default ``rps``): a server
            that says more than it serves.
        rate_headers: send the rate-limit headers (``False``: none, but a refusal's
            ``retry-after``, as some proxies do).
        max_in_flight: refuse a request that arrives while this many are being answered.
        answer_s: how long an answer takes (a fan-out root's: none).
        retry_after: a refusal's ``retry-after``, always this, and no ``retry-after-ms``
            (default: the time until the bucket holds a request).
    """

    def __init__(
        self,
        *,
        rps: float,
        burst: float | None = None,
        tps: float | None = None,
        mode: str = "openai",
        overloaded: int = 0,
        nonsense: bool = False,
        advertised_rps: float | None = None,
        rate_headers: bool = True,
        max_in_flight: int | None = None,
        answer_s: float = 0.0,
        retry_after: str | None = None,
    ) -> None:
        if mode not in ("openai", "anthropic"):
            raise ValueError(f"mode must be openai or anthropic, not {mode!r}")
        self.rps = rps
        self.burst = burst if burst is not None else max(1.0, rps)
        self.tps = tps
        self.mode = mode
        self.overloaded = overloaded
        self.nonsense = nonsense
        self.advertised_rps = advertised_rps or rps
        self.rate_headers = rate_headers
        self.max_in_flight = max_in_flight
        self.answer_s = answer_s
        self.retry_after = retry_after
        self.in_flight = 0
        self.port = 0
        self.stats = Stats()
        self._keys: dict[str, _Key] = {}

    @property
    def url(self) -> str:
        """The base URL a provider takes (``…/v1`` for OpenAI)."""
        root = f"http://127.0.0.1:{self.port}"
        return f"{root}/v1" if self.mode == "openai" else root

    def reset(self) -> None:
        """Clear the counts and refill every bucket."""
        self.stats = Stats()
        self._keys.clear()

    async def serve(
        self, *, task_status: trio.TaskStatus[RateLimitedServer] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on 127.0.0.1, a free port, until cancelled."""
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1", backlog=4096)
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(self)
            await trio.serve_listeners(self._connection, listeners, handler_nursery=nursery)

    # -- HTTP ------------------------------------------------------------------------------------

    async def _connection(self, stream: trio.SocketStream) -> None:
        self.stats.connections += 1
        await serve_requests(stream, self._serve_request)

    async def _serve_request(
        self, stream: trio.SocketStream, conn: h11.Connection, head: h11.Request, body: bytes
    ) -> bool:
        self.in_flight += 1
        try:
            return await self._reply(stream, conn, head, body)
        finally:
            self.in_flight -= 1

    async def _reply(
        self, stream: trio.SocketStream, conn: h11.Connection, head: h11.Request, body: bytes
    ) -> bool:
        status, headers, chunks = await self._answer(head, body)
        try:
            await stream.send_all(conn.send(h11.Response(status_code=status, headers=headers)))
            for chunk in chunks:
                await stream.send_all(conn.send(h11.Data(data=chunk)))
            await stream.send_all(conn.send(h11.EndOfMessage()))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        return True

    async def _answer(
        self, head: h11.Request, body: bytes
    ) -> tuple[int, list[tuple[str, str]], list[bytes]]:
        path = head.target.decode()
        if path.endswith("/__stats"):
            return _json(200, self.stats.as_json())
        if path.endswith("/__reset"):
            self.reset()
            return _json(200, {})
        headers = {k.decode().lower(): v.decode() for k, v in head.headers}
        key = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
        request = orjson.loads(body)
        now = trio.current_time()
        stats = self.stats
        stats.requests += 1
        stats.keys.add(key)
        stats.first_at = now if stats.first_at is None else stats.first_at
        stats.last_at = now
        if self.mode == "anthropic" and stats.overloaded < self.overloaded:
            stats.overloaded += 1
            error = {"type": "overloaded_error", "message": "Overloaded"}
            return _json(529, {"type": "error", "error": error})
        bucket = self._key(key)
        prompt_tokens = max(1, len(body) // 8)
        crowded = self.max_in_flight is not None and self.in_flight > self.max_in_flight
        ok = not crowded and bucket.requests.take(1)
        if ok and bucket.tokens is not None and not bucket.tokens.take(prompt_tokens):
            ok = False
            bucket.requests.level += 1  # not served: the request is not counted
        if not ok:
            stats.refused += 1
            stats.refused_at.append(now)
            return self._refusal(bucket, prompt_tokens)
        stats.served += 1
        if self.answer_s and b"FANOUT" not in body:
            await trio.sleep(self.answer_s)
        completion = 7
        if bucket.tokens is not None:
            bucket.tokens.charge(completion)
        limit_headers = self._limit_headers(bucket)
        if self.mode == "anthropic":
            chunks = _anthropic_answer(request, prompt_tokens, completion)
            return 200, [("content-type", "text/event-stream"), *limit_headers], chunks
        if not request.get("stream"):
            obj = _openai_object(request, prompt_tokens, completion)
            status, headers_out, chunks = _json(200, obj)
            return status, headers_out + limit_headers, chunks
        chunks = _openai_stream(request, prompt_tokens, completion)
        return 200, [("content-type", "text/event-stream"), *limit_headers], chunks

    def _key(self, key: str) -> _Key:
        found = self._keys.get(key)
        if found is None:
            tokens = Bucket(self.tps, max(1.0, self.tps)) if self.tps else None
            found = self._keys[key] = _Key(Bucket(self.rps, self.burst), tokens)
        return found

    def _refusal(
        self, bucket: _Key, prompt_tokens: int
    ) -> tuple[int, list[tuple[str, str]], list[bytes]]:
        wait = bucket.requests.wait_s()
        if bucket.tokens is not None:
            wait = max(wait, bucket.tokens.wait_s(prompt_tokens))
        if self.nonsense:
            wait = 2 * 86400.0
        headers = self._limit_headers(bucket)
        if self.retry_after is not None:
            headers.append(("retry-after", self.retry_after))
            error = {"message": "Too many requests", "type": "requests",
                     "code": "rate_limit_exceeded"}
            status, base, chunks = _json(429, {"error": error})
        elif self.mode == "anthropic":
            headers.append(("retry-after", str(math.ceil(wait))))
            error = {"type": "rate_limit_error", "message": "Number of requests has exceeded"
                     " your rate limit"}
            status, base, chunks = _json(429, {"type": "error", "error": error})
        else:
            headers += [("retry-after-ms", f"{wait * 1000:.0f}"),
                        ("retry-after", str(math.ceil(wait)))]
            error = {"message": "Rate limit reached for requests", "type": "requests",
                     "param": None, "code": "rate_limit_exceeded"}
            status, base, chunks = _json(429, {"error": error})
        return status, base + headers, chunks

    def _limit_headers(self, bucket: _Key) -> list[tuple[str, str]]:
        if not self.rate_headers:
            return []
        sets = [("requests", bucket.requests)]
        if bucket.tokens is not None:
            sets.append(("tokens", bucket.tokens))
        out = []
        for name, b in sets:
            remaining = -5 if self.nonsense else max(0, math.floor(b.level))
            reset_s = -30.0 if self.nonsense else b.full_in_s()
            limit = round((self.advertised_rps if name == "requests" else b.rate) * 60)
            if self.mode == "openai":
                out += [(f"x-ratelimit-limit-{name}", str(limit)),
                        (f"x-ratelimit-remaining-{name}", str(remaining)),
                        (f"x-ratelimit-reset-{name}", _duration(reset_s))]
            else:
                when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=reset_s)
                stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
                kinds = [name] if name == "requests" else ["input-tokens", "output-tokens"]
                for kind in kinds:
                    out += [(f"anthropic-ratelimit-{kind}-limit", str(limit)),
                            (f"anthropic-ratelimit-{kind}-remaining", str(remaining)),
                            (f"anthropic-ratelimit-{kind}-reset", stamp)]
        return out


def _duration(seconds: float) -> str:
    """A reset as OpenAI writes it: ``20ms``, ``1.5s``, ``1m30s``."""
    if seconds < 0:
        return f"{seconds:.3f}s"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.3f}s" if minutes else f"{rest:.3f}s"


def _json(status: int, obj: Any) -> tuple[int, list[tuple[str, str]], list[bytes]]:
    data = orjson.dumps(obj)
    return status, [("content-type", "application/json"), ("content-length", str(len(data)))], [
        data
    ]


# -- answers -------------------------------------------------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def _plan(request: dict[str, Any]) -> tuple[list[str], list[tuple[str, dict[str, Any]]]]:
    """The answer: texts and tool calls (name, input)."""
    messages = request.get("messages") or [{}]
    last = messages[-1]
    content = last.get("content")
    is_result = last.get("role") == "tool" or (
        isinstance(content, list)
        and any(isinstance(p, dict) and p.get("type") == "tool_result" for p in content)
    )
    if is_result:
        return ["All ", "children ", "answered."], []
    text = _text(content)
    if not text.startswith("FANOUT "):
        return list(_CHILD_TEXTS), []
    n = int(text.split()[1])
    tool = next(t for t in request.get("tools", ()) if "agent" in _tool_name(t))
    schema = tool.get("input_schema") or tool.get("function", {}).get("parameters", {})
    props = schema.get("properties", {})
    required = schema.get("required") or list(props)
    calls = []
    for i in range(n):
        args = {k: f"child {i}" for k in required if props.get(k, {}).get("type") == "string"}
        calls.append((_tool_name(tool), args))
    return [], calls


def _tool_name(tool: dict[str, Any]) -> str:
    return str(tool.get("name") or tool.get("function", {}).get("name", ""))


def _sse(obj: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + orjson.dumps(obj) + b"\n\n"


def _openai_stream(request: dict[str, Any], prompt: int, completion: int) -> list[bytes]:
    texts, calls = _plan(request)
    base = {"id": "chatcmpl-rl", "object": "chat.completion.chunk", "created": 0,
            "model": request.get("model")}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": t}) for t in texts]
    for i, (name, args) in enumerate(calls):
        out.append(chunk({"tool_calls": [{"index": i, "id": f"call_{i}", "type": "function",
                                          "function": {"name": name,
                                                       "arguments": orjson.dumps(args).decode()}}]}))
    out.append(chunk({}, "tool_calls" if calls else "stop"))
    usage = {"prompt_tokens": prompt, "completion_tokens": completion,
             "total_tokens": prompt + completion}
    out.append(_sse({**base, "choices": [], "usage": usage}))
    out.append(b"data: [DONE]\n\n")
    return [b"".join(out)]


def _openai_object(request: dict[str, Any], prompt: int, completion: int) -> dict[str, Any]:
    texts, calls = _plan(request)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": name, "arguments": orjson.dumps(args).decode()}}
            for i, (name, args) in enumerate(calls)
        ]
    return {"id": "chatcmpl-rl", "object": "chat.completion", "created": 0,
            "model": request.get("model"),
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion},
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if calls else "stop"}]}


def _anthropic_answer(request: dict[str, Any], prompt: int, completion: int) -> list[bytes]:
    texts, calls = _plan(request)
    out = [_sse({"type": "message_start", "message": {
        "id": "msg_rl", "type": "message", "role": "assistant", "content": [],
        "model": request.get("model"), "usage": {"input_tokens": prompt, "output_tokens": 1}}},
        "message_start")]
    index = 0
    if texts:
        out.append(_sse({"type": "content_block_start", "index": 0,
                         "content_block": {"type": "text", "text": ""}}, "content_block_start"))
        out += [_sse({"type": "content_block_delta", "index": 0,
                      "delta": {"type": "text_delta", "text": t}}, "content_block_delta")
                for t in texts]
        out.append(_sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
        index = 1
    for i, (name, args) in enumerate(calls, start=index):
        out.append(_sse({"type": "content_block_start", "index": i, "content_block": {
            "type": "tool_use", "id": f"toolu_{i}", "name": name, "input": {}}},
            "content_block_start"))
        out.append(_sse({"type": "content_block_delta", "index": i, "delta": {
            "type": "input_json_delta", "partial_json": orjson.dumps(args).decode()}},
            "content_block_delta"))
        out.append(_sse({"type": "content_block_stop", "index": i}, "content_block_stop"))
    out.append(_sse({"type": "message_delta", "delta": {
        "stop_reason": "tool_use" if calls else "end_turn"},
        "usage": {"output_tokens": completion}}, "message_delta"))
    out.append(_sse({"type": "message_stop"}, "message_stop"))
    return [b"".join(out)]


# -- as a process --------------------------------------------------------------------------------


async def _main(args: argparse.Namespace) -> None:
    server = RateLimitedServer(
        rps=args.rps, burst=args.burst, tps=args.tps, mode=args.mode,
        rate_headers=not args.no_rate_headers, max_in_flight=args.max_in_flight,
        answer_s=args.answer_s, retry_after=args.retry_after,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        print(server.port, flush=True)
        stdin = trio.lowlevel.FdStream(sys.stdin.fileno())
        while await stdin.receive_some(4096):  # the parent closes our stdin to stop us
            pass
        nursery.cancel_scope.cancel(reason="stdin closed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rps", type=float, default=10.0)
    parser.add_argument("--burst", type=float, default=None)
    parser.add_argument("--tps", type=float, default=None)
    parser.add_argument("--mode", choices=("openai", "anthropic"), default="openai")
    parser.add_argument("--no-rate-headers", action="store_true")
    parser.add_argument("--max-in-flight", type=int, default=None)
    parser.add_argument("--answer-s", type=float, default=0.0)
    parser.add_argument("--retry-after", default=None)
    trio.run(_main, parser.parse_args())
