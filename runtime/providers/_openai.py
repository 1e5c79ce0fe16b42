"""The ``openai`` provider: Chat Completions, streamed, against OpenAI or any compatible server.

Compatible servers (vLLM, llama.cpp's server, Ollama, OpenRouter, LM Studio, DeepSeek) differ in
small ways; this module takes the lenient reading of each:

* The request asks for ``stream: true`` with ``stream_options.include_usage``, so the last
  chunk carries the token counts; a server that sends none reports 0.
* Text arrives as ``delta.content``; reasoning as ``delta.reasoning_content`` (DeepSeek, vLLM)
  or ``delta.reasoning`` (OpenRouter, newer vLLM, Ollama) and becomes
  :class:`~runtime.core._provider.ThinkingChunk`.
* Tool calls arrive as fragments keyed by ``index``: the id and name once, the JSON arguments
  split anywhere, even inside a character (the bytes are decoded incrementally by httpx, the
  fragments are joined as text). Each call is yielded whole, its arguments parsed, when the
  choice finishes. A server that omits ``index`` or ``id`` gets the position and a fresh id.
* ``finish_reason`` maps ``stop`` to ``end_turn``, ``tool_calls``/``function_call`` to
  ``tool_use`` and ``length`` to ``max_tokens``; a turn that made tool calls is ``tool_use``
  whatever the server says (some send ``stop``).
* The turn ends at ``data: [DONE]``, or at the end of the body for servers that skip it; a
  stream that ends before any ``finish_reason`` is a failure.

History goes out as system, user, assistant (``tool_calls`` with JSON-encoded arguments) and
``tool`` messages; a user message's tool results come first, as ``tool`` messages in call order,
then its text. Chat Completions has no error flag on a tool result, so an error result's content
is prefixed with ``Error:``. Thinking blocks are not sent back: the API has no field for them and
DeepSeek rejects them.
"""

# ASYNC119 (a yield inside ``async with`` in an async generator): streaming an httpx response
# needs exactly that; the caller (the agent loop) consumes the generator under
# ``contextlib.aclosing``, which runs the cleanup at once.
# ruff: noqa: ASYNC119

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator, Sequence
from typing import Any, Final

import attrs
import httpx
import orjson

from runtime._logs import get_logger
from runtime.core import (
    NO_SECRETS,
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

DEFAULT_MODEL: Final = "gpt-4.1"
DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"

_FINISH: Final[dict[str, StopReason]] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "end_turn",
}
_log: Any = get_logger("trio_agents.providers")
# The stream loop runs once per token; a module-level name is a cheaper lookup there.
_loads = orjson.loads


def _default_max_tokens_param(provider: OpenAIProvider) -> str:
    # OpenAI's own endpoint deprecated max_tokens (its reasoning models refuse it); compatible
    # servers mostly know only max_tokens.
    try:
        host = httpx.URL(provider.base_url).host
    except httpx.InvalidURL:
        return "max_tokens"
    return "max_completion_tokens" if host == "api.openai.com" else "max_tokens"


@attrs.define(kw_only=True, eq=False)
class OpenAIProvider:
    """A model behind the Chat Completions API.

    Build it with :func:`~runtime.providers.open_provider`, which owns the HTTP client, or
    directly with a client you own (tests do).

    Attributes:
        client: the shared connection pool; its timeouts apply to each connect and read.
        model: used when a request names none.
        base_url: up to and including ``/v1``; ``/chat/completions`` is appended.
        api_key: sent as a bearer token; may be ``None`` for a local server. Never shown.
        secrets: the run's secrets, masked (with the key) in every error this provider makes.
        retry: how transient failures are retried.
        call_deadline_s: bound on a whole :meth:`stream` call, retries included; ``None``
            for none.
        calls: the endpoint's bound on calls in flight, shared by every provider of the
            endpoint (each try waits for a slot); ``None``: unbounded.
        max_tokens_param: the request field for ``max_tokens`` (``max_completion_tokens`` on
            api.openai.com, ``max_tokens`` elsewhere).
        structured_output: for an agent with an output type, also ask the server for it
            natively (``response_format`` with its JSON Schema, not strict). Off by default:
            not every OpenAI-compatible server takes the field, and the final answer is checked
            either way (docs/python-api.md, "Typed outputs").
    """

    client: httpx.AsyncClient = attrs.field(repr=False)
    model: str = DEFAULT_MODEL
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = attrs.field(default=None, repr=False)
    secrets: Secrets = attrs.field(default=NO_SECRETS, repr=False)
    retry: RetryPolicy = attrs.Factory(RetryPolicy)
    call_deadline_s: float | None = 600.0
    limiter: EndpointLimiter | None = attrs.field(default=None, repr=False)
    max_tokens_param: str = attrs.field(
        default=attrs.Factory(_default_max_tokens_param, takes_self=True)
    )
    structured_output: bool = False
    name: str = attrs.field(default="openai", init=False)

    def describe(self) -> dict[str, Any]:
        """Public settings for ``run_started.config``; never the key."""
        return {
            "provider": self.name,
            "model": self.model,
            "base_url": public_url(self.base_url),
            "max_retries": self.retry.max_retries,
            "call_deadline_s": self.call_deadline_s,
        }

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        """Stream one assistant turn (see :class:`~runtime.core._provider.Provider`).

        An async generator; consume it under ``contextlib.aclosing``. Raises
        :class:`~runtime.ProviderError` once retries are spent, or at once for a failure after
        an item was yielded. Cancellation closes the HTTP connection at once; nothing is retried.
        """
        model = request.model or self.model
        log = _log.bind(provider=self.name, model=model, agent_id=request.agent_id)
        headers = {"content-type": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        headers.update(trace_headers(request.agent_id))  # traceparent, with live spans
        body = orjson.dumps(self.payload(request))
        url = self.base_url.rstrip("/") + "/chat/completions"
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
                calls: dict[int, _PartialCall] = {}
                refused = False
                finish: str | None = None
                done = False
                input_tokens = output_tokens = cache_read = 0
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
                        if done or not data:
                            # Read on to the end, so the connection goes back to the pool.
                            continue
                        if data == "[DONE]":
                            done = True
                            continue
                        try:
                            chunk = _loads(data)
                            choices = chunk.get("choices")
                            reason = None
                            if choices:
                                # n is never asked for, so there is one choice.
                                choice = choices[0]
                                delta = choice.get("delta")
                                if delta:
                                    # Plain text deltas are by far the most common: test first.
                                    if len(delta) > 1 or "content" not in delta:
                                        refusal = delta.get("refusal")
                                        if refusal and isinstance(refusal, str):
                                            # The model declined: the user reads why.
                                            refused = yielded = True
                                            yield TextChunk(refusal)
                                        reasoning = delta.get("reasoning_content") or delta.get(
                                            "reasoning"
                                        )
                                        if reasoning and isinstance(reasoning, str):
                                            yielded = True
                                            yield ThinkingChunk(reasoning)
                                        fragments = delta.get("tool_calls")
                                        if fragments:
                                            _add_fragments(calls, fragments)
                                    content = delta.get("content")
                                    if content and isinstance(content, str):
                                        yielded = True
                                        yield TextChunk(content)
                                reason = choice.get("finish_reason")
                                if reason is None:
                                    # A delta and nothing else: the one case per token.
                                    continue
                            # The rarer chunks: the finish (which may carry an error, as on
                            # OpenRouter), usage, errors (vLLM, OpenRouter report them so).
                            error = chunk.get("error")
                            if error:
                                raise _stream_error(error, secrets)
                            usage = chunk.get("usage")
                            if usage:
                                input_tokens = usage.get("prompt_tokens") or input_tokens
                                cache_read = _cached_tokens(usage) or cache_read
                                output_tokens = usage.get("completion_tokens") or output_tokens
                            if reason and finish is None:
                                finish = reason
                                for call in _complete_calls(calls, reason, log):
                                    yielded = True
                                    yield call
                        except orjson.JSONDecodeError as exc:
                            raise ProviderError(
                                secrets.text(
                                    f"openai: invalid JSON in the stream ({exc}): {data[:80]!r}"
                                )
                            ) from exc
                        except (AttributeError, TypeError, IndexError, KeyError) as exc:
                            # A chunk (or part of one) that is not the object it should be.
                            raise ProviderError(
                                secrets.text(f"openai: malformed chunk: {data[:80]!r}")
                            ) from exc
                if finish is None:
                    raise TransientError("openai: the stream ended before the model finished")
                if calls and finish != "length":
                    stop: StopReason = "tool_use"
                elif refused:
                    stop = "refusal"
                else:
                    stop = _FINISH.get(finish, "end_turn")
                    if finish not in _FINISH or finish == "content_filter":
                        log.warning("provider.finish_reason", finish_reason=finish, stop=stop)
                admission.settle(input_tokens, output_tokens)
                yielded = True
                yield TurnEnd(
                    stop_reason=stop, input_tokens=input_tokens, output_tokens=output_tokens,
                    cache_read_tokens=min(cache_read, input_tokens),
                )
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
            "messages": wire_messages(request.system, request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
            self.max_tokens_param: request.max_tokens,
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.input_schema,
                    },
                }
                for tool in request.tools
            ]
        if self.structured_output and request.output_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": request.output_schema, "strict": False},
            }
        return body


@attrs.define
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = attrs.Factory(list)


def _add_fragments(calls: dict[int, _PartialCall], fragments: Any) -> None:
    if not isinstance(fragments, list):
        raise ProviderError(f"openai: tool_calls is not a list: {shorten(repr(fragments))}")
    for position, fragment in enumerate(fragments):
        if not isinstance(fragment, dict):
            raise ProviderError(f"openai: a tool call fragment is not an object: {fragment!r:.80}")
        index = fragment.get("index", position)
        call = calls.get(index)
        if call is None:
            call = calls[index] = _PartialCall()
        if not call.id and fragment.get("id"):
            call.id = fragment["id"]
        function = fragment.get("function")
        if not function:
            continue
        # First name wins: OpenAI sends it once, a few servers repeat it in every fragment.
        if not call.name and function.get("name"):
            call.name = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            if arguments:
                call.arguments.append(arguments)
        elif isinstance(arguments, dict):
            # Some servers send the arguments already decoded, in one piece.
            call.arguments.append(orjson.dumps(arguments).decode())


def _complete_calls(
    calls: dict[int, _PartialCall], finish: str, log: Any
) -> list[ToolCall]:
    complete = []
    for index in sorted(calls):
        call = calls[index]
        text = "".join(call.arguments)
        error: str | None = None
        try:
            arguments = orjson.loads(text) if text.strip() else {}
        except orjson.JSONDecodeError as exc:
            arguments = {}
            if finish == "length":
                # Cut off by max_tokens mid-call: answered with an error result the model
                # reads, so it can make the call again, smaller.
                log.warning("provider.truncated_tool_call", tool=call.name)
                error = CUT_TOOL_CALL
            else:
                # The model's mistake, not the server's: it reads an error result and can retry.
                error = f"the arguments are not valid JSON ({exc})"
        if not isinstance(arguments, dict):
            error, arguments = "the arguments are not a JSON object", {}
        if not call.name:
            raise ProviderError("openai: the model made a tool call without a name")
        complete.append(
            ToolCall(call.id or f"call_{uuid.uuid4().hex}", call.name, arguments, error)
        )
    return complete


def _cached_tokens(usage: dict[str, Any]) -> int:
    """Of the prompt, the tokens read from OpenAI's prompt cache (priced apart, docs/costs.md;
    ``prompt_tokens_details.cached_tokens``)."""
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return cached if isinstance(cached, int) and cached > 0 else 0


def _stream_error(error: Any, secrets: Secrets) -> ProviderError:
    """An ``error`` object sent inside the stream (vLLM, OpenRouter do) as an exception."""
    message = secrets.text(
        f"openai: error in the stream: {shorten(message_in({'error': error}))}"
    )
    code = error.get("code") if isinstance(error, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    status = code if isinstance(code, int) else None
    if (status is not None and (status == 429 or status >= 500)) or kind in (
        "server_error",
        "overloaded_error",
    ):
        return TransientError(message, status=status)
    overflow = parse_overflow(message)
    if overflow is not None:  # the agent compacts its history and tries again
        return ContextOverflowError(message, tokens=overflow.tokens, limit=overflow.limit)
    return ProviderError(message)


def wire_messages(system: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The neutral history as Chat Completions messages (see the module docstring)."""
    wire: list[dict[str, Any]] = []
    if system:
        wire.append({"role": "system", "content": system})
    for message in messages:
        texts = [b.text for b in message.content if isinstance(b, TextBlock)]
        if message.role == "assistant":
            calls = [
                {
                    "id": b.id,
                    "type": "function",
                    "function": {"name": b.name, "arguments": orjson.dumps(b.input).decode()},
                }
                for b in message.content
                if isinstance(b, ToolUseBlock)
            ]
            if not texts and not calls:
                continue
            entry: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) or None}
            if calls:
                entry["tool_calls"] = calls
            wire.append(entry)
            continue
        # Tool messages must follow the assistant message that made the calls directly, so a
        # user message's results go first, whatever its block order.
        wire.extend(
            {"role": "tool", "tool_call_id": b.tool_use_id, "content": _result_text(b)}
            for b in message.content
            if isinstance(b, ToolResultBlock)
        )
        if texts:
            wire.append({"role": "user", "content": "\n\n".join(texts)})
    return wire


def _result_text(block: ToolResultBlock) -> str:
    if block.is_error and not block.content.lower().startswith("error"):
        return f"Error: {block.content}"
    return block.content
