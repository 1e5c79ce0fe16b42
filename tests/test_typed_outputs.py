"""Typed outputs (output_type) and fan-out from code (rt.map)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from runtime import (
    AgentStarted,
    AgentType,
    ConfigError,
    FunctionProvider,
    ModelRequest,
    ToolCall,
    ToolContext,
    TraceTree,
    UserMessage,
    load_agent_types,
    open_runtime,
    tool,
)


@dataclasses.dataclass
class Verdict:
    ok: bool
    score: int


def _answers(*texts: str) -> Any:
    def model(request: ModelRequest) -> str:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        return texts[min(turn, len(texts) - 1)]
    return model


async def test_a_final_json_answer_is_the_typed_output(tmp_path: Path) -> None:
    seen: list[str] = []

    def model(request: ModelRequest) -> str:
        seen.append(request.system)
        return '```json\n{"ok": true, "score": 7}\n```'

    async with open_runtime(FunctionProvider(model), workspace=tmp_path, trace=False) as rt:
        outcome = await rt.run("judge", output_type=Verdict)
    assert outcome.status == "completed"
    assert outcome.output == Verdict(ok=True, score=7)
    assert outcome.result == '```json\n{"ok": true, "score": 7}\n```'
    assert '"score":{"type":"integer"}' in seen[0], "the agent is told the schema"


async def test_a_bad_answer_goes_back_with_the_error_then_fails(tmp_path: Path) -> None:
    events: list[Any] = []
    async with open_runtime(FunctionProvider(_answers("sure!", '{"ok": 1}', '{"ok": true, "score": 2}')),
                            workspace=tmp_path, trace=False, on_event=events.append) as rt:
        outcome = await rt.run("judge", output_type=Verdict)
    assert outcome.status == "completed"
    assert outcome.output == Verdict(ok=True, score=2)
    retries = [e.text for e in events if isinstance(e, UserMessage)]
    assert len(retries) == 2
    assert "not JSON" in retries[0]
    assert "score" in retries[1] or "ok" in retries[1]

    async with open_runtime(FunctionProvider(_answers("never json")), workspace=tmp_path,
                            trace=False) as rt:
        failed = await rt.run("judge", output_type=Verdict)
    assert failed.status == "failed"
    assert failed.output is None
    assert failed.error is not None
    assert failed.error.startswith("output: the answer is not JSON")
    assert failed.turns == 3, "the first answer and output_retries (2) more"


async def test_a_json_schema_output_type_from_an_agents_file(tmp_path: Path) -> None:
    (tmp_path / "agents.toml").write_text(
        '[agents.rater]\ndescription = "rates"\noutput_retries = 0\n'
        '[agents.rater.output_type]\ntype = "object"\nrequired = ["stars"]\n'
        '[agents.rater.output_type.properties.stars]\ntype = "integer"\nminimum = 1\nmaximum = 5\n'
    )
    [rater] = load_agent_types(tmp_path / "agents.toml")

    def model(request: ModelRequest) -> Any:
        if request.agent_type == "main":
            if len(request.messages) == 1:
                return ToolCall(name="agent", input={"description": "rate", "prompt": "rate it",
                                                     "agent": "rater"})
            return f"the rater said {request.messages[-1].content[0].content}"  # type: ignore[union-attr]
        return '{"stars": 4}'

    async with open_runtime(FunctionProvider(model), workspace=tmp_path, trace=False,
                            agent_types=[rater]) as rt:
        outcome = await rt.run("go")
    assert outcome.result == 'the rater said {"stars": 4}', "the parent reads the child's JSON"

    (tmp_path / "bad.toml").write_text('[agents.bad.output_type]\ntype = 3\n')
    with pytest.raises(ConfigError, match=r"agents.bad.output_type: not a JSON Schema"):
        load_agent_types(tmp_path / "bad.toml")


async def test_a_type_without_a_schema_is_refused_before_anything_runs(tmp_path: Path) -> None:
    class Opaque:
        pass

    async with open_runtime(FunctionProvider(_answers("x")), workspace=tmp_path, trace=False) as rt:
        with pytest.raises(ConfigError, match="has no JSON Schema"):
            await rt.run("x", output_type=Opaque)


async def test_map_runs_one_agent_per_prompt_and_keeps_prompt_order(tmp_path: Path) -> None:
    async def model(request: ModelRequest) -> str:
        prompt = request.messages[0].content[0].text  # type: ignore[union-attr]
        n = int(prompt.split()[-1])
        await trio.sleep((10 - n) * 0.01)  # the later prompts finish first
        return str(n * n)

    events: list[Any] = []
    async with open_runtime(FunctionProvider(model), workspace=tmp_path, trace=False,
                            on_event=events.append) as rt:
        outcomes = await rt.map([f"square {n}" for n in range(10)], output_type=int)
    assert [o.output for o in outcomes] == [n * n for n in range(10)]
    assert [o.agent_id for o in outcomes] == [f"agent-{n}" for n in range(1, 11)]
    tree = TraceTree.from_events(events)
    assert [r.id for r in tree.roots] == [f"agent-{n}" for n in range(1, 11)], "started in order"


async def test_map_stays_within_max_parallel_and_cancelling_one_leaves_the_others(
    tmp_path: Path,
) -> None:
    from runtime import Limits

    running = 0
    peak = 0
    gate = trio.Event()

    async def model(request: ModelRequest) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            if request.messages[0].content[0].text == "slow":  # type: ignore[union-attr]
                await trio.sleep_forever()
            await gate.wait()
            return "done"
        finally:
            running -= 1

    events: list[Any] = []
    results: list[Any] = []
    async with (
        open_runtime(FunctionProvider(model), workspace=tmp_path, trace=False,
                     limits=Limits(max_parallel=3), on_event=events.append) as rt,
        trio.open_nursery() as nursery,
    ):

        async def go() -> None:
            results.extend(await rt.map(["slow", *["fast"] * 5]))

        nursery.start_soon(go)
        await trio.testing.wait_all_tasks_blocked()
        slow = next(e.agent_id for e in events
                    if isinstance(e, AgentStarted) and e.prompt == "slow")
        assert await rt.cancel(slow, "not needed")
        gate.set()
    assert peak <= 3
    assert [o.status for o in results] == ["cancelled", *["completed"] * 5]
    assert results[0].cancel_reason == "not needed"
    assert len(TraceTree.from_events(events).roots) == 6


def test_an_agent_type_with_a_schema_is_still_hashable() -> None:
    a = AgentType(name="x", output_type={"type": "integer"})
    b = AgentType(name="x", output_type={"type": "integer"})
    assert a == b
    assert hash(a) == hash(b)


async def test_a_tool_fans_out_from_python_and_a_cancelled_child_is_an_outcome(
    tmp_path: Path,
) -> None:
    @tool
    async def fan_out(ctx: ToolContext, items: list[str]) -> str:
        """Ask one sub-agent per item for its length."""
        assert ctx.spawner is not None
        outcomes = await ctx.spawner.map_subagents(items, agent_type="general", output_type=int)
        return ", ".join(f"{o.status}:{o.output}" for o in outcomes)

    async def model(request: ModelRequest) -> Any:
        if request.agent_type == "main":
            if len(request.messages) == 1:
                return ToolCall(name="fan_out", input={"items": ["a", "bb", "hang", "dddd"]})
            return request.messages[-1].content[0].content  # type: ignore[union-attr]
        item = request.messages[0].content[0].text  # type: ignore[union-attr]
        if item == "hang":
            await trio.sleep_forever()
        return str(len(item))

    events: list[Any] = []
    async with open_runtime(FunctionProvider(model), workspace=tmp_path, trace=False,
                            extra_tools=[fan_out], on_event=events.append) as rt:
        handle = await rt.start("go")
        with trio.fail_after(5):
            await trio.testing.wait_all_tasks_blocked()
            hang = next(e.agent_id for e in events
                        if isinstance(e, AgentStarted) and e.prompt == "hang")
            assert await rt.cancel(hang, "too slow")
            outcome = await handle.wait()
    assert outcome.result == "completed:1, completed:2, cancelled:None, completed:4"
    children = [e for e in events if isinstance(e, AgentStarted) and e.depth == 1]
    assert [e.prompt for e in children] == ["a", "bb", "hang", "dddd"], "started in order"
    assert {e.parent_tool_use_id for e in children} == {"tu-1.1"}


async def test_openai_can_be_asked_for_the_output_natively(nursery: trio.Nursery, tmp_path: Path) -> None:
    """With structured_output the schema goes to the server as response_format (a real
    loopback SSE server); the answer is checked all the same."""
    from runtime.providers import open_provider
    from tests.llm_server import LLMServer, Reply, openai_text_stream

    server = LLMServer()
    await nursery.start(server.serve)
    server.route = lambda request: Reply.stream(openai_text_stream(['{"ok": true, ', '"score": 9}']))
    env = {"OPENAI_API_KEY": "sk-typed-0123456789abcdef", "OPENAI_BASE_URL": server.url + "/v1"}
    for native in (True, False):
        async with (
            open_provider("openai", model="m", env=env, structured_output=native) as provider,
            open_runtime(provider, workspace=tmp_path, trace=False) as rt,
        ):
            outcome = await rt.run("judge", output_type=Verdict)
        assert outcome.output == Verdict(ok=True, score=9)
        body = server.requests[-1].json
        if native:
            assert body["response_format"]["type"] == "json_schema"
            assert body["response_format"]["json_schema"]["schema"]["required"] == ["ok", "score"]
        else:
            assert "response_format" not in body
