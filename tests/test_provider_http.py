"""The providers' shared HTTP plumbing: retries, Retry-After, error messages, redaction, factory."""

from __future__ import annotations

import email.utils
import itertools
import logging
import random
from collections.abc import MutableMapping
from typing import Any

import httpx
import httpx_sse
import pytest
import structlog
import trio
from hypothesis import given
from hypothesis import strategies as st
from llm_server import LLMServer, Reply, collect, make_request, openai_text_stream, user

import runtime.providers
from runtime.core._errors import ConfigError, ProviderError
from runtime.core._provider import Provider, TextChunk
from runtime.core._secrets import Secrets
from runtime.providers import (
    DEFAULT_MODELS,
    AnthropicProvider,
    OpenAIProvider,
    RetryPolicy,
    open_provider,
)
from runtime.providers._http import (
    DeadlineExceeded,
    Retrier,
    TransientError,
    error_message,
    parse_retry_after,
    public_url,
)


@pytest.fixture
def logs() -> list[MutableMapping[str, Any]]:
    """Every structlog entry, at every level (the shared conftest keeps only errors)."""
    capture = structlog.testing.LogCapture()
    structlog.configure(
        processors=[capture], wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG)
    )
    # The shared conftest resets structlog after each test.
    return capture.entries


def test_all_is_sorted_and_exported() -> None:
    assert runtime.providers.__all__ == sorted(runtime.providers.__all__)
    for name in runtime.providers.__all__:
        assert hasattr(runtime.providers, name)


# -- Retry-After -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "wait"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": " 2.5 "}, 2.5),
        ({"retry-after": "0"}, 0.0),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after-ms": "soon", "retry-after": "9"}, 9.0),
        ({"retry-after": "-3"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "whenever"}, None),
        ({}, None),
    ],
)
def test_retry_after_seconds(headers: dict[str, str], wait: float | None) -> None:
    assert parse_retry_after(httpx.Headers(headers)) == wait


def test_retry_after_http_date() -> None:
    now = 1_700_000_000.0
    headers = httpx.Headers({"Retry-After": email.utils.formatdate(now + 120, usegmt=True)})
    assert parse_retry_after(headers, now=now) == 120


def test_retry_after_date_in_the_past_means_now() -> None:
    now = 1_700_000_000.0
    headers = httpx.Headers({"Retry-After": email.utils.formatdate(now - 60, usegmt=True)})
    assert parse_retry_after(headers, now=now) == 0


# -- error messages and redaction --------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            b'{"error": {"message": "Invalid model", "type": "invalid_request_error", "code": null}}',
            "Invalid model (invalid_request_error)",
        ),
        (
            b'{"type": "error", "error": {"type": "not_found_error", "message": "model: x"}}',
            "model: x (not_found_error)",
        ),
        (b'{"error": {"message": "no type"}}', "no type"),
        (b'{"error": "model \\"llama9\\" not found"}', 'model "llama9" not found'),
        (b'{"message": "Forbidden"}', "Forbidden"),
        (b'{"detail": "Not Found"}', "Not Found"),
        (b'{"unexpected": 1}', '{"unexpected":1}'),
        (b"<html>\n  <h1>502 Bad Gateway</h1>\n</html>", "<html> <h1>502 Bad Gateway</h1> </html>"),
        (b"", "(empty body)"),
    ],
)
def test_error_message_finds_the_human_part(body: bytes, message: str) -> None:
    assert error_message(body) == message


def test_error_message_is_shortened() -> None:
    message = error_message(b"x" * 10_000)
    assert len(message) == 500
    assert message.endswith("…")


def test_redact_replaces_every_occurrence_but_ignores_placeholders() -> None:
    key = "sk-abcdef123456"
    assert Secrets([key]).text(f"{key} and {key}!") == "*** and ***!"
    # "x" or "-" as a key for a local server is not a secret worth wrecking a message over.
    assert Secrets(["x", ""]).text("a text with x in it") == "a text with x in it"


def test_public_url_drops_credentials_and_query() -> None:
    assert public_url("https://me:secret@example.com:8443/v1?key=abc#f") == (
        "https://example.com:8443/v1"
    )
    assert public_url("http://localhost:11434/v1") == "http://localhost:11434/v1"


# -- the retry policy --------------------------------------------------------------------------


def test_backoff_doubles_up_to_the_maximum_without_jitter() -> None:
    policy = RetryPolicy(jitter=0, base_delay_s=0.5, max_delay_s=8)
    assert [policy.backoff_s(n) for n in range(1, 8)] == [0.5, 1, 2, 4, 8, 8, 8]


@given(retry=st.integers(1, 30), seed=st.integers(0, 2**32), jitter=st.floats(0, 1))
def test_backoff_with_jitter_stays_within_its_band(retry: int, seed: int, jitter: float) -> None:
    policy = RetryPolicy(jitter=jitter)
    full = min(policy.max_delay_s, policy.base_delay_s * 2 ** (retry - 1))
    delay = policy.backoff_s(retry, random.Random(seed))
    assert full * (1 - jitter) <= delay <= full


def test_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        RetryPolicy(max_retries=-1)
    with pytest.raises(ValueError, match="jitter"):
        RetryPolicy(jitter=1.5)


async def test_retrier_waits_then_gives_up(
    autojump_clock: trio.testing.MockClock, logs: list[MutableMapping[str, Any]]
) -> None:
    retrier = Retrier("p", RetryPolicy(max_retries=2, jitter=0), None)
    start = trio.current_time()

    await retrier.failed(TransientError("p: HTTP 500", status=500), yielded=False)
    await retrier.failed(TransientError("p: HTTP 429", retry_after_s=30, status=429), yielded=False)
    with pytest.raises(ProviderError, match=r"^p: HTTP 500 \(gave up after 3 tries\)$"):
        await retrier.failed(TransientError("p: HTTP 500", status=500), yielded=False)

    # The virtual clock lands exactly on each wake-up.
    assert trio.current_time() == start + 0.5 + 30  # noqa: RUF069
    assert [(e["failed_try"], e["delay_s"]) for e in logs] == [(1, 0.5), (2, 30)]
    assert all(e["max_tries"] == 3 and e["provider"] == "p" for e in logs)


async def test_retrier_never_retries_after_output() -> None:
    retrier = Retrier("p", RetryPolicy(), None)
    with pytest.raises(ProviderError, match="not retried"):
        await retrier.failed(TransientError("p: connection failed"), yielded=True)


async def test_retrier_raises_a_final_error_as_it_is() -> None:
    retrier = Retrier("p", RetryPolicy(), None)
    error = ProviderError("p: HTTP 400 Bad Request: nope")
    with pytest.raises(ProviderError) as raised:
        await retrier.failed(error, yielded=False)
    assert raised.value is error


async def test_retrier_will_not_sleep_past_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    retrier = Retrier("p", RetryPolicy(), call_deadline_s=60)
    start = trio.current_time()
    with pytest.raises(
        ProviderError, match="a retry in 120 s would pass the call deadline of 60 s"
    ):
        await retrier.failed(TransientError("p: HTTP 429", retry_after_s=120), yielded=False)
    assert trio.current_time() == start


async def test_retrier_words_the_deadline() -> None:
    retrier = Retrier("p", RetryPolicy(), call_deadline_s=45)
    with pytest.raises(
        ProviderError, match=r"^p: no complete reply within the call deadline of 45 s$"
    ):
        await retrier.failed(DeadlineExceeded("p"), yielded=True)


# -- open_provider -----------------------------------------------------------------------------


async def test_open_provider_reads_key_and_base_url_from_env() -> None:
    env = {"OPENAI_API_KEY": "sk-env-1234567890", "OPENAI_BASE_URL": "https://llm.example/v1/"}
    async with open_provider("openai", env=env, max_retries=2) as provider:
        assert isinstance(provider, OpenAIProvider)
        assert isinstance(provider, Provider)
        assert provider.api_key == "sk-env-1234567890"
        assert provider.describe() == {
            "provider": "openai",
            "model": DEFAULT_MODELS["openai"],
            "base_url": "https://llm.example/v1/",
            "max_retries": 2,
            "call_deadline_s": 600.0,
        }
        client = provider.client
        assert client.timeout.connect == 10
        assert client.timeout.read == 120
    assert client.is_closed


async def test_open_provider_defaults_and_model_override() -> None:
    env = {"ANTHROPIC_API_KEY": "sk-ant-1234567890"}
    async with open_provider("anthropic", env=env, model="claude-opus-4-1") as provider:
        assert isinstance(provider, AnthropicProvider)
        assert provider.base_url == "https://api.anthropic.com"
        assert provider.model == "claude-opus-4-1"
    async with open_provider("openai", env={"OPENAI_API_KEY": "sk-1234567890"}) as provider:
        assert isinstance(provider, OpenAIProvider)
        assert provider.base_url == "https://api.openai.com/v1"
        assert provider.model == DEFAULT_MODELS["openai"]
        assert provider.max_tokens_param == "max_completion_tokens"


@pytest.mark.parametrize(
    ("name", "variable"), [("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY")]
)
async def test_missing_key_names_the_variable(name: str, variable: str) -> None:
    with pytest.raises(ConfigError, match=f"set {variable}"):
        async with open_provider(name, env={}):
            pass  # pragma: no cover


@pytest.mark.parametrize(
    "url", ["http://localhost:11434/v1", "http://127.0.0.1:8000/v1", "http://[::1]:1234/v1"]
)
async def test_a_local_server_needs_no_key(url: str) -> None:
    async with open_provider("openai", env={"OPENAI_BASE_URL": url}) as provider:
        assert isinstance(provider, OpenAIProvider)
        assert provider.api_key is None
        assert provider.max_tokens_param == "max_tokens"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "gemini"}, "unknown provider 'gemini': choose one of anthropic, openai"),
        ({"env": {"OPENAI_BASE_URL": "ftp://example.com"}}, "OPENAI_BASE_URL must be an http"),
        ({"env": {"OPENAI_BASE_URL": "http://"}}, "OPENAI_BASE_URL"),
        ({"max_retries": -1}, "max_retries must be 0 or more"),
        ({"call_deadline_s": 0}, "call_deadline_s must be positive"),
        ({"thinking_budget": 1024}, "thinking_budget is an anthropic setting"),
    ],
)
async def test_bad_settings_are_refused_before_anything_opens(
    kwargs: dict[str, Any], message: str
) -> None:
    settings: dict[str, Any] = {"name": "openai", "env": {"OPENAI_API_KEY": "sk-1234567890"}}
    settings.update(kwargs)
    with pytest.raises(ConfigError, match=message):
        async with open_provider(settings.pop("name"), **settings):
            pass  # pragma: no cover


async def test_open_provider_streams_from_a_local_server(nursery: trio.Nursery) -> None:
    server = LLMServer()
    await nursery.start(server.serve)
    server.push(Reply.stream(openai_text_stream(["hello"])))

    env = {"OPENAI_BASE_URL": server.url + "/v1"}
    async with open_provider("openai", env=env, model="llama3") as provider:
        items = await collect(provider, make_request())

    assert items[0] == TextChunk("hello")
    assert server.requests[0].json["model"] == "llama3"
    assert "authorization" not in server.requests[0].headers


async def test_server_routes_parallel_requests_by_content(nursery: trio.Nursery) -> None:
    # What an end-to-end run with parallel sub-agents needs: each gets its own script,
    # whatever order their requests arrive in.
    server = LLMServer()
    await nursery.start(server.serve)
    server.route = lambda request: Reply.stream(
        openai_text_stream([request.json["messages"][-1]["content"].upper()])
    )
    results: dict[str, str] = {}
    async with open_provider("openai", env={"OPENAI_BASE_URL": server.url + "/v1"}) as provider:

        async def ask(text: str) -> None:
            items = await collect(provider, make_request(user(text)))
            results[text] = "".join(i.text for i in items if isinstance(i, TextChunk))

        async with trio.open_nursery() as inner:
            for text in ("left", "right", "middle"):
                inner.start_soon(ask, text)

    assert results == {"left": "LEFT", "right": "RIGHT", "middle": "MIDDLE"}


# -- parse_events: the SSE reader of the hot path, against httpx-sse (which, unlike the standard,
# dispatches an empty event at each blank line once an id was seen: ids are left out here) ---

_SSE_PIECES = [
    "data: {\"a\": 1}\n\n", "data: é€😀\n\n", "event: ping\ndata: x\n\n", ": comment\n\n",
    "data: one\ndata: two\n\n", "data:nospace\r\n\r\n", "data: y\r\r", "retry: 5\n\n",
    "data: [DONE]\n\n", "\n\n", "field: ignored\ndata: z\n\n", "data\n\n", "data: tail",
]


async def _chunks(parts: list[bytes]) -> Any:
    for part in parts:
        yield part


async def _parsed(body: bytes, cuts: list[int]) -> list[tuple[str, str, str, int | None]]:
    from runtime.providers._http import parse_events

    bounds = [0, *sorted(set(cuts)), len(body)]
    parts = [body[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    headers = httpx.Headers({"content-type": "text/event-stream"})
    return [(e.event, e.data, e.id, e.retry) async for e in parse_events(headers, _chunks(parts))]


async def _reference(body: bytes) -> list[tuple[str, str, str, int | None]]:
    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)
    return [(e.event, e.data, e.id, e.retry) async for e in httpx_sse.EventSource(response).aiter_sse()]


@given(
    st.lists(st.sampled_from(_SSE_PIECES), max_size=12),
    st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_parse_events_reads_what_httpx_sse_reads_however_the_bytes_are_cut(
    pieces: list[str], cuts: list[int]
) -> None:
    body = "".join(pieces).encode()
    cuts = [c for c in cuts if c < len(body)]
    got, want = trio.run(_parsed, body, cuts), trio.run(_reference, body)
    assert got == want


async def test_parse_events_refuses_a_reply_that_is_not_an_event_stream() -> None:
    from runtime.providers._http import parse_events

    headers = httpx.Headers({"content-type": "application/json"})
    with pytest.raises(httpx_sse.SSEError, match="text/event-stream"):
        await anext(parse_events(headers, _chunks([b"{}"])))


async def test_a_compressed_event_stream_is_decoded_then_read(nursery: trio.Nursery) -> None:
    import gzip

    from llm_server import Piece

    server = LLMServer()
    await nursery.start(server.serve)
    body = b"".join(openai_text_stream(["packed ", "small"]))
    server.push(Reply(pieces=[Piece(gzip.compress(body))], headers=[("content-encoding", "gzip")]))
    with trio.fail_after(10):
        async with open_provider(
            "openai", env={"OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": "x"}
        ) as provider:
            items = await collect(provider, make_request())
    assert [i.text for i in items if isinstance(i, TextChunk)] == ["packed ", "small"]
