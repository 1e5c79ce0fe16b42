"""The stdio transport: an MCP server as a child process speaking JSON-RPC, one message a line.

The SDK has a stdio client; this runs the process itself, for these reasons: the server runs
under the same guard as a ``bash`` call (``tools.open_guarded_process``: its own session, a tag
in its environment, the warden), so when the connection ends its WHOLE group is terminated then
killed, and so is every process it started that left the group with ``setsid``; if the runtime
dies (``kill -9``), the warden does the same (the SDK signals the group only when the leader
itself hangs, so children a server leaves behind would outlive the run); a line is read in
linear time with a size cap (a 50 MB result is read once, not re-joined chunk by chunk), and a
message is refused before it is parsed when it holds more items than :data:`MAX_MESSAGE_ITEMS`
(two million small text blocks under the byte cap took 4.5 GB to parse); and the server's
stderr goes to a bounded tail kept for the "why" of a failure, not onto the user's terminal.

Everything else — framing a message, the JSON-RPC session, requests, cancellation — is the
SDK's: the two streams handed to :class:`mcp.ClientSession` are the ones its own transports make.
"""

from __future__ import annotations

import collections
import contextlib
import os
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import mcp_types
import trio
from mcp.shared.message import SessionMessage

__all__ = ["MAX_LINE_BYTES", "MAX_MESSAGE_ITEMS", "StdioTransport"]

MAX_LINE_BYTES = 128 * 1024 * 1024
"""The longest message a server may send: a tool result of 50 MB fits, also when the server
sends it twice (as text and as ``structuredContent``). A longer one ends the connection: the
calls in flight fail naming the reason, and the next call starts the server again."""
MAX_MESSAGE_ITEMS = 50_000
"""The most typed items (``"type"`` keys: content blocks, schema nodes) one message may hold; a
message with more ends the connection like an over-long one. Counted on the raw line before it
is parsed (an unescaped ``"type"`` cannot occur inside a JSON string)."""
STOP_GRACE_S = 1.0
"""How long a server has to exit after its stdin closes, and again after SIGTERM."""
_STDERR_LINES = 20
_STDERR_LINE_CHARS = 500
_POLL_S = 0.01


class StdioTransport:
    """One run of one stdio server process (made per connection; see :meth:`run`).

    Attributes:
        pid: the server's pid (its process group id too), once spawned.
        returncode: its exit status once it has exited.
        bad_lines: how many stdout lines were not JSON-RPC messages.
    """

    def __init__(self, command: str, args: Sequence[str], env: Mapping[str, str], cwd: str) -> None:
        self._argv = [command, *args]
        self._env = dict(env)
        self._cwd = cwd
        self._stderr: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
        self.pid: int | None = None
        self.returncode: int | None = None
        self.bad_lines = 0
        self.closed_reason: str | None = None

    def stderr_tail(self) -> str:
        """The last line the server wrote to stderr, or ``""``."""
        return self._stderr[-1] if self._stderr else ""

    async def run(
        self,
        *,
        eof: trio.Event | None = None,
        task_status: trio.TaskStatus[tuple[Any, Any]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Spawn the server, serve its pipes, and stop it.

        Reports ``(read_stream, write_stream)`` for :class:`mcp.ClientSession` once the process
        runs. When the server closes its stdout (it exited, or broke the protocol:
        :attr:`closed_reason` says how) the read stream is closed, so that requests in flight
        end with the SDK's ``CONNECTION_CLOSED``; then *eof* is set, the process stopped, and
        this returns.

        Raises:
            OSError: the command cannot be run (not found, not executable).

        Cancellation: stops the server as on any end: stdin closed, then after
        :data:`STOP_GRACE_S` SIGTERM to its process group, then SIGKILL; bounded, shielded.
        """
        from tools import open_guarded_process

        err_read, err_write = os.pipe()
        stderr: trio.lowlevel.FdStream | None = None
        proc: trio.Process | None = None
        try:
            # The group and what left it (setsid) are stopped by the guard at the end of the
            # block: bounded, shielded.
            async with open_guarded_process(
                self._argv,
                env=self._env,
                cwd=self._cwd,
                grace_s=STOP_GRACE_S,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err_write,
            ) as proc:
                os.close(err_write)
                err_write = -1
                stderr = trio.lowlevel.FdStream(err_read)  # owns the read end from here
                await self._serve(proc, stderr, eof, task_status)
        finally:
            if err_write >= 0:
                os.close(err_write)
            if stderr is None:  # never started, Ctrl+C included: the read end goes too
                os.close(err_read)
            if proc is not None:
                self.returncode = proc.returncode  # reaped by the guard

    async def _serve(
        self,
        proc: trio.Process,
        stderr: trio.lowlevel.FdStream,
        eof: trio.Event | None,
        task_status: trio.TaskStatus[Any],
    ) -> None:
        self.pid = proc.pid
        read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_stderr, stderr)
                nursery.start_soon(self._write, proc, write_recv)
                task_status.started((read_recv, write_send))
                await self._read(proc, read_send)
                if eof is not None:
                    eof.set()
                nursery.cancel_scope.cancel(reason="the server closed its stdout")
        finally:
            read_send.close()
            write_recv.close()
            with trio.move_on_after(3 * STOP_GRACE_S, shield=True):
                await self._stop(proc)

    async def _read(self, proc: trio.Process, send: Any) -> None:
        assert proc.stdout is not None
        buf = bytearray()
        start = 0  # where to look for the next newline (bytes before it hold none)
        async with send:
            while True:
                try:
                    chunk = await proc.stdout.receive_some(1 << 16)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    chunk = b""
                if not chunk:
                    self.closed_reason = self.closed_reason or "it closed its stdout"
                    return
                buf += chunk
                while (end := buf.find(b"\n", start)) >= 0:
                    line = bytes(buf[:end])
                    del buf[: end + 1]
                    start = 0
                    if line.strip():
                        if line.count(b'"type"') > MAX_MESSAGE_ITEMS:
                            self.closed_reason = (
                                f"it sent a message of over {MAX_MESSAGE_ITEMS} items"
                            )
                            return
                        await send.send(self._parse(line))
                start = len(buf)
                if len(buf) > MAX_LINE_BYTES:
                    self.closed_reason = (
                        f"it sent a message over {MAX_LINE_BYTES // (1024 * 1024)} MB"
                    )
                    return

    def _parse(self, line: bytes) -> SessionMessage | Exception:
        try:
            message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValueError as exc:
            self.bad_lines += 1
            return exc
        return SessionMessage(message)

    async def _write(self, proc: trio.Process, recv: Any) -> None:
        assert proc.stdin is not None
        try:
            async with recv:
                async for item in recv:
                    data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await proc.stdin.send_all(data.encode() + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the server is gone; the reader sees its stdout end

    async def _read_stderr(self, stream: trio.lowlevel.FdStream) -> None:
        partial = b""
        async with stream:
            while True:
                try:
                    chunk = await stream.receive_some(1 << 14)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    return
                if not chunk:
                    return
                *lines, partial = (partial + chunk).split(b"\n")
                partial = partial[-_STDERR_LINE_CHARS:]
                for raw in lines:
                    text = raw.decode(errors="replace").strip()
                    if text:
                        self._stderr.append(text[:_STDERR_LINE_CHARS])

    async def _stop(self, proc: trio.Process) -> None:
        """Close stdin and give the server a moment to exit on its own (the guard then stops
        its group and what left it, see :meth:`run`)."""
        if proc.stdin is not None:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await proc.stdin.aclose()
        with trio.move_on_after(STOP_GRACE_S):
            await proc.wait()
        if proc.stdout is not None:
            await proc.stdout.aclose()
