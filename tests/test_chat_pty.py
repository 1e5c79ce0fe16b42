"""``trio-agents chat`` on a real terminal: turns with the live tree, typing while the agent
works, the Ctrl+C picker, Ctrl+C and Ctrl+D at the prompt, sessions saved and resumed.

As in ``test_cli_pty.py``: the real command in a pseudo-terminal (pexpect), real keys (Ctrl+C
is the terminal's interrupt character, so the kernel sends a real SIGINT), and every wait is an
``expect`` on the screen with a timeout.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pexpect
import pytest

from runtime import Event, decode_event
from tests.invariants import check_invariants

SCENARIOS = Path(__file__).parent / "scenarios"
TIMEOUT = 20
PROMPT = "\N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} "

Spawn = Callable[..., pexpect.spawn]


def read_trace(path: Path) -> list[Event]:
    return [decode_event(line) for line in path.read_bytes().splitlines() if line.strip()]


def roots(events: list[Event]) -> list[tuple[str, str]]:
    """(prompt, status) of each turn's root agent, in order."""
    ends = {e.agent_id: e.status for e in events if e.type == "agent_finished"}  # type: ignore[attr-defined]
    return [
        (e.prompt, ends.get(e.agent_id, "unfinished"))  # type: ignore[attr-defined]
        for e in events
        if e.type == "agent_started" and e.parent_tool_use_id is None
    ]


def statuses(events: list[Event], name: str) -> list[str]:
    ends = {e.agent_id: e.status for e in events if e.type == "agent_finished"}  # type: ignore[attr-defined]
    return [
        ends.get(e.agent_id, "unfinished")
        for e in events
        if e.type == "agent_started" and e.name == name  # type: ignore[attr-defined]
    ]


def session(tmp_path: Path) -> dict[str, Any]:
    [path] = (tmp_path / ".trio-agents" / "sessions").glob("*.json")
    result: dict[str, Any] = orjson.loads(path.read_bytes())
    return result


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    children: list[pexpect.spawn] = []

    def start(*args: str) -> pexpect.spawn:
        env = dict(os.environ)
        env["TERM"] = "xterm-256color"
        env.pop("NO_COLOR", None)
        env.pop("COLUMNS", None)
        env.pop("LINES", None)
        child = pexpect.spawn(
            sys.executable,
            ["-m", "runtime", "chat", *args],
            cwd=str(tmp_path),
            env=env,
            dimensions=(50, 160),
            encoding="utf-8",
            codec_errors="replace",
            timeout=TIMEOUT,
        )
        children.append(child)
        return child

    yield start
    for child in children:
        if child.isalive():
            child.kill(9)
        child.close(force=True)


def styled(*parts: str) -> str:
    """A regex for *parts* drawn one after another, with any colour codes between them."""
    return r"(?:\x1b\[[0-9;]*m)*".join(re.escape(p) for p in parts)


def prompt(child: pexpect.spawn) -> None:
    """Wait for the idle prompt (the greeting or a turn's summary line, then the prompt)."""
    child.expect(r"(/help for commands|completed in|cancelled in|failed in)[^\n]*\n")
    child.expect_exact(PROMPT)


def turn_done(child: pexpect.spawn, status: str = "completed") -> None:
    child.expect_exact(f"{status} in ")
    child.expect_exact(PROMPT)


def finish(child: pexpect.spawn) -> int:
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus is not None, child.signalstatus
    return int(child.exitstatus)


def test_three_messages_the_second_with_parallel_sub_agents(spawn: Spawn, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    child = spawn("--scenario", str(SCENARIOS / "chat_conversation.json"), "--trace", str(trace))
    prompt(child)
    child.sendline("hi")
    child.expect_exact("Hello! What shall we look at?")
    turn_done(child)
    child.sendline("please review")
    # The live tree shows both sub-agents at work.
    child.expect_exact("agent: lister: list files")
    child.expect_exact("agent: counter: count lines")
    child.expect_exact("Both parts came back: all good.")
    turn_done(child)
    child.sendline("thanks")
    child.expect_exact("You are welcome. Bye!")
    turn_done(child)
    child.sendcontrol("d")
    child.expect_exact("Resume it: trio-agents chat --resume")
    assert finish(child) == 0
    events = read_trace(trace)
    check_invariants(events)
    assert roots(events) == [
        ("hi", "completed"),
        ("please review", "completed"),
        ("thanks", "completed"),
    ]
    assert statuses(events, "lister") == ["completed"]
    assert statuses(events, "counter") == ["completed"]
    # In parallel: both sub-agents had started before either ended.
    kinds = [(e.type, getattr(e, "name", None)) for e in events]
    first_end = min(
        i
        for i, (t, _) in enumerate(kinds)
        if t == "agent_finished" and events[i].parent_tool_use_id
    )
    started = [n for t, n in kinds[:first_end] if t == "agent_started"]
    assert {"lister", "counter"} <= set(started)
    saved = session(tmp_path)
    assert saved["turns"] == 3
    assert saved["state"]["input_history"] == ["hi", "please review", "thanks"]
    assert len(saved["messages"]) == 8


def test_a_line_typed_mid_run_reaches_the_agent_at_its_next_turn(
    spawn: Spawn, tmp_path: Path
) -> None:
    trace = tmp_path / "t.jsonl"
    child = spawn(
        "--scenario",
        str(SCENARIOS / "chat_typing.json"),
        "--permission-mode",
        "allow-all",
        "--trace",
        str(trace),
    )
    prompt(child)
    child.sendline("look around")
    child.expect_exact("bash: sleep 30")  # the agent is busy with its tool
    child.sendline("also check the tests")
    child.expect(styled("queued ", f"{PROMPT}also check the tests"))
    # The tool call is the agent's step: cancelling it ends the step, and at that boundary
    # the queued line is delivered.
    tool_use_id = next(
        e.tool_use_id  # type: ignore[attr-defined]
        for e in read_trace(trace)
        if e.type == "tool_started"
    )
    child.sendline(f"/cancel {tool_use_id}")
    child.expect_exact(f"Cancelling {tool_use_id} and everything under it.")
    child.expect_exact("Noted your message: checking the tests too.")
    turn_done(child)
    child.sendcontrol("d")
    assert finish(child) == 0
    # The recap of a resumed session is what the turn was asked, not the line typed during it.
    child = spawn("--scenario", str(SCENARIOS / "chat_typing.json"), "--no-trace", "--resume")
    child.expect_exact("1 turn since")
    child.expect(r"you: ([^\r\n]*)\r?\n")
    assert child.match.group(1) == "look around"
    prompt(child)
    child.sendcontrol("d")
    assert finish(child) == 0
    events = read_trace(trace)
    check_invariants(events)
    types = [e.type for e in events]
    [message] = [e for e in events if e.type == "user_message"]
    assert message.text == "also check the tests"  # type: ignore[attr-defined]
    assert message.parent_tool_use_id is None
    at = events.index(message)
    tool_end = types.index("tool_finished")
    second_turn = next(
        i
        for i, e in enumerate(events)
        if e.type == "turn_finished" and e.turn == 2  # type: ignore[attr-defined]
    )
    assert tool_end < at < second_turn
    assert roots(events) == [("look around", "completed")]  # no second turn: it was delivered
    # The agent's history holds it, after the tool's result.
    history = session(tmp_path)["messages"]
    assert history[2]["role"] == "user"
    assert history[2]["content"][0]["kind"] == "tool_result"
    assert history[2]["content"][-1] == {"kind": "text", "text": "also check the tests"}


def test_a_chat_killed_in_its_first_turn_goes_on_with_chat_resume(
    spawn: Spawn, tmp_path: Path
) -> None:
    """SIGKILL during the first turn, with a line typed and queued: the session file is
    there (written as the turn started), ``chat --list`` shows its first turn cut, and
    ``chat --resume`` goes on with that turn: the command the crash cut is not run again
    (the model reads it was interrupted), the queued line reaches the agent once, and the
    turn ends as it would have."""
    trace = tmp_path / "t.jsonl"
    args = ("--scenario", str(SCENARIOS / "chat_typing.json"), "--permission-mode", "allow-all")
    child = spawn(*args, "--trace", str(trace))
    prompt(child)
    child.sendline("look around")
    child.expect_exact("bash: sleep 30")
    child.sendline("also check the tests")
    child.expect(styled("queued ", f"{PROMPT}also check the tests"))
    running = session(tmp_path)
    assert (running["turns"], running["first_prompt"]) == (0, "look around")
    listed = spawn("--list")
    listed.expect_exact("first turn running")
    assert finish(listed) == 0
    deadline = time.monotonic() + TIMEOUT  # another process writes the trace: polled
    while b'"message_queued"' not in trace.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    child.kill(signal.SIGKILL)
    child.expect(pexpect.EOF)
    child.close()
    assert child.signalstatus == signal.SIGKILL
    listed = spawn("--list")
    listed.expect(r"first turn cut\s+look around")
    assert finish(listed) == 0

    child = spawn(*args, "--resume")
    child.expect_exact("Going on with the turn the crash cut: look around")
    child.expect_exact("Noted your message: checking the tests too.")
    turn_done(child)
    child.sendcontrol("d")
    assert finish(child) == 0
    events = read_trace(trace)
    check_invariants(events)
    assert [e.text for e in events if e.type == "user_message"] == [  # type: ignore[attr-defined]
        "also check the tests"]
    [bash] = [e for e in events if e.type == "tool_finished"]
    assert bash.status == "error"  # type: ignore[attr-defined]
    assert bash.output.startswith("interrupted: ")  # type: ignore[attr-defined]
    assert roots(events) == [("look around", "completed")]
    saved = session(tmp_path)
    assert saved["turns"] == 1
    texts = [b.get("text") for m in saved["messages"] for b in m["content"] if b.get("text")]
    assert texts == ["look around", "Looking around.", "also check the tests",
                     "Noted your message: checking the tests too."]


def test_a_line_the_agent_never_took_becomes_the_next_message(spawn: Spawn, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    child = spawn("--scenario", str(SCENARIOS / "chat_late.json"), "--trace", str(trace))
    prompt(child)
    child.sendline("start")
    child.expect_exact("type to add to the conversation")  # the turn runs
    # Typed while the model thinks; the turn fails before the agent takes it (or, on a slow
    # machine, ends before the line is sent: the line is the next message either way).
    child.sendline("late line")
    child.expect_exact("failed in ")
    child.expect_exact("it finished before taking it: sent now")
    child.expect_exact("failed in ")
    child.expect_exact(PROMPT)
    child.sendcontrol("d")
    assert finish(child) == 0  # on a terminal, a failed turn does not end the chat
    events = read_trace(trace)
    check_invariants(events)
    assert roots(events) == [("start", "failed"), ("late line", "failed")]
    assert not [e for e in events if e.type == "user_message"]


def test_ctrl_c_picks_a_sub_agent_cancels_a_turn_and_clears_the_prompt(
    spawn: Spawn, tmp_path: Path
) -> None:
    trace = tmp_path / "t.jsonl"
    child = spawn(
        "--scenario",
        str(SCENARIOS / "chat_picker.json"),
        "--permission-mode",
        "allow-all",
        "--trace",
        str(trace),
    )
    prompt(child)
    child.sendline("split it")
    child.expect_exact("bash: sleep 30")
    child.sendintr()  # sub-agents run: the picker, as in `run`
    child.expect_exact("Running sub-agents:")
    child.expect(r"\[(\d+)\] sleeper (tu-[\d.]+) slow part")
    number, tool_use_id = child.match.group(1), child.match.group(2)
    child.expect_exact("q: abort the turn")
    child.expect_exact("cancel> ")
    child.sendline(number)
    child.expect_exact(f"Cancelling sleeper {tool_use_id}")
    child.expect_exact("All parts came back.")
    turn_done(child)

    child.sendline("work alone")
    child.expect_exact("bash: sleep 30")
    child.sendline("late thought")
    child.expect(styled("queued ", f"{PROMPT}late thought"))
    child.sendintr()  # no sub-agent: the turn is cancelled, the chat goes on
    child.expect_exact("cancelled in ")
    # The queued line was never delivered: it comes back to the prompt, not sent.
    child.expect_exact("(your message was not delivered; it is back in the prompt)")
    child.expect_exact(f"{PROMPT}late thought")
    child.sendintr()  # at the prompt: the line is dropped
    child.expect_exact("^C")
    child.expect_exact(PROMPT)
    child.sendcontrol("d")
    assert finish(child) == 0
    events = read_trace(trace)
    check_invariants(events)
    assert roots(events) == [("split it", "completed"), ("work alone", "cancelled")]
    assert not [e for e in events if e.type == "user_message"]
    assert statuses(events, "sleeper") == ["cancelled"]
    assert statuses(events, "worker") == ["completed"]
    cancels = [(e.target, e.by) for e in events if e.type == "cancel_requested"]  # type: ignore[attr-defined]
    assert cancels[0] == (tool_use_id, "user")
    assert session(tmp_path)["state"]["last_status"] == "cancelled"


def test_save_quit_and_resume_with_the_history_intact(spawn: Spawn, tmp_path: Path) -> None:
    scenario = str(SCENARIOS / "chat_resume.json")
    child = spawn("--scenario", scenario, "--no-trace")
    prompt(child)
    child.sendline("first question")
    child.expect_exact("First answer.")
    turn_done(child)
    child.sendline("/save")
    child.expect(r"Saved session (\S+) to (\S+)\.\r?\n")
    session_id, path = child.match.group(1), tmp_path / child.match.group(2)
    child.sendline("/exit")
    assert finish(child) == 0
    saved = path.read_bytes()
    assert orjson.loads(saved)["turns"] == 1

    child = spawn("--scenario", scenario, "--no-trace", "--resume", session_id)
    child.expect_exact(f"Resumed session {session_id}: 1 turn since")
    child.expect_exact("agent: First answer.")
    prompt(child)
    child.send("\x1b[A\x1b[A\x1b[A")  # Up: the input history came back with the session
    child.expect_exact("first question")
    child.sendcontrol("u")
    child.sendline("second question")
    # The second scripted answer: the resumed agent saw one answer in its history already.
    child.expect_exact("Second answer, after the first.")
    turn_done(child)
    child.sendcontrol("d")
    assert finish(child) == 0
    resumed = orjson.loads(path.read_bytes())
    texts = [m["content"][0]["text"] for m in resumed["messages"]]
    assert texts == [
        "first question",
        "First answer.",
        "second question",
        "Second answer, after the first.",
    ]
    assert resumed["turns"] == 2
    assert resumed["created_ts"] == orjson.loads(saved)["created_ts"]


def test_a_corrupted_session_is_one_clear_line_and_left_untouched(
    spawn: Spawn, tmp_path: Path
) -> None:
    sessions = tmp_path / ".trio-agents" / "sessions"
    sessions.mkdir(parents=True)
    path = sessions / "20260101-000000-abcdef.json"
    content = b'{"format_version": 1, "id": "20260101-000000-abcdef", "turns": "many"'
    path.write_bytes(content)
    child = spawn("--scenario", str(SCENARIOS / "chat_resume.json"), "--resume")
    child.expect(pexpect.EOF)
    output = child.before.strip()
    child.close()
    assert child.exitstatus == 2
    assert len(output.splitlines()) == 1
    assert re.match(r"trio-agents: error: session \S+20260101-000000-abcdef\.json: ", output)
    assert "not JSON" in output
    assert path.read_bytes() == content


def test_tree_mid_turn_leaves_no_frozen_copy_and_the_trace_is_named_for_the_session(
    spawn: Spawn, tmp_path: Path
) -> None:
    """Issue 21, item 16."""
    child = spawn(
        "--scenario", str(SCENARIOS / "chat_typing.json"), "--permission-mode", "allow-all",
    )
    prompt(child)
    child.sendline("look around")
    child.expect_exact("bash: sleep 30")
    child.sendline("/tree")
    child.expect_exact("The live tree below is this turn's; it is printed whole when it ends.")
    child.sendintr()  # no sub-agent: cancels the turn
    child.expect_exact("cancelled in ")
    child.expect_exact(PROMPT)
    child.sendcontrol("d")
    assert finish(child) == 0
    saved = session(tmp_path)
    [trace] = (tmp_path / ".trio-agents" / "traces").glob("*.jsonl")
    assert trace.stem == saved["id"]  # one id for the session and its (first) run
    assert saved["state"]["run_ids"] == [saved["id"]]


def test_the_chat_picker_list_stays_true_while_it_is_open(spawn: Spawn, tmp_path: Path) -> None:
    """Issue 21, item 5, in chat: a sub-agent that finishes while the picker is open is marked
    and cannot be picked; its number stays."""
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({"agents": {
        "main": {"turns": [
            {"tool_calls": [
                {"name": "agent", "input": {"description": "slow", "prompt": "s", "agent": "slow"}},
                {"name": "agent", "input": {"description": "quick", "prompt": "q",
                                            "agent": "quick"}}]},
            {"text": "Both came back."}]},
        "slow": {"tools": ["bash"], "turns": [
            {"tool_calls": [{"name": "bash", "input": {"command": "sleep 30"}}]},
            {"text": "slept"}]},
        "quick": {"tools": ["bash"], "turns": [
            {"tool_calls": [{"name": "bash", "input": {"command": "sleep 2"}}]},
            {"text": "quick done"}]}}}))
    child = spawn("--scenario", str(scenario), "--permission-mode", "allow-all", "--no-trace")
    prompt(child)
    child.sendline("split it")
    child.expect_exact("bash: sleep 2")
    child.sendintr()
    child.expect(r"\[2\] quick tu-1\.2 quick")
    child.expect_exact("cancel> ")
    child.expect(r"\[2\] quick tu-1\.2 finished \(ok\)", timeout=10)
    child.sendline("2")
    child.expect_exact("quick tu-1.2 has already finished (ok); pick another.")
    child.sendline("1")
    child.expect_exact("Cancelling slow tu-1.1")
    child.expect_exact("Both came back.")
    turn_done(child)
    child.sendcontrol("d")
    assert finish(child) == 0


def test_the_chat_picker_and_permission_prompt_take_one_key_as_in_run(
    spawn: Spawn, tmp_path: Path
) -> None:
    """A number alone cancels (no Enter), as in `run`; the hint does not ask for Enter; a
    permission question takes `n` alone."""
    child = spawn("--scenario", str(SCENARIOS / "chat_picker.json"), "--permission-mode",
                  "allow-all", "--no-trace")
    prompt(child)
    child.sendline("split it")
    child.expect_exact("bash: sleep 30")
    child.sendintr()
    child.expect(r"\[(\d+)\] sleeper (tu-[\d.]+) slow part")
    number, tool_use_id = child.match.group(1), child.match.group(2)
    child.expect(r"N: cancel that subtree")
    child.expect_exact("cancel> ")
    child.send(number)  # no Enter
    child.expect_exact(f"Cancelling sleeper {tool_use_id}")
    child.expect_exact("All parts came back.")
    turn_done(child)
    child.sendcontrol("d")
    assert finish(child) == 0

    child = spawn("--scenario", str(SCENARIOS / "permission.json"), "--no-trace")
    prompt(child)
    child.sendline("go")
    child.expect_exact("Allow? [y]es / [n]o / [a]lways this run: ")
    child.send("n")  # no Enter
    child.expect_exact("Denied.")
    child.expect_exact("Done, with or without the shell.")
    turn_done(child)
    child.sendcontrol("d")
    assert finish(child) == 0
    assert not (tmp_path / "asked.txt").exists()
