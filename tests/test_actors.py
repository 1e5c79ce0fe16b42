"""Actor primitives: spawn, mailbox, supervision, registry, subtree cancel."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import trio
import trio.testing

from runtime.actors import (
    ActorContext,
    ActorHandle,
    Mailbox,
    Registry,
    run_actor,
    start_actor,
    start_actor_soon,
)


async def _sleeper(ctx: ActorContext[Any]) -> str:
    await trio.sleep_forever()
    return "never"  # pragma: no cover


async def test_an_actor_returns_its_value_through_its_handle() -> None:
    async def work(ctx: ActorContext[Any]) -> int:
        return 42

    async with trio.open_nursery() as nursery:
        handle = await start_actor(nursery, work, actor_id="a")
        exit_ = await handle.wait()
    assert (exit_.kind, exit_.value, exit_.actor_id) == ("returned", 42, "a")


async def test_a_failing_actor_becomes_a_message_and_its_siblings_keep_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def boom(ctx: ActorContext[Any]) -> None:
        raise RuntimeError("bug")

    finished = []

    async def steady(ctx: ActorContext[Any]) -> None:
        await trio.sleep(1)
        finished.append(ctx.actor_id)

    async with trio.open_nursery() as nursery:
        s1 = await start_actor(nursery, steady, actor_id="s1")
        bad = await start_actor(nursery, boom, actor_id="bad")
        s2 = start_actor_soon(nursery, steady, actor_id="s2")
        exit_ = await bad.wait()
        assert not s1.done
        assert not s2.done
    # The supervisor (here, the task that owned the nursery) reads every exit afterwards.
    assert exit_.kind == "failed"
    assert isinstance(exit_.error, RuntimeError)
    assert sorted(finished) == ["s1", "s2"]
    assert [(h.exit.actor_id, h.exit.kind) for h in (s1, s2) if h.exit] == [
        ("s1", "returned"),
        ("s2", "returned"),
    ]


async def test_an_actor_started_soon_is_registered_when_it_runs() -> None:
    registry = Registry()
    async with trio.open_nursery() as nursery:
        handle = start_actor_soon(nursery, _sleeper, actor_id="late", registry=registry)
        assert handle.node is None
        assert "late" not in registry
        await trio.testing.wait_all_tasks_blocked()
        assert handle.node is not None
        assert "late" in registry
        assert handle.cancel("enough")
    assert handle.exit is not None
    assert (handle.exit.kind, handle.exit.reason) == ("cancelled", "enough")
    assert "late" not in registry


async def test_the_registry_cancels_exactly_one_subtree() -> None:
    registry = Registry()
    outcomes: dict[str, str] = {}

    async def parent(ctx: ActorContext[Any]) -> None:
        async with trio.open_nursery() as nursery:
            for name in ("child-1", "child-2"):
                await start_actor(nursery, _sleeper, actor_id=name, registry=registry,
                                  parent_id=ctx.actor_id)

    async def record(handle_wait: Any, name: str) -> None:
        outcomes[name] = (await handle_wait()).kind

    async with trio.open_nursery() as nursery:
        p = await start_actor(nursery, parent, actor_id="parent", registry=registry)
        await trio.testing.wait_all_tasks_blocked()
        assert set(registry.ids()) == {"parent", "child-1", "child-2"}
        assert registry.cancel("child-1", "too slow", by="user")
        await trio.testing.wait_all_tasks_blocked()
        assert set(registry.ids()) == {"parent", "child-2"}
        assert not p.done
        assert registry.cancel("parent", "stop all")
    exit_ = await p.wait()
    assert exit_.kind == "cancelled"
    assert exit_.reason == "stop all"
    assert registry.ids() == []


async def test_cancelling_an_unknown_or_finished_node_returns_false() -> None:
    registry = Registry()
    assert not registry.cancel("nobody", "x")
    scope = trio.CancelScope()
    with registry.registered("n", scope):
        pass
    assert not registry.cancel("n", "x")
    assert not scope.cancel_called


def test_a_node_cancelled_from_above_learns_the_ancestor_reason() -> None:
    registry = Registry()
    registry.register("root", trio.CancelScope())
    registry.register("tool", trio.CancelScope(), parent_id="root")
    leaf = registry.register("leaf", trio.CancelScope(), parent_id="tool")
    assert Registry.cancel_reason(leaf) == (None, None)
    registry.cancel("root", "abort", by="user")
    assert Registry.cancel_reason(leaf) == ("abort", "user")


def test_the_registry_says_whether_any_stop_was_asked_and_a_stop_reaches_the_subtree() -> None:
    registry = Registry()
    registry.register("root", trio.CancelScope())
    leaf = registry.register("leaf", trio.CancelScope(), parent_id="root")
    assert not registry.stopping
    assert not registry.stop("unknown", "why")
    assert not registry.stopping  # a refused stop asks nothing
    assert registry.stop("root", "enough", by="user")
    assert registry.stopping
    assert Registry.stop_reason(leaf) == ("enough", "user")


def test_node_ids_are_unique_while_live() -> None:
    registry = Registry()
    registry.register("x", trio.CancelScope())
    with pytest.raises(ValueError, match="already live"):
        registry.register("x", trio.CancelScope())


async def test_commands_reach_the_actor_through_its_bounded_mailbox() -> None:
    got: list[str] = []

    async def listener(ctx: ActorContext[str]) -> None:
        for _ in range(3):
            got.append(await ctx.mailbox.receive())  # noqa: PERF401 - one await at a time

    async with trio.open_nursery() as nursery:
        handle = await start_actor(nursery, listener, actor_id="l", mailbox_size=2)
        for word in ("a", "b", "c"):
            await handle.send(word)
    assert got == ["a", "b", "c"]
    with pytest.raises(trio.ClosedResourceError):
        handle.send_nowait("late")


async def test_a_full_mailbox_refuses_send_nowait() -> None:
    box: Mailbox[int] = Mailbox(2)
    box.send_nowait(1)
    box.send_nowait(2)
    with pytest.raises(trio.WouldBlock):
        box.send_nowait(3)
    assert box.pending() == 2
    assert box.drain() == [1, 2]
    assert box.drain() == []


def test_a_mailbox_needs_room_for_one_command() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Mailbox(0)


async def test_the_handle_cancel_reports_whether_it_did_anything() -> None:
    async with trio.open_nursery() as nursery:
        handle = await start_actor(nursery, _sleeper, actor_id="z")
        assert handle.cancel("stop")
    assert (await handle.wait()).kind == "cancelled"
    assert not handle.cancel("again")


async def test_an_actor_leaves_no_task_behind_when_it_returns() -> None:
    async def spawner(ctx: ActorContext[Any]) -> str:
        ctx.nursery.start_soon(trio.sleep_forever)
        return "done"

    with trio.fail_after(1):
        async with trio.open_nursery() as nursery:
            handle = await start_actor(nursery, spawner, actor_id="sp")
    assert (await handle.wait()).value == "done"


# -- run_actor: the actor in the calling task --------------------------------------------------


async def test_run_actor_runs_the_actor_in_the_calling_task_registered_while_it_runs() -> None:
    registry = Registry()
    seen: list[Any] = []

    async def work(ctx: ActorContext[Any]) -> str:
        seen.append((trio.lowlevel.current_task(), registry.ids(), ctx.scope.cancel_called))
        return "done"

    handle = ActorHandle.new("a", registry=registry)
    await run_actor(handle, work, parent_id=None)
    assert seen == [(trio.lowlevel.current_task(), ["a"], False)]
    assert handle.exit is not None
    assert (handle.exit.kind, handle.exit.value) == ("returned", "done")
    assert handle.done
    assert registry.ids() == []


async def test_run_actor_turns_a_failure_into_the_exit_and_does_not_raise() -> None:
    async def boom(ctx: ActorContext[Any]) -> None:
        raise RuntimeError("bug")

    handle = ActorHandle.new("a")
    await run_actor(handle, boom)
    assert handle.exit is not None
    assert handle.exit.kind == "failed"
    assert isinstance(handle.exit.error, RuntimeError)


async def test_run_actor_cancelled_through_the_registry_ends_cancelled_with_the_reason() -> None:
    registry = Registry()
    handle = ActorHandle.new("a", registry=registry)
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(run_actor, handle, _sleeper))
        assert registry.cancel("a", "stop it", by="user")
    assert handle.exit is not None
    assert (handle.exit.kind, handle.exit.reason) == ("cancelled", "stop it")
    assert registry.ids() == []


async def test_run_actor_is_cancelled_with_its_caller_and_the_cancel_propagates() -> None:
    handle = ActorHandle.new("a")
    with trio.CancelScope() as outer:
        outer.cancel()
        await run_actor(handle, _sleeper)
    assert outer.cancelled_caught
    assert handle.exit is not None
    assert handle.exit.kind == "cancelled"


async def test_a_cancel_or_deadline_given_before_the_actor_ran_carries_over(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        cancelled = start_actor_soon(nursery, _sleeper, actor_id="c")
        assert cancelled.cancel("early")
        timed = start_actor_soon(nursery, _sleeper, actor_id="t")
        timed.scope.deadline = trio.current_time() + 5
    assert cancelled.exit is not None
    assert cancelled.exit.kind == "cancelled"
    assert timed.exit is not None
    assert timed.exit.kind == "cancelled"
    assert trio.current_time() == 5


# -- run_actor(nursery=False): an actor that starts no tasks -----------------------------------


async def test_an_actor_without_a_nursery_runs_in_its_handles_scope_registered_while_it_runs(
) -> None:
    registry = Registry()
    seen: list[Any] = []
    handle = ActorHandle.new("a", registry=registry)

    async def work(ctx: ActorContext[Any]) -> str:
        seen.append((ctx.nursery, ctx.scope is handle.scope, registry.ids(),
                     trio.lowlevel.current_task()))
        return "done"

    await run_actor(handle, work, nursery=False)
    assert seen == [(None, True, ["a"], trio.lowlevel.current_task())]
    assert handle.exit is not None
    assert (handle.exit.kind, handle.exit.value) == ("returned", "done")
    assert registry.ids() == []


async def test_an_actor_without_a_nursery_is_supervised_and_cancelled_like_any_actor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def boom(ctx: ActorContext[Any]) -> None:
        raise RuntimeError("bug")

    failed = ActorHandle.new("f")
    await run_actor(failed, boom, nursery=False)
    assert failed.exit is not None
    assert (failed.exit.kind, type(failed.exit.error)) == ("failed", RuntimeError)

    registry = Registry()
    by_id = ActorHandle.new("c", registry=registry)
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(run_actor, by_id, _sleeper, nursery=False))
        assert registry.cancel("c", "stop it", by="user")
    assert by_id.exit is not None
    assert (by_id.exit.kind, by_id.exit.reason) == ("cancelled", "stop it")

    early, timed = ActorHandle.new("e"), ActorHandle.new("t")
    assert early.cancel("early")
    timed.scope.deadline = trio.current_time() + 5
    await run_actor(early, _sleeper, nursery=False)
    await run_actor(timed, _sleeper, nursery=False)
    assert early.exit is not None
    assert early.exit.kind == "cancelled"
    assert timed.exit is not None
    assert timed.exit.kind == "cancelled"
    assert trio.current_time() == 5

    with trio.CancelScope() as outer:
        outer.cancel()
        await run_actor(ActorHandle.new("o"), _sleeper, nursery=False)
    assert outer.cancelled_caught
