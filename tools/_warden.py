"""The warden: a helper process that stops the bash calls' process groups if this process dies.

A ``bash`` call runs in its own session, so a Ctrl+C at the terminal never reaches it, and the
tool stops its whole process group when the call ends, times out or is cancelled. That cleanup
runs in this process. When this process dies without running it (``kill -9``, the OOM killer, a
Ray worker torn down), bash and what it started would be left running, re-parented to init.

The warden closes that gap. It is a small Python process (``python -I -S``, standard library
only) started on the first ``bash`` call and shared by every later one. It reads one line per
event on its stdin, a pipe whose only write end this process holds:

- ``tTAG``: a bash call is about to start; its processes carry ``TAG`` in their environment
  (``TRIO_AGENTS_BASH_CALL=TAG``, see ``tools/_bash.py``);
- ``+PGID``: that call's process group started;
- ``-PGID``: that call has stopped its group (bash is not reaped yet, so the number is still
  that group's, see ``tools/_bash.py``);
- ``uTAG``: that call is over.

End of file on that pipe means this process is gone (or closed the pipe). The warden then sends
SIGTERM (and SIGCONT) to every group still listed and to every process whose environment holds
a tag still listed, again to tagged processes that appear meanwhile, SIGKILL to those still
there after *grace_s*, and exits. The tag is sent before bash starts: a process of the call is
covered from its first instruction, even if this process dies before it learns the group's
number (``open_process`` returns from a thread, and a loaded machine can take milliseconds to
resume the task that guards the group), and even if it left its group with ``setsid``.

It detaches at start (it forks and the first process exits, so it is re-parented to init, or to
the nearest subreaper, and is not this process's child: whatever ends a dead process's children,
as Ray does for a worker's, does not end the warden with them), runs in its own session from
``/`` and ignores SIGINT and SIGHUP, so the terminal's signals do not take it down with the
run. It holds nothing but the pipe. If it dies, or stops reading, the next bash
call starts another and hands it the list (at most ``max_starts`` in all).

Other long-lived children use the same guard: ``tools/_guarded.py`` starts a process (an MCP
server) in its own session with a tag, has the warden guard both, and at the end stops its group
and every tagged process that left it (``setsid``), as a bash call's are stopped.

Limits: a process that leaves its group (``setsid``) and also clears its environment
(``env -i``) escapes, as it does the tool's own sweep. A child made with ``os.fork`` closes its
copy of the pipe at once (an at-fork hook), so the warden still sees its parent die. A group
whose last process exits while the warden waits could in principle be renumbered by then; the
grace is short (seconds) and pids are handed out in sequence, so this is not guarded against
(tagged processes are signalled through a pidfd where Linux has them, so never a recycled pid).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
from typing import Final

from runtime.core import get_logger

__all__ = ["CALL_TAG_VAR", "Warden", "warden"]

# The variable that carries a bash call's tag into every process it starts.
CALL_TAG_VAR: Final = "TRIO_AGENTS_BASH_CALL"

_log = get_logger("trio_agents.warden")

# How long the launcher may take to hand over to the warden (it forks and exits at once).
_LAUNCH_TIMEOUT_S: Final = 10.0

# The warden's own program. Only the standard library, no site packages (-I -S): it starts in
# milliseconds and nothing from the user's environment runs in it.
_PROGRAM: Final = """
import os, signal, sys, time
# Detach: the process started exits at once and its child carries on, re-parented to init. What
# ends the owner's children with it (Ray ends a dead worker's) must not end the warden too.
if os.fork():
    os._exit(0)
os.chdir("/")
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
os.write(1, b"%d\\n" % os.getpid())
os.close(1)
grace = float(sys.argv[1])
var = sys.argv[2].encode()
groups = set()
tags = set()
for line in sys.stdin.buffer:
    kind, arg = line[:1], line[1:].strip()
    if kind == b"t":
        tags.add(var + b"=" + arg)
    elif kind == b"u":
        tags.discard(var + b"=" + arg)
    else:
        try:
            pgid = int(arg)
        except ValueError:
            continue
        if kind == b"+":
            groups.add(pgid)
        elif kind == b"-":
            groups.discard(pgid)

me = os.getpid()

def sweep(sig, again):
    # Signal the processes that carry a listed tag (those signalled before only if *again*), each
    # as it is found; whether any was found. Each is opened (pidfd) before its environment is
    # read, so a recycled pid's environment is the newcomer's, which holds no tag; without
    # pidfds (an old kernel, a seccomp filter) the pid itself is signalled. One caught mid-exec
    # reads empty: the next pass finds it.
    if not tags:
        return False
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return False
    found = False
    for pid in pids:
        if pid == me:
            continue
        fd = None
        if pidfds:
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            except OSError:
                fd = None
        try:
            try:
                with open("/proc/%d/environ" % pid, "rb") as fh:
                    env = fh.read().split(b"\\0")
            except OSError:
                continue
            if tags.isdisjoint(env):
                continue
            found = True
            if again or pid not in termed:
                termed.add(pid)
                for one in (sig, signal.SIGCONT) if sig == signal.SIGTERM else (sig,):
                    try:
                        if fd is None:
                            os.kill(pid, one)
                        else:
                            signal.pidfd_send_signal(fd, one)
                    except OSError:
                        pass
        finally:
            if fd is not None:
                os.close(fd)
    return found

pidfds = hasattr(os, "pidfd_open")
termed = set()

def signal_groups(sig):
    for pgid in list(groups):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            groups.discard(pgid)
        except OSError:
            pass

signal_groups(signal.SIGTERM)
signal_groups(signal.SIGCONT)
sweep(signal.SIGTERM, True)
deadline = time.monotonic() + grace
while time.monotonic() < deadline:
    time.sleep(0.05)
    signal_groups(0)
    if not sweep(signal.SIGTERM, False) and not groups:
        break
signal_groups(signal.SIGKILL)
for _ in range(5):  # children forked during a pass, and ones caught mid-exec
    if not sweep(signal.SIGKILL, True):
        break
    time.sleep(0.02)
"""


class Warden:
    """One warden process and the pipe to it.

    Args:
        grace_s: what the warden waits between SIGTERM and SIGKILL once this process is gone.
        max_starts: how many wardens one process starts at most (the first, then one after each
            that died or stopped reading); past that, bash calls run unguarded.

    Writing never blocks: the write end is non-blocking, and a warden that died or stopped
    reading (its pipe full) is replaced by a new one, which is told every group still guarded.
    """

    def __init__(self, *, grace_s: float = 2.0, max_starts: int = 5) -> None:
        self.grace_s = grace_s
        self.max_starts = max_starts
        self._pid: int | None = None
        self._fd: int | None = None
        self._owner = os.getpid()
        self._starts = 0
        self._guarded: set[int] = set()
        self._tags: set[str] = set()
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        """The warden process's pid, once started (it is not a child of this process)."""
        return self._pid

    @property
    def started(self) -> bool:
        """Whether this process has a warden (or has given up starting them)."""
        return self._owner == os.getpid() and (
            self._pid is not None or self._starts >= self.max_starts
        )

    def start(self) -> None:
        """Start the warden now if there is none (a blocking ~20-50 ms, once per process).

        :meth:`guard` starts it too; calling this first keeps the gap between starting a
        process group and guarding it down to microseconds.
        """
        with self._lock:
            self._ensure()

    def guard(self, pgid: int) -> None:
        """Have the warden stop process group *pgid* if this process dies before :meth:`release`."""
        with self._lock:
            self._guarded.add(pgid)
            self._send(b"+%d\n" % pgid)

    def guard_call(self, tag: str) -> None:
        """Have the warden stop every process whose environment holds *tag* (as
        ``CALL_TAG_VAR=tag``) if this process dies before :meth:`release_call`. Sent before
        the call's bash starts, so no moment of it is unguarded."""
        with self._lock:
            self._tags.add(tag)
            self._send(b"t%s\n" % tag.encode())

    def release_call(self, tag: str) -> None:
        """The call tagged *tag* is over (its processes stopped or swept): forget it."""
        with self._lock:
            self._tags.discard(tag)
            self._send(b"u%s\n" % tag.encode())

    def release(self, pgid: int) -> None:
        """The group *pgid* has been stopped by its call: forget it."""
        with self._lock:
            self._guarded.discard(pgid)
            self._send(b"-%d\n" % pgid)

    def close(self) -> None:
        """Close the pipe: the warden stops any group still guarded, then exits. Idempotent.

        Does not wait for it (it is not this process's child); a later :meth:`guard` starts a
        new one.
        """
        with self._lock:
            self._drop()
            self._guarded.clear()
            self._tags.clear()

    # The methods below run with the lock held.

    def _drop(self) -> None:
        fd, self._fd = self._fd, None
        self._pid = None
        _close(fd)

    def _forget_after_fork(self) -> None:
        # In a child of os.fork(): the pipe, the guarded groups and the lock are the parent's.
        fd, self._fd = self._fd, None
        _close(fd)
        self._owner = os.getpid()
        self._pid = None
        self._starts = 0
        self._guarded = set()
        self._tags = set()
        self._lock = threading.Lock()

    def _send(self, line: bytes) -> None:
        if not self._ensure():
            return
        assert self._fd is not None
        try:
            os.write(self._fd, line)
            return
        except BlockingIOError:
            # Stopped or hung. It must never act on the end of file its replacement's start
            # gives it: it would stop groups the replacement now guards, and numbers it missed
            # the release of. So it goes first.
            _log.warning("warden.lost", pid=self._pid, reason="it stopped reading its pipe")
            if self._pid is not None:
                with contextlib.suppress(OSError):
                    os.kill(self._pid, signal.SIGKILL)
        except OSError as exc:
            _log.warning("warden.lost", pid=self._pid, reason=f"it is gone ({exc.strerror})")
        self._drop()
        # A new warden gets the whole list (this line's change is already in it).
        self._ensure()

    def _ensure(self) -> bool:
        """A warden is running and knows every guarded group; False if none can be had."""
        if self._owner != os.getpid():  # forked, and the at-fork hook did not run
            self._forget_after_fork()
        if self._fd is not None:
            return True
        if self._starts >= self.max_starts:
            return False
        self._starts += 1
        fd = self._launch()
        if fd is None:
            return False
        listing = b"".join(b"t%s\n" % tag.encode() for tag in self._tags)
        listing += b"".join(b"+%d\n" % pgid for pgid in self._guarded)
        try:
            while listing:  # more than the pipe holds only with thousands of bash calls
                written = _write_waiting(fd, listing)
                listing = listing[written:]
        except OSError as exc:
            _log.warning("warden.lost", pid=self._pid, reason=f"at start: {exc.strerror}")
            self._drop()
            return False
        return True

    def _launch(self) -> int | None:
        if not sys.executable:
            self._starts = self.max_starts
            _log.warning("warden.unavailable", reason="no Python executable to start it with")
            return None
        # Python makes pipes close-on-exec: no bash call inherits the write end. It is kept in
        # self._fd from the start, so a fork meanwhile (another thread) closes the child's copy.
        read_end, write_end = os.pipe()
        self._fd = write_end
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _PROGRAM, repr(self.grace_s), CALL_TAG_VAR],
                stdin=read_end,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd="/",
                start_new_session=True,
                env={},
            )
            with proc:  # the launcher exits as soon as the warden is on its own
                proc.wait(timeout=_LAUNCH_TIMEOUT_S)
                assert proc.stdout is not None  # stdout=PIPE
                self._pid = int(proc.stdout.readline())
        except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
            # TimeoutExpired: sys.executable is not a Python that runs -c (an embedding app).
            self._drop()
            _log.warning("warden.unavailable", reason=f"cannot start it: {exc}")
            return None
        finally:
            _close(read_end)
        os.set_blocking(write_end, False)
        _log.debug("warden.started", pid=self._pid)
        return write_end


def _write_waiting(fd: int, data: bytes) -> int:
    """os.write on a non-blocking *fd*, waiting up to a second for room (a new warden reads at
    once); raises BlockingIOError if none comes."""
    try:
        return os.write(fd, data)
    except BlockingIOError:
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        if not poller.poll(1000):
            raise
        return os.write(fd, data)


def _close(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):  # already closed: nothing left to do
            os.close(fd)


_warden: Warden | None = None
_warden_lock = threading.Lock()


def _after_fork_in_child() -> None:
    # The child of an os.fork() holds a copy of the pipe's write end: close it at once, or the
    # parent's warden would not see the parent die while the child lives. The child starts its
    # own warden if it runs bash.
    if _warden is not None:
        _warden._forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def warden() -> Warden:
    """The process's warden, shared by every bash call (started on first use).

    There is nothing to close at exit: the kernel closes the pipe when this process ends, however
    it ends, and that is the warden's cue.
    """
    global _warden
    with _warden_lock:
        if _warden is None:
            _warden = Warden()
        return _warden
