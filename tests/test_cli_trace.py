"""`trio-agents trace show|stats|tail|export`: in process (main(argv)) and as a real command."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from trace_factory import AgentSpec, agent_call, run_events, small_run, write_trace

from runtime.cli._trace_cmd import main

CLI = Path(sys.executable).parent / "trio-agents"


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "run.jsonl"
    write_trace(path, run_events(small_run(), order="time"))
    return path


def lines_of(dicts: Any) -> bytes:
    return b"".join(orjson.dumps(d, option=orjson.OPT_APPEND_NEWLINE) for d in dicts)


def run_cli(
    *args: str, timeout: float = 30, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLI), "trace", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


# ---------------------------------------------------------------------------- show


def test_show_draws_the_tree(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "✓ main agent_1" in out
    assert "⊘ sleeper agent_1.2 cancelled" in out
    assert "cancelled by user: taking too long" in out
    assert "\x1b[" not in out  # not a terminal: no colour codes


def test_show_json_is_the_spec_tree(
    trace: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    assert main(["show", "--json", str(trace)]) == 0
    out = capsysbinary.readouterr().out
    (line,) = out.splitlines()
    data = orjson.loads(line)
    assert list(data)[:2] == ["run_id", "status"]
    (root,) = data["roots"]
    assert list(root)[:8] == [
        "kind",
        "id",
        "name",
        "status",
        "parent_tool_use_id",
        "duration_s",
        "input_tokens",
        "output_tokens",
    ]
    call = root["children"][1]
    assert list(call)[:5] == ["kind", "id", "name", "status", "duration_s"]
    assert call["children"][0]["parent_tool_use_id"] == call["id"]
    assert call["cancel"] == {
        "reason": "taking too long",
        "by": "user",
        "ts": pytest.approx(call["cancel"]["ts"]),
    }


def test_show_filters(trace: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert main(["show", "--json", "--subtree", "agent_1.1", str(trace)]) == 0
    data = orjson.loads(capsysbinary.readouterr().out)
    assert [r["name"] for r in data["roots"]] == ["worker"]
    assert main(["show", "--json", "--max-depth", "0", str(trace)]) == 0
    data = orjson.loads(capsysbinary.readouterr().out)
    assert all(c["children"] == [] for c in data["roots"][0]["children"])
    assert main(["show", "--json", "--status", "denied", str(trace)]) == 0
    data = orjson.loads(capsysbinary.readouterr().out)
    assert [c["name"] for c in data["roots"][0]["children"]] == ["write"]


def test_show_timeline_and_no_color(
    trace: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert main(["show", "--timeline", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "█" in out
    assert "\x1b[" in out
    assert main(["show", "--no-color", str(trace)]) == 0
    assert "\x1b[" not in capsys.readouterr().out
    monkeypatch.setenv("NO_COLOR", "1")
    assert main(["show", str(trace)]) == 0
    assert "\x1b[" not in capsys.readouterr().out


def test_show_an_unknown_subtree_is_bad_usage(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", "--subtree", "nope", str(trace)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "no agent or tool call with id 'nope'" in err


# ---------------------------------------------------------------------------- stats


def test_stats_json(trace: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert main(["stats", "--json", str(trace)]) == 0
    (run,) = orjson.loads(capsysbinary.readouterr().out)["runs"]
    assert run["agents"] == 4
    assert run["tool_calls"] == 7
    assert run["by_agent_type"]["main"]["count"] == 1
    assert run["by_status"]["completed"]["count"] == 2
    assert run["by_status"]["completed"]["duration_s"]["max"] == pytest.approx(3.001)
    assert run["tools"]["agent"]["statuses"] == {"cancelled": 1, "error": 1, "ok": 1}
    assert run["tools"]["write"]["statuses"] == {"denied": 1}
    assert run["max_parallel_agents"]["count"] == 4
    assert [(s["kind"], s["name"]) for s in run["critical_path"]] == [
        ("agent", "main"),
        ("tool", "agent"),
        ("agent", "sleeper"),
        ("tool", "bash"),
        ("tool", "write"),
    ]
    assert run["permission_wait"]["requests"] == 1
    assert run["permission_wait"]["wall_s"] == pytest.approx(0.5)
    assert 0 < run["permission_wait"]["share_of_wall"] < 1
    assert run["input_tokens"] == 800


def test_stats_text(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", str(trace)]) == 0
    out = capsys.readouterr().out
    for words in (
        "agents by type",
        "agents by status",
        "tool calls",
        "most agents running at once: 4",
        "critical path",
        "waiting for permission",
    ):
        assert words in out


def test_most_agents_at_once_counts_parallel_siblings(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    spec = AgentSpec(turns=[[agent_call(AgentSpec(name=f"w{i}")) for i in range(7)]])
    path = tmp_path / "t.jsonl"
    write_trace(path, run_events(spec))
    assert main(["stats", "--json", str(path)]) == 0
    assert (
        orjson.loads(capsysbinary.readouterr().out)["runs"][0]["max_parallel_agents"]["count"] == 8
    )


# ---------------------------------------------------------------------------- export


def test_export_otlp_json(trace: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert main(["export", "--format", "otlp-json", str(trace)]) == 0
    lines = capsysbinary.readouterr().out.splitlines()
    spans = []
    for line in lines:
        request = orjson.loads(line)
        (resource_spans,) = request["resourceSpans"]
        attrs = {a["key"]: a["value"] for a in resource_spans["resource"]["attributes"]}
        assert attrs["service.name"] == {"stringValue": "trio-agents"}
        (scope_spans,) = resource_spans["scopeSpans"]
        spans += scope_spans["spans"]
    assert len(spans) == 4 + 7 + 8  # agents, tool calls, model calls
    ids = {s["spanId"] for s in spans}
    assert len({s["traceId"] for s in spans}) == 1
    for span in spans:
        assert re.fullmatch(r"[0-9a-f]{32}", span["traceId"])
        assert re.fullmatch(r"[0-9a-f]{16}", span["spanId"])
        assert isinstance(span["startTimeUnixNano"], str)
        assert int(span["endTimeUnixNano"]) >= int(span["startTimeUnixNano"])
        assert span["kind"] == (3 if span["name"].startswith("chat") else 1)
        assert span["status"]["code"] in (0, 1, 2)
        assert span.get("parentSpanId", next(iter(ids))) in ids
    by_op: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        attrs = {a["key"]: a["value"] for a in span["attributes"]}
        by_op.setdefault(attrs["gen_ai.operation.name"]["stringValue"], []).append(attrs)
    assert len(by_op["invoke_agent"]) == 4
    assert len(by_op["execute_tool"]) == 7
    assert len(by_op["chat"]) == 8  # one per turn_finished: main 3, worker 2, sleeper 2, flaky 1
    main_attrs = next(
        a for a in by_op["invoke_agent"] if a["gen_ai.agent.name"]["stringValue"] == "main"
    )
    assert main_attrs["gen_ai.agent.id"] == {"stringValue": "agent_1"}
    assert main_attrs["gen_ai.usage.input_tokens"] == {"intValue": "300"}
    assert main_attrs["gen_ai.usage.output_tokens"] == {"intValue": "60"}
    assert {a["gen_ai.tool.name"]["stringValue"] for a in by_op["execute_tool"]} == {
        "agent",
        "bash",
        "write",
        "read",
    }
    assert all("gen_ai.tool.call.id" in a for a in by_op["execute_tool"])
    sleeper = next(s for s in spans if s["name"] == "invoke_agent sleeper")
    assert sleeper["status"]["code"] == 2
    worker = next(s for s in spans if s["name"] == "invoke_agent worker")
    call = next(s for s in spans if s["spanId"] == worker["parentSpanId"])
    assert call["name"] == "execute_tool agent"
    root = next(s for s in spans if s["name"] == "invoke_agent main")
    assert "parentSpanId" not in root
    assert call["parentSpanId"] == root["spanId"]


def test_export_mermaid_to_a_file(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "tree.mmd"
    assert main(["export", "--format", "mermaid", "-o", str(out), str(trace)]) == 0
    text = out.read_text()
    assert text.startswith("flowchart TD\n")
    assert text.count(" --> ") == 4 + 7 - 1


# ---------------------------------------------------------------------------- broken files (issue #7 item 5)


def test_an_empty_file_is_exit_2_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    assert main(["show", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"trio-agents: error: {path}: empty trace file\n"


def test_a_missing_file_or_not_a_trace_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["stats", str(tmp_path / "nope.jsonl")]) == 2
    assert capsys.readouterr().err.endswith("no such file\n")
    readme = tmp_path / "README.md"
    readme.write_text("# hello\n\nnot a trace\n")
    assert main(["show", str(readme)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "not a trace file" in err


def test_garbage_lines_are_warned_about_and_the_rest_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dicts = list(run_events(small_run()))
    path = tmp_path / "t.jsonl"
    path.write_bytes(lines_of(dicts[:5]) + b"%%% garbage %%%\n" + lines_of(dicts[5:]))
    assert main(["show", str(path)]) == 0
    captured = capsys.readouterr()
    assert "✓ main agent_1" in captured.out
    assert captured.err.splitlines() == [
        f"trio-agents: warning: {path}: line 6: not JSON: '%%% garbage %%%'"
    ]


def test_warnings_are_capped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dicts = list(run_events(small_run()))
    path = tmp_path / "t.jsonl"
    path.write_bytes(lines_of(dicts[:5]) + b"junk\n" * 50 + lines_of(dicts[5:]))
    assert main(["stats", str(path)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 21
    assert err[-1].endswith("30 more")


def test_a_truncated_trace_shows_interrupted_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = lines_of(run_events(small_run()))
    path = tmp_path / "t.jsonl"
    path.write_bytes(data[: len(data) // 2])
    assert main(["show", str(path)]) == 0
    captured = capsys.readouterr()
    assert "⚠" in captured.out
    assert "interrupted" in captured.out
    assert "cut short" in captured.err


def test_newer_event_types_are_skipped_with_one_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dicts = list(run_events(small_run()))
    future = [dict(dicts[3], type="hologram_started", seq=100 + i) for i in range(3)]
    path = tmp_path / "t.jsonl"
    path.write_bytes(lines_of(dicts[:4] + future + dicts[4:]))
    assert main(["show", str(path)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert "line 5: unknown event type 'hologram_started'" in err[0]


def test_two_runs_in_one_file_are_both_shown(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(
        lines_of(run_events(small_run(), run_id="run_a"))
        + lines_of(run_events(AgentSpec(name="solo"), run_id="run_b"))
    )
    assert main(["show", "--json", str(path)]) == 0
    assert [
        orjson.loads(line)["run_id"] for line in capsysbinary.readouterr().out.splitlines()
    ] == ["run_a", "run_b"]
    assert main(["show", str(path)]) == 0
    out = capsysbinary.readouterr().out.decode()
    assert "run run_a" in out
    assert "run run_b" in out


def test_bad_usage_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["show"]) == 2
    assert main(["show", "x", "--max-depth", "-1"]) == 2
    assert main(["export", "x", "--format", "svg"]) == 2
    assert main(["--help"]) == 0


# ---------------------------------------------------------------------------- real commands


def test_show_as_a_real_command(trace: Path) -> None:
    proc = run_cli("show", str(trace))
    assert proc.returncode == 0, proc.stderr
    assert "✓ main agent_1" in proc.stdout
    proc = run_cli("show", "--json", str(trace))
    assert orjson.loads(proc.stdout)["status"] == "completed"


def test_stats_as_a_real_command(trace: Path) -> None:
    proc = run_cli("stats", "--json", str(trace))
    assert proc.returncode == 0, proc.stderr
    assert orjson.loads(proc.stdout)["runs"][0]["agents"] == 4


def test_export_as_a_real_command(trace: Path) -> None:
    proc = run_cli("export", "--format", "mermaid", str(trace))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("flowchart TD")


def test_errors_as_a_real_command_print_no_traceback(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_bytes(b"")
    proc = run_cli("show", str(tmp_path / "empty.jsonl"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr


def test_tail_prints_a_finished_trace_and_exits_0(trace: Path) -> None:
    proc = run_cli("tail", str(trace))
    assert proc.returncode == 0, proc.stderr
    assert "▶ main agent_1 started" in proc.stdout
    assert proc.stdout.rstrip().endswith("run run_0001 completed in 3.0s")


def test_tail_follows_a_growing_trace_until_the_run_finishes(tmp_path: Path) -> None:
    dicts = list(run_events(small_run()))
    path = tmp_path / "t.jsonl"
    data = lines_of(dicts[:-1])
    path.write_bytes(data[:-10])  # the writer is in the middle of a line
    proc = subprocess.Popen(
        [str(CLI), "trace", "tail", "--poll", "0.02", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "run run_0001 started" in first
        with path.open("ab") as f:
            f.write(data[-10:])
            f.flush()
            # `trace tail` is a real subprocess: give it a poll with the line still cut short.
            time.sleep(0.1)
            f.write(lines_of(dicts[-1:]))
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.rstrip().endswith("completed in 3.0s")
    assert err == ""


def test_tail_exits_130_on_ctrl_c_without_a_traceback(tmp_path: Path) -> None:
    dicts = list(run_events(small_run()))
    path = tmp_path / "t.jsonl"
    path.write_bytes(lines_of(dicts[:20]))
    proc = subprocess.Popen(
        [str(CLI), "trace", "tail", "--poll", "0.02", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert "started" in proc.stdout.readline()  # it is following now
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert "Traceback" not in err


def test_tail_in_a_missing_folder_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tail", str(tmp_path / "nowhere" / "nope.jsonl")]) == 2
    assert "no such file, and no folder" in capsys.readouterr().err


def test_tail_waits_for_a_trace_not_created_yet(tmp_path: Path) -> None:
    """Issue 21, item 9: as `tail -F`, `trace tail` started before the run waits for its file,
    saying so in one line on a terminal."""
    pexpect = pytest.importorskip("pexpect")
    dicts = list(run_events(small_run()))
    path = tmp_path / "later.jsonl"
    child = pexpect.spawn(
        str(CLI),
        ["trace", "tail", "--poll", "0.02", str(path)],
        encoding="utf-8",
        dimensions=(40, 160),
        timeout=20,
    )
    try:
        child.expect("waiting for ")
        path.write_bytes(lines_of(dicts))
        child.expect("run run_0001")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


# ---------------------------------------------------------------------------- tail on a terminal


def test_tail_on_a_terminal_shows_the_live_tree_until_the_run_finishes(tmp_path: Path) -> None:
    pexpect = pytest.importorskip("pexpect")
    dicts = list(run_events(small_run()))
    path = tmp_path / "t.jsonl"
    path.write_bytes(lines_of(dicts[:30]))
    child = pexpect.spawn(
        str(CLI),
        ["trace", "tail", "--poll", "0.02", str(path)],
        encoding="utf-8",
        dimensions=(40, 160),
        timeout=20,
    )
    try:
        child.expect("run run_0001")
        child.expect("agent_1")
        with path.open("ab") as f:
            f.write(lines_of(dicts[30:]))
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert "Traceback" not in (child.before or "")


def test_tail_on_a_terminal_exits_130_on_ctrl_c(tmp_path: Path) -> None:
    pexpect = pytest.importorskip("pexpect")
    path = tmp_path / "t.jsonl"
    path.write_bytes(lines_of(list(run_events(small_run()))[:30]))
    child = pexpect.spawn(
        str(CLI), ["trace", "tail", str(path)], encoding="utf-8", dimensions=(40, 160), timeout=20
    )
    try:
        child.expect("agent_1")
        child.sendintr()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 130
    assert "Traceback" not in (child.before or "")


@pytest.mark.parametrize("fmt", ["otlp-json", "mermaid"])
def test_export_masks_the_secrets_it_knows_even_in_an_old_unmasked_trace(
    tmp_path: Path, fmt: str
) -> None:
    # A trace written before masking existed (or by a run that did not know the key).
    path = tmp_path / "old.jsonl"
    events = list(run_events(small_run(), order="time"))
    for event in events:
        if event["type"] == "agent_started":
            event["prompt"] = "deploy with sk-export-0123456789"
        if event["type"] == "tool_started":
            event["summary"] = "bash: curl -H 'key: sk-export-0123456789'"
    write_trace(path, events)
    out = run_cli("export", str(path), "--format", fmt, env={"MY_API_KEY": "sk-export-0123456789"})
    assert out.returncode == 0, out.stderr
    assert "sk-export" not in out.stdout
    plain = run_cli("export", str(path), "--format", fmt)
    assert plain.returncode == 0
    assert "sk-export-0123456789" in plain.stdout  # it was there to be masked


# ---------------------------------------------------------------------------- attacks (issue 15)


def _ev(kind: str, seq: int, agent: str | None, ptu: str | None, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "seq": seq, "ts": 1.0 + seq, "run_id": "r", "agent_id": agent,
            "parent_tool_use_id": ptu, **fields}


def _started(seq: int, agent: str, ptu: str | None, parent: str | None) -> dict[str, Any]:
    return _ev("agent_started", seq, agent, ptu, name="w", parent_agent_id=parent,
               depth=0 if ptu is None else 1, prompt="p")


def _call(seq: int, agent: str, tool_use_id: str) -> dict[str, Any]:
    return _ev("tool_started", seq, agent, None, tool_use_id=tool_use_id, name="agent",
               input={"description": "d", "prompt": "p"}, summary="agent: d")


def _chain(depth: int) -> list[dict[str, Any]]:
    """A run whose agents form one chain *depth* agents deep, every one finished."""
    events = [_ev("run_started", 1, None, None, version="0", config={})]
    for i in range(depth):
        parent = f"t{i - 1}" if i else None
        events.append(_started(len(events) + 1, f"a{i}", parent, f"a{i - 1}" if i else None))
        if i < depth - 1:
            events.append(_call(len(events) + 1, f"a{i}", f"t{i}"))
    for i in reversed(range(depth)):
        parent = f"t{i - 1}" if i else None
        events.append(_ev("agent_finished", len(events) + 1, f"a{i}", parent, status="completed",
                          result="ok", error=None, turns=1, input_tokens=1, output_tokens=1,
                          duration_s=1.0))
        if i:
            events.append(_ev("tool_finished", len(events) + 1, f"a{i - 1}", None,
                              tool_use_id=f"t{i - 1}", name="agent", status="ok", output="ok",
                              duration_s=1.0))
    events.append(_ev("run_finished", len(events) + 1, None, None, status="completed",
                      duration_s=1.0))
    return events


@pytest.mark.parametrize("depth", [70, 1000])
def test_every_command_handles_a_tree_deeper_than_json_nesting_limits(
    tmp_path: Path, depth: int, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_bytes(lines_of(_chain(depth)))
    for argv in (
        ["show", "--json", str(path)],
        ["show", "--json", "--status", "completed", str(path)],
        ["show", "--json", "--max-depth", "400", str(path)],
        ["show", str(path)],
        ["show", "--timeline", str(path)],
        ["stats", "--json", str(path)],
        ["export", "--format", "mermaid", str(path)],
        ["export", "--format", "otlp-json", str(path)],
    ):
        assert main(argv) == 0, argv
        out, err = capsysbinary.readouterr()
        assert b"Recursion" not in err, argv
        assert b"internal error" not in err, argv
    assert main(["show", "--json", str(path)]) == 0
    out = capsysbinary.readouterr().out
    assert out.count(b'"kind":"agent"') == depth
    if depth * 4 < 900:  # within what the stdlib parser's recursion takes
        import json

        node = json.loads(out)["roots"][0]
        for _ in range(depth - 1):
            node = node["children"][0]["children"][0]
        assert node["id"] == f"a{depth - 1}"


def test_agents_whose_parents_form_a_cycle_are_shown_under_broken_links_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cycle.jsonl"
    path.write_bytes(lines_of([
        _ev("run_started", 1, None, None, version="0", config={}),
        _started(2, "main", None, None),
        _started(3, "a", "t2", "b"),  # a's parent call t2 is b's ...
        _call(4, "a", "t1"),
        _started(5, "b", "t1", "a"),  # ... and b's parent call t1 is a's
        _call(6, "b", "t2"),
    ]))
    assert main(["show", "--no-color", str(path)]) == 0
    captured = capsys.readouterr()
    assert "broken links" in captured.out
    assert " a " in captured.out or "w a" in captured.out
    assert " b " in captured.out or "w b" in captured.out
    assert captured.err.count("whose parents form a cycle") == 1, captured.err
    assert captured.err.count("warning") == 1, captured.err
    assert main(["show", "--json", str(path)]) == 0
    shown = orjson.loads(capsys.readouterr().out)
    ids = [root["id"] for root in shown["roots"]]
    assert ids[0] == "main"
    assert len(ids) == 2
    for argv in (["stats", "--json"], ["show", "--timeline"], ["show", "--status", "running"],
                 ["export", "--format", "mermaid"], ["export", "--format", "otlp-json"]):
        assert main([*argv, str(path)]) == 0, argv
        assert "internal error" not in capsys.readouterr().err


def test_reversed_seq_and_duplicate_ids_get_one_warning_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "odd.jsonl"
    events = [
        _ev("run_started", 1, None, None, version="0", config={}),
        _started(2, "main", None, None),
        _started(3, "main", None, None),  # a duplicate id
        _call(9, "main", "t1"),
        _call(5, "main", "t1"),  # seq goes back, and a duplicate call id
        _call(4, "main", "t2"),  # seq goes back again
    ]
    path.write_bytes(lines_of(events))
    assert main(["show", str(path)]) == 0
    err = capsys.readouterr().err
    assert err.count("seq goes back on 2 lines") == 1, err
    assert err.count("2 events name a node a second time") == 1, err
    assert err.count("warning") == 2, err
