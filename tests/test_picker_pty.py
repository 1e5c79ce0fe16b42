"""The Ctrl+C picker stays true while it is open (issue 21, items 2 and 5), on a real terminal.

* A sub-agent that finishes while the picker is open is marked, keeps its number and cannot be
  picked; when none is left, the picker closes itself and says so.
* When the run ends while the picker is open, the picker closes with one line and the terminal
  is given back as it was (echo and line editing on), with nothing typed left over for the shell.
* A number that cannot start a longer one is an answer without Enter.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pexpect

from tests.invariants import check_invariants
from tests.test_cli_pty import finish, read_trace, statuses_by_name
from tests.test_cli_pty import spawn as spawn  # the fixture: a real pty per test

TWO = {"agents": {
    "main": {"turns": [
        {"text": "Two parts.", "tool_calls": [
            {"name": "agent", "input": {"description": "quick part", "prompt": "q", "agent": "quick"}},
            {"name": "agent", "input": {"description": "slow part", "prompt": "s", "agent": "slow"}}]},
        {"text": "Both parts came back."}]},
    "quick": {"tools": ["bash"], "turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": "sleep 2.5"}}]}, {"text": "quick done"}]},
    "slow": {"tools": ["bash"], "turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": "sleep 30"}}]}, {"text": "slow done"}]},
}}

ONE = {"agents": {
    "main": {"turns": [
        {"tool_calls": [
            {"name": "agent", "input": {"description": "short part", "prompt": "q", "agent": "quick"}}]},
        {"text": "The part came back.", "delay_s": 1.5}]},
    "quick": {"tools": ["bash"], "turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": "sleep 2"}}]}, {"text": "quick done"}]},
}}


def _scenario(tmp_path: Path, scenario: dict[str, object]) -> str:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(scenario))
    return str(path)


def test_a_sub_agent_that_finishes_is_marked_and_cannot_be_picked(
    spawn: object,
    tmp_path: Path,
) -> None:
    trace = tmp_path / "t.jsonl"
    child = spawn(  # type: ignore[operator]
        "run", "go", "--permission-mode", "allow-all", "--trace", str(trace),
        "--scenario", _scenario(tmp_path, TWO),
    )
    child.expect("bash: sleep 30")
    child.expect("bash: sleep 2.5")
    child.sendintr()
    child.expect(r"\[1\] quick (tu-1\.1) quick part")
    child.expect(r"\[2\] slow (tu-1\.2) slow part")
    child.expect("cancel> ")
    # The quick one ends while the picker is open: the list says so, numbers unchanged.
    child.expect(r"\[1\] quick tu-1\.1 finished \(ok\)", timeout=10)
    child.send("1")  # no Enter: 1 cannot start a longer number on a list of 2
    child.expect(r"quick tu-1\.1 has already finished \(ok\); pick another\.")
    child.expect("cancel> ")
    child.send("2")
    child.expect(r"Cancelling slow tu-1\.2")
    child.expect("Both parts came back.")
    assert finish(child) == 0
    events = read_trace(trace)
    check_invariants(events)
    assert statuses_by_name(events) == {
        "main": ["completed"], "quick": ["completed"], "slow": ["cancelled"]}


def test_the_picker_closes_itself_when_nothing_is_left_to_cancel(
    spawn: object,
    tmp_path: Path,
) -> None:
    child = spawn(  # type: ignore[operator]
        "run", "go", "--permission-mode", "allow-all", "--no-trace",
        "--scenario", _scenario(tmp_path, ONE),
    )
    child.expect("bash: sleep 2")
    child.sendintr()
    child.expect("cancel> ")
    child.expect(r"\[1\] quick tu-1\.1 finished \(ok\)", timeout=10)
    child.expect("nothing left to cancel. Resumed.")
    child.expect("The part came back.")
    assert finish(child) == 0


def test_when_the_run_ends_the_picker_closes_and_the_terminal_is_given_back(
    tmp_path: Path,
) -> None:
    """The run is ended from outside (the control socket) while the picker waits for a key;
    a shell then reads the same terminal, as the user's shell would."""
    sock = tmp_path / "c.sock"
    command = " ".join([
        sys.executable, "-m", "runtime", "run", "go", "--permission-mode", "allow-all",
        "--no-trace", "--control", str(sock), "--scenario", _scenario(tmp_path, TWO),
    ])
    # The shell survives the Ctrl+C meant for the run (a handler, unlike an ignored signal, is
    # not inherited by the command).
    script = f'trap ":" INT; {command}; echo "exit=$?"; stty -a | tr -s " ;" "\\n\\n" | grep -x -- "-*icanon\\|-*echo"; read line; echo "got[$line]"'
    env = {**os.environ, "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    child = pexpect.spawn("/bin/sh", ["-c", script], cwd=str(tmp_path), env=env,
                          dimensions=(50, 160), encoding="utf-8", timeout=20)
    try:
        child.expect("bash: sleep 30")
        child.sendintr()
        child.expect("cancel> ")
        child.send("x")  # typed, not an answer yet: must not be left to whoever reads next
        done = subprocess.run(
            [sys.executable, "-m", "runtime", "cancel", "--control", str(sock), "agent-1"],
            capture_output=True, text=True, timeout=20, check=False,
        )
        assert done.returncode == 0, done.stderr
        child.expect("The run has ended: the picker is closed.")
        child.expect("exit=1")  # the root ended cancelled, from the socket
        child.expect("icanon")  # line mode and echo are back on, as a shell expects
        assert "-icanon" not in child.before + child.after
        child.expect("echo")
        assert not child.before.rstrip().endswith("-")
        child.sendline("next")
        child.expect(r"got\[(.*)\]")
        assert child.match.group(1) == "next"
        child.expect(pexpect.EOF)
    finally:
        if child.isalive():
            child.kill(9)
        child.close(force=True)


def test_after_an_early_abort_no_cut_text_is_printed_as_the_answer(
    spawn: object,
    tmp_path: Path,
) -> None:
    """Issue 21, item 12: the text streaming when Ctrl+C aborted is not printed under the final
    tree as if it were the answer."""
    talk = {"agents": {"main": {"turns": [
        {"text": "blah " * 400, "chunk_delay_s": 0.02}]}}}
    child = spawn(  # type: ignore[operator]
        "run", "go", "--no-trace", "--scenario", _scenario(tmp_path, talk),
    )
    child.expect("blah blah blah")
    child.sendintr()  # no sub-agent runs: Ctrl+C aborts
    child.expect("run aborted with Ctrl")  # the root's line in the final tree
    child.expect(pexpect.EOF)
    after_tree = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", child.before)
    child.close()
    assert child.exitstatus == 130
    assert "cancelled in" in after_tree
    assert "blah" not in after_tree


STOPPABLE = {"agents": {
    "main": {"turns": [
        {"tool_calls": [
            {"name": "agent", "input": {"description": "long part", "prompt": "q", "agent": "long"}}]},
        {"text": "Main read the partial work."}]},
    "long": {"tools": ["bash"], "turns": [
        {"text": "Working on it.", "tool_calls": [
            {"name": "bash", "input": {"command": "sleep 2; echo half"}}]},
        {"text": "a turn the stop prevents"}]},
}}


def test_s_and_a_number_at_the_picker_stops_that_subtree_gracefully(
    spawn: object,
    tmp_path: Path,
) -> None:
    trace = tmp_path / "t.jsonl"
    child = spawn(  # type: ignore[operator]
        "run", "go", "--permission-mode", "allow-all", "--trace", str(trace),
        "--scenario", _scenario(tmp_path, STOPPABLE),
    )
    child.expect("bash: sleep 2; echo half")
    child.sendintr()
    child.expect(r"sN: stop it")
    child.expect("cancel> ")
    child.send("s1")  # no Enter: 1 cannot start a longer number on a list of 1
    child.expect(r"Stopping long tu-1\.1: its tool calls under way finish")
    child.expect("Main read the partial work.", timeout=10)
    assert finish(child) == 0
    events = read_trace(trace)
    check_invariants(events)
    assert statuses_by_name(events) == {"main": ["completed"], "long": ["stopped"]}
    [bash] = [e for e in events if e.type == "tool_finished" and e.name == "bash"]  # type: ignore[attr-defined]
    assert (bash.status, bash.output) == ("ok", "half\n[exit code 0]")  # type: ignore[attr-defined]
    [call] = [e for e in events if e.type == "tool_finished" and e.name == "agent"]  # type: ignore[attr-defined]
    assert "Its last text: Working on it." in call.output  # type: ignore[attr-defined]
    assert "- bash: sleep 2; echo half (ok)" in call.output  # type: ignore[attr-defined]


BACKGROUND = {"agents": {
    "main": {"turns": [
        {"tool_calls": [
            {"name": "agent", "input": {"description": "side job", "prompt": "q", "agent": "side",
                                        "run_in_background": True}}]},
        {"text": "Waiting for the side job."},
        {"text": "Main read the side job's report."}]},
    "side": {"tools": ["bash"], "turns": [
        {"text": "Side job under way.", "tool_calls": [
            {"name": "bash", "input": {"command": "sleep 2; echo side"}}]},
        {"text": "a turn the stop prevents"}]},
}}


def test_the_picker_lists_a_background_sub_agent_and_stops_it_by_its_id(
    spawn: object,
    tmp_path: Path,
) -> None:
    trace = tmp_path / "t.jsonl"
    child = spawn(  # type: ignore[operator]
        "run", "go", "--permission-mode", "allow-all", "--trace", str(trace),
        "--scenario", _scenario(tmp_path, BACKGROUND),
    )
    child.expect("bash: sleep 2; echo side")
    child.sendintr()
    child.expect(r"\[1\] side tu-1\.1 side job \(background, agent-2\)")
    child.expect("cancel> ")
    child.send("s1")
    child.expect(r"Stopping side tu-1\.1")
    child.expect("Main read the side job's report.", timeout=10)
    assert finish(child) == 0
    events = read_trace(trace)
    check_invariants(events)
    assert statuses_by_name(events) == {"main": ["completed"], "side": ["stopped"]}
    stops = [e.target for e in events if e.type == "stop_requested"]  # type: ignore[attr-defined]
    assert stops == ["agent-2"]
