"""Agent definitions in Markdown (Claude Code's format): front matter, tool-name mapping, and
the bad inputs: not YAML, no name, the same name twice, unknown tools."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.project import load_project
from runtime.project._agents import CLAUDE_TOOLS

REVIEWER = """\
---
name: reviewer
description: Use this agent when: a diff needs a second pair of eyes
tools: Read, Grep, Glob, MultiEdit, Task
model: sonnet
color: red
permissionMode: bypassPermissions
---
You review code.

Be brief.
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    user = tmp_path / "config"
    (user / "trio-agents").mkdir(parents=True)
    return {"XDG_CONFIG_HOME": str(user)}


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def test_a_claude_code_agent_file_becomes_an_agent_type(workspace: Path, env: dict[str, str]) -> None:
    path = write(workspace / ".claude" / "agents", "reviewer.md", REVIEWER)
    project = load_project(workspace, env=env)
    [definition] = project.agents
    t = definition.agent_type
    assert definition.path == path
    assert t.name == "reviewer"
    assert t.description == "Use this agent when: a diff needs a second pair of eyes"
    assert t.system == "You review code.\n\nBe brief."
    assert t.tools == ("read", "grep", "glob", "edit", "agent")
    assert t.model is None, "a Claude Code alias means the run's model"
    assert project.warnings == ()


def test_tools_may_be_a_yaml_list_and_our_own_names_and_keys(
    workspace: Path, env: dict[str, str]
) -> None:
    write(workspace / ".trio-agents" / "agents", "fixer.md",
          "---\nname: fixer\ntools:\n  - bash\n  - Write\nmodel: gpt-4.1-mini\nmax_turns: 3\n"
          "budget: {tokens: 1000}\n---\nFix it.")
    [d] = load_project(workspace, env=env).agents
    assert (d.agent_type.tools, d.agent_type.model, d.agent_type.max_turns) == (
        ("bash", "write"), "gpt-4.1-mini", 3)
    assert d.agent_type.budget is not None
    assert d.agent_type.budget.tokens == 1000


def test_disallowed_tools_only_take_tools_away(workspace: Path, env: dict[str, str]) -> None:
    write(workspace / ".claude" / "agents", "safe.md",
          "---\nname: safe\ndisallowedTools: Bash, Write, Edit\n---\n")
    [d] = load_project(workspace, env=env).agents
    assert d.agent_type.tools == ("agent", "glob", "grep", "read", "send_message", "todo_write")


def test_an_unknown_tool_name_is_reported_once_and_skipped(
    workspace: Path, env: dict[str, str]
) -> None:
    folder = workspace / ".claude" / "agents"
    a = write(folder, "a.md", "---\nname: a\ntools: Read, WebFetch, WebSearch\n---\n")
    write(folder, "b.md", "---\nname: b\ntools: [WebFetch, Grep, mcp__github__search]\n---\n")
    project = load_project(workspace, env=env)
    assert [d.agent_type.tools for d in project.agents] == [
        ("read",), ("grep", "mcp__github__search")]
    assert project.warnings == (
        f"{a}: tool 'WebFetch' is not available here; skipped",
        f"{a}: tool 'WebSearch' is not available here; skipped",
    )


def test_skill_maps_to_the_skill_tool_only_when_there_are_skills(
    workspace: Path, env: dict[str, str]
) -> None:
    write(workspace / ".claude" / "agents", "a.md", "---\nname: a\ntools: Read, Skill\n---\n")
    assert load_project(workspace, env=env).agents[0].agent_type.tools == ("read",)
    write(workspace / ".claude" / "skills" / "s", "SKILL.md", "---\ndescription: d\n---\n")
    assert load_project(workspace, env=env).agents[0].agent_type.tools == ("read", "skill")


@pytest.mark.parametrize(
    ("text", "warning"),
    [
        ("---\nname: [oops\n---\nbody", ":2: the front matter is not valid YAML: "),
        ("---\nname: x\ndescription: a\n  b: c\n---\n", ":4: the front matter is not valid YAML: "),
        ("---\n- a list\n---\n", ":2: the front matter is not a mapping of keys (got list)"),
        ("---\nname: x\n", ":1: the front matter has no closing '---' line"),
        ("no front matter at all", ": no front matter"),
        ("---\ndescription: nameless\n---\nbody", ": the front matter has no name"),
        ("---\nname: ''\n---\n", ": the front matter has no name"),
        ("---\nname: has space\n---\n", ": name 'has space': expected letters"),
        ("---\nname: x\nmax_turns: 0\n---\n", ": max_turns: expected a whole number >= 1"),
        ("---\nname: x\ntools: 3\n---\n", ": tools: expected a comma-separated string"),
        ("---\nname: x\nplacement: mars\n---\n", ": placement: expected 'local' or 'ray'"),
    ],
)
def test_a_bad_definition_is_skipped_with_one_warning_naming_it(
    workspace: Path, env: dict[str, str], text: str, warning: str
) -> None:
    bad = write(workspace / ".claude" / "agents", "bad.md", text)
    write(workspace / ".claude" / "agents", "good.md", "---\nname: good\n---\nGood.")
    project = load_project(workspace, env=env)
    assert [d.agent_type.name for d in project.agents] == ["good"]
    [line] = project.warnings
    assert line.startswith(f"{bad}{warning}"), line
    assert line.endswith("; skipped")
    assert "\n" not in line


def test_the_same_name_twice_keeps_the_later_file_and_names_both(
    workspace: Path, env: dict[str, str]
) -> None:
    user = Path(env["XDG_CONFIG_HOME"]) / "trio-agents" / "agents"
    first = write(user, "r.md", "---\nname: reviewer\ndescription: mine\n---\nUser's.")
    second = write(workspace / ".claude" / "agents", "reviewer.md", REVIEWER)
    third = write(workspace / ".trio-agents" / "agents", "rev.md",
                  "---\nname: reviewer\ndescription: ours\n---\nOurs.")
    project = load_project(workspace, env=env)
    [d] = project.agents
    assert (d.path, d.agent_type.system, d.agent_type.tools) == (third, "Ours.", None)
    assert project.warnings == (
        f"agent 'reviewer' is defined in {first} and {second}; {second} is used",
        f"agent 'reviewer' is defined in {second} and {third}; {third} is used",
    )


def test_the_claude_code_tool_names_map_to_built_in_tools() -> None:
    from tools import builtin_tools

    ours = {t.name for t in builtin_tools()} | {"skill"}
    assert set(CLAUDE_TOOLS.values()) <= ours


def test_a_definition_that_is_a_symlink_out_of_the_workspace_is_refused(
    tmp_path: Path, workspace: Path, env: dict[str, str]
) -> None:
    outside = write(tmp_path / "elsewhere", "x.md", "---\nname: x\n---\nSECRET")
    folder = workspace / ".claude" / "agents"
    folder.mkdir(parents=True)
    (folder / "x.md").symlink_to(outside)
    project = load_project(workspace, env=env)
    assert project.agents == ()
    assert project.warnings == (f"{folder / 'x.md'}: leads out of {workspace.resolve()}; refused",)
