"""Scenario files: checked before anything runs, faults named by their JSON path."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import Scenario, ScenarioError
from runtime.providers._scenario import agent_types_from_scenario, scenario_from_mapping

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


# -- scenario_from_mapping: a decoded scenario checked once per distinct object (issue 20) -----

_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(0, 3) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6,
)
_TURN = st.fixed_dictionaries(
    {},
    optional={
        "text": _TEXT | st.integers(),
        "tool_calls": st.lists(
            st.fixed_dictionaries({"name": st.sampled_from(["echo", "", "agent"])},
                                  optional={"input": st.dictionaries(_TEXT, _JSON, max_size=2)}),
            max_size=2,
        ),
        "delay_s": st.sampled_from([0, 0.5, -1, "x"]),
        "stop_reason": st.sampled_from(["end_turn", "tool_use", "nope"]),
    },
)
_AGENT = st.fixed_dictionaries(
    {"turns": st.lists(_TURN, max_size=3)},
    optional={
        "tools": st.lists(st.sampled_from(["echo", "read", ""]), max_size=2),
        "system": _TEXT,
        "max_turns": st.sampled_from([1, 3, 0, True]),
        "description": _TEXT,
    },
)
_SCENARIOS = st.fixed_dictionaries(
    {"agents": st.dictionaries(st.sampled_from(["main", "worker", "x"]), _AGENT, max_size=3)}
)


def _checked(obj: Any) -> Any:
    """The straightforward way: check the object afresh (the result or the error's text)."""
    try:
        scenario = Scenario.from_obj(dict(obj))
    except ScenarioError as exc:
        return ("error", str(exc))
    return (scenario, tuple(agent_types_from_scenario(scenario)))


def _remembered(obj: Any) -> Any:
    try:
        return scenario_from_mapping(obj)
    except ScenarioError as exc:
        return ("error", str(exc))


@settings(max_examples=200, deadline=None)
@given(obj=_SCENARIOS, seen_before=st.booleans())
def test_a_remembered_scenario_is_what_checking_it_afresh_gives(
    obj: dict[str, Any], seen_before: bool
) -> None:
    if seen_before:
        _remembered(copy.deepcopy(obj))
    assert _remembered(obj) == _checked(obj)
    assert _remembered(obj) == _checked(obj)  # the second time from the cache, if kept


def test_changing_the_dict_after_a_run_changes_the_scenario_of_the_next() -> None:
    obj = {"agents": {"main": {"turns": [
        {"tool_calls": [{"name": "echo", "input": {"text": "one"}}]}]}}}
    first, _ = scenario_from_mapping(obj)
    obj["agents"]["main"]["turns"][0]["tool_calls"][0]["input"]["text"] = "two"
    second, _ = scenario_from_mapping(obj)
    assert first.agents["main"].turns[0].tool_calls[0].input == {"text": "one"}
    assert second.agents["main"].turns[0].tool_calls[0].input == {"text": "two"}
    # The cached copy is the scenario's own: the caller's dict is not shared with it.
    obj["agents"]["main"]["turns"][0]["tool_calls"][0]["input"]["text"] = "one"
    assert scenario_from_mapping(obj)[0].agents["main"].turns[0].tool_calls[0].input == {
        "text": "one"
    }


def test_an_object_json_does_not_encode_back_is_checked_as_given() -> None:
    # A tuple is not an array to the checker; JSON would turn it into one.
    obj = {"agents": {"main": {"turns": ({"text": "hi"},)}}}
    for _ in range(2):
        with pytest.raises(ScenarioError, match=r"agents\.main\.turns: expected an array"):
            scenario_from_mapping(obj)
