"""A newcomer's stderr (issue 21, item 3): only the one-line outcome unless -v or --debug; a
reader that closes stdout (``| head``) ends the run quietly, as ``cat`` ends.

Real subprocesses with real pipes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import decode_event
from tests.invariants import check_invariants

SCENARIOS = Path(__file__).parent / "scenarios"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtime", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


def test_a_failing_run_prints_only_its_outcome_on_stderr(tmp_path: Path) -> None:
    proc = run("run", "go", "--no-trace", "--scenario", str(SCENARIOS / "failing.json"), cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "trio-agents: error: the main agent failed: the model fell over"
    ]


def test_verbose_adds_the_warnings(tmp_path: Path) -> None:
    args = ("run", "go", "--no-trace", "--scenario", str(SCENARIOS / "failing.json"), "-v")
    proc = run(*args, cwd=tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 2, lines
    assert "provider failed" in lines[0]


def test_a_reader_that_closes_the_pipe_ends_the_run_quietly(tmp_path: Path) -> None:
    """``demo --json | head -2``: exit 0, nothing on stderr, and the trace still whole."""
    trace = tmp_path / "t.jsonl"
    with subprocess.Popen(
        [sys.executable, "-m", "runtime", "demo", "--json", "--trace", str(trace)],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        first = proc.stdout.readline()
        second = proc.stdout.readline()
        proc.stdout.close()  # what head does after its lines
        err = proc.stderr.read()
        code = proc.wait(timeout=30)
    assert b'"run_started"' in first
    assert second
    assert code == 0
    assert err == b""
    events = [decode_event(line) for line in trace.read_bytes().splitlines()]
    check_invariants(events)
    assert events[-1].type == "run_finished"
    # It ended because the reader left, not by playing to its end (the demo takes ~13 s).
    assert events[-1].status == "cancelled"  # type: ignore[attr-defined]
    root_end = [e for e in events if e.type == "agent_finished" and e.parent_tool_use_id is None]
    assert "stdout closed by its reader" in (root_end[-1].error or "")  # type: ignore[attr-defined]


def test_plain_lines_into_a_closed_pipe_end_the_run_quietly(tmp_path: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "runtime", "demo", "--no-trace"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read()
        code = proc.wait(timeout=30)
    assert (code, err) == (0, b"")


@pytest.mark.parametrize(
    "args",
    [("config",), ("config", "--json"), ("agents",), ("agents", "--json"), ("--help",)],
)
def test_listing_commands_into_a_closed_pipe_end_quietly(tmp_path: Path, args: tuple[str, ...]) -> None:
    """``trio-agents config | head -2`` where head left before the first write: exit 0, no
    traceback (a closed pipe is not an error of the command's)."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "runtime", *args],
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert proc.stderr == b""
    assert proc.returncode == 0
