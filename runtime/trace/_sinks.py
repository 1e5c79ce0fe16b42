"""Sinks: taps that write every event as a JSONL line (the trace file, ``--json`` on stdout).

A sink never drops an event and never makes an agent wait: each event is encoded in the emitting
task (the same work a consumer task would do, minus a hop) into an in-memory buffer, and a flusher
task writes the buffer out at most every ``interval_s``. A buffer over ``max_buffer_bytes`` is
written at once, so memory stays bounded. The final :meth:`JsonlSink.flush` at the end of a run is
synchronous, so even a cancelled run ends its trace with its last event.

Writes are plain blocking writes: a trace line is small and an OS write of a few kilobytes is
faster than handing it to a thread.

Except to a pipe or a socket (``--json | consumer``), whose reader may stop reading (``| less``
left on its first page): a blocking write there would freeze the event loop, every agent and
Ctrl+C with it. :class:`PipeSink` writes there instead: a ``block`` subscription, so a reader that
falls behind makes the agents wait at their next event (backpressure, as a pipeline does), while
the loop stays free; the writes are non-blocking and wait for the pipe to take more.

The trace comes first. The trace sink is the bus's *gate* (:meth:`EventBus.set_gate
<runtime.core._bus.EventBus.set_gate>`): a subscription (the ``--json`` pipe, a live view, a
user's consumer) receives an event only once the trace has handed it to the OS, and a
``--json`` :class:`JsonlSink` writes the trace before it writes itself. So after a ``kill -9``
the trace holds every event anyone outside this process was shown (the stream is never ahead of
the trace; it may be behind).

:func:`open_trace_file` opens the trace: created 0600 in folders created 0700, never through a
symlink, locked (``flock``) so a second run on the same path is refused instead of
interleaving lines, and watched: a file replaced or emptied under the run is reported once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import trio

from runtime._logs import get_logger
from runtime.core import ConfigError, Event, encode_event

if TYPE_CHECKING:
    from runtime.core import EventBus

_log = get_logger("trio_agents.sinks")


class JsonlSink:
    """Writes events to a binary file object as JSON lines.

    Args:
        file: an open binary file (a trace file, ``sys.stdout.buffer``).
        close_file: close *file* when the sink closes.
        fsync: ``os.fsync`` after each flush (slower, survives a machine crash).
        gate: a sink (the trace) flushed before each flush of this one, so this one is never
            ahead of it.
        watch: the path *file* was opened at (the trace): after each flush the sink checks that
            the path still names the same file, not cut shorter, and warns once if not.
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
        gate: JsonlSink | None = None,
        watch: Path | None = None,
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
        self._gate = gate
        self._watch = watch
        self._bytes_written = 0
        #: Set (once) when the watched file was replaced, removed or cut under the run.
        self.replaced: str | None = None
        self._last_seq = 0
        #: The ``seq`` of the last event handed to the OS (or dropped by a broken sink).
        self.written_seq = 0

    def __call__(self, event: Event) -> None:
        """The tap: encode *event* and buffer it."""
        if self.broken is not None:
            self.written_seq = event.seq
            return
        line = encode_event(event)
        self._last_seq = event.seq
        self._parts.append(line)
        self._size += len(line)
        if self._size >= self._max:
            self.flush()
        elif not self._wake.is_set():
            self._wake.set()

    def flush(self) -> None:
        """Write everything buffered now. Never raises: a broken sink (a closed pipe, a full
        disk) is recorded in :attr:`broken`, logged once and stops writing."""
        if self._gate is not None:
            self._gate.flush()
        if not self._parts or self.broken is not None:
            return
        data = b"".join(self._parts)
        count = len(self._parts)
        last = self._last_seq
        self._parts.clear()
        self._size = 0
        if self._watch is not None and self.replaced is None:
            self._check_watched()
        try:
            self._file.write(data)
            self._file.flush()
            if self._fsync:
                os.fsync(self._file.fileno())
        except (OSError, ValueError) as exc:
            # A consumer that went away (EPIPE) must not take the run down with it.
            self.broken = f"{type(exc).__name__}: {exc}"
            self.written_seq = last  # nothing waits on a sink that cannot write
            _log.warning("sink stopped writing", sink=self.name, error=self.broken)
            return
        self.written_seq = last
        self.lines_written += count
        self._bytes_written += len(data)

    def _check_watched(self) -> None:
        assert self._watch is not None
        try:
            mine = os.fstat(self._file.fileno())
        except (OSError, ValueError):
            return
        try:
            there = os.stat(self._watch, follow_symlinks=False)
        except OSError:
            there = None
        if there is None or (there.st_dev, there.st_ino) != (mine.st_dev, mine.st_ino):
            what = "removed" if there is None else "replaced by another file"
        elif mine.st_size < self._bytes_written:
            what = "cut short (by another writer)"
        else:
            return
        self.replaced = what
        _log.warning(
            "the trace file was changed under the run; its lines from here on are lost",
            sink=self.name,
            path=str(self._watch),
            change=what,
        )

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
        if self._watch is not None and self.replaced is None and self.broken is None:
            self._check_watched()
        if self._close_file:
            try:
                self._file.close()
            except OSError as exc:
                _log.warning("sink close failed", sink=self.name, error=str(exc))


def open_trace_file(path: Path) -> BinaryIO:
    """Open *path* to write a run's trace, refusing what could lose or corrupt one.

    Missing folders are created 0700, the file 0600 (a trace holds prompts and tool output).
    A symlink at *path* is refused rather than followed, as is anything but a regular file. The
    file is locked (``flock``, exclusive) for as long as it stays open, and only emptied once the
    lock is held: a second run given the same path is refused and the first one's trace is left
    untouched. A lock left by a killed run goes with its process.

    Raises:
        ConfigError: one line naming *path* and why.
    """
    where = f"trace {str(path)!r}"
    try:
        _make_private_dirs(path.parent)
        # O_NONBLOCK: opening a FIFO planted at the path must not hang the run; it is refused
        # below, and the flag is cleared for the writes.
        fd = os.open(
            path,
            os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
            0o600,
        )
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ConfigError(f"{where} is a symbolic link; give the real path") from exc
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads
            raise ConfigError(f"{where} is not a regular file") from exc
        raise ConfigError(f"cannot write {where}: {exc.strerror}") from exc
    handed_over = False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{where} is not a regular file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise ConfigError(
                f"{where} is being written by another run; give this run another --trace path"
            ) from exc
        os.ftruncate(fd, 0)
        if st.st_uid == os.getuid():
            os.fchmod(fd, 0o600)
        os.set_blocking(fd, True)
        file = os.fdopen(fd, "wb")
        handed_over = True
        return file
    except OSError as exc:
        raise ConfigError(f"cannot write {where}: {exc.strerror}") from exc
    finally:
        if not handed_over:  # whatever went wrong, Ctrl+C included: the descriptor goes
            os.close(fd)


def continue_trace_file(path: Path, *, source: Path, keep: int) -> BinaryIO:
    """Open *path* to go on writing the trace *source*, whose first *keep* bytes are its whole
    lines (docs/resume.md): a resumed run's trace.

    The same file with nothing to cut is opened to append, locked as :func:`open_trace_file`
    locks. Otherwise (a cut last line to leave out, or another *path*) the kept bytes are
    copied to a new file beside *path*, written to disk, and only then renamed over *path*:
    the original bytes stay as they were until their copy is safe, so a crash at any moment
    leaves a whole trace.

    Raises:
        ConfigError: one line: *source* is being written by a live process (its lock is
            held), changed since it was read, or cannot be written.
    """
    where = f"trace {str(source)!r}"
    try:
        fd = os.open(source, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"cannot resume {where}: {exc.strerror}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise ConfigError(
                f"{where} is being written by a live process (its lock is held): "
                "nothing to resume until it ends"
            ) from exc
        size = os.fstat(fd).st_size
        if size < keep:
            raise ConfigError(f"{where} changed since it was read (it is shorter now)")
        same = os.path.realpath(path) == os.path.realpath(source)
        if same and size == keep:
            os.lseek(fd, 0, os.SEEK_END)
            file = os.fdopen(fd, "ab")
            fd = -1  # handed over, with its lock
            return file
        return _copied_trace(path, fd, keep)
    except OSError as exc:
        raise ConfigError(f"cannot resume {where}: {exc.strerror}") from exc
    finally:
        if fd >= 0:
            os.close(fd)


_COPY_CHUNK = 1 << 20


def _copied_trace(path: Path, source_fd: int, keep: int) -> BinaryIO:
    """The first *keep* bytes of *source_fd* in a new locked file renamed to *path* once on
    disk; the new file is returned open at its end."""
    _make_private_dirs(path.parent)
    tmp = path.with_name(f".{path.name}.resume-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    handed_over = False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        offset = 0
        while offset < keep:
            chunk = os.pread(source_fd, min(_COPY_CHUNK, keep - offset), offset)
            if not chunk:
                raise OSError(errno.EIO, "the trace ended before its kept bytes")
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
            offset += len(chunk)
        os.fsync(fd)
        os.replace(tmp, path)  # atomic: the old bytes are whole until this instant
        folder = os.open(path.parent, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
        file = os.fdopen(fd, "ab")
        handed_over = True
        return file
    finally:
        if not handed_over:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def existing_trace(path: Path) -> str | None:
    """What a trace file already at *path* holds, for a command that would replace it: ``being
    written by another run``, ``holds a trace (run …)``, or None (nothing there, or empty).

    A file that is not a trace is reported too (``holds N bytes``): replacing a file the user
    may want is never silent. Reads at most the first line.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None  # nothing there (or not a file we could open: open_trace_file says why)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return "is being written by another run"
        first = os.read(fd, 4096).partition(b"\n")[0]
    finally:
        os.close(fd)
    import orjson

    try:
        head = orjson.loads(first)
    except orjson.JSONDecodeError:
        return f"holds {st.st_size} bytes that are not a trace"
    run_id = head.get("run_id") if isinstance(head, dict) else None
    return f"holds a trace (run {run_id})" if isinstance(run_id, str) else "holds a trace"


def _make_private_dirs(folder: Path) -> None:
    """Create *folder* and any missing parent, each 0700 (existing ones are left as they are)."""
    missing: list[Path] = []
    current = folder
    while not current.exists() and current != current.parent:
        missing.append(current)
        current = current.parent
    for part in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another run
            part.mkdir(mode=0o700)


def open_pipe_writer(file: BinaryIO) -> int | None:
    """A private non-blocking descriptor writing to the pipe *file* is, or None.

    None when *file* is not a pipe, or where the pipe cannot be opened a second time (Linux
    re-opens a pipe through ``/proc/self/fd``; a socket cannot be). The descriptor is a new open
    file description of the same pipe: making it non-blocking changes nothing for *file* itself,
    nor for a stderr that shares the pipe (``2>&1``), nor for whoever writes to the pipe after
    this process. Whatever *file* has buffered is flushed first.
    """
    try:
        fd = file.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return None
        file.flush()
        private = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError, AttributeError):  # no descriptor (a BytesIO), no /proc, ...
        return None
    if os.fstat(private).st_ino != os.fstat(fd).st_ino:  # not the same pipe after all
        os.close(private)
        return None
    return private


class PipeSink:
    """Writes every event as a JSON line to a pipe, never blocking the event loop.

    Args:
        fd: a non-blocking descriptor of the pipe (:func:`open_pipe_writer`); the sink owns it
            and closes it in :meth:`close`.
        bus: the run's bus; the sink subscribes (``block``, *buffer* events) at once.
        stall_after_s: blocked this long on a full pipe, the sink calls itself stalled
            (:meth:`~runtime.core._bus.Subscription.stall`): ends of nodes stop waiting for it.
        final_timeout_s: how long :meth:`close` waits for a reader that takes nothing more (a
            slow reader that still takes something gets everything, up to ``final_limit_s``).
        final_limit_s: the most :meth:`close` waits in all.
    """

    def __init__(
        self,
        fd: int,
        bus: EventBus,
        *,
        name: str = "json",
        buffer: int = 4096,
        stall_after_s: float = 0.5,
        final_timeout_s: float = 2.0,
        final_limit_s: float = 30.0,
    ) -> None:
        self.name = name
        self._fd = fd
        self._sub = bus.subscribe(buffer=buffer, policy="block")
        self._stall_after_s = stall_after_s
        self._final_timeout_s = final_timeout_s
        self._final_limit_s = final_limit_s
        self._pending = bytearray()
        self.broken: str | None = None
        self.lines_written = 0
        self._lines_pending = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The writer task: runs until the run ends or it is cancelled.

        Cancellation: what is not written yet stays for :meth:`close`.
        """
        task_status.started()
        try:
            while self.broken is None:
                try:
                    event = await self._sub.receive()
                except (trio.EndOfChannel, trio.ClosedResourceError):
                    return
                self._take(event)
                while True:
                    try:
                        self._take(self._sub.receive_nowait())
                    except trio.WouldBlock:
                        break
                await self._write_pending()
        finally:
            # Nobody reads the subscription any more: ends must not wait for it.
            self._sub.stall()

    def _take(self, event: Event) -> None:
        if self.broken is None:
            self._pending += encode_event(event)
            self._lines_pending += 1

    async def _write_pending(self) -> None:
        while self._pending and self.broken is None:
            if self._write_some():
                continue
            with trio.move_on_after(self._stall_after_s) as waited:
                await trio.lowlevel.wait_writable(self._fd)
            if waited.cancelled_caught:
                self._sub.stall()
                await trio.lowlevel.wait_writable(self._fd)

    def _write_some(self) -> bool:
        """Write what the pipe takes now; False if it took nothing (it is full)."""
        try:
            written = os.write(self._fd, self._pending)
        except BlockingIOError:
            return False
        except OSError as exc:
            # A reader that went away (EPIPE) must not take the run down with it, nor hold it
            # up: the subscription goes, so nothing waits for this sink again.
            self.broken = f"{type(exc).__name__}: {exc}"
            _log.warning("sink stopped writing", sink=self.name, error=self.broken)
            self._pending.clear()
            self._sub.close()
            return True
        del self._pending[:written]
        if not self._pending:
            self.lines_written += self._lines_pending
            self._lines_pending = 0
        return True

    def close(self) -> None:
        """Write what is left, giving up once the reader has taken nothing for
        ``final_timeout_s`` (or after ``final_limit_s`` in all), and close the descriptor.
        Synchronous, like :meth:`JsonlSink.close`."""
        try:
            while self.broken is None:
                try:
                    self._take(self._sub.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                    break
            self._drain()
        finally:
            self._sub.close()
            with contextlib.suppress(OSError):  # closed under us: nothing left to do
                os.close(self._fd)

    def _drain(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLOUT)
        now = time.monotonic()
        limit = now + self._final_limit_s
        quiet_until = now + self._final_timeout_s
        while self._pending and self.broken is None:
            if self._write_some():
                quiet_until = time.monotonic() + self._final_timeout_s
                continue
            left = min(quiet_until, limit) - time.monotonic()
            if left <= 0:
                _log.warning(
                    "sink gave up: its reader stopped reading",
                    sink=self.name,
                    bytes_left=len(self._pending),
                )
                return
            poller.poll(left * 1000)
