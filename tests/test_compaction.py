"""Compaction: trimming, the summary's cut, the history's validity (property-tested), and one
agent's :class:`Compactor` against the scripted provider."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.core._compaction import (
    PINNED_HEADER,
    SUMMARY_HEADER,
    Compactor,
    build_compacted,
    compacted_turns,
    history_problems,
    split_for_summary,
    transcript,
    trim_tool_results,
)
from runtime.core._errors import ContextOverflowError, ProviderError
from runtime.core._events import ContextCompacted
from runtime.core._messages import (
    AgentState,
    Block,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from runtime.providers._anthropic import wire_messages as anthropic_wire
from runtime.providers._openai import wire_messages as openai_wire
from runtime.providers._scenario import Scenario
from runtime.providers._scripted import ScriptedProvider
from tools import builtin_tools


def user(text: str) -> Message:
    return Message(role="user", content=(TextBlock(text=text),))


def call(cid: str, command: str = "ls") -> ToolUseBlock:
    return ToolUseBlock(id=cid, name="bash", input={"command": command})


def turn(text: str, *calls: ToolUseBlock) -> Message:
    return Message(role="assistant", content=(TextBlock(text=text), *calls))


def results(*pairs: tuple[str, str]) -> Message:
    return Message(
        role="user", content=tuple(ToolResultBlock(tool_use_id=i, content=c) for i, c in pairs)
    )


def describe(use: ToolUseBlock | None) -> str:
    return f"{use.name}: {use.input.get('command')}" if use is not None else "tool result"


def tool_turns(n: int, size: int = 1000) -> list[Message]:
    """A task, then *n* turns each running one bash call with a *size*-character result."""
    history = [user("the task")]
    for i in range(n):
        history.append(turn(f"step {i}", call(f"t{i}", f"cmd {i}")))
        history.append(results((f"t{i}", f"{i}" * size)))
    return history


# -- trim ---------------------------------------------------------------------------------


def test_trim_stubs_results_older_than_the_last_turns_and_keeps_their_ids() -> None:
    history = tool_turns(6)
    trimmed, stubbed = trim_tool_results(history, keep_turns=3, cap_chars=10_000, describe=describe)
    assert stubbed == 3
    assert len(trimmed) == len(history)
    old = [b for m in trimmed[:7] for b in m.content if isinstance(b, ToolResultBlock)]
    assert [b.tool_use_id for b in old] == ["t0", "t1", "t2"]
    assert old[0].content == (
        "[bash: cmd 0: output of 1,000 characters elided to save context; the full output is "
        "in the run's trace; run the tool again if you need it]"
    )
    assert trimmed[7:] == history[7:]  # the last three turns are untouched
    assert history_problems(trimmed) == []


def test_trim_stubs_a_huge_recent_result_and_leaves_short_ones() -> None:
    history = [
        user("task"),
        turn("a", call("t1"), call("t2")),
        results(("t1", "x" * 50_000), ("t2", "ok")),
    ]
    trimmed, stubbed = trim_tool_results(history, keep_turns=3, cap_chars=10_000, describe=describe)
    assert stubbed == 1
    first, second = trimmed[2].content
    assert isinstance(first, ToolResultBlock)
    assert "output of 50,000 characters elided" in first.content
    assert second == history[2].content[1]


def test_trim_keeps_an_error_result_an_error() -> None:
    history = [user("task"), turn("a", call("t1")), results(("t1", "e" * 500))]
    history[2] = Message(
        role="user", content=(ToolResultBlock(tool_use_id="t1", content="e" * 500, is_error=True),)
    )
    history += [turn("b"), user("more"), turn("c"), user("more"), turn("d"), user("again")]
    trimmed, stubbed = trim_tool_results(history, keep_turns=3, cap_chars=10_000, describe=describe)
    assert stubbed == 1
    block = trimmed[2].content[0]
    assert isinstance(block, ToolResultBlock)
    assert block.is_error


def test_nothing_to_trim_changes_nothing() -> None:
    history = tool_turns(2, size=10)
    trimmed, stubbed = trim_tool_results(history, keep_turns=1, cap_chars=100, describe=describe)
    assert stubbed == 0
    assert all(a is b for a, b in zip(trimmed, history, strict=True))


# -- the summary's cut --------------------------------------------------------------------


def test_the_tail_starts_at_an_assistant_message_and_the_task_stays() -> None:
    history = tool_turns(6)
    split = split_for_summary(history, keep_turns=2)
    assert split is not None
    assert split.tail == tuple(history[-4:])
    assert split.tail[0].role == "assistant"
    assert [b.text for b in split.head] == ["the task"]
    assert split.middle == tuple(history[1:-4])
    assert split.turns == 4
    new = build_compacted(split, "what happened")
    assert new[1:] == history[-4:]
    assert new[0].content[0] == TextBlock(text="the task")
    summary = new[0].content[1]
    assert isinstance(summary, TextBlock)
    assert summary.text == f"{SUMMARY_HEADER}: 9 messages, 4 turns]\nwhat happened"
    # The scripted provider counts the summarised turns: turn numbering goes on.
    assert compacted_turns(new) + sum(m.role == "assistant" for m in new) == 6


def test_a_big_tail_keeps_fewer_turns() -> None:
    history = tool_turns(6, size=5000)
    split = split_for_summary(history, keep_turns=3, tail_chars=6000)
    assert split is not None
    assert split.tail == tuple(history[-2:])  # one turn: two would be over 6,000 characters


def test_an_earlier_summary_is_summarised_again_not_kept_beside_the_new_one() -> None:
    history = tool_turns(6)
    first = build_compacted(split_for_summary(history, keep_turns=2), "first summary")  # type: ignore[arg-type]
    first += [turn("more", call("u1")), results(("u1", "r" * 300)), turn("again", call("u2"))]
    first += [results(("u2", "s" * 300))]
    split = split_for_summary(first, keep_turns=1)
    assert split is not None
    assert [b.text for b in split.head] == ["the task"]
    assert any(
        isinstance(b, TextBlock) and "first summary" in b.text
        for m in split.middle
        for b in m.content
    )
    second = build_compacted(split, "second summary")
    texts = [b.text for b in second[0].content if isinstance(b, TextBlock)]
    assert len(texts) == 2
    assert texts[1].endswith("second summary")
    assert compacted_turns(second) + sum(m.role == "assistant" for m in second) == 8


def test_a_pinned_request_is_kept_verbatim_after_the_summary() -> None:
    history = tool_turns(4)
    split = split_for_summary(history, keep_turns=1)
    assert split is not None
    new = build_compacted(split, "s", pinned="fix the failing test in foo.py")
    last = new[0].content[-1]
    assert isinstance(last, TextBlock)
    assert last.text == f"{PINNED_HEADER}\nfix the failing test in foo.py"
    assert history_problems(new) == []


def test_a_history_with_one_turn_has_nothing_to_summarise() -> None:
    assert split_for_summary([user("task")]) is None
    assert split_for_summary([user("task"), turn("a", call("t")), results(("t", "x"))]) is None


def test_the_transcript_is_bounded_and_keeps_both_ends() -> None:
    history = tool_turns(40, size=3000)
    text = transcript(history, max_chars=20_000)
    assert len(text) < 20_200
    assert text.startswith("[user] the task")
    assert "characters of the conversation left out here" in text
    assert text.rstrip().endswith("characters cut]")  # the last result, cut to 2,000


# -- validity, property-tested ------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """Valid histories: a task, then turns of text, thinking and parallel tool calls, answered
    by results (with, now and then, a user message joined to them), or by a user message."""
    ids = iter(range(1_000_000))
    history: list[Message] = [user(draw(st.sampled_from(["task", "fix it", "x" * 500])))]
    if draw(st.booleans()):  # a history compacted before
        history[0] = Message(
            role="user",
            content=(
                *history[0].content,
                TextBlock(
                    text=f"{SUMMARY_HEADER}: 8 messages, {draw(st.integers(1, 9))} turns]\nold"
                ),
            ),
        )
    for _ in range(draw(st.integers(0, 14))):
        blocks: list[Block] = []
        if draw(st.booleans()):
            blocks.append(ThinkingBlock(text="hmm", signature="sig"))
        blocks.append(TextBlock(text=draw(st.sampled_from(["ok", "looking", "y" * 300]))))
        calls = [
            ToolUseBlock(id=f"c{next(ids)}", name=draw(st.sampled_from(["bash", "read"])), input={})
            for _ in range(draw(st.integers(0, 3)))
        ]
        history.append(Message(role="assistant", content=(*blocks, *calls)))
        if calls:
            answer: list[Block] = [
                ToolResultBlock(
                    tool_use_id=c.id,
                    content="r" * draw(st.sampled_from([0, 10, 300, 5000, 40_000])),
                    is_error=draw(st.booleans()),
                )
                for c in calls
            ]
            if draw(st.integers(0, 4)) == 0:
                answer.append(TextBlock(text="a message typed meanwhile"))
            history.append(Message(role="user", content=tuple(answer)))
        elif draw(st.booleans()):
            history.append(user(draw(st.sampled_from(["go on", "z" * 2000]))))
        else:
            break  # the history ends with the assistant's answer (a finished chat turn)
    return history


def openai_problems(messages: Sequence[Message]) -> list[str]:
    """Chat Completions' rules on the wire: tool messages answer the assistant message just
    before them, and every tool call is answered before anything else comes."""
    wire = openai_wire("system", messages)
    problems = []
    open_calls: set[str] = set()
    for i, m in enumerate(wire[1:], 1):
        if m["role"] == "tool":
            if m["tool_call_id"] not in open_calls:
                problems.append(f"{i}: tool message answers no open call")
            open_calls.discard(m["tool_call_id"])
            continue
        if open_calls:
            problems.append(f"{i}: {m['role']} before every tool call was answered")
        open_calls = {c["id"] for c in m.get("tool_calls", ())}
    return problems


def anthropic_problems(messages: Sequence[Message]) -> list[str]:
    """The Messages API's rules on the wire: user first, roles alternate, a user message's tool
    results come first and answer exactly the tool uses of the message before."""
    wire = anthropic_wire(messages)
    problems = []
    if wire and wire[0]["role"] != "user":
        problems.append("the first message is not a user message")
    for i, m in enumerate(wire):
        if i and wire[i - 1]["role"] == m["role"]:
            problems.append(f"{i}: two {m['role']} messages in a row")
        asked = {b["id"] for b in wire[i - 1]["content"] if b["type"] == "tool_use"} if i else set()
        kinds = [b["type"] for b in m["content"]]
        answered = {b["tool_use_id"] for b in m["content"] if b["type"] == "tool_result"}
        if m["role"] == "user":
            if kinds != sorted(kinds, key=lambda k: k != "tool_result"):
                problems.append(f"{i}: tool results not first")
            if answered != asked and (i + 1 < len(wire) or asked):
                problems.append(f"{i}: answers {sorted(answered)}, asked {sorted(asked)}")
    return problems


def all_problems(messages: Sequence[Message]) -> list[str]:
    return history_problems(messages) + openai_problems(messages) + anthropic_problems(messages)


@settings(max_examples=300, deadline=None)
@given(histories(), st.integers(1, 4), st.sampled_from([500, 5000, 100_000]))
def test_trimming_keeps_any_valid_history_valid(
    history: list[Message], keep: int, cap: int
) -> None:
    assert all_problems(history) == []
    trimmed, _ = trim_tool_results(history, keep_turns=keep, cap_chars=cap, describe=describe)
    assert all_problems(trimmed) == []
    assert [m.role for m in trimmed] == [m.role for m in history]
    ids = [[getattr(b, "tool_use_id", None) for b in m.content] for m in history]
    assert [[getattr(b, "tool_use_id", None) for b in m.content] for m in trimmed] == ids


@settings(max_examples=300, deadline=None)
@given(
    histories(),
    st.integers(1, 4),
    st.sampled_from([None, 2_000, 50_000]),
    st.sampled_from([None, "the request"]),
)
def test_summarising_keeps_any_valid_history_valid(
    history: list[Message], keep: int, tail_chars: int | None, pinned: str | None
) -> None:
    split = split_for_summary(history, keep_turns=keep, tail_chars=tail_chars)
    if split is None:
        assert sum(m.role == "assistant" for m in history[1:]) <= 1
        return
    new = build_compacted(split, "the summary", pinned=pinned)
    assert all_problems(new) == []
    # The tail is the end of the history, verbatim, from an assistant message on.
    assert new[1:] == history[len(history) - len(split.tail) :]
    assert new[1].role == "assistant"
    # The task's own words stay; the summary stands for every turn it replaced.
    task = next(b.text for b in history[0].content if isinstance(b, TextBlock))
    assert new[0].content[0] == TextBlock(text=task)
    before = sum(m.role == "assistant" for m in history) + compacted_turns(history)
    assert sum(m.role == "assistant" for m in new) + compacted_turns(new) == before
    # Compacting again works on the result too.
    more = [user("next")] if new[-1].role == "assistant" else []
    again = split_for_summary([*new, *more], keep_turns=1)
    if again is not None:
        assert all_problems(build_compacted(again, "again")) == []


# -- one agent's compactor, with the scripted provider ------------------------------------


class Recorder:
    """Collects what the compactor emits (the agent's bus.emit, bound)."""

    def __init__(self) -> None:
        self.events: list[tuple[type[Any], dict[str, Any]]] = []

    async def __call__(self, event: Any) -> None:
        own = {a.name: getattr(event, a.name) for a in attrs.fields(type(event))}
        for name in ("seq", "ts", "run_id", "agent_id", "parent_tool_use_id"):
            del own[name]
        self.events.append((type(event), own))


def make_compactor(
    scenario: dict[str, Any], *, window: int, emit: Recorder, prompt: str = "the task"
) -> Compactor:
    return Compactor(
        provider=ScriptedProvider(Scenario.from_obj(scenario)),
        model="scripted",
        agent_type="main",
        agent_id="agent-1",
        window=window,
        threshold=0.8,
        fixed=0,
        tools={t.name: t for t in builtin_tools()},
        emit=emit,
        log=structlog.get_logger("test"),
        prompt=prompt,
        prompt_index=0,
    )


SCENARIO: dict[str, Any] = {"agents": {"main": {"turns": []}}}


async def test_trimming_that_is_enough_asks_no_model() -> None:
    emit = Recorder()
    compactor = make_compactor(SCENARIO, window=4000, emit=emit)
    state = AgentState(agent_id="agent-1", name="main", depth=0, messages=tool_turns(8, 2000))
    await compactor.before_request(state)
    assert [f["method"] for _, f in emit.events] == ["trim"]
    [(cls, fields)] = emit.events
    assert cls is ContextCompacted
    assert fields["tokens_after"] < fields["tokens_before"]
    assert fields["messages_after"] == fields["messages_before"] == 17
    assert state.input_tokens == 0
    assert history_problems(state.messages) == []


async def test_a_summary_follows_when_trimming_is_not_enough_and_its_tokens_count() -> None:
    emit = Recorder()
    scenario = {
        "agents": {
            "main": {"turns": []},
            "compact": {
                "turns": [
                    {
                        "text": "We ran cmd 0 to cmd 8.",
                        "usage": {"input_tokens": 900, "output_tokens": 40},
                    }
                ]
            },
        }
    }
    compactor = make_compactor(scenario, window=3000, emit=emit)
    history = tool_turns(9, 300)
    history[0] = user("the task " + "t" * 4000)  # nothing to trim there: a summary is needed
    history[1:1] = [turn("thinking aloud " + "w" * 3000), user("go on " + "v" * 3000)]
    state = AgentState(agent_id="agent-1", name="main", depth=0, messages=history)
    await compactor.before_request(state)
    methods = [f["method"] for _, f in emit.events]
    assert methods == ["trim", "summary"]
    summary = emit.events[-1][1]
    assert (summary["input_tokens"], summary["output_tokens"]) == (900, 40)
    assert (state.input_tokens, state.output_tokens) == (900, 40)
    assert summary["messages_after"] == len(state.messages) < summary["messages_before"]
    head = state.messages[0].content
    assert isinstance(head[1], TextBlock)
    assert head[1].text.endswith("We ran cmd 0 to cmd 8.")
    assert history_problems(state.messages) == []


async def test_without_a_compact_agent_type_the_summary_is_deterministic() -> None:
    texts = []
    for _ in range(2):
        emit = Recorder()
        compactor = make_compactor(SCENARIO, window=100_000, emit=emit)
        state = AgentState(agent_id="a", name="main", depth=0, messages=tool_turns(6, 400))
        outcome = await compactor.compact(state, summarise=True)
        assert outcome.methods == ("trim", "summary")
        texts.append(state.messages[0].content[1])
    assert texts[0] == texts[1]
    assert isinstance(texts[0], TextBlock)
    assert "Scripted summary of" in texts[0].text
    assert "[user] the task" not in texts[0].text  # the task is not in the summarised part


async def test_the_agents_own_prompt_is_pinned_when_it_was_summarised_away() -> None:
    # A chat turn: the prompt of this turn is deep in the history, not its first message.
    history = [user("first chat message"), turn("answer"), user("do the thing")]
    for i in range(5):
        history += [turn(f"s{i}", call(f"t{i}")), results((f"t{i}", "x" * 200))]
    emit = Recorder()
    compactor = make_compactor(SCENARIO, window=100_000, emit=emit, prompt="do the thing")
    compactor._prompt_index = 2
    state = AgentState(agent_id="a", name="main", depth=0, messages=history)
    await compactor.compact(state, summarise=True)
    blocks = state.messages[0].content
    assert isinstance(blocks[0], TextBlock)
    assert blocks[0].text == "first chat message"
    assert isinstance(blocks[-1], TextBlock)
    assert blocks[-1].text == f"{PINNED_HEADER}\ndo the thing"
    # Compacted again, the pinned request stays pinned, once.
    state.messages += [turn("more", call("u")), results(("u", "y" * 200))]
    state.messages += [turn("again", call("v")), results(("v", "z" * 200))]
    await compactor.compact(state, summarise=True)
    texts = [b.text for b in state.messages[0].content if isinstance(b, TextBlock)]
    assert [f["method"] for _, f in emit.events].count("summary") == 2
    assert sum(t.startswith(PINNED_HEADER) for t in texts) == 1
    assert sum(t.startswith(SUMMARY_HEADER) for t in texts) == 1


async def test_a_failed_summary_leaves_the_trimmed_history_and_says_why() -> None:
    scenario = {"agents": {"main": {"turns": []}, "compact": {"turns": [{"error": "boom"}]}}}
    emit = Recorder()
    compactor = make_compactor(scenario, window=3000, emit=emit)
    state = AgentState(agent_id="a", name="main", depth=0, messages=tool_turns(9, 2000))
    outcome = await compactor.compact(state)
    assert outcome.methods == ("trim",)
    assert outcome.summary_failed == "the summary request failed: boom"
    assert history_problems(state.messages) == []
    # Still over the threshold: the next automatic try waits for the context to grow.
    emit.events.clear()
    await compactor.before_request(state)
    assert emit.events == []


async def test_an_overflow_that_names_the_window_teaches_the_meter() -> None:
    emit = Recorder()
    compactor = make_compactor(SCENARIO, window=128_000, emit=emit)
    state = AgentState(agent_id="a", name="main", depth=0, messages=tool_turns(8, 3000))
    compactor.meter.sync(state.messages)
    exc = ContextOverflowError("too long", tokens=9000, limit=8192)
    await compactor.on_overflow(state, exc)
    assert compactor.window == 8192
    assert emit.events[0][1]["method"] == "trim"
    assert compactor.meter.tokens < 8192


async def test_an_overflow_with_nothing_to_compact_fails_in_plain_words() -> None:
    emit = Recorder()
    compactor = make_compactor(SCENARIO, window=128_000, emit=emit)
    state = AgentState(agent_id="a", name="main", depth=0, messages=[user("x" * 50_000)])
    compactor.meter.sync(state.messages)
    exc = ContextOverflowError(
        "anthropic: HTTP 400 Bad Request: prompt is too long: 12000 tokens > 8000 maximum",
        tokens=12_000,
        limit=8_000,
    )
    with pytest.raises(ProviderError) as info:
        await compactor.on_overflow(state, exc)
    assert str(info.value).startswith(
        "the conversation does not fit the model's context window: about 12,000 tokens for a "
        "window of 8,000, and compacting it did not make enough room"
    )


async def test_a_summary_longer_than_what_it_replaces_is_not_kept_but_its_cost_is() -> None:
    scenario = {
        "agents": {
            "main": {"turns": []},
            "compact": {
                "turns": [
                    {
                        "text": "long-winded " * 200,
                        "usage": {"input_tokens": 300, "output_tokens": 600},
                    }
                ]
            },
        }
    }
    emit = Recorder()
    compactor = make_compactor(scenario, window=100_000, emit=emit)
    history = tool_turns(6, 200)
    state = AgentState(agent_id="a", name="main", depth=0, messages=list(history))
    outcome = await compactor.compact(state, summarise=True)
    assert outcome.methods == ()
    assert outcome.summary_failed == "the summary was no shorter than what it would replace"
    assert state.messages == history
    assert (state.input_tokens, state.output_tokens) == (300, 600)


async def test_too_little_to_summarise_asks_no_model() -> None:
    scenario = {"agents": {"main": {"turns": []}, "compact": {"turns": [{"error": "not asked"}]}}}
    compactor = make_compactor(scenario, window=100_000, emit=Recorder())
    state = AgentState(agent_id="a", name="main", depth=0, messages=tool_turns(4, 10))
    outcome = await compactor.compact(state, summarise=True)
    assert outcome.summary_failed == "too little to summarise"
