"""FunctionProvider: a model written as a Python function of the request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from runtime import (
    AgentType,
    FunctionProvider,
    ModelRequest,
    ToolCall,
    ToolStarted,
    TraceTree,
    open_runtime,
)


async def _run(model: Any, tmp_path: Path, prompt: str = "go", **kw: Any) -> tuple[Any, list[Any]]:
    events: list[Any] = []
    async with open_runtime(FunctionProvider(model), workspace=tmp_path, trace=False,
                            on_event=events.append, **kw) as rt:
        outcome = await rt.run(prompt)
    return outcome, events


async def test_a_sync_function_answers_from_the_request(tmp_path: Path) -> None:
    seen: list[ModelRequest] = []

    def model(request: ModelRequest) -> str:
        seen.append(request)
        return f"you said {request.messages[-1].content[0].text}"  # type: ignore[union-attr]

    outcome, _ = await _run(model, tmp_path, "hello")
    assert outcome.status == "completed"
    assert outcome.result == "you said hello"
    assert seen[0].agent_type == "main"
    assert {t.name for t in seen[0].tools} >= {"read", "agent"}


async def test_calls_without_ids_get_the_scripted_ids_in_call_order(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("A")
    (tmp_path / "b.txt").write_text("B")

    async def model(request: ModelRequest) -> Any:
        await trio.lowlevel.checkpoint()
        turn = sum(1 for m in request.messages if m.role == "assistant")
        if turn == 0:
            return "reading both", [ToolCall(name="read", input={"path": "a.txt"}),
                                    ToolCall(name="read", input={"path": "b.txt"})]
        if turn == 1:
            return ToolCall(name="glob", input={"pattern": "*.txt"})
        return "done"

    for _ in range(2):  # the same ids run after run
        outcome, events = await _run(model, tmp_path)
        assert outcome.status == "completed"
        started = [(e.tool_use_id, e.input.get("path") or e.input.get("pattern"))
                   for e in events if isinstance(e, ToolStarted)]
        assert started == [("tu-1.1", "a.txt"), ("tu-1.2", "b.txt"), ("tu-1.3", "*.txt")]
        text = "".join(getattr(e, "text", "") for e in events if type(e).__name__ == "TextDelta")
        assert text.startswith("reading both")


async def test_sub_agents_see_their_own_prompt(tmp_path: Path) -> None:
    def model(request: ModelRequest) -> Any:
        first = request.messages[0].content[0].text  # type: ignore[union-attr]
        if request.agent_type == "main" and len(request.messages) == 1:
            return [ToolCall(name="agent", input={"description": f"echo {n}", "prompt": f"item {n}",
                                                   "agent": "echo"}) for n in range(5)]
        if request.agent_type == "main":
            return "all echoed"
        return first.upper()

    echo = AgentType(name="echo", description="echoes", tools=())
    outcome, events = await _run(model, tmp_path, agent_types=[echo])
    assert outcome.status == "completed"
    tree = TraceTree.from_events(events)
    results = [child.result for call in tree.roots[0].children for child in call.children]
    assert results == [f"ITEM {n}" for n in range(5)]


async def test_a_function_that_raises_fails_the_agent_with_its_message(tmp_path: Path) -> None:
    def model(request: ModelRequest) -> str:
        raise ValueError("no more answers")

    outcome, _ = await _run(model, tmp_path)
    assert outcome.status == "failed"
    assert "model function 'model' raised ValueError: no more answers" in (outcome.error or "")


async def test_a_wrong_return_value_is_one_clear_error(tmp_path: Path) -> None:
    def model(request: ModelRequest) -> Any:
        return 42

    outcome, _ = await _run(model, tmp_path)
    assert outcome.status == "failed"
    assert "returned int: return a str, a ToolCall" in (outcome.error or "")

    def model2(request: ModelRequest) -> Any:
        return [{"name": "read"}]

    outcome, _ = await _run(model2, tmp_path)
    assert "returned dict among its tool calls" in (outcome.error or "")


async def test_a_reused_id_becomes_a_run_unique_one_and_no_node_is_lost(tmp_path: Path) -> None:
    def model(request: ModelRequest) -> Any:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        if turn < 3:
            return ToolCall(id="same", name="glob", input={"pattern": "*"})
        return "done"

    outcome, events = await _run(model, tmp_path)
    assert outcome.status == "completed"
    ids = [e.tool_use_id for e in events if isinstance(e, ToolStarted)]
    assert ids == ["same", "same~2", "same~3"]
    tree = TraceTree.from_events(events)
    assert [c.id for c in tree.roots[0].children] == ids
    # The provider's history keeps its own id for every call.
    history_ids = [b.id for m in outcome.state.messages for b in m.content if hasattr(b, "input")]
    assert history_ids == ["same", "same", "same"]


async def test_tool_events_carry_the_calling_agents_depth(tmp_path: Path) -> None:
    def model(request: ModelRequest) -> Any:
        if len(request.messages) > 1:
            return "done"
        if request.agent_type == "main":
            return ToolCall(name="agent", input={"description": "d", "prompt": "p"})
        return ToolCall(name="glob", input={"pattern": "*"})

    _, events = await _run(model, tmp_path)
    depths = [(type(e).__name__, e.name, e.depth) for e in events
              if type(e).__name__ in ("ToolStarted", "ToolFinished")]
    assert depths == [("ToolStarted", "agent", 0), ("ToolStarted", "glob", 1),
                      ("ToolFinished", "glob", 1), ("ToolFinished", "agent", 0)]
