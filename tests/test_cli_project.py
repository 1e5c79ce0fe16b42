"""The project's files on the command line: ``agents``, ``config``, ``run --show-system-prompt``,
warnings on stderr, and a bad settings file refused before anything runs (exit 2, one line)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runtime.cli._main import main


def cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runtime", *args], cwd=cwd, text=True,
                          capture_output=True, stdin=subprocess.DEVNULL, check=False, timeout=60)


@pytest.fixture
def project(workspace: Path) -> Path:
    agents = workspace / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "reviewer.md").write_text(
        "---\nname: reviewer\ndescription: Reviews diffs\ntools: Read, Grep, WebFetch\n---\n"
        "You review code.")
    (agents / "general.md").write_text("---\nname: general\nmodel: small-model\n---\n")
    (workspace / "AGENTS.md").write_text("Use tabs.")
    return workspace


def test_agents_lists_each_type_with_its_source(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["agents", "--workspace", str(project)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "main  (all tools)  from built-in",
        "    The root agent.",
        "general  (all tools; model small-model)  from built-in, refined by .claude/agents/general.md",
        "    A general-purpose sub-agent for any focused task.",
        "reviewer  (read, grep)  from .claude/agents/reviewer.md",
        "    Reviews diffs",
    ]
    assert err == (f"trio-agents: warning: {project / '.claude/agents/reviewer.md'}: tool "
                   "'WebFetch' is not available here; skipped\n")
    assert main(["agents", "--workspace", str(project), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[2] == {"name": "reviewer", "description": "Reviews diffs",
                       "tools": ["read", "grep"], "model": None,
                       "source": [".claude/agents/reviewer.md"]}


def test_show_system_prompt_prints_what_the_agent_gets_and_runs_nothing(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--show-system-prompt", "--workspace", str(project)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("You are a capable software agent")
    assert "# Environment\n" in out
    assert out.rstrip().endswith("Use tabs.")
    assert main(["run", "--show-system-prompt", "reviewer", "--workspace", str(project)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("You review code.\n\n# Environment\n")
    assert "Tools: read, grep\n" in out
    assert main(["run", "--show-system-prompt", "nobody", "--workspace", str(project)]) == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last == "trio-agents: error: unknown agent type 'nobody'; known types: general, main, reviewer"


def test_run_without_a_prompt_is_still_a_usage_error(project: Path) -> None:
    proc = cli(["run", "--workspace", str(project)], project)
    assert proc.returncode == 2
    assert "required: PROMPT" in proc.stderr


@pytest.mark.parametrize("command", [["run", "hi"], ["chat"], ["config"]])
def test_a_bad_settings_file_stops_the_command_with_one_line(
    workspace: Path, command: list[str]
) -> None:
    settings = workspace / ".trio-agents" / "settings.toml"
    settings.parent.mkdir()
    settings.write_text('[limits]\nmax_turns = 5\nmax_dept = 2\n')
    proc = cli([*command, "--workspace", str(workspace)], workspace)
    assert proc.returncode == 2
    assert proc.stderr == (
        f"trio-agents: error: {settings}:3: limits.max_dept: unknown key; did you mean "
        "limits.max_depth?\n"
    )
    assert proc.stdout == ""


def test_config_prints_each_setting_its_value_and_source(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = workspace / ".trio-agents" / "settings.toml"
    settings.parent.mkdir()
    settings.write_text('model = "m1"\n[permissions]\ndeny = ["bash(rm *)"]\n')
    assert main(["config", "--workspace", str(workspace), "--max-depth", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split() == ["model", "m1", "[workspace", f"{settings}:1]"] for line in lines)
    assert any(line.split() == ["limits.max_depth", "2", "[flag", "--max-depth]"] for line in lines)
    assert any(line.split()[:2] == ["permissions.deny", "bash(rm"] for line in lines)
    assert lines[-1] == f"settings files read: {settings}"


def test_config_names_the_provider_and_model_a_run_would_use_by_default(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from runtime.providers import DEFAULT_MODELS

    assert main(["config", "--workspace", str(workspace)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["provider", "openai"]
    assert lines[1].split() == ["model", DEFAULT_MODELS["openai"], "[default", "of", "openai]"]
    assert main(["config", "--workspace", str(workspace), "--provider", "anthropic"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[:2] == ["model", DEFAULT_MODELS["anthropic"]]


def test_demo_ignores_settings_files(tmp_path: Path, user_config_home: Path) -> None:
    user = user_config_home / "trio-agents"
    user.mkdir()
    (user / "settings.toml").write_text('provider = "anthropic"\nmodel = "nope"\n')
    proc = cli(["demo", "--no-trace", "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_settings_fill_the_options_the_command_line_left_unset(workspace: Path, trust: Any) -> None:
    from runtime.cli._main import build_parser
    from runtime.cli._project import apply_project

    settings = workspace / ".trio-agents" / "settings.toml"
    settings.parent.mkdir()
    settings.write_text(
        'model = "from-file"\n[permissions]\nmode = "auto-edit"\nallow = ["read"]\n'
        "timeout_s = 12\n[limits]\nmax_turns = 4\nmax_agents = 9\n"
        "[sandbox]\nnetwork = true\n[trace]\nenabled = false\n"
    )
    trust(workspace)  # its mode, rules and limits loosen: applied in a trusted workspace

    def opts_for(*flags: str) -> Any:
        ns = build_parser().parse_args(["run", "x", "--workspace", str(workspace), *flags])
        return apply_project(ns)

    opts = opts_for()
    perms = opts.permissions
    assert (opts.model, perms.mode, perms.allow, perms.timeout_s) == (
        "from-file", "auto-edit", ("read",), 12.0)
    assert (opts.limits.max_turns, opts.limits.max_agents) == (4, 9)
    assert (opts.sandbox.enabled, opts.sandbox.network, opts.trace.target) == (True, True, False)
    opts = opts_for("--model", "flag", "--permission-mode", "deny", "--allow", "glob",
                    "--max-turns", "6", "--trace", "t.jsonl")
    perms = opts.permissions
    assert (opts.model, perms.mode, perms.allow) == ("flag", "deny", ("read", "glob"))
    assert (opts.limits.max_turns, opts.trace.target) == (6, "t.jsonl")


def test_settings_set_the_context_window_and_mcp_and_flags_win(tmp_path: Path) -> None:
    from runtime.cli._main import build_parser
    from runtime.cli._options import run_config
    from runtime.cli._project import apply_project

    (tmp_path / ".trio-agents").mkdir()
    (tmp_path / ".trio-agents" / "settings.toml").write_text(
        '[limits]\ncontext_window = 5000\ncompact_threshold = "60%"\n'
        '[mcp]\nenabled = false\n')
    ns = build_parser().parse_args(["run", "x", "--workspace", str(tmp_path), "--no-trace"])
    opts = apply_project(ns)
    limits = run_config(opts).limits
    assert limits is not None
    assert (limits.context_window, limits.compact_threshold) == (5000, 0.6)
    assert opts.mcp.enabled is False
    ns = build_parser().parse_args(["run", "x", "--workspace", str(tmp_path), "--no-trace",
                                    "--context-window", "9000"])
    limits = run_config(apply_project(ns)).limits
    assert limits is not None
    assert (limits.context_window, limits.compact_threshold) == (9000, 0.6)


def test_mcp_config_files_in_settings_are_taken_from_the_workspace(
    tmp_path: Path, trust: Any
) -> None:
    from runtime.cli._main import build_parser
    from runtime.cli._project import apply_project

    ws = tmp_path / "ws"
    (ws / ".trio-agents").mkdir(parents=True)
    (ws / ".trio-agents" / "settings.toml").write_text('[mcp]\nconfig = ["mine.json"]\n')
    trust(ws)
    ns = build_parser().parse_args(["run", "x", "--workspace", str(ws), "--no-trace"])
    opts = apply_project(ns)
    assert opts.mcp.config == (str(ws / "mine.json"),)


def test_each_project_file_warning_is_said_once_per_run_and_per_chat(tmp_path: Path) -> None:
    """A broken agent definition and a broken skill: one line each for a run with sub-agents,
    and one each for a whole chat (two turns, /agents between them), not one per turn, per
    agent or per command of the chat."""
    agents = tmp_path / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "bad.md").write_text("---\nname: bad\ntools: [nope\n---\nbody\n")
    skill = tmp_path / ".claude" / "skills" / "broken"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("no front matter\n")
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({"agents": {
        "main": {"turns": [
            {"tool_calls": [{"name": "agent", "input": {"description": "a", "prompt": "a"}},
                            {"name": "agent", "input": {"description": "b", "prompt": "b"}}]},
            {"text": "one"}, {"text": "two"}]},
        "general": {"turns": [{"text": "done"}]}}}))
    wanted = ["bad.md:3: the front matter is not valid YAML", "SKILL.md: no description"]

    def said(err: str) -> list[int]:
        return [sum(want in line for line in err.splitlines()) for want in wanted]

    proc = cli(["run", "go", "--scenario", str(scenario), "--no-trace"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert said(proc.stderr) == [1, 1]
    proc = subprocess.run(
        [sys.executable, "-m", "runtime", "chat", "--scenario", str(scenario), "--no-trace"],
        cwd=tmp_path, text=True, capture_output=True, check=False, timeout=60,
        input="go\n/agents\nagain\n",
    )
    assert proc.returncode == 0, proc.stderr
    assert said(proc.stderr) == [1, 1]
