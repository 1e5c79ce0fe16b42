"""The command line without a terminal: options, --help, exit codes, plain lines, --json, SIGINT.

Every test runs the real command in a subprocess (``python -m runtime`` or the console script);
waits are on the process's output, bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

from runtime import Event, decode_event
from tests.harness import agent_call
from tests.invariants import check_invariants

SCENARIOS = Path(__file__).parent / "scenarios"
CONSOLE_SCRIPT = Path(sys.executable).parent / "trio-agents"


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "runtime", *args]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("NO_COLOR", None)
    env["COLUMNS"] = "120"
    return env


async def run_cli(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(20):
        return await trio.run_process(
            list(args),
            cwd=cwd,
            env=child_env(),
            stdin=subprocess.DEVNULL,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


def read_trace(path: Path) -> list[Event]:
    return [decode_event(line) for line in path.read_bytes().splitlines() if line.strip()]


def err_lines(proc: subprocess.CompletedProcess[bytes]) -> list[str]:
    return proc.stderr.decode().strip().splitlines()


class Lines:
    """Lines of a byte stream, as they come."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buf = b""
        self.seen: list[bytes] = []

    async def next(self) -> bytes | None:
        """The next line, or None at the end of the stream."""
        while b"\n" not in self._buf:
            data = await self._stream.receive_some(65536)
            if not data:
                rest, self._buf = self._buf, b""
                if rest:
                    self.seen.append(rest)
                    return rest
                return None
            self._buf += data
        line, _, self._buf = self._buf.partition(b"\n")
        self.seen.append(line)
        return line

    async def until(self, predicate: Callable[[bytes], bool]) -> bytes:
        """Read lines up to the first one *predicate* accepts."""
        while (line := await self.next()) is not None:
            if predicate(line):
                return line
        raise AssertionError(f"never came; saw {self.seen[-5:]!r}")

    async def drain(self) -> None:
        while await self.next() is not None:
            pass


# -- usage (in-process: argparse and input checks need no subprocess) ------------------------


def main_code(args: list[str]) -> int:
    from runtime.cli._main import main

    try:
        return main(args)
    except SystemExit as exc:  # argparse exits by itself for --help and bad usage
        return int(exc.code or 0)


@pytest.mark.parametrize("command", [[], ["run"], ["demo"], ["chat"], ["cancel"]])
def test_help_works_for_every_command(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main_code([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: trio-agents")
    if command in (["run"], ["demo"], ["chat"]):
        for option in ("--scenario", "--json", "--permission-mode", "--control"):
            assert option in out
        # The demo plays its script: it offers no provider or model (issue 21, item 10).
        assert ("--provider" in out) is (command != ["demo"])
        assert ("--model" in out) is (command != ["demo"])


@pytest.mark.parametrize(
    ("args", "fault"),
    [
        (["run", "hello", "--bogus"], "unrecognized arguments: --bogus"),
        (["run"], "the following arguments are required: PROMPT"),
        (["run", "x", "--max-turns", "0"], "--max-turns: expected a whole number >= 1"),
        (["run", "x", "--permission-mode", "maybe"], "--permission-mode: invalid choice"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["run", "x", "--scenario", "s.json", "--provider", "openai"], "--scenario runs"),
        (["run", "x", "--scenario", "missing.json"], "--scenario missing.json: no such file"),
        (["run", "   "], "the prompt is empty"),
        (["chat", "--list", "--resume"], "argument --resume: not allowed with argument --list"),
    ],
)
def test_bad_usage_exits_2_with_one_line(
    args: list[str],
    fault: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.json").write_text("{}")
    assert main_code(args) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, lines
    assert fault in lines[0]
    assert captured.out == ""


def test_malformed_scenario_exits_2_naming_the_json_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main_code(["run", "go", "--scenario", str(SCENARIOS / "malformed.json")]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "agents.main.turns[0].tool_calls[0].name: missing" in lines[0]
    assert captured.out == ""
    assert not (tmp_path / ".trio-agents").exists()  # refused before anything ran


def test_debug_shows_the_traceback_of_a_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["run", "go", "--debug", "--scenario", str(SCENARIOS / "malformed.json")]
    assert main_code(args) == 2
    assert "Traceback" in capsys.readouterr().err


def test_bad_agents_file_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "agents.toml").write_text("[agents.x]\nbogus = 1\n")
    args = ["run", "go", "--scenario", str(SCENARIOS / "simple.json"), "--agents", "agents.toml"]
    assert main_code(args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "agents.x.bogus: unknown key" in lines[0]


def test_missing_api_key_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert main_code(["run", "go", "--provider", "openai", "--no-trace"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "OPENAI_API_KEY" in lines[0]


# -- runs without a terminal (in-process: stdout is pytest's capture, not a tty) ---------------


def test_plain_lines_without_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main_code(["run", "look", "--scenario", str(SCENARIOS / "simple.json")]) == 0
    captured = capsys.readouterr()
    out, err = captured.out.splitlines(), captured.err.splitlines()
    assert out[0] == "[main] agent started"
    assert any(line.startswith("[main] tool started: glob: *") for line in out)
    assert any(line.startswith("[main] tool ok: glob") for line in out)
    assert "Looking around." in out
    assert "Nothing to worry about." in out
    assert any(line.startswith("[main] agent completed") for line in out)
    # The default trace goes under .trio-agents/traces/ of the current folder.
    traces = list((tmp_path / ".trio-agents" / "traces").glob("*.jsonl"))
    assert len(traces) == 1
    relative = traces[0].relative_to(tmp_path)
    # The trace is named on stderr as the run starts, and with the outcome at its end.
    assert err[0] == f"Trace: {relative}"
    assert err[1].startswith("run completed in ")
    assert f"Inspect it: trio-agents trace show {relative}" in err
    assert not any(line.startswith("run completed") for line in out)
    check_invariants(read_trace(traces[0]))


def test_a_failed_root_exits_1_with_an_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["run", "go", "--no-trace", "--scenario", str(SCENARIOS / "failing.json")]
    assert main_code(args) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (
        "trio-agents: error: the main agent failed: the model fell over"
    )
    assert "Traceback" not in err


def test_max_turns_ends_the_root_with_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    args = [
        "run",
        "go",
        "--no-trace",
        "--max-turns",
        "1",
        "--scenario",
        str(SCENARIOS / "simple.json"),
    ]
    assert main_code(args) == 1
    assert "stopped at its turn limit" in capsys.readouterr().err


def test_json_puts_only_events_on_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    monkeypatch.chdir(tmp_path)
    trace = tmp_path / "t.jsonl"
    args = [
        "run",
        "look",
        "--json",
        "--trace",
        str(trace),
        "--scenario",
        str(SCENARIOS / "simple.json"),
    ]
    assert main_code(args) == 0
    captured = capsysbinary.readouterr()
    events = [decode_event(line) for line in captured.out.splitlines()]
    check_invariants(events)
    assert [e.seq for e in events] == [e.seq for e in read_trace(trace)]
    # stderr: the trace as the run starts, the one-line outcome and the trace again at its end.
    err = captured.err.decode().splitlines()
    assert err[0] == f"Trace: {trace}"
    assert err[1].startswith("run completed in ")
    assert err[2:] == [f"Trace: {trace}", f"Inspect it: trio-agents trace show {trace}"]
    assert events[0].config["trace"] == str(trace)  # type: ignore[attr-defined]


def test_prompt_from_stdin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    import io

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", io.StringIO("the prompt from a pipe\n"))
    args = ["run", "-", "--json", "--no-trace", "--scenario", str(SCENARIOS / "simple.json")]
    assert main_code(args) == 0
    started: list[dict[str, Any]] = [
        json.loads(line)
        for line in capsysbinary.readouterr().out.splitlines()
        if b'"agent_started"' in line
    ]
    assert started[0]["prompt"] == "the prompt from a pipe\n"


# -- the real command in a subprocess ---------------------------------------------------------


async def test_console_script_and_module_both_run(tmp_path: Path) -> None:
    simple = str(SCENARIOS / "simple.json")
    script, module, bad = await _gather(
        run_cli([str(CONSOLE_SCRIPT), "run", "look", "--no-trace", "--scenario", simple], tmp_path),
        run_cli(cli("run", "look", "--no-trace", "--scenario", simple), tmp_path),
        run_cli(cli("run", "look", "--frobnicate"), tmp_path),
    )
    for proc in (script, module):
        assert proc.returncode == 0, proc.stderr
        assert b"Nothing to worry about." in proc.stdout
    assert bad.returncode == 2
    assert len(err_lines(bad)) == 1


async def _gather(*calls: Any) -> list[Any]:
    results: list[Any] = [None] * len(calls)

    async def one(i: int, call: Any) -> None:
        results[i] = await call

    async with trio.open_nursery() as nursery:
        for i, call in enumerate(calls):
            nursery.start_soon(one, i, call)
    return results


async def test_sigint_aborts_a_json_run_without_a_terminal(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    proc = await trio.lowlevel.open_process(
        cli(
            "run",
            "go",
            "--json",
            "--permission-mode",
            "allow-all",
            "--trace",
            str(trace),
            "--scenario",
            str(SCENARIOS / "three_parallel.json"),
        ),
        cwd=tmp_path,
        env=child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    lines = Lines(proc.stdout)
    try:
        with trio.fail_after(20):
            await lines.until(lambda line: b'"command":"sleep 30"' in line)
            proc.send_signal(signal.SIGINT)
            await lines.drain()
            code = await proc.wait()
            err = await proc.stderr.receive_some(65536)
    finally:
        if proc.returncode is None:
            proc.kill()
    assert code == 130, err
    events = [decode_event(line) for line in lines.seen]  # every line is a valid event
    check_invariants(events)
    assert events[-1].type == "run_finished"
    assert events[-1].status == "cancelled"  # type: ignore[attr-defined]
    statuses = {e.agent_id: e.status for e in events if e.type == "agent_finished"}  # type: ignore[attr-defined]
    assert set(statuses.values()) <= {"cancelled", "completed"}
    assert "cancelled" in statuses.values()
    check_invariants(read_trace(trace))


@pytest.mark.slow  # seconds of real time; how long Ctrl+C takes is asserted
def test_sigint_ends_a_json_run_whose_reader_stopped_reading(tmp_path: Path) -> None:
    # `run --json | less` left on its first page: the pipe fills, the agents wait (backpressure)
    # and the event loop stays free, so Ctrl+C still ends the run, promptly, with its trace.
    words = " ".join(f"w{i}" for i in range(400))
    calls = [agent_call(f"part {i}", "worker") for i in range(20)]
    scenario = tmp_path / "s.json"
    scenario.write_text(
        json.dumps(
            {
                "agents": {
                    "main": {"tools": ["agent"], "turns": [{"tool_calls": calls}, {"text": "ok"}]},
                    "worker": {"tools": [], "turns": [{"text": words, "chunk_delay_s": 0}]},
                }
            }
        )
    )
    trace = tmp_path / "t.jsonl"
    command = cli("run", "go", "--json", "--trace", str(trace), "--scenario", str(scenario))
    proc = subprocess.Popen(
        command, cwd=tmp_path, env=child_env(), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        size, still = -1, 0
        deadline = time.monotonic() + 30
        while still < 5:  # the trace stops growing: the run is held back by its reader
            assert time.monotonic() < deadline, "the run never stalled"
            assert proc.poll() is None, "the run ended: the scenario is too small to stall it"
            time.sleep(0.1)
            now = trace.stat().st_size if trace.exists() else 0
            still = still + 1 if now == size and now > 0 else 0
            size = now
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=15)
        took = time.monotonic() - started
        stdout = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()
    assert code == 130
    assert took < 8, f"Ctrl+C took {took:.1f} s"
    events = read_trace(trace)
    check_invariants(events)
    assert events[-1].type == "run_finished"
    written = trace.read_bytes()
    assert written.startswith(stdout[: stdout.rfind(b"\n") + 1]), "stdout is the trace, cut short"


def test_ray_address_reaches_the_runtime() -> None:
    from runtime.cli._main import build_parser
    from runtime.cli._options import options_from_args, run_config

    ns = build_parser().parse_args(["run", "x", "--ray-address", "10.0.0.5:6379"])
    assert run_config(options_from_args(ns)).ray_address == "10.0.0.5:6379"
    ns = build_parser().parse_args(["run", "x"])
    assert run_config(options_from_args(ns)).ray_address is None


def test_a_second_run_on_the_same_trace_path_exits_2_and_leaves_the_first_alone(
    tmp_path: Path,
) -> None:
    scenario = tmp_path / "slow.json"
    slow = {"agents": {"main": {"tools": [], "turns": [{"text": "done", "delay_s": 30}]}}}
    scenario.write_text(json.dumps(slow))
    trace = tmp_path / "t.jsonl"
    args = cli("run", "go", "--scenario", str(scenario), "--trace", str(trace))
    first = subprocess.Popen(
        args,
        cwd=tmp_path,
        env=child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while not (trace.exists() and trace.read_bytes().count(b"\n") >= 2):
            assert time.monotonic() < deadline, "the first run stalled"
            assert first.poll() is None, "the first run ended early"
            time.sleep(0.02)  # a real subprocess writes the trace: poll its file
        before = trace.read_bytes()
        second = subprocess.run(
            args,
            cwd=tmp_path,
            env=child_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
            timeout=20,
        )
        assert second.returncode == 2
        lines = second.stderr.decode().strip().splitlines()
        assert len(lines) == 1, lines
        assert "being written by another run" in lines[0]
        assert trace.read_bytes().startswith(before)
    finally:
        first.kill()
        first.wait()
        if first.stderr:
            first.stderr.close()


def test_bash_in_a_real_run_cannot_read_the_runtimes_secrets(tmp_path: Path) -> None:
    # /proc/$PPID/environ is the trio-agents process: encoded, no redaction could catch it.
    key = "sk-cli-0123456789abcdef"
    command = "base64 -w0 < /proc/$PPID/environ"
    call = {"name": "bash", "input": {"command": command}}
    scenario = tmp_path / "s.json"
    scenario.write_text(
        json.dumps({"agents": {"main": {"turns": [{"tool_calls": [call]}, {"text": "ok"}]}}})
    )
    trace = tmp_path / "t.jsonl"
    proc = subprocess.run(
        cli(
            "run",
            "go",
            "--scenario",
            str(scenario),
            "--trace",
            str(trace),
            "--permission-mode",
            "allow-all",
        ),
        cwd=tmp_path,
        env={**child_env(), "MY_API_KEY": key},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    (output,) = [e.output for e in read_trace(trace) if e.type == "tool_finished"]  # type: ignore[attr-defined]
    import base64

    environ = base64.b64decode(output.split("\n")[0])
    assert b"PATH=" in environ
    assert key.encode() not in environ


@pytest.mark.parametrize("how", ["none", "flag", "settings"])
def test_allow_env_lets_bash_see_a_secret_that_stays_masked(tmp_path: Path, how: str) -> None:
    """`gh` needs GH_TOKEN: --allow-env (or permissions.allow_env) passes a secret-looking
    variable to the tools; its value is still masked in what the run records."""
    token = "ghp-0123456789abcdefXYZ"
    command = 'test "$GH_TOKEN" = "' + token + '" && echo "present $GH_TOKEN" || echo absent'
    call = {"name": "bash", "input": {"command": command}}
    scenario = tmp_path / "s.json"
    scenario.write_text(
        json.dumps({"agents": {"main": {"turns": [{"tool_calls": [call]}, {"text": "ok"}]}}})
    )
    args = ["run", "go", "--scenario", str(scenario), "--trace", str(tmp_path / "t.jsonl"),
            "--permission-mode", "allow-all"]
    if how == "flag":
        args += ["--allow-env", "GH_TOKEN"]
    elif how == "settings":  # the user's own file (a workspace's may not loosen: test_trust.py)
        user = Path(os.environ["XDG_CONFIG_HOME"]) / "trio-agents"
        user.mkdir(parents=True, exist_ok=True)
        (user / "settings.toml").write_text('[permissions]\nallow_env = ["GH_TOKEN"]\n')
    proc = subprocess.run(
        cli(*args),
        cwd=tmp_path,
        env={**child_env(), "GH_TOKEN": token},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    (output,) = [e.output for e in read_trace(tmp_path / "t.jsonl") if e.type == "tool_finished"]  # type: ignore[attr-defined]
    if how == "none":
        assert output.splitlines()[0] == "absent"
    else:
        assert output.startswith("present ")
    assert token not in (tmp_path / "t.jsonl").read_text()


def test_allow_env_refuses_what_is_not_a_variable_name(tmp_path: Path) -> None:
    proc = subprocess.run(cli("run", "go", "--allow-env", "A B"), cwd=tmp_path,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 2
    assert "--allow-env: expected environment variable names; got 'A B'" in proc.stderr


def test_a_second_run_on_an_existing_trace_is_refused_in_one_line_unless_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace is one run: `replay`, `trace stats` and `export` read it without `--run`. A
    finished run's trace is never replaced silently; `--force` replaces it."""
    monkeypatch.chdir(tmp_path)
    trace = tmp_path / "t.jsonl"
    args = ["run", "look", "--scenario", str(SCENARIOS / "simple.json"), "--trace", str(trace)]
    assert main_code(args) == 0
    first = trace.read_bytes()
    run_id = read_trace(trace)[0].run_id
    capsys.readouterr()
    assert main_code(args) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"trio-agents: error: --trace {trace} holds a trace (run {run_id}); give another path, "
        "or --force to replace it"
    ]
    assert trace.read_bytes() == first
    assert main_code([*args, "--force"]) == 0
    events = read_trace(trace)
    assert events[0].run_id != run_id
    assert [e.type for e in events].count("run_started") == 1  # replaced, not appended
    # A file that is not a trace is not replaced silently either.
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    assert main_code([*args[:-1], str(notes)]) == 2
    assert "holds 9 bytes that are not a trace" in capsys.readouterr().err
    assert notes.read_text() == "my notes\n"
