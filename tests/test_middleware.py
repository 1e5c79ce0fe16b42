"""Middleware around tool calls and model calls: order, veto, replaced results, changed input,
model streams rewritten, cancellation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from runtime import (
    FunctionProvider,
    ModelRequest,
    TextChunk,
    ToolCall,
    ToolError,
    ToolFinished,
    ToolInvocation,
    ToolStarted,
    open_runtime,
    tool,
)

CALLED: list[str] = []


@tool
def shout(text: str) -> str:
    """Upper-case a text."""
    CALLED.append(text)
    return text.upper()


def _model(calls: list[ToolCall]) -> Any:
    def model(request: ModelRequest) -> Any:
        if len(request.messages) == 1:
            return calls
        return " | ".join(b.content for b in request.messages[-1].content)  # type: ignore[union-attr]
    return model


async def _run(tmp_path: Path, middleware: list[Any], calls: list[ToolCall]) -> tuple[Any, list[Any]]:
    CALLED.clear()
    events: list[Any] = []
    async with open_runtime(FunctionProvider(_model(calls)), workspace=tmp_path, trace=False,
                            extra_tools=[shout], on_event=events.append,
                            middleware=middleware) as rt:
        outcome = await rt.run("go")
    return outcome, events


class Log:
    def __init__(self, name: str, seen: list[str]) -> None:
        self.name, self.seen = name, seen

    async def tool_call(self, call: ToolInvocation, proceed: Any) -> str:
        self.seen.append(f"{self.name} before {call.name} {call.tool_use_id} depth={call.depth}")
        result = await proceed(call)
        self.seen.append(f"{self.name} after {result}")
        return result


async def test_layers_run_outermost_first(tmp_path: Path) -> None:
    seen: list[str] = []
    outcome, _ = await _run(tmp_path, [Log("a", seen), Log("b", seen)],
                            [ToolCall(name="shout", input={"text": "hi"})])
    assert outcome.result == "HI"
    assert seen == ["a before shout tu-1.1 depth=0", "b before shout tu-1.1 depth=0",
                    "b after HI", "a after HI"]


class Veto:
    async def tool_call(self, call: ToolInvocation, proceed: Any) -> str:
        if "rm" in call.input.get("text", ""):
            raise ToolError("vetoed: no rm")
        return await proceed(call)


async def test_a_layer_vetoes_with_tool_error(tmp_path: Path) -> None:
    outcome, events = await _run(tmp_path, [Veto()],
                                 [ToolCall(name="shout", input={"text": "rm -rf"}),
                                  ToolCall(name="shout", input={"text": "ok"})])
    assert outcome.result == "vetoed: no rm | OK"
    assert CALLED == ["ok"]
    statuses = [e.status for e in events if isinstance(e, ToolFinished)]
    assert statuses == ["error", "ok"]


class Replace:
    async def tool_call(self, call: ToolInvocation, proceed: Any) -> Any:
        await proceed(call)
        return {"replaced": True}


async def test_a_layer_replaces_the_result(tmp_path: Path) -> None:
    outcome, _ = await _run(tmp_path, [Replace()], [ToolCall(name="shout", input={"text": "x"})])
    assert outcome.result == '{"replaced":true}'


class Rewrite:
    def __init__(self, text: Any) -> None:
        self.text = text

    async def tool_call(self, call: ToolInvocation, proceed: Any) -> str:
        return await proceed(attrs.evolve(call, input={"text": self.text}))


async def test_a_changed_input_is_what_runs_and_is_shown(tmp_path: Path) -> None:
    outcome, events = await _run(tmp_path, [Rewrite("changed")],
                                 [ToolCall(name="shout", input={"text": "original"})])
    assert outcome.result == "CHANGED"
    started = next(e for e in events if isinstance(e, ToolStarted))
    finished = next(e for e in events if isinstance(e, ToolFinished))
    assert started.input == {"text": "original"}
    assert finished.input == {"text": "changed"}


async def test_a_changed_input_is_checked_against_the_schema(tmp_path: Path) -> None:
    _, events = await _run(tmp_path, [Rewrite(42)],
                                 [ToolCall(name="shout", input={"text": "original"})])
    assert CALLED == []
    finished = next(e for e in events if isinstance(e, ToolFinished))
    assert finished.status == "error"
    assert "input.text" in finished.output


class Loud:
    """Upper-cases every text the model streams and counts the calls."""

    def __init__(self) -> None:
        self.requests: list[str] = []

    async def model_call(self, request: ModelRequest, proceed: Any) -> Any:
        self.requests.append(request.agent_id)
        async for item in proceed(request):
            if isinstance(item, TextChunk):
                item = TextChunk(item.text.upper())
            yield item


async def test_a_model_layer_sees_every_request_and_can_rewrite_the_stream(tmp_path: Path) -> None:
    loud = Loud()
    outcome, _ = await _run(tmp_path, [loud], [ToolCall(name="shout", input={"text": "a"})])
    assert outcome.result == "A"
    assert loud.requests == ["agent-1", "agent-1"]

    def model(request: ModelRequest) -> str:
        return "quiet words"

    async with open_runtime(FunctionProvider(model), workspace=tmp_path, trace=False,
                            middleware=[loud]) as rt:
        assert (await rt.run("x")).result == "QUIET WORDS"


class Garbage:
    async def model_call(self, request: ModelRequest, proceed: Any) -> Any:
        yield "not an item"


async def test_a_model_layer_yielding_something_else_fails_the_agent(tmp_path: Path) -> None:
    outcome, _ = await _run(tmp_path, [Garbage()], [])
    assert outcome.status == "failed"
    assert "Garbage.model_call yielded str, not a stream item" in (outcome.error or "")


def test_an_object_with_neither_method_is_refused() -> None:
    from runtime.core._middleware import MiddlewareChain

    with pytest.raises(TypeError, match="middleware without tool_call or model_call: object"):
        MiddlewareChain([object()])


class Hang:
    async def tool_call(self, call: ToolInvocation, proceed: Any) -> str:
        await trio.sleep_forever()
        raise AssertionError


async def test_a_layer_waiting_is_cancelled_with_its_call(tmp_path: Path) -> None:
    started = trio.Event()

    def model(request: ModelRequest) -> Any:
        if len(request.messages) == 1:
            return ToolCall(name="shout", input={"text": "a"})
        return request.messages[-1].content[0].content  # type: ignore[union-attr]

    def on_event(event: Any) -> None:
        if isinstance(event, ToolStarted):
            started.set()

    async with open_runtime(FunctionProvider(model), workspace=tmp_path, trace=False,
                            extra_tools=[shout], on_event=on_event, middleware=[Hang()]) as rt:
        handle = await rt.start("go")
        with trio.fail_after(5):
            await started.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert await rt.cancel("tu-1.1", "too slow")
            outcome = await handle.wait()
    assert outcome.result == "cancelled: too slow"
    assert CALLED == []
