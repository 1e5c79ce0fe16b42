"""Sinks: taps that write every event as a JSONL line (the trace file, ``--json`` on stdout).

A sink never drops an event and never makes an agent wait: each event is encoded in the emitting
task (the same work a consumer task would do, minus a hop) into an in-memory buffer, and a flusher
task writes the buffer out at most every ``interval_s``. A buffer over ``max_buffer_bytes`` is
written at once, so memory stays bounded. The final :meth:`JsonlSink.flush` at the end of a run is
synchronous, so even a cancelled run ends its trace with its last event.

Writes are plain blocking writes: a trace line is small and an OS write of a few kilobytes is
faster than handing it to a thread.
"""

from __future__ import annotations

import os
from typing import BinaryIO

import structlog
import trio

from ._events import Event, encode_event

_log = structlog.get_logger("trio_agents.sinks")


class JsonlSink:
    """Writes events to a binary file object as JSON lines.

    Args:
        file: an open binary file (a trace file, ``sys.stdout.buffer``).
        close_file: close *file* when the sink closes.
        fsync: ``os.fsync`` after each flush (slower, survives a machine crash).
    """

    def __init__(
        self,
        file: BinaryIO,
        *,
        name: str = "sink",
        close_file: bool = False,
        interval_s: float = 0.02,
        max_buffer_bytes: int = 1 << 20,
        fsync: bool = False,
    ) -> None:
        self.name = name
        self._file = file
        self._close_file = close_file
        self._interval_s = interval_s
        self._max = max_buffer_bytes
        self._fsync = fsync
        self._parts: list[bytes] = []
        self._size = 0
        self._wake = trio.Event()
        self.broken: str | None = None
        self.lines_written = 0

    def __call__(self, event: Event) -> None:
        """The tap: encode *event* and buffer it."""
        if self.broken is not None:
            return
        line = encode_event(event)
        self._parts.append(line)
        self._size += len(line)
        if self._size >= self._max:
            self.flush()
        elif not self._wake.is_set():
            self._wake.set()

    def flush(self) -> None:
        """Write everything buffered now. Never raises: a broken sink (a closed pipe, a full
        disk) is recorded in :attr:`broken`, logged once and stops writing."""
        if not self._parts or self.broken is not None:
            return
        data = b"".join(self._parts)
        count = len(self._parts)
        self._parts.clear()
        self._size = 0
        try:
            self._file.write(data)
            self._file.flush()
            if self._fsync:
                os.fsync(self._file.fileno())
        except (OSError, ValueError) as exc:
            # A consumer that went away (EPIPE) must not take the run down with it.
            self.broken = f"{type(exc).__name__}: {exc}"
            _log.warning("sink stopped writing", sink=self.name, error=self.broken)
            return
        self.lines_written += count

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The flusher task: runs until cancelled, writing the buffer out as it fills.

        Cancellation: leaves anything still buffered for :meth:`close` to write.
        """
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            self.flush()
            await trio.sleep(self._interval_s)

    def close(self) -> None:
        """Write what is left and close the file if the sink owns it. Synchronous on purpose."""
        self.flush()
        if self._close_file:
            try:
                self._file.close()
            except OSError as exc:
                _log.warning("sink close failed", sink=self.name, error=str(exc))
