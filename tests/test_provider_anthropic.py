"""The ``anthropic`` provider against a real HTTP server on loopback, streaming SSE."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator, MutableMapping
from contextlib import aclosing
from typing import Any

import httpx
import pytest
import structlog
import trio
from llm_server import (
    LLMServer,
    Piece,
    Reply,
    anthropic_block,
    anthropic_end,
    anthropic_event,
    anthropic_message_start,
    anthropic_text_block,
    anthropic_text_stream,
    anthropic_thinking_block,
    anthropic_tool_block,
    assemble,
    collect,
    collect_until_error,
    error_chain,
    make_request,
    split_inside,
    user,
)

from runtime.core._messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from runtime.core._provider import (
    Provider,
    RetryNotice,
    TextChunk,
    ThinkingChunk,
    ToolCall,
    ToolSpec,
    TurnEnd,
)
from runtime.providers import AnthropicProvider, RetryPolicy
from runtime.providers._http import CUT_TOOL_CALL
from runtime.providers._pool import PoolLimits, make_client

KEY = "sk-ant-test-DO-NOT-LEAK-0123456789abcdef"


@pytest.fixture
async def server(nursery: trio.Nursery) -> LLMServer:
    server = LLMServer()
    await nursery.start(server.serve)
    return server


@pytest.fixture
async def provider(server: LLMServer) -> AsyncIterator[AnthropicProvider]:
    # The client open_provider makes (its pool, runtime/providers/_pool.py), so every test
    # here runs on it.
    timeouts = httpx.Timeout(10, read=120)
    async with make_client(PoolLimits(), timeouts, server.url) as client:
        yield AnthropicProvider(
            client=client,
            base_url=server.url,
            api_key=KEY,
            model="claude-test",
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


def stream(*blocks: list[bytes], stop: str = "end_turn", input_tokens: int = 25) -> Reply:
    events = [anthropic_message_start(input_tokens), anthropic_event("ping")]
    for block in blocks:
        events += block
    return Reply.stream([*events, *anthropic_end(stop, 9)])


def anthropic_error(status: int, kind: str, message: str, **kwargs: Any) -> Reply:
    return Reply.error(status, message, kind=kind, anthropic=True, **kwargs)


# -- streaming ---------------------------------------------------------------------------------


async def test_text_stream_yields_each_delta_then_one_turn_end(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    server.push(Reply.stream(anthropic_text_stream(["Hel", "lo", " wörld"], usage=(40, 6))))

    items = await collect(provider, make_request())

    assert items == [
        TextChunk("Hel"),
        TextChunk("lo"),
        TextChunk(" wörld"),
        TurnEnd(stop_reason="end_turn", input_tokens=40, output_tokens=6),
    ]


async def test_request_wire_format(server: LLMServer, provider: AnthropicProvider) -> None:
    server.push(Reply.stream(anthropic_text_stream(["ok"])))
    tool = ToolSpec(
        name="bash",
        description="Run a command.",
        input_schema={"type": "object", "properties": {"command": {"type": "string"}}},
    )

    await collect(provider, make_request(user("hi"), system="Be brief.", tools=[tool]))

    [request] = server.requests
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["accept"] == "text/event-stream"
    assert "authorization" not in request.headers
    assert request.json == {
        "model": "claude-test",
        "max_tokens": 4096,
        "system": "Be brief.",
        "stream": True,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "tools": [
            {
                "name": "bash",
                "description": "Run a command.",
                "input_schema": {
                    "type": "object",
                    "properties": {"command": {"type": "string"}},
                },
            }
        ],
    }


async def test_thinking_budget_enables_thinking_on_top_of_max_tokens(
    server: LLMServer,
) -> None:
    server.push(Reply.stream(anthropic_text_stream(["ok"])))
    async with httpx.AsyncClient() as client:
        provider = AnthropicProvider(client=client, base_url=server.url, thinking_budget=2048)
        await collect(provider, make_request())

    body = server.requests[0].json
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 4096 + 2048


async def test_thinking_then_text_ends_the_thinking_block_with_its_signature(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    server.push(
        stream(
            anthropic_thinking_block(0, ["Let me ", "think."], signature="EqQBCkYIBx=="),
            anthropic_text_block(1, ["The answer", " is 4."]),
        )
    )

    items = await collect(provider, make_request())

    assert items == [
        ThinkingChunk("Let me "),
        ThinkingChunk("think."),
        ThinkingChunk("", signature="EqQBCkYIBx=="),
        TextChunk("The answer"),
        TextChunk(" is 4."),
        TurnEnd(stop_reason="end_turn", input_tokens=25, output_tokens=9),
    ]


async def test_parallel_tool_calls_with_input_split_mid_json_and_mid_utf8(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    reply = stream(
        anthropic_text_block(0, ["Looking."]),
        anthropic_tool_block(1, "toolu_1", "read", ['{"path": "/tmp/r', 'ésumé.md"}']),
        anthropic_tool_block(
            2, "toolu_2", "grep", ["", '{"pattern": "caf', 'é 🍵", "pa', 'th": "."}']
        ),
        stop="tool_use",
    )
    body = b"".join(p.data for p in reply.pieces)
    server.push(Reply.stream(split_inside(body, "🍵")))

    items = await collect(provider, make_request())

    assert items == [
        TextChunk("Looking."),
        ToolCall("toolu_1", "read", {"path": "/tmp/résumé.md"}),
        ToolCall("toolu_2", "grep", {"pattern": "café 🍵", "path": "."}),
        TurnEnd(stop_reason="tool_use", input_tokens=25, output_tokens=9),
    ]


async def test_tool_call_without_input_deltas_has_empty_input(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    server.push(stream(anthropic_tool_block(0, "toolu_1", "glob", []), stop="tool_use"))

    items = await collect(provider, make_request())

    assert items[0] == ToolCall("toolu_1", "glob", {})


async def test_usage_counts_cached_input_and_the_final_output(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    start = anthropic_message_start(
        10, cache_creation_input_tokens=100, cache_read_input_tokens=1000
    )
    server.push(
        Reply.stream([start, *anthropic_text_block(0, ["ok"]), *anthropic_end("end_turn", 77)])
    )

    items = await collect(provider, make_request())

    # The cached parts are counted in the input, and said apart for their price (docs/costs.md).
    assert items[-1] == TurnEnd(stop_reason="end_turn", input_tokens=1110, output_tokens=77,
                                cache_read_tokens=1000, cache_write_tokens=100)


@pytest.mark.parametrize(
    ("api_stop", "stop"),
    [
        ("end_turn", "end_turn"),
        ("tool_use", "tool_use"),
        ("max_tokens", "max_tokens"),
        ("stop_sequence", "end_turn"),
        ("refusal", "refusal"),
    ],
)
async def test_stop_reason_maps(
    server: LLMServer, provider: AnthropicProvider, api_stop: str, stop: str
) -> None:
    server.push(stream(anthropic_text_block(0, ["x"]), stop=api_stop))

    items = await collect(provider, make_request())

    assert isinstance(items[-1], TurnEnd)
    assert items[-1].stop_reason == stop


async def test_tool_call_cut_off_by_max_tokens_is_answered_with_an_error(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    """Issue 21, item 21: the model learns its call was cut, and can make it again smaller."""
    server.push(
        stream(
            anthropic_text_block(0, ["Writing."]),
            anthropic_tool_block(1, "toolu_1", "write", ['{"content": "very lo']),
            stop="max_tokens",
        )
    )

    items = await collect(provider, make_request())

    assert items == [
        TextChunk("Writing."),
        ToolCall("toolu_1", "write", {}, CUT_TOOL_CALL),
        TurnEnd(stop_reason="max_tokens", input_tokens=25, output_tokens=9),
    ]


async def test_llama_cpp_error_event_keeps_its_message(
    autojump_clock: trio.testing.MockClock, server: LLMServer, provider: AnthropicProvider
) -> None:
    """Issue 21, item 19: ``event: error`` with llama.cpp's bare ``{"code", "message",
    "type"}`` is an error with the server's message (a 500: retried, then final)."""
    bare = (
        b"event: error\n"
        b'data: {"code":500,"message":"failed to load model ' + KEY.encode()
        + b'","type":"server_error"}\n\n'
    )
    server.push(*[Reply.stream([bare]) for _ in range(4)])

    items, error = await collect_until_error(provider, make_request())

    assert [type(i) for i in items] == [RetryNotice] * 3
    message = str(error)
    assert "failed to load model" in message
    assert "(server_error)" in message
    assert KEY not in message
    assert "message_stop" not in message


async def test_the_event_name_says_error_even_when_the_data_says_nothing(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    server.push(Reply.stream([b'event: error\ndata: {"message":"bad request body"}\n\n']))

    _, error = await collect_until_error(provider, make_request())

    assert "bad request body" in str(error)


async def test_invalid_tool_input_fails_the_turn(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    server.push(stream(anthropic_tool_block(0, "toolu_1", "write", ["{oops"]), stop="tool_use"))

    _, error = await collect_until_error(provider, make_request())

    assert "input for tool 'write' is not a valid JSON object" in str(error)


async def test_unknown_events_and_blocks_are_skipped(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    server.push(
        stream(
            [anthropic_event("some_future_event", detail=1)],
            anthropic_block(0, {"type": "redacted_thinking", "data": "opaque"}, []),
            anthropic_block(1, {"type": "server_tool_use", "id": "srv", "name": "web"}, []),
            anthropic_text_block(2, ["ok"]),
        )
    )

    items = await collect(provider, make_request())

    assert items[:-1] == [TextChunk("ok")]


# -- retries -----------------------------------------------------------------------------------


async def test_429_waits_for_retry_after_then_succeeds(
    autojump_clock: trio.testing.MockClock,
    server: LLMServer,
    provider: AnthropicProvider,
    logs: list[MutableMapping[str, Any]],
) -> None:
    server.push(
        anthropic_error(
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
            headers=[("retry-after", "12")],
        ),
        Reply.stream(anthropic_text_stream(["ok"])),
    )

    items = await collect(provider, make_request())

    # The retry is told to the loop first (it becomes a provider_retry event), then the reply.
    notice, text = items[:2]
    assert isinstance(notice, RetryNotice)
    assert (notice.attempt, notice.delay_s) == (1, 12)
    assert "HTTP 429" in notice.reason
    assert KEY not in notice.reason
    assert text == TextChunk("ok")
    first, second = server.requests
    assert second.at == first.at + 12
    [retry] = [e for e in logs if e["event"] == "provider.retry"]
    assert (retry["status"], retry["delay_s"]) == (429, 12)
    assert "(rate_limit_error)" in retry["reason"]


async def test_overloaded_529_twice_then_success(
    autojump_clock: trio.testing.MockClock, server: LLMServer, provider: AnthropicProvider
) -> None:
    server.push(
        anthropic_error(529, "overloaded_error", "Overloaded"),
        anthropic_error(500, "api_error", "Internal server error"),
        Reply.stream(anthropic_text_stream(["ok"])),
    )

    items = await collect(provider, make_request())

    assert [(n.attempt, n.delay_s) for n in items if isinstance(n, RetryNotice)] == [
        (1, 0.5),
        (2, 1.0),
    ]
    assert items[2] == TextChunk("ok")
    times = [r.at for r in server.requests]
    # RetryPolicy(jitter=0): 0.5 s, then 1 s; the virtual clock lands exactly on each wake-up.
    assert times[1] == times[0] + 0.5  # noqa: RUF069
    assert times[2] == times[1] + 1.0  # noqa: RUF069


async def test_should_retry_header_overrides_the_status(
    autojump_clock: trio.testing.MockClock, server: LLMServer, provider: AnthropicProvider
) -> None:
    server.push(
        anthropic_error(409, "conflict", "try again", headers=[("x-should-retry", "true")]),
        anthropic_error(503, "api_error", "do not", headers=[("x-should-retry", "false")]),
    )

    _, error = await collect_until_error(provider, make_request())

    assert len(server.requests) == 2
    assert str(error) == "anthropic: HTTP 503 Service Unavailable: do not (api_error)"


async def test_401_fails_at_once_with_the_server_message_and_never_the_key(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    server.push(anthropic_error(401, "authentication_error", f"invalid x-api-key {KEY}"))

    items, error = await collect_until_error(provider, make_request())

    assert items == []
    assert len(server.requests) == 1
    assert str(error) == (
        "anthropic: HTTP 401 Unauthorized: invalid x-api-key *** (authentication_error)"
    )
    assert KEY not in error_chain(error)


async def test_error_event_before_any_output_is_retried(
    autojump_clock: trio.testing.MockClock, server: LLMServer, provider: AnthropicProvider
) -> None:
    overloaded = anthropic_event(
        "error", error={"type": "overloaded_error", "message": "Overloaded"}
    )
    server.push(
        Reply.stream([anthropic_message_start(), anthropic_event("ping"), overloaded]),
        Reply.stream(anthropic_text_stream(["ok"])),
    )

    items = await collect(provider, make_request())

    assert isinstance(items[0], RetryNotice)
    assert "Overloaded" in items[0].reason
    assert items[1] == TextChunk("ok")
    assert len(server.requests) == 2


# -- failures mid-stream -----------------------------------------------------------------------


async def test_error_event_after_output_fails_with_its_message(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    overloaded = anthropic_event(
        "error", error={"type": "overloaded_error", "message": "Overloaded"}
    )
    server.push(
        Reply.stream(
            [
                anthropic_message_start(),
                anthropic_event(
                    "content_block_start", index=0, content_block={"type": "text", "text": ""}
                ),
                anthropic_event(
                    "content_block_delta", index=0, delta={"type": "text_delta", "text": "Half"}
                ),
                overloaded,
            ]
        )
    )

    items, error = await collect_until_error(provider, make_request())

    assert items == [TextChunk("Half")]
    assert str(error) == (
        "anthropic: error in the stream: Overloaded (overloaded_error)"
        " (the reply had started streaming, so it is not retried)"
    )
    assert len(server.requests) == 1


async def test_connection_dropped_mid_stream_fails_without_retry(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    events = anthropic_text_stream(["partial", " answer"])
    cut = len(b"".join(events[:4])) + 5  # start, ping, block start, "partial", a bit more
    server.push(Reply.stream(events, drop_after_bytes=cut))

    items, error = await collect_until_error(provider, make_request())

    assert items == [TextChunk("partial")]
    assert "connection failed" in str(error)
    assert "not retried" in str(error)
    assert len(server.requests) == 1


async def test_invalid_json_line_fails_the_turn(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    events = anthropic_text_stream(["fine"])
    garbage = b'event: content_block_delta\ndata: {"type": "content_block_delta", "ind\n\n'
    server.push(Reply.stream([*events[:4], garbage, *events[4:]]))

    items, error = await collect_until_error(provider, make_request())

    assert items == [TextChunk("fine")]
    assert str(error).startswith("anthropic: invalid JSON in the 'content_block_delta' event")


async def test_stream_ending_before_message_stop_fails(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    events = anthropic_text_stream(["fine"])
    server.push(Reply.stream(events[:-1]))

    items, error = await collect_until_error(provider, make_request())

    assert items == [TextChunk("fine")]
    assert "the stream ended before message_stop" in str(error)


async def test_delta_for_a_block_never_started_fails(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    delta = anthropic_event(
        "content_block_delta", index=3, delta={"type": "input_json_delta", "partial_json": "{"}
    )
    server.push(Reply.stream([anthropic_message_start(), delta]))

    _, error = await collect_until_error(provider, make_request())

    assert "a delta for block 3, which was never started" in str(error)


# -- cancellation ------------------------------------------------------------------------------


async def test_cancel_mid_stream_closes_the_connection_at_once(
    autojump_clock: trio.testing.MockClock, server: LLMServer, provider: AnthropicProvider
) -> None:
    events = anthropic_text_stream(["slow"])
    server.push(Reply.stream([*events[:4], Piece(b"", delay_s=60), *events[4:]]))
    items: list[Any] = []

    with trio.move_on_after(3):
        async with aclosing(provider.stream(make_request())) as turn:
            async for item in turn:
                items.append(item)  # noqa: PERF401 - keep what came before the cancel
    cancelled_at = trio.current_time()
    await server.wait_disconnects(1)

    assert items == [TextChunk("slow")]
    assert server.disconnects[0].at == cancelled_at
    gc.collect()  # a generator left unclosed would warn (an error here) when collected


# -- history -----------------------------------------------------------------------------------


async def test_history_round_trips_thinking_signatures_and_parallel_tool_calls(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    server.push(
        stream(
            anthropic_thinking_block(0, ["Both files."], signature="sig-1"),
            anthropic_tool_block(1, "toolu_a", "read", ['{"path": "a"}']),
            anthropic_tool_block(2, "toolu_b", "read", ['{"path": "b"}']),
            stop="tool_use",
        ),
        Reply.stream(anthropic_text_stream(["done"])),
    )
    first = make_request(user("compare a and b"))
    turn = assemble(await collect(provider, first))
    results = Message(
        role="user",
        content=(
            ToolResultBlock(tool_use_id="toolu_a", content="A"),
            ToolResultBlock(tool_use_id="toolu_b", content="no such file", is_error=True),
            TextBlock(text="(a message injected between turns)"),
        ),
    )

    await collect(provider, make_request(*first.messages, turn, results))

    assert server.requests[1].json["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "compare a and b"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Both files.", "signature": "sig-1"},
                {"type": "tool_use", "id": "toolu_a", "name": "read", "input": {"path": "a"}},
                {"type": "tool_use", "id": "toolu_b", "name": "read", "input": {"path": "b"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "A"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": "no such file",
                    "is_error": True,
                },
                {"type": "text", "text": "(a message injected between turns)"},
            ],
        },
    ]


async def test_history_merges_same_role_messages_and_drops_what_the_api_refuses(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    server.push(Reply.stream(anthropic_text_stream(["ok"])))
    history = (
        user("first"),
        user("second"),
        Message(
            role="assistant",
            content=(
                ThinkingBlock(text="unsigned, from another provider"),
                TextBlock(text=""),
                ToolUseBlock(id="t1", name="bash", input={"command": "ls"}),
            ),
        ),
        Message(role="assistant", content=()),
        # Text before the result in the neutral history; the API wants results first.
        Message(
            role="user",
            content=(TextBlock(text="also"), ToolResultBlock(tool_use_id="t1", content="x")),
        ),
    )

    await collect(provider, make_request(*history))

    assert server.requests[0].json["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}}
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "x"},
                {"type": "text", "text": "also"},
            ],
        },
    ]


# -- the key -----------------------------------------------------------------------------------


def test_describe_and_repr_never_show_the_key() -> None:
    provider = AnthropicProvider(client=httpx.AsyncClient(), api_key=KEY)

    assert isinstance(provider, Provider)
    assert provider.describe() == {
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "base_url": "https://api.anthropic.com",
        "max_retries": 4,
        "call_deadline_s": 600.0,
        "thinking_budget": None,
    }
    assert KEY not in repr(provider)


async def test_the_key_appears_in_no_log_line_and_no_error(
    autojump_clock: trio.testing.MockClock,
    server: LLMServer,
    provider: AnthropicProvider,
    logs: list[MutableMapping[str, Any]],
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    echo = f"key {KEY} was refused"
    server.push(
        anthropic_error(529, "overloaded_error", echo),
        Reply.stream([anthropic_event("error", error={"type": "api_error", "message": echo})]),
        anthropic_error(400, "invalid_request_error", echo),
        Reply.stream([anthropic_message_start(), b"event: ping\ndata: " + KEY.encode() + b"\n\n"]),
    )
    errors = []
    for _ in range(2):
        _, error = await collect_until_error(provider, make_request())
        errors.append(error_chain(error))

    assert [e for e in logs if e["event"] == "provider.retry"]
    for output in [*errors, *(repr(e) for e in logs), caplog.text, *capsys.readouterr()]:
        assert KEY not in output
    assert all("***" in e for e in errors)
