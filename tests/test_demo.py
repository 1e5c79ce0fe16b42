"""``trio-agents demo``: no key, no network, parallel sub-agents doing real work, in ~7 seconds."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import pexpect
import pytest

from runtime import Event, Scenario, decode_event
from runtime.cli._demo import demo_scenario_text
from tests.invariants import check_invariants

ANGLE = "\N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK}"


def read_trace(path: Path) -> list[Event]:
    return [decode_event(line) for line in path.read_bytes().splitlines() if line.strip()]


def test_the_demo_scenario_is_package_data_and_splits_the_work() -> None:
    scenario = Scenario.from_obj(json.loads(demo_scenario_text()))
    first_split = [
        c for t in scenario.agents["main"].turns for c in t.tool_calls if c.name == "agent"
    ]
    assert len(first_split) >= 3
    nested = [
        c for t in scenario.agents["scanner"].turns for c in t.tool_calls if c.name == "agent"
    ]
    assert nested


@pytest.mark.slow  # about 7 s of real work, and its wall time is asserted
def test_demo_without_a_terminal_does_real_work_in_parallel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from runtime.cli._main import main

    monkeypatch.chdir(tmp_path)
    t0 = time.monotonic()
    assert main(["demo"]) == 0
    wall = time.monotonic() - t0
    captured = capsys.readouterr()
    out, err = captured.out.splitlines(), captured.err.splitlines()
    print(f"\ndemo wall time: {wall:.1f}s")
    # The tester's integration check alone takes ~10 s (long enough to try Ctrl+C on); the
    # other sub-agents run alongside it (checked on the trace below), so the whole stays close.
    assert wall < 18
    workspace = Path(out[0].rsplit(" ", 1)[1])
    assert not workspace.exists()  # the demo cleans up its project
    assert f"[main {ANGLE} scanner {ANGLE} triager] agent started: triage cart.py" in out
    traces = list((tmp_path / ".trio-agents" / "traces").glob("*.jsonl"))
    assert len(traces) == 1
    # stderr: the trace's path as the run starts, and at its end the outcome with the trace.
    assert err[0] == f"Trace: {traces[0].relative_to(tmp_path)}"
    assert err[-3].startswith("run completed in ")
    assert err[-2:] == [
        f"Trace: {traces[0].relative_to(tmp_path)}",
        f"Inspect it: trio-agents trace show {traces[0].relative_to(tmp_path)}",
    ]
    # Nothing cancelled: the summary is the script's own, its test line included.
    assert "- **Tests**: see the tester's report in the tree" in out[-2]
    events = read_trace(traces[0])
    check_invariants(events)
    started = [e for e in events if e.type == "agent_started"]
    children = [e for e in started if e.depth == 1]  # type: ignore[attr-defined]
    assert len(children) >= 3
    first_end = min(e.seq for e in events if e.type == "agent_finished")
    assert all(e.seq < first_end for e in children)  # all three ran at the same time
    assert any(e.depth == 2 for e in started)  # type: ignore[attr-defined]
    outputs = {
        (e.name, e.status): e.output  # type: ignore[attr-defined]
        for e in events
        if e.type == "tool_finished"
    }
    assert {name for name, status in outputs if status == "ok"} >= {"glob", "grep", "read", "bash"}
    assert "src/shop/cart.py" in outputs["grep", "ok"]
    bash = [e.output for e in events if e.type == "tool_finished" and e.name == "bash"]  # type: ignore[attr-defined]
    assert any("OK" in o for o in bash)  # the project's unit tests ran, and passed
    assert any("integration check passed" in o for o in bash)
    assert [e.status for e in events if e.type == "agent_finished"] == ["completed"] * len(started)  # type: ignore[attr-defined]


def test_demo_refuses_a_workspace_that_is_not_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from runtime.cli._main import main

    (tmp_path / "precious.txt").write_text("keep me")
    assert main(["demo", "--workspace", str(tmp_path)]) == 2
    assert "the demo needs an empty or new folder" in capsys.readouterr().err
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_demo_on_a_terminal_ctrl_c_cancels_the_slow_tester_alone(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["TERM"] = "xterm-256color"
    env.pop("NO_COLOR", None)
    trace = tmp_path / "demo.jsonl"
    child = pexpect.spawn(
        sys.executable,
        ["-m", "runtime", "demo", "--trace", str(trace)],
        cwd=str(tmp_path),
        env=env,
        dimensions=(50, 160),
        encoding="utf-8",
        codec_errors="replace",
        timeout=20,
    )
    try:
        child.expect("while the tester runs")
        child.expect(r"tester tu-1\.3")  # the banner names the one to pick (issue 21, item 15)
        child.expect("bash: sh scripts/integration.sh")  # the slow part is under way
        child.sendintr()
        child.expect(r"\[(\d+)\] tester (tu-[\d.]+) run unit \+ integration tests")
        number, tool_use_id = child.match.group(1), child.match.group(2)
        child.expect("cancel> ")
        child.sendline(number)
        child.expect(f"Cancelling tester {tool_use_id}")
        child.expect("Review of")  # the final answer, under the final tree
        child.expect(re.escape(f"Inspect it: trio-agents trace show {trace}"))
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    events = read_trace(trace)
    check_invariants(events)
    finished = {e.agent_id: e.status for e in events if e.type == "agent_finished"}  # type: ignore[attr-defined]
    names = {e.agent_id: e.name for e in events if e.type == "agent_started"}  # type: ignore[attr-defined]
    by_name = {names[a]: s for a, s in finished.items()}
    assert by_name == {
        "main": "completed",
        "scanner": "completed",
        "triager": "completed",
        "tester": "cancelled",
        "reader": "completed",
        "linter": "completed",
    }
    # The summary says what became of the tests; it points at no tester's report.
    main = next(e for e in events if e.type == "agent_finished" and e.parent_tool_use_id is None)
    assert "see the tester's report" not in main.result  # type: ignore[attr-defined]
    assert main.result.endswith(  # type: ignore[attr-defined]
        "- **Tests**: not run to the end: the tester was cancelled (picked with Ctrl+C); its "
        "partial work is in the tree above."
    )
    assert main.result.startswith("Review of **shop**")  # type: ignore[attr-defined]


@pytest.mark.slow  # waits for the tester's ten-second integration check: a stop lets it finish
def test_demo_on_a_terminal_s_and_a_number_stops_the_tester_with_its_work_kept(
    tmp_path: Path,
) -> None:
    env = dict(os.environ)
    env["TERM"] = "xterm-256color"
    env.pop("NO_COLOR", None)
    trace = tmp_path / "demo.jsonl"
    child = pexpect.spawn(
        sys.executable, ["-m", "runtime", "demo", "--trace", str(trace)], cwd=str(tmp_path),
        env=env, dimensions=(50, 160), encoding="utf-8", codec_errors="replace", timeout=30,
    )  # fmt: skip
    try:
        child.expect("type s and its number")
        child.expect("bash: sh scripts/integration.sh")
        child.sendintr()
        child.expect(r"\[(\d+)\] tester (tu-[\d.]+) run unit \+ integration tests")
        number, tool_use_id = child.match.group(1), child.match.group(2)
        child.expect("cancel> ")
        child.send(f"s{number}")
        child.expect(f"Stopping tester {tool_use_id}")
        child.expect("Review of")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    events = read_trace(trace)
    check_invariants(events)
    names = {e.agent_id: e.name for e in events if e.type == "agent_started"}  # type: ignore[attr-defined]
    by_name = {names[e.agent_id]: e.status for e in events if e.type == "agent_finished"}  # type: ignore[attr-defined]
    assert by_name == {"main": "completed", "scanner": "completed", "triager": "completed",
                       "tester": "stopped", "reader": "completed", "linter": "completed"}
    bash = [e.output for e in events if e.type == "tool_finished" and e.name == "bash"]  # type: ignore[attr-defined]
    assert any("integration check passed" in o for o in bash)  # the call under way finished
    background = [e for e in events if e.type == "agent_started" and e.background]  # type: ignore[attr-defined]
    assert [names[e.agent_id] for e in background] == ["linter"]
    main = next(e for e in events if e.type == "agent_finished" and e.parent_tool_use_id is None)
    assert "- **Docstrings** (checked in the background)" in main.result  # type: ignore[attr-defined]
    assert main.result.endswith(  # type: ignore[attr-defined]
        "- **Tests**: not run to the end: the tester was stopped (stopped with Ctrl+C); its "
        "partial work is in the tree above."
    )
