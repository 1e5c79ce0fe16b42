"""MCP tools in a run: names, results, permissions, agent-type globs, progress events,
cancellation of a subtree mid-call, secrets, Ray refusal, and nothing left behind."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from runtime import AgentType, ConfigError, Event, Limits, TraceTree, open_runtime
from runtime.core._events import ToolFinished, ToolProgress, ToolStarted
from tests.harness import EventLog, agent_call, run_scenario
from tests.mcp_fixtures import everything_server, http_url, stdio_server

__all__ = ["http_url"]  # a fixture


def calls(*items: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": n, "input": i} for n, i in items]}


def finished(events: list[Event]) -> dict[str, ToolFinished]:
    return {e.name: e for e in events if isinstance(e, ToolFinished)}


async def test_the_model_gets_mcp_tools_and_their_results_as_text(workspace: Path) -> None:
    scenario = {
        "agents": {
            "main": {
                "turns": [
                    calls(
                        ("mcp__t__echo", {"text": "hi"}),
                        ("mcp__t__picture", {}),
                        ("mcp__t__fail", {"message": "no such row"}),
                        ("mcp__t__echo", {"txt": "typo"}),
                    ),
                    {"text": "done"},
                ]
            }
        }
    }
    outcome, events = await run_scenario(scenario, workspace, mcp_servers={"t": stdio_server()})
    assert outcome.status == "completed"
    ends = [e for e in events if isinstance(e, ToolFinished)]
    assert [(e.name, e.status) for e in ends] == [
        ("mcp__t__echo", "ok"),
        ("mcp__t__picture", "ok"),
        ("mcp__t__fail", "error"),
        ("mcp__t__echo", "error"),
    ]
    assert ends[0].output == "hi"
    assert ends[1].output == "a red dot:\n[image/png, 1.6 kB]"
    assert "no such row" in ends[2].output
    assert ends[3].output.startswith("invalid input for mcp__t__echo: input")
    started = next(e for e in events if isinstance(e, ToolStarted))
    assert started.summary == 'mcp__t__echo: {"text":"hi"}'


async def test_a_50_mb_result_is_capped_like_every_tool_output(workspace: Path) -> None:
    scenario = {
        "agents": {"main": {"turns": [calls(("mcp__t__big", {"megabytes": 50})), {"text": "ok"}]}}
    }
    outcome, events = await run_scenario(
        scenario,
        workspace,
        mcp_servers={"t": stdio_server()},
        limits=Limits(max_tool_output_chars=10_000),
    )
    end = finished(events)["mcp__t__big"]
    assert end.status == "ok"
    assert len(end.output) < 11_000  # the cap, and the note saying what was cut
    assert "characters cut" in end.output
    assert outcome.status == "completed"


async def test_read_only_tools_need_no_permission_and_the_others_follow_rules_and_globs(
    workspace: Path,
) -> None:
    scenario = {
        "agents": {
            "main": {
                "turns": [
                    calls(("mcp__t__echo", {"text": "a"})),
                    calls(("mcp__t__progress", {"steps": 1})),
                    calls(("mcp__t__spawn", {})),
                    calls(("mcp__t__env", {"name": "X"})),
                    {"text": "done"},
                ]
            }
        }
    }
    _, events = await run_scenario(
        scenario,
        workspace,
        mcp_servers={"t": stdio_server()},
        permission_mode="deny",
        allow=["mcp__t__pro*"],
        deny=["mcp__t__e?v"],
    )
    status = {n: e.status for n, e in finished(events).items()}
    assert status == {
        "mcp__t__echo": "ok",  # read-only: no permission needed
        "mcp__t__progress": "ok",  # allowed by the glob rule
        "mcp__t__spawn": "denied",  # not read-only: mode deny
        "mcp__t__env": "denied",  # read-only, but a deny rule wins
    }


async def test_agent_types_pick_mcp_tools_by_name_or_glob(workspace: Path) -> None:
    scenario = {
        "agents": {
            "main": {
                "turns": [
                    {"tool_calls": [agent_call("use the server", agent="helper")]},
                    {"text": "ok"},
                ]
            },
            "helper": {
                "tools": ["read", "mcp__t__ec*"],
                "turns": [
                    calls(("mcp__t__echo", {"text": "x"}), ("mcp__t__env", {"name": "HOME"})),
                    {"text": "done"},
                ],
            },
        }
    }
    _, events = await run_scenario(scenario, workspace, mcp_servers={"t": stdio_server()})
    ends = finished(events)
    assert ends["mcp__t__echo"].status == "ok"
    assert ends["mcp__t__env"].status == "error"
    assert (
        ends["mcp__t__env"].output
        == "unknown tool 'mcp__t__env'; available tools: mcp__t__echo, read"
    )


async def test_progress_notifications_are_tool_progress_events_and_the_tree_keeps_the_latest(
    workspace: Path,
) -> None:
    scenario = {
        "agents": {"main": {"turns": [calls(("mcp__t__progress", {"steps": 3})), {"text": "ok"}]}}
    }
    _, events = await run_scenario(scenario, workspace, mcp_servers={"t": stdio_server()})
    progress = [e for e in events if isinstance(e, ToolProgress)]
    call_id = finished(events)["mcp__t__progress"].tool_use_id
    assert progress
    assert {e.tool_use_id for e in progress} == {call_id}
    assert progress[-1].total == 3
    assert progress[-1].message == f"step {int(progress[-1].progress)}"
    last = events.index(progress[-1])
    tree = TraceTree.from_events(events[: last + 1], live=True)
    assert tree.tools[call_id].progress == (progress[-1].progress, 3.0, progress[-1].message)
    assert TraceTree.from_events(events).tools[call_id].progress is None  # finished


async def test_cancelling_a_subtree_mid_call_ends_the_call_at_once_and_tells_the_server(
    workspace: Path, http_url: str
) -> None:
    scenario = {
        "agents": {
            "main": {
                "turns": [
                    {"tool_calls": [agent_call("wait for the server", agent="waiter")]},
                    calls(("mcp__h__cancellations", {}), ("mcp__h__echo", {"text": "still up"})),
                    {"text": "carried on"},
                ]
            },
            "waiter": {"turns": [calls(("mcp__h__block", {"label": "long"})), {"text": "never"}]},
        }
    }
    log = EventLog()
    async with open_runtime(
        scenario=scenario,
        workspace=workspace,
        trace=False,
        permission_mode="allow-all",
        on_event=log,
        mcp_servers={"h": {"type": "http", "url": http_url}},
    ) as rt:
        handle = await rt.start("go")
        await log.wait_for(lambda ev: any(isinstance(e, ToolProgress) for e in ev))
        agent_call_id = next(
            e.tool_use_id for e in log if isinstance(e, ToolStarted) and e.name == "agent"
        )
        t0 = trio.current_time()
        assert await rt.cancel(agent_call_id, "not needed")
        block_end = await log.wait_for(
            lambda ev: next(
                (e for e in ev if isinstance(e, ToolFinished) and e.name == "mcp__h__block"), None
            )
        )
        assert trio.current_time() - t0 < 1.0
        outcome = await handle.wait()
    assert block_end.status == "cancelled"
    assert outcome.status == "completed"
    ends = finished(log)
    assert ends["agent"].status == "cancelled"
    assert ends["mcp__h__cancellations"].output not in ("", "[]")
    assert ends["mcp__h__echo"].output == "still up"


async def test_header_values_and_expanded_vars_never_reach_the_trace(
    workspace: Path, tmp_path: Path, http_url: str
) -> None:
    token = "tok-7f3a9c21e5"
    scenario = {"agents": {"main": {"turns": [calls(("mcp__h__whoami", {})), {"text": "ok"}]}}}
    trace = tmp_path / "trace.jsonl"
    outcome, events = await run_scenario(
        scenario,
        workspace,
        trace=trace,
        env={**os.environ, "MCP_TEST_TOKEN": token},
        mcp_servers={
            "h": {
                "type": "http",
                "url": http_url,
                "headers": {"Authorization": "Bearer ${MCP_TEST_TOKEN}"},
            }
        },
    )
    assert outcome.status == "completed"
    assert (
        finished(events)["mcp__h__whoami"].output == "***"
    )  # the server saw it; the trace does not
    text = trace.read_text()
    assert token not in text
    assert "mcp_servers" in text


async def test_the_run_config_lists_the_servers_without_secrets(workspace: Path) -> None:
    scenario = {"agents": {"main": {"turns": [{"text": "ok"}]}}}
    _, events = await run_scenario(
        scenario,
        workspace,
        mcp_servers={"t": stdio_server(), "gone": {"command": "no-such-command-xyz"}},
    )
    config = events[0].config  # type: ignore[attr-defined]
    assert config["mcp_servers"] == {
        "t": {"transport": "stdio", "state": "ready", "tools": 11},
        "gone": {"transport": "stdio", "state": "failed", "tools": 0},
    }


async def test_an_agent_type_on_ray_listing_mcp_tools_is_refused_before_anything_starts(
    workspace: Path,
) -> None:
    ray_type = AgentType(name="remote", placement="ray", tools=("read", "mcp__git__*"))
    with pytest.raises(
        ConfigError,
        match=r"agent type 'remote' is placed on ray and lists MCP tools \('mcp__git__\*'\)",
    ):
        async with open_runtime(
            scenario={"agents": {"main": {"turns": [{"text": "x"}]}}},
            workspace=workspace,
            trace=False,
            agent_types=[ray_type],
            mcp_servers={"git": {"command": "no-such-command-xyz"}},
        ):
            pass


async def test_an_aborted_run_leaves_no_server_process(workspace: Path) -> None:
    scenario = {"agents": {"main": {"turns": [calls(("mcp__t__block", {})), {"text": "never"}]}}}
    log = EventLog()
    marker = f"marker-{os.getpid()}-{id(log)}"
    server = stdio_server(f"MARKER = {marker!r}")
    async with open_runtime(
        scenario=scenario,
        workspace=workspace,
        trace=False,
        permission_mode="allow-all",
        on_event=log,
        mcp_servers={"t": server},
    ) as rt:
        handle = await rt.start("go")
        await log.wait_for(lambda ev: any(isinstance(e, ToolProgress) for e in ev))
        assert _processes_with(marker)
        await rt.abort("Ctrl+C")
        outcome = await handle.wait()
    assert outcome.status == "cancelled"
    assert finished(log)["mcp__t__block"].status == "cancelled"
    assert _processes_with(marker) == []


def _processes_with(text: str) -> list[int]:
    out = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and text in " ".join(
                proc.info["cmdline"] or ()
            ):
                out.append(proc.pid)
        except psutil.Error:
            pass
    return out


async def test_the_anthropic_provider_offers_the_mcp_tools_and_the_model_uses_them(
    workspace: Path, nursery: trio.Nursery
) -> None:
    from tests.llm_server import (
        LLMServer,
        RecordedRequest,
        Reply,
        anthropic_end,
        anthropic_message_start,
        anthropic_text_stream,
        anthropic_tool_block,
    )
    from tests.mcp_fixtures import time_server

    def route(request: RecordedRequest) -> Reply:
        if any(
            isinstance(m["content"], list)
            and any(b.get("type") == "tool_result" for b in m["content"])
            for m in request.json["messages"]
        ):
            return Reply.stream(anthropic_text_stream(["It is ", "noon somewhere."]))
        return Reply.stream(
            [
                anthropic_message_start(),
                *anthropic_tool_block(
                    0, "toolu_1", "mcp__time__get_current_time", ['{"timezone"', ': "UTC"}']
                ),
                *anthropic_end("tool_use"),
            ]
        )

    server = LLMServer()
    await nursery.start(server.serve)
    server.route = route
    env = {
        "ANTHROPIC_API_KEY": "sk-test-0123456789",
        "ANTHROPIC_BASE_URL": server.url,
        "PATH": os.environ["PATH"],
    }
    events: list[Event] = []
    with trio.fail_after(60):
        async with open_runtime(
            "anthropic",
            model="test-model",
            env=env,
            workspace=workspace,
            trace=False,
            on_event=events.append,
            mcp_servers={"time": time_server()},
        ) as rt:
            outcome = await rt.run("What time is it?")
    assert (outcome.status, outcome.result) == ("completed", "It is noon somewhere.")
    offered = {t["name"]: t for t in server.requests[0].json["tools"]}
    assert offered["mcp__time__get_current_time"]["input_schema"]["type"] == "object"
    assert "timezone" in offered["mcp__time__get_current_time"]["input_schema"]["properties"]
    result = finished(events)["mcp__time__get_current_time"]
    assert result.status == "ok"
    assert '"timezone": "UTC"' in result.output
    assert '"timezone": "UTC"' in server.requests[1].body.decode().replace('\\"', '"')


async def test_server_everythings_tools_answer_and_report_progress(workspace: Path) -> None:
    scenario = {"agents": {"main": {"turns": [
        {"tool_calls": [{"name": "mcp__e__get-sum", "input": {"a": 2, "b": 3}}]},
        {"tool_calls": [{"name": "mcp__e__trigger-long-running-operation",
                         "input": {"duration": 1, "steps": 5}}]},
        {"text": "done"}]}}}  # fmt: skip
    with trio.fail_after(30):
        _, events = await run_scenario(
            scenario, workspace, mcp_servers={"e": everything_server()}, permission_mode="allow-all"
        )
    added, slow = [e for e in events if isinstance(e, ToolFinished)]
    assert (added.status, added.output) == ("ok", "The sum of 2 and 3 is 5.")
    assert slow.output == "Long running operation completed. Duration: 1 seconds, Steps: 5."
    progress = [e for e in events if isinstance(e, ToolProgress)]
    assert progress, "no tool_progress"
    assert {p.tool_use_id for p in progress} == {slow.tool_use_id}
    assert {p.total for p in progress} == {5}
    assert [p.progress for p in progress] == sorted(p.progress for p in progress)
