"""The scripted provider plays scenario turns exactly, in virtual time."""

from __future__ import annotations

import re
from contextlib import aclosing
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from runtime import (
    Message,
    ModelRequest,
    ProviderError,
    Scenario,
    ScriptedProvider,
    TextBlock,
    TextChunk,
    ThinkingChunk,
    ToolCall,
    ToolUseBlock,
    TurnEnd,
)
from runtime.providers._scripted import _agent_number, chunk_text


def _request(agent_type: str = "main", assistant_turns: int = 0) -> ModelRequest:
    messages = [Message(role="user", content=(TextBlock(text="go"),))]
    for _ in range(assistant_turns):
        messages += [Message(role="assistant", content=(TextBlock(text="x"),)),
                     Message(role="user", content=(TextBlock(text="more"),))]
    return ModelRequest(model="m", system="sys", messages=messages, tools=[],
                        agent_type=agent_type, agent_id="agent-1")


async def _play(provider: ScriptedProvider, request: ModelRequest) -> list[Any]:
    async with aclosing(provider.stream(request)) as stream:
        return [item async for item in stream]


def _provider(**agents: Any) -> ScriptedProvider:
    return ScriptedProvider(Scenario.from_obj({"agents": {"main": {"turns": []}, **agents}}))


def test_text_is_split_into_word_sized_deltas_that_join_back() -> None:
    text = "Hello,  world!\nNext line "
    assert "".join(chunk_text(text)) == text
    assert chunk_text("a b c") == ["a ", "b ", "c"]


async def test_a_turn_streams_thinking_then_text_then_tool_calls_then_its_end() -> None:
    provider = _provider(w={"turns": [{
        "thinking": "hmm ok", "text": "doing it",
        "tool_calls": [{"name": "bash", "input": {"command": "ls"}},
                       {"name": "read", "input": {"path": "a"}}],
        "usage": {"input_tokens": 11, "output_tokens": 22}}]})
    items = await _play(provider, _request("w"))
    assert items == [
        ThinkingChunk("hmm "), ThinkingChunk("ok"), TextChunk("doing "), TextChunk("it"),
        ToolCall("tu-1.1", "bash", {"command": "ls"}), ToolCall("tu-1.2", "read", {"path": "a"}),
        TurnEnd(stop_reason="tool_use", input_tokens=11, output_tokens=22),
    ]


async def test_tool_call_ids_are_unique_in_the_run_and_the_same_run_after_run() -> None:
    """``tu-A.K``: the K-th call of agent-A over its history, so an id depends on who made the
    call and where, never on which parallel agent asked first (issue 21, item 4)."""
    turn = {"tool_calls": [{"name": "glob", "input": {}}, {"name": "glob", "input": {}}]}
    provider = _provider(w={"turns": [turn, turn]})
    ids = []
    for agent in ("agent-3", "agent-2", "agent-10"):
        request = attrs.evolve(_request("w"), agent_id=agent)
        ids += [item.id for item in await _play(provider, request) if isinstance(item, ToolCall)]
    assert ids == ["tu-3.1", "tu-3.2", "tu-2.1", "tu-2.2", "tu-10.1", "tu-10.2"]
    # The agent's next turn counts on from the calls already in its history.
    first = await _play(provider, _request("w"))
    calls = tuple(ToolUseBlock(id=c.id, name=c.name, input=c.input) for c in first[:2])
    history = [*_request("w").messages, Message(role="assistant", content=calls)]
    second = await _play(provider, attrs.evolve(_request("w"), messages=history))
    assert [c.id for c in second[:2]] == ["tu-1.3", "tu-1.4"]


async def test_delays_happen_in_virtual_time(autojump_clock: trio.testing.MockClock) -> None:
    provider = _provider(w={"turns": [{"text": "a b c", "delay_s": 2, "chunk_delay_s": 0.5}]})
    start = trio.current_time()
    await _play(provider, _request("w"))
    assert trio.current_time() - start == pytest.approx(3.5)


async def test_each_instance_plays_from_the_first_turn_by_its_history() -> None:
    provider = _provider(w={"turns": [{"text": "first"}, {"text": "second"}]})
    first = await _play(provider, _request("w", 0))
    second = await _play(provider, _request("w", 1))
    assert first[0] == TextChunk("first")
    assert second[0] == TextChunk("second")


async def test_an_error_turn_streams_its_text_then_fails() -> None:
    provider = _provider(w={"turns": [{"text": "partial", "error": "HTTP 500"}]})
    seen: list[Any] = []

    async def consume() -> None:
        async with aclosing(provider.stream(_request("w"))) as stream:
            # One at a time on purpose: what came before the error must be kept.
            async for item in stream:
                seen.append(item)  # noqa: PERF401

    with pytest.raises(ProviderError, match="HTTP 500"):
        await consume()
    assert seen == [TextChunk("partial")]


async def test_running_past_the_last_turn_names_the_agent_type() -> None:
    provider = _provider(w={"turns": [{"text": "only"}]})
    with pytest.raises(ProviderError, match=r"agent type 'w' ran past its last turn \(it has 1"):
        await _play(provider, _request("w", 1))


async def test_an_unknown_agent_type_lists_the_scripted_ones() -> None:
    with pytest.raises(ProviderError, match=r"no agent type 'zz' \(it has: main, w\)"):
        await _play(_provider(w={"turns": []}), _request("zz"))


async def test_usage_is_estimated_when_the_script_gives_none() -> None:
    items = await _play(_provider(w={"turns": [{"text": "four score and seven"}]}), _request("w"))
    end = items[-1]
    assert end.stop_reason == "end_turn"
    assert end.output_tokens >= 1
    assert end.input_tokens >= 1


async def test_a_scripted_stop_reason_is_used() -> None:
    items = await _play(_provider(w={"turns": [{"text": "cut", "stop_reason": "max_tokens"}]}),
                        _request("w"))
    assert items[-1].stop_reason == "max_tokens"


async def test_a_long_turn_without_delays_checkpoints_every_so_many_deltas() -> None:
    from runtime.providers._scripted import CHECKPOINT_EVERY

    words = " ".join(f"w{i}" for i in range(3 * CHECKPOINT_EVERY))
    provider = _provider(main={"turns": [{"text": words}]})
    taken = 0
    with trio.CancelScope() as scope:
        async with aclosing(provider.stream(_request())) as stream:
            async for _item in stream:
                taken += 1
                if taken == 1:
                    scope.cancel()  # seen at the provider's next checkpoint
    assert scope.cancelled_caught
    assert taken == CHECKPOINT_EVERY  # deltas back to back, then the checkpoint


async def test_a_tool_changing_its_input_does_not_change_the_script() -> None:
    provider = _provider(w={"turns": [{"tool_calls": [
        {"name": "t", "input": {"flat": "x", "nested": {"items": [1, 2]}}}]}]})
    first = next(i for i in await _play(provider, _request("w")) if isinstance(i, ToolCall))
    first.input["flat"] = "changed"
    first.input["nested"]["items"].append(3)
    again = next(i for i in await _play(provider, _request("w")) if isinstance(i, ToolCall))
    assert again.input == {"flat": "x", "nested": {"items": [1, 2]}}


@given(st.lists(st.sampled_from(["agent-", "ray-", "7", "12", "\u0663", "x", "-", "\n"]))
       .map("".join))
def test_the_agent_number_of_any_id_is_what_the_pattern_finds(agent_id: str) -> None:
    # The usual id is read without the regular expression (issue 20); any id gives the same.
    match = re.search(r"agent-(\d+)$", agent_id)
    assert _agent_number(agent_id) == (match.group(1) if match else agent_id)
