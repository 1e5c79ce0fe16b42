"""Resuming a killed run from its trace (docs/resume.md).

The key property is checked against real crashes: a scripted run with parallel sub-agents whose
``bash`` calls append to a file is killed with SIGKILL (in a subprocess, at a random line of its
trace), resumed (and maybe killed and resumed again), and must end with the uninterrupted run's
tree shape, statuses, results and usage, with every side-effect line written at most once. The
rules (interrupted calls, cut turns, permissions, bad input) are checked in-process on traces
cut where the rule applies: a trace cut at a line is what a process killed after writing it
leaves.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import FunctionProvider, ToolCall, TraceTree, open_runtime, read_events, tool
from runtime.core import ConfigError, ToolError, TraceError
from runtime.replay import INTERRUPTED_TEXT, load_resume

CLI = [sys.executable, "-m", "runtime"]

# Two parallel workers, each appending three lines through bash (not idempotent) and reading one
# back with grep (read-only); fixed usage, so the token totals of a resumed run can be compared.
USAGE = {"input_tokens": 10, "output_tokens": 5}


def _worker(tag: str) -> dict[str, Any]:
    calls = [
        {"tool_calls": [{"name": "bash", "input": {"command": f"sleep 0.05; echo {tag}{i} >> side.txt"}}],
         "usage": USAGE}
        for i in range(1, 4)
    ]
    grep = {"tool_calls": [{"name": "grep", "input": {"pattern": f"{tag}1", "path": "."}}],
            "usage": USAGE}
    return {"tools": ["bash", "grep"], "turns": [*calls, grep, {"text": f"{tag} done", "usage": USAGE}]}


SCENARIO: dict[str, Any] = {"agents": {
    "main": {"turns": [
        {"text": "Splitting.", "usage": USAGE, "tool_calls": [
            {"name": "agent", "input": {"description": "a", "prompt": "do a", "agent": "wa"}},
            {"name": "agent", "input": {"description": "b", "prompt": "do b", "agent": "wb"}}]},
        {"text": "All done.", "usage": USAGE}]},
    "wa": _worker("a"),
    "wb": _worker("b"),
}}


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env,
        check=False,
    )


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TRIO_AGENTS_DEBUG", None)
    return env


def _start(args: list[str], cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*CLI, *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL, env=_env(),
    )


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _kill_at(proc: subprocess.Popen[bytes], trace: Path, line: int) -> None:
    """SIGKILL *proc* once *trace* has *line* lines (or when it ends by itself)."""
    deadline = time.monotonic() + 60
    while proc.poll() is None and _lines(trace) < line and time.monotonic() < deadline:
        time.sleep(0.005)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def _shape(trace: Path) -> Any:
    """The tree without ids or times: per agent its name, status, result, turns' usage and its
    calls (name, and for `agent` calls, the sub-agent)."""
    tree = TraceTree.from_events(read_events(trace))

    def agent(node: Any) -> Any:
        return {
            "name": node.name, "status": node.status, "result": node.result,
            "tokens": (node.input_tokens, node.output_tokens),
            "calls": [
                (c.name, [agent(a) for a in c.children]) for c in node.children
            ],
        }

    assert tree.run_status is not None
    return tree.run_status, [agent(r) for r in tree.roots]


def _bash_ok(trace: Path) -> list[str]:
    """The tag each bash call that finished ok appended."""
    started: dict[str, str] = {}
    done = []
    for ev in read_events(trace):
        if ev.type == "tool_started" and ev.name == "bash":  # type: ignore[attr-defined]
            started[ev.tool_use_id] = ev.input["command"].split("echo ")[1].split()[0]  # type: ignore[attr-defined]
        elif ev.type == "tool_finished" and ev.tool_use_id in started and ev.status == "ok":  # type: ignore[attr-defined]
            done.append(started[ev.tool_use_id])  # type: ignore[attr-defined]
    return done


def _check_whole(trace: Path) -> None:
    """Every line is an event, seq goes 1, 2, … with no gap, one run_started, one run_finished."""
    seqs = [orjson.loads(line)["seq"] for line in trace.read_bytes().splitlines()]
    assert seqs == list(range(1, len(seqs) + 1))
    kinds = [e.type for e in read_events(trace)]
    assert kinds.count("run_started") == 1
    assert kinds.count("run_finished") == 1
    assert kinds[-1] == "run_finished"


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, int]:
    """The uninterrupted run: its shape and how many lines its trace has."""
    root = tmp_path_factory.mktemp("baseline")
    (root / "s.json").write_text(json.dumps(SCENARIO))
    (root / "ws").mkdir()
    done = _cli("run", "--scenario", "s.json", "--workspace", "ws", "--trace", "t.jsonl",
                "--permission-mode", "allow-all", "go", cwd=root, env=_env())
    assert done.returncode == 0, done.stderr
    trace = root / "t.jsonl"
    assert sorted((root / "ws" / "side.txt").read_text().split()) == sorted(
        f"{t}{i}" for t in "ab" for i in (1, 2, 3)
    )
    return _shape(trace), _lines(trace)


def _crash_and_resume(root: Path, kills: list[int]) -> Path | None:
    """Run, kill at line kills[0]; resume, kill at kills[1]…; the last resume runs to its end.
    None: the run was killed before its root agent started (its prompt is not in the trace,
    so there is nothing to resume: refused, exit 2)."""
    (root / "s.json").write_text(json.dumps(SCENARIO))
    (root / "ws").mkdir()
    trace = root / "t.jsonl"
    run = ["run", "--scenario", "s.json", "--workspace", "ws", "--trace", "t.jsonl",
           "--permission-mode", "allow-all", "go"]
    resume = ["resume", "t.jsonl", "--workspace", "ws", "--permission-mode", "allow-all"]
    _kill_at(_start(run, root), trace, kills[0])
    if b'"agent_started"' not in trace.read_bytes():
        refused = _cli(*resume, cwd=root, env=_env())
        assert refused.returncode == 2
        assert "has no agent to resume" in refused.stderr
        return None
    for line in kills[1:]:
        _kill_at(_start(resume, root), trace, _lines(trace) + line)
    done = _cli(*resume, cwd=root, env=_env())
    assert done.returncode == 0, done.stderr
    return trace


def _check_crash_property(root: Path, kills: list[int], baseline: tuple[Any, int]) -> None:
    shape, _ = baseline
    trace = _crash_and_resume(root, kills)
    if trace is None:
        assert not (root / "ws" / "side.txt").exists()
        return
    _check_whole(trace)
    got_status, got_roots = _shape(trace)
    want_status, want_roots = shape
    assert got_status == want_status
    # The tree's shape, statuses, results and usage are the uninterrupted run's; only a bash
    # call the crash interrupted may differ (its result says so), so calls are compared by name.
    assert got_roots == want_roots
    lines = (root / "ws" / "side.txt").read_text().split() if (root / "ws" / "side.txt").exists() else []
    assert len(lines) == len(set(lines)), f"a side effect happened twice: {lines}"
    assert set(_bash_ok(trace)) <= set(lines)  # what the trace calls done was done


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_run_killed_anywhere_resumes_to_the_uninterrupted_result(
    tmp_path_factory: pytest.TempPathFactory, baseline: tuple[Any, int], data: st.DataObject
) -> None:
    total = baseline[1]
    first = data.draw(st.integers(1, total - 1), label="killed at line")
    again = data.draw(st.lists(st.integers(1, 12), max_size=1), label="the resume killed after")
    _check_crash_property(tmp_path_factory.mktemp("crash"), [first, *again], baseline)


# Hundreds of crashes take half an hour of subprocesses (about 6 s each): on demand, so that the
# suite keeps to its quarter of an hour; the 20 above run in every CI run.
_MANY_CRASHES = int(os.environ.get("TRIO_AGENTS_CRASH_EXAMPLES", "0") or 0)


@pytest.mark.slow
@pytest.mark.skipif(
    _MANY_CRASHES <= 0, reason="set TRIO_AGENTS_CRASH_EXAMPLES=300 for hundreds of crashes"
)
@settings(
    max_examples=max(_MANY_CRASHES, 1), deadline=None, suppress_health_check=list(HealthCheck)
)
@given(data=st.data())
def test_many_crashes_resume_to_the_uninterrupted_result(
    tmp_path_factory: pytest.TempPathFactory, baseline: tuple[Any, int], data: st.DataObject
) -> None:
    total = baseline[1]
    first = data.draw(st.integers(1, total - 1), label="killed at line")
    again = data.draw(st.lists(st.integers(1, 20), max_size=3), label="resumes killed after")
    _check_crash_property(tmp_path_factory.mktemp("crash"), [first, *again], baseline)


# -- the rules, in-process, on traces cut where each applies ---------------------------------


def _cut_after(trace: Path, pred: Any, *, extra: bytes = b"") -> None:
    """Keep *trace*'s lines up to the first one *pred* accepts (as a dict), then *extra*."""
    kept = []
    for line in trace.read_bytes().splitlines(keepends=True):
        kept.append(line)
        if pred(orjson.loads(line)):
            break
    trace.write_bytes(b"".join(kept) + extra)


class Calls:
    """Function tools that count their calls."""

    def __init__(self) -> None:
        self.done: list[str] = []

        @tool(needs_permission=True)
        def note(text: str) -> str:
            """Write a note somewhere (not safe to repeat).

            Args:
                text: the note.
            """
            self.done.append(f"note:{text}")
            return f"noted {text}"

        @tool(idempotent=True)
        def put(key: str) -> str:
            """Set a key (safe to repeat).

            Args:
                key: the key.
            """
            self.done.append(f"put:{key}")
            return f"put {key}"

        @tool(read_only=True)
        def look(key: str) -> str:
            """Look a key up.

            Args:
                key: the key.
            """
            self.done.append(f"look:{key}")
            return f"saw {key}"

        self.tools = [note, put, look]


def _model(calls: list[ToolCall], asked: list[int], *, one_a_turn: bool = False) -> FunctionProvider:
    """A model that asks for *calls* in its first turn (or, *one_a_turn*, one per turn), then
    answers ``finished``; each call it gets is counted in *asked*."""

    def model(request: Any) -> Any:
        asked.append(1)
        turns = sum(1 for m in request.messages if m.role == "assistant")
        if one_a_turn:
            return [calls[turns]] if turns < len(calls) else "finished"
        return calls if turns == 0 and calls else "finished"

    return FunctionProvider(model)


async def _record(tmp_path: Path, calls: list[ToolCall]) -> tuple[Path, Calls]:
    tools = Calls()
    trace = tmp_path / "t.jsonl"
    async with open_runtime(
        _model(calls, []), extra_tools=tools.tools, workspace=tmp_path, trace=trace,
        permission_mode="allow-all", run_id="run-1",
    ) as rt:
        outcome = await rt.run("go")
    assert outcome.status == "completed"
    return trace, tools


async def _resume(
    source: Path, tools: Calls, asked: list[int], calls: list[ToolCall], **kw: Any
) -> Any:
    async with open_runtime(
        _model(calls, asked), extra_tools=tools.tools, workspace=source.parent,
        permission_mode="allow-all", resume=source, **kw,
    ) as rt:
        return await rt.resume()


def _finished(trace: Path) -> dict[str, Any]:
    return {
        e.tool_use_id: e  # type: ignore[attr-defined]
        for e in read_events(trace) if e.type == "tool_finished"
    }


async def test_interrupted_calls_run_again_only_when_read_only_or_idempotent(tmp_path: Path) -> None:
    calls = [ToolCall(name="note", input={"text": "x"}, id="c1"),
             ToolCall(name="put", input={"key": "k"}, id="c2"),
             ToolCall(name="look", input={"key": "k"}, id="c3")]
    trace, tools = await _record(tmp_path, calls)
    # The three run one after another (note is not concurrency-safe): cut after the three
    # tool_started lines as if each were running at the crash, by dropping their ends.
    lines = [ln for ln in trace.read_bytes().splitlines(keepends=True)
             if orjson.loads(ln)["type"] not in ("tool_finished",)]
    keep = []
    for ln in lines:
        keep.append(ln)
        if orjson.loads(ln).get("tool_use_id") == "c3":
            break
    # seq must go on without a gap: renumber what is kept, as a writer would have.
    trace.write_bytes(b"".join(
        orjson.dumps({**orjson.loads(ln), "seq": i}) + b"\n" for i, ln in enumerate(keep, 1)
    ))
    tools.done.clear()
    asked: list[int] = []
    outcome = await _resume(trace, tools, asked, calls)
    assert outcome.status == "completed"
    assert tools.done == ["put:k", "look:k"]  # note is not run again
    ends = _finished(trace)
    assert ends["c1"].status == "error"
    assert ends["c1"].output == INTERRUPTED_TEXT
    assert (ends["c2"].status, ends["c2"].output) == ("ok", "put k")
    assert (ends["c3"].status, ends["c3"].output) == ("ok", "saw k")
    resumed = next(e for e in read_events(trace) if e.type == "run_resumed")
    assert resumed.rerun == ["c2", "c3"]  # type: ignore[attr-defined]
    assert resumed.interrupted == ["c1"]  # type: ignore[attr-defined]
    assert asked == [1]  # only the turn after the calls


async def test_finished_turns_and_calls_are_not_asked_or_run_again(tmp_path: Path) -> None:
    calls = [ToolCall(name="note", input={"text": "x"}, id="c1")]
    trace, tools = await _record(tmp_path, calls)
    _cut_after(trace, lambda e: e["type"] == "tool_finished")
    tools.done.clear()
    asked: list[int] = []
    outcome = await _resume(trace, tools, asked, calls)
    assert outcome.status == "completed"
    assert outcome.result == "finished"
    assert tools.done == []  # the note was written before the crash
    assert asked == [1]  # turn 1 came from the trace
    tree = TraceTree.from_events(read_events(trace))
    (root,) = tree.roots
    assert (root.status, root.turns) == ("completed", 2)
    _check_whole(trace)


@pytest.mark.parametrize("mode", ["allow-all", "deny"])
async def test_a_running_agent_goes_on_with_the_history_it_had(tmp_path: Path, mode: str) -> None:
    """The recorded turns are given to the agent straight from the trace (not played back
    through the loop): the live model reads the history the uninterrupted run had, results
    that were errors and denials (``deny``: the note) included, and the turn count and
    tokens go on from the recorded ones."""
    calls = [ToolCall(name="note", input={"text": "x"}, id="c1"),
             ToolCall(name="fail", input={}, id="c2"),  # an error result
             ToolCall(name="look", input={"key": "k"}, id="c3")]
    seen: list[Any] = []

    def model(request: Any) -> Any:
        seen.append(request.messages)
        turns = sum(1 for m in request.messages if m.role == "assistant")
        return ((f"step {turns}", [calls[turns]]) if turns < len(calls)
                else "finished")

    @tool(read_only=True)
    def fail() -> str:
        """Always fails."""
        raise ToolError("broken")

    tools = Calls()
    tools.tools.append(fail)
    trace = tmp_path / "t.jsonl"
    async with open_runtime(
        FunctionProvider(model), extra_tools=tools.tools, workspace=tmp_path, trace=trace,
        permission_mode=mode, run_id="run-1",
    ) as rt:
        whole = await rt.run("go")
    expected = seen[-1]
    statuses = [e.status for e in read_events(trace) if e.type == "tool_finished"]  # type: ignore[attr-defined]
    assert statuses == ["denied" if mode == "deny" else "ok", "error", "ok"]
    _cut_after(trace, lambda e: e["type"] == "tool_finished" and e["tool_use_id"] == "c3")
    seen.clear()
    tools.done.clear()
    async with open_runtime(
        FunctionProvider(model), extra_tools=tools.tools, workspace=tmp_path,
        permission_mode=mode, resume=trace,
    ) as rt:
        outcome = await rt.resume()
        restored = dict(rt._run.provider._restored)  # type: ignore[attr-defined]
    assert restored == {outcome.agent_id: 3}  # none of the three turns went through the loop
    assert seen == [expected]  # one model call, with the whole recorded history
    assert tools.done == []
    assert (outcome.status, outcome.result, outcome.turns) == ("completed", "finished", 4)
    assert (outcome.input_tokens, outcome.output_tokens) == (
        whole.input_tokens, whole.output_tokens)
    _check_whole(trace)


async def test_a_turn_cut_mid_stream_is_asked_again(tmp_path: Path) -> None:
    trace, tools = await _record(tmp_path, [])
    # The answer's text streamed, its turn_finished never written.
    _cut_after(trace, lambda e: e["type"] == "text_delta")
    asked: list[int] = []
    outcome = await _resume(trace, tools, asked, [])
    assert (outcome.status, outcome.result) == ("completed", "finished")
    assert asked == [1]
    assert TraceTree.from_events(read_events(trace)).roots[0].turns == 1


async def _asking(trace: Path, tools: Calls, calls: list[ToolCall], **kw: Any) -> Any:
    """A run in ask mode with someone to answer who never does (the request times out)."""
    async with open_runtime(
        _model(calls, []), extra_tools=[tools.tools[0]], workspace=trace.parent, trace=trace,
        permission_mode="ask", permission_timeout_s=0.05, **kw,
    ) as rt:
        with rt._run.broker.answerer():
            return await (rt.resume() if "resume" in kw else rt.run("go"))


async def test_a_pending_permission_request_is_asked_again(tmp_path: Path) -> None:
    calls = [ToolCall(name="note", input={"text": "x"}, id="c1")]
    tools = Calls()
    trace = tmp_path / "t.jsonl"
    await _asking(trace, tools, calls)
    # The question was waiting for an answer at the crash.
    _cut_after(trace, lambda e: e["type"] == "permission_requested")
    state = load_resume(trace)
    assert "c1" not in state.decided
    await _asking(trace, tools, calls, resume=trace)
    asked = [e for e in read_events(trace) if e.type == "permission_requested"]
    assert [e.request_id for e in asked] == ["perm-1", "perm-2"]  # type: ignore[attr-defined]
    kinds = [e.type for e in read_events(trace)]
    assert kinds.index("run_resumed") < kinds.index("permission_resolved")
    _check_whole(trace)
    # With a mode that allows it, the call runs: nothing had decided it.
    _cut_after(trace, lambda e: e["type"] == "permission_requested")
    outcome = await _resume(trace, tools, [], calls)
    assert outcome.status == "completed"
    assert tools.done == ["note:x"]


async def test_a_recorded_denial_stands_without_asking(tmp_path: Path) -> None:
    calls = [ToolCall(name="note", input={"text": "x"}, id="c1")]
    tools = Calls()
    trace = tmp_path / "t.jsonl"
    async with open_runtime(
        _model(calls, []), extra_tools=[tools.tools[0]], workspace=tmp_path, trace=trace,
        permission_mode="deny",
    ) as rt:
        await rt.run("go")
    _cut_after(trace, lambda e: e["type"] == "tool_finished")
    outcome = await _resume(trace, tools, [], calls)
    assert outcome.status == "completed"
    assert tools.done == []  # allow-all now, but the call was denied then


async def test_partial_last_line_is_cut_and_reported(tmp_path: Path) -> None:
    calls = [ToolCall(name="note", input={"text": "x"}, id="c1")]
    trace, tools = await _record(tmp_path, calls)
    _cut_after(trace, lambda e: e["type"] == "tool_finished", extra=b'{"type": "turn_fin')
    state = load_resume(trace)
    assert state.cut_bytes == len(b'{"type": "turn_fin')
    outcome = await _resume(trace, tools, [], calls)
    assert outcome.status == "completed"
    _check_whole(trace)  # the cut line is gone, every line is whole
    resumed = next(e for e in read_events(trace) if e.type == "run_resumed")
    assert resumed.cut_bytes == len(b'{"type": "turn_fin')  # type: ignore[attr-defined]


async def test_trace_new_leaves_the_original_and_holds_the_whole_run(tmp_path: Path) -> None:
    calls = [ToolCall(name="note", input={"text": "x"}, id="c1")]
    trace, tools = await _record(tmp_path, calls)
    _cut_after(trace, lambda e: e["type"] == "tool_finished")
    before = trace.read_bytes()
    new = tmp_path / "new.jsonl"
    outcome = await _resume(trace, tools, [], calls, trace=new)
    assert outcome.status == "completed"
    assert trace.read_bytes() == before
    assert new.read_bytes().startswith(before)
    _check_whole(new)
    resumed = next(e for e in read_events(new) if e.type == "run_resumed")
    assert resumed.source == str(trace)  # type: ignore[attr-defined]
    assert resumed.run_id == "run-1"


async def test_a_finished_or_bad_trace_is_refused_in_one_line(tmp_path: Path) -> None:
    trace, tools = await _record(tmp_path, [])
    with pytest.raises(ConfigError, match="finished \\(completed\\); nothing to resume"):
        await _resume(trace, tools, [], [])
    lines = trace.read_bytes().splitlines(keepends=True)
    gap = tmp_path / "gap.jsonl"
    gap.write_bytes(b"".join(lines[:1] + lines[2:-1]))
    with pytest.raises(TraceError, match="seq goes from 1 to 3"):
        load_resume(gap)
    corrupt = tmp_path / "corrupt.jsonl"
    corrupt.write_bytes(lines[0] + b"{nope\n" + b"".join(lines[1:-1]))
    with pytest.raises(TraceError, match=":2: corrupt line"):
        load_resume(corrupt)
    other = tmp_path / "other.jsonl"
    head = orjson.loads(lines[0])
    other.write_bytes(orjson.dumps({**head, "version": "0.0.1"}) + b"\n" + b"".join(lines[1:-1]))
    with pytest.raises(TraceError, match=r"written by trio-agents 0\.0\.1"):
        load_resume(other)
    live = tmp_path / "live.jsonl"
    live.write_bytes(b"".join(lines[:-1]))
    with live.open("rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        with pytest.raises(TraceError, match="being written by a live process"):
            load_resume(live)


async def test_a_run_resumed_twice_is_one_run(tmp_path: Path) -> None:
    calls = [ToolCall(name="note", input={"text": "x"}, id="c1"),
             ToolCall(name="note", input={"text": "y"}, id="c2")]
    tools = Calls()
    trace = tmp_path / "t.jsonl"

    async def once(asked: list[int], **kw: Any) -> Any:
        async with open_runtime(
            _model(calls, asked, one_a_turn=True), extra_tools=tools.tools, workspace=tmp_path,
            trace=trace, permission_mode="allow-all", **kw,
        ) as rt:
            return await (rt.resume() if "resume" in kw else rt.run("go"))

    await once([])
    _cut_after(trace, lambda e: e["type"] == "tool_finished")  # c1 done, turn 2 not asked
    tools.done.clear()
    await once([], resume=trace)
    # The first resume dies too, right after its run_resumed.
    _cut_after(trace, lambda e: e["type"] == "run_resumed")
    tools.done.clear()
    asked: list[int] = []
    outcome = await once(asked, resume=trace)
    assert (outcome.status, outcome.turns) == ("completed", 3)
    assert tools.done == ["note:y"]
    assert asked == [1, 1]  # turns 2 and 3: turn 1 is in the trace
    kinds = [e.type for e in read_events(trace)]
    assert kinds.count("run_resumed") == 2
    _check_whole(trace)
    assert len(TraceTree.from_events(read_events(trace)).resumes) == 2


# -- the command line ---------------------------------------------------------------------


def test_cli_resume_of_a_finished_trace_runs_nothing(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text(json.dumps({"agents": {"main": {"turns": [{"text": "hi"}]}}}))
    done = _cli("run", "--scenario", "s.json", "--trace", "t.jsonl", "go", cwd=tmp_path, env=_env())
    assert done.returncode == 0, done.stderr
    before = (tmp_path / "t.jsonl").read_bytes()
    again = _cli("resume", "t.jsonl", cwd=tmp_path, env=_env())
    assert again.returncode == 0
    assert "finished (completed); nothing to resume" in again.stderr
    assert (tmp_path / "t.jsonl").read_bytes() == before


def test_cli_refuses_a_changed_workspace_unless_force(tmp_path: Path) -> None:
    scenario = {"agents": {"main": {"turns": [
        {"tool_calls": [{"name": "write", "input": {"path": "f.txt", "content": "one\n"}}]},
        {"tool_calls": [{"name": "bash", "input": {"command": "true"}}]},
        {"text": "done"}]}}}
    (tmp_path / "s.json").write_text(json.dumps(scenario))
    (tmp_path / "ws").mkdir()
    done = _cli("run", "--scenario", "s.json", "--workspace", "ws", "--trace", "t.jsonl",
                "--permission-mode", "allow-all", "go", cwd=tmp_path, env=_env())
    assert done.returncode == 0, done.stderr
    trace = tmp_path / "t.jsonl"
    _cut_after(trace, lambda e: e["type"] == "tool_finished" and e["name"] == "write")
    (tmp_path / "ws" / "f.txt").write_text("changed\n")
    refused = _cli("resume", "t.jsonl", "--workspace", "ws", "--permission-mode", "allow-all",
                   cwd=tmp_path, env=_env())
    assert refused.returncode == 2
    assert "f.txt: changed since write(f.txt) (main, turn 1)" in refused.stderr
    assert "--force" in refused.stderr
    forced = _cli("resume", "t.jsonl", "--workspace", "ws", "--permission-mode", "allow-all",
                  "--force", cwd=tmp_path, env=_env())
    assert forced.returncode == 0, forced.stderr
    _check_whole(trace)


def test_cli_refuses_a_trace_with_a_gap_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text(json.dumps({"agents": {"main": {"turns": [{"text": "a b c"}]}}}))
    done = _cli("run", "--scenario", "s.json", "--trace", "t.jsonl", "go", cwd=tmp_path, env=_env())
    assert done.returncode == 0
    trace = tmp_path / "t.jsonl"
    lines = trace.read_bytes().splitlines(keepends=True)
    trace.write_bytes(b"".join(lines[:2] + lines[3:-1]))
    refused = _cli("resume", "t.jsonl", cwd=tmp_path, env=_env())
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1
    assert "seq goes from 2 to 4" in refused.stderr


async def test_workspace_changes_lists_each_file(tmp_path: Path) -> None:
    from runtime.replay import workspace_changes

    calls = [ToolCall(name="write", input={"path": "a.txt", "content": "A"}, id="w1"),
             ToolCall(name="write", input={"path": "b.txt", "content": "B"}, id="w2")]
    tools = Calls()
    trace = tmp_path / "t.jsonl"
    async with open_runtime(
        _model(calls, []), extra_tools=tools.tools, workspace=tmp_path, trace=trace,
        permission_mode="allow-all",
    ) as rt:
        await rt.run("go")
    _cut_after(trace, lambda e: e["type"] == "tool_finished" and e["tool_use_id"] == "w2")
    state = load_resume(trace)
    assert await workspace_changes(state, tmp_path, None, None) == []
    (tmp_path / "a.txt").write_text("other")
    (tmp_path / "b.txt").unlink()
    assert await workspace_changes(state, tmp_path, None, None) == [
        "a.txt: changed since write(a.txt) (main, turn 1)",
        "b.txt: gone since write(b.txt) (main, turn 1)",
    ]


PLACED: dict[str, Any] = {"agents": {
    "main": {"turns": [
        {"text": "Handing it over.", "usage": USAGE, "tool_calls": [
            {"name": "agent", "input": {"description": "w", "prompt": "do it", "agent": "worker"}}]},
        {"text": "Done.", "usage": USAGE}]},
    "worker": {"tools": ["agent"], "turns": [
        {"text": "Asking a helper.", "usage": USAGE, "tool_calls": [
            {"name": "agent", "input": {"description": "h", "prompt": "look", "agent": "helper"}}]},
        {"text": "worker done", "usage": USAGE}]},
    "helper": {"tools": ["glob"], "turns": [
        *[{"tool_calls": [{"name": "glob", "input": {"pattern": f"*.{n}"}}], "usage": USAGE}
          for n in ("a", "b", "c")],
        {"text": "helper done", "usage": USAGE}]},
}}


def _as_placed(trace: Path) -> None:
    """Rewrite a local run's trace as a run whose ``worker`` subtree ran on a Ray host: the
    agents and calls made inside it carry the host's ids (``h1.1.``: host h1, its first
    subtree; docs/cluster.md), as a placed run's trace does."""
    events = [orjson.loads(line) for line in trace.read_bytes().splitlines()]
    worker = next(e["agent_id"] for e in events
                  if e["type"] == "agent_started" and e["name"] == "worker")
    inside = {worker}
    ids: dict[str, str] = {}
    for e in events:
        if e["type"] == "agent_started" and e["parent_agent_id"] in inside:
            inside.add(e["agent_id"])
            ids[e["agent_id"]] = f"h1.1.{e['agent_id']}"
        if e["type"] == "tool_started" and e["agent_id"] in inside:
            ids[e["tool_use_id"]] = f"h1.1.{e['tool_use_id']}"
    text = b"\n".join(trace.read_bytes().splitlines())
    for old, new in sorted(ids.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(f'"{old}"'.encode(), f'"{new}"'.encode())
    trace.write_bytes(text + b"\n")


async def test_a_subtree_placed_on_ray_resumes_in_this_process(tmp_path: Path) -> None:
    """A trace whose ``worker`` subtree ran on a Ray host, killed while its helper worked:
    the resume runs the subtree here (no Ray is started), the helper goes on from its
    recorded turns under the id the host gave it, and the run ends as the whole one did."""
    from runtime import AgentType

    whole = tmp_path / "whole.jsonl"
    async with open_runtime(scenario=PLACED, workspace=tmp_path, trace=whole) as rt:
        assert (await rt.run("go")).status == "completed"
    _as_placed(whole)
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(whole.read_bytes())
    # Killed after the helper's first glob: the worker and the helper were running.
    _cut_after(trace, lambda e: e["type"] == "tool_finished"
               and (e["agent_id"] or "").startswith("h1.1."))
    placed = [AgentType(name="worker", tools=("agent",), placement="ray")]
    async with open_runtime(
        scenario=PLACED, workspace=tmp_path, agent_types=placed, resume=trace
    ) as rt:
        assert rt._run.placements == {}  # nothing of Ray was opened
        outcome = await rt.resume()
    assert (outcome.status, outcome.result) == ("completed", "Done.")
    assert _shape(trace) == _shape(whole)
    helper = [e for e in read_events(trace) if e.type == "agent_finished"
              and (e.agent_id or "").startswith("h1.1.")]
    assert [(e.agent_id, e.result) for e in helper] == [("h1.1.agent-3", "helper done")]
    _check_whole(trace)


def _bg(name: str, turns: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": "agent", "input": {"description": name, "prompt": f"do {name}", "agent": name,
                                       "run_in_background": True}}


BACKGROUND: dict[str, Any] = {"agents": {
    "main": {"turns": [
        {"text": "Starting it.", "usage": USAGE, "tool_calls": [_bg("bg", [])]},
        {"text": "Waiting.", "usage": USAGE},
        {"text": "All done.", "usage": USAGE}]},
    "bg": {"tools": ["glob"], "turns": [
        *[{"delay_s": 0.05, "tool_calls": [{"name": "glob", "input": {"pattern": f"*.{n}"}}],
           "usage": USAGE} for n in ("a", "b", "c")],
        {"text": "bg done", "usage": USAGE}]},
}}


async def _whole_and_cut(tmp_path: Path, scenario: dict[str, Any], pred: Any) -> tuple[Path, Path]:
    whole = tmp_path / "whole.jsonl"
    async with open_runtime(scenario=scenario, workspace=tmp_path, trace=whole) as rt:
        assert (await rt.run("go")).status == "completed"
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(whole.read_bytes())
    _cut_after(trace, pred)
    return whole, trace


def _messages_to(trace: Path, agent_id: str) -> list[str]:
    return [e.text for e in read_events(trace)  # type: ignore[attr-defined]
            if e.type == "user_message" and e.agent_id == agent_id]


@pytest.mark.parametrize("cut", ["running", "ended, report unread"])
async def test_a_background_sub_agent_goes_on_and_reports(tmp_path: Path, cut: str) -> None:
    """A background sub-agent running at the crash is started again under its id and goes on;
    one that had ended but whose report its parent had not read plays back to its recorded end
    (no model call) and its report comes. Either way the parent reads the report once and the
    run ends as the whole one did."""
    def pred(e: dict[str, Any]) -> bool:
        if cut == "running":
            return e["type"] == "tool_finished" and e["agent_id"] == "agent-2"
        return e["type"] == "agent_finished" and e["agent_id"] == "agent-2"

    whole, trace = await _whole_and_cut(tmp_path, BACKGROUND, pred)
    assert _messages_to(trace, "agent-1") == []
    async with open_runtime(scenario=BACKGROUND, workspace=tmp_path, resume=trace) as rt:
        outcome = await rt.resume()
    assert (outcome.status, outcome.result) == ("completed", "All done.")
    assert _shape(trace) == _shape(whole)
    (report,) = _messages_to(trace, "agent-1")
    assert report == _messages_to(whole, "agent-1")[0]
    assert report.startswith("[background sub-agent agent-2 (bg) ended completed]")
    bg_turns = [e for e in read_events(trace) if e.type == "turn_finished" and e.agent_id == "agent-2"]
    assert len(bg_turns) == 4  # none asked twice
    _check_whole(trace)


MESSAGES: dict[str, Any] = {"agents": {
    "main": {"turns": [
        {"usage": USAGE, "tool_calls": [_bg("alpha", []), _bg("beta", [])]},
        {"text": "Waiting.", "usage": USAGE}, {"text": "Still waiting.", "usage": USAGE},
        {"text": "All done.", "usage": USAGE}]},
    "alpha": {"tools": ["send_message"], "turns": [
        {"usage": USAGE, "tool_calls": [
            {"name": "send_message", "input": {"to": "agent-3", "text": "hello beta"}}]},
        {"text": "alpha done", "usage": USAGE}]},
    "beta": {"tools": ["glob"], "turns": [
        {"delay_s": 0.3, "usage": USAGE, "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]},
        {"text": "beta done", "usage": USAGE}]},
}}


@pytest.mark.parametrize("cut", ["sent", "sending"])
async def test_a_message_not_read_at_the_crash_is_delivered_after_the_resume(
    tmp_path: Path, cut: str
) -> None:
    """alpha's message to beta was in beta's mailbox, unread, when the process died: the
    resumed beta reads it, once, as it would have, and the run ends as the whole one did.
    Killed after alpha's ``send_message`` call ended, the resume delivers the message again;
    killed while the call ran (``agent_message`` is the last line), the call runs again (it
    is read-only) and sends it."""
    def pred(e: dict[str, Any]) -> bool:
        if cut == "sending":
            return e["type"] == "agent_message"
        return e["type"] == "tool_finished" and e["agent_id"] == "agent-2"

    whole, trace = await _whole_and_cut(tmp_path, MESSAGES, pred)
    assert _messages_to(trace, "agent-3") == []
    text = "[message from agent-2 (alpha)]\nhello beta"
    state = load_resume(trace)
    assert state.unread == ({"agent-3": [text]} if cut == "sent" else {})
    async with open_runtime(scenario=MESSAGES, workspace=tmp_path, resume=trace) as rt:
        outcome = await rt.resume()
        delivered = rt._run.provider.delivered  # type: ignore[attr-defined]
    assert delivered == (1 if cut == "sent" else 0)
    assert outcome.status == "completed"
    assert _messages_to(trace, "agent-3") == _messages_to(whole, "agent-3") == [text]
    assert _shape(trace) == _shape(whole)
    _check_whole(trace)
