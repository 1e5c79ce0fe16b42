"""Instruction files: which are read, in what order, their ``@path`` imports (as Claude Code
resolves them), and the bad inputs: cycles, files leading out, huge and binary files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtime.project import load_project
from runtime.project._instructions import (
    MAX_FILE_BYTES,
    MAX_IMPORT_DEPTH,
    find_imports,
    load_instructions,
)


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    d = tmp_path / "config" / "trio-agents"
    d.mkdir(parents=True)
    return d


def load(workspace: Path, root: Path, user_dir: Path) -> tuple[list[str], list[str]]:
    """(the files read, relative to the tmp folder; the warnings)."""
    warnings: list[str] = []
    files = load_instructions(workspace, root, user_dir, warnings.append)
    base = user_dir.parent.parent
    return [str(f.path.relative_to(base)) for f in files], warnings


def test_user_file_first_then_the_project_from_the_root_down_to_the_workspace(
    tmp_path: Path, user_dir: Path
) -> None:
    repo = tmp_path / "repo"
    ws = repo / "pkg" / "app"
    (ws / ".claude").mkdir(parents=True)
    (repo / ".git").mkdir()
    (tmp_path / "AGENTS.md").write_text("above the repository: never read")
    (user_dir / "AGENTS.md").write_text("user agents")
    (user_dir / "CLAUDE.md").write_text("user claude")
    (repo / "CLAUDE.md").write_text("repo claude")
    (repo / "AGENTS.md").write_text("repo agents")
    (repo / "pkg" / "AGENTS.md").write_text("pkg")
    (ws / "CLAUDE.md").write_text("app")
    (ws / ".claude" / "CLAUDE.md").write_text("app dot-claude")
    project = load_project(ws, env={"XDG_CONFIG_HOME": str(user_dir.parent)})
    assert project.root == repo.resolve()
    assert [f.text for f in project.instructions] == [
        "user agents", "user claude", "repo agents", "repo claude", "pkg", "app",
        "app dot-claude",
    ]
    assert [f.scope for f in project.instructions][:3] == ["user", "user", "project"]
    assert project.warnings == ()


def test_outside_a_repository_only_the_workspace_is_read(tmp_path: Path, user_dir: Path) -> None:
    ws = tmp_path / "plain" / "ws"
    ws.mkdir(parents=True)
    (tmp_path / "plain" / "AGENTS.md").write_text("parent")
    (ws / "AGENTS.md").write_text("ws")
    project = load_project(ws, env={"XDG_CONFIG_HOME": str(user_dir.parent)})
    assert project.git.root is None
    assert [f.text for f in project.instructions] == ["ws"]


def test_a_claude_md_that_links_or_imports_agents_md_does_not_repeat_it(
    workspace: Path, user_dir: Path
) -> None:
    (workspace / "AGENTS.md").write_text("the rules")
    (workspace / "CLAUDE.md").symlink_to("AGENTS.md")
    (workspace / ".claude").mkdir()
    (workspace / ".claude" / "CLAUDE.md").write_text("@../AGENTS.md")
    files, warnings = load(workspace, workspace, user_dir)
    assert files == ["ws/AGENTS.md", "ws/.claude/CLAUDE.md"]
    assert warnings == []


def test_imports_follow_the_file_that_imports_them_relative_to_it(
    workspace: Path, user_dir: Path
) -> None:
    (workspace / "docs").mkdir()
    (workspace / "CLAUDE.md").write_text("Read @docs/style.md first.\nThen @./docs/testing.md.")
    (workspace / "docs" / "style.md").write_text("style; see @more.md")
    (workspace / "docs" / "more.md").write_text("more")
    (workspace / "docs" / "testing.md").write_text("tests")
    (workspace / "AGENTS.md").write_text("agents")
    files, warnings = load(workspace, workspace, user_dir)
    assert files == ["ws/AGENTS.md", "ws/CLAUDE.md", "ws/docs/style.md", "ws/docs/more.md",
                     "ws/docs/testing.md"]
    assert warnings == []


def test_an_import_is_a_path_after_a_space_outside_code() -> None:
    text = (
        "See @README and @guide/a.md#section, mail a@b.c or @someone.\n"
        "Inline `@not/this.md` span; ``@nor `this` one``.\n"
        "```sh\n@not/in/fence.md\n```\n"
        "~~~\n@nor/here.md\n~~~\n"
        "@~/home.md and @my\\ file.md\n"
    )
    assert find_imports(text) == [
        "README", "guide/a.md", "someone.", "~/home.md", "my file.md",
    ]


def test_an_import_cycle_is_reported_and_each_file_read_once(
    workspace: Path, user_dir: Path
) -> None:
    (workspace / "CLAUDE.md").write_text("top @a.md")
    (workspace / "a.md").write_text("a @b.md")
    (workspace / "b.md").write_text("b @a.md")
    files, warnings = load(workspace, workspace, user_dir)
    assert files == ["ws/CLAUDE.md", "ws/a.md", "ws/b.md"]
    [warning] = warnings
    assert warning.startswith(f"{workspace / 'b.md'}: import cycle (")
    assert f"{workspace / 'a.md'} -> {workspace / 'b.md'} -> {workspace / 'a.md'}" in warning


def test_imports_deeper_than_the_limit_are_not_followed(workspace: Path, user_dir: Path) -> None:
    (workspace / "CLAUDE.md").write_text("@f1.md")
    for i in range(1, MAX_IMPORT_DEPTH + 3):
        (workspace / f"f{i}.md").write_text(f"@f{i + 1}.md")
    files, warnings = load(workspace, workspace, user_dir)
    assert files == ["ws/CLAUDE.md"] + [f"ws/f{i}.md" for i in range(1, MAX_IMPORT_DEPTH + 1)]
    assert warnings == [
        f"{workspace / f'f{MAX_IMPORT_DEPTH}.md'}: imports deeper than {MAX_IMPORT_DEPTH} hops "
        "are not followed"
    ]


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink", "home"])
def test_an_import_that_leads_out_of_the_project_is_refused(
    tmp_path: Path, workspace: Path, user_dir: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("SECRET")
    monkeypatch.setenv("HOME", str(tmp_path))
    ref = {"dotdot": "../secret.md", "absolute": str(secret), "symlink": "link.md",
           "home": "~/secret.md"}[how]
    (workspace / "link.md").symlink_to(secret)
    (workspace / "CLAUDE.md").write_text(f"see @{ref}")
    warnings: list[str] = []
    files = load_instructions(workspace, workspace, user_dir, warnings.append)
    assert [f.text for f in files] == [f"see @{ref}"]
    assert warnings == [
        f"{workspace / 'CLAUDE.md'}: import @{ref}: leads out of {workspace}; refused"
    ]


def test_an_instruction_file_that_is_a_symlink_out_of_the_project_is_refused(
    tmp_path: Path, workspace: Path, user_dir: Path
) -> None:
    (tmp_path / "elsewhere.md").write_text("SECRET")
    (workspace / "AGENTS.md").symlink_to(tmp_path / "elsewhere.md")
    files, warnings = load(workspace, workspace, user_dir)
    assert files == []
    assert warnings == [f"{workspace / 'AGENTS.md'}: leads out of {workspace}; refused"]


def test_the_users_file_may_import_only_from_the_users_config_folder(
    workspace: Path, user_dir: Path
) -> None:
    (user_dir / "mine.md").write_text("mine")
    (workspace / "project.md").write_text("PROJECT")
    (user_dir / "AGENTS.md").write_text(f"@mine.md @{workspace / 'project.md'}")
    files, warnings = load(workspace, workspace, user_dir)
    assert files == ["config/trio-agents/AGENTS.md", "config/trio-agents/mine.md"]
    assert len(warnings) == 1
    assert "leads out of" in warnings[0]


def test_a_5_mb_instruction_file_is_cut_at_the_cap_with_a_warning(
    workspace: Path, user_dir: Path
) -> None:
    big = workspace / "CLAUDE.md"
    with big.open("w") as f:
        f.write("é" * (5 * 1024 * 1024 // 2))  # 5 MB of two-byte characters
    warnings: list[str] = []
    [file] = load_instructions(workspace, workspace, user_dir, warnings.append)
    assert file.truncated
    assert len(file.text.encode()) <= MAX_FILE_BYTES
    assert set(file.text) == {"é"}, "a character the cap cuts in two is dropped"
    assert warnings == [
        f"{big}: {5 * 1024 * 1024} bytes; only the first {MAX_FILE_BYTES // 1024} KiB are used"
    ]


def test_a_binary_instruction_file_is_skipped_with_a_warning(
    workspace: Path, user_dir: Path
) -> None:
    (workspace / "AGENTS.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (workspace / "CLAUDE.md").write_bytes("latin-1: caf\xe9".encode("latin-1"))
    files, warnings = load(workspace, workspace, user_dir)
    assert files == []
    assert warnings == [
        f"{workspace / 'AGENTS.md'}: not a text file; skipped",
        f"{workspace / 'CLAUDE.md'}: not UTF-8 text; skipped",
    ]


def test_an_unreadable_instruction_file_is_skipped_with_a_warning(
    workspace: Path, user_dir: Path
) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    path = workspace / "AGENTS.md"
    path.write_text("x")
    path.chmod(0)
    _, warnings = load(workspace, workspace, user_dir)
    assert warnings[0].startswith(f"{path}: cannot read")


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("`" * 60_000, []),  # a fence line: an unclosed block to the end
        ("x" + "`" * 60_000, ["end.md"]),  # an unmatched run: plain text
        ("``a" * 20_000, ["end.md"]),
        ("```\n" * 15_000, ["end.md"]),  # blocks opened and closed
        ("~~~x\n" * 10_000, []),  # "~~~x" only opens; nothing closes it
    ],
)
def test_code_spans_and_fences_are_found_in_one_pass_whatever_the_backticks(
    text: str, found: list[str]
) -> None:
    # A backtracking regex took minutes on the first of these; the scanners are linear.
    assert find_imports(text + "\n@end.md") == found
