"""Settings files: precedence (flags, workspace, user, defaults), rule lists adding up, and a
bad file refused with its file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.core import fan_out_default
from runtime.project import SETTINGS, ProjectFileError, load_settings


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    d = tmp_path / "config" / "trio-agents"
    d.mkdir(parents=True)
    return d


def env_for(user_dir: Path) -> dict[str, str]:
    return {"XDG_CONFIG_HOME": str(user_dir.parent), "HOME": "/nonexistent"}


def write_settings(folder: Path, text: str) -> Path:
    path = folder / "settings.toml" if folder.name == "trio-agents" else (
        folder / ".trio-agents" / "settings.toml")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_without_files_every_key_has_its_default(workspace: Path, user_dir: Path) -> None:
    settings = load_settings(workspace, env=env_for(user_dir))
    assert settings.files == ()
    assert {n: settings.source(n) for n in SETTINGS} == dict.fromkeys(SETTINGS, "default")
    assert settings["limits.max_turns"] == 50
    assert settings["permissions.allow"] == ()


def test_workspace_over_user_over_defaults_and_flags_over_both(
    workspace: Path, user_dir: Path
) -> None:
    user = write_settings(user_dir, 'provider = "anthropic"\nmodel = "user-model"\n'
                                    "[limits]\nmax_turns = 7\nmax_depth = 2\n")
    ws = write_settings(workspace, 'model = "ws-model"\n\n[limits]\nmax_turns = 9\n')
    settings = load_settings(workspace, env=env_for(user_dir),
                             flags={"limits.max_turns": 11, "model": None})
    assert settings.files == (user, ws)
    assert settings["provider"] == "anthropic"
    assert settings.source("provider") == f"user {user}:1"
    assert settings["model"] == "ws-model"
    assert settings.source("model") == f"workspace {ws}:1"
    assert settings["limits.max_depth"] == 2
    assert settings.source("limits.max_depth") == f"user {user}:5"
    assert settings["limits.max_turns"] == 11
    assert settings.source("limits.max_turns") == "flag --max-turns"
    assert settings["limits.max_parallel"] == fan_out_default()


def test_allow_and_deny_rules_add_up_user_then_workspace_then_flags(
    workspace: Path, user_dir: Path
) -> None:
    write_settings(user_dir, '[permissions]\nallow = ["bash(git status*)"]\ndeny = ["bash(rm *)"]\n')
    write_settings(workspace, '[permissions]\nallow = ["bash(make test)"]\n')
    settings = load_settings(workspace, env=env_for(user_dir),
                             flags={"permissions.allow": ("read",)})
    assert settings["permissions.allow"] == ("bash(git status*)", "bash(make test)", "read")
    assert settings["permissions.deny"] == ("bash(rm *)",)
    assert settings.source("permissions.allow").count(";") == 2


def test_a_relative_trace_dir_is_taken_from_the_folder_the_file_belongs_to(
    workspace: Path, user_dir: Path
) -> None:
    write_settings(user_dir, '[trace]\ndir = "traces"\n')
    assert load_settings(workspace, env=env_for(user_dir))["trace.dir"] == str(
        (user_dir / "traces").resolve())
    write_settings(workspace, '[trace]\ndir = "out/traces"\n')
    assert load_settings(workspace, env=env_for(user_dir))["trace.dir"] == str(
        (workspace / "out" / "traces").resolve())


def test_dotted_keys_and_inline_tables_are_read_too(workspace: Path, user_dir: Path) -> None:
    write_settings(workspace, 'limits.max_turns = 3\npermissions = { mode = "deny" }\n')
    settings = load_settings(workspace, env=env_for(user_dir))
    assert (settings["limits.max_turns"], settings["permissions.mode"]) == (3, "deny")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[limits]\nmax_turn = 3\n",
         ":2: limits.max_turn: unknown key; did you mean limits.max_turns?"),
        ('model = "m"\n[permisions]\nmode = "ask"\n',
         ":3: permisions.mode: unknown key; did you mean permissions.mode?"),
        ("max_depth = 3\n", ":1: max_depth: unknown key; did you mean limits.max_depth?"),
        ("limits = 3\n", ":1: limits: a table of settings, not a value: write [limits] and its "
         "keys under it (max_turns, max_depth, "),
        ('provider = "x"\n', ":1: provider: expected one of openai, anthropic, scripted; got 'x'"),
        ("\n\n[limits]\nmax_parallel = 0\n",
         ":4: limits.max_parallel: expected a whole number >= 1; got 0"),
        ('[permissions]\nallow = "bash"\n',
         ":2: permissions.allow: expected a list of strings; got 'bash'"),
        ('[permissions]\ndeny = ["bash(rm *"]\n', ":2: permissions.deny: "),
        ("[trace]\nenabled = 1\n", ":2: trace.enabled: expected true or false; got 1"),
    ],
)
def test_a_bad_settings_file_is_refused_with_file_line_and_key(
    workspace: Path, user_dir: Path, text: str, expected: str
) -> None:
    path = write_settings(workspace, text)
    with pytest.raises(ProjectFileError) as info:
        load_settings(workspace, env=env_for(user_dir))
    message = str(info.value)
    assert message.startswith(f"{path}{expected}")
    assert "\n" not in message


def test_a_file_that_is_not_toml_is_refused_with_its_line(workspace: Path, user_dir: Path) -> None:
    path = write_settings(user_dir, 'model = "a"\nmodel = = 3\n')
    with pytest.raises(ProjectFileError, match=r"not valid TOML: .*line 2") as info:
        load_settings(workspace, env=env_for(user_dir))
    assert str(info.value).startswith(str(path))


def test_a_huge_settings_file_is_refused_without_reading_it_all(
    workspace: Path, user_dir: Path
) -> None:
    write_settings(workspace, "# padding\n" * 200_000)
    with pytest.raises(ProjectFileError, match="too big"):
        load_settings(workspace, env=env_for(user_dir))


def test_every_setting_is_documented() -> None:
    doc = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()
    missing = [name for name in SETTINGS if f"`{name}`" not in doc]
    assert missing == []


def test_long_lines_in_a_multi_line_string_are_read_at_once(workspace: Path, user_dir: Path) -> None:
    # Finding a key's line is a scan of every line; it must stay linear on any line.
    write_settings(workspace, 'model = """\n' + " " * 150_000 + "x\n" + "[" + " " * 100_000 + '\n"""\n')
    assert load_settings(workspace, env=env_for(user_dir))["model"].endswith("\n")
