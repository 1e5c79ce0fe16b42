"""What MCP servers ask of the client (docs/mcp.md): the capabilities declared, sampling through
the run's model and permission broker, elicitation through the run's questions, roots, and a
sampling or a question cancelled with its subtree. Against server-everything (npm) and a
server built with the SDK's MCPServer (tests/mcp_bad_server.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from runtime import Event, FunctionProvider, ToolCall, TraceTree, decode_event, open_runtime
from runtime.cli._control import handle_request
from runtime.core import (
    AgentFinished,
    ElicitationRequested,
    ElicitationResolved,
    McpSampled,
    PermissionRequested,
    ToolFinished,
    TurnFinished,
)
from runtime.mcp import McpConfig, McpTool, open_mcp_servers
from tests.harness import agent_call, run_scenario
from tests.invariants import check_invariants
from tests.mcp_fixtures import bad_http, everything_http, everything_server
from tests.test_cli_pty import finish, read_trace, spawn
from tests.test_control import sock_path
from tests.test_lazylog import capture_logs

__all__ = ["bad_http", "everything_http", "sock_path", "spawn"]  # fixtures

BAD = Path(__file__).parent / "mcp_bad_server.py"


def bad_server() -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(BAD)]}


def calls(*items: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": n, "input": i} for n, i in items]}


def script(*turns: dict[str, Any], **agents: Any) -> dict[str, Any]:
    return {"agents": {"main": {"turns": [*turns, {"text": "done"}]}, **agents}}


def of(kind: type[Event], events: list[Event]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


async def test_server_everything_offers_its_sampling_elicitation_and_roots_tools(
    workspace: Path,
) -> None:
    config = McpConfig.from_mapping({"e": everything_server()})
    async with open_mcp_servers(config, env={}, workspace=workspace) as servers:
        names = {t.remote_name for t in servers.tools if isinstance(t, McpTool)}
    # It offers these only to a client that declares sampling, elicitation and roots.
    assert {"trigger-sampling-request", "trigger-elicitation-request", "get-roots-list"} <= names


def root_uri(workspace: Path) -> str:
    return workspace.resolve().as_uri()


async def test_sampling_goes_to_the_agents_model_and_is_counted_in_its_tokens(
    workspace: Path,
) -> None:
    root = root_uri(workspace)
    scenario = script(
        calls(("mcp__e__trigger-sampling-request", {"prompt": "hello there", "maxTokens": 50})),
        calls(("mcp__e__get-roots-list", {})),
    )
    outcome, events = await run_scenario(
        scenario, workspace, mcp_servers={"e": everything_server()}
    )
    assert outcome.status == "completed"
    sampling, roots = of(ToolFinished, events)
    assert sampling.status == "ok"
    assert "sampled: Resource trigger-sampling-request context: hello there" in sampling.output
    assert '"model": "scripted"' in sampling.output
    assert root in roots.output  # the root is the workspace
    (sampled,) = of(McpSampled, events)
    assert (sampled.status, sampled.server, sampled.tool_use_id) == (
        "ok",
        "e",
        sampling.tool_use_id,
    )
    assert sampled.input_tokens > 0
    assert sampled.output_tokens > 0
    # Under the call: between its tool_started and tool_finished.
    assert sampled.seq < sampling.seq
    turns = of(TurnFinished, events)
    (finished,) = of(AgentFinished, events)
    assert finished.input_tokens == sum(t.input_tokens for t in turns) + sampled.input_tokens
    assert finished.output_tokens == sum(t.output_tokens for t in turns) + sampled.output_tokens
    tree = TraceTree.from_events(events)
    assert tree.agents["agent-1"].input_tokens == finished.input_tokens


async def test_headless_deny_declines_sampling_and_the_server_is_told(workspace: Path) -> None:
    scenario = script(calls(("mcp__b__sample", {"text": "hi"})))
    _, events = await run_scenario(
        scenario,
        workspace,
        mcp_servers={"b": bad_server()},
        permission_mode="deny",
        allow=["mcp__b__*"],
    )
    (end,) = of(ToolFinished, events)
    assert end.status == "error"
    assert "permission denied: mode deny" in end.output  # the server's error, with our reason
    (sampled,) = of(McpSampled, events)
    assert (sampled.status, sampled.input_tokens) == ("declined", 0)
    assert sampled.reason == "permission denied: mode deny"


async def test_a_rule_allows_one_servers_sampling(workspace: Path) -> None:
    scenario = script(calls(("mcp__b__sample", {"text": "hi"})))
    _, events = await run_scenario(
        scenario,
        workspace,
        mcp_servers={"b": bad_server()},
        permission_mode="deny",
        allow=["mcp__b__*", "mcp_sampling(b)"],
    )
    (end,) = of(ToolFinished, events)
    assert (end.status, end.output) == ("ok", "sampled: hi")


async def run_answering(
    workspace: Path,
    scenario: dict[str, Any],
    answer: Callable[[Any, Event], Any],
    **kwargs: Any,
) -> list[Event]:
    """Run *scenario* with someone answering: ``answer(rt, event)`` is awaited for each event
    (in the order they come) while the run goes on."""
    events: list[Event] = []
    async with open_runtime(
        scenario=scenario,
        workspace=workspace,
        trace=False,
        on_event=events.append,
        **kwargs,
    ) as rt:
        with (
            rt.permission_answerer(),
            rt.elicitation_answerer(),
            rt.subscribe(policy="block") as sub,
        ):
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    async for event in sub:
                        await answer(rt, event)

                nursery.start_soon(watch)
                await rt.run("go")
                nursery.cancel_scope.cancel()
    return events


async def ask_bad_server(
    workspace: Path, call: tuple[str, dict[str, Any]], answer: Callable[[Any, Event], Any]
) -> list[Event]:
    """One call to tests/mcp_bad_server.py (``b``) in allow-all mode, *answer* answering
    (:func:`run_answering`); bounded at 30 s."""
    with trio.fail_after(30):
        return await run_answering(
            workspace,
            script(calls(call)),
            answer,
            mcp_servers={"b": bad_server()},
            permission_mode="allow-all",
        )


async def test_asked_sampling_names_the_server_and_the_request_under_the_call(
    workspace: Path,
) -> None:
    async def answer(rt: Any, event: Event) -> None:
        await trio.lowlevel.checkpoint()
        if isinstance(event, PermissionRequested):
            (pending,) = rt.pending_permissions()
            assert pending.name == "mcp_sampling"
            assert pending.input["server"] == "b"
            assert pending.input["messages"] == [{"role": "user", "text": "what is 2+2?"}]
            assert pending.rule == "mcp_sampling(b)"
            rt.resolve_permission(event.request_id, True)

    events = await run_answering(
        workspace,
        script(calls(("mcp__b__sample", {"text": "what is 2+2?"}))),
        answer,
        mcp_servers={"b": bad_server()},
        permission_mode="ask",
        allow=["mcp__b__*"],
    )
    (asked,) = of(PermissionRequested, events)
    (end,) = of(ToolFinished, events)
    assert asked.tool_use_id == end.tool_use_id  # the call that caused it
    assert (end.status, end.output) == ("ok", "sampled: what is 2+2?")


async def test_a_sampling_flood_is_cut_at_twenty_a_call(workspace: Path) -> None:
    scenario = script(calls(("mcp__b__flood", {"n": 60})))
    _, events = await run_scenario(scenario, workspace, mcp_servers={"b": bad_server()})
    (end,) = of(ToolFinished, events)
    assert end.output == "answered 20, refused 40"
    sampled = of(McpSampled, events)
    assert [s.status for s in sampled].count("ok") == 20
    assert {s.reason for s in sampled if s.status == "declined"} == {
        "more than 20 sampling requests in one tool call"
    }


async def test_a_sampling_in_flight_is_cancelled_with_its_subtree(workspace: Path) -> None:
    scenario = script(
        calls(("mcp__b__sample", {"text": "slow"})),
        sample={"turns": [{"text": "too late", "delay_s": 60}]},
    )

    async def answer(rt: Any, event: Event) -> None:
        if isinstance(event, PermissionRequested):
            rt.resolve_permission(event.request_id, True)
            await trio.sleep(0.2)  # the model call is under way
            assert await rt.cancel(event.tool_use_id, "enough")

    with trio.fail_after(20):
        events = await run_answering(
            workspace, scenario, answer, mcp_servers={"b": bad_server()}, permission_mode="ask",
            allow=["mcp__b__*"],
        )  # fmt: skip
    (end,) = of(ToolFinished, events)
    assert end.status == "cancelled"
    (sampled,) = of(McpSampled, events)
    assert sampled.status == "cancelled"


@pytest.mark.parametrize("everything", [False, True])
async def test_elicitation_is_declined_when_nobody_can_answer(
    workspace: Path, everything: bool
) -> None:
    tool = "mcp__e__trigger-elicitation-request" if everything else "mcp__e__ask"
    server = everything_server() if everything else bad_server()
    _, events = await run_scenario(script(calls((tool, {}))), workspace, mcp_servers={"e": server})
    (end,) = of(ToolFinished, events)
    assert end.status == "ok"
    assert "decline" in end.output
    (resolved,) = of(ElicitationResolved, events)
    assert (resolved.action, resolved.reason) == (
        "decline",
        "nobody can answer questions (non-interactive)",
    )


async def test_a_form_elicitation_is_answered_and_its_content_checked(workspace: Path) -> None:
    async def answer(rt: Any, event: Event) -> None:
        if isinstance(event, ElicitationRequested):
            assert event.mode == "form"
            assert event.message == "Who are you?"
            assert event.requested_schema is not None
            assert set(event.requested_schema["properties"]) == {"name", "age"}
            # Through the control socket's requests, as `nc -U SOCK` would send them.
            listed = await handle_request(rt, b'{"op": "elicitations"}')
            (pending,) = listed["elicitations"]
            assert (pending["request_id"], pending["server"]) == (event.request_id, "b")
            answer = {"op": "elicit", "request_id": event.request_id, "action": "accept"}
            bad = await handle_request(
                rt, json.dumps({**answer, "content": {"name": "Ann", "age": "seven"}}).encode()
            )
            assert bad == {"ok": False, "error": "content: age: 'seven' is not of type 'integer'"}
            good = await handle_request(
                rt, json.dumps({**answer, "content": {"name": "Ann", "age": 7}}).encode()
            )
            assert good == {"ok": True}

    events = await ask_bad_server(workspace, ("mcp__b__ask", {}), answer)
    (end,) = of(ToolFinished, events)
    assert end.output == "accept: Ann is 7"
    (asked,) = of(ElicitationRequested, events)
    assert asked.tool_use_id == end.tool_use_id
    (resolved,) = of(ElicitationResolved, events)
    assert resolved.action == "accept"


async def test_a_url_elicitation_is_shown_as_a_link(workspace: Path) -> None:
    async def answer(rt: Any, event: Event) -> None:
        await trio.lowlevel.checkpoint()
        if isinstance(event, ElicitationRequested):
            assert (event.mode, event.url) == ("url", "https://example.com/login")
            rt.resolve_elicitation(event.request_id, "accept")

    events = await ask_bad_server(workspace, ("mcp__b__ask_url", {}), answer)
    (end,) = of(ToolFinished, events)
    assert end.output == "accept"


async def test_a_question_never_answered_is_cancelled_with_its_subtree(workspace: Path) -> None:
    async def answer(rt: Any, event: Event) -> None:
        if isinstance(event, ElicitationRequested):
            await trio.sleep(0.1)
            assert await rt.cancel(event.tool_use_id, "enough")

    events = await ask_bad_server(workspace, ("mcp__b__ask", {}), answer)
    (end,) = of(ToolFinished, events)
    assert end.status == "cancelled"
    (resolved,) = of(ElicitationResolved, events)
    assert resolved.action == "cancel"
    (finished,) = of(AgentFinished, events)
    assert finished.status == "completed"  # the agent read "cancelled" and went on


async def test_a_changed_tool_list_is_offered_at_the_next_turn_and_logs_go_to_the_debug_log(
    workspace: Path,
) -> None:
    seen: list[list[str]] = []

    def model(request: Any) -> Any:
        seen.append(sorted(t.name for t in request.tools if t.name.startswith("mcp__b__")))
        if len(seen) == 1:
            return ToolCall(name="mcp__b__notify", input={})
        if len(seen) == 2:
            return ToolCall(name="mcp__b__late", input={})
        return "done"

    events: list[Event] = []
    warnings: list[str] = []
    config = attrs.evolve(McpConfig.from_mapping({"b": bad_server()}), on_warning=warnings.append)
    with capture_logs() as lines:
        async with open_runtime(
            FunctionProvider(model),
            workspace=workspace,
            trace=False,
            on_event=events.append,
            mcp_servers=config,
            permission_mode="allow-all",
        ) as rt:
            await rt.run("go")
    assert "mcp__b__late" not in seen[0]
    assert "mcp__b__late" in seen[1]  # the turn after the notification offers it
    late = next(e for e in of(ToolFinished, events) if e.name == "mcp__b__late")
    assert (late.status, late.output) == ("ok", "late")
    assert "mcp server 'b' changed its tools; new: mcp__b__late" in warnings
    (logged,) = [e for e in lines if e["event"] == "mcp.server_log"]
    assert logged["log_level"] == "debug"
    assert (logged["server"], logged["level"], logged["logger"]) == ("b", "warning", "bad")
    assert logged["message"] == "the server says hello"


async def test_sampling_tokens_count_in_the_budget_of_the_calling_subtree(workspace: Path) -> None:
    scenario = {
        "agents": {
            "main": {
                "turns": [
                    {"tool_calls": [agent_call("greedy", "spender", budget={"tokens": 200})]},
                    {"text": "coped"},
                ]
            },
            "spender": {
                "turns": [
                    {
                        "usage": {"input_tokens": 10, "output_tokens": 10},
                        "tool_calls": [{"name": "mcp__b__flood", "input": {"n": 20}}],
                    },
                    {"text": "never"},
                ]
            },
            "sample": {"turns": [{"text": "ok", "usage": {"input_tokens": 30, "output_tokens": 10}}]},
        }
    }
    with trio.fail_after(30):
        outcome, events = await run_scenario(scenario, workspace, mcp_servers={"b": bad_server()})
    check_invariants(events)
    assert outcome.status == "completed"
    spender = next(e for e in of(AgentFinished, events) if e.agent_id != "agent-1")
    assert spender.status == "budget_exceeded"
    sampled = [s for s in of(McpSampled, events) if s.status == "ok"]
    assert 1 <= len(sampled) <= 6  # cut off once 20 + 40 per sampling went over 200
    assert spender.input_tokens == 10 + 30 * len(sampled)
    (flood,) = [e for e in of(ToolFinished, events) if e.name == "mcp__b__flood"]
    assert flood.status == "cancelled"


async def test_trio_agents_elicit_lists_and_answers_a_question_from_another_process(
    sock_path: Path, tmp_path: Path
) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"b": bad_server()}}))
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps(script(calls(("mcp__b__ask", {})))))
    run = [sys.executable, "-m", "runtime"]
    proc = await trio.lowlevel.open_process(
        [*run, "run", "go", "--json", "--permission-mode", "allow-all", "--no-trace",
         "--control", str(sock_path), "--scenario", str(scenario), "--mcp-config", str(config)],
        cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None

    async def elicit(*args: str) -> subprocess.CompletedProcess[bytes]:
        return await trio.run_process(
            [*run, "elicit", "--control", str(sock_path), *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )

    buf = b""
    try:
        with trio.fail_after(40):
            while b'"elicitation_requested"' not in buf:
                data = await proc.stdout.receive_some(65536)
                assert data, "the run ended before the server asked"
                buf += data
            listed = await elicit()
            assert listed.returncode == 0, listed.stderr
            head, *fields = listed.stdout.decode().splitlines()
            assert head == "elicit-1  b: Who are you?  (agent agent-1, call tu-1.1)"
            assert fields == ["    name=string  Name", "    age=integer  Age"]
            bad = await elicit("elicit-1", "accept", "name=Ann", "age=seven")
            assert (bad.returncode, bad.stderr) == (
                2,
                b"trio-agents: error: elicit: age: expected a integer, not 'seven'\n",
            )
            done = await elicit("elicit-1", "accept", "name=Ann", "age=7")
            assert done.returncode == 0, done.stderr
            while data := await proc.stdout.receive_some(65536):
                buf += data
            code = await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
    assert code == 0
    events = [decode_event(line) for line in buf.splitlines()]
    (end,) = [e for e in events if isinstance(e, ToolFinished)]
    assert end.output == "accept: Ann is 7"


def test_the_terminal_asks_a_servers_question_as_a_form(spawn: Any, tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"b": bad_server()}}))
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps(script(calls(("mcp__b__ask", {})))))
    trace = tmp_path / "t.jsonl"
    child = spawn(
        "run", "go", "--trace", str(trace), "--permission-mode", "allow-all",
        "--scenario", str(scenario), "--mcp-config", str(config),
    )  # fmt: skip
    child.expect(r"Question.* from MCP server .*b.* \(for main\): Who are you\?")
    child.expect(re.escape("name (string) Name: "))
    child.sendline("Ann")
    child.expect(re.escape("age (integer) Age: "))
    child.sendline("seven")  # not an integer: asked again
    child.expect(re.escape("age: expected a integer, not 'seven'"))
    child.expect(re.escape("age (integer) Age: "))
    child.sendline("7")
    child.expect(re.escape("Send? [y]es / [n]o (decline) / [c]ancel: "))
    child.sendline("y")
    child.expect("Sent.")
    assert finish(child) == 0
    (end,) = [e for e in read_trace(trace) if isinstance(e, ToolFinished)]
    assert end.output == "accept: Ann is 7"


class ServerLog:
    """The log messages servers send (``notifications/message``), to wait for one."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._new = trio.Event()

    def add(self, line: str) -> None:
        self.lines.append(line)
        self._new.set()
        self._new = trio.Event()

    async def wait_for(self, text: str, count: int) -> None:
        """Until *text* has been logged *count* times."""
        while self.lines.count(text) < count:
            await self._new.wait()


@pytest.fixture
def server_log(monkeypatch: pytest.MonkeyPatch) -> ServerLog:
    from runtime.mcp._client import ServerRequests

    seen = ServerLog()
    original = ServerRequests.log

    async def log(self: ServerRequests, params: Any) -> None:
        seen.add(str(params.data))
        await original(self, params)

    monkeypatch.setattr(ServerRequests, "log", log)
    return seen


async def test_the_roots_are_the_workspace_and_each_worktree_while_it_exists(
    workspace: Path, server_log: ServerLog
) -> None:
    from runtime import AgentType
    from tests.test_worktree import _git

    _git(workspace, "init", "-q", "-b", "main")
    (workspace / "a.txt").write_text("a\n")
    _git(workspace, "add", "a.txt")
    _git(workspace, "commit", "-q", "-m", "a")
    tree = (workspace / ".trio-agents/worktrees/r1-agent-2").resolve()
    one, two = (f"Roots updated: {n} root(s) received from client" for n in (1, 2))
    turns: dict[str, int] = {}

    async def model(request: Any) -> Any:
        turn = turns[request.agent_id] = turns.get(request.agent_id, 0) + 1
        if request.agent_id == "agent-2":  # the isolated sub-agent, in the worktree
            if turn == 1:
                # server-everything asks for the roots again once told they changed.
                await server_log.wait_for(two, 1)
                return ToolCall(name="mcp__e__get-roots-list", input={})
            return "looked"
        if turn == 1:
            await server_log.wait_for(one, 1)  # its first look, 350 ms after start-up
            return ToolCall(name="agent", input=agent_call("look", "ed")["input"])
        if turn == 2:  # the worktree (unchanged) has been removed: told again
            await server_log.wait_for(one, 2)
            return ToolCall(name="mcp__e__get-roots-list", input={})
        return "done"

    events: list[Event] = []
    with trio.fail_after(60):
        async with open_runtime(
            FunctionProvider(model),
            workspace=workspace,
            trace=False,
            run_id="r1",
            on_event=events.append,
            agent_types=[AgentType(name="ed", isolation="worktree")],
            mcp_servers={"e": everything_server()},
            permission_mode="allow-all",
        ) as rt:
            await rt.run("go")
    during, after = [e for e in of(ToolFinished, events) if e.name == "mcp__e__get-roots-list"]
    assert during.agent_id == "agent-2"
    assert "Current MCP Roots (2 total)" in during.output
    assert f"1. workspace\n   URI: {root_uri(workspace)}" in during.output
    assert f"2. worktree of agent-2\n   URI: {tree.as_uri()}" in during.output
    assert "Current MCP Roots (1 total)" in after.output
    assert tree.as_uri() not in after.output
    assert not tree.exists()


# -- over streamable HTTP (server-everything's streamableHttp transport on loopback) ----------


async def test_over_http_sampling_is_asked_then_answered_by_the_runs_model(
    workspace: Path, everything_http: dict[str, Any]
) -> None:
    async def answer(rt: Any, event: Event) -> None:
        await trio.lowlevel.checkpoint()
        if isinstance(event, PermissionRequested):
            (pending,) = rt.pending_permissions()
            assert (pending.name, pending.rule) == ("mcp_sampling", "mcp_sampling(e)")
            assert pending.input["system"] == "You are a helpful test server."
            rt.resolve_permission(event.request_id, True)

    with trio.fail_after(30):
        events = await run_answering(
            workspace,
            script(calls(("mcp__e__trigger-sampling-request", {"prompt": "over http"}))),
            answer,
            mcp_servers={"e": everything_http},
            permission_mode="ask",
            allow=["mcp__e__*"],
        )
    (asked,) = of(PermissionRequested, events)
    (end,) = of(ToolFinished, events)
    assert asked.tool_use_id == end.tool_use_id
    assert end.status == "ok"
    assert "sampled: Resource trigger-sampling-request context: over http" in end.output
    (sampled,) = of(McpSampled, events)
    assert (sampled.status, sampled.tool_use_id) == ("ok", end.tool_use_id)
    assert sampled.output_tokens > 0


async def test_over_http_questions_are_answered_and_declined_through_the_control_socket(
    workspace: Path, everything_http: dict[str, Any]
) -> None:
    answers = iter(
        [
            {"action": "accept", "content": {"name": "Ann", "check": True}},
            {"action": "decline"},
        ]
    )

    async def answer(rt: Any, event: Event) -> None:
        if isinstance(event, ElicitationRequested):
            assert event.requested_schema is not None
            assert "name" in event.requested_schema["properties"]
            request = {"op": "elicit", "request_id": event.request_id, **next(answers)}
            assert await handle_request(rt, json.dumps(request).encode()) == {"ok": True}

    tool = "mcp__e__trigger-elicitation-request"
    with trio.fail_after(30):
        events = await run_answering(
            workspace,
            script(calls((tool, {})), calls((tool, {}))),
            answer,
            mcp_servers={"e": everything_http},
            permission_mode="allow-all",
        )
    accepted, declined = of(ToolFinished, events)
    assert "- Name: Ann\n- Agreed to terms: true" in accepted.output
    assert "User declined to provide the requested information." in declined.output
    assert [r.action for r in of(ElicitationResolved, events)] == ["accept", "decline"]


# Each server's tool that asks, and a call after it: server-everything's echo shows the
# connection still serves; the SDK server's outcomes_so_far says how it saw the cancelled call.
_ASKING = {
    "everything": {
        "sample": ("trigger-sampling-request", {"prompt": "slow"}),
        "ask": ("trigger-elicitation-request", {}),
        "after": ("echo", {"message": "still here"}),
    },
    "sdk": {
        "sample": ("sample", {"text": "slow"}),
        "ask": ("ask", {}),
        "after": ("outcomes_so_far", {}),
    },
}


@pytest.mark.parametrize("server", ["everything", "sdk"])
@pytest.mark.parametrize("what", ["sample", "ask"])
async def test_over_http_a_request_in_flight_is_cancelled_with_its_subtree_and_the_server_told(
    workspace: Path, request: pytest.FixtureRequest, server: str, what: str
) -> None:
    config = request.getfixturevalue("everything_http" if server == "everything" else "bad_http")
    tools = _ASKING[server]
    (asking, args), (after, after_args) = tools[what], tools["after"]
    scenario = script(
        calls((f"mcp__s__{asking}", args)),
        calls((f"mcp__s__{after}", after_args)),
        sample={"turns": [{"text": "too late", "delay_s": 60}]},
    )

    async def answer(rt: Any, event: Event) -> None:
        if isinstance(event, PermissionRequested) and event.name == "mcp_sampling":
            rt.resolve_permission(event.request_id, True)
        if isinstance(event, PermissionRequested | ElicitationRequested):
            await trio.testing.wait_all_tasks_blocked(0.05)  # the model call or the question waits
            assert await rt.cancel(event.tool_use_id, "enough")

    with trio.fail_after(30):
        events = await run_answering(
            workspace, scenario, answer, mcp_servers={"s": config}, permission_mode="ask",
            allow=["mcp__s__*"],
        )  # fmt: skip
    cancelled, later = of(ToolFinished, events)
    assert (cancelled.status, later.status) == ("cancelled", "ok")
    if what == "sample":
        (sampled,) = of(McpSampled, events)
        assert sampled.status == "cancelled"
    else:
        (resolved,) = of(ElicitationResolved, events)
        assert resolved.action == "cancel"
    if server == "everything":
        assert later.output == "Echo: still here"
    else:  # the call's notifications/cancelled came first: the server's handler was cancelled
        assert json.loads(later.output)[-1] == f"{what} cancelled"
    (finished,) = of(AgentFinished, events)
    assert finished.status == "completed"


async def test_a_server_that_asks_on_and_on_reaches_the_user_twenty_times_a_call(
    workspace: Path,
) -> None:
    async def answer(rt: Any, event: Event) -> None:
        await trio.lowlevel.checkpoint()
        if isinstance(event, ElicitationRequested):
            assert rt.resolve_elicitation(event.request_id, "decline")

    events = await ask_bad_server(workspace, ("mcp__b__pester", {"n": 60}), answer)
    (end,) = of(ToolFinished, events)
    assert end.output == "decline:60"  # 20 by the user, 40 unasked
    assert len(of(ElicitationRequested, events)) == 20
    assert len(of(ElicitationResolved, events)) == 20


async def test_a_question_nobody_answers_is_cancelled_after_the_timeout(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("runtime.mcp._client.ELICITATION_TIMEOUT_S", 0.5)  # of 600 s

    async def answer(rt: Any, event: Event) -> None:
        await trio.lowlevel.checkpoint()  # someone could answer, and never does

    events = await ask_bad_server(workspace, ("mcp__b__ask", {}), answer)
    (end,) = of(ToolFinished, events)
    assert (end.status, end.output) == ("ok", "cancel")
    (resolved,) = of(ElicitationResolved, events)
    assert (resolved.action, resolved.reason) == ("cancel", "no answer within 0.5 s")
