"""The control socket: cancel, permission and message over JSON lines, from one or many clients.

In-process tests run a scripted runtime and a :class:`ControlServer` in the test's trio loop and
talk to it over a real unix socket; the last tests drive the real command and
``trio-agents cancel`` from other processes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio
import trio.testing

from runtime import ConfigError, Event, Runtime, decode_event, open_runtime
from runtime.cli._control import MAX_LINE, ControlServer, control_request
from tests.invariants import check_invariants

SCENARIOS = Path(__file__).parent / "scenarios"


@pytest.fixture
def sock_path(tmp_path: Path) -> Iterator[Path]:
    # Unix socket paths are short (~100 bytes): pytest's tmp_path can be too deep.
    short = Path(f"/tmp/ta-{os.getpid()}-{abs(hash(str(tmp_path))) % 10**8}.sock")
    yield short
    short.unlink(missing_ok=True)


class Client:
    """A control client: one request line out, one answer line back."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self._buf = b""

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def answer(self) -> dict[str, Any]:
        while b"\n" not in self._buf:
            data = await self.stream.receive_some(65536)
            assert data, "the server closed the connection"
            self._buf += data
        line, _, self._buf = self._buf.partition(b"\n")
        result: dict[str, Any] = json.loads(line)
        return result

    async def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        await self.send_raw(orjson.dumps(request) + b"\n")
        return await self.answer()


@asynccontextmanager
async def connect(path: Path) -> AsyncGenerator[Client, None]:
    stream = await trio.open_unix_socket(str(path))
    async with stream:
        yield Client(stream)


class Run:
    """A scripted run with a control server, and its events so far."""

    def __init__(self, server: ControlServer) -> None:
        self.server = server
        self.rt: Runtime
        self.events: list[Event] = []
        self._changed = trio.Event()

    def tap(self, event: Event) -> None:
        self.events.append(event)
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, predicate: Callable[[Event], bool]) -> Event:
        while True:
            for event in self.events:
                if predicate(event):
                    return event
            await self._changed.wait()


@asynccontextmanager
async def control_run(
    scenario: str, path: Path, workspace: Path, **kwargs: Any
) -> AsyncGenerator[Run, None]:
    kwargs.setdefault("permission_mode", "allow-all")
    server = await ControlServer.bind(str(path))
    run = Run(server)
    try:
        async with open_runtime(
            scenario=SCENARIOS / scenario,
            workspace=workspace,
            trace=False,
            on_event=run.tap,
            **kwargs,
        ) as rt:
            run.rt = rt
            async with trio.open_nursery() as nursery:
                await nursery.start(server.serve, rt)
                yield run
                nursery.cancel_scope.cancel()
    finally:
        server.close()


def _sleeper_call(e: Event) -> bool:
    return e.type == "tool_started" and e.input.get("agent") == "sleeper"  # type: ignore[attr-defined]


def _sleep_started(e: Event) -> bool:
    return e.type == "tool_started" and e.input.get("command") == "sleep 30"  # type: ignore[attr-defined]


async def test_cancel_over_the_socket_cancels_only_that_subtree(
    sock_path: Path, workspace: Path
) -> None:
    with trio.fail_after(15):
        async with control_run("three_parallel.json", sock_path, workspace) as run:
            handle = await run.rt.start("go")
            call = await run.wait_for(_sleeper_call)
            await run.wait_for(_sleep_started)
            async with connect(sock_path) as client:
                answer = await client.ask({"op": "cancel", "target": call.tool_use_id})  # type: ignore[attr-defined]
                assert answer == {"ok": True}
                again = await client.ask({"op": "cancel", "target": call.tool_use_id})  # type: ignore[attr-defined]
                assert again["ok"] is False
                assert "already finished" in again["error"]
            outcome = await handle.wait()
    assert outcome.status == "completed"
    events = run.events
    check_invariants(events)
    cancels = [e for e in events if e.type == "cancel_requested"]
    assert [(e.target, e.by) for e in cancels] == [(call.tool_use_id, "control")]  # type: ignore[attr-defined]
    finished = {e.agent_id: e for e in events if e.type == "agent_finished"}
    by_name = {
        e.name: finished[e.agent_id].status  # type: ignore[attr-defined]
        for e in events
        if e.type == "agent_started"
    }
    assert by_name == {
        "main": "completed",
        "sleeper": "cancelled",
        "worker": "completed",
        "medium": "completed",
    }
    assert not await trio.Path(sock_path).exists()  # the file goes with the server


async def test_bad_lines_get_error_answers_and_the_run_goes_on(
    sock_path: Path, workspace: Path
) -> None:
    with trio.fail_after(15):
        async with control_run("three_parallel.json", sock_path, workspace) as run:
            handle = await run.rt.start("go")
            call = await run.wait_for(_sleeper_call)
            async with connect(sock_path) as client:
                bad: list[tuple[bytes, str]] = [
                    (b"not json\n", "not JSON"),
                    (b"[1, 2]\n", "expected a JSON object"),
                    (b"\n", "empty line"),
                    (b'{"target": "x"}\n', "op: missing"),
                    (b'{"op": "explode"}\n', "op: unknown 'explode'"),
                    (b'{"op": "cancel"}\n', "target: missing"),
                    (b'{"op": "cancel", "target": 7}\n', "target: expected"),
                    (b'{"op": "cancel", "target": "nope"}\n', "no running node 'nope'"),
                    (
                        b'{"op": "permission", "request_id": "perm-9", "granted": "yes"}\n',
                        "granted: expected true or false",
                    ),
                    (
                        b'{"op": "permission", "request_id": "perm-9", "granted": true}\n',
                        "no pending permission request 'perm-9'",
                    ),
                    (
                        b'{"op": "message", "agent_id": "agent-99", "text": "hi"}\n',
                        "agent 'agent-99' is not running",
                    ),
                ]
                for line, error in bad:
                    await client.send_raw(line)
                    answer = await client.answer()
                    assert answer["ok"] is False, line
                    assert error in answer["error"], (line, answer)
                # An over-long line is refused once, skipped to its end, and the connection
                # still works afterwards.
                await client.send_raw(b"x" * (MAX_LINE + 10))
                answer = await client.answer()
                assert "longer than" in answer["error"]
                await client.send_raw(b"yyy" * 1000 + b"\n")
                answer = await client.ask({"op": "cancel", "target": call.tool_use_id})  # type: ignore[attr-defined]
                assert answer == {"ok": True}
            outcome = await handle.wait()
    assert outcome.status == "completed"
    check_invariants(run.events)
    assert not [e for e in run.events if e.type == "message_queued"]  # refused: not recorded


async def test_several_clients_at_once(sock_path: Path, workspace: Path) -> None:
    with trio.fail_after(15):
        async with control_run("three_parallel.json", sock_path, workspace) as run:
            handle = await run.rt.start("go")
            call = await run.wait_for(_sleeper_call)
            started = await run.wait_for(
                lambda e: e.type == "agent_started" and e.name == "sleeper"  # type: ignore[attr-defined]
            )
            async with connect(sock_path) as a, connect(sock_path) as b, connect(sock_path) as c:
                await trio.testing.wait_all_tasks_blocked()
                assert run.server.clients == 3
                # A half-sent line on one client does not hold up the others.
                await a.send_raw(b'{"op": "pend')
                assert (await b.ask({"op": "pending"})) == {"ok": True, "pending": []}
                msg = {"op": "message", "agent_id": started.agent_id, "text": "hurry up"}
                assert (await c.ask(msg)) == {"ok": True}
                await a.send_raw(b'ing"}\n')
                assert (await a.answer()) == {"ok": True, "pending": []}
                answer = await b.ask({"op": "cancel", "target": call.tool_use_id})  # type: ignore[attr-defined]
                assert answer == {"ok": True}
            outcome = await handle.wait()
    assert outcome.status == "completed"
    # The message is recorded as it is queued (a resume puts it back if never read).
    queued = [(e.agent_id, e.text) for e in run.events if e.type == "message_queued"]  # type: ignore[attr-defined]
    assert queued == [(started.agent_id, "hurry up")]


async def test_control_clients_answer_permission_questions_in_ask_mode(
    sock_path: Path, workspace: Path
) -> None:
    with trio.fail_after(15):
        async with (
            control_run("permission.json", sock_path, workspace, permission_mode="ask") as run,
            connect(sock_path) as client,
        ):
            handle = await run.rt.start("go")
            asked = await run.wait_for(lambda e: e.type == "permission_requested")
            pending = await client.ask({"op": "pending"})
            assert pending["ok"] is True
            assert [p["request_id"] for p in pending["pending"]] == [asked.request_id]  # type: ignore[attr-defined]
            assert pending["pending"][0]["name"] == "bash"
            answer = await client.ask(
                {"op": "permission", "request_id": asked.request_id, "granted": False}  # type: ignore[attr-defined]
            )
            assert answer == {"ok": True}
            outcome = await handle.wait()
    assert outcome.status == "completed"
    resolved = [e for e in run.events if e.type == "permission_resolved"]
    assert [(e.granted, e.reason) for e in resolved] == [  # type: ignore[attr-defined]
        (False, "denied through the control socket")
    ]
    bash = [e for e in run.events if e.type == "tool_finished" and e.name == "bash"]  # type: ignore[attr-defined]
    assert [e.status for e in bash] == ["denied"]  # type: ignore[attr-defined]
    assert not (workspace / "asked.txt").exists()


async def test_a_question_waits_for_a_client_that_connects_later(
    sock_path: Path, workspace: Path
) -> None:
    # No client is connected when the question comes: it stays pending, and a client that
    # connects afterwards finds it and answers it with one line (as `nc -U` would).
    with trio.fail_after(15):
        async with control_run(
            "permission.json", sock_path, workspace, permission_mode="ask"
        ) as run:
            handle = await run.rt.start("go")
            asked = await run.wait_for(lambda e: e.type == "permission_requested")
            await trio.testing.wait_all_tasks_blocked()  # nobody there: everything settles
            assert not [e for e in run.events if e.type == "permission_resolved"]
            async with connect(sock_path) as client:
                pending = await client.ask({"op": "pending"})
            assert [p["request_id"] for p in pending["pending"]] == [asked.request_id]  # type: ignore[attr-defined]
            assert pending["pending"][0]["summary"].startswith("bash: ")
            # One-shot: send a line and close the writing side, without reading first.
            stream = await trio.open_unix_socket(str(sock_path))
            async with stream:
                line = {"op": "permission", "request_id": asked.request_id, "granted": True}  # type: ignore[attr-defined]
                await stream.send_all(orjson.dumps(line) + b"\n")
                await stream.send_eof()
                assert json.loads(await stream.receive_some(1000)) == {"ok": True}
            outcome = await handle.wait()
    assert outcome.status == "completed"
    resolved = [e for e in run.events if e.type == "permission_resolved"]
    assert [(e.granted, e.reason) for e in resolved] == [  # type: ignore[attr-defined]
        (True, "granted through the control socket")
    ]
    assert (workspace / "asked.txt").exists()


async def test_a_question_nobody_answers_times_out_with_a_control_socket(
    sock_path: Path, workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with control_run(
        "permission.json", sock_path, workspace, permission_mode="ask", permission_timeout_s=30
    ) as run:
        start = trio.current_time()
        outcome = await run.rt.run("go")
    assert outcome.status == "completed"
    (resolved,) = [e for e in run.events if e.type == "permission_resolved"]
    assert resolved.granted is False  # type: ignore[attr-defined]
    assert resolved.reason == "no answer within 30 s"  # type: ignore[attr-defined]
    assert trio.current_time() - start >= 30


async def test_ask_mode_with_neither_terminal_nor_control_socket_is_denied_at_once(
    workspace: Path,
) -> None:
    events: list[Event] = []
    with trio.fail_after(15):
        async with open_runtime(
            scenario=SCENARIOS / "permission.json",
            workspace=workspace,
            trace=False,
            on_event=events.append,
            permission_mode="ask",
        ) as rt:
            outcome = await rt.run("go")
    assert outcome.status == "completed"
    (resolved,) = [e for e in events if e.type == "permission_resolved"]
    assert resolved.granted is False  # type: ignore[attr-defined]
    assert "nobody can answer" in resolved.reason  # type: ignore[attr-defined]


async def test_a_stale_socket_file_is_replaced_and_a_live_one_refused(
    sock_path: Path, tmp_path: Path
) -> None:
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(sock_path))
    stale.close()  # the file stays, nobody listens: what a killed run leaves
    server = await ControlServer.bind(str(sock_path))
    try:
        with pytest.raises(ConfigError, match="another run is already listening"):
            await ControlServer.bind(str(sock_path))
        assert oct(os.stat(sock_path).st_mode & 0o777) == oct(0o600)
    finally:
        server.close()
    assert not await trio.Path(sock_path).exists()
    not_a_socket = tmp_path / "file"
    not_a_socket.write_text("x")
    with pytest.raises(ConfigError, match="exists and is not a socket"):
        await ControlServer.bind(str(not_a_socket))


def test_the_blocking_client_reports_a_missing_socket(tmp_path: Path) -> None:
    from runtime.cli._control import ControlConnectError

    with pytest.raises(ControlConnectError):
        control_request(str(tmp_path / "none.sock"), {"op": "pending"})


# -- from other processes ----------------------------------------------------------------------


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "runtime", *args]


async def test_trio_agents_cancel_from_another_process(sock_path: Path, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    env = dict(os.environ)
    proc = await trio.lowlevel.open_process(
        _cli(
            "run",
            "go",
            "--json",
            "--permission-mode",
            "allow-all",
            "--trace",
            str(trace),
            "--control",
            str(sock_path),
            "--scenario",
            str(SCENARIOS / "three_parallel.json"),
        ),
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    buf = b""
    try:
        with trio.fail_after(20):
            # The sleeper's bash call carries, as parent_tool_use_id, the id of the agent call
            # that started the sleeper: the subtree to cancel.
            target = None
            while target is None:
                data = await proc.stdout.receive_some(65536)
                assert data, "the run ended early"
                buf += data
                for line in buf.split(b"\n")[:-1]:
                    event = json.loads(line)
                    if event["type"] == "tool_started" and event["input"].get("command") == (
                        "sleep 30"
                    ):
                        target = event["parent_tool_use_id"]

            async def cancel(*ids: str) -> subprocess.CompletedProcess[bytes]:
                return await trio.run_process(
                    _cli("cancel", "--control", str(sock_path), *ids),
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                )

            refused = await cancel("no-such-node")
            assert refused.returncode == 1
            assert refused.stderr.decode().strip() == (
                "trio-agents: error: no running node 'no-such-node' (unknown or already finished)"
            )
            done = await cancel(target)
            assert done.returncode == 0, done.stderr
            while data := await proc.stdout.receive_some(65536):
                buf += data
            code = await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
    assert code == 0
    events = [decode_event(line) for line in buf.splitlines()]
    check_invariants(events)
    cancels = [(e.target, e.by) for e in events if e.type == "cancel_requested"]  # type: ignore[attr-defined]
    assert cancels == [(target, "control")]
    assert not await trio.Path(sock_path).exists()
    # Nobody listens any more: exit 2, one line.
    gone = await trio.run_process(
        _cli("cancel", "--control", str(sock_path), target),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert gone.returncode == 2
    assert len(gone.stderr.decode().strip().splitlines()) == 1
    assert "cannot connect" in gone.stderr.decode()


async def test_trio_agents_pending_and_permit_from_another_process(
    sock_path: Path, tmp_path: Path
) -> None:
    # A real run without a terminal, in ask mode with --control: its question waits until a
    # client that came later lists it (`trio-agents pending`) and answers it (`permit`).
    proc = await trio.lowlevel.open_process(
        _cli(
            "run",
            "go",
            "--json",
            "--permission-mode",
            "ask",
            "--no-trace",
            "--control",
            str(sock_path),
            "--scenario",
            str(SCENARIOS / "permission.json"),
        ),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None

    async def client(*args: str) -> subprocess.CompletedProcess[bytes]:
        return await trio.run_process(
            _cli(*args, "--control", str(sock_path)),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )

    buf = b""
    try:
        with trio.fail_after(30):
            while b'"permission_requested"' not in buf:
                data = await proc.stdout.receive_some(65536)
                assert data, "the run ended before it asked"
                buf += data
            # Nobody answers for a while: the question must wait. The run is a real
            # subprocess, so only real time can pass for it.
            await trio.sleep(0.3)
            listed = await client("pending")
            assert listed.returncode == 0, listed.stderr
            line, *whole = listed.stdout.decode().splitlines()
            request_id = line.split()[0]
            assert "bash: echo permitted > asked.txt" in line
            # Under it, the whole input and the rule --always would add.
            assert whole == [
                "    {",
                '      "command": "echo permitted > asked.txt"',
                "    }",
                "    (--always: allows bash(echo permitted > asked.txt) for the rest of the run)",
            ]
            as_json = await client("pending", "--json")
            assert [p["request_id"] for p in json.loads(as_json.stdout)] == [request_id]
            wrong = await client("permit", "perm-999", "yes")
            assert wrong.returncode == 1
            assert b"no pending permission request 'perm-999'" in wrong.stderr
            done = await client("permit", request_id, "yes")
            assert done.returncode == 0, done.stderr
            while data := await proc.stdout.receive_some(65536):
                buf += data
            code = await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
    assert code == 0
    events = [decode_event(line) for line in buf.splitlines()]
    (resolved,) = [e for e in events if e.type == "permission_resolved"]
    assert resolved.granted is True  # type: ignore[attr-defined]
    assert (tmp_path / "asked.txt").read_text() == "permitted\n"
    gone = await client("pending")
    assert gone.returncode == 2
    assert b"cannot connect" in gone.stderr


# The sleeper's bash call waits for the test to release it (at most 30 s), so the two `stop`
# commands reach the run while the call is running however slowly this machine starts them.
RELEASED = "for i in $(seq 600); do [ -e release ] && break; sleep 0.05; done; echo slept"


async def test_trio_agents_stop_from_another_process(sock_path: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "stop.json"
    scenario.write_text(json.dumps({"agents": {
        "main": {"turns": [
            {"tool_calls": [{"name": "agent", "input": {
                "description": "slow part", "prompt": "p", "agent": "sleeper"}}]},
            {"text": "done"}]},
        "sleeper": {"tools": ["bash"], "turns": [
            {"text": "on it", "tool_calls": [
                {"name": "bash", "input": {"command": RELEASED}}]},
            {"text": "a turn the stop prevents"}]}}}))  # fmt: skip
    proc = await trio.lowlevel.open_process(
        _cli("run", "go", "--json", "--permission-mode", "allow-all", "--no-trace",
             "--control", str(sock_path), "--scenario", str(scenario)),
        cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    buf = b""
    try:
        with trio.fail_after(20):
            while b'"tool_started"' not in buf:
                data = await proc.stdout.receive_some(65536)
                assert data, "the run ended early"
                buf += data

            async def stop(*ids: str) -> subprocess.CompletedProcess[bytes]:
                return await trio.run_process(
                    _cli("stop", "--control", str(sock_path), "--reason", "enough", *ids),
                    capture_stdout=True, capture_stderr=True, check=False,
                )  # fmt: skip

            done = await stop("agent-2")
            assert done.returncode == 0, done.stderr
            # The bash call goes on for a while: the run still answers.
            refused = await stop("agent-9")
            assert refused.returncode == 1
            assert refused.stderr.decode().strip().startswith(
                "trio-agents: error: no running node 'agent-9' to stop"
            )
            (tmp_path / "release").touch()  # the bash call ends only now
            while data := await proc.stdout.receive_some(65536):
                buf += data
            code = await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
    assert code == 0
    events = [decode_event(line) for line in buf.splitlines()]
    check_invariants(events)
    ends = {e.agent_id: e.status for e in events if e.type == "agent_finished"}  # type: ignore[attr-defined]
    assert ends == {"agent-1": "completed", "agent-2": "stopped"}
    bash = [e for e in events if e.type == "tool_finished" and e.name == "bash"]  # type: ignore[attr-defined]
    assert [e.status for e in bash] == ["ok"]  # type: ignore[attr-defined]
    stops = [(e.target, e.by, e.reason) for e in events if e.type == "stop_requested"]  # type: ignore[attr-defined]
    assert stops == [("agent-2", "control", "enough")]
