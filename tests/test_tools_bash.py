"""The bash tool: output, exit codes, limits, timeouts, and no process left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Generator
from pathlib import Path

import psutil
import pytest
import trio
from _toolkit import call, is_running, make_ctx, read_fifo, running_in_group

from runtime.core._errors import ToolError, ToolInputError
from tools._bash import BashTool, _Capture, _ProcessGroup
from tools._warden import CALL_TAG_VAR, Warden


async def test_output_and_exit_code_zero(workspace: Path) -> None:
    out = await call(BashTool(), {"command": "echo hello"}, make_ctx(workspace))
    assert out == "hello\n[exit code 0]"


async def test_nonzero_exit_is_an_ok_result_with_the_code_and_stderr(workspace: Path) -> None:
    out = await call(
        BashTool(), {"command": "echo out; echo oops >&2; exit 3"}, make_ctx(workspace)
    )
    assert out == "out\noops\n[exit code 3]"


async def test_command_without_output_says_so(workspace: Path) -> None:
    assert await call(BashTool(), {"command": "true"}, make_ctx(workspace)) == (
        "(no output)\n[exit code 0]"
    )


async def test_output_without_final_newline_gets_one_before_the_status(workspace: Path) -> None:
    out = await call(BashTool(), {"command": "printf abc"}, make_ctx(workspace))
    assert out == "abc\n[exit code 0]"


async def test_killed_by_signal_is_reported(workspace: Path) -> None:
    out = await call(BashTool(), {"command": "kill -KILL $$"}, make_ctx(workspace))
    assert out.endswith("[killed by signal SIGKILL]")


async def test_runs_in_the_workspace(workspace: Path) -> None:
    ctx = make_ctx(workspace)
    out = await call(BashTool(), {"command": "pwd; echo x > made.txt"}, ctx)
    assert out.splitlines()[0] == str(ctx.workspace)
    assert (workspace / "made.txt").read_text() == "x\n"


async def test_gets_exactly_the_context_env(workspace: Path) -> None:
    env = {"PATH": os.environ["PATH"], "GREETING": "hi there"}
    out = await call(
        BashTool(), {"command": 'echo "$GREETING/${HOME-unset}"'}, make_ctx(workspace, env=env)
    )
    assert out.splitlines()[0] == "hi there/unset"


async def test_stdin_is_empty_so_reading_it_does_not_hang(workspace: Path) -> None:
    with trio.fail_after(5):
        out = await call(BashTool(), {"command": "cat; echo end"}, make_ctx(workspace))
    assert out == "end\n[exit code 0]"


async def test_runs_in_its_own_session_and_process_group(workspace: Path) -> None:
    # /proc/PID/stat: pid (comm) state ppid pgrp session ...
    out = await call(
        BashTool(), {"command": "cut -d' ' -f1,5,6 /proc/$$/stat"}, make_ctx(workspace)
    )
    pid, pgrp, session = out.splitlines()[0].split()
    assert pid == pgrp == session
    assert int(session) != os.getsid(0)


async def test_long_output_keeps_head_and_tail_and_says_how_much_was_cut(
    workspace: Path,
) -> None:
    command = "printf START; head -c 100000 /dev/zero | tr '\\0' x; printf END"
    out = await call(BashTool(), {"command": command}, make_ctx(workspace, max_output_chars=1000))
    body, status = out.rsplit("\n", 1)
    assert status == "[exit code 0]"
    assert body.startswith("START" + "x" * 495 + "\n")
    assert body.endswith("x" * 497 + "END")
    assert "[... 99008 characters cut from the middle of the output; to see them, send " in body
    assert "(read with offset and limit, or grep) ...]" in body
    assert len(body) < 1000 + 200  # the kept characters and the note


def test_capture_counts_characters_not_bytes_across_split_utf8() -> None:
    capture = _Capture(10)
    data = "é" * 30  # 2 bytes each
    raw = data.encode()
    for i in range(0, len(raw), 3):  # chunks that cut characters in half
        capture.feed(raw[i : i + 3])
    capture.flush()
    text = capture.text()
    assert text.startswith("ééééé\n[... 20 characters cut from the middle of the output; ")
    assert text.endswith(" ...]\nééééé")


def test_capture_keeps_output_that_fits_whole() -> None:
    capture = _Capture(10)
    capture.feed(b"0123456789")
    capture.flush()
    assert capture.text() == "0123456789"


def test_capture_memory_stays_bounded() -> None:
    capture = _Capture(100)
    for _ in range(1000):
        capture.feed(b"y" * 4096)
    assert len(capture._head) <= 100
    assert len(capture._tail) <= 100


async def test_timeout_is_an_error_naming_the_seconds(workspace: Path) -> None:
    start = trio.current_time()
    with pytest.raises(ToolError, match=r"^timed out after 0\.5 s") as info:
        await call(
            BashTool(), {"command": "echo before; sleep 30", "timeout_s": 0.5}, make_ctx(workspace)
        )
    assert "output so far:\nbefore" in str(info.value)
    assert trio.current_time() - start < 2.5


async def test_timeout_kills_background_grandchildren(workspace: Path) -> None:
    with pytest.raises(ToolError, match="timed out"):
        await call(
            BashTool(),
            {"command": 'sleep 300 & echo "$$ $!" > pids; wait', "timeout_s": 0.5},
            make_ctx(workspace),
        )
    bash_pid, child_pid = map(int, (workspace / "pids").read_text().split())
    assert not is_running(child_pid)
    assert running_in_group(bash_pid) == []


async def test_timeout_escalates_to_sigkill_when_sigterm_is_ignored(workspace: Path) -> None:
    # An ignored signal stays ignored across fork and exec, so the grandchild ignores it too.
    command = "trap '' TERM; sleep 300 & echo $! > child.pid; while :; do sleep 0.05; done"
    start = trio.current_time()
    with pytest.raises(ToolError, match="timed out"):
        await call(
            BashTool(kill_grace_s=0.3), {"command": command, "timeout_s": 0.3}, make_ctx(workspace)
        )
    child = int((workspace / "child.pid").read_text())
    assert not is_running(child)
    assert trio.current_time() - start < 2.5


async def _start_then_cancel(workspace: Path, tool: BashTool, command: str) -> tuple[int, int]:
    """Run *command* (which writes "$$ $!" to the FIFO `ready`), cancel the call once it has.

    Returns the pids of bash and of its background child.
    """
    fifo = workspace / "ready"
    os.mkfifo(fifo)
    result: list[str] = []
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                result.append(await call(tool, {"command": command}, make_ctx(workspace)))

            nursery.start_soon(run)
            bash_pid, child_pid = map(int, (await read_fifo(fifo)).split())
            assert is_running(child_pid)
            nursery.cancel_scope.cancel(reason="test cancels the call")
    assert result == []  # the call did not finish; it was cancelled
    return bash_pid, child_pid


async def test_cancel_kills_the_whole_process_group(workspace: Path) -> None:
    bash_pid, child_pid = await _start_then_cancel(
        workspace, BashTool(), 'sleep 300 & echo "$$ $!" > ready; sleep 300'
    )
    assert not is_running(bash_pid)
    assert not is_running(child_pid)
    assert running_in_group(bash_pid) == []


async def test_cancel_escalates_to_sigkill_when_sigterm_is_ignored(workspace: Path) -> None:
    start = trio.current_time()
    bash_pid, child_pid = await _start_then_cancel(
        workspace,
        BashTool(kill_grace_s=0.3),
        "trap '' TERM; sleep 300 & echo \"$$ $!\" > ready; while :; do sleep 0.05; done",
    )
    assert not is_running(child_pid)
    assert running_in_group(bash_pid) == []
    assert trio.current_time() - start < 2.5


async def test_background_jobs_are_stopped_when_the_command_ends(workspace: Path) -> None:
    with trio.fail_after(5):
        out = await call(
            BashTool(),
            {"command": "sleep 300 & echo $! > child.pid; echo done"},
            make_ctx(workspace),
        )
    assert out == (
        "done\n[exit code 0]\n[background processes the command left running were stopped]"
    )
    assert not is_running(int((workspace / "child.pid").read_text()))


async def test_timeout_above_the_maximum_is_an_error_naming_the_field(workspace: Path) -> None:
    with pytest.raises(ToolError, match=r"^input\.timeout_s: 700 s is above the maximum of 600 s"):
        await call(BashTool(), {"command": "true", "timeout_s": 700}, make_ctx(workspace))


async def test_maximum_timeout_follows_the_limits(workspace: Path) -> None:
    with pytest.raises(ToolError, match="above the maximum of 5 s"):
        await call(
            BashTool(),
            {"command": "true", "timeout_s": 6},
            make_ctx(workspace, bash_max_timeout_s=5),
        )


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({}, "input.command"),
        ({"command": ""}, "input.command"),
        ({"command": 1}, "input.command"),
        ({"command": "true", "timeout_s": 0}, "input.timeout_s"),
        ({"command": "true", "timeout_s": "5"}, "input.timeout_s"),
        ({"command": "true", "shell": "zsh"}, "shell"),
    ],
)
async def test_bad_input_is_refused_naming_the_field(
    workspace: Path, args: dict[str, object], field: str
) -> None:
    with pytest.raises(ToolInputError, match=field.replace(".", r"\.")):
        await call(BashTool(), args, make_ctx(workspace))


def test_flags_summary_and_permission_target() -> None:
    tool = BashTool()
    assert (tool.name, tool.needs_permission, tool.read_only, tool.edits_files) == (
        "bash",
        True,
        False,
        False,
    )
    assert tool.summary({"command": "ls -la\n  | wc -l"}) == "bash: ls -la | wc -l"
    assert len(tool.summary({"command": "x" * 500})) <= 120
    assert tool.permission_target({"command": "  git status  "}) == "git status"


@pytest.fixture
def no_pidfd(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend the platform has no pidfds (not Linux): bash is reaped as soon as it exits."""

    def missing(pid: int) -> int:
        raise AttributeError("pidfd_open")

    monkeypatch.setattr(os, "pidfd_open", missing)


@pytest.mark.usefixtures("no_pidfd")
async def test_without_pidfd_exit_codes_and_background_cleanup_still_work(workspace: Path) -> None:
    with trio.fail_after(5):
        out = await call(
            BashTool(), {"command": "sleep 300 & echo $! > child.pid; exit 4"}, make_ctx(workspace)
        )
    assert out == (
        "(no output)\n[exit code 4]\n[background processes the command left running were stopped]"
    )
    assert not is_running(int((workspace / "child.pid").read_text()))


@pytest.mark.usefixtures("no_pidfd")
async def test_without_pidfd_cancel_still_kills_the_group(workspace: Path) -> None:
    bash_pid, child_pid = await _start_then_cancel(
        workspace, BashTool(), 'sleep 300 & echo "$$ $!" > ready; sleep 300'
    )
    assert not is_running(child_pid)
    assert running_in_group(bash_pid) == []


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs pidfds (Linux)")
async def test_bash_stays_unreaped_so_its_group_id_stays_reserved_until_stopped() -> None:
    proc = await trio.lowlevel.open_process(["bash", "-c", "exit 3"], start_new_session=True)
    group = _ProcessGroup(proc)
    try:
        with trio.fail_after(5):
            await group.leader_exited()
        # Exited but not reaped: the pid, which is the group id, is still taken.
        assert psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE
        assert await group.stop(0.1) is False  # a zombie leader is not a running member
    finally:
        with trio.fail_after(5):
            await group.reap()
        group.close()
    assert proc.returncode == 3


# ---------------------------------------------------------------------------- the warden


def _wait_until_stopped(pids: list[int], limit_s: float = 5.0) -> list[int]:
    """The pids among *pids* still running after *limit_s* (polling)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        left = [pid for pid in pids if is_running(pid)]
        if not left:
            return []
        time.sleep(0.02)  # other processes' pids: no event tells when they are gone
    return [pid for pid in pids if is_running(pid)]


@contextlib.contextmanager
def _reaped(*procs: subprocess.Popen[bytes]) -> Generator[None]:
    """Kill and reap *procs* at the end, whatever the test found."""
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _group_with_background_child(trap_term: bool = False) -> tuple[subprocess.Popen[bytes], int]:
    """bash leading its own group, with a background sleep; and that sleep's pid."""
    trap = "trap '' TERM; " if trap_term else ""
    proc = subprocess.Popen(
        ["bash", "-c", f"{trap}sleep 60 & echo $!; wait"],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    background = int(proc.stdout.readline())
    proc.stdout.close()
    return proc, background


def test_the_warden_stops_guarded_groups_once_its_pipe_closes() -> None:
    warden = Warden(grace_s=0.5)
    guarded, background = _group_with_background_child()
    released = subprocess.Popen(["sleep", "60"], start_new_session=True)
    with _reaped(guarded, released):
        warden.guard(guarded.pid)
        warden.guard(released.pid)
        warden.release(released.pid)
        assert warden.pid is not None
        warden.close()  # what the death of this process does: end of file for the warden
        assert guarded.wait(timeout=5) == -signal.SIGTERM
        assert _wait_until_stopped([background]) == []
        assert released.poll() is None, "a released group is left alone"


def test_the_warden_escalates_to_sigkill_when_sigterm_is_ignored() -> None:
    warden = Warden(grace_s=0.3)
    guarded, background = _group_with_background_child(trap_term=True)
    with _reaped(guarded):
        warden.guard(guarded.pid)
        warden.close()
        assert guarded.wait(timeout=5) == -signal.SIGKILL
        assert _wait_until_stopped([background]) == []


def _tagged_sleep(tag: str) -> subprocess.Popen[bytes]:
    """A process that carries a bash call's *tag* and left every group the warden knows."""
    return subprocess.Popen(
        ["sleep", "60"], start_new_session=True, env={**os.environ, CALL_TAG_VAR: tag}
    )


def test_the_warden_stops_the_processes_of_a_call_by_its_tag() -> None:
    # The tag is guarded before bash starts: a process of the call whose group was never
    # written (this process died first), or that left its group with setsid, is found anyway.
    warden = Warden(grace_s=0.5)
    first, second, released = (
        _tagged_sleep("c0ffee01"),
        _tagged_sleep("c0ffee01"),
        _tagged_sleep("c0ffee02"),
    )
    untagged = subprocess.Popen(["sleep", "60"], start_new_session=True)
    with _reaped(first, second, released, untagged):
        warden.guard_call("c0ffee01")
        warden.guard_call("c0ffee02")
        warden.release_call("c0ffee02")
        warden.close()
        assert first.wait(timeout=5) == -signal.SIGTERM
        assert second.wait(timeout=5) == -signal.SIGTERM
        assert released.poll() is None, "a released call's processes are left alone"
        assert untagged.poll() is None


def test_a_warden_without_pidfds_signals_tagged_processes_by_pid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An old kernel or a seccomp filter without pidfd_open: the tagged processes are signalled
    # by their pid (SIGTERM, then SIGKILL for one that ignores it), the others left alone.
    from tools import _warden

    line = 'pidfds = hasattr(os, "pidfd_open")'
    assert line in _warden._PROGRAM
    monkeypatch.setattr(_warden, "_PROGRAM", _warden._PROGRAM.replace(line, "pidfds = False"))
    warden = Warden(grace_s=0.3)
    polite = _tagged_sleep("c0ffee04")
    stubborn = subprocess.Popen(
        ["bash", "-c", "trap '' TERM; sleep 60 & wait"],
        start_new_session=True,
        env={**os.environ, CALL_TAG_VAR: "c0ffee04"},
    )
    other = _tagged_sleep("c0ffee05")
    with _reaped(polite, stubborn, other):
        warden.guard_call("c0ffee04")
        warden.close()
        assert polite.wait(timeout=5) == -signal.SIGTERM
        assert stubborn.wait(timeout=5) == -signal.SIGKILL
        assert other.poll() is None, "a process of an unguarded call is left alone"


def test_the_warden_kills_tagged_processes_that_ignore_sigterm() -> None:
    warden = Warden(grace_s=0.3)
    stubborn = subprocess.Popen(
        ["bash", "-c", "trap '' TERM; sleep 60 & wait"],
        start_new_session=True,
        env={**os.environ, CALL_TAG_VAR: "c0ffee03"},
    )
    with _reaped(stubborn):
        warden.guard_call("c0ffee03")
        warden.close()
        assert stubborn.wait(timeout=5) == -signal.SIGKILL


_DIE_HOLDING_A_GROUP = """
import os, signal, subprocess, sys, time
from tools._warden import CALL_TAG_VAR, warden
if sys.argv[1] == "tag-only":  # died before it learned the group: the call's tag is enough
    warden().guard_call("feed01")
    group = subprocess.Popen(["sleep", "60"], start_new_session=True,
                             env={**os.environ, CALL_TAG_VAR: "feed01"})
else:
    group = subprocess.Popen(["sleep", "60"], start_new_session=True)
    warden().guard(group.pid)
forked = os.fork() if sys.argv[1] == "fork" else 0
if forked == 0 and sys.argv[1] == "fork":
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # so the test's pipe reaches end of file when the parent dies
    os.dup2(devnull, 2)
    time.sleep(30)  # a forked child that outlives its parent
    os._exit(0)
print(group.pid, forked, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("fork", ["fork", "no-fork", "tag-only"])
def test_a_process_killed_with_sigkill_leaves_no_guarded_group_behind(fork: str) -> None:
    # The at-fork hook closes a forked child's copy of the pipe: the warden sees its owner die
    # even while that child lives on.
    proc = subprocess.run(
        [sys.executable, "-c", _DIE_HOLDING_A_GROUP, fork],
        capture_output=True,
        timeout=30,
        check=False,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    group, forked = map(int, proc.stdout.splitlines()[-1].split())
    try:
        assert _wait_until_stopped([group]) == []
    finally:
        for pid in (group, forked):
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


async def test_bash_guards_its_group_while_it_runs_and_releases_it_after(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    monkeypatch.setattr(Warden, "guard", lambda self, pgid: seen.append(f"+{pgid}"))
    monkeypatch.setattr(Warden, "release", lambda self, pgid: seen.append(f"-{pgid}"))
    monkeypatch.setattr(Warden, "guard_call", lambda self, tag: seen.append(f"t{tag}"))
    monkeypatch.setattr(Warden, "release_call", lambda self, tag: seen.append(f"u{tag}"))
    out = await call(BashTool(), {"command": f"echo $$ ${CALL_TAG_VAR}"}, make_ctx(workspace))
    pid, tag = out.split()[:2]
    assert seen == [f"t{tag}", f"+{pid}", f"-{pid}", f"u{tag}"], "the tag is guarded first"
    seen.clear()
    await call(BashTool(orphan_guard=False), {"command": "true"}, make_ctx(workspace))
    assert seen == []


async def test_bash_releases_its_group_even_when_stopping_it_fails(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A group still listed after its bash is reaped would let the warden signal whatever
    # process group gets that number next.
    seen: list[str] = []
    monkeypatch.setattr(Warden, "guard", lambda self, pgid: seen.append(f"+{pgid}"))
    monkeypatch.setattr(Warden, "release", lambda self, pgid: seen.append(f"-{pgid}"))

    async def broken_stop(self: _ProcessGroup, grace_s: float) -> bool:
        raise RuntimeError("cannot stop")

    monkeypatch.setattr(_ProcessGroup, "stop", broken_stop)
    with pytest.raises(RuntimeError, match="cannot stop"):
        await call(BashTool(), {"command": "true"}, make_ctx(workspace))
    assert len(seen) == 2
    assert seen[1] == "-" + seen[0][1:]


def test_a_warden_that_died_is_replaced_and_told_every_group_still_guarded() -> None:
    warden = Warden(grace_s=0.3)
    first, background = _group_with_background_child()
    second = subprocess.Popen(["sleep", "60"], start_new_session=True)
    with _reaped(first, second):
        warden.guard(first.pid)
        warden.guard_call("c0ffee04")
        old = warden.pid
        assert old is not None
        os.kill(old, signal.SIGKILL)
        assert _wait_until_stopped([old]) == []
        warden.guard(second.pid)  # the write fails; a new warden gets both groups and the tag
        assert warden.pid not in (None, old)
        tagged = _tagged_sleep("c0ffee04")
        with _reaped(tagged):
            warden.close()
            assert tagged.wait(timeout=5) == -signal.SIGTERM
        assert first.wait(timeout=5) == -signal.SIGTERM
        assert second.wait(timeout=5) == -signal.SIGTERM
        assert _wait_until_stopped([background]) == []


def test_a_warden_that_stopped_reading_is_killed_before_it_is_replaced() -> None:
    # Left alive, it would read the end of its pipe later and stop groups its replacement
    # guards (and numbers whose release it never read).
    warden = Warden(grace_s=0.3)
    group = subprocess.Popen(["sleep", "60"], start_new_session=True)
    with _reaped(group):
        warden.guard(group.pid)
        old = warden.pid
        assert old is not None
        os.kill(old, signal.SIGSTOP)
        for _ in range(20_000):  # ~160 KB of messages: more than its pipe holds
            warden.guard(999_999_999)
            warden.release(999_999_999)
            if warden.pid != old:
                break
        assert warden.pid not in (None, old)
        assert _wait_until_stopped([old]) == []
        assert group.poll() is None, "the live group was left alone"
        warden.close()
        assert group.wait(timeout=5) == -signal.SIGTERM


@pytest.mark.parametrize(
    "command",
    [
        "setsid sleep 300 & echo $! > child.pid; echo done",  # a session of its own
        "(setsid sleep 300 & echo $! > child.pid) ; echo done",  # and an orphan at once
        "setsid bash -c 'sleep 300 & echo $! > child.pid; wait' & sleep 0.2; echo done",
    ],
    ids=["setsid", "orphan", "grandchild"],
)
async def test_processes_that_left_the_group_are_stopped_too(workspace: Path, command: str) -> None:
    # The result says background processes were stopped: it must be true of those that left
    # the process group (setsid) as well, which the group's SIGTERM never reaches.
    with trio.fail_after(10):
        out = await call(BashTool(), {"command": command}, make_ctx(workspace))
    assert out.endswith(
        "done\n[exit code 0]\n[background processes the command left running were stopped]"
    )
    pid = int((workspace / "child.pid").read_text())
    assert _wait_until_stopped([pid], limit_s=1.0) == []


async def test_processes_that_left_the_group_are_stopped_on_timeout_too(workspace: Path) -> None:
    with trio.fail_after(10), pytest.raises(ToolError, match="timed out"):
        await call(
            BashTool(kill_grace_s=0.2),
            {"command": "setsid sleep 300 & echo $! > child.pid; sleep 300", "timeout_s": 0.5},
            make_ctx(workspace),
        )
    pid = int((workspace / "child.pid").read_text())
    assert _wait_until_stopped([pid], limit_s=1.0) == []


def test_a_tagged_process_caught_mid_exec_is_found_on_a_second_look(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # While a process execs (`setsid sleep 300` becoming sleep), its environment reads empty
    # for a moment; the sweep found no tag then and left the process running (a flaky
    # test_processes_that_left_the_group_are_stopped_too[orphan] under load). The kernel's
    # window is too short to hit on purpose, so the first read of that process is made empty.
    import tools._bash as bash_module

    tag = "mid-exec-test"
    env = {**os.environ, bash_module.CALL_TAG_VAR: tag}
    proc = subprocess.Popen(["sleep", "30"], env=env)
    with _reaped(proc):
        real = bash_module._environ_of
        reads: list[str] = []

        def first_read_empty(pid: str) -> bytes | None:
            if pid == str(proc.pid) and pid not in reads:
                reads.append(pid)
                return b""
            return real(pid)

        monkeypatch.setattr(bash_module, "_environ_of", first_read_empty)
        pidfds = bash_module._tagged_processes(tag)
        try:
            assert reads == [str(proc.pid)]
            assert len(pidfds) == 1
        finally:
            for fd in pidfds:
                os.close(fd)
        # A process whose environment is really empty is looked at twice and left alone.
        empty = subprocess.Popen(["sleep", "30"], env={})
        with _reaped(empty):
            monkeypatch.setattr(bash_module, "_environ_of", real)
            assert bash_module._tagged_processes("no-such-tag") == []
