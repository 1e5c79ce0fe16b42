"""Fault injection: provider errors at random turns and mid-stream, tools that raise, tools that
hang past their timeout, subscribers that crash or stop reading.

After every run, whatever was injected (see _checks.checked_runtime): the event invariants
hold, the trace file holds exactly the live stream, the registry is empty, and no task or
process is left. Each test also checks that the fault stayed where it was injected: the failing
agent ends ``failed``, its parent reads an error result and carries on.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import trio
import trio.testing

from runtime import SubscriberLagged
from runtime.providers import OpenAIProvider, RetryPolicy
from tests.harness import agent_call
from tests.llm_server import (
    OPENAI_DONE,
    LLMServer,
    RecordedRequest,
    Reply,
    openai_chunk,
    openai_text_stream,
    sse,
)
from tests.reliability._checks import (
    STATS,
    FaultyTool,
    checked_runtime,
    finished,
    run_checked,
    started_names,
)

_WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")


def _faulty(mode: str, **extra: Any) -> dict[str, Any]:
    return {"name": "faulty", "input": {"mode": mode, **extra}}


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(0, 6)))


def random_faulty_tree(rng: random.Random) -> tuple[dict[str, Any], dict[str, str], int]:
    """A random tree of agent types (depth ≤ 2), with provider errors at random turns (some
    mid-stream, after text) and tools that raise.

    Returns the scenario, each type's expected final status, and the number of faults injected.
    """
    agents: dict[str, Any] = {}
    expected: dict[str, str] = {}
    faults = 0

    def make_type(name: str, depth: int) -> None:
        nonlocal faults
        turns: list[dict[str, Any]] = []
        failed = False
        for _ in range(rng.randint(1, 3)):
            calls: list[dict[str, Any]] = []
            # At least one call: a turn without one ends the agent.
            for _ in range(rng.randint(1, 3)):
                kind = rng.random()
                if kind < 0.3 and depth < 2:
                    child = f"{name}_{len(agents)}"
                    make_type(child, depth + 1)
                    calls.append(agent_call(f"part {child}", child))
                elif kind < 0.5:
                    calls.append(_faulty("raise"))
                    faults += 1
                elif kind < 0.6:
                    calls.append(_faulty("tool_error"))
                    faults += 1
                else:
                    calls.append(_faulty("ok"))
            turn: dict[str, Any] = {"text": _text(rng), "tool_calls": calls}
            if rng.random() < 0.25:
                # The provider fails this turn, after streaming its text (mid-stream) if any.
                turn = {"text": _text(rng), "error": f"injected provider error in {name}"}
                faults += 1
                failed = True
                turns.append(turn)
                break
            turns.append(turn)
        if not failed:
            turns.append({"text": f"{name} done"})
        agents[name] = {"tools": ["faulty", "agent"], "turns": turns}
        expected[name] = "failed" if failed else "completed"

    agents["main"] = {}  # keeps "main" first
    root_calls = [agent_call(f"part w{i}", f"w{i}") for i in range(rng.randint(2, 6))]
    for i in range(len(root_calls)):
        make_type(f"w{i}", 1)
    agents["main"] = {
        "tools": ["agent", "faulty"],
        "turns": [{"text": "Splitting.", "tool_calls": root_calls}, {"text": "Collected."}],
    }
    expected["main"] = "completed"
    return {"agents": agents}, expected, faults


SEEDS = list(range(24))


@pytest.mark.parametrize("seed", SEEDS)
async def test_random_provider_and_tool_faults_stay_in_their_agent(
    seed: int, long: bool, workspace: Path, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    for s in [seed] + ([seed + 1000 * k for k in range(1, 10)] if long else []):
        await _random_faults(s, workspace, tmp_path / f"trace-{s}.jsonl")


async def _random_faults(seed: int, workspace: Path, trace: Path) -> None:
    rng = random.Random(seed)
    scenario, expected, faults = random_faulty_tree(rng)
    outcome, events = await run_checked(scenario, workspace, trace, extra_tools=[FaultyTool()])
    assert outcome.status == "completed"
    names = started_names(events)
    agents = finished(events, "agent")
    for agent_id, name in names.items():
        assert agents[agent_id].status == expected[name], (name, agents[agent_id])
    tools = finished(events, "tool")
    starts = {e.tool_use_id: e for e in events if e.type == "tool_started"}
    for tool_use_id, end in tools.items():
        mode = starts[tool_use_id].input.get("mode")
        if mode == "raise":
            assert end.status == "error"
            assert end.output.startswith("faulty failed: RuntimeError: injected bug"), end.output
        elif mode == "tool_error":
            assert (end.status, end.output) == ("error", f"injected tool error in {tool_use_id}")
        elif mode == "ok":
            assert end.status == "ok"
    # A failed sub-agent is an error result its parent reads, naming the provider's message.
    for agent_id, end in agents.items():
        if end.status == "failed":
            assert end.error == f"injected provider error in {names[agent_id]}"
            call = tools[end.parent_tool_use_id]
            assert call.status == "error"
            assert f"injected provider error in {names[agent_id]}" in call.output
    STATS["faults injected"] += faults
    STATS["runs with faults"] += 1


async def test_bash_past_its_timeout_is_killed_with_its_children(
    workspace: Path, tmp_path: Path
) -> None:
    # Real time: the subprocesses are real. Each sleeper starts a grandchild too.
    hang = {"name": "bash", "input": {"command": "sleep 30 & sleep 30", "timeout_s": 0.3}}
    scenario = {
        "agents": {
            "main": {
                "turns": [
                    {"tool_calls": [agent_call(f"slow {i}", "sleeper") for i in range(3)]},
                    {"text": "done"},
                ]
            },
            "sleeper": {"tools": ["bash"], "turns": [{"tool_calls": [hang]}, {"text": "woke"}]},
        }
    }
    with trio.fail_after(20):
        outcome, events = await run_checked(scenario, workspace, tmp_path / "trace.jsonl")
    assert outcome.status == "completed"
    bash = [e for e in finished(events, "tool").values() if e.name == "bash"]
    assert len(bash) == 3
    for end in bash:
        assert end.status == "error"
        assert "timed out after 0.3 s" in end.output
    STATS["faults injected"] += 3


async def test_a_python_tool_hanging_forever_ends_with_its_subtree_budget(
    workspace: Path, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    scenario = {
        "agents": {
            "main": {
                "turns": [
                    {
                        "tool_calls": [
                            agent_call("hangs", "hanger", budget={"seconds": 30}),
                            agent_call("fine", "fine"),
                        ]
                    },
                    {"text": "carried on"},
                ]
            },
            "hanger": {
                "tools": ["faulty"],
                "turns": [{"tool_calls": [_faulty("hang")]}, {"text": "never"}],
            },
            "fine": {
                "tools": ["faulty"],
                "turns": [{"tool_calls": [_faulty("sleep", seconds=60)]}, {"text": "ok"}],
            },
        }
    }
    outcome, events = await run_checked(
        scenario, workspace, tmp_path / "trace.jsonl", extra_tools=[FaultyTool()]
    )
    assert outcome.status == "completed"
    names = started_names(events)
    by_name = {names[a]: e for a, e in finished(events, "agent").items()}
    assert by_name["hanger"].status == "budget_exceeded"
    assert by_name["fine"].status == "completed"
    assert trio.current_time() == pytest.approx(60, abs=1)
    STATS["faults injected"] += 1


async def test_a_hanging_tool_call_cancelled_by_id_lets_its_agent_carry_on(
    workspace: Path, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    scenario = {
        "agents": {
            "main": {
                "tools": ["faulty"],
                "turns": [{"tool_calls": [_faulty("hang"), _faulty("ok")]}, {"text": "after"}],
            }
        }
    }
    events: list[Any] = []
    async with checked_runtime(
        workspace,
        tmp_path / "trace.jsonl",
        events=events,
        scenario=scenario,
        extra_tools=[FaultyTool()],
    ) as rt:
        handle = await rt.start("go")
        await trio.sleep(5)
        hung = next(
            e.tool_use_id for e in events if e.type == "tool_started" and e.input["mode"] == "hang"
        )
        assert await rt.cancel(hung, "hung for too long")
        outcome = await handle.wait()
    assert (outcome.status, outcome.result) == ("completed", "after")
    end = finished(events, "tool")[hung]
    assert (end.status, end.output) == ("cancelled", "cancelled: hung for too long")
    STATS["faults injected"] += 1
    STATS["cancels survived"] += 1


def _two_workers(delay: float = 1.0) -> dict[str, Any]:
    return {
        "agents": {
            "main": {
                "turns": [
                    {"text": "go", "tool_calls": [agent_call("a", "w"), agent_call("b", "w")]},
                    {"text": "done"},
                ]
            },
            "w": {
                "tools": ["faulty"],
                "turns": [
                    {"text": "working on it now", "delay_s": delay, "tool_calls": [_faulty("ok")]},
                    {"text": "ok"},
                ],
            },
        }
    }


async def test_a_crashing_tap_is_removed_and_the_run_goes_on(
    workspace: Path, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    calls = 0

    def crashing(event: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 8:  # a sub-agent's agent_started, in this scenario
            raise RuntimeError("observer bug")

    events: list[Any] = []
    async with checked_runtime(
        workspace,
        tmp_path / "trace.jsonl",
        events=events,
        scenario=_two_workers(),
        extra_tools=[FaultyTool()],
    ) as rt:
        rt.add_tap(crashing)
        outcome = await rt.run("go")
        assert len(rt.bus.failed_taps) == 1
        assert "observer bug" in rt.bus.failed_taps[0]
    assert outcome.status == "completed"
    assert calls == 8
    assert {e.status for e in finished(events, "agent").values()} == {"completed"}
    STATS["faults injected"] += 1


async def test_a_crashing_subscriber_task_ends_the_run_with_every_node_finished(
    workspace: Path, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    events: list[Any] = []
    with pytest.RaisesGroup(
        pytest.RaisesExc(RuntimeError, match="consumer bug"), flatten_subgroups=True
    ):
        async with checked_runtime(
            workspace,
            tmp_path / "trace.jsonl",
            events=events,
            scenario=_two_workers(),
            extra_tools=[FaultyTool()],
        ) as rt:

            async def consumer() -> None:
                with rt.subscribe() as sub:
                    async for event in sub:
                        if event.type == "text_delta":
                            raise RuntimeError("consumer bug")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(consumer)
                await rt.run("go")
    # The run was torn down by the crash: every agent that started ended cancelled.
    ends = finished(events, "agent")
    assert ends
    assert {e.status for e in ends.values()} == {"cancelled"}
    assert events[-1].type == "run_finished"
    STATS["faults injected"] += 1


async def test_a_subscriber_that_stops_reading_is_dropped_and_the_trace_gets_everything(
    workspace: Path, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    events: list[Any] = []
    async with checked_runtime(
        workspace,
        tmp_path / "trace.jsonl",
        events=events,
        scenario=_two_workers(),
        extra_tools=[FaultyTool()],
    ) as rt:
        stuck = rt.subscribe(buffer=4)  # never read
        outcome = await rt.run("go")
        with pytest.raises(SubscriberLagged):
            await stuck.receive()
    assert outcome.status == "completed"
    assert len(events) > 4
    STATS["faults injected"] += 1


async def test_a_blocking_subscriber_that_stops_reading_holds_the_agents_until_closed(
    workspace: Path, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    events: list[Any] = []
    async with checked_runtime(
        workspace,
        tmp_path / "trace.jsonl",
        events=events,
        scenario=_two_workers(delay=0),
        extra_tools=[FaultyTool()],
    ) as rt:
        stuck = rt.subscribe(buffer=4, policy="block")
        handle = await rt.start("go")
        await trio.sleep(100)
        assert not handle.done, "a blocking subscriber applies backpressure"
        held = len(events)
        stuck.close()
        outcome = await handle.wait()
    assert outcome.status == "completed"
    assert len(events) > held
    STATS["faults injected"] += 1


# -- a real provider over HTTP ---------------------------------------------------------------


def _route(request: RecordedRequest) -> Reply:
    messages = request.json["messages"]
    first_user = str(next(m["content"] for m in messages if m["role"] == "user"))
    if "DROP" in first_user:
        # Text, then the connection is cut in the middle of the stream.
        events = openai_text_stream(["partial ", "answer ", "that never ends"])
        head = len(events[0]) + len(events[1]) + 5
        return Reply.stream(events, drop_after_bytes=head)
    if "GARBAGE" in first_user:
        return Reply.stream(
            [openai_chunk({"role": "assistant", "content": "fine so far "}), b"data: {not json\n\n"]
        )
    if "SSE_ERROR" in first_user:
        return Reply.stream(
            [
                openai_chunk({"content": "hmm "}),
                sse({"error": {"message": "overloaded mid-stream"}}),
            ]
        )
    if any(m["role"] == "tool" for m in messages):
        return Reply.stream(openai_text_stream(["All three ", "reported."]))
    prompts = ("DROP it", "GARBAGE it", "SSE_ERROR it")
    calls = [
        {
            "index": i,
            "id": f"call_{i}",
            "type": "function",
            "function": {
                "name": "agent",
                "arguments": orjson.dumps({"description": p, "prompt": p}).decode(),
            },
        }
        for i, p in enumerate(prompts)
    ]
    return Reply.stream(
        [
            openai_chunk({"role": "assistant", "content": "Splitting."}),
            openai_chunk({"tool_calls": calls}),
            openai_chunk({}, finish="tool_calls"),
            OPENAI_DONE,
        ]
    )


async def test_a_real_provider_failing_mid_stream_fails_only_its_sub_agent(
    workspace: Path, tmp_path: Path, nursery: trio.Nursery
) -> None:
    server = LLMServer()
    server.route = _route
    await nursery.start(server.serve)
    async with httpx.AsyncClient(timeout=httpx.Timeout(10)) as client:
        provider = OpenAIProvider(
            client=client,
            base_url=server.url + "/v1",
            api_key="sk-reliability-0123456789",
            model="gpt-test",
            retry=RetryPolicy(max_retries=1, base_delay_s=0.01, jitter=0),
        )
        with trio.fail_after(30):
            outcome, events = await run_checked(
                None, workspace, tmp_path / "trace.jsonl", provider=provider, foreign=nursery
            )
    assert (outcome.status, outcome.result) == ("completed", "All three reported.")
    subs = [e for e in finished(events, "agent").values() if e.parent_tool_use_id]
    assert len(subs) == 3
    assert {e.status for e in subs} == {"failed"}
    for end in subs:
        assert end.error
        assert "sk-reliability" not in end.error
    STATS["faults injected"] += 3
