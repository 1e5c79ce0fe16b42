"""Where an agent's window and threshold come from (CLI, agent types, scenario, Python API),
the Python API's ``Runtime.compact``, output caps from the window, and the views' one line."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

from runtime import (
    AgentType,
    ConfigError,
    ContextCompacted,
    Event,
    Limits,
    ScenarioError,
    ToolFinished,
    TurnFinished,
    decode_event,
    open_runtime,
)
from runtime.cli._live import PlainView
from runtime.core._agent_types import agent_types_from_mapping
from runtime.core._compaction import SUMMARY_HEADER, history_problems
from runtime.core._messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from runtime.providers._scenario import Scenario
from runtime.trace._render import event_line
from runtime.trace._tree import TraceTree
from tests.invariants import by_type, check_invariants


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "runtime", *args],
        cwd=cwd,
        capture_output=True,
        check=False,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "120"},
    )


GROWING = {
    "agents": {
        "main": {
            "turns": [
                {
                    "text": "one " * 200,
                    "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}],
                    "usage": {"input_tokens": 1000},
                },
                {
                    "text": "two " * 200,
                    "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}],
                    "usage": {"input_tokens": 1500},
                },
                {
                    "text": "three " * 200,
                    "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}],
                    "usage": {"input_tokens": 2000},
                },
                {"text": "done", "usage": {"input_tokens": 500}},
            ]
        }
    }
}


def test_the_command_line_sets_the_window_and_the_threshold(tmp_path: Path) -> None:
    scenario = tmp_path / "s.json"
    scenario.write_bytes(orjson.dumps(GROWING))
    proc = cli(
        "run",
        "go",
        "--scenario",
        str(scenario),
        "--json",
        "--no-trace",
        "--context-window",
        "4000",
        "--compact-threshold",
        "50%",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    events = [decode_event(line) for line in proc.stdout.splitlines()]
    check_invariants(events)
    assert events[0].config["limits"]["context_window"] == 4000  # type: ignore[attr-defined]
    assert events[0].config["limits"]["compact_threshold"] == pytest.approx(0.5)  # type: ignore[attr-defined]
    assert {e.context_window for e in by_type(events, TurnFinished)} == {4000}  # type: ignore[attr-defined]
    # At 50 % of 4,000 the third request (about 2,000 tokens and more) is compacted first.
    assert by_type(events, ContextCompacted)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--context-window", "0"), "--context-window: expected a whole number >= 1, got 0"),
        (("--compact-threshold", "0"), "--compact-threshold: expected a percentage from 1 to 100"),
        (("--compact-threshold", "lots"), "--compact-threshold: expected a percentage, got 'lots'"),
    ],
)
def test_bad_window_options_are_one_line_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    proc = cli("run", "go", *args, cwd=tmp_path)
    assert proc.returncode == 2
    [line] = proc.stderr.decode().splitlines()
    assert message in line


def test_agent_types_and_scenarios_take_a_context_window() -> None:
    [t] = agent_types_from_mapping({"agents": {"r": {"context_window": 32000}}})
    assert t.context_window == 32000
    with pytest.raises(ConfigError, match=r"agents\.r\.context_window: expected a whole number"):
        agent_types_from_mapping({"agents": {"r": {"context_window": "big"}}})
    scenario = Scenario.from_obj({"agents": {"main": {"turns": [], "context_window": 9000}}})
    assert scenario.agents["main"].context_window == 9000
    with pytest.raises(ScenarioError, match=r"agents\.main\.context_window: expected a whole"):
        Scenario.from_obj({"agents": {"main": {"turns": [], "context_window": 0}}})
    with pytest.raises(ConfigError, match="compact_threshold: expected a fraction in"):
        Limits(compact_threshold=1.5)


async def test_the_agent_types_window_beats_the_runs_which_beats_the_model(tmp_path: Path) -> None:
    scenario = {
        "agents": {
            "main": {"turns": [{"text": "hi"}]},
            "small": {"turns": [], "context_window": 5000},
        }
    }
    async with open_runtime(scenario=scenario, workspace=tmp_path, trace=False) as rt:
        assert rt.context_window("main") == 128_000  # "scripted" is no known model
        assert rt.context_window("small") == 5000
    async with open_runtime(
        scenario=scenario,
        workspace=tmp_path,
        trace=False,
        limits=Limits(context_window=64_000),
        agent_types=[AgentType(name="tiny", context_window=2000)],
    ) as rt:
        assert rt.context_window("main") == 64_000
        assert rt.context_window("small") == 5000
        assert rt.context_window("tiny") == 2000
    async with open_runtime(
        scenario=scenario, model="claude-sonnet-4-5", workspace=tmp_path, trace=False
    ) as rt:
        assert rt.context_window("main") == 200_000


async def test_a_small_window_caps_tool_output_with_a_way_to_the_rest(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("".join(f"line {i} " + "y" * 60 + "\n" for i in range(500)))
    scenario = {
        "agents": {
            "main": {
                "context_window": 2000,
                "turns": [
                    {"tool_calls": [{"name": "read", "input": {"path": "big.txt"}}]},
                    {"text": "ok"},
                ],
            }
        }
    }
    events: list[Event] = []
    async with open_runtime(
        scenario=scenario, workspace=tmp_path, trace=False, on_event=events.append
    ) as rt:
        outcome = await rt.run("read it")
    [finished] = by_type(events, ToolFinished)
    output = finished.output  # type: ignore[attr-defined]
    assert 2000 <= len(output) <= 2000 + 100
    assert output.endswith("[474 more lines: 27-500 of 500; continue with offset=27]")
    # The agent then compacted before its next request: that output was the bulk of it.
    assert outcome.status == "completed"
    assert [e.method for e in by_type(events, ContextCompacted)] == ["trim"]  # type: ignore[attr-defined]


async def test_runtime_compact_summarises_a_history_as_an_agent_of_its_own(tmp_path: Path) -> None:
    history = [Message(role="user", content=(TextBlock(text="Refactor the parser."),))]
    for i in range(8):
        history += [
            Message(
                role="assistant",
                content=(
                    TextBlock(text=f"step {i}"),
                    ToolUseBlock(id=f"c{i}", name="bash", input={"command": f"run {i}"}),
                ),
            ),
            Message(
                role="user", content=(ToolResultBlock(tool_use_id=f"c{i}", content="z" * 600),)
            ),
        ]
    scenario: dict[str, Any] = {
        "agents": {
            "main": {"turns": []},
            "compact": {
                "turns": [
                    {
                        "text": "Refactored three functions.",
                        "usage": {"input_tokens": 300, "output_tokens": 9},
                    }
                ]
            },
        }
    }
    events: list[Event] = []
    async with open_runtime(
        scenario=scenario, workspace=tmp_path, trace=False, on_event=events.append
    ) as rt:
        outcome = await rt.compact(history, instructions="the function names")
    check_invariants(events)
    assert outcome.status == "completed"
    assert outcome.result is not None
    assert outcome.result.startswith("compacted: about ")
    assert outcome.result.endswith("(trim, summary)")
    assert (outcome.input_tokens, outcome.output_tokens) == (300, 9)
    messages = outcome.state.messages
    assert history_problems(messages) == []
    head = messages[0].content
    assert head[0] == TextBlock(text="Refactor the parser.")
    assert isinstance(head[1], TextBlock)
    assert head[1].text.startswith(SUMMARY_HEADER)
    assert [e.method for e in by_type(events, ContextCompacted)] == ["trim", "summary"]  # type: ignore[attr-defined]
    [started] = [e for e in events if e.type == "agent_started"]
    assert started.prompt == "/compact the function names"  # type: ignore[attr-defined]


async def test_runtime_compact_of_a_short_history_says_there_was_nothing_to_do(
    tmp_path: Path,
) -> None:
    scenario: dict[str, Any] = {"agents": {"main": {"turns": []}}}
    async with open_runtime(scenario=scenario, workspace=tmp_path, trace=False) as rt:
        history = [Message(role="user", content=(TextBlock(text="hi"),))]
        outcome = await rt.compact(history)
    assert (outcome.status, outcome.result) == (
        "completed",
        "not compacted: nothing old enough to summarise",
    )
    assert outcome.state.messages == history


def test_the_plain_view_and_trace_tail_say_a_compaction_in_one_line() -> None:
    common: dict[str, Any] = {"run_id": "r", "ts": 1.0, "parent_tool_use_id": None}
    from runtime import AgentStarted

    started = AgentStarted(
        seq=1, agent_id="agent-1", name="main", parent_agent_id=None, depth=0, prompt="p", **common
    )
    compacted = ContextCompacted(
        seq=2,
        agent_id="agent-1",
        method="summary",
        tokens_before=152_300,
        tokens_after=31_000,
        messages_before=84,
        messages_after=7,
        input_tokens=60_100,
        output_tokens=1_200,
        **common,
    )
    out = io.StringIO()
    view = PlainView(TraceTree(), out)
    view.tap(started)
    view.tap(compacted)
    view.flush()
    assert out.getvalue().splitlines()[-1] == (
        "⟲ [main] context compacted (summary): 152.3k → 31.0k tokens, 84 → 7 messages; the "
        "summary cost 60.1k→1.2k tokens"
    )
    tree = TraceTree()
    tree.apply(started)
    tree.apply(compacted)
    line = event_line(tree, {"type": "context_compacted", **vars_of(compacted)})
    assert line is not None
    assert line.endswith(
        "⟲ main agent-1: context compacted (summary): 152.3k → 31.0k tokens, "
        "84 → 7 messages; the summary cost 60.1k→1.2k tokens"
    )
    [agent] = tree.roots
    assert agent.compactions == 1
    assert agent.context_tokens == 31_000
    assert (agent.input_tokens, agent.output_tokens) == (60_100, 1_200)


def vars_of(event: Event) -> dict[str, Any]:
    import attrs

    return attrs.asdict(event)


async def test_a_bug_in_a_compaction_does_not_end_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runtime.core import _compaction

    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(_compaction, "trim_tool_results", broken)
    scenario = {
        "agents": {
            "main": {
                "context_window": 1000,
                "turns": [
                    {
                        "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}],
                        "usage": {"input_tokens": 990},
                    },
                    {"text": "fine"},
                ],
            }
        }
    }
    with trio.fail_after(10):
        async with open_runtime(scenario=scenario, workspace=tmp_path, trace=False) as rt:
            outcome = await rt.run("go")
    assert (outcome.status, outcome.result) == ("completed", "fine")


def test_the_live_view_prints_a_compaction_above_the_tree_in_one_line() -> None:
    from rich.console import Console

    from runtime import AgentStarted
    from runtime.cli._live import LiveView

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160, height=40, color_system=None)
    view = LiveView(TraceTree(), console, held=True)
    common: dict[str, Any] = {"run_id": "r", "ts": 1.0, "parent_tool_use_id": None}
    view.tap(
        AgentStarted(
            seq=1,
            agent_id="agent-1",
            name="main",
            parent_agent_id=None,
            depth=0,
            prompt="p",
            **common,
        )
    )
    view.tap(
        ContextCompacted(
            seq=2,
            agent_id="agent-1",
            method="trim",
            tokens_before=9000,
            tokens_after=4000,
            messages_before=40,
            messages_after=40,
            **common,
        )
    )
    assert out.getvalue() == ""  # the tap never draws
    view.finish_turn("agent-1")
    assert out.getvalue().splitlines()[0] == (
        "⟲ [main] context compacted (trim): 9.0k → 4.0k tokens, 40 → 40 messages"
    )
