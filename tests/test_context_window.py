"""Context accounting: model windows, the meter's incremental count, "prompt too long" errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.core._context_window import (
    DEFAULT_CONTEXT_WINDOW,
    ContextMeter,
    Overflow,
    context_window_for,
    history_chars,
    message_chars,
    parse_overflow,
)
from runtime.core._messages import Message, TextBlock, ToolResultBlock, ToolUseBlock


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("claude-sonnet-4-5", 200_000),
        ("claude-3-5-haiku-20241022", 200_000),
        ("anthropic/claude-opus-4", 200_000),
        ("gpt-4o-mini", 128_000),
        ("gpt-4.1", 1_047_576),
        ("gpt-4", 8_192),
        ("gpt-4-32k", 32_768),
        ("gpt-3.5-turbo", 16_385),
        ("gpt-5-mini", 272_000),
        ("o3-mini", 200_000),
        ("o1-mini", 128_000),
        ("gemini-2.5-pro", 1_048_576),
        ("meta-llama/Llama-3.1-8B-Instruct", 131_072),
        ("llama3.2:3b", 131_072),
        ("llama3:8b", 8_192),
        ("qwen2.5-coder:7b", 32_768),
        ("mistral-large-latest", 131_072),
        ("deepseek-chat", 65_536),
        ("some-local-model", DEFAULT_CONTEXT_WINDOW),
        ("scripted", DEFAULT_CONTEXT_WINDOW),
    ],
)
def test_known_model_families_have_their_window_and_others_the_default(
    model: str, window: int
) -> None:
    assert context_window_for(model) == window


def user(text: str) -> Message:
    return Message(role="user", content=(TextBlock(text=text),))


def assistant(text: str, *calls: tuple[str, dict[str, object]]) -> Message:
    blocks: list[TextBlock | ToolUseBlock] = [TextBlock(text=text)]
    blocks += [ToolUseBlock(id=cid, name="bash", input=args) for cid, args in calls]
    return Message(role="assistant", content=tuple(blocks))


def results(*pairs: tuple[str, str]) -> Message:
    return Message(
        role="user", content=tuple(ToolResultBlock(tool_use_id=i, content=c) for i, c in pairs)
    )


def test_the_meter_counts_only_what_was_appended() -> None:
    meter = ContextMeter(1000, fixed=40)
    history = [user("x" * 400)]
    assert meter.sync(history) == round((40 + message_chars(history[0])) / 4)
    history.append(assistant("ok", ("t1", {"command": "ls"})))
    history.append(results(("t1", "y" * 800)))
    meter.sync(history)
    assert meter.chars == 40 + history_chars(history)


def test_a_message_joined_to_the_last_one_is_counted_once() -> None:
    # A user message delivered at a turn boundary is joined to a trailing user message.
    meter = ContextMeter(1000)
    history = [user("a" * 100), assistant("b"), results(("t", "c" * 50))]
    meter.sync(history)
    grown = Message(role="user", content=(*history[-1].content, TextBlock(text="d" * 30)))
    history[-1] = grown
    meter.sync(history)
    assert meter.chars == history_chars(history)


def test_a_rewritten_history_is_counted_anew() -> None:
    meter = ContextMeter(1000)
    history = [user("a" * 100), assistant("b" * 100), user("c" * 100), assistant("d" * 900)]
    meter.sync(history)
    shorter = [user("a" * 100), assistant("z")]
    meter.sync(shorter)
    assert meter.chars == history_chars(shorter)
    meter.reset(history)
    assert meter.chars == history_chars(history)


def test_the_providers_report_anchors_the_size_and_calibrates_the_ratio() -> None:
    meter = ContextMeter(100_000)
    history = [user("w" * 3000)]
    meter.sync(history)
    meter.reported(1000)  # the request of 3,000-odd characters was 1,000 tokens
    assert meter.tokens == 1000
    assert meter.ratio == pytest.approx(history_chars(history) / 1000)
    history.append(assistant("v" * 3000))
    # What was appended is estimated with the calibrated ratio, on top of the report.
    assert meter.sync(history) == 1000 + round(message_chars(history[-1]) / meter.ratio)


def test_a_report_of_zero_changes_nothing() -> None:
    meter = ContextMeter(1000)
    meter.sync([user("q" * 400)])
    before = meter.tokens
    meter.reported(0)
    assert meter.tokens == before
    assert not meter.calibrated


def test_scenario_figures_drive_the_size_whatever_the_characters() -> None:
    # A scripted turn can say its request was 90,000 tokens: the meter believes it.
    meter = ContextMeter(100_000)
    meter.sync([user("tiny")])
    meter.reported(90_000)
    assert meter.tokens == 90_000


def test_a_smaller_window_named_by_the_provider_is_believed() -> None:
    meter = ContextMeter(128_000)
    meter.learn_window(8_192)
    assert meter.window == 8_192
    meter.learn_window(200_000)  # never larger than the table says
    assert meter.window == 8_192


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["append", "join", "sync"]), st.text(max_size=50), st.booleans()),
        max_size=40,
    )
)
def test_the_incremental_count_always_equals_a_full_count(ops: list[tuple[str, str, bool]]) -> None:
    meter = ContextMeter(10_000, fixed=7)
    history: list[Message] = [user("start")]
    meter.sync(history)
    for op, text, tool in ops:
        if op == "append":
            role = "assistant" if history[-1].role == "user" else "user"
            if role == "assistant":
                history.append(
                    assistant(text, ("id", {"command": text})) if tool else assistant(text)
                )
            else:
                history.append(results(("id", text)) if tool else user(text))
        elif op == "join" and history[-1].role == "user":
            last = history[-1]
            history[-1] = Message(role="user", content=(*last.content, TextBlock(text=text)))
        else:
            meter.sync(history)
    meter.sync(history)
    assert meter.chars == 7 + history_chars(history)


# -- "prompt too long" errors, as the services word them ------------------------------------

OPENAI_BODY = (
    '{"error": {"message": "This model\'s maximum context length is 128000 tokens. However, '
    'your messages resulted in 130512 tokens. Please reduce the length of the messages.", '
    '"type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}'
)
ANTHROPIC_BODY = (
    '{"type":"error","error":{"type":"invalid_request_error",'
    '"message":"prompt is too long: 208310 tokens > 200000 maximum"}}'
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (OPENAI_BODY, Overflow(tokens=130_512, limit=128_000)),
        (ANTHROPIC_BODY, Overflow(tokens=208_310, limit=200_000)),
        (
            "This model's maximum context length is 4096 tokens. However, you requested 5000 "
            "tokens (4000 in the messages, 1000 in the completion). Please reduce the length of "
            "the messages or completion.",  # vLLM and older OpenAI
            Overflow(tokens=5000, limit=4096),
        ),
        (
            "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, "
            "decrease input length or `max_tokens` and try again",
            Overflow(tokens=188_240, limit=200_000),
        ),
        (
            '{"error":{"code":400,"message":"the request exceeds the available context size, '
            'try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,'
            '"n_ctx":4096}}',  # llama.cpp server
            Overflow(tokens=5000, limit=4096),
        ),
        (
            "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 "
            "maximum context length",  # Mistral
            Overflow(tokens=40_000, limit=32_768),
        ),
        (
            "The input token count (1200000) exceeds the maximum number of tokens allowed "
            "(1048576).",  # Gemini
            Overflow(tokens=1_200_000, limit=1_048_576),
        ),
        (
            '{"error": {"message": "Your input exceeds the context window of this model. Please '
            'adjust your input and try again.", "code": "context_length_exceeded"}}',
            Overflow(),
        ),
    ],
)
def test_too_long_errors_are_recognised_with_their_sizes(text: str, expected: Overflow) -> None:
    assert parse_overflow(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        '{"error": {"message": "Invalid API key", "type": "invalid_request_error"}}',
        "max_tokens: 300000 > 128000, which is the maximum allowed number of output tokens",
        "Rate limit reached for requests",
        "model not found",
    ],
)
def test_other_errors_are_not_taken_for_too_long(text: str) -> None:
    assert parse_overflow(text) is None
