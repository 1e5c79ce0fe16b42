"""A repository with CLAUDE.md, .claude/agents/ and .claude/skills/, run against the real
OpenAI provider on the loopback test server (which records every request): what each agent's
system prompt holds and in what order, the Markdown agent offered and run with only its tools
and prompt, a ``skill`` call returning the body, and settings and flags combining."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import trio

from runtime import open_runtime
from runtime.core._agent_types import DEFAULT_SYSTEM
from runtime.project import load_project
from tests.invariants import check_invariants
from tests.llm_server import (
    OPENAI_DONE,
    LLMServer,
    RecordedRequest,
    Reply,
    openai_chunk,
    openai_text_stream,
)

KEY = "sk-project-e2e-0123456789abcdef"


@pytest.fixture
async def server(nursery: trio.Nursery) -> LLMServer:
    server = LLMServer()
    await nursery.start(server.serve)
    return server


@pytest.fixture
def repo(tmp_path: Path, user_config_home: Path) -> Path:
    """A repository as users keep one, and a user-level AGENTS.md."""
    user = user_config_home / "trio-agents"
    user.mkdir()
    (user / "AGENTS.md").write_text("USER-RULE: answer in English.")
    ws = tmp_path / "repo"
    (ws / ".git").mkdir(parents=True)
    (ws / ".git" / "HEAD").write_text("ref: refs/heads/feature-x\n")
    (ws / "docs").mkdir()
    (ws / "CLAUDE.md").write_text("PROJECT-RULE: run the tests. @docs/extra.md")
    (ws / "docs" / "extra.md").write_text("IMPORTED-RULE: tabs, not spaces.")
    (ws / ".claude" / "agents").mkdir(parents=True)
    (ws / ".claude" / "agents" / "reviewer.md").write_text(
        "---\nname: reviewer\ndescription: Reviews diffs for bugs\ntools: Read, Grep\n"
        "model: inherit\n---\nREVIEWER-PROMPT: you review code.\n"
    )
    (ws / ".claude" / "skills" / "checklist").mkdir(parents=True)
    (ws / ".claude" / "skills" / "checklist" / "SKILL.md").write_text(
        "---\nname: checklist\ndescription: The release checklist\n---\nCHECKLIST-BODY: bump.\n"
    )
    return ws


def env_for(server: LLMServer) -> dict[str, str]:
    return {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": server.url + "/v1", "PATH": "/usr/bin:/bin"}


def system_of(request: RecordedRequest) -> str:
    first = request.json["messages"][0]
    assert first["role"] == "system"
    return str(first["content"])


def tool_call(name: str, args: dict[str, str], call_id: str) -> Reply:
    calls = [{"index": 0, "id": call_id, "type": "function",
              "function": {"name": name, "arguments": orjson.dumps(args).decode()}}]
    return Reply.stream([
        openai_chunk({"role": "assistant", "content": ""}),
        openai_chunk({"tool_calls": calls}),
        openai_chunk({}, finish="tool_calls"),
        OPENAI_DONE,
    ])


def route(request: RecordedRequest) -> Reply:
    if "REVIEWER-PROMPT" in system_of(request):
        return Reply.stream(openai_text_stream(["LGTM"]))
    done = sum(m["role"] == "tool" for m in request.json["messages"])
    if done == 0:
        return tool_call("skill", {"name": "checklist"}, "call_skill")
    if done == 1:
        return tool_call("agent", {"description": "review", "prompt": "Review the diff",
                                   "agent": "reviewer"}, "call_review")
    return Reply.stream(openai_text_stream(["All done."]))


async def test_instructions_environment_skills_and_a_markdown_agent_over_http(
    server: LLMServer, repo: Path
) -> None:
    server.route = route
    project = load_project(repo)
    assert project.warnings == ()
    events: list[object] = []
    with trio.fail_after(20):
        async with open_runtime("openai", model="test-model", env=env_for(server),
                                workspace=repo, trace=False, project=project,
                                on_event=events.append) as rt:
            outcome = await rt.run("Prepare the release")
    check_invariants(events)  # type: ignore[arg-type]
    assert (outcome.status, outcome.result) == ("completed", "All done.")
    main_requests = [r for r in server.requests if "REVIEWER-PROMPT" not in system_of(r)]
    [review] = [r for r in server.requests if "REVIEWER-PROMPT" in system_of(r)]
    assert len(main_requests) == 3

    # The main agent: its type's prompt, the environment, the skills, the instructions.
    system = system_of(main_requests[0])
    order = [DEFAULT_SYSTEM, "# Environment", f"Workspace: {project.workspace}",
             "branch feature-x", "# Skills", "- checklist: The release checklist",
             "# Instructions", "USER-RULE", "PROJECT-RULE", "IMPORTED-RULE"]
    positions = [system.find(part) for part in order]
    assert -1 not in positions, [p for p, i in zip(order, positions, strict=True) if i < 0]
    assert positions == sorted(positions)
    assert "CHECKLIST-BODY" not in system, "only the name and description until it is loaded"
    tools = {t["function"]["name"]: t["function"] for t in main_requests[0].json["tools"]}
    assert "skill" in tools
    assert "- reviewer: Reviews diffs for bugs" in tools["agent"]["description"]

    # The skill call is an ordinary tool call whose result is the body.
    [skill_result] = [m for m in main_requests[1].json["messages"] if m["role"] == "tool"]
    assert skill_result["tool_call_id"] == "call_skill"
    assert "CHECKLIST-BODY: bump." in skill_result["content"]
    assert ".claude/skills/checklist" in skill_result["content"]

    # The Markdown agent: its own prompt first, the same instructions, only its tools.
    sub_system = system_of(review)
    assert sub_system.startswith("REVIEWER-PROMPT: you review code.")
    sub_order = ["# Environment", "Tools: read, grep", "# Instructions", "USER-RULE",
                 "PROJECT-RULE", "IMPORTED-RULE"]
    sub_positions = [sub_system.find(part) for part in sub_order]
    assert -1 not in sub_positions
    assert sub_positions == sorted(sub_positions)
    assert "# Skills" not in sub_system, "no skill tool, no skill list"
    assert DEFAULT_SYSTEM not in sub_system
    assert sorted(t["function"]["name"] for t in review.json["tools"]) == ["grep", "read"]
    assert review.json["model"] == "test-model", "model: inherit is the run's model"
    final = main_requests[2].json["messages"]
    assert any(m["role"] == "tool" and m["content"] == "LGTM" for m in final)


async def run_cli(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(30):
        return await trio.run_process(
            [sys.executable, "-m", "runtime", *args], cwd=cwd, env=env,
            stdin=subprocess.DEVNULL, capture_stdout=True, capture_stderr=True, check=False)


async def test_settings_and_flags_combine_on_the_command_line(
    server: LLMServer, repo: Path, user_config_home: Path
) -> None:
    server.route = lambda request: Reply.stream(openai_text_stream(["ok"]))
    user = user_config_home / "trio-agents"
    (user / "settings.toml").write_text(
        'provider = "anthropic"\nmodel = "user-model"\n[limits]\nmax_turns = 3\n')
    (repo / ".trio-agents").mkdir()
    (repo / ".trio-agents" / "settings.toml").write_text(
        'provider = "openai"\nmodel = "workspace-model"\n[trace]\ndir = "my-traces"\n')
    from runtime.project._trust import TrustStore

    TrustStore.load().trust(repo)  # its provider and trace dir loosen: the user trusts it
    env = {**env_for(server), "XDG_CONFIG_HOME": str(user_config_home), "HOME": str(repo)}
    proc = await run_cli(["run", "hello", "--json"], repo, env)
    assert proc.returncode == 0, proc.stderr
    assert server.requests[-1].json["model"] == "workspace-model"
    started = orjson.loads(proc.stdout.splitlines()[0])
    assert started["type"] == "run_started"
    assert started["config"]["limits"]["max_turns"] == 3, "the user's file"
    assert started["config"]["instructions"][-2:] == [str(repo / "CLAUDE.md"),
                                                      str(repo / "docs" / "extra.md")]
    assert len(list((repo / "my-traces").glob("*.jsonl"))) == 1, "trace.dir, from the workspace"

    proc = await run_cli(["run", "hello", "--json", "--model", "flag-model", "--max-turns", "5",
                          "--no-trace"], repo, env)
    assert proc.returncode == 0, proc.stderr
    assert server.requests[-1].json["model"] == "flag-model"
    assert orjson.loads(proc.stdout.splitlines()[0])["config"]["limits"]["max_turns"] == 5
    assert len(list((repo / "my-traces").glob("*.jsonl"))) == 1

    proc = await run_cli(["config", "--model", "flag-model", "--json"], repo, env)
    assert proc.returncode == 0, proc.stderr
    shown = orjson.loads(proc.stdout)
    assert shown["model"] == {"value": "flag-model", "source": "flag --model"}
    assert shown["provider"]["value"] == "openai"
    assert shown["provider"]["source"].startswith(f"workspace {repo}/.trio-agents/settings.toml:1")
    assert shown["limits.max_turns"]["source"].startswith(f"user {user}/settings.toml:4")
    assert shown["permissions.mode"]["value"] == "deny"
