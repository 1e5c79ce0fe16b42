"""Worktree isolation (docs/worktrees.md): agents of an ``isolation = "worktree"`` type work in
git worktrees of their own, made and removed by real ``git`` subprocesses."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from runtime import (
    AgentType,
    ConfigError,
    FunctionProvider,
    ModelRequest,
    ToolCall,
    ToolFinished,
    UserMessage,
    open_runtime,
)
from runtime.core import (
    AgentSpec,
    Worktree,
    WorktreeError,
    add_worktree,
    agent_types_from_mapping,
    list_worktrees,
    remove_entry,
)
from runtime.core._worktree import finish_worktree
from runtime.project import load_project
from tests.harness import EventLog, agent_call, run_scenario
from tests.invariants import by_type, check_invariants
from tests.test_sandbox import needs_bwrap

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=folder, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


@pytest.fixture
def repo(workspace: Path) -> Path:
    """The workspace as a git repository with one commit: ``shared.txt`` holding ``base``."""
    _git(workspace, "init", "-q", "-b", "main")
    (workspace / "shared.txt").write_text("base\n")
    _git(workspace, "add", "shared.txt")
    _git(workspace, "commit", "-q", "-m", "base")
    return workspace


def _editor(name: str, text: str, *, tool: str = "write") -> dict[str, Any]:
    call = (
        {"name": "write", "input": {"path": "shared.txt", "content": text}}
        if tool == "write"
        else {"name": "bash", "input": {"command": f"printf '{text}' > shared.txt"}}
    )
    return {"turns": [{"tool_calls": [call]}, {"text": f"{name} done"}]}


def _types(*names: str) -> list[AgentType]:
    return [AgentType(name=n, isolation="worktree") for n in names]


def _real(path: Path) -> Path:
    return path.resolve()


def _exists(path: Path) -> bool:
    return path.exists()


def _read(path: Path) -> str:
    return path.read_text()


def _branches(repo: Path) -> list[str]:
    return sorted(_git(repo, "branch", "--format=%(refname:short)").split())


def _agent_results(events: list[Any]) -> list[str]:
    return [e.output for e in by_type(events, ToolFinished) if e.name == "agent"]


async def _two_editors(repo: Path, tool: str, **kwargs: Any) -> tuple[Any, list[Any]]:
    scenario = {"agents": {
        "main": {"turns": [
            {"tool_calls": [agent_call("a", "ed_a"), agent_call("b", "ed_b")]},
            {"text": "both done"}]},
        "ed_a": _editor("a", "from a\n", tool=tool),
        "ed_b": _editor("b", "from b\n", tool=tool)}}  # fmt: skip
    kwargs.setdefault("agent_types", _types("ed_a", "ed_b"))
    return await run_scenario(scenario, repo, run_id="r1", **kwargs)


def _check_two_branches_kept(repo: Path, events: list[Any]) -> None:
    check_invariants(events)
    assert _branches(repo) == ["main", "trio-agents/r1/agent-2", "trio-agents/r1/agent-3"]
    for agent, text in (("agent-2", "from a\n"), ("agent-3", "from b\n")):
        tree = repo / ".trio-agents" / "worktrees" / f"r1-{agent}"
        assert (tree / "shared.txt").read_text() == text
        assert _git(tree, "rev-parse", "--abbrev-ref", "HEAD").strip() == f"trio-agents/r1/{agent}"
    # The main workspace: the file as committed, and git sees nothing changed or new.
    assert (repo / "shared.txt").read_text() == "base\n"
    assert _git(repo, "status", "--porcelain") == ""
    # In the order they finished, which the scheduler decides.
    results = sorted(_agent_results(events))
    assert len(results) == 2
    for result, name, agent in zip(results, "ab", ("agent-2", "agent-3"), strict=True):
        assert result.startswith(
            f"{name} done\n\n[worktree kept: branch trio-agents/r1/{agent} at "
        )
        assert "(1 file changed, uncommitted)" in result


async def test_two_parallel_editors_of_one_file_each_keep_a_branch_and_main_is_untouched(
    repo: Path,
) -> None:
    outcome, events = await _two_editors(repo, "write")
    assert outcome.result == "both done"
    _check_two_branches_kept(repo, events)


async def test_many_worktrees_made_and_removed_at_once_in_one_repository(repo: Path) -> None:
    # git reads every worktree's admin folder while it adds one, and fails ("failed to read
    # .git/worktrees/…/commondir") when another add is half way through writing its own: a
    # fan-out of isolated agents must not lose one to that.
    made: list[Worktree] = []

    async def make(i: int) -> None:
        made.append(await add_worktree(repo, run_id="r1", agent_id=f"agent-{i}", agent_type="ed"))

    async with trio.open_nursery() as nursery:
        for i in range(12):
            nursery.start_soon(make, i)
    assert len(made) == 12
    async with trio.open_nursery() as nursery:
        for tree in made:
            nursery.start_soon(functools.partial(finish_worktree, tree, cancelled=False))
    assert _branches(repo) == ["main"]
    assert (await list_worktrees(repo))[1] == []


async def test_bash_of_an_isolated_agent_runs_in_its_worktree(repo: Path) -> None:
    _outcome, events = await _two_editors(repo, "bash")
    _check_two_branches_kept(repo, events)


@needs_bwrap
async def test_sandboxed_editors_change_only_their_worktrees(repo: Path) -> None:
    _outcome, events = await _two_editors(repo, "bash", sandbox=True)
    _check_two_branches_kept(repo, events)


@needs_bwrap
async def test_a_sandboxed_isolated_agent_cannot_write_the_main_workspace(repo: Path) -> None:
    main = repo / "shared.txt"
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("x", "ed")]}, {"text": "ok"}]},
        "ed": {"turns": [
            {"tool_calls": [{"name": "bash", "input": {"command": f"echo evil > {main}"}}]},
            {"text": "tried"}]}}}  # fmt: skip
    _outcome, events = await run_scenario(
        scenario, repo, agent_types=_types("ed"), run_id="r1", sandbox=True
    )
    bash = next(e for e in by_type(events, ToolFinished) if e.name == "bash")
    assert bash.status == "ok"
    assert "exit code" in bash.output  # refused by the sandbox: read-only or not there
    assert main.read_text() == "base\n"


async def test_an_unchanged_worktree_and_its_branch_are_removed(repo: Path) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("look", "reader")]}, {"text": "ok"}]},
        "reader": {"turns": [
            {"tool_calls": [{"name": "read", "input": {"path": "shared.txt"}}]},
            {"text": "it says base"}]}}}  # fmt: skip
    _outcome, events = await run_scenario(scenario, repo, agent_types=_types("reader"), run_id="r1")
    check_invariants(events)
    read = next(e for e in by_type(events, ToolFinished) if e.name == "read")
    assert "base" in read.output
    [result] = _agent_results(events)
    assert result == (
        "it says base\n\n[worktree: no changes; branch trio-agents/r1/agent-2 and "
        f"{_real(repo)}/.trio-agents/worktrees/r1-agent-2 removed]"
    )
    assert _branches(repo) == ["main"]
    assert "r1-agent-2" not in _git(repo, "worktree", "list")
    assert not _exists(repo / ".trio-agents" / "worktrees" / "r1-agent-2")


async def test_a_cancelled_isolated_agent_keeps_its_worktree(repo: Path) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("slow", "ed")]}, {"text": "ok"}]},
        "ed": {"turns": [
            {"tool_calls": [{"name": "bash", "input": {"command": "sleep 30"}}]},
            {"text": "never"}]}}}  # fmt: skip
    log = EventLog()
    async with open_runtime(
        scenario=scenario, workspace=repo, on_event=log, trace=False,
        permission_mode="allow-all", agent_types=_types("ed"), run_id="r1",
    ) as rt, trio.open_nursery() as nursery:  # fmt: skip
        nursery.start_soon(rt.run, "go")
        await log.wait_for(lambda ev: any(getattr(e, "name", None) == "bash" for e in ev))
        await rt.cancel("agent-2", "enough")
    check_invariants(list(log))
    [result] = _agent_results(list(log))
    assert result.startswith("cancelled: enough")
    assert "[worktree kept: branch trio-agents/r1/agent-2 at " in result
    assert "its agent was cancelled" in result
    assert _exists(repo / ".trio-agents" / "worktrees" / "r1-agent-2" / "shared.txt")
    assert "trio-agents/r1/agent-2" in _branches(repo)


async def test_a_workspace_that_is_not_a_git_repository_is_one_error_result(
    workspace: Path,
) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("x", "ed")]}, {"text": "ok"}]},
        "ed": {"turns": [{"text": "never"}]}}}  # fmt: skip
    outcome, events = await run_scenario(scenario, workspace, agent_types=_types("ed"))
    check_invariants(events)
    [call] = [e for e in by_type(events, ToolFinished) if e.name == "agent"]
    assert call.status == "error"
    assert call.output == (
        f"agent type 'ed' has isolation = \"worktree\", but the workspace "
        f"{_real(workspace)} is not in a git repository (git init and commit there, or "
        "drop the isolation)"
    )
    assert [e.name for e in by_type(events, ToolFinished)] == ["agent"]
    assert outcome.result == "ok"


async def test_a_dirty_workspace_gives_a_worktree_of_head_without_its_changes(
    repo: Path,
) -> None:
    (repo / "shared.txt").write_text("uncommitted\n")
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("look", "reader")]}, {"text": "ok"}]},
        "reader": {"turns": [
            {"tool_calls": [{"name": "read", "input": {"path": "shared.txt"}}]},
            {"text": "read"}]}}}  # fmt: skip
    _outcome, events = await run_scenario(scenario, repo, agent_types=_types("reader"))
    read = next(e for e in by_type(events, ToolFinished) if e.name == "read")
    assert "base" in read.output
    assert "uncommitted" not in read.output
    assert (repo / "shared.txt").read_text() == "uncommitted\n"


async def test_list_and_clean_the_runtimes_worktrees(repo: Path) -> None:
    await _two_editors(repo, "write")
    # One of them is committed on its branch: cleaning keeps the branch, drops the folder.
    tree = repo / ".trio-agents" / "worktrees" / "r1-agent-2"
    _git(tree, "commit", "-q", "-am", "a's change")
    root, entries = await list_worktrees(repo)
    assert root == _real(repo)
    assert [(e.branch, e.files, e.commits) for e in entries] == [
        ("trio-agents/r1/agent-2", 0, 1),
        ("trio-agents/r1/agent-3", 1, 0),
    ]
    said = [await remove_entry(root, e, force=False) for e in entries]
    assert said[0].startswith(f"removed {tree}; branch trio-agents/r1/agent-2 kept: 1 commit")
    assert said[1].startswith("kept ")
    assert "--clean --force" in said[1]
    _root, entries = await list_worktrees(repo)
    [left] = entries
    assert await remove_entry(root, left, force=True) == (
        f"removed {left.path} and branch trio-agents/r1/agent-3"
    )
    assert _branches(repo) == ["main", "trio-agents/r1/agent-2"]
    assert (await list_worktrees(repo))[1] == []


async def test_listing_worktrees_outside_a_repository_is_an_error(workspace: Path) -> None:
    with pytest.raises(WorktreeError, match="is not in a git repository"):
        await list_worktrees(workspace)


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtime", *args], cwd=cwd, text=True, capture_output=True,
        timeout=120, check=False,
    )  # fmt: skip


def test_the_command_line_runs_toml_worktree_types_then_lists_and_cleans_them(
    repo: Path, tmp_path: Path
) -> None:
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({"agents": {
        "main": {"turns": [
            {"tool_calls": [agent_call("a", "ed_a"), agent_call("b", "ed_b")]},
            {"text": "both done"}]},
        "ed_a": _editor("a", "from a\n"),
        "ed_b": {"turns": [{"text": "nothing to change"}]}}}))  # fmt: skip
    agents = tmp_path / "agents.toml"
    agents.write_text(
        '[agents.ed_a]\nisolation = "worktree"\n[agents.ed_b]\nisolation = "worktree"\n'
    )
    run = _cli(["run", "go", "--scenario", str(scenario), "--agents", str(agents), "--no-trace",
                "--permission-mode", "allow-all", "--json"], repo)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert (repo / "shared.txt").read_text() == "base\n"
    listed = _cli(["worktrees", "--json"], repo)
    assert listed.returncode == 0, listed.stderr
    [entry] = json.loads(listed.stdout)  # ed_b changed nothing: its worktree is gone
    assert entry["branch"].startswith("trio-agents/")
    assert entry["branch"].endswith("/agent-2")
    assert (entry["files_changed"], entry["commits"], entry["missing"]) == (1, 0, False)
    text = _cli(["worktrees"], repo).stdout
    assert text == f"{entry['branch']}  {entry['path']}  (1 file(s) changed, 0 commit(s))\n"
    refused = _cli(["worktrees", "--clean"], repo)
    assert refused.returncode == 0
    assert "uncommitted change(s)" in refused.stdout
    assert Path(entry["path"]).exists()
    cleaned = _cli(["worktrees", "--clean", "--force"], repo)
    assert cleaned.stdout == f"removed {entry['path']} and branch {entry['branch']}\n"
    assert _branches(repo) == ["main"]
    assert _cli(["worktrees"], repo).stdout == f"no worktrees of isolated agents in {_real(repo)}\n"


def test_worktrees_outside_a_repository_is_one_error_line(workspace: Path) -> None:
    done = _cli(["worktrees"], workspace)
    assert done.returncode == 2
    assert done.stderr == (
        f"trio-agents: error: worktrees: {_real(workspace)} is not in a git repository\n"
    )


def test_isolation_is_read_from_toml_and_claude_code_front_matter(workspace: Path) -> None:
    [t] = agent_types_from_mapping({"agents": {"ed": {"isolation": "worktree"}}})
    assert t.isolation == "worktree"
    with pytest.raises(ConfigError, match=r"^agents\.ed\.isolation: expected 'worktree' or"):
        agent_types_from_mapping({"agents": {"ed": {"isolation": "docker"}}})
    folder = workspace / ".claude" / "agents"
    folder.mkdir(parents=True)
    (folder / "ed.md").write_text(
        "---\nname: ed\ndescription: edits\nisolation: worktree\n---\nYou edit.\n"
    )
    (folder / "bad.md").write_text("---\nname: bad\nisolation: yes\n---\nx\n")
    project = load_project(workspace, env={"XDG_CONFIG_HOME": str(workspace / "cfg")})
    [ed] = [d.agent_type for d in project.agents]
    assert (ed.name, ed.isolation) == ("ed", "worktree")
    [warning] = project.warnings
    assert "bad.md: isolation: expected 'worktree' or 'none'; skipped" in warning


class _HostConfig:
    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace

    def workspace_path(self) -> Path:
        return self.workspace


def test_a_ray_host_that_does_not_see_the_worktree_refuses_the_subtree(repo: Path) -> None:
    from runtime.cluster._host import _workspace_for

    atype = AgentType(name="ed", isolation="worktree")
    gone = repo / ".trio-agents" / "worktrees" / "r1-agent-2"
    spec = AgentSpec(agent_id="agent-2", agent_type=atype, prompt="x", depth=1, workspace=gone)
    config: Any = _HostConfig(repo)
    with pytest.raises(ConfigError, match="does not see its worktree") as info:
        _workspace_for(config, spec)
    assert "share the workspace's file system (see docs/worktrees.md)" in str(info.value)
    gone.mkdir(parents=True)
    (gone / ".git").write_text("gitdir: somewhere\n")
    assert _workspace_for(config, spec) == repo
    assert (
        _workspace_for(config, AgentSpec(agent_id="a", agent_type=atype, prompt="x", depth=0))
        == repo
    )


async def test_an_isolated_agent_is_told_where_it_works(repo: Path) -> None:
    systems: dict[str, str] = {}
    agent_tool: list[str] = []

    def model(request: ModelRequest) -> Any:
        systems.setdefault(request.agent_type, request.system)
        agent_tool.extend(t.description for t in request.tools if t.name == "agent")
        if request.agent_type == "main" and len(request.messages) == 1:
            return [
                ToolCall(name="agent", input={"description": "d", "prompt": "p", "agent": "ed"})
            ]
        return "ok"

    async with open_runtime(
        FunctionProvider(model), workspace=repo, trace=False, permission_mode="allow-all",
        agent_types=_types("ed"), run_id="r1",
    ) as rt:  # fmt: skip
        await rt.run("go")
    tree = _real(repo) / ".trio-agents" / "worktrees" / "r1-agent-2"
    assert systems["ed"].endswith(
        f"You work in a git worktree of your own: {tree}, on a branch made for your task. Your "
        "file tools and commands work there, and paths are relative to it; the main workspace "
        f"{_real(repo)} is not yours to change. Your changes stay in the worktree for the user "
        "to review and merge."
    )
    assert "git worktree" not in systems["main"]
    assert agent_tool[0].endswith("\n- ed: (no description) (works in a git worktree of its own)")


async def test_cancelling_a_git_call_kills_git(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A git that hangs (a repository on a stalled network file system, say): a real process.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pid_file = tmp_path / "git.pid"
    fake = bin_dir / "git"
    fake.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 30\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            functools.partial(add_worktree, repo, run_id="r1", agent_id="agent-2", agent_type="ed")
        )
        with trio.fail_after(20):
            while not _exists(pid_file) or not _read(pid_file).strip():  # noqa: ASYNC110 - another process's file
                await trio.sleep(0.01)
        pid = int(_read(pid_file))
        assert psutil.pid_exists(pid)
        nursery.cancel_scope.cancel()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


async def test_a_nested_isolated_agent_keeps_its_worktree_when_its_parents_goes(
    repo: Path,
) -> None:
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("outer", "ed")]}, {"text": "ok"}]},
        "ed": {"turns": [{"tool_calls": [agent_call("inner", "inner")]}, {"text": "ed done"}]},
        "inner": _editor("inner", "from inner\n")}}  # fmt: skip
    _outcome, events = await run_scenario(
        scenario, repo, agent_types=_types("ed", "inner"), run_id="r1"
    )
    check_invariants(events)
    folder = repo / ".trio-agents" / "worktrees"
    assert not _exists(folder / "r1-agent-2"), "the outer agent changed nothing"
    assert _read(folder / "r1-agent-3" / "shared.txt") == "from inner\n"
    assert _branches(repo) == ["main", "trio-agents/r1/agent-3"]
    inner, outer = _agent_results(events)
    assert "[worktree kept: branch trio-agents/r1/agent-3 at " in inner
    assert outer.startswith("ed done\n\n[worktree: no changes; branch trio-agents/r1/agent-2")
    assert _read(repo / "shared.txt") == "base\n"


async def test_permission_rules_read_an_isolated_agents_paths_in_its_worktree(
    repo: Path,
) -> None:
    tree = _real(repo) / ".trio-agents" / "worktrees" / "r1-agent-2"
    write = {"name": "write", "input": {"path": str(tree / "shared.txt"), "content": "mine\n"}}
    outside = {"name": "write", "input": {"path": "other.txt", "content": "no\n"}}
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [agent_call("x", "ed")]}, {"text": "ok"}]},
        "ed": {"turns": [{"tool_calls": [write]}, {"tool_calls": [outside]}, {"text": "done"}]}}}  # fmt: skip
    _outcome, events = await run_scenario(
        scenario, repo, agent_types=_types("ed"), run_id="r1",
        permission_mode="deny", allow=["write(shared.txt)"],
    )  # fmt: skip
    writes = [(e.status, e.output) for e in by_type(events, ToolFinished) if e.name == "write"]
    assert writes[0][0] == "ok", "its absolute path in its worktree is shared.txt to the rules"
    assert writes[1] == ("denied", "permission denied: mode deny")
    assert _read(tree / "shared.txt") == "mine\n"


async def test_a_repository_without_a_commit_or_a_machine_without_git_is_a_clear_error(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _git(workspace, "init", "-q")
    with pytest.raises(WorktreeError) as info:
        await add_worktree(workspace, run_id="r1", agent_id="agent-2", agent_type="ed")
    assert str(info.value) == (
        f"agent type 'ed' has isolation = \"worktree\", but the repository {_real(workspace)} "
        "has no commit yet: a worktree is made from HEAD (commit first)"
    )
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    with pytest.raises(
        WorktreeError, match=r"^worktree isolation needs git, which is not installed$"
    ):
        await add_worktree(workspace, run_id="r1", agent_id="agent-2", agent_type="ed")


async def test_a_background_isolated_agent_edits_its_worktree_and_its_report_names_it(
    repo: Path,
) -> None:
    call = agent_call("a", "ed_a", run_in_background=True)
    scenario = {"agents": {
        "main": {"turns": [{"tool_calls": [call]}, {"text": "waiting"}, {"text": "done"}]},
        "ed_a": _editor("a", "from a\n")}}  # fmt: skip
    outcome, events = await run_scenario(scenario, repo, run_id="r1", agent_types=_types("ed_a"))
    assert outcome.result == "done"
    check_invariants(events)
    assert (repo / "shared.txt").read_text() == "base\n", "the main workspace is untouched"
    assert _git(repo, "status", "--porcelain") == ""
    tree = repo / ".trio-agents" / "worktrees" / "r1-agent-2"
    assert (tree / "shared.txt").read_text() == "from a\n"
    [report] = [e for e in events if isinstance(e, UserMessage) and e.agent_id == "agent-1"]
    assert report.text.startswith("[background sub-agent agent-2 (a) ended completed]\na done")
    assert "[worktree kept: branch trio-agents/r1/agent-2 at " in report.text


async def test_the_runs_live_worktrees_keep_a_changed_one_and_drop_a_removed_one(
    repo: Path,
) -> None:
    # What MCP servers are told as roots (docs/mcp.md, "Roots and logging").
    scenario = {"agents": {
        "main": {"turns": [
            {"tool_calls": [agent_call("edit", "ed_a"), agent_call("look", "reader")]},
            {"text": "ok"}]},
        "ed_a": _editor("a", "from a\n"),
        "reader": {"turns": [{"text": "nothing to do"}]}}}  # fmt: skip
    changes: list[list[str]] = []
    async with open_runtime(
        scenario=scenario, workspace=repo, trace=False, run_id="r1",
        agent_types=_types("ed_a", "reader"), permission_mode="allow-all",
    ) as rt:  # fmt: skip
        live = rt._run.worktrees
        live.listen(lambda: changes.append(sorted(agent for _, agent in live.live())))
        await rt.run("go")
        after = live.live()
    kept = _real(repo) / ".trio-agents" / "worktrees" / "r1-agent-2"
    assert after == [(kept, "agent-2")]
    # Two made, one removed (in an order the scheduler decides), each change told.
    assert len(changes) == 3
    assert {agent for seen in changes for agent in seen} == {"agent-2", "agent-3"}
    assert changes[-1] == ["agent-2"]  # the reader's add comes before its removal
