"""A user's message queued for a running agent survives a crash (docs/resume.md, "Background
sub-agents and messages"): ``Runtime.send_message`` records it as ``message_queued`` at once,
and a resume puts the ones never read back in the agent's mailbox, in order, once each.

The crash is real: a small script runs an agent that blocks in a tool call (on a trio event,
no sleeps), queues messages to it, and is killed with SIGKILL once the trace holds them; the
test resumes its trace in this process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import trio

from runtime import FunctionProvider, ToolCall, open_runtime, read_events, tool
from runtime.core import Limits
from runtime.replay import INTERRUPTED_TEXT, load_resume

# The agent: turn 1 holds (the test's script lets it go after one message, m0, is queued:
# read before the crash), turn 2 holds until the process dies (m1 and m2 are queued then),
# turn 3 says which user messages it has read.
SCRIPT = textwrap.dedent(
    """
    import sys
    import trio
    from runtime import FunctionProvider, ToolCall, open_runtime, tool

    sys.path.insert(0, sys.argv[2])
    from test_resume_messages import model

    reached = {1: trio.Event(), 2: trio.Event()}
    go = trio.Event()

    @tool
    async def hold(step: int) -> str:
        '''Wait for the user.

        Args:
            step: which wait.
        '''
        reached[step].set()
        if step == 1:
            await go.wait()
            return "went on"
        await trio.sleep_forever()
        return "never"

    async def main() -> None:
        async with open_runtime(
            FunctionProvider(model), extra_tools=[hold], workspace=".", trace=sys.argv[1],
            permission_mode="allow-all", run_id="run-msgs",
        ) as rt:
            handle = await rt.start("go")
            await reached[1].wait()
            assert rt.send_message(handle.agent_id, "m0: read before the crash")
            go.set()
            await reached[2].wait()
            assert rt.send_message(handle.agent_id, "m1: first")
            assert rt.send_message(handle.agent_id, "m2: second")
            await trio.sleep_forever()

    trio.run(main)
    """
)


def model(request: Any) -> Any:
    """Hold twice, then answer with the user's messages the history holds, in order."""
    turns = sum(1 for m in request.messages if m.role == "assistant")
    if turns < 2:
        return [ToolCall(name="hold", input={"step": turns + 1}, id=f"c{turns + 1}")]
    texts = [
        b.text for m in request.messages[1:] if m.role == "user"
        for b in m.content if getattr(b, "text", "").startswith("m")
    ]
    return "read: " + " | ".join(texts)


def _queued_in(trace: Path) -> int:
    try:
        return trace.read_bytes().count(b'"type":"message_queued"')
    except FileNotFoundError:
        return 0


def _crashed_run(tmp_path: Path) -> Path:
    """The script's run, killed with SIGKILL once its trace holds the three messages."""
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    trace = tmp_path / "t.jsonl"
    env = dict(os.environ)
    env.pop("TRIO_AGENTS_DEBUG", None)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(trace), str(Path(__file__).parent)], cwd=tmp_path,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
    )
    deadline = time.monotonic() + 60
    while proc.poll() is None and _queued_in(trace) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    alive = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=30)
    assert alive, err.decode()
    assert _queued_in(trace) == 3
    return trace


@tool
async def hold(step: int) -> str:
    """Wait for the user (after a resume it is never run: not read-only).

    Args:
        step: which wait.
    """
    await trio.sleep_forever()
    return "never"


def _read(trace: Path) -> list[str]:
    return [e.text for e in read_events(trace) if e.type == "user_message"]  # type: ignore[attr-defined]


async def test_messages_queued_at_the_crash_are_read_once_in_order_after_resume(
    tmp_path: Path,
) -> None:
    trace = _crashed_run(tmp_path)
    assert _read(trace) == ["m0: read before the crash"]
    state = load_resume(trace)
    (agent,) = state.unread
    assert state.unread[agent] == ["m1: first", "m2: second"]  # m0 was read: not again

    async with open_runtime(
        FunctionProvider(model), extra_tools=[hold], workspace=tmp_path,
        permission_mode="allow-all", resume=trace,
    ) as rt:
        outcome = await rt.resume()
        assert rt._run.provider.delivered == 2  # type: ignore[attr-defined]
    assert outcome.status == "completed"
    # The played-back history does not carry m0 again (docs/replay.md): it is the two.
    assert outcome.result == "read: m1: first | m2: second"
    assert _read(trace) == ["m0: read before the crash", "m1: first", "m2: second"]
    events = list(read_events(trace))
    held = [e for e in events if e.type == "tool_finished" and e.tool_use_id == "c2"]  # type: ignore[attr-defined]
    assert [e.output for e in held] == [INTERRUPTED_TEXT]  # type: ignore[attr-defined]
    kinds = [e.type for e in events]
    assert kinds.count("message_queued") == 3  # nothing queued twice
    assert kinds[-1] == "run_finished"
    # Resumed again, the finished run has nothing to deliver.
    assert load_resume(trace).finished


class _Waiter:
    """An agent that calls ``wait_here`` once (it waits for :attr:`go`), then says done."""

    def __init__(self) -> None:
        self.reached, self.go = trio.Event(), trio.Event()

        @tool
        async def wait_here() -> str:
            """Wait for the user."""
            self.reached.set()
            await self.go.wait()
            return "went on"

        self.tool = wait_here

    def answer(self, request: Any) -> Any:
        turns = sum(1 for m in request.messages if m.role == "assistant")
        return [ToolCall(name="wait_here", input={}, id="w1")] if turns == 0 else "done"


async def test_a_key_in_a_message_never_reaches_the_trace(tmp_path: Path) -> None:
    """A secret typed into a message is masked in ``message_queued`` and ``user_message``
    alike, in the trace and in the events a program reads; a resume puts back the masked
    text (the trace never had the key)."""
    key = "sk-live-0123456789abcdef"
    waiter = _Waiter()
    trace = tmp_path / "t.jsonl"
    seen: list[Any] = []
    async with open_runtime(
        FunctionProvider(waiter.answer), extra_tools=[waiter.tool], workspace=tmp_path, trace=trace,
        permission_mode="allow-all", env={"SERVICE_API_KEY": key, "PATH": os.environ["PATH"]},
        on_event=seen.append,
    ) as rt:
        handle = await rt.start("go")
        await waiter.reached.wait()
        assert rt.send_message(handle.agent_id, f"use the key {key} now")
        waiter.go.set()
        outcome = await handle.wait()
    assert outcome.status == "completed"
    data = trace.read_bytes()
    assert key.encode() not in data
    for kind in ("message_queued", "user_message"):
        (event,) = [e for e in seen if e.type == kind]
        assert event.text == "use the key *** now"
        assert event.agent_id == handle.agent_id
    # Cut after message_queued: the resume would deliver the masked text, never the key.
    lines = data.splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if b'"message_queued"' in line) + 1
    (tmp_path / "cut.jsonl").write_bytes(b"".join(lines[:cut]))
    state = load_resume(tmp_path / "cut.jsonl")
    assert state.unread == {handle.agent_id: ["use the key *** now"]}


async def test_a_message_is_not_queued_for_a_finished_agent_nor_for_a_full_mailbox(
    tmp_path: Path,
) -> None:
    """Refused messages (the agent has ended, its mailbox is full) are not recorded: the
    mailbox bound holds, and a resume has nothing of theirs to deliver."""
    waiter = _Waiter()
    trace = tmp_path / "t.jsonl"
    async with open_runtime(
        FunctionProvider(waiter.answer), extra_tools=[waiter.tool], workspace=tmp_path, trace=trace,
        permission_mode="allow-all", limits=Limits(mailbox_size=2),
    ) as rt:
        handle = await rt.start("go")
        await waiter.reached.wait()
        sent = [rt.send_message(handle.agent_id, f"n{i}") for i in range(3)]
        waiter.go.set()
        await handle.wait()
        late = rt.send_message(handle.agent_id, "too late")
    assert sent == [True, True, False]
    assert late is False
    queued = [e.text for e in read_events(trace) if e.type == "message_queued"]  # type: ignore[attr-defined]
    assert queued == ["n0", "n1"]
    assert _read(trace) == ["n0", "n1"]


async def test_a_message_its_agent_ended_before_reading_is_not_delivered_after_resume(
    tmp_path: Path,
) -> None:
    """An agent that ended before it read a message (here: its last turn allowed, the message
    came during it) hands it back in its outcome, as in any run; killed after that, the
    resume leaves it finished and delivers nothing: the trace keeps the message queued and
    never read."""
    box: dict[str, Any] = {}

    def answer(request: Any) -> Any:
        assert box["rt"].send_message(request.agent_id, "late")
        return [ToolCall(name="look", input={}, id="l1")]

    @tool(read_only=True)
    def look() -> str:
        """Look."""
        return "seen"

    trace = tmp_path / "t.jsonl"
    async with open_runtime(
        FunctionProvider(answer), extra_tools=[look], workspace=tmp_path, trace=trace,
        permission_mode="allow-all", limits=Limits(max_turns=1),
    ) as rt:
        box["rt"] = rt
        outcome = await rt.run("go")
    assert (outcome.status, outcome.undelivered) == ("max_turns", ("late",))
    lines = trace.read_bytes().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if b'"agent_finished"' in line) + 1
    (tmp_path / "cut.jsonl").write_bytes(b"".join(lines[:cut]))  # killed before run_finished
    state = load_resume(tmp_path / "cut.jsonl")
    assert state.unread == {}
    async with open_runtime(
        FunctionProvider(answer), extra_tools=[look], workspace=tmp_path,
        permission_mode="allow-all", resume=tmp_path / "cut.jsonl", limits=Limits(max_turns=1),
    ) as rt:
        again = await rt.resume()
        assert rt._run.provider.delivered == 0  # type: ignore[attr-defined]
    assert again.status == "max_turns"
    events = list(read_events(tmp_path / "cut.jsonl"))
    assert [e.type for e in events].count("message_queued") == 1
    assert _read(tmp_path / "cut.jsonl") == []
