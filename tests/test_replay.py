"""``trio-agents replay``: a run recorded against the loopback HTTP server, played back offline.

The recording is a real run of the Anthropic provider against ``tests/llm_server.py``: a main
agent whose first turn reads a missing file (a failed tool) and asks ``bash(rm …)`` (denied by a
rule), whose second turn starts three sub-agents in parallel: one reads a file, one is slow and
is cancelled by the test (a cancelled subtree), one gets a 400 from the API (a provider error).
The replays run in a subprocess, with the server gone.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

from runtime import open_runtime
from runtime.core._events import decode_event
from runtime.trace._tree import AgentNode, TraceTree
from tests.invariants import check_invariants
from tests.llm_server import (
    LLMServer,
    Piece,
    RecordedRequest,
    Reply,
    anthropic_end,
    anthropic_message_start,
    anthropic_text_block,
    anthropic_text_stream,
    anthropic_tool_block,
)

PROMPT = "MAIN: look after the project"


def _turn(text: str, calls: Sequence[tuple[str, str, dict[str, Any]]]) -> Reply:
    events = [anthropic_message_start(40), *anthropic_text_block(0, [text])]
    for i, (tool_id, name, args) in enumerate(calls, 1):
        events += anthropic_tool_block(i, tool_id, name, [orjson.dumps(args).decode()])
    events += anthropic_end("tool_use" if calls else "end_turn", 12)
    return Reply.stream(events)


def _agent(tool_id: str, prompt: str) -> tuple[str, str, dict[str, Any]]:
    return (tool_id, "agent", {"description": prompt.split(":")[0].lower(), "prompt": prompt})


def _route(request: RecordedRequest) -> Reply | None:
    body = request.json
    first = body["messages"][0]["content"]
    prompt = first if isinstance(first, str) else first[0]["text"]
    turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if prompt.startswith("MAIN"):
        return [
            _turn(
                "Checking first.",
                [
                    ("toolu_1", "read", {"path": "missing.txt"}),
                    ("toolu_2", "bash", {"command": "rm -rf build"}),
                ],
            ),
            _turn(
                "Splitting the work.",
                [
                    _agent("toolu_3", "NOTES: read notes.txt"),
                    _agent("toolu_4", "SLOW: take your time"),
                    _agent("toolu_5", "BROKEN: this one fails"),
                ],
            ),
            Reply.stream(anthropic_text_stream(["All ", "done."])),
        ][turn]
    if prompt.startswith("NOTES"):
        if turn == 0:
            return _turn("Reading.", [("toolu_6", "read", {"path": "notes.txt"})])
        return Reply.stream(anthropic_text_stream(["The notes say hello."]))
    if prompt.startswith("SLOW"):  # starts, then waits far longer than the test
        return Reply.stream([anthropic_message_start(40), Piece(b"", delay_s=60)])
    if prompt.startswith("BROKEN"):
        return Reply.error(400, "prompt rejected by policy", anthropic=True)
    raise AssertionError(f"unexpected request: {prompt!r}")


def _env(server: LLMServer) -> dict[str, str]:
    return {
        "ANTHROPIC_API_KEY": "sk-test-0123456789",
        "ANTHROPIC_BASE_URL": server.url,
        "PATH": "/usr/bin:/bin",
    }


async def _record(trace: Path, workspace: Path) -> None:
    async with trio.open_nursery() as nursery:
        server = await nursery.start(LLMServer().serve)
        server.route = _route
        slow = trio.Event()
        slow_id: list[str] = []

        def tap(event: Any) -> None:
            if event.type == "agent_started" and event.prompt.startswith("SLOW"):
                slow_id.append(event.agent_id)
                slow.set()

        async with open_runtime(
            "anthropic",
            model="claude-test",
            env=_env(server),
            workspace=workspace,
            trace=trace,
            permission_mode="allow-all",
            deny=["bash(rm *)"],
            on_event=tap,
        ) as rt:
            handle = await rt.start(PROMPT)
            await slow.wait()
            await trio.sleep(0.2)  # the others are done by now; the slow one waits
            assert await rt.cancel(slow_id[0], "not needed")
            outcome = await handle.wait()
        assert outcome.status == "completed", outcome.error
        nursery.cancel_scope.cancel()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(trace, workspace) of the recorded run; the server is gone once this returns."""
    root = tmp_path_factory.mktemp("replay")
    workspace = root / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello\nfrom the notes\n")
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    trace = root / "recorded.jsonl"
    trio.run(_record, trace, workspace)
    return trace, workspace


def replay(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ)
    env["COLUMNS"] = "200"
    for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        env.pop(key, None)
    return subprocess.run(
        [sys.executable, "-m", "runtime", "replay", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
        timeout=60,
    )


def events_of(path: Path) -> list[Any]:
    return [decode_event(line) for line in path.read_bytes().splitlines() if line.strip()]


def tree_of(path: Path) -> TraceTree:
    return TraceTree.from_events(
        decode_event(line) for line in path.read_bytes().splitlines() if line.strip()
    )


def shape(tree: TraceTree, *, outputs: bool) -> list[Any]:
    def agent(node: AgentNode) -> Any:
        # Parallel calls start in any order: compared as a set, by what they asked for.
        calls = sorted(
            (
                c.name,
                c.status,
                c.summary,
                c.output if outputs else None,
                [agent(a) for a in c.children],
            )
            for c in node.children
        )
        return (node.name, node.status, node.result if outputs else None, calls)

    return [agent(a) for a in tree.roots]


def err(proc: subprocess.CompletedProcess[bytes]) -> str:
    return proc.stderr.decode()


def test_the_recording_holds_every_case(recorded: tuple[Path, Path]) -> None:
    trace, _ = recorded
    tree = tree_of(trace)
    statuses = {a.prompt.split(":")[0]: a.status for a in tree.agents.values()}
    assert statuses == {"MAIN": "completed", "NOTES": "completed", "SLOW": "cancelled",
                        "BROKEN": "failed"}  # fmt: skip
    tools = {t.name + ":" + t.status for t in tree.tools.values()}
    assert {"read:error", "bash:denied", "read:ok", "agent:cancelled", "agent:error"} <= tools


def test_replay_with_mock_tools_rebuilds_the_same_tree_offline(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    trace, _ = recorded
    out = tmp_path / "replayed.jsonl"
    # The permission mode and rules are the recorded ones (run_started.config).
    proc = replay([str(trace), "--mock-tools", "--trace", str(out)], tmp_path)
    assert proc.returncode == 0, err(proc)
    assert "divergences" not in err(proc)
    assert shape(tree_of(out), outputs=True) == shape(tree_of(trace), outputs=True)
    # The replay keeps the recorded ids: its tree lines up with the recording's, node by node.
    assert set(tree_of(out).tools) == set(tree_of(trace).tools)
    check_invariants(events_of(out))
    first = tree_of(out).config or {}
    assert first["provider"] == "replay"
    assert first["replay_of"]["trace"] == str(trace)


def test_replay_json_prints_only_events_on_stdout(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    trace, _ = recorded
    proc = replay([str(trace), "--mock-tools", "--json", "--no-trace"], tmp_path)
    assert proc.returncode == 0, err(proc)
    events = [decode_event(line) for line in proc.stdout.splitlines()]
    assert events[0].type == "run_started"
    assert events[0].config["provider"] == "replay"  # type: ignore[attr-defined]
    assert events[-1].type == "run_finished"
    assert not [e for e in events if e.type == "replay_diverged"]


def test_replay_with_real_tools_in_a_git_workspace_matches(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    trace, workspace = recorded
    out = tmp_path / "replayed.jsonl"
    proc = replay(
        [str(trace), "--strict", "--trace", str(out), "--deny", "bash(rm *)",
         "--permission-mode", "allow-all", "--workspace", str(workspace)],
        tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, err(proc)
    assert "tools run for real in" in err(proc)
    assert "no fresh copy is made" in err(proc)
    assert shape(tree_of(out), outputs=False) == shape(tree_of(trace), outputs=False)


def test_a_changed_file_is_a_divergence_and_fails_strict(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    trace, workspace = recorded
    changed = tmp_path / "ws"
    shutil.copytree(workspace, changed)
    (changed / "notes.txt").write_text("hello\nfrom the notes\nand one more line\n")
    args = [str(trace), "--deny", "bash(rm *)", "--permission-mode", "allow-all",
            "--workspace", str(changed)]  # fmt: skip
    loose = replay([*args, "--no-trace"], tmp_path)
    line = "main \u203a general, turn 1: read(notes.txt) returned 3 lines, recorded 2"
    assert loose.returncode == 0, err(loose)
    assert line in err(loose)
    assert f"replay diverged: {line}" in loose.stdout.decode()  # the plain view's line
    out = tmp_path / "strict.jsonl"
    strict = replay([*args, "--strict", "--trace", str(out)], tmp_path)
    assert strict.returncode == 1
    assert f"replay diverged (--strict): {line}" in err(strict)
    tree = tree_of(out)
    assert tree.status == "failed"
    check_invariants(events_of(out))
    shown = subprocess.run(
        [sys.executable, "-m", "runtime", "trace", "show", str(out)],
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert shown.returncode == 0
    assert b"unknown" not in shown.stderr  # replay_diverged is a kind the tree knows
    assert tree.divergences[0] == (
        "main \u203a general, turn 1",
        "read(notes.txt) returned 3 lines, recorded 2",
    )


def test_a_permission_answered_otherwise_is_a_divergence(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    trace, _ = recorded
    # Rules given on the command line replace the recorded ones: nothing denies rm any more.
    proc = replay([str(trace), "--mock-tools", "--no-trace", "--allow", "read"], tmp_path)
    assert "main, turn 1: bash(rm -rf build) was allowed, recorded denied" in err(proc)


def test_recorded_writes_are_refused_outside_git_and_temp_unless_forced(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    trace, _ = recorded
    home = Path.home() / f".trio-agents-replay-test-{os.getpid()}"
    home.mkdir()
    try:
        proc = replay([str(trace), "--no-trace", "--workspace", str(home)], tmp_path)
        assert proc.returncode == 2
        assert "is not in a git repository or a temporary folder" in err(proc)
        assert err(proc).count("error:") == 1
    finally:
        home.rmdir()


def test_export_scenario_reproduces_the_tree_through_run(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    trace, workspace = recorded
    scenario = tmp_path / "scenario.json"
    proc = subprocess.run(
        [sys.executable, "-m", "runtime", "trace", "export", str(trace), "--format", "scenario",
         "-o", str(scenario)],
        capture_output=True, check=False, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    agents = orjson.loads(scenario.read_bytes())["agents"]
    # Three general sub-agents said different things: each is named by its place.
    assert {"main", "main/general", "main/general#2", "main/general#3"} <= set(agents)
    out = tmp_path / "run.jsonl"
    run = subprocess.run(
        [sys.executable, "-m", "runtime", "run", "--scenario", str(scenario), "--trace",
         str(out), "--deny", "bash(rm *)", "--permission-mode", "allow-all", "--workspace",
         str(workspace), PROMPT],
        cwd=tmp_path, capture_output=True, check=False, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr.decode()

    def names_and_statuses(tree: TraceTree) -> list[Any]:
        # A scenario cannot cancel: the slow agent ends otherwise (the export notes it).
        def agent(node: AgentNode) -> Any:
            return sorted(
                (
                    c.name,
                    c.summary.split(":")[-1],
                    c.status if "slow" not in c.summary else "-",
                    [agent(a) for a in c.children],
                )
                for c in node.children
            )

        return [agent(a) for a in tree.roots]

    assert names_and_statuses(tree_of(out)) == names_and_statuses(tree_of(trace))
    statuses = [t.status for t in tree_of(out).tools.values()]
    assert statuses.count("denied") == 1
    assert "a scenario cannot cancel it" in proc.stderr.decode()


def test_a_fork_continues_with_the_scripted_provider_after_a_tool_call(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    trace, workspace = recorded
    tree = tree_of(trace)
    split = next(t for t in tree.tools.values() if t.name == "agent")  # turn 2 of main
    scenario = tmp_path / "fork.json"
    scenario.write_bytes(
        orjson.dumps({"agents": {"main": {"turns": [
            {"text": "unused 1"}, {"text": "Forked: doing it myself.",
                                   "tool_calls": [{"name": "read", "input": {"path": "notes.txt"}}]},
            {"text": "Forked and done."}]}}})
    )  # fmt: skip
    out = tmp_path / "fork.jsonl"
    proc = replay(
        [str(trace), "--mock-tools", "--until", split.id, "--continue-provider", "scripted",
         "--scenario", str(scenario), "--trace", str(out), "--deny", "bash(rm *)",
         "--permission-mode", "allow-all", "--workspace", str(workspace)],
        tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, err(proc)
    forked = tree_of(out)
    main = forked.roots[0]
    assert main.result == "Forked and done."
    # Turn 1 replayed (its two calls), then the live turns: a real read, no sub-agents.
    assert [(c.name, c.status) for c in main.children] == [
        ("read", "error"),
        ("bash", "denied"),
        ("read", "ok"),
    ]
    assert "from the notes" in main.children[2].output
    config = forked.config or {}
    assert config["provider"] == "scripted"
    assert config["forked_from"]["trace"] == str(trace)
    assert config["forked_from"]["until"] == split.id


# -- bad input: one clear line each ------------------------------------------------------------


def _write(path: Path, lines: Sequence[bytes]) -> Path:
    path.write_bytes(b"".join(lines))
    return path


def test_a_killed_run_replays_up_to_its_end_then_stops(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    trace, workspace = recorded
    lines = trace.read_bytes().splitlines(keepends=True)
    # Killed while the NOTES agent waited for its read: nothing after that call's start.
    cut = next(
        i for i, line in enumerate(lines) if b'"notes.txt"' in line and b"tool_started" in line
    )
    killed = _write(tmp_path / "killed.jsonl", lines[: cut + 1])
    out = tmp_path / "out.jsonl"
    proc = replay([str(killed), "--mock-tools", "--trace", str(out), "--workspace",
                   str(workspace)], tmp_path)  # fmt: skip
    assert proc.returncode == 1
    assert "error: replay stopped: the trace ends here: the recorded run was killed" in err(proc)
    assert tree_of(out).status == "cancelled"
    check_invariants(events_of(out))


def test_two_runs_in_one_file_need_run(recorded: tuple[Path, Path], tmp_path: Path) -> None:
    trace, _ = recorded
    text = trace.read_bytes()
    run_id = tree_of(trace).run_id or ""
    other = text.replace(run_id.encode(), b"20990101-000000-abcdef")
    both = _write(tmp_path / "both.jsonl", [text, other])
    proc = replay([str(both), "--mock-tools", "--no-trace"], tmp_path)
    assert proc.returncode == 2
    assert f"holds 2 runs ({run_id}, 20990101-000000-abcdef); choose one with --run" in err(proc)
    chosen = replay([str(both), "--mock-tools", "--no-trace", "--run", run_id, "--deny",
                     "bash(rm *)", "--permission-mode", "allow-all"], tmp_path)  # fmt: skip
    assert chosen.returncode == 0, err(chosen)


def test_a_trace_from_a_newer_version_is_refused(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    trace, _ = recorded
    text = trace.read_bytes().replace(b'"version":"0.1.0"', b'"version":"9.0.0"', 1)
    proc = replay([str(_write(tmp_path / "new.jsonl", [text])), "--mock-tools"], tmp_path)
    assert proc.returncode == 2
    assert "written by trio-agents 9.0.0, newer than this one" in err(proc)
    assert err(proc).count("\n") == 1


def test_a_corrupt_line_is_refused(recorded: tuple[Path, Path], tmp_path: Path) -> None:
    trace, _ = recorded
    lines = trace.read_bytes().splitlines(keepends=True)
    lines[3] = b'{"type": "tool_started", oops\n'
    proc = replay([str(_write(tmp_path / "bad.jsonl", lines)), "--mock-tools"], tmp_path)
    assert proc.returncode == 2
    assert "bad.jsonl:4: corrupt line" in err(proc)
    assert err(proc).count("\n") == 1


def test_a_truncated_last_line_is_a_killed_run(recorded: tuple[Path, Path], tmp_path: Path) -> None:
    trace, _ = recorded
    lines = trace.read_bytes().splitlines(keepends=True)
    cut = _write(tmp_path / "cut.jsonl", [*lines[:-3], lines[-3][:20]])
    proc = replay([str(cut), "--mock-tools", "--no-trace", "--deny", "bash(rm *)",
                   "--permission-mode", "allow-all"], tmp_path)  # fmt: skip
    assert "note: the last line of the trace is cut short (a killed writer)" in err(proc)
    # The cut took main's last turn with it: the replay stops where the recording does.
    assert proc.returncode == 1
    assert "replay stopped: the trace ends here: the recorded run was killed while main ran" in (
        err(proc)
    )


def test_an_until_id_that_does_not_exist_is_refused(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    trace, _ = recorded
    scenario = tmp_path / "s.json"
    scenario.write_text('{"agents": {"main": {"turns": [{"text": "x"}]}}}')
    proc = replay([str(trace), "--until", "toolu_nope", "--continue-provider", "scripted",
                   "--scenario", str(scenario)], tmp_path)  # fmt: skip
    assert proc.returncode == 2
    assert "--until toolu_nope: no such tool call or turn in run" in err(proc)
    assert err(proc).count("\n") == 1


# -- in process: the Replayer itself -----------------------------------------------------------

SCENARIO: dict[str, Any] = {
    "agents": {
        "main": {
            "turns": [
                {
                    "text": "Two at once.",
                    "tool_calls": [
                        {"name": "agent", "input": {"description": "a", "prompt": "A"}},
                        {"name": "agent", "input": {"description": "b", "prompt": "B"}},
                    ],
                },
                {"text": "Both done.", "delay_s": 0.3},
            ]
        },
        "general": {"turns": [{"text": "done"}]},
    }
}


async def _record_scripted(tmp_path: Path) -> Path:
    trace = tmp_path / "scripted.jsonl"
    async with open_runtime(scenario=SCENARIO, workspace=tmp_path, trace=trace) as rt:
        outcome = await rt.run("go")
    assert outcome.status == "completed"
    return trace


async def _replay_in_process(trace: Path, tmp_path: Path, **kwargs: Any) -> tuple[Any, float]:
    from runtime.replay import Replayer, load_recording
    from tools import builtin_tools

    replayer = Replayer(load_recording(trace), **kwargs)
    t0 = trio.current_time()
    async with open_runtime(
        replayer, workspace=tmp_path, trace=False, tools=replayer.mock_tools(builtin_tools())
    ) as rt:
        replayer.attach(rt._run)
        outcome = await rt.run("go")
        replayer.finish()
    assert not replayer.divergences
    return outcome, trio.current_time() - t0


async def test_recorded_delays_are_skipped_unless_realtime(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # Recorded on the wall clock (the trace's timestamps), replayed on a virtual one.
    trace = await trio.to_thread.run_sync(lambda: trio.run(_record_scripted, tmp_path))
    outcome, fast = await _replay_in_process(trace, tmp_path)
    assert (outcome.status, outcome.result, fast) == ("completed", "Both done.", 0.0)
    outcome, slow = await _replay_in_process(trace, tmp_path, realtime=True)
    assert outcome.result == "Both done."
    assert 0.3 <= slow < 1.0


async def test_an_older_trace_says_what_it_cannot_reproduce(tmp_path: Path) -> None:
    from runtime.replay import load_recording

    trace = await _record_scripted(tmp_path)
    old = tmp_path / "old.jsonl"
    lines = []
    for line in trace.read_bytes().splitlines():
        obj = orjson.loads(line)
        obj.pop("tool_use_ids", None)
        if obj["type"] == "run_started":
            del obj["config"]["permission_rules"]
        lines.append(orjson.dumps(obj) + b"\n")
    old.write_bytes(b"".join(lines))
    assert load_recording(trace).notes == []
    order, rules = load_recording(old).notes
    assert rules.startswith("the trace predates run_started.config.permission_rules")
    assert order.startswith("the trace predates turn_finished.tool_use_ids")


async def test_mock_tools_stand_in_for_recorded_tools_this_runtime_lacks(tmp_path: Path) -> None:
    from runtime.replay import Replayer, load_recording
    from tools import builtin_tools

    trace = await _record_scripted(tmp_path)
    lines = []
    for line in trace.read_bytes().splitlines():  # as if main had called an MCP server's tool
        obj = orjson.loads(line)
        if obj["type"] == "tool_started" and obj["input"].get("prompt") == "B":
            obj["name"], obj["input"] = "mcp__srv__lookup", {"key": "B"}
        lines.append(orjson.dumps(obj) + b"\n")
    changed = tmp_path / "mcp.jsonl"
    changed.write_bytes(b"".join(lines))
    replayer = Replayer(load_recording(changed))
    seen: list[Any] = []
    async with open_runtime(
        replayer,
        workspace=tmp_path,
        trace=False,
        tools=replayer.mock_tools(builtin_tools()),
        permission_mode="allow-all",
        on_event=seen.append,
    ) as rt:
        replayer.attach(rt._run)
        outcome = await rt.run("go")
        replayer.finish()
    assert outcome.result == "Both done."
    (call,) = [e for e in seen if e.type == "tool_finished" and e.name == "mcp__srv__lookup"]
    assert (call.status, call.output) == ("ok", "done")  # what the recording says it returned
    # The recorded sub-agent under that call has no counterpart now, and that is said.
    assert [str(d) for d in replayer.divergences] == [
        "main \u203a general: was recorded, but the replay has no agent here"
    ]


async def test_sigint_aborts_a_realtime_replay_with_every_node_finished(tmp_path: Path) -> None:
    trace = await _record_scripted(tmp_path)
    # Stretch main's last turn to a minute, as if the model had taken that long.
    lines = trace.read_bytes().splitlines()
    last_turn = max(i for i, line in enumerate(lines) if b'"turn_finished"' in line)
    obj = orjson.loads(lines[last_turn])
    obj["ts"] += 60
    lines[last_turn] = orjson.dumps(obj)
    slow = tmp_path / "slow.jsonl"
    slow.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "out.jsonl"
    env = {**os.environ, "COLUMNS": "200"}
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "runtime", "replay", str(slow), "--realtime", "--mock-tools",
         "--trace", str(out)],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    seen = b""
    with trio.fail_after(30):
        while seen.count(b"agent completed") < 2:  # both sub-agents done: main waits its turn
            chunk = await proc.stdout.receive_some(4096)
            assert chunk, seen
            seen += chunk
        proc.send_signal(signal.SIGINT)
        assert await proc.wait() == 130
    tree = tree_of(out)
    assert tree.status == "cancelled"
    check_invariants(events_of(out))


async def test_on_a_terminal_the_live_view_and_the_picker_work_in_a_replay(tmp_path: Path) -> None:
    import pexpect

    trace = await _record_scripted(tmp_path)
    events = events_of(trace)
    slow_agent = next(e.agent_id for e in events if e.type == "agent_started" and e.prompt == "B")
    lines = []
    for line in trace.read_bytes().splitlines():  # B's only turn took a minute, as recorded
        obj = orjson.loads(line)
        if obj["type"] == "turn_finished" and obj["agent_id"] == slow_agent:
            obj["ts"] += 60
        lines.append(orjson.dumps(obj))
    slow = tmp_path / "slow.jsonl"
    slow.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "out.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    child = pexpect.spawn(
        sys.executable,
        ["-m", "runtime", "replay", str(slow), "--realtime", "--mock-tools", "--trace", str(out)],
        cwd=str(tmp_path), env=env, dimensions=(50, 160), encoding="utf-8",
        codec_errors="replace", timeout=20,
    )  # fmt: skip
    try:
        await trio.to_thread.run_sync(child.expect, "general")  # the live tree is drawn
        child.sendintr()
        await trio.to_thread.run_sync(child.expect, r"\[(\d+)\] general (tu-1\.2) b")
        number = child.match.group(1)
        await trio.to_thread.run_sync(child.expect, "cancel> ")
        child.sendline(number)
        await trio.to_thread.run_sync(child.expect, pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    tree = tree_of(out)
    statuses = {a.name + ":" + (a.parent.input.get("prompt", "") if a.parent else ""): a.status
                for a in tree.agents.values()}  # fmt: skip
    assert statuses == {"main:": "completed", "general:A": "completed", "general:B": "cancelled"}
    assert ("main \u203a general", "ended cancelled, recorded completed") in tree.divergences
    check_invariants(events_of(out))


def test_a_clean_strict_replay_says_so_in_one_line(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    trace, _ = recorded
    proc = replay([str(trace), "--mock-tools", "--strict", "--no-trace"], tmp_path)
    assert proc.returncode == 0, err(proc)
    said = [line for line in err(proc).splitlines() if "divergence" in line]
    assert said == ["trio-agents: replay: no divergence from the recording (--strict)"]


CANCELLED = {"agents": {
    "main": {"turns": [
        {"tool_calls": [
            {"name": "agent", "input": {"description": "slow", "prompt": "S", "agent": "sleeper"}},
            {"name": "agent", "input": {"description": "fast", "prompt": "F"}}]},
        {"text": "Done without the slow one."}]},
    "sleeper": {"turns": [{"tool_calls": [{"name": "bash", "input": {"command": "sleep 30"}}]},
                          {"text": "slept"}]},
    "general": {"turns": [{"text": "fast"}]}}}


async def test_a_replayed_cancel_comes_before_what_it_cancels_as_recorded(tmp_path: Path) -> None:
    """The recording: the sleeper's `agent` call cancelled while its bash runs. Replayed with
    --mock-tools, ``cancel_requested`` precedes the bash call's cancelled end, as recorded."""
    trace = tmp_path / "cancelled.jsonl"
    running = trio.Event()

    def tap(event: Any) -> None:
        if event.type == "tool_started" and event.name == "bash":
            running.set()

    async with open_runtime(scenario=CANCELLED, workspace=tmp_path, trace=trace,
                            permission_mode="allow-all", on_event=tap) as rt:
        handle = await rt.start("go")
        with trio.fail_after(10):
            await running.wait()
        assert await rt.cancel("tu-1.1", "not needed", by="user")
        assert (await handle.wait()).status == "completed"

    def order(events: list[Any]) -> list[str]:
        return [f"{e.type} {getattr(e, 'target', '')}{getattr(e, 'tool_use_id', '')}".strip()
                for e in events
                if e.type == "cancel_requested"
                or (e.type == "tool_finished" and e.status == "cancelled")]

    recorded = order(events_of(trace))
    assert recorded == ["cancel_requested tu-1.1", "tool_finished tu-2.1",
                        "tool_finished tu-1.1"]
    out = tmp_path / "replayed.jsonl"
    proc = await trio.to_thread.run_sync(
        lambda: replay([str(trace), "--mock-tools", "--strict", "--trace", str(out)], tmp_path))
    assert proc.returncode == 0, err(proc)
    replayed = events_of(out)
    assert order(replayed) == recorded
    [cancel] = [e for e in replayed if e.type == "cancel_requested"]
    assert (cancel.reason, cancel.by) == ("not needed", "user")
    check_invariants(replayed)
    plain = await trio.to_thread.run_sync(
        lambda: replay([str(trace), "--mock-tools", "--no-trace"], tmp_path))
    lines = plain.stdout.decode().splitlines()
    cancel_line = next(i for i, line in enumerate(lines) if "cancel requested" in line)
    tool_line = next(i for i, line in enumerate(lines) if "tool cancelled: bash" in line)
    assert cancel_line < tool_line, lines
