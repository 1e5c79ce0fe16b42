"""The ``anthropic`` provider: the Messages API, streamed.

The stream is a sequence of typed events: ``message_start`` (input token counts),
``content_block_start`` / ``content_block_delta`` / ``content_block_stop`` for each block by
``index``, ``message_delta`` (stop reason, output token count), ``message_stop``, with ``ping``
anywhere and possibly an ``error`` event. Deltas map to stream items as they arrive:

* ``text_delta`` -> :class:`~runtime.core._provider.TextChunk`;
* ``thinking_delta`` -> :class:`~runtime.core._provider.ThinkingChunk`; ``signature_delta`` is kept
  until the block stops, then sent as one ``ThinkingChunk(text="", signature=...)``: **a chunk
  with a signature closes its thinking block**, so the loop can store each block with its
  signature (the API wants them back unchanged in the next request);
* ``input_json_delta`` fragments are joined and parsed when the block stops, and the call is
  yielded then as a :class:`~runtime.core._provider.ToolCall`.

Unknown events and block types are skipped, as the API asks clients to. ``redacted_thinking``
blocks cannot be stored in the neutral history and are dropped (logged).

History goes out with tool results as ``tool_result`` blocks (``is_error`` when set) placed
first in their user message, thinking blocks with their signature (unsigned ones, say from another
provider, are dropped: the API would refuse them), empty messages and empty text blocks left out,
and consecutive messages of one role merged, as the API wants strict alternation.
"""

# ASYNC119 (a yield inside ``async with`` in an async generator): streaming an httpx response
# needs exactly that; the caller (the agent loop) consumes the generator under
# ``contextlib.aclosing``, which runs the cleanup at once.
# ruff: noqa: ASYNC119

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Any, Final

import attrs
import httpx
import orjson

from runtime._logs import get_logger
from runtime.core import (
    NO_SECRETS,
    Block,
    ContextOverflowError,
    Message,
    ModelRequest,
    ProviderError,
    Secrets,
    StopReason,
    StreamItem,
    TextBlock,
    TextChunk,
    ThinkingChunk,
    ToolCall,
    ToolResultBlock,
    ToolUseBlock,
    TurnEnd,
    parse_overflow,
    trace_headers,
)

from ._http import (
    CUT_TOOL_CALL,
    Admission,
    Retrier,
    RetryPolicy,
    TransientError,
    message_in,
    open_event_stream,
    public_url,
    shorten,
)
from ._ratelimit import EndpointLimiter

DEFAULT_MODEL: Final = "claude-sonnet-4-5"
DEFAULT_BASE_URL: Final = "https://api.anthropic.com"
API_VERSION: Final = "2023-06-01"

_STOP: Final[dict[str, StopReason]] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "end_turn",
    "model_context_window_exceeded": "max_tokens",
    "refusal": "refusal",
}
# Error types worth another try, from the API's error documentation.
_TRANSIENT_ERRORS: Final = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error", "server_error"}
)
_log: Any = get_logger("trio_agents.providers")


@attrs.define(kw_only=True, eq=False)
class AnthropicProvider:
    """A model behind the Anthropic Messages API.

    Build it with :func:`~runtime.providers.open_provider`, which owns the HTTP client, or
    directly with a client you own (tests do).

    Attributes:
        client: the shared connection pool; its timeouts apply to each connect and read.
        model: used when a request names none.
        base_url: the API root, without ``/v1``; ``/v1/messages`` is appended.
        api_key: sent as ``x-api-key``; may be ``None`` for a local server. Never shown.
        secrets: the run's secrets, masked (with the key) in every error this provider makes.
        retry: how transient failures are retried.
        call_deadline_s: bound on a whole :meth:`stream` call, retries included; ``None``
            for none.
        calls: the endpoint's bound on calls in flight, shared by every provider of the
            endpoint (each try waits for a slot); ``None``: unbounded.
        thinking_budget: when set, extended thinking is enabled with this many tokens, on top
            of the request's ``max_tokens``.
    """

    client: httpx.AsyncClient = attrs.field(repr=False)
    model: str = DEFAULT_MODEL
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = attrs.field(default=None, repr=False)
    secrets: Secrets = attrs.field(default=NO_SECRETS, repr=False)
    retry: RetryPolicy = attrs.Factory(RetryPolicy)
    call_deadline_s: float | None = 600.0
    limiter: EndpointLimiter | None = attrs.field(default=None, repr=False)
    thinking_budget: int | None = None
    name: str = attrs.field(default="anthropic", init=False)

    def describe(self) -> dict[str, Any]:
        """Public settings for ``run_started.config``; never the key."""
        return {
            "provider": self.name,
            "model": self.model,
            "base_url": public_url(self.base_url),
            "max_retries": self.retry.max_retries,
            "call_deadline_s": self.call_deadline_s,
            "thinking_budget": self.thinking_budget,
        }

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        """Stream one assistant turn (see :class:`~runtime.core._provider.Provider`).

        An async generator; consume it under ``contextlib.aclosing``. Raises
        :class:`~runtime.ProviderError` once retries are spent, or at once for a failure after
        an item was yielded. Cancellation closes the HTTP connection at once; nothing is retried.
        """
        model = request.model or self.model
        log = _log.bind(provider=self.name, model=model, agent_id=request.agent_id)
        headers = {"content-type": "application/json", "anthropic-version": API_VERSION}
        if self.api_key:
            headers["x-api-key"] = self.api_key
        headers.update(trace_headers(request.agent_id))  # traceparent, with live spans
        body = orjson.dumps(self.payload(request))
        url = self.base_url.rstrip("/") + "/v1/messages"
        secrets = self._secrets
        retrier = Retrier(self.name, self.retry, self.call_deadline_s, log, secrets)
        admission = Admission.of(self.limiter, request)  # its turns at the rate limit
        while True:
            # Set before every yield: a failure after output is final, before it is retried.
            yielded = False
            try:
                wait = admission.ask()
                if wait is not None:
                    yield wait  # the loop reports it: rate_limited
                await admission.admitted(retrier)
                blocks: dict[int, _Block] = {}
                # A tool call cut off by max_tokens is only known to be so at message_delta.
                truncated: list[_Block] = []
                stop_reason: str | None = None
                stopped = False
                input_tokens = output_tokens = 0
                cached = (0, 0)
                async with open_event_stream(
                    self.client,
                    url,
                    headers=headers,
                    body=body,
                    provider=self.name,
                    deadline=retrier.deadline,
                    secrets=secrets,
                    admission=admission,
                ) as events:
                    async for sse in events:
                        data = sse.data
                        if stopped or not data:
                            # Read on to the end, so the connection goes back to the pool.
                            continue
                        event, kind = _decoded(sse.event, data, secrets)
                        if kind == "content_block_delta":
                            delta = event.get("delta") or {}
                            delta_kind = delta.get("type")
                            if delta_kind == "text_delta":
                                text = delta.get("text")
                                if text:
                                    yielded = True
                                    yield TextChunk(text)
                            elif delta_kind == "thinking_delta":
                                text = delta.get("thinking")
                                if text:
                                    yielded = True
                                    yield ThinkingChunk(text)
                            elif delta_kind == "input_json_delta":
                                _block(blocks, event).json_parts.append(
                                    delta.get("partial_json") or ""
                                )
                            elif delta_kind == "signature_delta":
                                _block(blocks, event).signature += delta.get("signature") or ""
                        elif kind == "content_block_start":
                            content = event.get("content_block") or {}
                            block = blocks[event.get("index", len(blocks))] = _Block(
                                kind=content.get("type", ""),
                                id=content.get("id", ""),
                                name=content.get("name", ""),
                                signature=content.get("signature") or "",
                            )
                            if block.kind == "text" and content.get("text"):
                                yielded = True
                                yield TextChunk(content["text"])
                            elif block.kind == "thinking" and content.get("thinking"):
                                yielded = True
                                yield ThinkingChunk(content["thinking"])
                            elif block.kind == "redacted_thinking":
                                log.warning("provider.redacted_thinking_dropped")
                        elif kind == "content_block_stop":
                            done = blocks.pop(event.get("index", -1), None)
                            if done is None:
                                continue
                            if done.kind == "tool_use":
                                arguments = _tool_input(done)
                                if arguments is None:
                                    truncated.append(done)
                                    continue
                                if not done.id or not done.name:
                                    raise ProviderError(
                                        "anthropic: a tool_use block without an id or a name"
                                    )
                                yielded = True
                                yield ToolCall(done.id, done.name, arguments)
                            elif done.kind == "thinking" and done.signature:
                                yielded = True
                                yield ThinkingChunk("", signature=done.signature)
                        elif kind == "message_start":
                            usage = (event.get("message") or {}).get("usage") or {}
                            input_tokens = _input_tokens(usage)
                            cached = _cached_tokens(usage)
                            output_tokens = usage.get("output_tokens") or 0
                        elif kind == "message_delta":
                            delta = event.get("delta") or {}
                            stop_reason = delta.get("stop_reason") or stop_reason
                            usage = event.get("usage") or {}
                            # Cumulative counts; newer API versions repeat the input count too.
                            if usage.get("input_tokens") is not None:
                                input_tokens = _input_tokens(usage)
                                cached = _cached_tokens(usage)
                            output_tokens = usage.get("output_tokens") or output_tokens
                        elif kind == "message_stop":
                            stopped = True
                        elif kind == "error":
                            error = event.get("error")
                            # The API nests the error; llama.cpp sends it bare.
                            raise _stream_error(error if error is not None else event, secrets)
                        # ping, and event types newer than this code: nothing to do.
                if not stopped:
                    raise TransientError("anthropic: the stream ended before message_stop")
                end = (input_tokens, output_tokens, *cached)
                admission.settle(input_tokens, output_tokens)
                for item in _turn_end(truncated, stop_reason, end, log):
                    yielded = True
                    yield item
                return
            except ProviderError as exc:
                if admission.refused(exc, retrier, yielded=yielded):
                    continue  # the whole endpoint waits: no try is spent, the call keeps its place
                notice = retrier.retry_notice(exc, yielded=yielded)
            finally:
                admission.done()
            yield notice  # before anything else of the turn: the loop reports it
            await retrier.wait(notice)

    @property
    def _secrets(self) -> Secrets:
        """The run's secrets and the key: masked in every error line this provider makes."""
        return self.secrets | (self.api_key,) if self.api_key else self.secrets

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request``."""
        body: dict[str, Any] = {
            "model": request.model or self.model,
            "max_tokens": request.max_tokens,
            "messages": wire_messages(request.messages),
            "stream": True,
        }
        if request.system:
            body["system"] = request.system
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in request.tools
            ]
        if self.thinking_budget:
            # max_tokens counts thinking too and must exceed the budget.
            body["max_tokens"] = request.max_tokens + self.thinking_budget
            body["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        return body


@attrs.define(kw_only=True)
class _Block:
    kind: str
    id: str = ""
    name: str = ""
    signature: str = ""
    json_parts: list[str] = attrs.Factory(list)


def _block(blocks: dict[int, _Block], event: dict[str, Any]) -> _Block:
    index = event.get("index")
    block = blocks.get(index) if isinstance(index, int) else None
    if block is None:
        raise ProviderError(f"anthropic: a delta for block {index!r}, which was never started")
    return block


def _decoded(name: str, data: str, secrets: Secrets) -> tuple[dict[str, Any], str]:
    """One SSE event's JSON object and its kind: the SSE event name says what the event is
    (llama.cpp's error event carries no ``"type": "error"`` in its data).

    Raises:
        ProviderError: the data is not a JSON object (secrets masked).
    """
    try:
        event = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ProviderError(
            secrets.text(f"anthropic: invalid JSON in the {name!r} event ({exc}): {data[:80]!r}")
        ) from exc
    if not isinstance(event, dict):
        raise ProviderError(secrets.text(f"anthropic: unexpected event: {data[:80]!r}"))
    return event, "error" if name == "error" else event.get("type") or name


def _turn_end(
    truncated: list[_Block],
    stop_reason: str | None,
    usage: tuple[int, int, int, int],
    log: Any,
) -> list[StreamItem]:
    """What ends a turn whose stream is complete: each tool call cut off by ``max_tokens`` (as
    an error call), then the :class:`TurnEnd`.

    Raises:
        ProviderError: a tool call's input is not valid JSON and ``max_tokens`` did not cut it.
    """
    items: list[StreamItem] = []
    if truncated:
        if stop_reason != "max_tokens":
            raise ProviderError(
                f"anthropic: the model's input for tool {truncated[0].name!r} is"
                " not a valid JSON object"
            )
        log.warning("provider.truncated_tool_call", tools=[b.name for b in truncated])
        # Answered with an error result the model reads: it can retry smaller.
        items.extend(ToolCall(cut.id, cut.name, {}, CUT_TOOL_CALL) for cut in truncated)
    stop = _STOP.get(stop_reason or "", "end_turn")
    if stop_reason not in _STOP:
        log.warning("provider.stop_reason", stop_reason=stop_reason, stop=stop)
    input_tokens, output_tokens, cache_read, cache_write = usage
    items.append(TurnEnd(stop_reason=stop, input_tokens=input_tokens, output_tokens=output_tokens,
                         cache_read_tokens=cache_read, cache_write_tokens=cache_write))
    return items


def _tool_input(block: _Block) -> dict[str, Any] | None:
    """The parsed input of a tool_use block; ``None`` if it is not a JSON object (cut off)."""
    text = "".join(block.json_parts)
    if not text.strip():
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _input_tokens(usage: dict[str, Any]) -> int:
    # Cached prompt tokens are still input the model read; budgets count them.
    return sum(
        usage.get(key) or 0
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )


def _cached_tokens(usage: dict[str, Any]) -> tuple[int, int]:
    """(read from, written to) the prompt cache: priced apart (docs/costs.md)."""
    read = usage.get("cache_read_input_tokens")
    write = usage.get("cache_creation_input_tokens")
    return (
        read if isinstance(read, int) and read > 0 else 0,
        write if isinstance(write, int) and write > 0 else 0,
    )


def _stream_error(error: Any, secrets: Secrets) -> ProviderError:
    """An ``error`` event as an exception: the API's ``{"type", "message"}`` or llama.cpp's
    ``{"code", "message", "type"}``; transient for the API's retryable types and 429/5xx."""
    message = secrets.text(
        f"anthropic: error in the stream: {shorten(message_in({'error': error}))}"
    )
    kind = error.get("type") if isinstance(error, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    status = code if isinstance(code, int) and not isinstance(code, bool) else None
    if kind in _TRANSIENT_ERRORS or (status is not None and (status == 429 or status >= 500)):
        return TransientError(message, status=status)
    overflow = parse_overflow(message)
    if overflow is not None:  # the agent compacts its history and tries again
        return ContextOverflowError(message, tokens=overflow.tokens, limit=overflow.limit)
    return ProviderError(message)


def wire_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The neutral history as Messages API messages (see the module docstring)."""
    wire: list[dict[str, Any]] = []
    for message in messages:
        content = [b for b in map(_wire_block, message.content) if b is not None]
        if not content:
            continue
        if wire and wire[-1]["role"] == message.role:
            wire[-1]["content"].extend(content)
        else:
            wire.append({"role": message.role, "content": content})
    for entry in wire:
        if entry["role"] == "user":
            # The API wants a user message's tool results before anything else in it.
            entry["content"].sort(key=lambda b: b["type"] != "tool_result")
    return wire


def _wire_block(block: Block) -> dict[str, Any] | None:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text} if block.text else None
    if isinstance(block, ToolResultBlock):
        out: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": block.tool_use_id,
            "content": block.content,
        }
        if block.is_error:
            out["is_error"] = True
        return out
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if not block.signature:
        return None
    return {"type": "thinking", "thinking": block.text, "signature": block.signature}
