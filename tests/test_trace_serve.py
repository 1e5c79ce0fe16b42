"""`trio-agents trace serve`: the page following a trace that is still being written.

The server runs for real on loopback; the trace grows while a client (httpx, or chromium) reads.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import trio
from browser import NO_BROWSER, open_browser
from trace_factory import run_events, small_run

from runtime.cli._trace_serve import serve

CLI = Path(sys.executable).parent / "trio-agents"


def lines(events: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(e, option=orjson.OPT_APPEND_NEWLINE) for e in events)


@pytest.fixture
def events() -> list[dict[str, Any]]:
    return list(run_events(small_run(), order="time"))


class EventStream:
    """A plain server-sent-events reader on a trio socket (no async generators to leave
    unfinished when a test stops reading an endless stream)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    @classmethod
    async def open(cls, url: str) -> EventStream:
        parts = httpx.URL(url)
        stream = await trio.open_tcp_stream(parts.host, parts.port or 80)
        request = (
            f"GET {parts.raw_path.decode()} HTTP/1.1\r\nHost: {parts.host}:{parts.port}\r\n\r\n"
        )
        await stream.send_all(request.encode())
        reader = cls(stream)
        head = await reader._until(b"\r\n\r\n")
        assert b"200 OK" in head.split(b"\r\n")[0]
        assert b"Content-Type: text/event-stream" in head
        return reader

    async def _until(self, end: bytes) -> bytes:
        while end not in self.buffer:
            chunk = await self.stream.receive_some(1 << 16)
            assert chunk, "the server closed the stream"
            self.buffer += chunk
        item, _, self.buffer = self.buffer.partition(end)
        return item

    async def next_data(self) -> dict[str, Any]:
        """The next ``data`` event, decoded."""
        while True:
            block = await self._until(b"\n\n")
            fields = dict(line.split(b": ", 1) for line in block.split(b"\n") if b": " in line)
            if fields.get(b"event") == b"data":
                return orjson.loads(fields[b"data"])  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        await self.stream.aclose()


def statuses(data: dict[str, Any]) -> dict[str, str]:
    return {n["id"]: n["status"] for run in data["runs"] for n in run["nodes"]}


async def test_the_stream_follows_a_trace_from_running_to_finished(
    tmp_path: Path, events: list[dict[str, Any]]
) -> None:
    path = tmp_path / "live.jsonl"
    half = len(events) // 2
    path.write_bytes(lines(events[:half]))
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(
                lambda task_status: serve(str(path), poll_s=0.02, task_status=task_status)
            )
            assert re.fullmatch(r"http://127\.0\.0\.1:\d+/[\w-]{16}/", url)
            async with httpx.AsyncClient(timeout=10) as client:
                page = await client.get(url)
                assert page.status_code == 200
                assert page.headers["content-type"] == "text/html; charset=utf-8"
                assert b'"live":true' in page.content
            events_stream = await EventStream.open(url + "events")
            try:
                first = await events_stream.next_data()
                assert "running" in statuses(first).values()
                (run,) = first["runs"]
                assert run["ended"] is False
                running = next(n for n in run["nodes"] if n["status"] == "running")
                assert running["t1"] is None  # a running bar runs to "now"
                with path.open("ab") as f:  # the run goes on
                    f.write(lines(events[half:]))
                data = first
                while not data["runs"][0]["ended"]:
                    data = await events_stream.next_data()
                assert "running" not in statuses(data).values()
                assert data["runs"][0]["status"] == "completed"
            finally:
                await events_stream.aclose()
            nursery.cancel_scope.cancel("test over")


async def test_a_trace_not_yet_created_is_waited_for(
    tmp_path: Path, events: list[dict[str, Any]]
) -> None:
    path = tmp_path / "later.jsonl"
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(
                lambda task_status: serve(str(path), poll_s=0.02, task_status=task_status)
            )
            events_stream = await EventStream.open(url + "events")
            try:
                assert (await events_stream.next_data())["runs"] == []
                path.write_bytes(lines(events))
                data = await events_stream.next_data()
                assert data["runs"][0]["agents"] == 4
            finally:
                await events_stream.aclose()
            nursery.cancel_scope.cancel("test over")


async def test_only_loopback_hosts_and_the_token_are_served(
    tmp_path: Path, events: list[dict[str, Any]]
) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(lines(events))
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(
                lambda task_status: serve(str(path), poll_s=0.02, task_status=task_status)
            )
            base = url.rsplit("/", 2)[0]
            async with httpx.AsyncClient(timeout=10) as client:
                assert (await client.get(base + "/")).status_code == 404  # no token
                assert (await client.get(base + "/wrong-token/")).status_code == 404
                # A page elsewhere reaching us through a name that resolves to 127.0.0.1.
                rebound = await client.get(url, headers={"Host": "attacker.example:80"})
                assert rebound.status_code == 403
                assert (await client.post(url)).status_code == 405
                assert (await client.get(url.replace("127.0.0.1", "localhost"))).status_code == 200
            nursery.cancel_scope.cancel("test over")


def start_cli_server(path: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [str(CLI), "trace", "serve", str(path)],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    match = re.search(r"at (http://\S+) ", line)
    assert match, line
    return proc, match.group(1)


def stop(proc: subprocess.Popen[str]) -> int:
    """Ctrl+C the server; its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=10)
    assert proc.stderr is not None
    proc.stderr.close()
    return code


def test_serve_prints_its_address_and_exits_130_on_ctrl_c(
    tmp_path: Path, events: list[dict[str, Any]]
) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(lines(events))
    proc, url = start_cli_server(path)
    try:
        assert httpx.get(url, timeout=10).status_code == 200
        assert stop(proc) == 130
    finally:
        proc.kill()
        stop(proc)


def test_serve_refuses_a_port_it_cannot_use(tmp_path: Path, events: list[dict[str, Any]]) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(lines(events))
    proc, url = start_cli_server(path)
    try:
        port = url.split(":")[2].split("/")[0]
        taken = subprocess.run(
            [str(CLI), "trace", "serve", str(path), "--port", port],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert taken.returncode == 2
        assert taken.stderr.count("\n") == 1
        assert f"--port {port}: cannot listen" in taken.stderr
    finally:
        stop(proc)


@pytest.mark.skipif(NO_BROWSER is not None, reason=NO_BROWSER or "")
def test_the_page_in_a_browser_shows_running_nodes_then_their_end(
    tmp_path: Path, events: list[dict[str, Any]]
) -> None:
    from selenium.webdriver.common.by import By

    path = tmp_path / "live.jsonl"
    # Up to the sleeper's start: main and two sub-agents running, the rest not there yet.
    cut = (
        next(
            i
            for i, e in enumerate(events)
            if e["type"] == "agent_started" and e["name"] == "sleeper"
        )
        + 1
    )
    path.write_bytes(lines(events[:cut]))
    proc, url = start_cli_server(path)
    try:
        with open_browser() as driver:
            driver.get(url)

            def shown() -> dict[str, str]:
                # In one script: a running page redraws its rows every second.
                return dict(
                    driver.execute_script(
                        "return Array.from(document.querySelectorAll('#rows .row'))"
                        ".map(r => [r.dataset.id, r.querySelector('.mark').className]);"
                    )
                )

            wait_for(lambda: "agent_1.2" in shown())
            assert "s-running" in shown()["agent_1"]
            assert "agent_1.3" not in shown()  # not started yet
            assert driver.find_element(By.ID, "live").is_displayed()
            driver.execute_script(
                "document.querySelector('#rows .row[data-id=\"agent_1.1\"]').click()"
            )
            with path.open("ab") as f:
                f.write(lines(events[cut:]))
            wait_for(lambda: "s-completed" in shown().get("agent_1", ""))
            assert "s-failed" in shown()["agent_1.3"]
            assert "s-cancelled" in shown()["agent_1.2"]
            assert not driver.find_element(By.ID, "live").is_displayed()
            # What was selected stays selected across updates.
            selected = driver.execute_script(
                "return document.querySelector('#rows .row.selected').dataset.id"
            )
            assert selected == "agent_1.1"
            assert "agent worker" in driver.find_element(By.CSS_SELECTOR, "#detail h2").text
    finally:
        stop(proc)


def wait_for(condition: Any, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the page never showed it"
        time.sleep(0.05)


def test_serve_of_a_file_that_is_not_a_trace_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\n" * 30)
    result = subprocess.run(
        [str(CLI), "trace", "serve", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert (
        result.stderr.splitlines()[-1]
        == f"trio-agents: error: {path}: not a trace file (no event in its first 20 lines)"
    )
