"""Every public async API whose docstring states a cancellation contract does what it says.

Two kinds of check, trio's way: ``trio.testing.assert_checkpoints`` /
``assert_no_checkpoints`` for "a checkpoint" / "not a checkpoint", and a cancel at the
documented point for "what state is left". Time is virtual (``autojump_clock``) wherever a
wait is involved; steps are ordered with ``wait_all_tasks_blocked``, never with real sleeps.
"""

from __future__ import annotations

import os
import threading
from contextlib import AsyncExitStack, aclosing
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from trio.testing import assert_checkpoints, assert_no_checkpoints

from runtime import (
    AgentFinished,
    AgentStarted,
    CancelRequested,
    Event,
    EventBus,
    Message,
    ModelRequest,
    Scenario,
    ScriptedProvider,
    TextBlock,
    TextDelta,
    follow_lines,
    open_runtime,
)
from runtime.actors import ActorContext, Mailbox, start_actor
from runtime.providers import open_provider
from tests._toolkit import call, make_ctx
from tests.harness import EventLog
from tools import EditTool, ReadTool, SkillTool, Tool, WriteTool
from tools import _edit as _edit_mod
from tools import _read as _read_mod
from tools import _write as _write_mod


async def _emit(bus: EventBus, text: str = "x") -> Event:
    return await bus.emit(TextDelta(agent_id="a", parent_tool_use_id=None, text=text))


def _cancelled_scope() -> trio.CancelScope:
    scope = trio.CancelScope()
    scope.cancel(reason="test")
    return scope


# -- runtime.actors.Mailbox --------------------------------------------------------------------
async def test_mailbox_send_is_a_checkpoint_even_with_room() -> None:
    box: Mailbox[str] = Mailbox(2)
    with assert_checkpoints():
        await box.send("a")
    assert box.drain() == ["a"]


async def test_a_cancelled_mailbox_send_delivers_nothing() -> None:
    box: Mailbox[str] = Mailbox(1)
    with _cancelled_scope():  # with room: cancelled before anything is delivered
        await box.send("a")
    assert box.pending() == 0
    box.send_nowait("b")
    async with trio.open_nursery() as nursery:  # full: cancelled while waiting
        nursery.start_soon(box.send, "c")
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel(reason="test")
    assert box.drain() == ["b"]


async def test_mailbox_receive_is_a_checkpoint_even_with_a_command_waiting() -> None:
    box: Mailbox[str] = Mailbox(2)
    box.send_nowait("a")
    with assert_checkpoints():
        assert await box.receive() == "a"


async def test_a_cancelled_mailbox_receive_loses_no_command() -> None:
    box: Mailbox[str] = Mailbox(2)
    box.send_nowait("a")
    with _cancelled_scope():  # a command waiting: the cancel comes first, the command stays
        await box.receive()
    assert box.pending() == 1
    assert await box.receive() == "a"
    async with trio.open_nursery() as nursery:  # cancelled while waiting
        nursery.start_soon(box.receive)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel(reason="test")
    box.send_nowait("b")
    assert box.drain() == ["b"]


# -- runtime.actors.start_actor / ActorHandle.wait ---------------------------------------------
async def _park(ctx: ActorContext[Any]) -> None:
    await trio.sleep_forever()


async def _finish(ctx: ActorContext[Any]) -> str:
    return "done"


async def test_start_actor_is_a_checkpoint() -> None:
    async with trio.open_nursery() as nursery:
        with assert_checkpoints():
            handle = await start_actor(nursery, _finish, actor_id="a")
    assert handle.exit is not None
    assert handle.exit.value == "done"


async def test_a_cancelled_start_actor_leaves_nothing_running() -> None:
    ran: list[str] = []

    async def body(ctx: ActorContext[Any]) -> None:
        ran.append("started")
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        with _cancelled_scope() as scope:
            await start_actor(nursery, body, actor_id="a")
        assert scope.cancelled_caught
        await trio.testing.wait_all_tasks_blocked()
        # The body ran to its first checkpoint at most, and was cancelled there with the caller.
        assert ran in ([], ["started"])
        assert len(nursery.child_tasks) == 0


async def test_actor_wait_is_a_checkpoint_even_when_the_actor_has_ended() -> None:
    async with trio.open_nursery() as nursery:
        handle = await start_actor(nursery, _finish, actor_id="a")
    assert handle.done
    with assert_checkpoints():
        exit_ = await handle.wait()
    assert exit_.kind == "returned"


async def test_cancelling_an_actor_wait_does_not_cancel_the_actor() -> None:
    async with trio.open_nursery() as nursery:
        handle = await start_actor(nursery, _park, actor_id="a")
        with trio.move_on_after(1):
            await handle.wait()
        assert not handle.done
        handle.cancel("now")
    assert handle.exit is not None
    assert handle.exit.kind == "cancelled"


# -- runtime.Subscription.receive --------------------------------------------------------------
async def test_subscription_receive_is_a_checkpoint_even_with_an_event_buffered() -> None:
    bus = EventBus("r")
    sub = bus.subscribe(buffer=4)
    await _emit(bus)
    with assert_checkpoints():
        assert (await sub.receive()).seq == 1


async def test_a_cancelled_subscription_receive_loses_no_event() -> None:
    bus = EventBus("r")
    sub = bus.subscribe(buffer=4)
    await _emit(bus, "first")
    with _cancelled_scope():  # an event buffered: the cancel comes before it is taken
        await sub.receive()
    assert sub.receive_nowait().seq == 1
    async with trio.open_nursery() as nursery:  # cancelled while waiting for one
        nursery.start_soon(sub.receive)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel(reason="test")
    await _emit(bus, "second")
    assert sub.receive_nowait().seq == 2


# -- runtime.EventBus.emit / wait_for_room / emit_final -----------------------------------------
async def test_emit_is_not_a_checkpoint_without_a_full_block_subscription() -> None:
    bus = EventBus("r")
    bus.subscribe(buffer=1)  # lag: never waited for
    block = bus.subscribe(buffer=4, policy="block")
    with assert_no_checkpoints():
        for _ in range(3):
            await _emit(bus)
    assert len(block._buffer) == 3


async def test_emit_cancelled_while_a_block_subscription_is_full_uses_no_seq() -> None:
    bus = EventBus("r")
    block = bus.subscribe(buffer=1, policy="block")
    await _emit(bus, "fills it")
    with _cancelled_scope() as scope:
        await _emit(bus, "never sent")
    assert scope.cancelled_caught
    assert block.receive_nowait().seq == 1
    assert (await _emit(bus, "next")).seq == 2


async def test_wait_for_room_is_a_checkpoint_only_while_waiting() -> None:
    bus = EventBus("r")
    block = bus.subscribe(buffer=1, policy="block")
    with assert_no_checkpoints():
        await bus.wait_for_room()
    await _emit(bus)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(bus.wait_for_room)
        await trio.testing.wait_all_tasks_blocked()
        assert len(nursery.child_tasks) == 1  # waiting: the subscription is full
        with assert_checkpoints():
            await block.receive()


async def test_emit_final_is_not_a_checkpoint_and_goes_out_in_a_cancelled_scope() -> None:
    bus = EventBus("r")
    sub = bus.subscribe(buffer=4, policy="block")
    with _cancelled_scope(), assert_no_checkpoints():
        await bus.emit_final(
            TextDelta(
                agent_id="a",
                parent_tool_use_id=None,
                text="end",
            ),
            grace_s=1,
        )
    assert sub.receive_nowait().seq == 1


async def test_emit_final_waits_shielded_at_most_its_grace_for_a_full_block_reader(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bus = EventBus("r")
    sub = bus.subscribe(buffer=1, policy="block")
    await _emit(bus, "fills it")
    t0 = trio.current_time()
    with _cancelled_scope() as scope:
        await bus.emit_final(
            TextDelta(
                agent_id="a",
                parent_tool_use_id=None,
                text="end",
            ),
            grace_s=3,
        )
    assert not scope.cancelled_caught
    assert trio.current_time() - t0 == 3
    assert [sub.receive_nowait().seq, sub.receive_nowait().seq] == [1, 2]


# -- runtime.AgentHandle.wait / Runtime.start / Runtime.cancel / Runtime.run --------------------
_SLOW = {"agents": {"main": {"turns": [{"text": "late", "delay_s": 100}]}}}
_QUICK = {"agents": {"main": {"turns": [{"text": "hello"}]}}}


async def test_agent_handle_wait_is_a_checkpoint_even_when_the_agent_has_ended(
    workspace: Path,
) -> None:
    async with open_runtime(scenario=_QUICK, workspace=workspace, trace=False) as rt:
        handle = await rt.start("go")
        await handle.wait()
        with assert_checkpoints():
            outcome = await handle.wait()
    assert outcome.status == "completed"


async def test_cancelling_an_agent_handle_wait_does_not_cancel_the_agent(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runtime(scenario=_SLOW, workspace=workspace, trace=False) as rt:
        handle = await rt.start("go")
        with trio.move_on_after(1):
            await handle.wait()
        assert not handle.done
        outcome = await handle.wait()
    assert outcome.status == "completed"
    assert outcome.result == "late"


async def test_runtime_start_is_a_checkpoint(workspace: Path) -> None:
    async with open_runtime(scenario=_QUICK, workspace=workspace, trace=False) as rt:
        with assert_checkpoints():
            handle = await rt.start("go")
        await handle.wait()


async def test_a_cancelled_runtime_start_starts_no_agent(workspace: Path) -> None:
    log = EventLog()
    async with open_runtime(scenario=_QUICK, workspace=workspace, trace=False,
                            on_event=log) as rt:
        with _cancelled_scope() as scope:
            await rt.start("go")
        assert scope.cancelled_caught
        handle = await rt.start("again")
        await handle.wait()
    started = [e for e in log if isinstance(e, AgentStarted)]
    assert [e.agent_id for e in started] == [handle.agent_id]
    assert [e.prompt for e in started] == ["again"]


async def test_runtime_cancel_is_a_checkpoint(workspace: Path) -> None:
    async with open_runtime(scenario=_QUICK, workspace=workspace, trace=False) as rt:
        with assert_checkpoints():
            assert not await rt.cancel("no-such-node")


async def test_a_runtime_cancel_cancelled_before_it_starts_cancels_nothing(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    log = EventLog()
    async with open_runtime(scenario=_SLOW, workspace=workspace, trace=False,
                            on_event=log) as rt:
        handle = await rt.start("go")
        with _cancelled_scope():
            await rt.cancel(handle.agent_id, "never asked")
        outcome = await handle.wait()
    assert outcome.status == "completed"
    assert not [e for e in log if isinstance(e, CancelRequested)]


async def test_a_cancelled_runtime_run_cancels_its_agent_which_reports_it(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    log = EventLog()
    async with open_runtime(scenario=_SLOW, workspace=workspace, trace=False,
                            on_event=log) as rt:
        with trio.move_on_after(5) as scope:
            await rt.run("go")
        assert scope.cancelled_caught
    finished = [e for e in log if isinstance(e, AgentFinished)]
    assert [e.status for e in finished] == ["cancelled"]


async def test_a_cancelled_runtime_compact_ends_cancelled_and_keeps_the_conversation(
    workspace: Path, autojump_clock: trio.testing.MockClock
) -> None:
    history = [Message(role=role, content=(TextBlock(text=f"{role} {i} " * 50),))
               for i in range(10) for role in ("user", "assistant")]
    before = list(history)
    log = EventLog()
    scenario = {"agents": {"main": {"turns": []},
                           "compact": {"turns": [{"text": "summary", "delay_s": 100}]}}}
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False,
                            on_event=log) as rt:
        with trio.move_on_after(5) as scope:
            await rt.compact(history)
        assert scope.cancelled_caught
    assert history == before
    assert [e.status for e in log if isinstance(e, AgentFinished)] == ["cancelled"]


# -- runtime.ScriptedProvider.stream -----------------------------------------------------------
def _request() -> ModelRequest:
    return ModelRequest(model="m", system="sys",
                        messages=[Message(role="user", content=(TextBlock(text="go"),))],
                        tools=[], agent_type="main", agent_id="agent-1")


async def test_scripted_stream_with_a_chunk_delay_is_a_checkpoint_at_every_delta() -> None:
    turn = {"text": "one two three", "thinking": "hm ok", "chunk_delay_s": 0.001,
            "tool_calls": [{"name": "bash", "input": {"command": "true"}}] * 2}
    provider = ScriptedProvider(Scenario.from_obj({"agents": {"main": {"turns": [turn]}}}))
    kinds: list[str] = []
    async with aclosing(provider.stream(_request())) as stream:
        # Each delta is reached through a checkpoint, and so is the first item after the last
        # delta; the tool calls and the end then follow together, as the model sent them.
        for _ in range(6):
            with assert_checkpoints():
                kinds.append(type(await stream.__anext__()).__name__)
        kinds.extend([type(item).__name__ async for item in stream])
    assert kinds == ["ThinkingChunk"] * 2 + ["TextChunk"] * 3 + ["ToolCall"] * 2 + ["TurnEnd"]


async def test_scripted_stream_without_delays_checkpoints_at_its_start_and_every_so_often() -> None:
    from runtime.providers._scripted import CHECKPOINT_EVERY

    words = " ".join(f"w{i}" for i in range(CHECKPOINT_EVERY + 1))
    provider = ScriptedProvider(
        Scenario.from_obj({"agents": {"main": {"turns": [{"text": words}]}}})
    )
    async with aclosing(provider.stream(_request())) as stream:
        with assert_checkpoints():
            await stream.__anext__()  # the turn's start
        for _ in range(CHECKPOINT_EVERY - 1):  # then back to back, as a fast network gives them
            with assert_no_checkpoints():
                await stream.__anext__()
        with assert_checkpoints():
            await stream.__anext__()  # after every CHECKPOINT_EVERY-th delta
        assert [type(item).__name__ async for item in stream] == ["TurnEnd"]


async def test_a_scripted_stream_is_cancelled_during_its_delay(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider(Scenario.from_obj(
        {"agents": {"main": {"turns": [{"text": "late", "delay_s": 100}]}}}))
    got: list[Any] = []
    with trio.move_on_after(5):
        async with aclosing(provider.stream(_request())) as stream:
            got.extend([item async for item in stream])
    assert got == []
    assert trio.current_time() == 5


# -- runtime.follow_lines ----------------------------------------------------------------------
async def test_follow_lines_each_batch_is_a_checkpoint_and_leaving_closes_the_file(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"a\nb\n")
    fds_before = set(os.listdir("/proc/self/fd"))
    async with follow_lines(path, poll_s=1) as batches:
        with assert_checkpoints():
            assert await batches.receive() == [(1, b"a\n"), (2, b"b\n")]
        path.write_bytes(b"a\nb\nc\n")
        with assert_checkpoints():
            assert await batches.receive() == [(3, b"c\n")]
        with trio.move_on_after(10):  # cancelled while polling: nothing new arrives
            await batches.receive()
    assert set(os.listdir("/proc/self/fd")) <= fds_before


# -- runtime.providers.open_provider -----------------------------------------------------------
async def test_open_provider_entering_does_no_io_and_a_cancelled_exit_closes_the_pool() -> None:
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    with _cancelled_scope():
        async with AsyncExitStack() as stack:
            with assert_no_checkpoints():
                provider = await stack.enter_async_context(open_provider("openai", env=env))
    assert provider.client.is_closed  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["openai", "anthropic"])
async def test_open_provider_closes_the_pool_when_its_block_is_cancelled(name: str) -> None:
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
           "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}
    with _cancelled_scope() as scope:
        async with open_provider(name, env=env) as provider:
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert provider.client.is_closed  # type: ignore[attr-defined]


# -- tools: ReadTool, WriteTool, EditTool ------------------------------------------------------
# Each runs its work in a worker thread; the thread body is held at its start (a wrapper around
# the real one) so the cancel lands while it runs, whatever the machine's speed.
def _hold_thread_body(
    monkeypatch: pytest.MonkeyPatch, module: Any, name: str
) -> tuple[threading.Event, threading.Event]:
    entered, release = threading.Event(), threading.Event()
    real = getattr(module, name)

    def held(*args: Any) -> Any:
        entered.set()
        release.wait(10)
        return real(*args)

    monkeypatch.setattr(module, name, held)
    return entered, release


async def _cancel_while_in_thread(
    tool: Tool, args: dict[str, Any], workspace: Path, entered: threading.Event,
    release: threading.Event,
) -> tuple[bool, trio.Event]:
    """Cancel *tool*'s call once its thread runs; return whether the call had ended before the
    thread was released, and an event set when it ends."""
    scope = trio.CancelScope()
    ended = trio.Event()

    async def caller() -> None:
        with scope:
            await call(tool, args, make_ctx(workspace))
        ended.set()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(caller)
            await trio.to_thread.run_sync(entered.wait, 10)
            scope.cancel(reason="test")
            await trio.testing.wait_all_tasks_blocked()
            ended_before_release = ended.is_set()
            release.set()
    return ended_before_release, ended


async def test_a_cancelled_read_returns_at_once_leaving_its_thread(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (workspace / "f.txt").write_text("a\n")
    entered, release = _hold_thread_body(monkeypatch, _read_mod, "_read")
    ended_first, _ = await _cancel_while_in_thread(
        ReadTool(), {"path": "f.txt"}, workspace, entered, release)
    assert ended_first, "the read was abandoned, not waited for"


@pytest.mark.parametrize("tool", ["write", "edit"])
async def test_a_cancelled_write_or_edit_waits_for_its_thread_and_the_file_is_whole(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    target = workspace / "f.txt"
    target.write_text("old\n")
    if tool == "write":
        entered, release = _hold_thread_body(monkeypatch, _write_mod, "_write")
        called: Tool = WriteTool()
        args = {"path": "f.txt", "content": "new\n"}
    else:
        entered, release = _hold_thread_body(monkeypatch, _edit_mod, "_edit")
        called, args = EditTool(), {"path": "f.txt", "old": "old", "new": "new"}
    ended_first, ended = await _cancel_while_in_thread(called, args, workspace, entered, release)
    assert not ended_first, "the cancelled call must wait for its thread"
    assert ended.is_set()
    assert target.read_text() == "new\n", "the change went through whole"


# -- tools.SkillTool ---------------------------------------------------------------------------
async def test_the_skill_tool_is_a_checkpoint(workspace: Path, tmp_path: Path) -> None:
    from runtime.project import load_project

    folder = workspace / ".claude" / "skills" / "pdf"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\ndescription: Fill PDF forms\n---\n# PDF\n")
    (folder / "forms.md").write_text("Form fields.")
    (tmp_path / "config").mkdir()
    tool = SkillTool(load_project(workspace, env={"XDG_CONFIG_HOME": str(tmp_path / "config")})
                     .skills)
    for args in ({"name": "pdf"}, {"name": "pdf", "file": "forms.md"}):
        with assert_checkpoints():
            await call(tool, args, make_ctx(workspace))
        with _cancelled_scope() as scope:  # cancelled: nothing read, nothing to undo
            await call(tool, args, make_ctx(workspace))
        assert scope.cancelled_caught
