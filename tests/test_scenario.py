"""Scenario files: checked before anything runs, faults named by their JSON path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import Scenario, ScenarioError

_MAIN = {"turns": [{"text": "hi"}]}


def _with(**agents: Any) -> dict[str, Any]:
    return {"agents": {"main": _MAIN, **agents}}


def test_the_spec_example_parses() -> None:
    scenario = Scenario.from_obj({"agents": {
        "main": {"turns": [
            {"text": "Splitting the work.", "tool_calls": [
                {"name": "agent", "input": {"description": "slow part", "prompt": "…", "agent": "sleeper"}},
                {"name": "agent", "input": {"description": "fast part", "prompt": "…", "agent": "worker"}}]},
            {"text": "Both parts are done."}]},
        "sleeper": {"tools": ["bash"], "turns": [
            {"tool_calls": [{"name": "bash", "input": {"command": "sleep 30"}}]}, {"text": "slept"}]},
        "worker": {"turns": [{"text": "ok", "delay_s": 0.1}]}}})
    assert set(scenario.agents) == {"main", "sleeper", "worker"}
    assert scenario.agents["sleeper"].tools == ("bash",)
    assert scenario.agents["main"].turns[0].tool_calls[1].input["agent"] == "worker"
    assert scenario.agents["worker"].turns[0].delay_s == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([], r"^\(top level\): expected an object"),
        ({}, r"^agents: missing"),
        ({"agents": {}, "extra": 1}, r"^extra: unknown key"),
        ({"agents": []}, r"^agents: expected an object"),
        ({"agents": {"worker": _MAIN}}, r"^agents\.main: missing"),
        (_with(worker=[]), r"^agents\.worker: expected an object"),
        (_with(worker={}), r"^agents\.worker\.turns: missing"),
        (_with(worker={"turns": {}}), r"^agents\.worker\.turns: expected an array"),
        (_with(worker={"turns": [], "colour": "red"}), r"^agents\.worker\.colour: unknown key"),
        (_with(worker={"turns": [1]}), r"^agents\.worker\.turns\[0\]: expected an object"),
        (_with(worker={"turns": [{}, {}, {"tool_calls": [{"input": {}}]}]}),
         r"^agents\.worker\.turns\[2\]\.tool_calls\[0\]\.name: missing"),
        (_with(worker={"turns": [{"tool_calls": [{"name": ""}]}]}),
         r"tool_calls\[0\]\.name: expected a tool name"),
        (_with(worker={"turns": [{"tool_calls": [{"name": "bash", "input": "ls"}]}]}),
         r"tool_calls\[0\]\.input: expected an object"),
        (_with(worker={"turns": [{"tool_calls": {}}]}), r"turns\[0\]\.tool_calls: expected an array"),
        (_with(worker={"turns": [{"tool_calls": [{"name": "x", "args": {}}]}]}),
         r"tool_calls\[0\]\.args: unknown key"),
        (_with(worker={"turns": [{"text": 5}]}), r"turns\[0\]\.text: expected a string, got a number"),
        (_with(worker={"turns": [{"delay_s": -1}]}), r"turns\[0\]\.delay_s: expected a number of seconds >= 0"),
        (_with(worker={"turns": [{"delay_s": "1"}]}), r"turns\[0\]\.delay_s: expected a number"),
        (_with(worker={"turns": [{"chunk_delay_s": True}]}), r"turns\[0\]\.chunk_delay_s"),
        (_with(worker={"turns": [{"usage": {"input_tokens": -1}}]}), r"usage\.input_tokens: expected a whole number"),
        (_with(worker={"turns": [{"usage": {"tokens": 1}}]}), r"usage\.tokens: unknown key"),
        (_with(worker={"turns": [{"usage": 5}]}), r"turns\[0\]\.usage: expected an object"),
        (_with(worker={"turns": [{"error": 1}]}), r"turns\[0\]\.error: expected a string"),
        (_with(worker={"turns": [{"stop_reason": "bored"}]}), r"turns\[0\]\.stop_reason"),
        (_with(worker={"turns": [], "tools": "bash"}), r"agents\.worker\.tools: expected an array"),
        (_with(worker={"turns": [], "tools": [3]}), r"agents\.worker\.tools\[0\]: expected a tool name"),
        (_with(worker={"turns": [], "system": []}), r"agents\.worker\.system: expected a string"),
        (_with(worker={"turns": [], "max_turns": 0}), r"agents\.worker\.max_turns"),
        (_with(worker={"turns": [{"text": "x", "bogus": 1}]}), r"turns\[0\]\.bogus: unknown key"),
    ],
)
def test_a_malformed_scenario_names_the_json_path_of_the_fault(obj: Any, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        Scenario.from_obj(obj)


def test_a_file_error_names_the_file_then_the_path(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"agents": {"main": {"turns": [{"tool_calls": [{}]}]}}}')
    with pytest.raises(ScenarioError, match=r"bad\.json: agents\.main\.turns\[0\]\.tool_calls\[0\]\.name: missing"):
        Scenario.load(path)


def test_a_file_that_is_not_json_is_refused_with_the_parser_position(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"agents": ')
    with pytest.raises(ScenarioError, match=r"bad\.json: not valid JSON"):
        Scenario.load(path)


def test_a_missing_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"nope\.json: cannot read"):
        Scenario.load(tmp_path / "nope.json")
