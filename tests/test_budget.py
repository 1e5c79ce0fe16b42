"""Budgets per subtree: tokens, wall-clock seconds and tool calls; usage rolls up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from runtime import (
    AgentFinished,
    AgentStarted,
    AgentType,
    Budget,
    CancelRequested,
    ConfigError,
    Limits,
    open_runtime,
)
from tests.harness import agent_call, run_scenario
from tests.invariants import by_type, check_invariants

_SPEND = {"text": "spending", "usage": {"input_tokens": 40, "output_tokens": 10},
          "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]}


def _statuses(events: list[Any]) -> dict[str, str]:
    names = {e.agent_id: e.name for e in by_type(events, AgentStarted)}
    return {names[e.agent_id]: e.status for e in by_type(events, AgentFinished)}


async def test_a_token_budget_ends_only_that_subtree_and_tells_the_parent_why(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [
            agent_call("greedy", "spender", budget={"tokens": 120}),
            agent_call("calm", "calm")]}, {"text": "coped"}]},
        "spender": {"turns": [{**_SPEND, "delay_s": 1}] * 10},
        "calm": {"turns": [{"text": "calm done", "delay_s": 5}]}}}
    outcome, events = await run_scenario(scenario, workspace)
    check_invariants(events)
    assert _statuses(events) == {"main": "completed", "spender": "budget_exceeded",
                                 "calm": "completed"}
    results = list(outcome.state.messages[2].content)
    assert results[0].is_error  # type: ignore[union-attr]
    assert "budget exceeded: 150 tokens > 120" in results[0].content  # type: ignore[union-attr]
    [cancel] = by_type(events, CancelRequested)
    assert cancel.by == "budget"  # type: ignore[attr-defined]


async def test_usage_of_grandchildren_counts_against_an_ancestor_budget(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("team", "lead")]}, {"text": "ok"}]},
        "lead": {"turns": [
            {"tool_calls": [agent_call("w1", "worker"), agent_call("w2", "worker")]},
            {"text": "lead done"}]},
        "worker": {"turns": [{**_SPEND, "delay_s": 1}] * 10}}}
    _outcome, events = await run_scenario(
        scenario, workspace, agent_types=[AgentType(name="lead", budget=Budget(tool_calls=7))])
    check_invariants(events)
    statuses = _statuses(events)
    assert statuses["lead"] == "budget_exceeded"
    assert statuses["main"] == "completed"
    finished = {e.agent_id: e for e in by_type(events, AgentFinished)}
    lead = next(e for e in by_type(events, AgentStarted) if e.name == "lead")  # type: ignore[attr-defined]
    assert "tool calls > 7" in (finished[lead.agent_id].error or "")  # type: ignore[attr-defined]
    workers = [e for e in by_type(events, AgentStarted) if e.name == "worker"]  # type: ignore[attr-defined]
    assert {finished[w.agent_id].status for w in workers} == {"cancelled"}  # type: ignore[attr-defined]


async def test_a_wall_clock_budget_ends_the_subtree_at_its_deadline(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("slow", "slow", budget={"seconds": 3})]},
                           {"text": "ok"}]},
        "slow": {"turns": [{"text": "late", "delay_s": 60}]}}}
    outcome, events = await run_scenario(scenario, workspace)
    check_invariants(events)
    assert _statuses(events)["slow"] == "budget_exceeded"
    assert trio.current_time() == pytest.approx(3.0)
    result = outcome.state.messages[2].content[0]
    assert "budget exceeded: 3 s of wall time" in result.content  # type: ignore[union-attr]


async def test_the_tighter_of_type_and_call_budget_applies(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("x", "slow", budget={"seconds": 50})]},
                           {"text": "ok"}]},
        "slow": {"turns": [{"text": "late", "delay_s": 60}]}}}
    _, events = await run_scenario(
        scenario, workspace, agent_types=[AgentType(name="slow", budget=Budget(seconds=2))])
    assert _statuses(events)["slow"] == "budget_exceeded"
    assert trio.current_time() == pytest.approx(2.0)


async def test_a_bad_budget_in_the_call_is_an_error_result(workspace: Path) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("x", "general", budget={"tokens": 0})]},
                           {"text": "ok"}]}}}
    outcome, events = await run_scenario(scenario, workspace)
    result = outcome.state.messages[2].content[0]
    assert result.is_error
    assert "input.budget" in result.content
    assert len(by_type(events, AgentStarted)) == 1


def test_budgets_reject_nonsense() -> None:
    with pytest.raises(ConfigError, match=r"budget\.tokens"):
        Budget(tokens=-5)
    with pytest.raises(ConfigError, match=r"budget\.speed: unknown key"):
        Budget.from_mapping({"speed": 1})
    assert Budget(tokens=5).tighter(Budget(tokens=3, seconds=1)) == Budget(tokens=3, seconds=1)


async def test_the_budget_layer_only_remembers_live_agents(workspace: Path) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call(f"n{i}", "w") for i in range(50)]},
                           {"text": "ok"}]},
        "w": {"turns": [{"text": "done"}]}}}
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                            limits=Limits(max_parallel=50)) as rt:
        await rt.run("go")
        assert len(rt._run.budget) == 0


def _budget_tasks(rt: Any) -> list[str]:
    return [t.name for t in rt._nursery.child_tasks if "BudgetLayer.run" in t.name]


async def test_the_budget_task_runs_only_once_a_budget_that_can_trip_is_set(
    tmp_path: Path,
) -> None:
    scenario = {"agents": {"main": {"turns": [{"text": "hi"}]}}}
    async with open_runtime(scenario=scenario, workspace=tmp_path, trace=False) as rt:
        assert (await rt.run("go")).status == "completed"
        assert _budget_tasks(rt) == []  # no budget anywhere: nothing to carry out
    budgeted = AgentType(name="main", budget=Budget(tokens=10**6))
    async with open_runtime(
        scenario=scenario, workspace=tmp_path, trace=False, agent_types=[budgeted]
    ) as rt:
        assert (await rt.run("go")).status == "completed"
        assert len(_budget_tasks(rt)) == 1


def test_recorded_usage_given_before_an_agent_is_announced_counts_when_it_is() -> None:
    """A resumed agent's recorded turns are given to it before its ``agent_started``
    (docs/resume.md): their usage is kept and counted, against its budget and its
    ancestors', as soon as it is announced."""
    from runtime.core import AgentStarted
    from runtime.core._budget import BudgetLayer
    from runtime.core._limits import Budget

    async def cancel(agent_id: str, reason: str) -> bool:
        return True

    layer = BudgetLayer(cancel)
    common = {"seq": 1, "ts": 0.0, "run_id": "r"}
    layer.set_budget("a", Budget(tokens=1000, tool_calls=10))
    layer(AgentStarted(agent_id="a", name="main", parent_agent_id=None, depth=0, prompt="p",
                       parent_tool_use_id=None, **common))
    layer.add_recorded("b", tokens=300, tool_calls=4)
    layer.add_recorded("b", tokens=100, tool_calls=1)
    assert layer.usage("a") == (0, 0)  # b is not announced yet
    layer(AgentStarted(agent_id="b", name="w", parent_agent_id="a", depth=1, prompt="p",
                       parent_tool_use_id="c1", **common))
    assert layer.usage("b") == (400, 5)
    assert layer.usage("a") == (400, 5)
