"""Skills: found in their folders, listed by name and description, loaded by the ``skill``
tool; a folder without SKILL.md, or without a description, is skipped with a warning."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog

from runtime.core import ToolContext, ToolError, ToolLimits
from runtime.project import load_project
from tools import SkillTool


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    user = tmp_path / "config"
    (user / "trio-agents").mkdir(parents=True)
    return {"XDG_CONFIG_HOME": str(user)}


def skill(root: Path, name: str, text: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(text)
    return folder


def ctx(workspace: Path) -> ToolContext:
    return ToolContext(workspace=workspace, agent_id="agent-1", tool_use_id="t1", depth=0,
                       env={}, limits=ToolLimits(), log=structlog.get_logger())


def test_skills_are_found_in_the_user_and_project_folders_later_winning(
    workspace: Path, env: dict[str, str]
) -> None:
    user_skills = Path(env["XDG_CONFIG_HOME"]) / "trio-agents" / "skills"
    skill(user_skills, "notes", "---\ndescription: Take notes\n---\nUser notes.")
    first = skill(user_skills, "pdf", "---\nname: pdf\ndescription: old\n---\n")
    second = skill(workspace / ".claude" / "skills", "pdf",
                   "---\nname: pdf\ndescription: Fill PDF forms\nallowed-tools: Bash\n---\nPDF.")
    skill(workspace / ".trio-agents" / "skills", "release",
          "---\ndescription: >\n  Cut a release:\n  tag and push\n---\nSteps.")
    project = load_project(workspace, env=env)
    assert [(s.name, s.description) for s in project.skills] == [
        ("notes", "Take notes"), ("pdf", "Fill PDF forms"), ("release", "Cut a release: tag and push"),
    ]
    assert project.warnings == (
        f"skill 'pdf' is in {first} and {second}; {second} is used",
    )


def test_a_skill_folder_without_skill_md_is_skipped_with_a_warning(
    workspace: Path, env: dict[str, str]
) -> None:
    root = workspace / ".claude" / "skills"
    (root / "empty").mkdir(parents=True)
    (root / "empty" / "README.md").write_text("not a skill")
    skill(root, "nodesc", "---\nname: nodesc\n---\nBody.")
    skill(root, "badyaml", "---\ndescription: [x\n---\n")
    skill(root, "ok", "---\ndescription: fine\n---\n")
    project = load_project(workspace, env=env)
    assert [s.name for s in project.skills] == ["ok"]
    assert project.warnings == (
        f"{root / 'badyaml' / 'SKILL.md'}:2: the front matter is not valid YAML: "
        "expected ',' or ']', but got '<stream end>'; skipped",
        f"{root / 'empty'}: a skill folder without SKILL.md; skipped",
        f"{root / 'nodesc' / 'SKILL.md'}: no description in the front matter; skipped",
    )


async def test_the_skill_tool_returns_the_body_and_the_folder(
    workspace: Path, env: dict[str, str]
) -> None:
    folder = skill(workspace / ".claude" / "skills", "pdf",
                   "---\nname: pdf\ndescription: Fill PDF forms\n---\n# PDF\nSee forms.md.")
    (folder / "forms.md").write_text("Form fields.")
    tool = SkillTool(load_project(workspace, env=env).skills)
    out = await tool.call({"name": "pdf"}, ctx(workspace))
    assert out == "Skill pdf; its folder: .claude/skills/pdf (in the workspace)\n\n# PDF\nSee forms.md."
    assert await tool.call({"name": "pdf", "file": "forms.md"}, ctx(workspace)) == "Form fields."
    assert tool.summary({"name": "pdf", "file": "forms.md"}) == "skill: pdf forms.md"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({"name": "nope"}, "unknown skill 'nope'; skills: pdf"),
        ({"name": "pdf", "file": "../../../AGENTS.md"}, "../../../AGENTS.md: not a file of skill pdf"),
        ({"name": "pdf", "file": "/etc/passwd"}, "/etc/passwd: not a file of skill pdf"),
        ({"name": "pdf", "file": "link.md"}, "link.md: not a file of skill pdf"),
        ({"name": "pdf", "file": "missing.md"}, "missing.md: no such file in skill pdf"),
    ],
)
async def test_the_skill_tool_refuses_unknown_skills_and_files_outside_the_folder(
    workspace: Path, env: dict[str, str], args: dict[str, str], error: str
) -> None:
    folder = skill(workspace / ".claude" / "skills", "pdf", "---\ndescription: d\n---\n")
    (workspace / "AGENTS.md").write_text("x")
    (folder / "link.md").symlink_to(workspace / "AGENTS.md")
    tool = SkillTool(load_project(workspace, env=env).skills)
    with pytest.raises(ToolError) as info:
        await tool.call(args, ctx(workspace))
    assert str(info.value) == error


async def test_a_user_skill_names_its_folder_outside_the_workspace(
    workspace: Path, env: dict[str, str]
) -> None:
    folder = skill(Path(env["XDG_CONFIG_HOME"]) / "trio-agents" / "skills", "notes",
                   "---\ndescription: d\n---\nBody.")
    tool = SkillTool(load_project(workspace, env=env).skills)
    out = await tool.call({"name": "notes"}, ctx(workspace))
    assert out.startswith(f"Skill notes; its folder: {folder} (outside the workspace: read its "
                          "files with `file`)")


async def test_a_skill_folder_swapped_for_a_link_never_reaches_the_runtimes_own_files(
    workspace: Path, env: dict[str, str]
) -> None:
    import shutil

    skills = workspace / ".claude" / "skills"
    folder = skill(skills, "x", "---\ndescription: d\n---\nbody\n")
    (workspace / ".trio-agents").mkdir()
    (workspace / ".trio-agents" / "settings.toml").write_text("model = 'secret-plan'\n")
    tool = SkillTool(load_project(workspace, env=env).skills)
    # After loading, something (a sandboxed bash, say) swaps the folder for a link.
    shutil.rmtree(folder)
    folder.symlink_to("../../.trio-agents")
    for args in ({"name": "x", "file": "settings.toml"}, {"name": "x"}):
        with pytest.raises(ToolError) as info:
            await tool.call(args, ctx(workspace))
        assert "secret-plan" not in str(info.value)
