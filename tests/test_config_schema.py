"""The one table of settings (runtime/core/_config.py): every reader of settings is made from it
or agrees with it, and each row's trust says which changes loosen (docs/configuration.md)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

from runtime.core._config import (
    FILE_SETTINGS,
    FPS,
    POSITIVE_INT,
    SCHEMA,
    SECONDS,
    TABLE,
    Setting,
    Trust,
    loosens,
    markdown_table,
)
from tests.setting_counts import counts

DOCS = Path(__file__).resolve().parents[1] / "docs"

# -- trust -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "old", "new", "loosening"),
    [
        ("permissions.mode", "ask", "allow-all", True),
        ("permissions.mode", "ask", "auto-edit", True),
        ("permissions.mode", "deny", "ask", True),
        ("permissions.mode", "allow-all", "ask", False),
        ("permissions.mode", "ask", "deny", False),
        ("permissions.mode", None, "deny", False),  # unset (ask or deny) narrowed to deny
        ("permissions.mode", None, "allow-all", True),
        ("permissions.mode", None, "ask", False),
        ("permissions.mode", "deny", None, True),  # unset is ask on a terminal
        ("permissions.allow", (), ("bash(git status*)",), True),
        ("permissions.allow", ("read", "glob"), ("read",), False),
        ("permissions.deny", (), ("bash(rm *)",), False),
        ("permissions.deny", ("bash(rm *)",), (), True),
        ("permissions.allow_env", (), ("OPENAI_API_KEY",), True),
        ("sandbox.enabled", True, False, True),
        ("sandbox.enabled", False, True, False),
        ("sandbox.network", False, True, True),
        ("mcp.enabled", False, True, True),
        ("mcp.enabled", True, False, False),
        ("mcp.config", (), ("/elsewhere/servers.json",), True),
        ("trace.enabled", True, False, True),
        ("trace.dir", ".trio-agents/traces", "/tmp/x", True),
        ("limits.max_parallel", 16, 64, True),
        ("limits.max_parallel", 16, 4, False),
        ("limits.max_turns", 50, 50, False),
        ("provider", "anthropic", "openai", True),
        ("model", "a", "b", False),
        ("view.fps", 12.0, 60.0, False),
        ("permissions.timeout_s", 300.0, 5.0, False),
    ],
)
def test_loosens_says_which_changes_widen_what_a_run_may_do(
    name: str, old: Any, new: Any, loosening: bool
) -> None:
    assert loosens(name, old, new) is loosening


def test_loosens_refuses_a_key_that_is_not_a_setting() -> None:
    with pytest.raises(KeyError):
        loosens("permissions.mood", "ask", "deny")


def test_a_setting_cannot_be_written_without_its_trust() -> None:
    with pytest.raises(TypeError, match="trust"):
        Setting("x.y", POSITIVE_INT, "help")  # type: ignore[call-arg]
    assert all(isinstance(s.trust, Trust) for s in TABLE)
    # What a workspace may never widen untrusted is marked so
    # (docs/configuration.md#trust-which-changes-loosen).
    for name in ("permissions.mode", "permissions.allow", "permissions.allow_env",
                 "sandbox.enabled", "sandbox.network", "mcp.enabled", "mcp.config"):
        assert SCHEMA[name].trust.rule != "neutral", name


# -- the table against the code that reads it --------------------------------------------------


def _attribute(obj: Any, dotted: str) -> Any:
    return functools.reduce(getattr, dotted.split("."), obj)


def test_every_row_is_an_attribute_of_the_run_options_with_its_default() -> None:
    from runtime.cli._options import RunOptions

    opts = RunOptions()
    for s in TABLE:
        assert _attribute(opts, s.name) == s.default, s.name


def test_every_field_of_the_run_options_is_a_row() -> None:
    from runtime.cli._options import _SECTIONS, RunOptions

    # Loaded or named by a command, not set by a user: the project, the run id, whether the
    # workspace is trusted (docs/configuration.md#trust), the demo's middleware, the settings
    # files' hooks (a table of their own: docs/hooks.md).
    not_settings = {"project", "run_id", "trusted", "middleware", "hooks"}
    # Limits a user cannot set: the Python API's (runtime/core/_limits.py).
    python_only = {"limits.mailbox_size", "limits.max_result_chars", "limits.finish_grace_s"}
    names = set()
    for f in dataclasses.fields(RunOptions):
        if f.name in _SECTIONS:
            section = _attribute(RunOptions(), f.name)
            inner = (attrs.fields(type(section)) if attrs.has(type(section))
                     else dataclasses.fields(section))
            names |= {f"{f.name}.{g.name}" for g in inner}
        elif f.name not in not_settings:
            names.add(f.name)
    assert names - python_only == set(SCHEMA)


def test_limits_take_their_defaults_from_the_table() -> None:
    from runtime.core._limits import Limits

    limits = Limits()
    for s in TABLE:
        if s.section == "limits":
            assert getattr(limits, s.leaf) == s.default, s.name


def test_every_param_is_an_open_runtime_parameter_and_each_parameter_is_reached() -> None:
    from runtime.wiring._open import open_runtime

    params = set(inspect.signature(open_runtime).parameters)
    reached = {s.param for s in TABLE if s.param is not None}
    assert reached <= params
    # The Python API's own: objects a settings file or a flag cannot hold.
    python_only = {"tools", "extra_tools", "tool_limits", "env", "run_id", "on_event", "project",
                   "middleware", "pool", "http_client", "hooks", "resume"}
    assert params - reached == python_only


def test_open_runtime_and_run_config_have_the_same_parameters_and_defaults() -> None:
    from runtime.wiring._open import RunConfig, open_runtime

    params = inspect.signature(open_runtime).parameters
    fields = {a.name: a for a in attrs.fields(RunConfig)}
    assert list(params) == list(fields)
    made = RunConfig()
    for name, param in params.items():
        default = param.default
        expected = tuple(default) if isinstance(default, tuple) else default
        assert getattr(made, name) == expected, name


async def test_open_runtime_keyword_arguments_make_the_config_open_run_takes(
    tmp_path: Path,
) -> None:
    from runtime.core._limits import Limits
    from runtime.wiring._open import RunConfig, open_run, open_runtime, plan_run

    scenario = Path(__file__).parent / "scenarios" / "simple.json"
    kwargs: dict[str, Any] = {
        "scenario": str(scenario), "workspace": tmp_path, "trace": False,
        "limits": Limits(max_turns=3), "permission_mode": "allow-all",
        "allow": iter(["read"]), "deny": ["bash(rm *)"],
    }
    plan = plan_run(RunConfig(**kwargs))
    assert (plan.limits.max_turns, plan.policy.mode, plan.trace_path) == (3, "allow-all", None)
    assert plan.config.allow == ("read",)  # an iterator is read once, kept as a tuple
    events: list[Any] = []
    kwargs["allow"] = ["read"]
    async with open_runtime(**kwargs, on_event=events.append) as rt:
        first = (await rt.run("go")).status
    async with open_run(RunConfig(**kwargs, on_event=events.append)) as rt:
        second = (await rt.run("go")).status
    assert first == second == "completed"
    starts = [e.config for e in events if e.type == "run_started"]
    assert len(starts) == 2
    assert starts[0] == starts[1]
    assert starts[0]["permission_rules"] == {"allow": ["read"], "deny": ["bash(rm *)"]}
    assert starts[0]["limits"]["max_turns"] == 3


def test_plan_run_opens_nothing_and_names_a_bad_workspace(tmp_path: Path) -> None:
    from runtime.core._errors import ConfigError
    from runtime.wiring._open import RunConfig, plan_run

    with pytest.raises(ConfigError, match="is not a folder"):
        plan_run(RunConfig(workspace=tmp_path / "missing", trace=False))
    plan = plan_run(RunConfig(workspace=tmp_path, provider="openai"))
    assert plan.provider == "openai"  # a name: nothing connected yet
    assert plan.trace_path is not None
    assert not plan.trace_path.exists()  # nothing written


# -- the command line against the table --------------------------------------------------------


def _options_of(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in parser._actions for flag in action.option_strings}


def _command(name: str) -> argparse.ArgumentParser:
    from runtime.cli._main import build_parser

    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]  # type: ignore[no-any-return]
    raise AssertionError("no commands")


@pytest.mark.parametrize("command", ["run", "chat", "replay", "config", "demo"])
def test_every_flag_of_the_table_is_an_option_of_the_running_commands(command: str) -> None:
    options = _options_of(_command(command))
    for s in TABLE:
        for flag in s.flags:
            if command == "demo" and s.demo_help == "":
                assert flag not in options
                continue
            assert flag in options, (command, flag)
            assert options[flag].dest == s.dest


def test_a_flag_and_a_file_value_go_through_one_kind() -> None:
    for kind, texts in [(POSITIVE_INT, ["1", "16"]), (SECONDS, ["0.5", "300"]),
                        (FPS, ["2.5", "60"])]:
        assert kind.parse is not None
        for text in texts:
            value = kind.parse(text)
            assert kind.check(value) == value
    for kind, bad in [(POSITIVE_INT, "0"), (SECONDS, "inf"), (FPS, "61")]:
        assert kind.parse is not None
        with pytest.raises(ValueError, match="expected"):
            kind.parse(bad)


def _cli_table_flags() -> set[str]:
    text = (DOCS / "cli.md").read_text()
    section = text.split("## Options of run, demo and chat", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `-")]
    return {flag for row in rows for flag in re.findall(r"`(-{1,2}[a-z][a-z-]*)", row.split("|")[1])}


def test_the_option_table_of_docs_cli_is_the_table_s_flags() -> None:
    flags = {flag for s in TABLE for flag in s.flags}
    assert _cli_table_flags() == flags


def test_the_settings_table_of_docs_configuration_is_generated_from_the_table() -> None:
    text = (DOCS / "configuration.md").read_text()
    assert markdown_table() in text, "run: python -c 'from runtime.core._config import " \
                                     "markdown_table; print(markdown_table())'"
    assert len(FILE_SETTINGS) == markdown_table().count("\n| `")


def test_every_setting_is_named_in_at_most_two_modules_of_cli_project_and_wiring() -> None:
    found = counts()
    assert {key: modules for key, modules in found.items() if len(modules) > 2} == {}
