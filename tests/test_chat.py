"""``trio-agents chat`` without a terminal: one message per line of stdin, plain output.

Every test runs the real command in a subprocess with a pipe or a file on stdin (scriptable
use); the terminal behaviour is in ``test_chat_pty.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

from runtime import Event, decode_event
from runtime.cli._sessions import FORMAT_VERSION, SessionStore
from tests.invariants import check_invariants

SCENARIOS = Path(__file__).parent / "scenarios"


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "runtime", *args]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("NO_COLOR", None)
    env["COLUMNS"] = "120"
    return env


async def chat(
    tmp_path: Path, *args: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(20):
        return await trio.run_process(
            cli("chat", *args),
            cwd=tmp_path,
            env=child_env(),
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


def read_trace(path: Path) -> list[Event]:
    return [decode_event(line) for line in path.read_bytes().splitlines() if line.strip()]


def session_file(tmp_path: Path) -> dict[str, Any]:
    [path] = (tmp_path / ".trio-agents" / "sessions").glob("*.json")
    result: dict[str, Any] = orjson.loads(path.read_bytes())
    return result


async def test_each_line_is_a_message_and_the_history_carries_over(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    proc = await chat(
        tmp_path,
        "--scenario",
        str(SCENARIOS / "chat_conversation.json"),
        "--trace",
        str(trace),
        stdin=b"hi\n\nplease review\nthanks",  # an empty line is skipped; no final newline
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    # The scripted model answers by how many answers the history already holds: the right
    # answers, in order, mean each turn saw the whole conversation.
    answers = ["Hello! What shall we look at?", "Both parts came back: all good.", "Bye!"]
    positions = [out.index(a) for a in answers]
    assert positions == sorted(positions)
    assert out.count("turn completed in") == 3
    assert "\N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} please review" in out
    events = read_trace(trace)
    check_invariants(events)  # one run, one trace, for the whole chat
    roots = [e for e in events if e.type == "agent_started" and e.parent_tool_use_id is None]
    assert [e.prompt for e in roots] == ["hi", "please review", "thanks"]  # type: ignore[attr-defined]
    saved = session_file(tmp_path)
    assert saved["format_version"] == FORMAT_VERSION
    assert saved["turns"] == 3
    assert saved["first_prompt"] == "hi"
    assert [m["role"] for m in saved["messages"]] == ["user", "assistant"] * 2 + [
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert saved["messages"][-1]["content"] == [{"kind": "text", "text": "You are welcome. Bye!"}]
    assert saved["trace_path"] == str(trace)
    assert saved["agent_types"] == ["counter", "general", "lister", "main"]
    assert saved["usage"]["input_tokens"] > 0
    assert f"Resume it: trio-agents chat --resume {saved['id']}" in out


async def test_slash_commands_answer_without_a_turn(tmp_path: Path) -> None:
    commands = (
        b"/tree\n/help\n/agents\n/trace\n/frobnicate\n/cancel\n/cancel agent-9\n/exit\nnot read\n"
    )
    proc = await chat(
        tmp_path, "--scenario", str(SCENARIOS / "chat_resume.json"), "--no-trace", stdin=commands
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    assert "No turn yet" in out
    for command in ("/help", "/tree", "/cancel ID", "/agents", "/trace", "/save", "/clear"):
        assert f"  {command} " in out
    assert "  main: The root agent." in out
    assert "No trace file for this run (--no-trace)." in out
    assert "Unknown command /frobnicate: type /help for the list" in out
    assert "Usage: /cancel ID" in out
    assert "Nothing running has the id agent-9." in out
    assert "First answer." not in out  # /exit came before the message
    assert not (tmp_path / ".trio-agents" / "sessions").exists()  # nothing said, nothing saved


async def test_a_double_slash_sends_a_message_that_starts_with_a_slash(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    proc = await chat(
        tmp_path,
        "--scenario",
        str(SCENARIOS / "chat_resume.json"),
        "--trace",
        str(trace),
        stdin=b"//etc/hosts is fine\n",
    )
    assert proc.returncode == 0, proc.stderr
    [root] = [e for e in read_trace(trace) if e.type == "agent_started"]
    assert root.prompt == "/etc/hosts is fine"  # type: ignore[attr-defined]


async def test_clear_starts_a_fresh_conversation_in_a_new_session(tmp_path: Path) -> None:
    proc = await chat(
        tmp_path,
        "--scenario",
        str(SCENARIOS / "chat_resume.json"),
        "--no-trace",
        stdin=b"one\n/clear\ntwo\n",
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    # A fresh history: the script starts over.
    assert out.count("First answer.") == 2
    assert "Second answer" not in out
    rows = SessionStore(tmp_path / ".trio-agents" / "sessions").list_sessions()
    assert sorted((r.turns, r.first_prompt) for r in rows) == [(1, "one"), (1, "two")]
    assert "The previous one stays: trio-agents chat --resume" in out


async def test_a_failed_turn_is_told_to_the_model_and_the_exit_code_is_1(tmp_path: Path) -> None:
    proc = await chat(
        tmp_path,
        "--scenario",
        str(SCENARIOS / "failing.json"),
        "--no-trace",
        stdin=b"try\n",
    )
    assert proc.returncode == 1, proc.stderr
    assert "turn failed" in proc.stdout.decode()
    saved = session_file(tmp_path)
    assert saved["state"]["last_status"] == "failed"
    last = saved["messages"][-1]
    assert last["role"] == "user"
    assert last["content"][-1]["text"].startswith("(The previous request ended (failed)")
    assert "the model fell over" in last["content"][-1]["text"]


async def test_resume_continues_with_the_whole_history_and_list_shows_it(tmp_path: Path) -> None:
    scenario = str(SCENARIOS / "chat_resume.json")
    first = await chat(tmp_path, "--scenario", scenario, "--no-trace", stdin=b"one\n")
    assert first.returncode == 0, first.stderr
    session_id = session_file(tmp_path)["id"]
    again = await chat(tmp_path, "--scenario", scenario, "--no-trace", "--resume", stdin=b"two\n")
    assert again.returncode == 0, again.stderr
    out = again.stdout.decode()
    assert f"Resumed session {session_id}: 1 turn since" in out
    assert "agent: First answer." in out
    assert "Second answer, after the first." in out
    saved = session_file(tmp_path)
    assert saved["turns"] == 2
    texts = [m["content"][0]["text"] for m in saved["messages"]]
    assert texts == ["one", "First answer.", "two", "Second answer, after the first."]
    listed = await chat(tmp_path, "--list")
    assert listed.returncode == 0
    [row, hint] = listed.stdout.decode().splitlines()
    assert row.startswith(f"{session_id}  ")
    assert row.endswith("2 turns  one")
    assert hint.startswith("Resume one:")
    by_id = await chat(
        tmp_path, "--scenario", scenario, "--no-trace", "--resume", session_id, stdin=b"three\n"
    )
    assert "Third answer." in by_id.stdout.decode()


@pytest.mark.parametrize(
    ("content", "fault"),
    [
        (b'{"format_version": 1, "id": "x", "created_ts": 1', "not JSON"),
        (
            b'{"format_version": 99, "id": "x", "created_ts": 1, "updated_ts": 1}',
            "written by a newer trio-agents (session format 99",
        ),
    ],
)
async def test_a_broken_or_newer_session_is_one_error_line_and_untouched(
    tmp_path: Path, content: bytes, fault: str
) -> None:
    sessions = tmp_path / ".trio-agents" / "sessions"
    sessions.mkdir(parents=True)
    path = sessions / "20260101-000000-abcdef.json"
    path.write_bytes(content)
    for args in (("--resume",), ("--resume", path.stem)):
        proc = await chat(tmp_path, "--scenario", str(SCENARIOS / "chat_resume.json"), *args)
        assert proc.returncode == 2
        [line] = proc.stderr.decode().splitlines()
        assert line.startswith(f"trio-agents: error: session {path.relative_to(tmp_path)}")
        assert fault in line
        assert proc.stdout == b""
    assert path.read_bytes() == content
    assert not (tmp_path / ".trio-agents" / "traces").exists()  # refused before anything ran
    listed = await chat(tmp_path, "--list")
    assert listed.returncode == 0
    assert f"{path.stem}  " in listed.stdout.decode()
    assert "(unreadable: " in listed.stdout.decode()


async def test_session_usage_errors(tmp_path: Path) -> None:
    none = await chat(tmp_path, "--list", "--sessions-dir", "elsewhere")
    assert none.returncode == 0
    assert none.stdout.decode() == "No sessions in elsewhere.\n"
    made = await chat(
        tmp_path,
        "--scenario",
        str(SCENARIOS / "chat_resume.json"),
        "--no-trace",
        "--sessions-dir",
        "elsewhere",
        stdin=b"one\n",
    )
    assert made.returncode == 0, made.stderr
    listed = await chat(tmp_path, "--list", "--json", "--sessions-dir", "elsewhere")
    [row] = [orjson.loads(line) for line in listed.stdout.splitlines()]
    assert (row["turns"], row["first_prompt"], row["error"]) == (1, "one", None)
    assert row["path"].startswith("elsewhere/")
    for args, fault in (
        (("--resume",), "no session to resume in .trio-agents/sessions"),
        (("--resume", "nope"), "no session 'nope' in .trio-agents/sessions"),
        (("--resume", "../x"), "'../x' is not a session id"),
        (("--list", "--resume"), "not allowed with argument"),
    ):
        proc = await chat(tmp_path, "--scenario", str(SCENARIOS / "chat_resume.json"), *args)
        assert proc.returncode == 2, args
        [line] = proc.stderr.decode().splitlines()
        assert fault in line


async def test_json_keeps_stdout_for_events(tmp_path: Path) -> None:
    proc = await chat(
        tmp_path,
        "--scenario",
        str(SCENARIOS / "chat_resume.json"),
        "--json",
        "--no-trace",
        stdin=b"one\n/help\ntwo\n",
    )
    assert proc.returncode == 0, proc.stderr
    events = [decode_event(line) for line in proc.stdout.splitlines()]
    check_invariants(events)
    assert [e.type for e in events].count("agent_started") == 2
    assert "/cancel ID" in proc.stderr.decode()
    assert "Resume it:" in proc.stderr.decode()


async def test_sigint_without_a_terminal_ends_the_chat_with_130(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    proc = await trio.lowlevel.open_process(
        cli(
            "chat",
            "--scenario",
            str(SCENARIOS / "chat_typing.json"),
            "--permission-mode",
            "allow-all",
            "--trace",
            str(trace),
        ),
        cwd=tmp_path,
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    seen = b""
    try:
        with trio.fail_after(20):
            await proc.stdin.send_all(b"look around\n")  # stdin stays open: more could come
            while b"tool started: bash: sleep 30" not in seen:
                data = await proc.stdout.receive_some(65536)
                assert data, seen
                seen += data
            proc.send_signal(signal.SIGINT)
            code = await proc.wait()
            err = await proc.stderr.receive_some(65536)
    finally:
        if proc.returncode is None:
            proc.kill()
    assert code == 130, err
    assert b"the chat was aborted" in err
    events = read_trace(trace)
    check_invariants(events)
    assert events[-1].status == "cancelled"  # type: ignore[attr-defined]
    saved = session_file(tmp_path)
    assert saved["state"]["last_status"] == "cancelled"  # saved even so


async def test_resume_keeps_the_sessions_provider_and_scenario(tmp_path: Path) -> None:
    """Issue 21, item 7: `chat --resume` alone continues a scripted session as it ran, and says
    what to pass when its scenario is gone."""
    scenario = tmp_path / "s.json"
    scenario.write_bytes((SCENARIOS / "chat_resume.json").read_bytes())
    env = {k: v for k, v in child_env().items() if not k.startswith("OPENAI_")}
    first = await chat(tmp_path, "--scenario", str(scenario), "--no-trace", stdin=b"one\n")
    assert first.returncode == 0, first.stderr
    with trio.fail_after(20):
        again = await trio.run_process(
            cli("chat", "--no-trace", "--resume"), cwd=tmp_path, env=env, stdin=b"two\n",
            capture_stdout=True, capture_stderr=True, check=False,
        )
    assert again.returncode == 0, again.stderr
    assert b"Second answer, after the first." in again.stdout
    assert b"OPENAI_API_KEY" not in again.stderr
    scenario.unlink()
    gone = await chat(tmp_path, "--no-trace", "--resume", stdin=b"three\n")
    assert gone.returncode == 2
    [line] = gone.stderr.decode().splitlines()
    assert "ran on the scripted provider" in line
    assert "pass --scenario FILE" in line


_BASH = "sleep 0.2; echo {tag} >> side.txt"
CUT_CHAT: dict[str, Any] = {"agents": {"main": {"turns": [
    {"text": "First answer."},
    {"tool_calls": [{"name": "bash", "input": {"command": _BASH.format(tag="x1")}}]},
    # The model takes a while: the crash comes while it thinks, the first command done.
    {"delay_s": 1.0, "tool_calls": [{"name": "bash", "input": {"command": _BASH.format(tag="x2")}}]},
    {"text": "Second answer."},
    {"text": "Third answer."},
]}}}


def _ends_with_a_tool_call(trace: Path) -> bool:
    lines = trace.read_bytes().splitlines() if trace.exists() else []
    return bool(lines) and b'"tool_finished"' in lines[-1]


async def test_a_chat_killed_mid_turn_goes_on_with_that_turn(tmp_path: Path) -> None:
    """SIGKILL while the second message's turn runs (its first command done, its second not
    begun): ``chat --resume`` goes on with that turn, keeps what it had done (the first
    command is not run again, its turn not asked again), ends it, then takes the next
    message; the session and the trace hold the whole conversation as one run."""
    (tmp_path / "s.json").write_text(orjson.dumps(CUT_CHAT).decode())
    trace = tmp_path / "t.jsonl"
    args = ("--scenario", "s.json", "--permission-mode", "allow-all")
    proc = await trio.lowlevel.open_process(
        cli("chat", *args, "--trace", str(trace)), cwd=tmp_path, env=child_env(),
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None
    try:
        with trio.fail_after(20):
            await proc.stdin.send_all(b"one\ntwo\n")  # stdin stays open: the chat waits
            # Another process writes the file: polled.
            while not _ends_with_a_tool_call(trace):  # noqa: ASYNC110
                await trio.sleep(0.01)
            proc.kill()
            await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
    assert session_file(tmp_path)["turns"] == 1  # saved after "one" only
    again = await chat(tmp_path, *args, "--resume", stdin=b"three\n")
    assert again.returncode == 0, again.stderr
    out = again.stdout.decode()
    assert "Going on with the turn the crash cut: two" in out
    assert out.index("Second answer.") < out.index("Third answer.")
    assert (tmp_path / "side.txt").read_text().split() == ["x1", "x2"]  # each command once
    saved = session_file(tmp_path)
    assert saved["turns"] == 3
    texts = [b.get("text") for m in saved["messages"] for b in m["content"] if b.get("text")]
    assert texts == ["one", "First answer.", "two", "Second answer.", "three", "Third answer."]
    assert len(saved["state"]["run_ids"]) == 1  # the killed run went on
    events = read_trace(trace)
    check_invariants(events)
    kinds = [e.type for e in events]
    assert (kinds.count("run_started"), kinds.count("run_resumed"), kinds[-1]) == (
        1, 1, "run_finished")
    roots = [e for e in events if e.type == "agent_finished" and e.parent_tool_use_id is None]
    assert [r.result for r in roots] == [  # type: ignore[attr-defined]
        "First answer.", "Second answer.", "Third answer."]
    asked = [e for e in events if e.type == "turn_finished" and e.agent_id == roots[1].agent_id]
    assert len(asked) == 3  # two calls and the answer, none asked twice
