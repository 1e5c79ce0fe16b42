"""The agent loop: turns, tools, history order, and every fault ending as a result or a status."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import (
    AgentFinished,
    AgentStarted,
    Event,
    Limits,
    Message,
    TextBlock,
    TextChunk,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolError,
    ToolFinished,
    ToolResultBlock,
    ToolStarted,
    ToolUseBlock,
    TurnEnd,
    TurnFinished,
    UserMessage,
    open_runtime,
)
from tests.harness import EventLog, run_scenario, turns
from tests.invariants import by_type, check_invariants
from tools import Tool, ToolContext, builtin_tools


async def test_a_plain_answer_streams_deltas_and_completes(workspace: Path) -> None:
    scenario = {"agents": {"main": {"turns": [
        {"thinking": "let me think", "text": "Hello there world",
         "usage": {"input_tokens": 7, "output_tokens": 3}}]}}}
    outcome, events = await run_scenario(scenario, workspace)
    check_invariants(events)
    assert (outcome.status, outcome.result, outcome.turns) == ("completed", "Hello there world", 1)
    assert (outcome.input_tokens, outcome.output_tokens) == (7, 3)
    assert "".join(e.text for e in by_type(events, TextDelta)) == "Hello there world"  # type: ignore[attr-defined]
    assert len(by_type(events, TextDelta)) == 3
    assert "".join(e.text for e in by_type(events, ThinkingDelta)) == "let me think"  # type: ignore[attr-defined]
    [turn] = by_type(events, TurnFinished)
    assert (turn.turn, turn.stop_reason, turn.input_tokens) == (1, "end_turn", 7)  # type: ignore[attr-defined]


async def test_the_assistant_message_precedes_its_results_which_come_in_call_order(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    (workspace / "b.txt").write_text("beta\n")
    scenario = {"agents": {"main": {"turns": [
        {"text": "Reading.", "tool_calls": [
            {"name": "read", "input": {"path": "a.txt"}},
            {"name": "glob", "input": {"pattern": "*.txt"}},
            {"name": "read", "input": {"path": "b.txt"}}]},
        {"text": "Done."}]}}}
    outcome, events = await run_scenario(scenario, workspace)
    check_invariants(events)
    history = outcome.state.messages
    assert [m.role for m in history] == ["user", "assistant", "user", "assistant"]
    uses = history[1].tool_uses
    results = [b for b in history[2].content if isinstance(b, ToolResultBlock)]
    assert [r.tool_use_id for r in results] == [u.id for u in uses]
    assert "alpha" in results[0].content
    assert "beta" in results[2].content
    assert not any(r.is_error for r in results)


class _FillsInItsArguments(Tool):
    """A tool that adds a credential to the arguments it was given (as an API tool may)."""

    name: ClassVar[str] = "api"
    description: ClassVar[str] = "call an API"
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object", "properties": {"url": {"type": "string"},
                                         "tags": {"type": "array", "items": {"type": "string"}}}}
    read_only: ClassVar[bool] = True
    needs_permission: ClassVar[bool] = False

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        args["headers"] = {"Authorization": "Bearer sk-filled-0123456789abcdef"}  # type: ignore[index]
        args["tags"].append("sent")
        return "ok"


async def test_what_a_tool_does_to_its_arguments_stays_with_the_tool(workspace: Path) -> None:
    # The model's input is also in the agent's history (sent to the model again) and in the
    # tool_started already delivered: a tool that fills in its arguments changes neither.
    scenario = {"agents": {"main": {"turns": [
        {"tool_calls": [{"name": "api", "input": {"url": "https://x", "tags": ["a"]}}]},
        {"text": "done"}]}}}
    for env in ({}, {"MY_API_KEY": "sk-filled-0123456789abcdef"}):  # unmasked and masked runs
        outcome, events = await run_scenario(
            scenario, workspace, extra_tools=[_FillsInItsArguments()], env=env)
        assert outcome.status == "completed"
        [started] = by_type(events, ToolStarted)
        assert started.input == {"url": "https://x", "tags": ["a"]}  # type: ignore[attr-defined]
        [use] = outcome.state.messages[1].tool_uses
        assert use.input == {"url": "https://x", "tags": ["a"]}


async def test_read_only_calls_of_one_turn_run_concurrently(workspace: Path) -> None:
    scenario = {"agents": {"main": {"turns": [
        {"tool_calls": [{"name": "glob", "input": {"pattern": "*"}} for _ in range(3)]},
        {"text": "ok"}]}}}
    _, events = await run_scenario(scenario, workspace)
    kinds = [e.type for e in events if e.type in ("tool_started", "tool_finished")]
    assert kinds[:3] == ["tool_started"] * 3


async def test_calls_that_change_things_run_one_after_another(workspace: Path) -> None:
    scenario = {"agents": {"main": {"turns": [
        {"tool_calls": [
            {"name": "write", "input": {"path": "x.txt", "content": "1"}},
            {"name": "read", "input": {"path": "x.txt"}},
            {"name": "edit", "input": {"path": "x.txt", "old": "1", "new": "2"}}]},
        {"text": "ok"}]}}}
    outcome, events = await run_scenario(scenario, workspace)
    kinds = [e.type for e in events if e.type in ("tool_started", "tool_finished")]
    assert kinds == ["tool_started", "tool_finished"] * 3
    assert (workspace / "x.txt").read_text() == "2"
    assert outcome.status == "completed"


async def test_an_unknown_tool_is_an_error_result_the_model_reads(workspace: Path) -> None:
    scenario = {"agents": {"main": {"turns": [
        {"tool_calls": [{"name": "teleport", "input": {}}]}, {"text": "oh well"}]}}}
    outcome, events = await run_scenario(scenario, workspace)
    check_invariants(events)
    [finished] = by_type(events, ToolFinished)
    assert finished.status == "error"  # type: ignore[attr-defined]
    assert "unknown tool 'teleport'" in finished.output  # type: ignore[attr-defined]
    assert "bash" in finished.output  # type: ignore[attr-defined]
    assert outcome.status == "completed"


async def test_arguments_failing_the_schema_are_an_error_naming_the_field(workspace: Path) -> None:
    scenario = {"agents": {"main": {"turns": [
        {"tool_calls": [{"name": "read", "input": {"file": "x"}},
                        {"name": "bash", "input": {"command": 5}}]},
        {"text": "oh well"}]}}}
    outcome, events = await run_scenario(scenario, workspace)
    outputs = [e.output for e in by_type(events, ToolFinished)]  # type: ignore[attr-defined]
    assert "input.path: required field missing" in outputs[0]
    assert "input.command" in outputs[1]
    assert outcome.status == "completed"


class _Exploding(Tool):
    name: ClassVar[str] = "explode"
    description: ClassVar[str] = "raises"
    input_schema: ClassVar[dict[str, Any]] = {"type": "object"}
    needs_permission: ClassVar[bool] = False

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        if args.get("polite"):
            raise ToolError("nothing to explode")
        raise ZeroDivisionError("a bug in the tool")


async def test_a_tool_raising_becomes_an_error_result_not_a_crash(workspace: Path) -> None:
    scenario = {"agents": {"main": {"turns": [
        {"tool_calls": [{"name": "explode", "input": {}},
                        {"name": "explode", "input": {"polite": True}}]},
        {"text": "recovered"}]}}}
    outcome, events = await run_scenario(scenario, workspace, extra_tools=[_Exploding()])
    check_invariants(events)
    outputs = [(e.status, e.output) for e in by_type(events, ToolFinished)]  # type: ignore[attr-defined]
    assert outputs == [("error", "explode failed: ZeroDivisionError: a bug in the tool"),
                       ("error", "nothing to explode")]
    assert (outcome.status, outcome.result) == ("completed", "recovered")


async def test_a_provider_error_mid_stream_fails_the_agent_and_discards_the_partial_turn(
    workspace: Path,
) -> None:
    scenario = {"agents": {"main": {"turns": [
        {"text": "Looking", "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]},
        {"text": "half a sentence", "error": "connection reset by peer"}]}}}
    outcome, events = await run_scenario(scenario, workspace)
    check_invariants(events)
    assert outcome.status == "failed"
    assert outcome.error == "connection reset by peer"
    assert [m.role for m in outcome.state.messages] == ["user", "assistant", "user"]
    assert outcome.turns == 1
    [finished] = by_type(events, AgentFinished)
    assert finished.status == "failed"  # type: ignore[attr-defined]


async def test_running_past_the_last_scripted_turn_fails_naming_the_agent_type(
    workspace: Path,
) -> None:
    scenario = {"agents": {"main": {"turns": [
        {"tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]}]}}}
    outcome, events = await run_scenario(scenario, workspace)
    check_invariants(events)
    assert outcome.status == "failed"
    assert "'main' ran past its last turn" in (outcome.error or "")


async def test_max_turns_ends_the_agent_with_that_status(workspace: Path) -> None:
    loop_turn = {"text": "again", "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]}
    scenario = {"agents": {"main": {"turns": [loop_turn] * 5}}}
    outcome, events = await run_scenario(scenario, workspace, limits=Limits(max_turns=3))
    check_invariants(events)
    assert (outcome.status, outcome.turns) == ("max_turns", 3)
    assert "max_turns" in (outcome.error or "")


async def test_a_message_sent_while_working_arrives_at_the_next_turn_boundary(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    scenario = {"agents": {"main": {"turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": "true"}}], "delay_s": 1},
        {"text": "noted", "delay_s": 1}]}}}
    events: list[Any] = []
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                            permission_mode="allow-all", on_event=events.append) as rt:
        handle = await rt.start("go")
        assert handle.send("also check the tests")
        outcome = await handle.wait()
        assert not handle.send("too late")
    check_invariants(events)
    [msg] = by_type(events, UserMessage)
    assert msg.text == "also check the tests"  # type: ignore[attr-defined]
    first, second = by_type(events, TurnFinished)
    assert first.seq < msg.seq < second.seq, "delivered between the two turns"
    results = outcome.state.messages[2]
    assert results.role == "user"
    assert isinstance(results.content[0], ToolResultBlock)
    assert results.text == "also check the tests", "joined to the tool results, after them"


async def test_a_message_arriving_as_the_model_stops_makes_it_go_round_again(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    scenario = {"agents": {"main": {"turns": [
        {"text": "first", "delay_s": 1}, {"text": "second answer", "delay_s": 1}]}}}
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False) as rt:
        handle = await rt.start("go")
        await trio.sleep(0.5)  # inside the first turn, after its messages were delivered
        assert handle.send("one more thing")
        outcome = await handle.wait()
    assert (outcome.status, outcome.result, outcome.turns) == ("completed", "second answer", 2)
    assert [m.role for m in outcome.state.messages] == ["user", "assistant", "user", "assistant"]


async def test_cancelling_the_root_mid_tool_call_finishes_every_node(
    workspace: Path,
) -> None:
    scenario = {"agents": {"main": {"turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": "sleep 30"}}]},
        {"text": "never"}]}}}
    events = EventLog()
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                            permission_mode="allow-all", on_event=events) as rt:
        handle = await rt.start("go")
        await events.wait_for(lambda evs: by_type(evs, ToolStarted))
        with trio.fail_after(5):
            assert await rt.cancel(handle.agent_id, "stop")
            outcome = await handle.wait()
    check_invariants(events)
    assert outcome.status == "cancelled"
    assert outcome.error == "cancelled: stop"
    assert (outcome.cancel_reason, outcome.cancelled_by) == ("stop", "user")
    [finished] = by_type(events, ToolFinished)
    assert (finished.status, finished.output) == ("cancelled", "cancelled: stop")  # type: ignore[attr-defined]
    history = outcome.state.messages
    assert isinstance(history[-1].content[0], ToolResultBlock), "every tool call has a result"
    assert events[-1].status == "cancelled"  # type: ignore[attr-defined]


async def test_history_given_at_start_is_continued(workspace: Path) -> None:
    earlier = [Message(role="user", content=()), Message(role="assistant", content=())]
    scenario = {"agents": {"main": turns("one", "two")}}
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False) as rt:
        outcome = await rt.run("next", history=earlier[1:])
    # One assistant message was already there, so the script plays its second turn.
    assert outcome.result == "two"


async def test_every_tool_call_in_history_gets_a_result_even_on_cancel(workspace: Path) -> None:
    scenario = {"agents": {"main": {"turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": "sleep 30"}},
                        {"name": "bash", "input": {"command": "sleep 30"}}]}]}}}
    log = EventLog()
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                            permission_mode="allow-all", on_event=log) as rt:
        handle = await rt.start("go")
        # Cancelled once the first call runs (bash calls take turns; the second is queued).
        await log.wait_for(lambda events: by_type(events, ToolStarted))
        await handle.cancel()
        outcome = await handle.wait()
    uses = [b for m in outcome.state.messages for b in m.content if isinstance(b, ToolUseBlock)]
    results = [b for m in outcome.state.messages for b in m.content
               if isinstance(b, ToolResultBlock)]
    assert {u.id for u in uses} == {r.tool_use_id for r in results}


def test_builtin_tools_are_the_spec_set() -> None:
    assert [t.name for t in builtin_tools()] == [
        "bash", "read", "write", "edit", "glob", "grep", "agent", "send_message",
        "todo_write"]


async def test_the_agent_state_serialises_and_round_trips(workspace: Path) -> None:
    from runtime import AgentState
    from runtime.core._messages import state_converter

    scenario = {"agents": {"main": {"turns": [
        {"thinking": "hmm", "text": "Reading.",
         "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]},
        {"text": "Done."}]}}}
    outcome, _ = await run_scenario(scenario, workspace)
    state = outcome.state
    data = state_converter.unstructure(state)
    assert data["turns"] == 2
    assert data["continue_reason"] is None
    assert data["messages"][1]["content"][0] == {"kind": "thinking", "text": "hmm",
                                                 "signature": None}
    assert state_converter.structure(data, AgentState) == state


async def test_a_message_can_be_sent_to_a_running_sub_agent(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [{"name": "agent", "input": {
            "description": "w", "prompt": "p", "agent": "w"}}]}, {"text": "ok"}]},
        "w": {"turns": [{"tool_calls": [{"name": "glob", "input": {"pattern": "*"}}],
                         "delay_s": 1}, {"text": "w done"}]}}}
    events = EventLog()
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                            on_event=events) as rt:
        handle = await rt.start("go")
        [child] = await events.wait_for(
            lambda evs: [e for e in evs if isinstance(e, AgentStarted) and e.depth == 1])
        assert rt.send_message(child.agent_id, "focus on tests")
        await handle.wait()
    [msg] = by_type(events, UserMessage)
    assert (msg.agent_id, msg.parent_tool_use_id) == (child.agent_id, child.parent_tool_use_id)


class _GarbledArgsProvider:
    """A model that sends undecodable arguments once, then answers."""

    name = "garbled"

    def describe(self) -> dict[str, Any]:
        return {"provider": self.name}

    async def stream(self, request: Any) -> Any:
        await trio.lowlevel.checkpoint()
        if len(request.messages) == 1:
            yield ToolCall("c1", "read", {}, error="the arguments are not valid JSON (x)")
            yield TurnEnd(stop_reason="tool_use")
        else:
            yield TextChunk("fixed it")
            yield TurnEnd(stop_reason="end_turn")


async def test_arguments_the_provider_could_not_decode_are_an_error_result(
    workspace: Path,
) -> None:
    events: list[Any] = []
    async with open_runtime(_GarbledArgsProvider(), workspace=workspace, trace=False,
                            on_event=events.append) as rt:
        outcome = await rt.run("go")
    check_invariants(events)
    [finished] = by_type(events, ToolFinished)
    assert finished.status == "error"  # type: ignore[attr-defined]
    assert finished.output == "invalid input for read: the arguments are not valid JSON (x)"  # type: ignore[attr-defined]
    assert outcome.result == "fixed it"


class _TypoSchema(Tool):
    name: ClassVar[str] = "lookup"
    description: ClassVar[str] = "a user tool whose schema has a typo"
    input_schema: ClassVar[dict[str, Any]] = {"type": "objekt"}
    read_only: ClassVar[bool] = True
    concurrency_safe: ClassVar[bool] = True
    needs_permission: ClassVar[bool] = False

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        return "found"


async def test_a_failure_before_the_tool_runs_is_that_calls_error_only(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [
            {"name": "agent", "input": {"description": "slow", "prompt": "p", "agent": "w"}},
            {"name": "lookup", "input": {}}]}, {"text": "done"}]},
        "w": {"turns": [{"text": "w done", "delay_s": 5}]}}}
    outcome, events = await run_scenario(scenario, workspace, extra_tools=[_TypoSchema()])
    check_invariants(events)
    statuses = {e.name: e.status for e in by_type(events, ToolFinished)}  # type: ignore[attr-defined]
    assert statuses == {"agent": "ok", "lookup": "error"}
    assert outcome.status == "completed"


async def test_a_call_that_finished_keeps_its_result_when_the_agent_is_cancelled(
    workspace: Path,
) -> None:
    scenario = {"agents": {"main": {"turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": "echo hi"}},
                        {"name": "bash", "input": {"command": "sleep 30"}}]},
        {"text": "done"}]}}}
    events = EventLog()
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                            permission_mode="allow-all", on_event=events) as rt:
        handle = await rt.start("go")
        await events.wait_for(lambda evs: by_type(evs, ToolFinished))
        await handle.cancel()
        outcome = await handle.wait()
    results = outcome.state.messages[-1].content
    assert [r.is_error for r in results] == [False, True]  # type: ignore[union-attr]
    assert "hi" in results[0].content  # type: ignore[union-attr]
    assert results[1].content == "cancelled: cancelled by user"  # type: ignore[union-attr]


async def test_a_prompt_after_a_history_ending_with_a_user_message_joins_it(
    workspace: Path,
) -> None:
    from runtime import TextBlock

    earlier = [Message(role="user", content=(TextBlock(text="first ask"),))]
    async with open_runtime(scenario={"agents": {"main": turns("answer")}},
                            workspace=workspace, trace=False) as rt:
        outcome = await rt.run("second ask", history=earlier)
    first = outcome.state.messages[0]
    assert [m.role for m in outcome.state.messages] == ["user", "assistant"]
    assert first.text == "first asksecond ask"
    assert len(first.content) == 2


async def test_messages_the_agent_never_took_come_back_in_its_outcome(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    scenario = {"agents": {"main": {"turns": [{"text": "slow", "delay_s": 10}]}}}
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False) as rt:
        handle = await rt.start("go")
        await trio.sleep(1)
        assert handle.send("are you there?")
        await handle.cancel("stop")
        outcome = await handle.wait()
        assert not handle.send("too late")
    assert outcome.undelivered == ("are you there?",)


class _OwnSchema(Tool):
    name: ClassVar[str] = "pick"
    description: ClassVar[str] = "one class, schemas per instance"
    input_schema: ClassVar[dict[str, Any]] = {}
    needs_permission: ClassVar[bool] = False

    def __init__(self, required: str) -> None:
        self.input_schema = {"type": "object", "required": [required]}  # type: ignore[misc]

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        return "ok"


def test_each_tool_object_is_validated_against_its_own_schema() -> None:
    from runtime import ToolInputError
    from tools import validate_input

    validate_input(_OwnSchema("a"), {"a": 1})
    with pytest.raises(ToolInputError, match=r"input\.b: required"):
        validate_input(_OwnSchema("b"), {"a": 1})


async def test_a_message_arriving_for_a_turn_past_max_turns_is_handed_back(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    loop_turn = {"tool_calls": [{"name": "glob", "input": {"pattern": "*"}}], "delay_s": 1}
    events = EventLog()
    async with open_runtime(scenario={"agents": {"main": {"turns": [loop_turn] * 3}}},
                            workspace=workspace, trace=False, limits=Limits(max_turns=1),
                            on_event=events) as rt:
        handle = await rt.start("go")
        await trio.sleep(0.5)
        assert handle.send("one more thing")
        outcome = await handle.wait()
    assert outcome.status == "max_turns"
    assert outcome.undelivered == ("one more thing",)
    assert not by_type(events, UserMessage), "never announced as delivered"


# -- coalesced deltas (issue 20) ---------------------------------------------------------------

_pieces = st.lists(
    st.tuples(st.sampled_from(["text", "thinking", "call"]), st.sampled_from(["a ", "bc ", "d"])),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(
    _pieces,
    st.integers(1, 8),
    st.lists(st.integers(0, 3), min_size=1, max_size=20),
    st.booleans(),
    st.booleans(),
)
def test_coalesced_deltas_carry_the_same_text_in_the_same_order_as_one_per_chunk(
    pieces: list[tuple[str, str]], buffer: int, pauses: list[int], yields: bool, secret: bool
) -> None:
    """Whatever the reader's pace, the deltas a block subscriber (and the trace) see, joined per
    run of one kind, are exactly the chunks of the straightforward one-delta-per-chunk stream;
    seq has no gap; no delta is empty; the turn's content is the same."""
    from types import SimpleNamespace

    from runtime import EventBus, ModelRequest, ThinkingChunk
    from runtime.core._loop import _stream_turn
    from runtime.core._secrets import Secrets

    items: list[Any] = []
    for kind, text in pieces:
        if kind == "text":
            items.append(TextChunk(text))
        elif kind == "thinking":
            items.append(ThinkingChunk(text))
        else:
            items.append(ToolCall(f"tu-{len(items)}", "echo", {}))
    items.append(TurnEnd(stop_reason="end_turn", input_tokens=1, output_tokens=1))

    class Provider:
        name = "list"

        async def stream(self, request: ModelRequest) -> Any:
            for item in items:
                yield item
                if yields:
                    await trio.lowlevel.checkpoint()

    def runs(kinds_texts: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Consecutive pieces of one kind joined (what a consumer that joins deltas shows)."""
        out: list[tuple[str, str]] = []
        for kind, text in kinds_texts:
            if out and out[-1][0] == kind:
                out[-1] = (kind, out[-1][1] + text)
            else:
                out.append((kind, text))
        return out

    # Tool calls make no event of their own in a turn's stream: text around one is one run.
    expected = runs([(k, t) for k, t in pieces if k != "call"])

    async def main() -> tuple[list[Event], Any]:
        bus = EventBus("r", secrets=Secrets(["bc d"]) if secret else None)
        seen: list[Event] = []
        bus.add_tap(seen.append)
        from runtime.core._context import Scheduler

        run = SimpleNamespace(provider=Provider(), bus=bus,
                              scheduler=Scheduler(max_parallel=1, max_agents=10))
        request = ModelRequest(
            model="m", system="", messages=(), tools=(), agent_type="main", agent_id="a"
        )

        got: list[Event] = []
        async with trio.open_nursery() as nursery:
            sub = bus.subscribe(buffer=buffer, policy="block")

            async def reader() -> None:
                i = 0
                async for event in sub:
                    got.append(event)
                    for _ in range(pauses[i % len(pauses)]):
                        await trio.lowlevel.checkpoint()
                    i += 1

            nursery.start_soon(reader)
            spec = SimpleNamespace(agent_id="a", parent_tool_use_id=None)
            content = await _stream_turn(run, spec, request)  # type: ignore[arg-type]
            # The agent's next event (in the loop, turn_finished) releases held-back text.
            await bus.emit(UserMessage(agent_id="a", parent_tool_use_id=None, text="next"))
            bus.close()
        assert got == seen
        return seen, content

    seen, (content, _calls, _end) = trio.run(main)
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    deltas = [e for e in seen if isinstance(e, TextDelta | ThinkingDelta)]
    if not secret:  # (a held-back secret's start can leave an empty delta: the bus's doing)
        assert all(e.text for e in deltas)
    streamed = runs([("text" if isinstance(e, TextDelta) else "thinking", e.text) for e in deltas])
    streamed = [(k, t) for k, t in streamed if t]
    if secret:
        expected = [(k, t.replace("bc d", "***")) for k, t in expected]
    assert streamed == expected
    text = "".join(t for k, t in pieces if k == "text")
    assert "".join(b.text for b in content if isinstance(b, TextBlock)) == text


async def test_deltas_are_coalesced_while_a_block_subscriber_is_behind(workspace: Path) -> None:
    words = " ".join(f"w{i}" for i in range(2000))
    scenario = {"agents": {"main": {"tools": [], "turns": [{"text": words}]}}}
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False) as rt:
        deltas: list[TextDelta] = []
        with rt.subscribe(buffer=8, policy="block") as sub:
            async with trio.open_nursery() as nursery:

                async def read() -> None:
                    async for event in sub:
                        if isinstance(event, TextDelta):
                            deltas.append(event)
                        if isinstance(event, AgentFinished):
                            return

                nursery.start_soon(read)
                outcome = await rt.run("Go.")
    assert outcome.status == "completed"
    assert "".join(d.text for d in deltas) == words
    assert 8 < len(deltas) < 2000  # the first ones one per word, then runs of words
