"""What a run cost and money budgets, end to end (docs/costs.md): costs on the events and in the
tree (scripted and over loopback HTTP), a ``usd`` budget refusing a subtree's next call while its
sibling finishes, ``--max-usd``, replay, the Ray transport, and bad input on the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio
import trio.testing

from runtime import (
    AgentFinished,
    AgentStarted,
    Budget,
    ConfigError,
    Limits,
    TurnFinished,
    open_runtime,
)
from runtime.cluster._host import pack_items, unpack_items
from runtime.trace._tree import TraceTree
from tests.harness import agent_call, run_scenario
from tests.invariants import by_type, check_invariants
from tests.llm_server import (
    OPENAI_DONE,
    LLMServer,
    Reply,
    anthropic_end,
    anthropic_message_start,
    anthropic_text_block,
    openai_chunk,
)

# One input token costs $0.00001, one output token $0.01: a turn's cost shows its usage. A
# turn reports 2,000 input tokens (more than the scripted context holds, so the estimate of
# the next call's input, calibrated by it, is about $0.02).
_MODEL = "test-model"
_PRICES = {_MODEL: {"input_per_mtok": 10.0, "output_per_mtok": 10_000.0}}
_TURN = {"usage": {"input_tokens": 2000, "output_tokens": 10}}  # $0.02 + $0.1
_TURN_COST = 0.12


def _statuses(events: list[Any]) -> dict[str, str]:
    names = {e.agent_id: e.name for e in by_type(events, AgentStarted)}
    return {names[e.agent_id]: e.status for e in by_type(events, AgentFinished)}


def _finished(events: list[Any]) -> dict[str, AgentFinished]:
    names = {e.agent_id: e.name for e in by_type(events, AgentStarted)}
    return {names[e.agent_id]: e for e in by_type(events, AgentFinished)}


async def test_costs_are_on_the_turns_the_agents_and_the_tree(workspace: Path) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("a", "worker"), agent_call("b", "worker")],
                            **_TURN},
                           {"text": "done", **_TURN}]},
        "worker": {"turns": [{"text": "did it", **_TURN}]}}}
    outcome, events = await run_scenario(scenario, workspace, model=_MODEL, prices=_PRICES)
    check_invariants(events)
    assert outcome.status == "completed"
    turns = by_type(events, TurnFinished)
    assert [t.cost_usd for t in turns] == [pytest.approx(_TURN_COST)] * 4  # type: ignore[attr-defined]
    finished = _finished(events)
    assert finished["main"].cost_usd == pytest.approx(2 * _TURN_COST), "its own turns only"
    assert outcome.cost_usd == pytest.approx(2 * _TURN_COST)

    tree = TraceTree.from_events(events)
    [root] = tree.roots
    tree.rollup()
    assert root.cost_usd == pytest.approx(2 * _TURN_COST)
    assert root.subtree_cost_usd == pytest.approx(4 * _TURN_COST)
    assert tree.total_cost_usd == pytest.approx(4 * _TURN_COST)
    plain = json.loads(orjson.dumps(tree.to_plain_json()))
    worker = plain["roots"][0]["children"][0]["children"][0]
    assert (worker["cost_usd"], worker["subtree_cost_usd"]) == (
        pytest.approx(_TURN_COST), pytest.approx(_TURN_COST))


async def test_an_unknown_model_costs_null_not_zero_everywhere(workspace: Path) -> None:
    scenario = {"agents": {"main": {"turns": [{"text": "hi", **_TURN}]}}}
    outcome, events = await run_scenario(scenario, workspace, model="nobody-prices-this")
    assert [t.cost_usd for t in by_type(events, TurnFinished)] == [None]  # type: ignore[attr-defined]
    assert outcome.cost_usd is None
    assert _finished(events)["main"].cost_usd is None
    tree = TraceTree.from_events(events)
    assert tree.total_cost_usd is None


async def test_a_usd_budget_refuses_the_next_call_and_ends_only_that_subtree(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # Two turns spend $0.24; the third's input estimate (about $0.02) would pass $0.25:
    # refused before it starts, while the sibling and the parent finish.
    spend = {"text": "spending", "delay_s": 1, **_TURN,
             "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]}
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [
            agent_call("greedy", "spender", budget={"usd": 0.25}),
            agent_call("calm", "calm")]}, {"text": "coped"}]},
        "spender": {"turns": [spend] * 10},
        "calm": {"turns": [{"text": "calm done", "delay_s": 5}]}}}
    outcome, events = await run_scenario(scenario, workspace, model=_MODEL, prices=_PRICES)
    check_invariants(events)
    assert _statuses(events) == {"main": "completed", "spender": "budget_exceeded",
                                 "calm": "completed"}
    spender = _finished(events)["spender"]
    assert spender.turns == 2, "the third call never started"
    assert spender.cost_usd == pytest.approx(2 * _TURN_COST)
    assert spender.error is not None
    assert spender.error.startswith("budget exceeded: $0.26")
    assert spender.error.endswith("spent, reserved and asked for > $0.25")
    result = outcome.state.messages[2].content[0]
    assert result.is_error  # type: ignore[union-attr]
    assert "spent, reserved and asked for" in result.content  # type: ignore[union-attr]


async def test_a_usd_budget_counts_the_whole_subtree_and_calls_under_way_finish(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # The lead's own turn ($0.12) and two workers' first turns, in parallel, reserved
    # together: the allowance lets all three calls start; once they are settled ($0.36) it is
    # passed, no second call starts, and the lead's subtree ends budget_exceeded.
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("team", "lead")]}, {"text": "ok"}]},
        "lead": {"turns": [
            {"tool_calls": [agent_call("w1", "worker"), agent_call("w2", "worker")], **_TURN},
            {"text": "lead done", **_TURN}]},
        "worker": {"turns": [{"text": "w", "delay_s": 1, **_TURN,
                              "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]}] * 3}}}
    types = [_type("lead", Budget(usd=0.25))]
    _, events = await run_scenario(scenario, workspace, model=_MODEL, prices=_PRICES,
                                   agent_types=types)
    check_invariants(events)
    statuses = _statuses(events)
    assert statuses["lead"] == "budget_exceeded"
    assert statuses["main"] == "completed"
    tree = TraceTree.from_events(events)
    tree.rollup()
    lead = next(a for a in tree.agents.values() if a.name == "lead")
    # Each worker's call under way when the allowance was reached finished and counts.
    assert lead.subtree_cost_usd == pytest.approx(3 * _TURN_COST)
    workers = [a for a in tree.agents.values() if a.name == "worker"]
    assert [(w.turns, w.status) for w in workers] == [(1, "cancelled"), (1, "cancelled")]


def _type(name: str, budget: Budget) -> Any:
    from runtime import AgentType

    return AgentType(name=name, description=name, system="", budget=budget)


async def test_budgets_and_limits_take_usd_and_refuse_nonsense() -> None:
    assert Budget.from_mapping({"usd": 0.5}) == Budget(usd=0.5)
    assert Budget(tokens=10).tighter(Budget(usd=1)) == Budget(tokens=10, usd=1)
    for bad in (0, -1, float("nan")):
        with pytest.raises(ConfigError, match=r"budget\.usd"):
            Budget(usd=bad)
    with pytest.raises(ConfigError, match="max_usd"):
        Limits(max_usd=-1)
    with pytest.raises(ConfigError, match=r'prices\."m"\.input_per_mtok'):
        async with open_runtime(scenario={"agents": {"main": {"turns": []}}}, trace=False,
                                prices={"m": {"input_per_mtok": -2, "output_per_mtok": 1}}):
            pass


# ------------------------------------------------------------------ over loopback HTTP


@pytest.fixture
async def server(nursery: trio.Nursery) -> LLMServer:
    server = LLMServer()
    await nursery.start(server.serve)
    return server


async def test_the_cost_of_a_real_providers_usage_prices_its_cache_apart(
    server: LLMServer, tmp_path: Path
) -> None:
    # 1,000 input tokens of which 600 read from the cache and 100 written; 50 output. A dated
    # Claude name is its family's price: $3 / $15, cache reads $0.30, writes $3.75.
    start = anthropic_message_start(300, cache_read_input_tokens=600,
                                    cache_creation_input_tokens=100)
    server.push(Reply.stream([start, *anthropic_text_block(0, ["hello"]),
                              *anthropic_end("end_turn", 50)]))
    env = {"ANTHROPIC_API_KEY": "sk-test-0123456789", "ANTHROPIC_BASE_URL": server.url,
           "PATH": "/usr/bin:/bin"}
    events: list[Any] = []
    with trio.fail_after(20):
        async with open_runtime("anthropic", model="claude-sonnet-4-5-20250929", env=env,
                                workspace=tmp_path, trace=False, on_event=events.append) as rt:
            outcome = await rt.run("hi")
    assert outcome.status == "completed"
    [turn] = by_type(events, TurnFinished)
    assert (turn.input_tokens, turn.cache_read_tokens, turn.cache_write_tokens) == (1000, 600, 100)  # type: ignore[attr-defined]
    expected = (300 * 3 + 600 * 0.30 + 100 * 3.75 + 50 * 15) / 1e6
    assert turn.cost_usd == pytest.approx(expected)  # type: ignore[attr-defined]
    assert _finished(events)["main"].cost_usd == pytest.approx(expected)


async def test_openais_cached_prompt_tokens_are_priced_as_cached_input(
    server: LLMServer, tmp_path: Path
) -> None:
    usage = {"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020,
             "prompt_tokens_details": {"cached_tokens": 800}}
    server.push(Reply.stream([
        openai_chunk({"role": "assistant", "content": "hi"}), openai_chunk({}, finish="stop"),
        openai_chunk(no_choices=True, usage=usage), OPENAI_DONE]))
    env = {"OPENAI_API_KEY": "sk-test-0123456789", "OPENAI_BASE_URL": server.url + "/v1",
           "PATH": "/usr/bin:/bin"}
    events: list[Any] = []
    with trio.fail_after(20):
        async with open_runtime("openai", model="gpt-4o-2024-08-06", env=env,
                                workspace=tmp_path, trace=False, on_event=events.append) as rt:
            assert (await rt.run("hi")).status == "completed"
    [turn] = by_type(events, TurnFinished)
    assert (turn.input_tokens, turn.cache_read_tokens, turn.cache_write_tokens) == (1000, 800, None)  # type: ignore[attr-defined]
    # gpt-4o: $2.50 input, $1.25 cached input, $10 output.
    assert turn.cost_usd == pytest.approx((200 * 2.5 + 800 * 1.25 + 20 * 10) / 1e6)  # type: ignore[attr-defined]


# ------------------------------------------------------------------ across Ray, in replay


def test_costs_survive_the_ray_hosts_event_transport() -> None:
    from runtime.cluster._host import Batch

    turn = TurnFinished(agent_id="a", parent_tool_use_id=None, turn=1, stop_reason="end_turn",
                        input_tokens=5, output_tokens=6, cost_usd=0.125, cache_read_tokens=3)
    end = AgentFinished(agent_id="a", parent_tool_use_id=None, status="completed", result="r",
                        error=None, turns=1, input_tokens=5, output_tokens=6, duration_s=1.0,
                        cost_usd=0.125)
    packed = pack_items([("c1", Batch(events=(turn, end)))])
    [(call_id, batch)] = unpack_items(packed)
    assert call_id == "c1"
    assert batch.events == (turn, end)


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "COLUMNS": "120", **(env or {})}
    return subprocess.run([sys.executable, "-m", "runtime", *args], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=60, check=False)


def _tree_of(trace: Path) -> dict[str, Any]:
    from runtime.trace._tracefile import load_traces

    [tree] = load_traces(trace)
    return json.loads(orjson.dumps(tree.to_plain_json()))


def _costs(node: dict[str, Any], out: dict[str, Any] | None = None) -> dict[str, Any]:
    out = {} if out is None else out
    if node.get("kind") == "agent":
        out[node["id"]] = (node["cost_usd"], node["subtree_cost_usd"])
    for child in node.get("children", []):
        _costs(child, out)
    return out


async def test_a_replay_costs_what_the_recorded_run_cost(workspace: Path, tmp_path: Path) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("a", "worker")], **_TURN},
                           {"text": "done", **_TURN}]},
        "worker": {"turns": [{"text": "w", "usage": {"input_tokens": 7, "output_tokens": 3}}]}}}
    recorded = tmp_path / "recorded.jsonl"
    async with open_runtime(scenario=scenario, workspace=workspace, trace=recorded,
                            model=_MODEL, prices=_PRICES) as rt:
        assert (await rt.run("go")).status == "completed"
    replayed = tmp_path / "replayed.jsonl"
    proc = await trio.to_thread.run_sync(lambda: _cli(
        "replay", str(recorded), "--trace", str(replayed), "--mock-tools", cwd=workspace))
    assert proc.returncode == 0, proc.stderr
    before = _costs({"children": _tree_of(recorded)["roots"]})
    after = _costs({"children": _tree_of(replayed)["roots"]})
    assert before == after
    assert before["agent-1"] == (pytest.approx(2 * _TURN_COST),
                                 pytest.approx(2 * _TURN_COST + 0.03007))
    # The run's own price rows went with it, so the replay (no settings) costs the same.
    assert json.loads(recorded.read_text().splitlines()[0])["config"]["prices"] == {
        _MODEL: {"input_per_mtok": 10.0, "output_per_mtok": 10_000.0}}


# ------------------------------------------------------------------ the command line


def _scenario_file(tmp_path: Path, scenario: dict[str, Any]) -> Path:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario))
    return path


def test_max_usd_ends_the_run_budget_exceeded_with_its_cost_in_stats(tmp_path: Path) -> None:
    # gpt-4o: 40k input + 10k output is $0.20 a turn; the second call's input estimate
    # (about $0.10) would take the run past $0.25.
    big = {"usage": {"input_tokens": 40_000, "output_tokens": 10_000},
           "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]}
    scenario = _scenario_file(tmp_path, {"agents": {"main": {"turns": [big] * 5}}})
    trace = tmp_path / "t.jsonl"
    proc = _cli("run", "go", "--scenario", str(scenario), "--model", "gpt-4o-2024-08-06",
                "--max-usd", "0.25", "--trace", str(trace), "--permission-mode", "allow-all",
                "--json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    [end] = [e for e in events if e["type"] == "agent_finished"]
    assert end["status"] == "budget_exceeded"
    assert end["turns"] == 1
    assert end["cost_usd"] == pytest.approx(0.2)
    assert "> $0.25" in end["error"]
    [started] = [e for e in events if e["type"] == "run_started"]
    assert started["config"]["limits"]["max_usd"] == pytest.approx(0.25)

    stats = _cli("trace", "stats", str(trace), "--json", cwd=tmp_path)
    [run] = json.loads(stats.stdout)["runs"]
    assert run["cost_usd"] == pytest.approx(0.2)
    assert run["by_agent_type"]["main"]["cost_usd"] == pytest.approx(0.2)
    text = _cli("trace", "stats", str(trace), "--no-color", cwd=tmp_path).stdout
    assert "$0.200" in text.splitlines()[0]


@pytest.mark.parametrize(
    ("settings", "flags", "line"),
    [
        ('[prices."gpt-4o"]\ninput_per_mtok = "2.5"\n', [],
         'prices: "gpt-4o".input_per_mtok: expected a number >= 0 (dollars per million tokens), '
         "got '2.5'"),
        ('[prices."gpt-4o"]\noutput_per_mtok = -1\n', [],
         'prices: "gpt-4o".output_per_mtok: expected a number >= 0'),
        ('[prices."gpt-4o"]\ninput_per_mtk = 1\n', [], 'prices: "gpt-4o".input_per_mtk: unknown key'),
        ("[limits]\nmax_usd = -1\n", [], "limits.max_usd: expected a number of dollars > 0"),
        ("", ["--max-usd", "-1"], "argument --max-usd: expected a number of dollars > 0, got -1"),
        ("", ["--max-usd", "lots"], "argument --max-usd: expected a number of dollars, got 'lots'"),
    ],
)
def test_bad_prices_and_allowances_are_one_line_naming_the_setting_exit_2(
    tmp_path: Path, settings: str, flags: list[str], line: str
) -> None:
    config = tmp_path / "config"
    (config / "trio-agents").mkdir(parents=True)
    (config / "trio-agents" / "settings.toml").write_text(settings)
    scenario = _scenario_file(tmp_path, {"agents": {"main": {"turns": [{"text": "hi"}]}}})
    proc = _cli("run", "go", "--scenario", str(scenario), "--no-trace", *flags, cwd=tmp_path,
                env={"XDG_CONFIG_HOME": str(config)})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert line in lines[0]


async def test_the_run_header_and_the_summary_line_say_the_cost(workspace: Path) -> None:
    from runtime.cli._live import summary_line
    from runtime.trace._render import render_header

    scenario = {"agents": {"main": {"turns": [{"text": "a", **_TURN}]}}}
    _, events = await run_scenario(scenario, workspace, model=_MODEL, prices=_PRICES)
    tree = TraceTree.from_events(events)
    assert render_header(tree, color=False).plain.endswith("tokens 2.0k→10, $0.120")
    assert summary_line(tree, rich=False).endswith("· 2.0k tokens · $0.120")
    # Unknown: nothing said there (the warning said it once).
    _, events = await run_scenario(scenario, workspace)
    tree = TraceTree.from_events(events)
    assert "$" not in render_header(tree, color=False).plain + summary_line(tree, rich=False)


def test_an_untrusted_workspaces_prices_are_ignored_and_named(tmp_path: Path) -> None:
    from runtime.project import load_settings

    ws = tmp_path / "ws"
    (ws / ".trio-agents").mkdir(parents=True)
    (ws / ".trio-agents" / "settings.toml").write_text(
        '[prices."gpt-4o"]\ninput_per_mtok = 0\noutput_per_mtok = 0\n')
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    untrusted = load_settings(ws, env=env, trusted=False)
    assert untrusted["prices"] == ()
    assert [(name, where.rsplit(":", 1)[1]) for name, _, where in untrusted.ignored] == [
        ("prices", "1")]
    trusted = load_settings(ws, env=env, trusted=True)
    assert trusted["prices"] == (("gpt-4o", (("input_per_mtok", 0.0), ("output_per_mtok", 0.0))),)


async def test_a_context_summary_costs_the_agent_like_its_turns(workspace: Path) -> None:
    from runtime import ContextCompacted

    scenario = {"agents": {
        "main": {"turns": [
            {"text": "Hello! " + "Here is a long answer about the parser. " * 30, **_TURN},
            {"text": "Second answer: " + "more detail on the grammar. " * 30, **_TURN}]},
        "compact": {"turns": [{"text": "The parser was discussed.",
                               "usage": {"input_tokens": 400, "output_tokens": 12}}]}}}
    events: list[Any] = []
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False, model=_MODEL,
                            prices=_PRICES, on_event=events.append) as rt:
        first = await rt.run("tell me about the parser")
        second = await rt.run("more", history=first.state.messages)
        compacted = await rt.compact(second.state.messages)
    summary = next(e for e in by_type(events, ContextCompacted) if e.method == "summary")  # type: ignore[attr-defined]
    assert summary.cost_usd == pytest.approx(400 * 1e-5 + 12 * 0.01)  # type: ignore[attr-defined]
    assert compacted.cost_usd == pytest.approx(summary.cost_usd)  # type: ignore[attr-defined]
    tree = TraceTree.from_events(events)
    assert tree.agents[compacted.agent_id].cost_usd == pytest.approx(summary.cost_usd)  # type: ignore[attr-defined]


def test_the_plain_lines_and_the_outcome_line_say_what_a_priced_run_cost(tmp_path: Path) -> None:
    scenario = _scenario_file(tmp_path, {"agents": {"main": {"turns": [
        {"text": "hi", "usage": {"input_tokens": 1000, "output_tokens": 100}}]}}})
    proc = _cli("run", "go", "--scenario", str(scenario), "--no-trace", "--model",
                "claude-haiku-4-5", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # claude-haiku-4-5: 1,000 in at $1, 100 out at $5 per million.
    assert "[main] agent completed (" in proc.stdout
    assert "1,100 tokens, $0.0015)" in proc.stdout
    assert "run completed in" in proc.stderr
    assert proc.stderr.strip().splitlines()[0].endswith("· 1.1k tokens · $0.0015")
