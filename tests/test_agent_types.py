"""Agent types from the Python API, scenario files and TOML files."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import AgentType, AgentTypes, Budget, ConfigError, Scenario, load_agent_types
from runtime.core._agent_types import default_agent_types
from runtime.providers._scenario import agent_types_from_scenario


def test_main_and_general_always_exist() -> None:
    types = AgentTypes()
    assert {"main", "general"} <= set(types)
    assert types.lookup("general").tools is None


def test_a_later_definition_refines_only_what_it_sets() -> None:
    types = AgentTypes([AgentType(name="rev", system="Review.", tools=("read",))])
    types.add(AgentType(name="rev", max_turns=3))
    rev = types.lookup("rev")
    assert (rev.system, rev.tools, rev.max_turns) == ("Review.", ("read",), 3)


def test_lookup_of_an_unknown_type_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown agent type 'x'; known types: general, main"):
        AgentTypes().lookup("x")


def test_toml_agent_types_load_every_setting(tmp_path: Path) -> None:
    path = tmp_path / "agents.toml"
    path.write_text(
        '[agents.reviewer]\ndescription = "Reviews"\nsystem = "You review."\n'
        'tools = ["read", "grep"]\nmodel = "m1"\nmax_turns = 7\n'
        'budget = { tokens = 100, seconds = 5, tool_calls = 3 }\nplacement = "local"\n'
    )
    [rev] = load_agent_types(path)
    assert rev == AgentType(name="reviewer", description="Reviews", system="You review.",
                            tools=("read", "grep"), model="m1", max_turns=7,
                            budget=Budget(tokens=100, seconds=5, tool_calls=3))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("agents = 3", r"agents: missing"),
        ("[agents]\nx = 1", r"agents\.x: expected a table"),
        ("[agents.x]\ncolour = 'red'", r"agents\.x\.colour: unknown key"),
        ("[agents.x]\ntools = 'read'", r"agents\.x\.tools: expected a list"),
        ("[agents.x]\nmax_turns = 0", r"agents\.x\.max_turns"),
        ("[agents.x]\nbudget = { tokens = -1 }", r"budget\.tokens"),
        ("[agents.x]\nbudget = { money = 1 }", r"agents\.x\.budget\.money: unknown key"),
        ("[agents.x]\nplacement = 'mars'", r"agents\.x\.placement"),
        ("[agents.x]\nsystem = 5", r"agents\.x\.system: expected a string"),
        ("[agents.x", r"not valid TOML"),
    ],
)
def test_a_bad_toml_file_is_one_error_naming_the_key(tmp_path: Path, text: str,
                                                     message: str) -> None:
    path = tmp_path / "agents.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_agent_types(path)


def test_a_missing_toml_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_agent_types(tmp_path / "none.toml")


def test_scenario_agents_become_agent_types() -> None:
    scenario = Scenario.from_obj({"agents": {
        "main": {"turns": []},
        "w": {"turns": [], "system": "S", "tools": ["bash"], "max_turns": 2,
              "description": "worker"}}})
    types = {t.name: t for t in agent_types_from_scenario(scenario)}
    assert types["w"] == AgentType(name="w", system="S", tools=("bash",), max_turns=2,
                                   description="worker")


# -- merging is remembered (issue 20): the same as merging afresh --------------------------------


def _merged_afresh(base: AgentType, other: AgentType) -> AgentType:
    changes = {
        f.name: getattr(other, f.name)
        for f in attrs.fields(AgentType)
        if getattr(other, f.name) != f.default and f.name != "name"
    }
    return attrs.evolve(base, **changes)


_TYPES = st.builds(
    AgentType,
    name=st.sampled_from(["main", "general", "worker"]),
    description=st.sampled_from(["", "d1", "d2"]),
    tools=st.none() | st.tuples(st.sampled_from(["read", "bash"])),
    model=st.none() | st.sampled_from(["m1", "m2"]),
    max_turns=st.none() | st.integers(1, 3),
    budget=st.none() | st.builds(Budget, tokens=st.none() | st.integers(1, 9)),
    context_window=st.none() | st.integers(1, 9),
)


@settings(max_examples=200, deadline=None)
@given(types=st.lists(_TYPES, max_size=6))
def test_a_table_of_types_is_the_defaults_merged_with_each_in_turn(types: list[AgentType]) -> None:
    expected = {t.name: t for t in default_agent_types()}
    for t in types:
        old = expected.get(t.name)
        expected[t.name] = _merged_afresh(old, t) if old else t
    for _ in range(2):  # the second time, merges come from the cache
        table = AgentTypes(types)
        assert dict(table) == expected
        assert list(table) == list(expected)
