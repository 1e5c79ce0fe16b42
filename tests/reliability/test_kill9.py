"""kill -9: a real ``trio-agents run`` process killed mid-run, and a session writer killed
mid-write.

The trace of a killed run reads back: every complete line decodes, ``seq`` runs from 1 with no
gap, only the last line may be cut, everything that was on disk before the kill is still there,
and the tree shows every node that had not finished as ``interrupted`` and every other node as
it ended. A session file is always the old one or the new one, never half of either.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from runtime import EventDecodeError, load_traces, read_events
from tests._toolkit import is_running
from tests.harness import agent_call
from tests.reliability._checks import STATS, child_processes

pytestmark = pytest.mark.skipif(os.name != "posix", reason="kill -9 needs POSIX signals")

ROOT = Path(__file__).resolve().parents[2]
_SCRIPT = Path(sys.executable).parent / "trio-agents"
CLI = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "runtime"]


def slow_scenario() -> dict[str, Any]:
    """A root with four streaming sub-agents, one of which has a sub-agent: about 3 s."""
    words = " ".join(f"w{i}" for i in range(40))
    stream = {"text": words, "chunk_delay_s": 0.03}
    return {
        "agents": {
            "main": {
                "tools": ["agent"],
                "turns": [
                    {
                        "text": "Splitting the work.",
                        "tool_calls": [
                            agent_call(f"part {i}", "worker" if i else "lead") for i in range(4)
                        ],
                    },
                    {"text": "All parts are done."},
                ],
            },
            "lead": {
                "tools": ["agent"],
                "turns": [{"tool_calls": [agent_call("deeper", "worker")]}, stream],
            },
            "worker": {"tools": [], "turns": [{**stream, "delay_s": 0.2}]},
        }
    }


def _wait_for_lines(path: Path, count: int, proc: subprocess.Popen[bytes], limit_s: float) -> int:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before it could be killed"
        if path.exists():
            lines = path.read_bytes().count(b"\n")
            if lines >= count:
                return lines
        time.sleep(0.005)
    raise AssertionError(f"the trace never reached {count} lines")


def _start_run(
    tmp_path: Path, scenario: dict[str, Any], *options: str, stdout: int
) -> tuple[subprocess.Popen[bytes], Path]:
    """A real ``trio-agents run --json`` of *scenario* in a fresh workspace; and the workspace."""
    path = tmp_path / "scenario.json"
    path.write_bytes(orjson.dumps(scenario))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    command = [*CLI, "run", "go", "--scenario", str(path), *options, "--json"]
    command += ["--workspace", str(workspace), "--permission-mode", "allow-all"]
    proc = subprocess.Popen(command, stdout=stdout, stderr=subprocess.DEVNULL, cwd=tmp_path)
    return proc, workspace


# The events of this scenario: root 9 + 4 sub-agent calls' starts; each worker about 45.
@pytest.mark.parametrize("kill_after_lines", [12, 60, 150])
def test_a_run_killed_mid_run_leaves_a_trace_that_reads_back(
    kill_after_lines: int, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    proc, _ = _start_run(
        tmp_path, slow_scenario(), "--trace", str(trace), stdout=subprocess.PIPE
    )
    try:
        seen = _wait_for_lines(trace, kill_after_lines, proc, limit_s=30)
        before_kill = trace.read_bytes()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        stdout = proc.stdout.read() if proc.stdout else b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    data = trace.read_bytes()
    # Nothing that was on disk before the kill is lost or changed.
    assert data.startswith(before_kill[: before_kill.rfind(b"\n") + 1])
    assert data.count(b"\n") >= seen

    errors: list[EventDecodeError] = []
    events = list(read_events(trace, on_error=errors.append))
    assert errors == [], errors
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "a gap in seq"
    assert len(events) == data.count(b"\n"), "only a cut last line may be skipped"

    # The tree: what finished says how; everything else is interrupted.
    (tree,) = load_traces(trace)
    finished_agents = {e.agent_id: e.status for e in events if e.type == "agent_finished"}
    finished_tools = {e.tool_use_id: e.status for e in events if e.type == "tool_finished"}  # type: ignore[attr-defined]
    interrupted = 0
    for e in events:
        if e.type == "agent_started":
            node = tree.find(e.agent_id or "")
            expected = finished_agents.get(e.agent_id, "interrupted")
        elif e.type == "tool_started":
            node = tree.find(e.tool_use_id)  # type: ignore[attr-defined]
            expected = finished_tools.get(e.tool_use_id, "interrupted")  # type: ignore[attr-defined]
        else:
            continue
        assert node is not None
        assert node.status == expected, (node, expected)
        interrupted += expected == "interrupted"
    assert interrupted >= 1, "killed mid-run: something was still running"
    assert tree.status == "interrupted"

    # The --json stream on stdout, cut at its own point, agrees with the trace line for line.
    lines = stdout.splitlines(keepends=True)
    if lines and not lines[-1].endswith(b"\n"):
        lines.pop()
    trace_lines = data.splitlines(keepends=True)
    common = min(len(lines), len(trace_lines))
    assert lines[:common] == trace_lines[:common]
    STATS["kill -9 of a run mid-write: traces read back whole"] += 1
    STATS["events checked"] += len(events)


_WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from runtime.core._messages import Message, TextBlock
    from runtime.cli._sessions import SessionStore, new_session
    store = SessionStore({folder!r})
    session = new_session(workspace="ws", provider="scripted")
    session.id = "kill9"
    n = 0
    print("ready", flush=True)
    while True:
        n += 1
        session.turns = n
        session.messages.append(Message(role="user", content=(TextBlock(text="x" * 5000),)))
        store.save(session)
    """
)


def test_a_session_writer_killed_mid_write_never_leaves_half_a_file(tmp_path: Path) -> None:
    from runtime.cli._sessions import SessionStore

    rng = random.Random(9)
    folder = tmp_path / "sessions"
    store = SessionStore(folder)
    last_turns = 0
    kills = 6
    for _ in range(kills):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER.format(root=str(ROOT), folder=str(folder))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline() == b"ready\n", proc.stderr.read() if proc.stderr else ""
            time.sleep(rng.uniform(0.05, 0.4))
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                if pipe:
                    pipe.close()
        if not store.path_for("kill9").exists():
            continue  # killed before its first save
        session = store.load("kill9")  # raises SessionError on half a file
        assert session.turns >= 1
        assert len(session.messages) == session.turns
        last_turns = session.turns
    assert last_turns >= 1, "no save happened before any kill"
    assert not child_processes()
    STATS["kill -9 session writes survived"] += kills


def test_the_cli_run_command_is_there() -> None:
    # If `run` ever disappears the kill tests would fail for the wrong reason; say so plainly.
    out = subprocess.run([*CLI, "run", "--help"], capture_output=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    assert b"--trace" in out.stdout
    assert b"--scenario" in out.stdout


def test_a_run_killed_mid_bash_call_leaves_no_process_of_it_running(tmp_path: Path) -> None:
    # bash runs in its own session, out of reach of the terminal's signals; when the run dies
    # without stopping it, the warden must. The command's background job is in its group too.
    command = "sleep 300 & echo $! > bg.pid; echo $$ > bash.pid; wait"
    call = {"name": "bash", "input": {"command": command}}
    scenario = {
        "agents": {"main": {"tools": ["bash"], "turns": [{"tool_calls": [call]}, {"text": "ok"}]}}
    }
    proc, workspace = _start_run(tmp_path, scenario, "--no-trace", stdout=subprocess.DEVNULL)
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while len(pids) < 2:
            assert time.monotonic() < deadline, "bash never started"
            assert proc.poll() is None, "the run ended before it could be killed"
            try:
                pids = [int((workspace / name).read_text()) for name in ("bash.pid", "bg.pid")]
            except (FileNotFoundError, ValueError):
                time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(is_running(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not [pid for pid in pids if is_running(pid)], "bash outlived the killed run"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    STATS["kill -9 of a run with bash children: none left orphaned"] += 1


def _json_and_trace_after_kill(
    tmp_path: Path, kill_after: int, *, to_file: bool
) -> tuple[list[bytes], list[bytes]]:
    """Kill a real run as soon as its --json output (a pipe, or a file) shows *kill_after*
    lines; return the complete lines of the --json output and of the trace."""
    trace = tmp_path / "trace.jsonl"
    out_path = tmp_path / "out.jsonl"
    with out_path.open("wb") as out_file:
        proc, _ = _start_run(
            tmp_path,
            slow_scenario(),
            "--trace",
            str(trace),
            stdout=out_file.fileno() if to_file else subprocess.PIPE,
        )
    seen = b""
    try:
        deadline = time.monotonic() + 30
        while seen.count(b"\n") < kill_after:
            assert time.monotonic() < deadline, "the --json output never grew"
            assert proc.poll() is None, "the run ended before it could be killed"
            if to_file:
                seen = out_path.read_bytes()
                time.sleep(0.001)
            else:
                assert proc.stdout is not None
                seen += os.read(proc.stdout.fileno(), 65536)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        if to_file:
            seen = out_path.read_bytes()
        elif proc.stdout is not None:
            seen += proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()

    def complete(data: bytes) -> list[bytes]:
        return data[: data.rfind(b"\n") + 1].splitlines(keepends=True)

    return complete(seen), complete(trace.read_bytes())


@pytest.mark.parametrize("to_file", [False, True], ids=["json-to-a-pipe", "json-to-a-file"])
def test_after_kill_9_the_json_stream_is_never_ahead_of_the_trace(
    tmp_path: Path, to_file: bool
) -> None:
    # Killed right after --json showed something: whatever it showed must be in the trace.
    rng = random.Random(5)
    for round_ in range(5):
        folder = tmp_path / f"round{round_}"
        folder.mkdir()
        shown, traced = _json_and_trace_after_kill(
            folder, rng.randrange(5, 150), to_file=to_file
        )
        assert len(shown) <= len(traced), (
            f"--json showed {len(shown)} events, the trace holds {len(traced)}"
        )
        assert shown == traced[: len(shown)]
        STATS["kill -9 runs: --json not ahead"] += 1
