"""A permission question shows the whole input, and "always" remembers exactly it
(docs/reliability.md, "The trust boundary").

Two bash calls whose first 150 characters are equal wait at once; the second hides
``; echo pwned > hidden.txt`` (and an escape sequence) after them. Answering "always" to the
first must leave the second asking, on a real terminal (pexpect) and through the control socket
(``trio-agents pending`` / ``permit --always``, real processes).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pexpect

from runtime.cli._control import control_request

PAD = "x" * 150
HARMLESS = f"echo {PAD} > a.txt"
HIDDEN = f"echo {PAD} > a.txt\n; echo pwned > hidden.txt \x1b]0;t\x07"


def scenario(ws: Path) -> Path:
    # Two sub-agents, so that both questions wait at once (one agent's calls ask in turn).
    path = ws / "two.json"
    path.write_text(json.dumps({"agents": {
        "main": {"turns": [
            {"text": "Two.", "tool_calls": [
                {"name": "agent", "input": {"description": "one", "prompt": "go", "agent": "one"}},
                {"name": "agent", "input": {"description": "two", "prompt": "go", "agent": "two"}},
            ]},
            {"text": "Done."}]},
        "one": {"tools": ["bash"], "turns": [
            {"tool_calls": [{"name": "bash", "input": {"command": HARMLESS}}]},
            {"text": "one done"}]},
        "two": {"tools": ["bash"], "turns": [
            {"delay_s": 0.3, "tool_calls": [{"name": "bash", "input": {"command": HIDDEN}}]},
            {"text": "two done"}]},
    }}))
    return path


def test_always_on_a_terminal_does_not_grant_a_request_that_differs_after_the_summary(
    workspace: Path,
) -> None:
    sock = f"/tmp/ta-perm-pty-{os.getpid()}.sock"
    child = pexpect.spawn(
        sys.executable,
        ["-m", "runtime", "run", "go", "--scenario", str(scenario(workspace)), "--no-trace",
         "--control", sock],
        cwd=str(workspace), env=dict(os.environ, TERM="xterm-256color"),
        dimensions=(50, 100), encoding="utf-8", codec_errors="replace", timeout=30,
    )
    prompt = re.escape("Allow? [y]es / [n]o / [a]lways this run: ")
    child.expect(prompt)
    first = child.before
    wait_for_requests(sock, 2)  # the second is queued behind the first before "always"
    assert "a.txt" in first
    assert "hidden.txt" not in first
    assert "(always: allows bash(" in first
    child.send("a")  # one key answers (docs/cli.md, "Permission prompts"), echoed in place
    child.expect("Allowed for the rest of this run")
    child.expect(prompt)  # the second is asked: its input differs
    second = child.before
    assert "hidden.txt" in second  # the whole input, past any summary width
    assert "\\u001b]0;t" in second
    assert "\x1b]0;t" not in second
    child.send("n")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert (workspace / "a.txt").exists()
    assert not (workspace / "hidden.txt").exists()


def wait_for_requests(sock: str, count: int) -> dict[str, Any]:
    """Poll the run's control socket until *count* questions wait (a process outside: no
    event to wait on)."""
    for _ in range(400):
        if os.path.exists(sock):
            answer: dict[str, Any] = control_request(sock, {"op": "pending"})
            if len(answer["pending"]) == count:
                return answer
        time.sleep(0.05)
    raise AssertionError(f"{count} requests never waited")


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runtime", *args], cwd=cwd, text=True,
                          capture_output=True, check=False, timeout=30)


def test_pending_shows_the_whole_input_and_permit_always_grants_only_that_input(
    workspace: Path,
) -> None:
    sock = f"/tmp/ta-perm-{os.getpid()}.sock"
    with subprocess.Popen(
        [sys.executable, "-m", "runtime", "run", "go", "--scenario", str(scenario(workspace)),
         "--no-trace", "--permission-mode", "ask", "--control", sock],
        cwd=workspace, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as run:
        try:
            answer = wait_for_requests(sock, 2)
            listed = cli(workspace, "pending", "--control", sock)
            assert listed.returncode == 0, listed.stderr
            assert "hidden.txt" in listed.stdout
            assert "\x1b" not in listed.stdout
            by_command = {p["input"]["command"]: p for p in answer["pending"]}
            harmless = by_command[HARMLESS]["request_id"]
            hidden = by_command[HIDDEN]["request_id"]
            done = cli(workspace, "permit", "--control", sock, harmless, "yes", "--always")
            assert done.returncode == 0, done.stderr
            still = control_request(sock, {"op": "pending"})["pending"]
            assert [p["request_id"] for p in still] == [hidden]
            assert cli(workspace, "permit", "--control", sock, hidden, "no").returncode == 0
            assert run.wait(timeout=30) == 0
        finally:
            if run.poll() is None:
                run.kill()
    assert (workspace / "a.txt").exists()
    assert not (workspace / "hidden.txt").exists()
