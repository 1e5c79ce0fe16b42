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
        "run failed in 0.0s · 1 agent · 0 tokens",
        "trio-agents: error: the main agent failed: the model fell over",
    ]
    assert "run failed" not in proc.stdout  # the outcome is stderr's, whatever stdout is


def test_verbose_adds_the_warnings(tmp_path: Path) -> None:
    args = ("run", "go", "--no-trace", "--scenario", str(SCENARIOS / "failing.json"), "-v")
    proc = run(*args, cwd=tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 3, lines
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
    assert err == f"Trace: {trace}\n".encode()  # said at the start; nothing at the end
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


DOCS_SCENARIO = Path(__file__).parent.parent / "docs" / "scenarios.md"


def _docs_example(tmp_path: Path) -> Path:
    """The first scenario of docs/scenarios.md, as a newcomer copies it."""
    import re

    text = DOCS_SCENARIO.read_text(encoding="utf-8")
    match = re.search(r"```json\n(.*?)```", text, re.S)
    assert match is not None
    path = tmp_path / "my-scenario.json"
    path.write_text(match.group(1))
    return path


def test_a_run_whose_calls_the_mode_denied_says_so_in_one_line_with_how_to_allow(
    tmp_path: Path,
) -> None:
    """Without a terminal the default mode is deny: the sleeper's `sleep 30` is refused at once,
    and stderr names the refusal and the flags that allow it (not a silent `completed`)."""
    scenario = _docs_example(tmp_path)
    proc = run("run", "go", "--no-trace", "--scenario", str(scenario), cwd=tmp_path)
    assert proc.returncode == 0
    [note] = [line for line in proc.stderr.splitlines() if "denied" in line]
    assert note == (
        "trio-agents: warning: 1 tool call denied (bash) by permission mode deny (the default "
        "without a terminal): allow such calls with --permission-mode allow-all or "
        "--allow 'bash(sleep *)'"
    )
    # With -v (warnings shown) it is still said once: the library's own line is the CLI's.
    proc = run("-v", "run", "go", "--no-trace", "--scenario", str(scenario), cwd=tmp_path)
    assert len([line for line in proc.stderr.splitlines() if "denied" in line]) == 1
    # A rule the user wrote is the user's choice: nothing to say then.
    proc = run("run", "go", "--no-trace", "--scenario", str(scenario),
               "--deny", "bash", cwd=tmp_path)
    assert not [line for line in proc.stderr.splitlines() if "denied" in line]


def test_ask_mode_with_nobody_to_answer_says_so_too(tmp_path: Path) -> None:
    scenario = _docs_example(tmp_path)
    proc = run("run", "go", "--no-trace", "--scenario", str(scenario),
               "--permission-mode", "ask", cwd=tmp_path)
    [note] = [line for line in proc.stderr.splitlines() if "denied" in line]
    assert "by permission mode ask, with no terminal or --control to answer" in note


async def test_the_python_api_warns_once_per_run_when_the_mode_denies_a_custom_tool(
    tmp_path: Path,
) -> None:
    """A tool that needs permission, in the API's default mode (deny): one warning for the
    run through the library's log, however many calls are refused."""
    import logging
    from collections.abc import Mapping
    from typing import Any, ClassVar

    import structlog

    from runtime import open_runtime
    from runtime.core import Tool, ToolContext

    class Launch(Tool):
        name: ClassVar[str] = "launch"
        description: ClassVar[str] = "launches something"
        input_schema: ClassVar[dict[str, Any]] = {"type": "object"}

        async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
            raise AssertionError("denied calls never run")

    scenario = {"agents": {"main": {"turns": [
        {"tool_calls": [{"name": "launch", "input": {"n": n}} for n in range(3)]},
        {"tool_calls": [{"name": "launch", "input": {"n": 3}}]},
        {"text": "done"}]}}}
    capture = structlog.testing.LogCapture()
    structlog.configure(
        processors=[capture], wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG)
    )
    async with open_runtime(scenario=scenario, extra_tools=[Launch()], workspace=tmp_path,
                            trace=False) as rt:
        outcome = await rt.run("go")
    assert outcome.status == "completed"
    warned = [e for e in capture.entries if e["event"] == "permission.denied_by_mode"]
    assert len(warned) == 1, warned
    [entry] = warned
    assert entry["log_level"] == "warning"
    assert entry["tool"] == "launch"
    assert "permission_mode='allow-all'" in entry["hint"]
    assert "allow=['launch']" in entry["hint"]
