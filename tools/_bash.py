"""The ``bash`` tool: a shell command in the workspace, in its own process group.

Lifecycle of one call:

1. ``bash -c COMMAND`` starts in a new session (so a new process group, and no controlling
   terminal: a Ctrl+C typed at the user's terminal never reaches it), in the workspace, with
   ``ctx.env``, stdin from ``/dev/null``, stdout and stderr on one pipe.
2. A reader task drains the pipe as output arrives, keeping only the head and the tail
   (:class:`_Capture`), so memory stays bounded whatever the command prints.
3. The call ends when ``bash`` exits. Whatever it left in its process group (background jobs) is
   then stopped too: a tool call leaves nothing behind. The result says so. If this process dies
   before it can do that, the warden (``tools/_warden.py``) stops the group instead.
4. On timeout or cancellation the whole group gets SIGTERM (and SIGCONT, so stopped jobs see
   it), then SIGKILL after a grace period. The cleanup is shielded and bounded in time.
5. Only then is bash reaped: until that moment its pid, which is also the group id, cannot be
   recycled, so a signal never reaches an unrelated group (:class:`_ProcessGroup`).

A non-zero exit code is an ``ok`` result that states the code, like a terminal would: a failing
``grep`` or ``test`` is information for the model, not a tool failure. Only a timeout (or a
command that cannot start) is an ``error`` result.

A process that leaves the group on purpose (``setsid``, a daemon) is found by a mark in its
environment: each call sets ``TRIO_AGENTS_BASH_CALL`` to a token of its own, inherited by every
process it starts, and when the group is stopped the processes whose ``/proc/PID/environ`` holds
that token are stopped too (SIGTERM, SIGKILL after the grace period; signalled through a pidfd,
so a recycled pid is never hit).

Limits: a process that leaves the group AND clears its environment (``env -i setsid ...``)
escapes the cleanup, as does one running as another user; the sandbox (a PID namespace) closes
that. Dead members of the group whose parent does not reap them (zombies under a PID 1 that does
not reap) are not counted as left behind.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import trio

from runtime.core import (
    NO_SECRETS,
    ConfigError,
    Secrets,
    TargetKind,
    Tool,
    ToolContext,
    ToolError,
    one_line,
)

from ._warden import CALL_TAG_VAR, Warden, warden

__all__ = ["CALL_TAG_VAR", "BashTool"]

_CHUNK_BYTES = 65_536
# After SIGKILL the kernel needs a moment to tear processes down; we wait at most this long.
_KILL_WAIT_S = 1.0
# After bash exits and its group is stopped, the pipe should hit EOF at once. A process that left
# the group (setsid) may still hold it open: we stop reading after this long rather than hang.
_DRAIN_S = 0.5
_POLL_S = 0.02


class BashTool(Tool):
    """``bash``: run a shell command in the workspace.

    Args:
        kill_grace_s: time between SIGTERM and SIGKILL when the process group is stopped.
        orphan_guard: register each call's process group with the warden
            (``tools/_warden.py``), a helper process that stops the group if this process dies
            before the call could (``kill -9``, a lost Ray worker).
    """

    name: ClassVar[str] = "bash"
    description: ClassVar[str] = (
        "Run a bash command in the workspace folder and return its combined stdout and stderr "
        "followed by its exit code. Default timeout 120 s ('timeout_s' up to 600). Long output "
        "keeps its beginning and end. No stdin; background jobs are stopped when the command "
        "ends."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "description": "the bash command"},
            "timeout_s": {
                "type": "number",
                "exclusiveMinimum": 0,
                "description": "seconds before the command is killed (default 120, max 600)",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    needs_permission: ClassVar[bool] = True
    permission_target_kind: ClassVar[TargetKind] = "command"

    def __init__(self, *, kill_grace_s: float = 2.0, orphan_guard: bool = True) -> None:
        self.kill_grace_s = kill_grace_s
        self.orphan_guard = orphan_guard

    def summary(self, args: Mapping[str, Any]) -> str:
        """``bash: <command>``."""
        return one_line(f"bash: {args.get('command', '')}")

    def permission_target(self, args: Mapping[str, Any]) -> str:
        """The command, without surrounding whitespace."""
        return str(args.get("command", "")).strip()

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        """Run the command to its end and return its output and exit code.

        Raises:
            ToolError: ``timeout_s`` above the maximum, bash cannot start, or the command timed
                out (the message says ``timed out after N s`` and holds the output so far).

        Cancellation: the whole process group is stopped (SIGTERM, SIGKILL after the grace
        period) under a shielded, bounded scope before ``Cancelled`` propagates, so no process
        of the command outlives the call.
        """
        command = str(args["command"])
        timeout = float(args.get("timeout_s", ctx.limits.bash_default_timeout_s))
        if timeout > ctx.limits.bash_max_timeout_s:
            raise ToolError(
                f"input.timeout_s: {timeout:g} s is above the maximum of "
                f"{ctx.limits.bash_max_timeout_s:g} s"
            )
        capture = _Capture(ctx.limits.max_output_chars, ctx.secrets)
        tag = secrets.token_hex(8)
        guard = warden() if self.orphan_guard else None
        if guard is not None and not guard.started:
            # Once per process: the warden is up before the first group exists.
            await trio.to_thread.run_sync(guard.start)
        argv = [shutil.which("bash") or "/bin/bash", "-c", command]
        if ctx.sandbox is not None:
            try:
                argv = ctx.sandbox.command(argv, workspace=ctx.workspace, env=ctx.env)
            except ConfigError as exc:  # bwrap gone since the run started
                raise ToolError(str(exc)) from exc
        if guard is None:
            return await self._run(ctx, argv, tag, capture, timeout_s=timeout, guard=None)
        # The tag is guarded before bash starts: should this process die before it learns the
        # group's number, the warden still finds the call's processes by their environment.
        guard.guard_call(tag)
        try:
            return await self._run(ctx, argv, tag, capture, timeout_s=timeout, guard=guard)
        finally:
            guard.release_call(tag)

    async def _run(
        self,
        ctx: ToolContext,
        argv: list[str],
        tag: str,
        capture: _Capture,
        *,
        timeout_s: float,
        guard: Warden | None,
    ) -> str:
        timeout = timeout_s
        try:
            proc = await trio.lowlevel.open_process(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=ctx.workspace,
                env={**ctx.env, CALL_TAG_VAR: tag},
                start_new_session=True,
            )
        except OSError as exc:
            raise ToolError(f"cannot start bash: {exc}") from exc
        ctx.log.debug("bash.started", pid=proc.pid)
        group = _ProcessGroup(proc, tag)
        stdout = proc.stdout
        assert stdout is not None  # stdout=PIPE
        leftovers = False
        try:
            if guard is not None:
                guard.guard(group.pgid)
            async with trio.open_nursery() as nursery:
                eof = trio.Event()
                nursery.start_soon(_pump, stdout, capture, eof)
                with trio.move_on_after(timeout) as deadline:
                    await group.leader_exited()
                leftovers = await group.stop(self.kill_grace_s)
                with trio.move_on_after(_DRAIN_S):
                    await eof.wait()
                nursery.cancel_scope.cancel(reason="bash finished; stop reading its pipe")
        finally:
            # Cancelled or failed above: the group may still be running. Shielded so the
            # cleanup itself is not cancelled, bounded so it cannot hang the caller.
            try:
                with trio.move_on_after(self.kill_grace_s + _KILL_WAIT_S + 0.5, shield=True):
                    await group.stop(self.kill_grace_s)
            finally:
                if guard is not None:
                    guard.release(group.pgid)  # before the reap: the number is still its group's
                with trio.move_on_after(_KILL_WAIT_S, shield=True):
                    await group.reap()
                group.close()
                with trio.move_on_after(_DRAIN_S, shield=True):
                    await stdout.aclose()
        output = capture.text()
        if deadline.cancelled_caught:
            ctx.log.info("bash.timed_out", pid=proc.pid, timeout_s=timeout)
            message = f"timed out after {timeout:g} s; the command and its processes were killed"
            raise ToolError(f"{message}\noutput so far:\n{output}" if output else message)
        return _result(output, proc.returncode, leftovers=leftovers)


def _result(output: str, returncode: int | None, *, leftovers: bool) -> str:
    text = output if output else "(no output)\n"
    if not text.endswith("\n"):
        text += "\n"
    if returncode is not None and returncode < 0:
        try:
            status = f"[killed by signal {signal.Signals(-returncode).name}]"
        except ValueError:
            status = f"[killed by signal {-returncode}]"
    else:
        status = f"[exit code {returncode}]"
    if leftovers:
        status += "\n[background processes the command left running were stopped]"
    return text + status


async def _pump(stream: trio.abc.ReceiveStream, capture: _Capture, eof: trio.Event) -> None:
    try:
        while data := await stream.receive_some(_CHUNK_BYTES):
            capture.feed(data)
    except (trio.ClosedResourceError, trio.BrokenResourceError):
        pass
    finally:
        capture.flush()
        eof.set()


# Tells the model how to see what was cut, so one huge output need not fill its context.
_HOW = (
    "; to see them, send the output to a file (command > out.txt) and read it in parts "
    "(read with offset and limit, or grep)"
)


class _Capture:
    """The output of a command, bounded: its first and last *limit* characters.

    Bytes are decoded as they arrive (UTF-8, invalid bytes replaced) so the count of characters
    cut is exact. Memory stays around ``2 * limit`` characters plus one chunk.

    Secrets are masked before the cut: a cut through a secret would leave its two halves, each
    unrecognisable, in the result. So head and tail keep a margin of the longest secret's length
    beyond what is shown, and a secret that crosses a cut is shown (masked) whole.
    """

    def __init__(self, limit: int, secrets: Secrets = NO_SECRETS) -> None:
        self.limit = max(limit, 2)
        self._secrets = secrets
        self._keep = self.limit + secrets.max_len
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._head = ""
        self._tail = ""
        self._total = 0

    def feed(self, data: bytes | bytearray) -> None:
        self._add(self._decoder.decode(data))

    def flush(self) -> None:
        self._add(self._decoder.decode(b"", final=True))

    def _add(self, text: str) -> None:
        if not text:
            return
        self._total += len(text)
        room = self._keep - len(self._head)
        if room > 0:
            self._head += text[:room]
            text = text[room:]
        if text:
            self._tail = (self._tail + text)[-self._keep :]

    def text(self) -> str:
        """The output (secrets masked), or its head and tail around a note saying how many
        characters were cut."""
        mask = self._secrets.text
        if self._total <= self.limit:
            return mask(self._head)
        keep_head = self.limit // 2
        head_end = _widen(self._secrets, self._head, keep_head, forward=True)
        rest = self._head[head_end:] + self._tail
        tail_start = _widen(
            self._secrets, rest, max(0, len(rest) - (self.limit - keep_head)), forward=False
        )
        tail = rest[tail_start:]
        cut = self._total - head_end - len(tail)
        head = mask(self._head[:head_end])
        tail = mask(tail)
        if cut <= 0:
            return head + tail
        sep = "" if head.endswith("\n") else "\n"
        note = f"[... {cut} characters cut from the middle of the output{_HOW} ...]"
        return f"{head}{sep}{note}\n{tail}"


def _widen(secrets: Secrets, text: str, at: int, *, forward: bool) -> int:
    """*at*, moved to the end (*forward*) or the start of a secret it falls inside."""
    for start, end in secrets.spans(text):
        if start < at < end:
            return end if forward else start
        if start >= at:
            break
    return at


class _ProcessGroup:
    """The process group bash leads (``start_new_session``: its id is bash's pid).

    The group id is a pid number; once bash is reaped and the group is empty, the kernel may give
    that number to an unrelated process, and signalling the "group" would hit a stranger. So
    bash is not reaped until the group has been stopped: a zombie bash keeps its pid, and with
    it the group id, reserved. Its exit is watched through a pidfd, which does not reap. Where
    pidfds do not exist (not Linux), bash is reaped at once and the tiny race is accepted.
    """

    def __init__(self, proc: trio.Process, tag: str | None = None) -> None:
        self.proc = proc
        self.pgid = proc.pid
        self.tag = tag
        self.stopped = False
        self._pidfd: int | None
        try:
            self._pidfd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self._pidfd = None

    async def leader_exited(self) -> None:
        """Return when bash has exited (still unreaped where a pidfd exists)."""
        if self._pidfd is None:
            await self.proc.wait()
        else:
            await trio.lowlevel.wait_readable(self._pidfd)

    async def running(self) -> bool:
        """Whether a process of the group still runs (zombies do not count).

        Cancellation: a checkpoint; the /proc scan runs in a worker thread (it reads one file per
        process of the machine, milliseconds on a busy one) and is waited for.
        """
        if self._pidfd is None:
            _ = self.proc.returncode  # reaps bash if it has exited: a zombie is not running
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            await trio.lowlevel.checkpoint()
            return False
        except PermissionError:
            await trio.lowlevel.checkpoint()
            return True
        # The group still exists, but maybe only through zombies: bash itself (on purpose, see
        # above) or orphans under a PID 1 that does not reap. Look for a member really running.
        found = await trio.to_thread.run_sync(_running_members, self.pgid)
        return True if found is None else found

    async def stop(self, grace_s: float) -> bool:
        """Stop every process of the group: SIGTERM, then SIGKILL after *grace_s*.

        Processes of the call that left the group are stopped too (see the module docstring).
        Once a call finds nothing running, later calls return False at once.

        Returns:
            Whether any process was still running.

        Cancellation: a checkpoint while waiting; signals already sent stay sent. Callers that
        must finish the job run this under a shielded ``move_on_after``.
        """
        if self.stopped:
            await trio.lowlevel.checkpoint()
            return False
        in_group = await self._stop_group(grace_s)
        escaped = await self._stop_escaped(grace_s)
        # Nothing was running: nothing can start another process, no need to look again.
        self.stopped = not (in_group or escaped)
        return in_group or escaped

    async def _stop_group(self, grace_s: float) -> bool:
        if not await self.running():
            return False
        self._signal(signal.SIGTERM)
        self._signal(signal.SIGCONT)  # a stopped process only acts on SIGTERM once resumed
        # Polling: nothing signals when the last process of a group is gone (only the leader,
        # our child, can be waited for), so we look every few milliseconds.
        with trio.move_on_after(grace_s) as grace:
            while await self.running():  # noqa: ASYNC110 - no event exists to wait on, see above
                await trio.sleep(_POLL_S)
        if grace.cancelled_caught:
            self._signal(signal.SIGKILL)
            with trio.move_on_after(_KILL_WAIT_S):
                while await self.running():  # noqa: ASYNC110 - as above
                    await trio.sleep(_POLL_S)
        return True

    async def _stop_escaped(self, grace_s: float) -> bool:
        """Stop the call's processes that left its group (found by their tag); whether any ran.

        Cancellation: a checkpoint; signals already sent stay sent.
        """
        stopped = False
        if self.tag is None:
            return stopped
        for _ in range(_ESCAPE_ROUNDS):  # a daemon may fork again while it is being stopped
            pidfds = await trio.to_thread.run_sync(_tagged_processes, self.tag)
            if not pidfds:
                break
            stopped = True
            try:
                for sig in (signal.SIGTERM, signal.SIGCONT):
                    for fd in pidfds:
                        _pidfd_signal(fd, sig)
                with trio.move_on_after(grace_s):
                    for fd in pidfds:
                        await trio.lowlevel.wait_readable(fd)  # readable once it has exited
                for fd in pidfds:
                    _pidfd_signal(fd, signal.SIGKILL)
                with trio.move_on_after(_KILL_WAIT_S):
                    for fd in pidfds:
                        await trio.lowlevel.wait_readable(fd)
            finally:
                for fd in pidfds:
                    os.close(fd)
        return stopped

    async def reap(self) -> None:
        """Collect bash's exit status (it has exited once :meth:`stop` has run).

        Cancellation: a checkpoint; bash stays unreaped if cancelled before it exits.
        """
        with trio.move_on_after(_KILL_WAIT_S):
            await self.proc.wait()

    def close(self) -> None:
        """Release the pidfd."""
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def _signal(self, sig: signal.Signals) -> None:
        # Gone already; or not ours to signal (a setuid member): :meth:`running` still sees it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)


_ESCAPE_ROUNDS = 3


def _tagged_processes(tag: str) -> list[int]:
    """pidfds of the live processes whose environment holds the call's *tag* (none without pidfds).

    Each process is opened (pidfd) before its environment is read: if the pid was recycled in
    between, the environment read is the newcomer's, which does not hold the tag.

    A process in the middle of ``execve`` shows an empty environment for a moment (its new
    memory has no environment area yet): one that reads empty and is neither a zombie nor a
    kernel thread is read once more a few milliseconds later, so ``setsid sleep 300`` caught
    while it execs is not missed.
    """
    needle = f"{CALL_TAG_VAR}={tag}".encode()
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    me = os.getpid()
    found: list[int] = []
    unsure: list[tuple[str, int]] = []
    for pid in pids:
        if int(pid) == me:
            continue
        try:
            pidfd = os.pidfd_open(int(pid))
        except AttributeError:  # no pidfds here: no safe way to signal a stranger's pid
            break
        except OSError:
            continue  # exited meanwhile
        environ = _environ_of(pid)
        if environ is not None and needle in environ.split(b"\0"):
            found.append(pidfd)
        elif environ == b"" and _may_be_execing(pid):
            unsure.append((pid, pidfd))
        else:
            os.close(pidfd)
    if unsure:
        time.sleep(_EXEC_RECHECK_S)
        for pid, pidfd in unsure:
            if needle in (_environ_of(pid) or b"").split(b"\0"):
                found.append(pidfd)
            else:
                os.close(pidfd)
    return found


_EXEC_RECHECK_S = 0.005
_PF_KTHREAD = 0x00200000


def _environ_of(pid: str) -> bytes | None:
    """The process's environment block; None when it cannot be read (another user's, gone)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _may_be_execing(pid: str) -> bool:
    """Whether a process whose environment read empty may be mid-exec: not a zombie (no
    memory at all) and not a kernel thread (never had one)."""
    fields = _stat_fields(pid)
    try:
        return fields[0] not in (b"Z", b"X") and not int(fields[6]) & _PF_KTHREAD
    except (IndexError, ValueError):
        return False


def _stat_fields(pid: str) -> list[bytes]:
    """The fields of ``/proc/PID/stat`` after the command name (state, ppid, pgrp, ...); empty
    if the process is gone. os.open/os.read: half the cost of open(), and sweeps read one per
    process."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return []
    try:
        stat = os.read(fd, 1024)
    except OSError:
        return []
    finally:
        os.close(fd)
    # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
    return stat[stat.rfind(b")") + 2 :].split(maxsplit=7)  # up to the flags


def _pidfd_signal(pidfd: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        signal.pidfd_send_signal(pidfd, sig)


def _running_members(pgid: int) -> bool | None:
    """Whether /proc lists a non-zombie process in group *pgid*; ``None`` without /proc."""
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return None
    for pid in pids:
        fields = _stat_fields(pid)
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False
