"""The ``openai`` provider against a real HTTP server on loopback, streaming SSE."""

from __future__ import annotations

import email.utils
import gc
import logging
import time
from collections.abc import AsyncIterator, MutableMapping
from contextlib import aclosing
from typing import Any

import attrs
import httpx
import orjson
import pytest
import structlog
import trio
from llm_server import (
    OPENAI_DONE,
    LLMServer,
    Piece,
    Reply,
    assemble,
    collect,
    collect_until_error,
    error_chain,
    make_request,
    openai_chunk,
    openai_text_stream,
    openai_usage,
    split_inside,
    sse,
    user,
)

from runtime.core._errors import ProviderError
from runtime.core._messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from runtime.core._provider import (
    Provider,
    TextChunk,
    ThinkingChunk,
    ToolCall,
    ToolSpec,
    TurnEnd,
)
from runtime.providers import OpenAIProvider, RetryPolicy
from runtime.providers._http import CUT_TOOL_CALL
from runtime.providers._pool import PoolLimits, make_client, reads_by_deadline

KEY = "sk-test-0penai-DO-NOT-LEAK-1234567890abcdef"


@pytest.fixture
async def server(nursery: trio.Nursery) -> LLMServer:
    server = LLMServer()
    await nursery.start(server.serve)
    return server


@pytest.fixture
async def provider(server: LLMServer) -> AsyncIterator[OpenAIProvider]:
    # The client open_provider makes (its pool, runtime/providers/_pool.py), so every test
    # here runs on it.
    timeouts = httpx.Timeout(10, read=120)
    async with make_client(PoolLimits(), timeouts, server.url) as client:
        yield OpenAIProvider(
            client=client,
            base_url=server.url + "/v1",
            api_key=KEY,
            model="gpt-test",
            retry=RetryPolicy(max_retries=3, jitter=0),
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


def text_of(items: list[Any]) -> str:
    return "".join(i.text for i in items if isinstance(i, TextChunk))


# -- streaming ---------------------------------------------------------------------------------


async def test_text_stream_yields_each_delta_then_one_turn_end(
    server: LLMServer, provider: OpenAIProvider
) -> None:
    server.push(Reply.stream(openai_text_stream(["Hel", "lo", " wörld"], usage=(12, 3))))

    items = await collect(provider, make_request(user("hi"), system="Be brief."))

    assert items == [
        TextChunk("Hel"),
        TextChunk("lo"),
        TextChunk(" wörld"),
        TurnEnd(stop_reason="end_turn", input_tokens=12, output_tokens=3),
    ]


async def test_request_wire_format(server: LLMServer, provider: OpenAIProvider) -> None:
    server.push(Reply.stream(openai_text_stream(["ok"])))
    tool = ToolSpec(
        name="read",
        description="Read a file.",
        input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
    )

    await collect(provider, make_request(user("hi"), system="Be brief.", tools=[tool]))

    [request] = server.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["accept"] == "text/event-stream"
    assert request.json == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        # Not api.openai.com: compatible servers know max_tokens.
        "max_tokens": 4096,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read",
                    "description": "Read a file.",
                    "parameters": {
                        "type": "object",
                        "properties": {"path": {"type": "string"}},
                    },
                },
            }
        ],
    }


async def test_request_model_overrides_the_provider_default(
    server: LLMServer, provider: OpenAIProvider
) -> None:
    server.push(Reply.stream(openai_text_stream(["ok"])))
    await collect(provider, make_request(model="other-model"))
    assert server.requests[0].json["model"] == "other-model"


def test_openai_endpoint_gets_max_completion_tokens() -> None:
    client = httpx.AsyncClient()
    assert OpenAIProvider(client=client).max_tokens_param == "max_completion_tokens"
    local = OpenAIProvider(client=client, base_url="http://localhost:11434/v1")
    assert local.max_tokens_param == "max_tokens"


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_deltas_become_thinking_chunks(
    server: LLMServer, provider: OpenAIProvider, field: str
) -> None:
    server.push(
        Reply.stream(openai_text_stream(["4"], reasoning=["2+2 ", "is 4"], reasoning_field=field))
    )

    items = await collect(provider, make_request())

    assert items[:3] == [ThinkingChunk("2+2 "), ThinkingChunk("is 4"), TextChunk("4")]


async def test_parallel_tool_calls_are_assembled_by_index_across_split_fragments(
    server: LLMServer, provider: OpenAIProvider
) -> None:
    # Two calls announced, then their arguments interleaved and cut mid-JSON, mid-string and
    # (in the raw bytes, below) inside the two bytes of "é".
    events = [
        openai_chunk({"role": "assistant", "content": None}),
        openai_chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "read", "arguments": ""},
                    }
                ]
            }
        ),
        openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"pa'}}]}),
        openai_chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "grep", "arguments": '{"pattern": "caf'},
                    }
                ]
            }
        ),
        openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'th": "/tmp/r'}}]}),
        openai_chunk(
            {"tool_calls": [{"index": 1, "function": {"arguments": 'é 🍵", "path": "."'}}]}
        ),
        openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ésumé.md"}'}}]}),
        openai_chunk({"tool_calls": [{"index": 1, "function": {"arguments": "}"}}]}),
        openai_chunk({}, finish="tool_calls"),
        openai_usage(30, 20),
        OPENAI_DONE,
    ]
    body = b"".join(events)
    server.push(Reply.stream(split_inside(body, "é")))

    items = await collect(provider, make_request())

    assert items == [
        ToolCall("call_a", "read", {"path": "/tmp/résumé.md"}),
        ToolCall("call_b", "grep", {"pattern": "café 🍵", "path": "."}),
        TurnEnd(stop_reason="tool_use", input_tokens=30, output_tokens=20),
    ]


async def test_tool_call_without_index_or_id_gets_position_and_fresh_id(
    server: LLMServer, provider: OpenAIProvider
) -> None:
    whole = {"type": "function", "function": {"name": "glob", "arguments": {"pattern": "*.py"}}}
    server.push(
        Reply.stream([openai_chunk({"tool_calls": [whole]}), openai_chunk({}, finish="tool_calls")])
    )

    items = await collect(provider, make_request())

    assert isinstance(items[0], ToolCall)
    assert (items[0].name, items[0].input) == ("glob", {"pattern": "*.py"})
    assert items[0].id.startswith("call_")


@pytest.mark.parametrize(
    ("finish", "with_call", "stop"),
    [
        ("stop", False, "end_turn"),
        ("length", False, "max_tokens"),
        ("tool_calls", True, "tool_use"),
        ("function_call", True, "tool_use"),
        # Some servers (older Ollama) say "stop" after tool calls.
        ("stop", True, "tool_use"),
        ("content_filter", False, "end_turn"),
    ],
)
async def test_finish_reason_maps_to_stop_reason(
    server: LLMServer, provider: OpenAIProvider, finish: str, with_call: bool, stop: str
) -> None:
    call = {"index": 0, "id": "c1", "function": {"name": "bash", "arguments": "{}"}}
    events = [openai_chunk({"content": "x"})]
    if with_call:
        events.append(openai_chunk({"tool_calls": [call]}))
    events += [openai_chunk({}, finish=finish), OPENAI_DONE]
    server.push(Reply.stream(events))

    items = await collect(provider, make_request())

    assert items[-1] == TurnEnd(stop_reason=stop)  # type: ignore[arg-type]


async def test_tool_call_cut_off_by_max_tokens_is_answered_with_an_error(
    server: LLMServer, provider: OpenAIProvider
) -> None:
    """Issue 21, item 21: the model learns its call was cut, and can make it again smaller."""
    call = {"index": 0, "id": "c1", "function": {"name": "write", "arguments": '{"content": "ab'}}
    server.push(
        Reply.stream(
            [openai_chunk({"tool_calls": [call]}), openai_chunk({}, finish="length"), OPENAI_DONE]
        )
    )

    assert await collect(provider, make_request()) == [
        ToolCall("c1", "write", {}, CUT_TOOL_CALL),
        TurnEnd(stop_reason="max_tokens"),
    ]


async def test_a_refusal_is_text_and_stop_reason_refusal(
    server: LLMServer, provider: OpenAIProvider
) -> None:
    """Issue 21, item 20: delta.refusal reaches the user, and the turn says it was a refusal."""
    server.push(
        Reply.stream([
            openai_chunk({"role": "assistant", "content": None, "refusal": ""}),
            openai_chunk({"refusal": "I can't help "}),
            openai_chunk({"refusal": "with that."}),
            openai_chunk({}, finish="stop"),
            OPENAI_DONE,
        ])
    )

    assert await collect(provider, make_request()) == [
        TextChunk("I can't help "),
        TextChunk("with that."),
        TurnEnd(stop_reason="refusal"),
    ]


async def test_invalid_tool_arguments_become_a_call_the_model_is_told_about(
    server: LLMServer, provider: OpenAIProvider
) -> None:
    calls = [
        {"index": 0, "id": "c1", "function": {"name": "write", "arguments": "{not json"}},
        {"index": 1, "id": "c2", "function": {"name": "read", "arguments": "[1, 2]"}},
    ]
    server.push(
        Reply.stream([openai_chunk({"tool_calls": calls}), openai_chunk({}, finish="tool_calls")])
    )

    items = await collect(provider, make_request())

    bad_json, not_object = items[0], items[1]
    assert isinstance(bad_json, ToolCall)
    assert isinstance(not_object, ToolCall)
    assert (bad_json.id, bad_json.input) == ("c1", {})
    assert bad_json.error is not None
    assert bad_json.error.startswith("the arguments are not valid JSON")
    assert not_object.error == "the arguments are not a JSON object"
    assert items[-1] == TurnEnd(stop_reason="tool_use")
    assert len(server.requests) == 1


async def test_server_without_done_or_usage_is_fine(
    server: LLMServer, provider: OpenAIProvider
) -> None:
    server.push(Reply.stream([openai_chunk({"content": "hi"}), openai_chunk({}, finish="stop")]))

    items = await collect(provider, make_request())

    assert items == [TextChunk("hi"), TurnEnd(stop_reason="end_turn")]


async def test_connection_is_reused_across_calls(
    server: LLMServer, provider: OpenAIProvider
) -> None:
    for _ in range(3):
        server.push(Reply.stream(openai_text_stream(["ok"])))
        await collect(provider, make_request())

    assert server.connections == 1


# -- retries -----------------------------------------------------------------------------------


async def test_429_waits_for_retry_after_then_succeeds(
    autojump_clock: trio.testing.MockClock,
    server: LLMServer,
    provider: OpenAIProvider,
    logs: list[MutableMapping[str, Any]],
) -> None:
    server.push(
        Reply.error(
            429, "Rate limit reached", kind="rate_limit_exceeded", headers=[("retry-after", "7")]
        ),
        Reply.stream(openai_text_stream(["ok"])),
    )

    items = await collect(provider, make_request())

    assert text_of(items) == "ok"
    first, second = server.requests
    assert second.at == first.at + 7
    [retry] = [e for e in logs if e["event"] == "provider.retry"]
    assert retry["log_level"] == "debug"  # an event already says it: no warning per retry
    assert (retry["status"], retry["delay_s"], retry["failed_try"]) == (429, 7, 1)
    assert "Rate limit reached" in retry["reason"]
    assert retry["agent_id"] == "agent-1"


async def test_retry_after_as_http_date_is_honoured(
    autojump_clock: trio.testing.MockClock, server: LLMServer, provider: OpenAIProvider
) -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    server.push(
        Reply.error(429, "slow down", headers=[("retry-after", when)]),
        Reply.stream(openai_text_stream(["ok"])),
    )

    await collect(provider, make_request())

    first, second = server.requests
    # The date has whole seconds; the wall clock moved on a little since it was made.
    assert 28 < second.at - first.at <= 30


async def test_500_twice_then_success_backs_off_exponentially(
    autojump_clock: trio.testing.MockClock, server: LLMServer, provider: OpenAIProvider
) -> None:
    server.push(
        Reply.error(500, "boom", kind="server_error"),
        Reply.error(503, "busy", kind="server_error"),
        Reply.stream(openai_text_stream(["ok"])),
    )

    items = await collect(provider, make_request())

    assert text_of(items) == "ok"
    times = [r.at for r in server.requests]
    # RetryPolicy(jitter=0): 0.5 s, then 1 s; the virtual clock lands exactly on each wake-up.
    assert times[1] == times[0] + 0.5  # noqa: RUF069
    assert times[2] == times[1] + 1.0  # noqa: RUF069


async def test_retries_are_bounded(
    autojump_clock: trio.testing.MockClock, server: LLMServer, provider: OpenAIProvider
) -> None:
    server.push(*[Reply.error(502, "bad gateway", kind="server_error")] * 5)

    _, error = await collect_until_error(provider, make_request())

    assert len(server.requests) == 4  # max_retries=3
    assert "HTTP 502" in str(error)
    assert "bad gateway" in str(error)
    assert "gave up after 4 tries" in str(error)


async def test_401_fails_at_once_with_the_server_message_and_never_the_key(
    server: LLMServer, provider: OpenAIProvider, logs: list[MutableMapping[str, Any]]
) -> None:
    # Some servers echo the key they were given; it must not get through.
    server.push(Reply.error(401, f"Incorrect API key provided: {KEY}.", kind="invalid_api_key"))

    items, error = await collect_until_error(provider, make_request())

    assert items == []
    assert len(server.requests) == 1
    assert str(error) == (
        "openai: HTTP 401 Unauthorized: Incorrect API key provided: ***. (invalid_api_key)"
    )
    assert KEY not in error_chain(error)
    assert not [e for e in logs if e["event"] == "provider.retry"]


async def test_the_runs_secrets_handed_to_the_provider_are_masked_in_its_errors(
    server: LLMServer, provider: OpenAIProvider
) -> None:
    """A provider gets the run's one Secrets: a run secret a server echoes (an MCP header
    value, a GH_TOKEN) is masked in the error as the key is, with the same mask."""
    from runtime.core._secrets import Secrets

    run_secret = "ghp-run-secret-0123456789"
    masked = attrs.evolve(provider, secrets=Secrets([run_secret]))
    server.push(Reply.error(400, f"bad header {run_secret} with key {KEY}", kind="bad_request"))

    _, error = await collect_until_error(masked, make_request())

    assert "bad header *** with key ***" in str(error)
    assert run_secret not in error_chain(error)
    assert KEY not in error_chain(error)


async def test_404_hints_at_the_base_url_and_model(
    server: LLMServer, provider: OpenAIProvider
) -> None:
    server.push(Reply.error(404, "The model `gpt-test` does not exist", kind="not_found"))

    _, error = await collect_until_error(provider, make_request())

    assert str(error) == (
        "openai: HTTP 404 Not Found: The model `gpt-test` does not exist (not_found)"
        f" (check the base URL and the model name; asked {server.url}/v1/chat/completions)"
    )
    assert len(server.requests) == 1


async def test_connect_error_is_retried(
    autojump_clock: trio.testing.MockClock, logs: list[MutableMapping[str, Any]]
) -> None:
    # A port nobody listens on: the connection is refused each time.
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with httpx.AsyncClient() as client:
        provider = OpenAIProvider(
            client=client,
            base_url=f"http://127.0.0.1:{port}/v1",
            retry=RetryPolicy(max_retries=2, jitter=0),
        )
        _, error = await collect_until_error(provider, make_request())

    assert f"connection failed (http://127.0.0.1:{port}/v1/chat/completions)" in str(error)
    assert "gave up after 3 tries" in str(error)
    assert len([e for e in logs if e["event"] == "provider.retry"]) == 2


async def test_stream_cut_before_the_first_byte_is_retried(
    autojump_clock: trio.testing.MockClock, server: LLMServer, provider: OpenAIProvider
) -> None:
    server.push(
        Reply.hang_up(),
        Reply(drop_after_bytes=0),
        Reply.stream(openai_text_stream(["ok"])),
    )

    items = await collect(provider, make_request())

    assert text_of(items) == "ok"
    assert len(server.requests) == 3


async def test_stream_ending_without_a_finish_before_any_output_is_retried(
    autojump_clock: trio.testing.MockClock, server: LLMServer, provider: OpenAIProvider
) -> None:
    server.push(
        Reply.stream([openai_chunk({"role": "assistant", "content": ""})]),
        Reply.stream(openai_text_stream(["ok"])),
    )

    items = await collect(provider, make_request())

    assert text_of(items) == "ok"
    assert len(server.requests) == 2


# -- failures mid-stream -----------------------------------------------------------------------


async def test_connection_dropped_mid_stream_fails_without_retry(
    server: LLMServer, provider: OpenAIProvider
) -> None:
    events = openai_text_stream(["partial", " answer"])
    cut = len(b"".join(events[:2])) + 10  # the role chunk, "partial", a bit of the next
    server.push(
        Reply.stream(events, drop_after_bytes=cut), Reply.stream(openai_text_stream(["no"]))
    )

    items, error = await collect_until_error(provider, make_request())

    assert items == [TextChunk("partial")]
    assert "connection failed" in str(error)
    assert "not retried" in str(error)
    assert len(server.requests) == 1


async def test_invalid_json_line_fails_the_turn(
    server: LLMServer, provider: OpenAIProvider
) -> None:
    events = openai_text_stream(["fine"])
    server.push(Reply.stream([*events[:2], b"data: <html>Bad Gateway</html>\n\n", *events[2:]]))

    items, error = await collect_until_error(provider, make_request())

    assert items == [TextChunk("fine")]
    assert str(error).startswith("openai: invalid JSON in the stream")
    assert "<html>Bad Gateway" in str(error)
    assert len(server.requests) == 1


async def test_garbage_that_is_not_sse_ends_as_a_stream_without_finish(
    server: LLMServer, provider: OpenAIProvider
) -> None:
    # The SSE rules skip lines without a known field, so a proxy's HTML page is no event:
    # the stream then just ends without a finish_reason.
    events = openai_text_stream(["fine"])
    server.push(Reply.stream([*events[:2], b"<html>\n<body>502</body>\n</html>\n\n"]))

    items, error = await collect_until_error(provider, make_request())

    assert items == [TextChunk("fine")]
    assert "the stream ended before the model finished" in str(error)


async def test_malformed_chunk_shape_fails_clearly(
    server: LLMServer, provider: OpenAIProvider
) -> None:
    server.push(Reply.stream([sse({"choices": ["not an object"]})]))

    _, error = await collect_until_error(provider, make_request())

    assert str(error).startswith("openai: malformed chunk")


async def test_error_chunk_mid_stream_fails_with_its_message(
    server: LLMServer, provider: OpenAIProvider
) -> None:
    error_chunk = sse({"error": {"message": "upstream model crashed", "code": 502}})
    server.push(Reply.stream([openai_chunk({"content": "so"}), error_chunk]))

    items, error = await collect_until_error(provider, make_request())

    assert items == [TextChunk("so")]
    assert "upstream model crashed" in str(error)
    assert len(server.requests) == 1


async def test_reply_that_is_not_an_event_stream_fails_at_once(
    server: LLMServer, provider: OpenAIProvider
) -> None:
    body = orjson.dumps({"choices": [{"message": {"content": "not streamed"}}]})
    server.push(Reply(pieces=[Piece(body)], content_type="application/json"))

    _, error = await collect_until_error(provider, make_request())

    assert "not an event stream" in str(error)
    assert len(server.requests) == 1


def _client(kind: str, timeout: httpx.Timeout, base_url: str) -> httpx.AsyncClient:
    """httpx's own client, or the runtime's (whose pool bounds each read by the deadline)."""
    if kind == "httpx":
        return httpx.AsyncClient(timeout=timeout)
    return make_client(PoolLimits(), timeout, base_url)


@pytest.mark.parametrize("kind", ["httpx", "runtime"])
async def test_call_deadline_bounds_a_stalled_stream(
    autojump_clock: trio.testing.MockClock, server: LLMServer, kind: str
) -> None:
    server.push(
        Reply.stream([openai_chunk({"content": "thinking about it"}), Piece(b"", delay_s=100)])
    )
    url = server.url + "/v1"
    async with _client(kind, httpx.Timeout(10, read=120), url) as client:
        assert reads_by_deadline(client) == (kind == "runtime")
        provider = OpenAIProvider(client=client, base_url=url, call_deadline_s=30)
        start = trio.current_time()
        items, error = await collect_until_error(provider, make_request())

    assert items == [TextChunk("thinking about it")]
    assert trio.current_time() == start + 30
    assert str(error) == "openai: no complete reply within the call deadline of 30 s"


@pytest.mark.parametrize("kind", ["httpx", "runtime"])
async def test_read_timeout_mid_stream_fails_clearly(
    autojump_clock: trio.testing.MockClock, server: LLMServer, kind: str
) -> None:
    server.push(Reply.stream([openai_chunk({"content": "so"}), Piece(b"", delay_s=100)]))
    url = server.url + "/v1"
    async with _client(kind, httpx.Timeout(10, read=20), url) as client:
        provider = OpenAIProvider(client=client, base_url=url)
        start = trio.current_time()
        items, error = await collect_until_error(provider, make_request())

    assert items == [TextChunk("so")]
    assert trio.current_time() == start + 20
    assert "the server sent nothing for too long (ReadTimeout)" in str(error)


# -- cancellation ------------------------------------------------------------------------------


async def test_cancel_while_waiting_for_the_model_closes_the_connection_at_once(
    autojump_clock: trio.testing.MockClock, server: LLMServer, provider: OpenAIProvider
) -> None:
    server.push(Reply.stream([openai_chunk({"content": "slow"}), Piece(b"", delay_s=60)]))
    items: list[Any] = []

    with trio.move_on_after(5):
        async with aclosing(provider.stream(make_request())) as stream:
            async for item in stream:
                items.append(item)  # noqa: PERF401 - keep what came before the cancel
    cancelled_at = trio.current_time()
    await server.wait_disconnects(1)

    assert items == [TextChunk("slow")]
    assert server.disconnects[0].at == cancelled_at
    assert len(server.requests) == 1
    gc.collect()  # a generator left unclosed would warn (an error here) when collected


async def test_cancel_while_the_caller_holds_an_item_closes_the_connection_at_once(
    autojump_clock: trio.testing.MockClock, server: LLMServer, provider: OpenAIProvider
) -> None:
    # The other way a turn is cancelled: in the caller's own await between two items (emitting
    # the delta), while the stream is suspended at a yield.
    server.push(Reply.stream([*openai_text_stream(["a", "b", "c"])[:3], Piece(b"", delay_s=60)]))

    with trio.move_on_after(5):
        async with aclosing(provider.stream(make_request())) as stream:
            async for _ in stream:
                await trio.sleep(10)
    cancelled_at = trio.current_time()
    await server.wait_disconnects(1)

    assert server.disconnects[0].at == cancelled_at
    gc.collect()


# -- history -----------------------------------------------------------------------------------


async def test_history_round_trips_parallel_tool_calls_and_results_in_order(
    server: LLMServer, provider: OpenAIProvider
) -> None:
    calls = [
        {"index": 0, "id": "call_1", "function": {"name": "read", "arguments": '{"path": "a"}'}},
        {"index": 1, "id": "call_2", "function": {"name": "read", "arguments": '{"path": "b"}'}},
    ]
    server.push(
        Reply.stream(
            [
                openai_chunk({"reasoning_content": "two files"}),
                openai_chunk({"content": "Reading both."}),
                openai_chunk({"tool_calls": calls}),
                openai_chunk({}, finish="tool_calls"),
                OPENAI_DONE,
            ]
        ),
        Reply.stream(openai_text_stream(["done"])),
    )
    first = make_request(user("compare a and b"), system="sys")
    turn = assemble(await collect(provider, first))
    results = Message(
        role="user",
        content=(
            ToolResultBlock(tool_use_id="call_1", content="A"),
            ToolResultBlock(tool_use_id="call_2", content="no such file", is_error=True),
            TextBlock(text="(a message injected between turns)"),
        ),
    )

    await collect(provider, make_request(*first.messages, turn, results, system="sys"))

    assert server.requests[1].json["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "compare a and b"},
        {
            "role": "assistant",
            "content": "Reading both.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path":"a"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path":"b"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "A"},
        {"role": "tool", "tool_call_id": "call_2", "content": "Error: no such file"},
        {"role": "user", "content": "(a message injected between turns)"},
    ]


async def test_history_without_text_sends_null_content_and_drops_thinking(
    server: LLMServer, provider: OpenAIProvider
) -> None:
    server.push(Reply.stream(openai_text_stream(["ok"])))
    turn = Message(
        role="assistant",
        content=(
            ThinkingBlock(text="hmm", signature="sig"),
            ToolUseBlock(id="c1", name="bash", input={"command": "ls"}),
        ),
    )
    results = Message(role="user", content=(ToolResultBlock(tool_use_id="c1", content="x"),))

    await collect(provider, make_request(user("go"), turn, results))

    assert server.requests[0].json["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command":"ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
    ]


# -- the key -----------------------------------------------------------------------------------


def test_describe_and_repr_never_show_the_key() -> None:
    provider = OpenAIProvider(
        client=httpx.AsyncClient(), api_key=KEY, base_url="https://user:pw@example.com/v1?k=v"
    )

    assert isinstance(provider, Provider)
    assert provider.describe() == {
        "provider": "openai",
        "model": "gpt-4.1",
        "base_url": "https://example.com/v1",
        "max_retries": 4,
        "call_deadline_s": 600.0,
    }
    assert KEY not in repr(provider)
    assert KEY not in str(provider.describe())


async def test_the_key_appears_in_no_log_line_and_no_error(
    autojump_clock: trio.testing.MockClock,
    server: LLMServer,
    provider: OpenAIProvider,
    logs: list[MutableMapping[str, Any]],
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)  # httpx and httpcore log every request at DEBUG
    echo = f"bad key {KEY}"
    server.push(
        Reply.error(429, echo, headers=[("retry-after", "1")]),
        Reply.error(500, echo),
        Reply.stream([openai_chunk({"content": "x"}), sse({"error": {"message": echo}})]),
        Reply.error(403, echo),
        Reply.stream([sse(f"not json {KEY}")]),
    )
    errors = []
    for _ in range(3):
        _, error = await collect_until_error(provider, make_request())
        errors.append(error_chain(error))

    outputs = [
        *errors,
        *(repr(e) for e in logs),
        caplog.text,
        *capsys.readouterr(),
    ]
    assert logs, "the retries should have been logged"
    assert caplog.text, "httpx should have logged its requests"
    for output in outputs:
        assert KEY not in output
    assert all("***" in e for e in errors)


async def test_failure_is_a_provider_error_the_loop_can_catch(
    server: LLMServer, provider: OpenAIProvider
) -> None:
    server.push(Reply.error(400, "context too long"))

    with pytest.raises(ProviderError, match="context too long"):
        await collect(provider, make_request())
