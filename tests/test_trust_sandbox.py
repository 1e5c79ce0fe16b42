"""The sandbox's edges (docs/reliability.md, "The trust boundary"), with real bwrap: a command
inside ``--sandbox`` cannot drive the run through its control socket, and a trace in a parent
folder of the workspace does not make the workspace read-only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runtime import decode_event
from runtime.cli._control import control_request
from tests.test_sandbox import needs_bwrap

ATTACK = r'''
import json, socket, sys, time
for _ in range(100):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    f = s.makefile("rwb")
    try:
        f.write(b'{"op": "pending"}\n'); f.flush()
    except OSError:
        pass  # refused and closed already: its one line is still there to read
    answer = json.loads(f.readline() or b'{"error": "closed"}')
    if not answer.get("ok"):
        print("REFUSED", answer.get("error")); break
    if answer["pending"]:
        for p in answer["pending"]:
            f.write(json.dumps({"op": "permission", "request_id": p["request_id"],
                                "granted": True}).encode() + b"\n"); f.flush()
            print("GRANTED", p["request_id"], f.readline().decode().strip())
        break
    s.close()
    time.sleep(0.1)
'''


def scenario(ws: Path, sock: str) -> Path:
    path = ws / "sibling.json"
    path.write_text(json.dumps({"agents": {
        "main": {"turns": [
            {"text": "Two.", "tool_calls": [
                {"name": "agent", "input": {"description": "asks", "prompt": "go",
                                            "agent": "asker"}},
                {"name": "agent", "input": {"description": "attacks", "prompt": "go",
                                            "agent": "attacker"}}]},
            {"text": "Done."}]},
        "asker": {"tools": ["bash"], "turns": [
            {"tool_calls": [{"name": "bash", "input": {"command": "echo yes > asked.txt"}}]},
            {"text": "asked"}]},
        "attacker": {"tools": ["bash"], "turns": [
            {"delay_s": 0.3, "tool_calls": [
                {"name": "bash", "input": {"command": f"python3 attack.py {sock}"}}]},
            {"text": "attacked"}]},
    }}))
    return path


def trace_events(trace: Path) -> list[Any]:
    if not trace.exists():
        return []
    lines = trace.read_bytes().splitlines()
    return [decode_event(line) for line in lines if line.endswith(b"}")]


@needs_bwrap
def test_a_sandboxed_command_cannot_list_or_grant_a_siblings_permission(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "attack.py").write_text(ATTACK)
    sock = str(workspace / "control.sock")  # inside the workspace: visible to the sandbox
    trace = tmp_path / "t.jsonl"
    with subprocess.Popen(
        [sys.executable, "-m", "runtime", "run", "go", "--scenario",
         str(scenario(workspace, sock)), "--sandbox", "--permission-mode", "ask",
         "--allow", "bash(python3 attack.py *)", "--control", sock, "--trace", str(trace)],
        cwd=workspace, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ) as run:
        try:
            deadline = time.monotonic() + 30
            attack = None
            while attack is None:
                assert time.monotonic() < deadline, "the attacker's bash never finished"
                assert run.poll() is None, run.stderr.read() if run.stderr else ""
                attack = next((e for e in trace_events(trace) if e.type == "tool_finished"
                               and ("REFUSED" in e.output or "GRANTED" in e.output)), None)
                time.sleep(0.05)
            assert "REFUSED" in attack.output
            assert "another PID namespace" in attack.output
            # The user, outside the sandbox, still lists and answers it.
            [waiting] = control_request(sock, {"op": "pending"})["pending"]
            assert waiting["input"] == {"command": "echo yes > asked.txt"}
            answer = control_request(
                sock, {"op": "permission", "request_id": waiting["request_id"],
                       "granted": False})
            assert answer == {"ok": True}
            assert run.wait(timeout=30) == 0
        finally:
            if run.poll() is None:
                run.kill()
    assert not (workspace / "asked.txt").exists()


@needs_bwrap
@pytest.mark.parametrize("where", ["parent", "workspace"])
def test_a_trace_in_a_folder_holding_the_workspace_leaves_the_workspace_writable(
    workspace: Path, tmp_path: Path, where: str
) -> None:
    trace = (tmp_path if where == "parent" else workspace) / "t.jsonl"
    scenario = workspace / "write.json"
    scenario.write_text(json.dumps({"agents": {"main": {"turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": "echo hi > out.txt"}},
                        {"name": "bash", "input": {"command": f"echo x >> {trace}"}}]},
        {"text": "wrote"}]}}}))
    proc = subprocess.run(
        [sys.executable, "-m", "runtime", "run", "go", "--scenario", str(scenario),
         "--sandbox", "--permission-mode", "allow-all", "--trace", str(trace)],
        cwd=workspace, capture_output=True, text=True, check=False, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert (workspace / "out.txt").read_text() == "hi\n"
    # The trace itself stays out of reach.
    finished = [e for e in trace_events(trace) if e.type == "tool_finished"]
    assert "Read-only file system" in finished[1].output
    assert all(line.strip() != b"x" for line in trace.read_bytes().splitlines())
    assert os.path.getsize(trace) > 0
