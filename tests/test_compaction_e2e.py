"""Compaction in whole runs: a sub-agent and the main agent each compact while siblings run
(scripted), the reactive path against the loopback HTTP server with each service's real "too
long" error, the summary's tokens in usage and budget, and a chat compacted, saved, resumed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

from runtime import Event, decode_event, open_runtime
from runtime.core._budget import BudgetLayer
from runtime.core._compaction import SUMMARY_HEADER, SUMMARY_SYSTEM, history_problems
from runtime.core._events import AgentFinished, AgentStarted, ContextCompacted, TurnFinished
from runtime.core._limits import Budget
from runtime.core._messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from runtime.trace._stats import run_stats
from runtime.trace._tree import TraceTree
from tests.invariants import by_type, check_invariants
from tests.llm_server import (
    LLMServer,
    Piece,
    Reply,
    anthropic_text_stream,
    openai_text_stream,
)

NARRATIVE = "I looked at these lines and noted what they say about the parser. " * 15


def read(offset: int = 1) -> dict[str, Any]:
    return {"name": "read", "input": {"path": "big.txt", "offset": offset, "limit": 40}}


def agent(kind: str, description: str) -> dict[str, Any]:
    return {
        "name": "agent",
        "input": {"description": description, "prompt": f"please {description}", "agent": kind},
    }


SCENARIO: dict[str, Any] = {
    "agents": {
        "main": {
            "context_window": 6000,
            "turns": [
                {"text": NARRATIVE, "tool_calls": [read()], "usage": {"input_tokens": 1000}},
                {"text": NARRATIVE, "tool_calls": [read(41)], "usage": {"input_tokens": 2500}},
                {
                    "text": "Three helpers now.",
                    "tool_calls": [
                        agent("reader", "read it all"),
                        agent("sleeper", "wait a"),
                        agent("sleeper", "wait b"),
                    ],
                    "usage": {"input_tokens": 4700},
                },
                {"text": "All three are back.", "usage": {"input_tokens": 1500}},
            ],
        },
        "reader": {
            "context_window": 3000,
            "tools": ["read"],
            "turns": [
                {"text": NARRATIVE, "tool_calls": [read()], "usage": {"input_tokens": 600}},
                {"text": NARRATIVE, "tool_calls": [read(41)], "usage": {"input_tokens": 1300}},
                {"text": NARRATIVE, "tool_calls": [read(81)], "usage": {"input_tokens": 2000}},
                {"text": "Read it all.", "usage": {"input_tokens": 900}},
            ],
        },
        "sleeper": {"tools": [], "turns": [{"text": "waited", "delay_s": 1.0}]},
        "watcher": {"tools": [], "turns": [{"text": "watched", "delay_s": 2.5}]},
        "compact": {
            "turns": [
                {
                    "text": "Read big.txt so far; nothing odd.",
                    "usage": {"input_tokens": 700, "output_tokens": 30},
                },
                {
                    "text": "Read most of big.txt.",
                    "usage": {"input_tokens": 800, "output_tokens": 20},
                },
            ]
        },
    }
}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big.txt").write_text("".join(f"line {i}: " + "abc " * 8 + "\n" for i in range(300)))
    return ws


async def test_a_sub_agent_and_the_main_agent_compact_while_siblings_run(
    workspace: Path, tmp_path: Path
) -> None:
    events: list[Event] = []
    trace = tmp_path / "run.jsonl"
    with trio.fail_after(30):
        async with open_runtime(
            scenario=SCENARIO, workspace=workspace, trace=trace, on_event=events.append
        ) as rt:
            # Another root agent runs beside the main one the whole time: the main agent's
            # compaction happens while it runs too.
            watcher = await rt.start("keep watch", agent_type="watcher")
            outcome = await rt.run("look at big.txt")
            assert (await watcher.wait()).status == "completed"
    check_invariants(events)
    assert (outcome.status, outcome.result) == ("completed", "All three are back.")
    assert history_problems(outcome.state.messages) == []

    started = {e.agent_id: e for e in by_type(events, AgentStarted)}
    name = {a: e.name for a, e in started.items()}  # type: ignore[attr-defined]
    compactions = by_type(events, ContextCompacted)
    by_agent: dict[str, list[str]] = {}
    for e in compactions:
        by_agent.setdefault(name[e.agent_id], []).append(e.method)  # type: ignore[attr-defined]
        assert e.parent_tool_use_id == started[e.agent_id].parent_tool_use_id
    assert "summary" in by_agent["reader"]
    assert "summary" in by_agent["main"]
    assert "sleeper" not in by_agent
    # The reader compacted while both its siblings were running.
    sleepers = [a for a, n in name.items() if n == "sleeper"]
    [watcher_id] = [a for a, n in name.items() if n == "watcher"]
    finished = {e.agent_id: e.seq for e in by_type(events, AgentFinished)}
    for e in compactions:
        if name[e.agent_id] == "reader":
            assert all(started[s].seq < e.seq < finished[s] for s in sleepers)
        assert started[watcher_id].seq < e.seq < finished[watcher_id]

    # A summary's tokens are the agent's: in agent_finished, as in its turns plus summaries.
    for agent_id, end in ((e.agent_id, e) for e in by_type(events, AgentFinished)):
        turns = [t for t in by_type(events, TurnFinished) if t.agent_id == agent_id]
        summaries = [c for c in compactions if c.agent_id == agent_id]
        assert end.input_tokens == sum(t.input_tokens for t in turns) + sum(  # type: ignore[attr-defined]
            c.input_tokens
            for c in summaries  # type: ignore[attr-defined]
        )
    # Turns report the agent's context and window.
    reader_turns = [t for t in by_type(events, TurnFinished) if name[t.agent_id] == "reader"]
    assert {t.context_window for t in reader_turns} == {3000}  # type: ignore[attr-defined]
    assert all(t.context_tokens for t in reader_turns)  # type: ignore[attr-defined]

    # The tree, live and from the file, is intact and shows the compactions on their nodes.
    from_file = [decode_event(line) for line in trace.read_bytes().splitlines()]
    for tree in (TraceTree.from_events(events), TraceTree.from_events(from_file)):
        watcher_node, root = tree.roots
        assert (root.name, watcher_node.name) == ("main", "watcher")
        assert (root.status, watcher_node.status) == ("completed", "completed")
        assert root.compactions == len(by_agent["main"])
        readers = [a for a in tree.agents.values() if a.name == "reader"]
        assert [a.compactions for a in readers] == [len(by_agent["reader"])]
        assert all(a.status == "completed" for a in tree.agents.values())
        assert (root.input_tokens, root.output_tokens) == (
            outcome.input_tokens,
            outcome.output_tokens,
        )
        stats = run_stats(tree)["compactions"]
        assert stats["count"] == len(compactions)
        assert stats["summary"] == sum(m == "summary" for ms in by_agent.values() for m in ms)
        assert stats["input_tokens"] == sum(c.input_tokens for c in compactions)  # type: ignore[attr-defined]


def test_trace_show_and_stats_print_the_compactions(workspace: Path, tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"

    async def main() -> None:
        async with open_runtime(scenario=SCENARIO, workspace=workspace, trace=trace) as rt:
            await rt.run("look at big.txt")

    trio.run(main)
    show = subprocess.run(
        [sys.executable, "-m", "runtime", "trace", "show", str(trace)],
        capture_output=True,
        text=True,
        check=True,
        env={"COLUMNS": "200", "NO_COLOR": "1"},
    ).stdout
    assert re.search(r"main agent-1 .*  ⟲ \d+ compactions?  All three are back\.", show)
    assert re.search(r"reader agent-\d .*  ⟲ \d+ compactions?  Read it all\.", show)
    stats = subprocess.run(
        [sys.executable, "-m", "runtime", "trace", "stats", str(trace)],
        capture_output=True,
        text=True,
        check=True,
        env={"COLUMNS": "200", "NO_COLOR": "1"},
    ).stdout
    assert "context compactions: " in stats
    assert "summaries cost" in stats


def test_the_budget_counts_a_summarys_tokens() -> None:
    cancels: list[tuple[str, str]] = []

    async def cancel(agent_id: str, reason: str) -> bool:
        cancels.append((agent_id, reason))
        return True

    layer = BudgetLayer(cancel)
    layer.set_budget("a", Budget(tokens=1000))
    common = {"seq": 1, "ts": 0.0, "run_id": "r", "parent_tool_use_id": None}
    layer(
        AgentStarted(agent_id="a", name="main", parent_agent_id=None, depth=0, prompt="p", **common)
    )
    layer(
        TurnFinished(
            agent_id="a",
            turn=1,
            stop_reason="end_turn",
            input_tokens=600,
            output_tokens=100,
            **common,
        )
    )
    assert layer.usage("a") == (700, 0)
    layer(
        ContextCompacted(
            agent_id="a",
            method="summary",
            tokens_before=9,
            tokens_after=2,
            messages_before=9,
            messages_after=2,
            input_tokens=500,
            output_tokens=50,
            **common,
        )
    )
    assert layer.usage("a") == (1250, 0)


# -- reactive: the provider says the prompt is too long -------------------------------------


@pytest.fixture
async def server(nursery: trio.Nursery) -> LLMServer:
    server = LLMServer()
    await nursery.start(server.serve)
    return server


def openai_too_long(limit: int, tokens: int) -> Reply:
    body = {
        "error": {
            "message": f"This model's maximum context length is {limit} tokens. However, your "
            f"messages resulted in {tokens} tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    return Reply(status=400, pieces=[Piece(orjson.dumps(body))], content_type="application/json")


def anthropic_too_long(limit: int, tokens: int) -> Reply:
    body = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": f"prompt is too long: {tokens} tokens > {limit} maximum",
        },
    }
    return Reply(status=400, pieces=[Piece(orjson.dumps(body))], content_type="application/json")


def long_history(turns: int = 8) -> list[Message]:
    history = [Message(role="user", content=(TextBlock(text="Fix the parser in parse.py."),))]
    for i in range(turns):
        history.append(
            Message(
                role="assistant",
                content=(
                    TextBlock(text=f"Step {i}: " + "reasoning about the grammar " * 40),
                    ToolUseBlock(id=f"call_{i}", name="bash", input={"command": f"cat part{i}"}),
                ),
            )
        )
        history.append(
            Message(
                role="user",
                content=(ToolResultBlock(tool_use_id=f"call_{i}", content=f"{i}: " + "x" * 2000),),
            )
        )
    history.append(Message(role="assistant", content=(TextBlock(text="Fixed, I think."),)))
    return history


def env_for(server: LLMServer) -> dict[str, str]:
    return {
        "OPENAI_API_KEY": "sk-test-0123456789",
        "OPENAI_BASE_URL": server.url + "/v1",
        "ANTHROPIC_API_KEY": "sk-test-0123456789",
        "ANTHROPIC_BASE_URL": server.url,
        "PATH": "/usr/bin:/bin",
    }


def system_of(provider: str, body: dict[str, Any]) -> str:
    if provider == "anthropic":
        system = body.get("system", "")
        return system if isinstance(system, str) else " ".join(b["text"] for b in system)
    return str(body["messages"][0]["content"])


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_too_long_prompt_is_compacted_and_tried_once_more(
    provider: str, server: LLMServer, tmp_path: Path
) -> None:
    too_long = openai_too_long if provider == "openai" else anthropic_too_long
    stream = openai_text_stream if provider == "openai" else anthropic_text_stream
    server.push(
        too_long(8192, 9500),
        Reply.stream(
            stream(["Earlier: the grammar was fixed ", "step by step."], usage=(3000, 40))
        ),
        Reply.stream(stream(["Tests pass now."], usage=(2500, 5))),
    )
    events: list[Event] = []
    with trio.fail_after(20):
        async with open_runtime(
            provider,
            model="test-model",
            env=env_for(server),
            workspace=tmp_path,
            trace=False,
            on_event=events.append,
        ) as rt:
            outcome = await rt.run("Run the tests.", history=long_history())
    check_invariants(events)
    assert (outcome.status, outcome.result) == ("completed", "Tests pass now.")
    methods = [e.method for e in by_type(events, ContextCompacted)]  # type: ignore[attr-defined]
    assert methods[-1] == "summary"
    first, summary_request, retry = server.requests
    # The summary was asked of the same model, with the summarising prompt and no tools.
    assert summary_request.json["model"] == "test-model"
    assert system_of(provider, summary_request.json).startswith(SUMMARY_SYSTEM[:60])
    assert not summary_request.json.get("tools")
    # The retry carries the task, the summary and the last turns, in fewer bytes.
    assert len(retry.body) < len(first.body) // 2
    text = retry.body.decode()
    assert "Fix the parser in parse.py." in text
    assert "Earlier: the grammar was fixed step by step." in text
    assert SUMMARY_HEADER in text
    assert "Run the tests." in text
    # The window the provider named is the one the agent reports from then on.
    [turn] = by_type(events, TurnFinished)
    assert turn.context_window == 8192  # type: ignore[attr-defined]
    # The summary's tokens are the agent's.
    assert outcome.input_tokens == 3000 + 2500
    assert history_problems(outcome.state.messages) == []


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_prompt_still_too_long_after_compacting_fails_in_plain_words(
    provider: str, server: LLMServer, tmp_path: Path
) -> None:
    too_long = openai_too_long if provider == "openai" else anthropic_too_long
    stream = openai_text_stream if provider == "openai" else anthropic_text_stream
    server.push(
        too_long(8192, 9500),
        Reply.stream(stream(["A summary."], usage=(3000, 4))),
        too_long(8192, 8400),
    )
    events: list[Event] = []
    with trio.fail_after(20):
        async with open_runtime(
            provider,
            model="test-model",
            env=env_for(server),
            workspace=tmp_path,
            trace=False,
            on_event=events.append,
        ) as rt:
            outcome = await rt.run("Run the tests.", history=long_history())
    check_invariants(events)
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert outcome.error.startswith(
        "the conversation does not fit the model's context window: about 8,400 tokens for a "
        "window of 8,192, and compacting it did not make enough room (the provider said: "
    )
    assert len(server.requests) == 3, "compacted and tried once more, not again"
    [end] = by_type(events, AgentFinished)
    assert end.error == outcome.error  # type: ignore[attr-defined]


async def test_a_history_with_nothing_to_compact_fails_at_the_first_refusal(
    server: LLMServer, tmp_path: Path
) -> None:
    server.push(openai_too_long(4096, 30000))
    with trio.fail_after(20):
        async with open_runtime(
            "openai", model="test-model", env=env_for(server), workspace=tmp_path, trace=False
        ) as rt:
            outcome = await rt.run("x" * 120_000)
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "about 30,000 tokens for a window of 4,096" in outcome.error
    assert len(server.requests) == 1


# -- chat: /context, /compact, saved compacted, resumed -----------------------------------

CHAT_SCENARIO = {
    "agents": {
        "main": {
            "turns": [
                {"text": "Hello! " + "Here is a long answer about the parser. " * 30},
                {"text": "Second answer: " + "more detail on the grammar. " * 30},
                {"text": "Third answer, after the summary."},
            ]
        },
        "compact": {
            "turns": [
                {
                    "text": "The user greeted; the parser was discussed.",
                    "usage": {"input_tokens": 400, "output_tokens": 12},
                }
            ]
        },
    }
}


async def run_chat(tmp_path: Path, *args: str, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(30):
        return await trio.run_process(
            [sys.executable, "-m", "runtime", "chat", *args],
            cwd=tmp_path,
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={"PATH": "/usr/bin:/bin", "COLUMNS": "120"},
        )


async def test_a_chat_is_compacted_saved_and_resumed(tmp_path: Path) -> None:
    scenario = tmp_path / "chat.json"
    scenario.write_bytes(orjson.dumps(CHAT_SCENARIO))
    trace = tmp_path / "chat.jsonl"
    lines = b"hello\n/context\nmore please\n/compact keep the parser details\n/context\n"
    proc = await run_chat(tmp_path, "--scenario", str(scenario), "--trace", str(trace), stdin=lines)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    assert "Context: about " in out
    assert "The agent compacts at 80%" in out
    assert "context compacted (summary)" in out
    assert "Compacted: about " in out
    assert "It has been compacted 1 time." in out
    events = [decode_event(line) for line in trace.read_bytes().splitlines()]
    check_invariants(events)
    [compacted] = by_type(events, ContextCompacted)
    assert compacted.method == "summary"  # type: ignore[attr-defined]
    roots = by_type(events, AgentStarted)
    assert [e.prompt for e in roots] == ["hello", "more please", "/compact keep the parser details"]  # type: ignore[attr-defined]
    # The summary request was asked to focus as told.
    [path] = (tmp_path / ".trio-agents" / "sessions").glob("*.json")
    saved = orjson.loads(path.read_bytes())
    assert saved["state"]["compactions"] == 1
    first = saved["messages"][0]["content"]
    assert first[0]["text"] == "hello"
    assert first[1]["text"].startswith(SUMMARY_HEADER)
    assert first[1]["text"].endswith("The user greeted; the parser was discussed.")
    assert len(saved["messages"]) == 2
    assert saved["usage"]["input_tokens"] >= 400  # the summary's tokens are the session's

    again = await run_chat(
        tmp_path, "--scenario", str(scenario), "--no-trace", "--resume", stdin=b"and now?\n"
    )
    assert again.returncode == 0, again.stderr
    assert "Third answer, after the summary." in again.stdout.decode()
    resumed = orjson.loads(path.read_bytes())
    assert resumed["turns"] == 3
    assert resumed["messages"][0] == saved["messages"][0]
    assert resumed["messages"][-1]["content"][0]["text"] == "Third answer, after the summary."


# -- chat on a real terminal ----------------------------------------------------------------

SLOW_COMPACT = {
    "agents": {
        "main": CHAT_SCENARIO["agents"]["main"],
        "compact": {"turns": [{"text": "A summary that comes too late.", "delay_s": 30}]},
    }
}


def spawn_chat(tmp_path: Path, scenario: dict[str, Any]) -> Any:
    import pexpect

    path = tmp_path / "chat.json"
    path.write_bytes(orjson.dumps(scenario))
    env = {"PATH": "/usr/bin:/bin", "TERM": "xterm-256color", "HOME": str(tmp_path)}
    return pexpect.spawn(
        sys.executable, ["-m", "runtime", "chat", "--scenario", str(path)], cwd=str(tmp_path),
        env=env, dimensions=(50, 160), encoding="utf-8", codec_errors="replace", timeout=20,
    )  # fmt: skip


def test_compact_on_a_terminal_and_ctrl_c_cancels_it_keeping_the_conversation(
    tmp_path: Path,
) -> None:
    import pexpect

    child = spawn_chat(tmp_path, SLOW_COMPACT)
    try:
        child.expect_exact("/help for commands")
        for line in ("hello", "more please"):
            child.sendline(line)
            child.expect_exact("completed in ")
        child.sendline("/context")
        child.expect(r"Context: about [\d.k]+ of 128\.0k tokens \(\d+%\), 4 messages")
        child.sendline("/compact")
        child.expect_exact("Compacting the conversation")
        child.sendcontrol("c")
        child.expect_exact("Compaction cancelled; the conversation is as it was.")
        child.sendline("/context")
        child.expect(r"Context: about [\d.k]+ of 128\.0k tokens \(\d+%\), 4 messages")
        child.sendcontrol("d")
        child.expect(pexpect.EOF)
    finally:
        if child.isalive():
            child.kill(9)
        child.close(force=True)
    [path] = (tmp_path / ".trio-agents" / "sessions").glob("*.json")
    saved = orjson.loads(path.read_bytes())
    assert len(saved["messages"]) == 4
    assert saved["state"]["compactions"] == 0


async def test_a_too_long_error_inside_the_stream_is_compacted_too(
    server: LLMServer, tmp_path: Path
) -> None:
    # vLLM and OpenRouter send some errors as an event of a 200 stream.
    from tests.llm_server import sse

    in_stream = {
        "error": {
            "object": "error",
            "message": "This model's maximum context length is 8192 tokens. However, you "
            "requested 9100 tokens (5000 in the messages, 4100 in the completion).",
            "type": "BadRequestError",
            "code": 400,
        }
    }
    server.push(
        Reply.stream([sse(in_stream)]),
        Reply.stream(openai_text_stream(["A summary."], usage=(3000, 4))),
        Reply.stream(openai_text_stream(["Done."], usage=(2000, 2))),
    )
    with trio.fail_after(20):
        async with open_runtime(
            "openai", model="test-model", env=env_for(server), workspace=tmp_path, trace=False
        ) as rt:
            outcome = await rt.run("Run the tests.", history=long_history())
    assert (outcome.status, outcome.result) == ("completed", "Done.")
    assert len(server.requests) == 3
