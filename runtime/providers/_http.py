"""HTTP plumbing shared by the model providers: one try, retries, error messages, key redaction.

A provider call is a loop of *tries*. :func:`open_event_stream` makes one try: it POSTs the
request, turns an error status into an exception carrying the server's own message, and hands
back the server-sent events (parsed by ``httpx-sse``). :class:`Retrier` keeps count: it
retries a :class:`TransientError` (429, 5xx, connection failures, a stream cut short) with
exponential backoff and jitter, honouring ``Retry-After``, as long as nothing has reached the
caller yet; once an item has been yielded a failure is final, because the caller may already have
shown it. With the endpoint's limiter (docs/rate-limits.md) a refusal (429, 529) is not a try:
the limiter pauses every call of the endpoint, and :meth:`Retrier.refused` only checks the
deadline. Every retry is yielded as a ``RetryNotice`` (the loop reports it as a
``provider_retry`` event) and logged; no log line or error message holds the API key
(:class:`~runtime.core._secrets.Secrets`: the one policy and mask).
"""

from __future__ import annotations

import codecs
import contextlib
import email.utils
import functools
import math
import random
import time
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC
from typing import Any, Final, cast

import attrs
import httpcore
import httpx
import httpx_sse
import orjson
import trio

from runtime._logs import get_logger
from runtime.core import (
    NO_SECRETS,
    ContextOverflowError,
    ModelRequest,
    ProviderError,
    RateLimitNotice,
    RetryNotice,
    Secrets,
    parse_overflow,
)

from ._pool import DEADLINE, DeadlinePassed, Reply, post, reads_by_deadline
from ._ratelimit import EndpointLimiter, Ticket
from ._scripted import estimate_input_tokens

_MESSAGE_LIMIT: Final = 500
REFUSALS: Final = (429, 529)
"""The statuses by which a server refuses a call for now: too many requests, overloaded."""

_log: Any = get_logger("trio_agents.providers")
_END: Final[Any] = object()


class TransientError(ProviderError):
    """A failure worth another try (rate limit, overload, lost connection), if nothing was yielded.

    Attributes:
        retry_after_s: the wait the server asked for, if it said.
        status: the HTTP status, if the failure was one.
    """

    def __init__(
        self, message: str, *, retry_after_s: float | None = None, status: int | None = None
    ) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.status = status


def public_url(url: str) -> str:
    """``url`` without user info, query or fragment: safe for logs and ``describe()``."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return "<invalid url>"
    return str(parsed.copy_with(username=None, password=None, query=None, fragment=None))


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """The wait, in seconds, a response asks for; ``None`` if it does not say (or says nonsense).

    Reads ``retry-after-ms`` (OpenAI) first, then ``Retry-After`` as seconds or an HTTP date
    (RFC 9110 §10.2.3). A date in the past means "now" (0 s).

    Args:
        headers: the response headers (case-insensitive, like :class:`httpx.Headers`).
        now: the current unix time, for tests; default :func:`time.time` (an HTTP date is
            wall-clock time, so this is the one place wall-clock time is right).
    """
    ms = headers.get("retry-after-ms")
    if ms is not None:
        seconds = _non_negative_float(ms)
        if seconds is not None:
            return seconds / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _non_negative_float(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _non_negative_float(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def error_message(body: bytes) -> str:
    """The human message in an API error body.

    Understands ``{"error": {"message": ..., "type": ...}}`` (OpenAI, Anthropic and most
    compatible servers), ``{"error": "..."}`` (Ollama), ``{"message": ...}`` and
    ``{"detail": ...}``; falls back to the body's text, shortened.
    """
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        text = body.decode("utf-8", "replace").strip()
        return shorten(" ".join(text.split())) if text else "(empty body)"
    return shorten(message_in(obj))


def message_in(obj: Any) -> str:
    """The human message in a decoded error object (see :func:`error_message`)."""
    if isinstance(obj, dict):
        error = obj.get("error")
        if isinstance(error, dict):
            message = error.get("message")
            kind = error.get("type") or error.get("code")
            if isinstance(message, str) and message:
                return f"{message} ({kind})" if isinstance(kind, str) and kind else message
        elif isinstance(error, str) and error:
            return error
        for key in ("message", "detail"):
            value = obj.get(key)
            if isinstance(value, str) and value:
                return value
    return orjson.dumps(obj).decode()


CUT_TOOL_CALL: Final = (
    "this call was cut off at max_tokens before its input was complete, so it did not run; "
    "make it again with a smaller input, or split the work over several calls"
)
"""The error result a tool call cut by ``max_tokens`` gets, so the model can retry smaller."""


def one_line(text: str, limit: int = 200) -> str:
    """*text* on one line, cut to *limit* characters (an event's ``reason``)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shorten(text: str) -> str:
    """``text`` cut to a length fit for one line of an error message."""
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 1] + "…"


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How a failed call is tried again.

    The n-th retry waits ``min(max_delay_s, base_delay_s * 2**(n-1))``, less a random fraction
    of up to ``jitter`` of it (so that many agents hit by one outage do not come back in step),
    unless the server asked for a wait with ``Retry-After``, which is then honoured as given.

    Attributes:
        max_retries: tries after the first; ``0`` never retries.
        base_delay_s: the first backoff.
        max_delay_s: the longest backoff (``Retry-After`` may ask for more).
        jitter: the largest fraction taken off a backoff at random; ``0`` gives an exact schedule.
    """

    max_retries: int = attrs.field(default=4, validator=attrs.validators.ge(0))
    base_delay_s: float = attrs.field(default=0.5, validator=attrs.validators.ge(0))
    max_delay_s: float = attrs.field(default=8.0, validator=attrs.validators.ge(0))
    jitter: float = attrs.field(
        default=0.25, validator=[attrs.validators.ge(0), attrs.validators.le(1)]
    )
    rate_limit_wait_s: float = attrs.field(default=600.0, validator=attrs.validators.gt(0))
    """The longest one call waits on its endpoint's rate limit in all (its turn in the queue
    and the pauses after refusals; docs/rate-limits.md); the call deadline bounds it too."""

    def backoff_s(self, retry: int, rng: random.Random | None = None) -> float:
        """The wait before retry number ``retry`` (1-based) when the server did not say."""
        delay: float = min(self.max_delay_s, self.base_delay_s * 2 ** (retry - 1))
        if self.jitter:
            delay *= 1 - self.jitter * (rng or random).random()
        return delay


class DeadlineExceeded(ProviderError):
    """The call deadline passed; :func:`retrying_stream` words the final message."""


@asynccontextmanager
async def open_event_stream(
    client: httpx.AsyncClient,
    url: str,
    *,
    headers: Mapping[str, str],
    body: bytes,
    provider: str,
    deadline: float = math.inf,
    secrets: Secrets = NO_SECRETS,
    admission: Admission | None = None,
) -> AsyncGenerator[AsyncGenerator[httpx_sse.ServerSentEvent, None], None]:
    """POST ``body`` to ``url`` and yield an iterator over the reply's server-sent events.

    One try, no retries. Failures, both on entry and while iterating inside the block, come out
    as :class:`TransientError` (429, 5xx, connection and timeout errors),
    :class:`DeadlineExceeded` (past ``deadline``, a :func:`trio.current_time` value) or
    :class:`~runtime.ProviderError` (any other status, a reply that is not an event stream),
    with the server's own message and never a secret.

    The deadline is applied to each network read (a cancel scope per read, never open across a
    ``yield``): by the pool itself for a client of :func:`~runtime.providers._pool.make_client`
    (the request's ``DEADLINE`` extension, one scope with the read timeout), else by a scope
    of its own around each read.

    With the call's ``admission`` (its endpoint's limiter and the try's admitted ticket,
    docs/rate-limits.md), every reply's headers are read into the limiter, and a refusal (429,
    529) pauses the endpoint: the :class:`TransientError` then carries the pause as
    ``retry_after_s``.

    The request goes straight to the pool of a client of
    :func:`~runtime.providers._pool.make_client` (:func:`~runtime.providers._pool.post`: the
    bytes httpx would send, without its per-request ``Request`` and ``Headers``); any other
    client (a caller's, a proxy's, HTTP/2) sends it through httpx.

    Cancellation: leaving the block for any reason closes the response; a response not read to
    its end closes its connection at once (the pool shields that close from the cancellation).
    """
    headers = {**headers, "accept": "text/event-stream", "cache-control": "no-store"}
    limiter = admission.limiter if admission is not None else None
    ticket = admission.ticket if admission is not None else None
    try:
        # The runtime's own pool takes the request as it is (no httpx.Request), each of its
        # steps bounded by the deadline; any other client through httpx, under a scope.
        response: httpx.Response | Reply | None = await post(client, url, headers, body, deadline)
        if response is None:
            with trio.move_on_at(deadline):
                request = client.build_request(
                    "POST",
                    _parsed_url(url),
                    headers=headers,
                    content=body,
                    extensions={DEADLINE: deadline},
                )
                response = await client.send(request, stream=True)
            if response is None:
                raise DeadlineExceeded("the call deadline passed")
        if limiter is not None:
            limiter.learn(ticket, response.headers)
        if not response.is_success:
            if isinstance(response, Reply):
                response = response.as_httpx(_parsed_url(url))
            try:
                with trio.move_on_at(deadline):
                    await _raise_for_status(response, provider, secrets)
                raise DeadlineExceeded("the call deadline passed")
            except TransientError as exc:
                if limiter is not None and exc.status in REFUSALS:
                    exc.retry_after_s = limiter.refused(ticket, exc.status, exc.retry_after_s)
                raise
            finally:
                await response.aclose()
        chunks = cast(httpx.AsyncByteStream, response.stream)
        if not reads_by_deadline(client):  # the pool does not bound each read by the deadline
            chunks = _DeadlineStream(chunks, deadline)
        if response.headers.get("content-encoding", "identity") in ("identity", ""):
            events = parse_events(response.headers, chunks)
        else:
            # A compressed reply: httpx decodes it, httpx-sse parses it.
            raw = response.raw_headers if isinstance(response, Reply) else response.headers
            timed = httpx.Response(
                response.status_code,
                headers=raw,
                stream=chunks,
                request=httpx.Request("POST", _parsed_url(url)),
            )
            events = httpx_sse.EventSource(timed).aiter_sse()
        try:
            yield events
        finally:
            # Neither await can hang: the pool closes under a shield, and once the reply is
            # closed every read fails at once. Cancelled, each still ends what it must.
            try:
                await response.aclose()
            finally:
                await _finish(events)
    except httpx_sse.SSEError as exc:
        # httpx-sse raises this (a TransportError) for a reply that is not text/event-stream:
        # a misconfigured server, not a passing fault.
        raise ProviderError(
            secrets.text(f"{provider}: the reply is not an event stream: {exc}")
        ) from exc
    except DeadlinePassed as exc:
        raise DeadlineExceeded("the call deadline passed") from exc
    except (httpx.TimeoutException, httpcore.TimeoutException) as exc:
        kind = type(exc).__name__
        raise TransientError(f"{provider}: {_TIMEOUTS.get(kind, 'timed out')} ({kind})") from exc
    except (httpx.TransportError, *_HTTPCORE_TRANSPORT) as exc:  # httpcore's: the direct path
        detail = str(exc) or type(exc).__name__
        where = public_url(url)
        raise TransientError(
            secrets.text(f"{provider}: connection failed ({where}): {detail}")
        ) from exc


_HTTPCORE_TRANSPORT: Final = (
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.ProxyError,
    httpcore.UnsupportedProtocol,
)
"""httpcore's errors that httpx maps to a ``TransportError`` (``map_httpcore_exceptions``)."""


@functools.lru_cache(maxsize=64)
def _parsed_url(url: str) -> httpx.URL:
    """*url* parsed once: a provider sends every call to the same URL, and parsing it again for
    each request was a measurable share of one (bench/README.md, "The runtime's share")."""
    return httpx.URL(url)


async def parse_events(
    headers: Mapping[str, str], chunks: AsyncIterable[bytes]
) -> AsyncGenerator[httpx_sse.ServerSentEvent, None]:
    """The server-sent events in a reply's body, as httpx-sse reads them, for less per event.

    The bytes are decoded as UTF-8 as they come (a character split between reads is joined)
    and cut into events at blank lines (``\\n``, ``\\r\\n`` or ``\\r`` ending a line, as
    the SSE standard says); the common event, one ``data:`` line, takes one slice. Other
    fields, several ``data`` lines and comments are read as httpx-sse does. An event the body
    ends in the middle of is dropped, as the standard says.

    Raises:
        httpx_sse.SSEError: the reply is not ``text/event-stream`` (on the first iteration).
    """
    content_type = headers.get("content-type", "").partition(";")[0]
    if "text/event-stream" not in content_type:
        raise httpx_sse.SSEError(
            "Expected response header Content-Type to contain 'text/event-stream', "
            f"got {content_type!r}"
        )
    decode = codecs.getincrementaldecoder("utf-8")("replace").decode
    event = httpx_sse.ServerSentEvent
    pending = ""
    last_id = ""
    async for chunk in chunks:
        text = decode(chunk)
        if pending:
            text = pending + text
        if "\r" in text:
            # A "\r" at the end may be half of a "\r\n": keep it for the next read.
            held = text.endswith("\r")
            text = text.replace("\r\n", "\n").replace("\r", "\n")
            if held:
                text = text[:-1] + "\r"
        blocks = text.split("\n\n")
        pending = blocks.pop()
        for block in blocks:
            if block.startswith("data: ") and "\n" not in block:
                yield event(data=block[6:], id=last_id)
                continue
            sse = _parse_block(block, last_id)
            if sse is not None:
                last_id = sse.id
                yield sse
    # The body's end ends a line a bare "\r" left open.
    text = pending + decode(b"", True)
    if text.endswith("\r"):
        for block in (text[:-1] + "\n").split("\n\n")[:-1]:
            sse = _parse_block(block, last_id)
            if sse is not None:
                yield sse


def _parse_block(block: str, last_id: str) -> httpx_sse.ServerSentEvent | None:
    """One event's lines (no blank line among them but leading ones), as httpx-sse reads them."""
    name = ""
    data: list[str] = []
    retry: int | None = None
    seen = False
    for line in block.split("\n"):
        if not line or line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
        elif field == "id":
            if "\0" not in value:
                last_id = value
        elif field == "retry":
            with contextlib.suppress(ValueError):
                retry = int(value)
        else:
            continue
        seen = True
    if not seen:
        return None
    return httpx_sse.ServerSentEvent(event=name, data="\n".join(data), id=last_id, retry=retry)


class _DeadlineStream(httpx.AsyncByteStream):
    """A response body whose every read must finish before ``deadline``."""

    def __init__(self, stream: httpx.AsyncByteStream, deadline: float) -> None:
        self._stream = stream
        self._deadline = deadline

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = aiter(self._stream)
        while True:
            chunk: Any = None
            with trio.move_on_at(self._deadline):
                chunk = await anext(chunks, _END)
            if chunk is None:
                raise DeadlineExceeded("the call deadline passed")
            if chunk is _END:
                return
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


async def _finish(events: AsyncGenerator[httpx_sse.ServerSentEvent, None]) -> None:
    """End ``events`` and the chain of httpx generators under it; call after closing the reply.

    httpx and httpx-sse read a body through nested async generators and close only the outer
    one, so a reply left before its end leaves the inner ones suspended, for trio to find
    unclosed when they are garbage collected (a ResourceWarning each; encode/httpx#3686).
    Reading on from the closed reply instead makes the innermost read fail, and that error
    ends every generator of the chain on its way out.
    """
    if getattr(events, "ag_frame", None) is None:
        return  # read to its end, or ended by an error: nothing is left suspended
    try:
        while True:
            await anext(events)
    except Exception:
        pass  # whatever the closed reply fails with, the chain has ended


_TIMEOUTS: Final = {
    "ConnectTimeout": "could not connect in time",
    "ReadTimeout": "the server sent nothing for too long",
    "WriteTimeout": "could not send the request in time",
    "PoolTimeout": "no free connection in time",
}


async def _raise_for_status(
    response: httpx.Response, provider: str, secrets: Secrets
) -> None:
    status = response.status_code
    # Error bodies are small; a huge one is still bounded by the read timeout and the deadline.
    body = await response.aread()
    # Some servers send no reason phrase; the standard one reads better than none.
    reason = response.reason_phrase or httpx.codes.get_reason_phrase(status)
    message = secrets.text(f"{provider}: HTTP {status} {reason}: {error_message(body)}")
    retryable = status == 429 or status >= 500
    # OpenAI and Anthropic tell their SDKs explicitly when a retry is (not) worth it.
    should_retry = response.headers.get("x-should-retry")
    if should_retry in ("true", "false"):
        retryable = should_retry == "true"
    if retryable:
        raise TransientError(
            message, retry_after_s=parse_retry_after(response.headers), status=status
        )
    if status in (400, 413, 422):
        # "The prompt is too long" (OpenAI's context_length_exceeded, Anthropic's "prompt is
        # too long", compatible servers' wordings): the agent compacts and tries again.
        overflow = parse_overflow(body[:20_000].decode("utf-8", "replace"))
        if overflow is not None:
            raise ContextOverflowError(message, tokens=overflow.tokens, limit=overflow.limit)
    if 300 <= status < 400:
        message += " (redirects are not followed: check the base URL)"
    elif status == 404:
        message += (
            f" (check the base URL and the model name; asked {public_url(str(response.url))})"
        )
    raise ProviderError(message)


@attrs.define
class Retrier:
    """The tries of one provider call: its deadline, its count, the wait before the next.

    A provider's ``stream()`` runs its tries in a loop and hands each failure to
    :meth:`failed`, which either waits out the backoff (the loop then tries again) or raises
    the final :class:`~runtime.ProviderError`::

        retrier = Retrier(...)                  # in the generator body: the clock starts here
        while True:
            yielded = False
            try:
                async with open_event_stream(..., deadline=retrier.deadline) as events:
                    ...                         # set yielded = True before each yield
                return
            except ProviderError as exc:
                notice = retrier.retry_notice(exc, yielded=yielded)   # or raises
            yield notice                        # the loop reports it: provider_retry
            await retrier.wait(notice)

    (The loop lives in the provider's own generator rather than in a wrapping one: a
    generator layer costs as much per streamed item as the rest of the parsing.)

    A :class:`TransientError` before the first item is retried, up to ``policy.max_retries``
    times, after the server's ``Retry-After`` or else the policy's backoff; after an item, or
    once the retries are spent, it is final. Each retry is logged as ``provider.retry`` and
    told to the caller as a :class:`~runtime.core._provider.RetryNotice`.

    Attributes:
        deadline: when the whole call must be over (:func:`trio.current_time`), backoffs and
            the consumer's time between items included; ``inf`` without ``call_deadline_s``.
    """

    provider: str
    policy: RetryPolicy
    call_deadline_s: float | None
    log: Any = _log
    secrets: Secrets = NO_SECRETS
    rng: random.Random | None = None
    tries: int = attrs.field(default=1, init=False)
    deadline: float = attrs.field(init=False)
    wait_deadline: float = attrs.field(init=False)
    """When the call stops waiting on its endpoint's rate limit: the call deadline, or
    ``policy.rate_limit_wait_s`` from its start if that comes first."""

    def __attrs_post_init__(self) -> None:
        now = trio.current_time()
        self.deadline = math.inf if self.call_deadline_s is None else now + self.call_deadline_s
        self.wait_deadline = min(self.deadline, now + self.policy.rate_limit_wait_s)

    async def admitted(self, limiter: EndpointLimiter, ticket: Ticket) -> None:
        """Wait for *ticket*'s turn at *limiter*, until :attr:`wait_deadline` at the latest.

        Raises:
            ProviderError: the turn did not come in time (worded for the user).

        Cancellation: a checkpoint; cancelled, the ticket leaves the queue at once.
        """
        with trio.move_on_at(self.wait_deadline):
            await limiter.wait(ticket)
        if not ticket.admitted:
            raise ProviderError(
                f"{self.provider}: rate limited: no turn at {limiter.label} within {self._bound()}"
            )

    def refused(self, exc: TransientError) -> None:
        """A refusal (429, 529) the endpoint's limiter handles: no try is spent on it, as the
        whole endpoint waits; the call fails only once the pause would pass
        :attr:`wait_deadline`.

        Raises:
            ProviderError: the server kept refusing too long (caused by *exc*).
        """
        reason = self.secrets.text(str(exc))
        pause = exc.retry_after_s or 0.0
        if trio.current_time() + pause > self.wait_deadline:
            raise ProviderError(
                f"{reason} (rate limited: the server kept refusing; a pause of {pause:.3g} s"
                f" would pass {self._bound()})"
            ) from exc
        self.log.debug("provider.refused", provider=self.provider, status=exc.status,
                       pause_s=round(pause, 3), reason=reason)

    def _bound(self) -> str:
        """What ends the call's wait on rate limits, in words."""
        if self.call_deadline_s is not None and (
            self.call_deadline_s <= self.policy.rate_limit_wait_s
        ):
            return f"the call deadline of {self.call_deadline_s:g} s"
        return f"the retry policy's rate_limit_wait_s of {self.policy.rate_limit_wait_s:g} s"

    async def failed(self, exc: ProviderError, *, yielded: bool) -> None:
        """Wait before the next try, or raise the call's final error.

        The same as :meth:`retry_notice` then :meth:`wait`, for a caller that does not report
        retries.

        Raises:
            ProviderError: as :meth:`retry_notice`.

        Cancellation: cancelled during the wait, nothing is retried.
        """
        await self.wait(self.retry_notice(exc, yielded=yielded))

    async def wait(self, notice: RetryNotice) -> None:
        """Wait out *notice*'s delay and count the next try.

        Cancellation: a checkpoint; cancelled during the wait, nothing is retried.
        """
        await trio.sleep(notice.delay_s)
        self.tries += 1

    def retry_notice(self, exc: ProviderError, *, yielded: bool) -> RetryNotice:
        """What to tell the caller before the next try (log it too), or raise the final error.

        A provider yields the notice (the loop reports it as a ``provider_retry`` event), then
        calls :meth:`wait`.

        Raises:
            ProviderError: ``exc`` itself when it is not transient; a new one, worded for the
                user and caused by ``exc``, when it cannot be retried.
        """
        if isinstance(exc, DeadlineExceeded):
            raise ProviderError(
                f"{self.provider}: no complete reply within the call deadline"
                f" of {self.call_deadline_s:g} s"
            ) from exc
        if not isinstance(exc, TransientError):
            raise exc
        reason = self.secrets.text(str(exc))
        if yielded:
            raise ProviderError(
                f"{reason} (the reply had started streaming, so it is not retried)"
            ) from exc
        if self.tries > self.policy.max_retries:
            raise ProviderError(f"{reason} (gave up after {self.tries} tries)") from exc
        delay = exc.retry_after_s
        if delay is None:
            delay = self.policy.backoff_s(self.tries, self.rng)
        if trio.current_time() + delay > self.deadline:
            raise ProviderError(
                f"{reason} (a retry in {delay:g} s would pass the call deadline"
                f" of {self.call_deadline_s:g} s)"
            ) from exc
        # At debug: each retry is a provider_retry event already (the trace, --json, the live
        # tree); a library must not print a line per retry on an application's stderr.
        self.log.debug(
            "provider.retry",
            provider=self.provider,
            failed_try=self.tries,
            max_tries=self.policy.max_retries + 1,
            delay_s=round(delay, 3),
            status=exc.status,
            reason=reason,
        )
        return RetryNotice(attempt=self.tries, delay_s=delay, reason=one_line(reason))


@attrs.define
class Admission:
    """One model call's turns at its endpoint's limiter, across its tries (docs/rate-limits.md).

    A provider's ``stream()`` asks before each try, yields the notice if there is one, waits,
    hands :attr:`ticket` to :func:`open_event_stream`, and gives the ticket back when the try
    is over::

        admission = Admission.of(self.limiter, request)
        while True:
            try:
                notice = admission.ask()
                if notice is not None:
                    yield notice                # the loop reports it: rate_limited
                await admission.admitted(retrier)
                async with open_event_stream(..., admission=admission) as events:
                    ...
                admission.settle(input_tokens, output_tokens)
                ...
            except ProviderError as exc:
                if admission.refused(exc, retrier, yielded=yielded):
                    continue                    # a refusal is no try: ask again, in place
                ...
            finally:
                admission.done()

    Without a limiter every step does nothing.

    Attributes:
        limiter: the endpoint's limiter, if the provider has one.
        tokens: the input tokens each try is expected to send (the context meter's count).
        asked_at: when the call first asked: its place in line across its tries.
        agent_id: the asking agent (a Ray host's limiter names it to the driver).
        refusal: the status that refused the last try, if one did.
        ticket: the current try's ticket.
    """

    limiter: EndpointLimiter | None
    tokens: int = 0
    asked_at: float = attrs.Factory(trio.current_time)
    agent_id: str | None = None
    refusal: int | None = None
    ticket: Ticket | None = None

    @classmethod
    def of(cls, limiter: EndpointLimiter | None, request: ModelRequest) -> Admission:
        """The admission of one call of *request* (its tokens counted only with a limiter)."""
        if limiter is None:
            return cls(None)
        return cls(limiter, estimate_input_tokens(request), agent_id=request.agent_id)

    def ask(self) -> RateLimitNotice | None:
        """Join the queue for the next try; the notice to yield when a wait is foreseen (or the
        last try was refused)."""
        if self.limiter is None:
            return None
        ticket = self.ticket = self.limiter.ask(
            self.tokens, asked_at=self.asked_at, refused=self.refusal is not None,
            agent_id=self.agent_id,
        )
        if ticket.wait_s > 0 or self.refusal is not None:
            return RateLimitNotice(ticket.wait_s, ticket.reason, self.refusal)
        return None

    async def admitted(self, retrier: Retrier) -> None:
        """Wait for the try's turn (see :meth:`Retrier.admitted`).

        Cancellation: a checkpoint; cancelled, the ticket leaves the queue at once.
        """
        if self.limiter is not None and self.ticket is not None:
            await retrier.admitted(self.limiter, self.ticket)
            self.refusal = None

    def refused(self, exc: ProviderError, retrier: Retrier, *, yielded: bool) -> bool:
        """Whether *exc* is a refusal the limiter handles (then no try is spent on it: ask
        again); raises when the server kept refusing too long (:meth:`Retrier.refused`)."""
        if (
            self.limiter is None
            or yielded
            or not isinstance(exc, TransientError)
            or exc.status not in REFUSALS
        ):
            return False
        retrier.refused(exc)
        self.refusal = exc.status
        return True

    def settle(self, input_tokens: int, output_tokens: int) -> None:
        """The reply's usage, told to the limiter; the try's slot is given back."""
        if self.limiter is not None and self.ticket is not None:
            self.limiter.settle(self.ticket, input_tokens, output_tokens)
        self.done()

    def done(self) -> None:
        """The try is over: its slot, or its place in line, is given back."""
        if self.limiter is not None and self.ticket is not None:
            self.limiter.done(self.ticket)
            self.ticket = None
