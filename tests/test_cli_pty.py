"""The command line on a real terminal: the live tree, Ctrl+C and its picker, permission prompts.

Each test runs the real command in a pseudo-terminal (pexpect) and presses real keys: Ctrl+C is
the terminal's interrupt character, so the kernel's line discipline sends a real SIGINT to the
foreground process group, as it does for a user. Every wait is an ``expect`` on the screen's
output (or on the trace file) with a timeout; nothing sleeps and hopes.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from runtime import Event, decode_event
from tests.invariants import check_invariants

SCENARIOS = Path(__file__).parent / "scenarios"
TIMEOUT = 20


def read_trace(path: Path) -> list[Event]:
    return [decode_event(line) for line in path.read_bytes().splitlines() if line.strip()]


def statuses_by_name(events: list[Event]) -> dict[str, list[str]]:
    finished = {e.agent_id: e for e in events if e.type == "agent_finished"}
    out: dict[str, list[str]] = {}
    for e in events:
        if e.type == "agent_started":
            end = finished.get(e.agent_id)
            out.setdefault(e.name, []).append(end.status if end else "unfinished")  # type: ignore[attr-defined]
    return out


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[object]:
    children: list[pexpect.spawn] = []

    def start(*args: str) -> pexpect.spawn:
        env = dict(os.environ)
        env["TERM"] = "xterm-256color"
        env.pop("NO_COLOR", None)
        env.pop("COLUMNS", None)
        env.pop("LINES", None)
        child = pexpect.spawn(
            sys.executable,
            ["-m", "runtime", *args],
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


def finish(child: pexpect.spawn) -> int:
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus is not None, child.signalstatus
    return int(child.exitstatus)


def test_ctrl_c_then_a_number_cancels_only_that_subtree(spawn: object, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    child = spawn(  # type: ignore[operator]
        "run",
        "go",
        "--permission-mode",
        "allow-all",
        "--trace",
        str(trace),
        "--scenario",
        str(SCENARIOS / "three_parallel.json"),
    )
    child.expect("bash: sleep 30")  # the live tree shows the slow sub-agent at work
    child.sendintr()
    child.expect("Running sub-agents:")
    child.expect(r"\[(\d+)\] sleeper (tu-[\d.]+) slow part")
    number, tool_use_id = child.match.group(1), child.match.group(2)
    child.expect("cancel> ")
    child.sendline(number)
    child.expect(f"Cancelling sleeper {tool_use_id}")
    child.expect("All three parts came back.")
    assert finish(child) == 0
    events = read_trace(trace)
    check_invariants(events)
    assert statuses_by_name(events) == {
        "main": ["completed"],
        "sleeper": ["cancelled"],
        "worker": ["completed"],
        "medium": ["completed"],
    }
    cancels = [(e.target, e.by) for e in events if e.type == "cancel_requested"]  # type: ignore[attr-defined]
    assert cancels == [(tool_use_id, "user")]
    calls = {e.tool_use_id: e.status for e in events if e.type == "tool_finished"}  # type: ignore[attr-defined]
    assert calls[tool_use_id] == "cancelled"
    # The terminal's SIGINT went to the runtime only: the medium agent's `sleep 1`, running in
    # its own session, was not interrupted.
    medium_bash = [
        e.output  # type: ignore[attr-defined]
        for e in events
        if e.type == "tool_finished" and e.name == "bash" and e.status == "ok"  # type: ignore[attr-defined]
    ]
    assert len(medium_bash) == 1
    assert medium_bash[0].endswith("[exit code 0]")


def test_ctrl_c_twice_aborts_with_130_and_a_complete_trace(spawn: object, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    child = spawn(  # type: ignore[operator]
        "run",
        "go",
        "--permission-mode",
        "allow-all",
        "--trace",
        str(trace),
        "--scenario",
        str(SCENARIOS / "three_parallel.json"),
    )
    child.expect("bash: sleep 30")
    child.sendintr()
    child.expect("cancel> ")
    child.sendintr()
    child.expect("Aborting the run")
    assert finish(child) == 130
    events = read_trace(trace)
    check_invariants(events)  # every started node finished, run_finished last
    assert events[-1].status == "cancelled"  # type: ignore[attr-defined]
    assert statuses_by_name(events)["sleeper"] == ["cancelled"]
    assert statuses_by_name(events)["main"] == ["cancelled"]


def test_empty_line_resumes_and_q_aborts(spawn: object, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    child = spawn(  # type: ignore[operator]
        "run",
        "go",
        "--permission-mode",
        "allow-all",
        "--trace",
        str(trace),
        "--scenario",
        str(SCENARIOS / "three_parallel.json"),
    )
    child.expect("bash: sleep 30")
    child.sendintr()
    child.expect("cancel> ")
    child.sendline("")
    child.expect("Resumed.")
    child.sendintr()
    child.expect("cancel> ")
    child.sendline("7x")  # not a choice: asked again
    child.expect("Not a choice")
    child.expect("cancel> ")
    child.sendline("q")
    assert finish(child) == 130
    check_invariants(read_trace(trace))


def test_ctrl_c_without_sub_agents_aborts(spawn: object, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    child = spawn(  # type: ignore[operator]
        "run",
        "go",
        "--permission-mode",
        "allow-all",
        "--trace",
        str(trace),
        "--scenario",
        str(SCENARIOS / "lonely.json"),
    )
    child.expect("bash: sleep 30")
    child.sendintr()
    assert finish(child) == 130
    events = read_trace(trace)
    check_invariants(events)
    assert statuses_by_name(events) == {"main": ["cancelled"]}


def test_permission_prompt_answered_no_while_the_others_finish(
    spawn: object, tmp_path: Path
) -> None:
    trace = tmp_path / "t.jsonl"
    child = spawn(  # type: ignore[operator]
        "run", "go", "--trace", str(trace), "--scenario", str(SCENARIOS / "permission.json")
    )  # on a terminal the default mode is ask
    child.expect(
        re.escape("main \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} asker")
        + r".*wants to run.*bash: echo permitted > asked\.txt"
    )
    child.expect(re.escape("Allow? [y]es / [n]o / [a]lways this run: "))
    # The question waits; the helpers do not: wait until the trace shows both finished.
    deadline = time.monotonic() + TIMEOUT
    while True:
        names = statuses_by_name(read_trace(trace)) if trace.exists() else {}
        if names.get("helper") == ["completed", "completed"]:
            break
        assert time.monotonic() < deadline, names
        time.sleep(0.05)
    child.sendline("n")
    child.expect("Denied.")
    child.expect("Done, with or without the shell.")
    assert finish(child) == 0
    events = read_trace(trace)
    check_invariants(events)
    assert statuses_by_name(events) == {
        "main": ["completed"],
        "asker": ["completed"],
        "helper": ["completed", "completed"],
    }
    resolved = [e for e in events if e.type == "permission_resolved"]
    assert [(e.granted, e.reason) for e in resolved] == [(False, "denied by user")]  # type: ignore[attr-defined]
    bash = [e.status for e in events if e.type == "tool_finished" and e.name == "bash"]  # type: ignore[attr-defined]
    assert bash == ["denied"]
    assert not (tmp_path / "asked.txt").exists()


def test_permission_always_allows_the_call(spawn: object, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    child = spawn(  # type: ignore[operator]
        "run", "go", "--trace", str(trace), "--scenario", str(SCENARIOS / "permission.json")
    )
    child.expect(re.escape("Allow? [y]es / [n]o / [a]lways this run: "))
    child.sendline("a")
    child.expect("Allowed for the rest of this run")
    assert finish(child) == 0
    assert (tmp_path / "asked.txt").read_text() == "permitted\n"
    resolved = [e for e in read_trace(trace) if e.type == "permission_resolved"]
    assert [e.granted for e in resolved] == [True]  # type: ignore[attr-defined]


def test_a_control_client_may_answer_while_the_terminal_asks(spawn: object, tmp_path: Path) -> None:
    from runtime.cli._control import control_request

    sock = f"/tmp/ta-pty-{os.getpid()}.sock"
    child = spawn(  # type: ignore[operator]
        "run",
        "go",
        "--no-trace",
        "--control",
        sock,
        "--scenario",
        str(SCENARIOS / "permission.json"),
    )
    child.expect(re.escape("Allow? [y]es / [n]o / [a]lways this run: "))
    pending = control_request(sock, {"op": "pending"})
    [request] = pending["pending"]
    answer = control_request(
        sock, {"op": "permission", "request_id": request["request_id"], "granted": True}
    )
    assert answer == {"ok": True}
    child.expect(re.escape("(granted meanwhile: granted through the control socket)"))
    assert finish(child) == 0
    assert (tmp_path / "asked.txt").read_text() == "permitted\n"
    assert not os.path.exists(sock)


def test_the_permission_prompt_takes_one_key_without_enter(spawn: object, tmp_path: Path) -> None:
    """``y`` alone answers, as a number alone answers the picker (no Enter)."""
    trace = tmp_path / "t.jsonl"
    child = spawn(  # type: ignore[operator]
        "run", "go", "--trace", str(trace), "--scenario", str(SCENARIOS / "permission.json")
    )
    child.expect(re.escape("Allow? [y]es / [n]o / [a]lways this run: "))
    child.send("y")
    child.expect_exact("Allowed.")
    assert finish(child) == 0
    assert (tmp_path / "asked.txt").read_text() == "permitted\n"
    resolved = [e for e in read_trace(trace) if e.type == "permission_resolved"]
    assert [(e.granted, e.reason) for e in resolved] == [(True, "granted by user")]  # type: ignore[attr-defined]
