"""Starting actors: an actor is a trio task with its own cancel scope, nursery and mailbox.

:func:`start_actor` starts one inside a nursery the caller owns, so actors form the same tree as
the tasks that run them, and cancelling an actor's scope cancels exactly its subtree.

Supervision: the task that starts an actor is its supervisor. An :class:`Exception` raised by an
actor never crashes its siblings or its parent's nursery; it is caught and becomes the actor's
:class:`ActorExit` (``failed``, with the error), which the supervisor reads from
:attr:`ActorHandle.exit` once the actor's nursery is done, or awaits with
:meth:`ActorHandle.wait`, and turns into whatever its domain needs (the agent loop: an
``agent_finished`` event with status ``failed``). What an actor returns is its exit value.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Literal, TypeVar

import attrs
import trio

from runtime._logs import get_logger

from ._mailbox import Mailbox
from ._registry import Node, Registry

CmdT = TypeVar("CmdT")

ExitKind = Literal["returned", "failed", "cancelled"]

_log = get_logger("trio_agents.actors")


@attrs.frozen(kw_only=True)
class ActorExit:
    """How an actor ended: the message a parent receives.

    Attributes:
        value: what the actor function returned (``returned`` only).
        error: the exception it raised (``failed`` only).
        reason: why it was cancelled (``cancelled`` only), when known.
    """

    actor_id: str
    kind: ExitKind
    value: Any = None
    error: BaseException | None = None
    reason: str | None = None


@attrs.define(eq=False)
class ActorHandle(Generic[CmdT]):
    """What the parent holds: cancel it, send it commands, wait for its exit."""

    actor_id: str
    scope: trio.CancelScope
    mailbox: Mailbox[CmdT]
    node: Node | None
    _registry: Registry | None
    _done: trio.Event = attrs.field(factory=trio.Event)
    _exit: ActorExit | None = None

    @classmethod
    def new(
        cls, actor_id: str, *, registry: Registry | None = None, mailbox_size: int = 16
    ) -> ActorHandle[Any]:
        """The handle of an actor not started yet, for :func:`run_actor`."""
        return _new_handle(actor_id, registry, mailbox_size)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def exit(self) -> ActorExit | None:
        """The exit message once the actor has finished."""
        return self._exit

    def cancel(self, reason: str, *, by: str | None = None) -> bool:
        """Cancel this actor's subtree. Returns ``False`` if it has already finished."""
        if self.done:
            return False
        if self._registry is not None and self.node is not None:
            return self._registry.cancel(self.actor_id, reason, by=by)
        self.scope.cancel(reason=reason)
        return True

    async def send(self, command: CmdT) -> None:
        """Send a command, waiting while the mailbox is full (see :meth:`Mailbox.send`)."""
        await self.mailbox.send(command)

    def send_nowait(self, command: CmdT) -> None:
        """Send a command now (see :meth:`Mailbox.send_nowait`)."""
        self.mailbox.send_nowait(command)

    async def wait(self) -> ActorExit:
        """Wait until the actor has finished and return how.

        Cancellation: a checkpoint; cancelling the wait does not cancel the actor.
        """
        await self._done.wait()
        assert self._exit is not None
        return self._exit


@attrs.frozen(kw_only=True)
class ActorContext(Generic[CmdT]):
    """What the actor function receives."""

    actor_id: str
    mailbox: Mailbox[CmdT]
    #: Where the actor starts tasks that end with it; ``None`` for an actor run with
    #: ``run_actor(..., nursery=False)``, which starts none.
    nursery: trio.Nursery | None
    scope: trio.CancelScope
    node: Node | None


ActorFn = Callable[[ActorContext[Any]], Awaitable[Any]]


async def start_actor(
    nursery: trio.Nursery,
    fn: ActorFn,
    *,
    actor_id: str,
    registry: Registry | None = None,
    parent_id: str | None = None,
    data: Any = None,
    mailbox_size: int = 16,
) -> ActorHandle[Any]:
    """Start ``fn(ctx)`` as an actor in *nursery* and return its handle once it runs.

    Args:
        registry: where the actor's node is registered (under *parent_id*) while it lives.

    Cancellation: a checkpoint; if cancelled before the actor started, nothing is left running.
    """
    handle = _new_handle(actor_id, registry, mailbox_size)
    await nursery.start(functools.partial(run_actor, handle, fn, parent_id=parent_id, data=data))
    return handle


def start_actor_soon(
    nursery: trio.Nursery,
    fn: ActorFn,
    *,
    actor_id: str,
    registry: Registry | None = None,
    parent_id: str | None = None,
    data: Any = None,
    mailbox_size: int = 16,
) -> ActorHandle[Any]:
    """Like :func:`start_actor`, but return at once, before the actor's task has run.

    For a caller that waits for the actor to end by leaving *nursery* and then reads
    :attr:`ActorHandle.exit`: it saves :meth:`trio.Nursery.start`'s hand-over — a temporary
    nursery and a round trip through the scheduler per actor — which matters when a turn starts
    a thousand sub-agents. The actor is registered (under *parent_id*) when its task starts;
    until then :attr:`ActorHandle.node` is ``None``.
    """
    handle = _new_handle(actor_id, registry, mailbox_size)
    nursery.start_soon(functools.partial(run_actor, handle, fn, parent_id=parent_id, data=data))
    return handle


async def run_actor(
    handle: ActorHandle[Any],
    fn: ActorFn,
    *,
    parent_id: str | None = None,
    data: Any = None,
    nursery: bool = True,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``fn(ctx)`` as the actor *handle* (from :meth:`ActorHandle.new`) in the calling task.

    For a task that exists only to run this actor (the runtime's task for a root agent, or for
    one of a turn's parallel ``agent`` calls): the actor gets its own cancel scope, nursery and
    mailbox, is registered (under *parent_id*) before *fn* runs and supervised as with
    :func:`start_actor` — an :class:`Exception` from *fn* becomes the ``failed`` exit — but
    without a second task, and without the nursery its supervisor would need to wait for one.
    When this returns or raises, :attr:`ActorHandle.exit` says how the actor ended. With
    ``nursery.start``, it reports started once the actor is registered and running.

    Args:
        nursery: ``False`` for an actor that starts no tasks of its own (``ctx.nursery`` is
            ``None``): its scope is then the handle's own cancel scope, with no nursery around
            it. That saves a nursery and the scheduler round that leaving one costs (an agent,
            whose tool calls open their own nurseries, is such an actor).

    Cancellation: the actor is cancelled with the calling task; its exit is ``cancelled`` and
    :class:`trio.Cancelled` propagates.
    """
    actor_id, mailbox = handle.actor_id, handle.mailbox
    registry = handle._registry
    node: Node | None = None
    exit_: ActorExit | None = None
    try:
        if not nursery:
            # The handle's scope is the actor's: a cancel or deadline given to it before the
            # actor ran applies as it stands.
            with handle.scope as scope:
                if registry is not None:
                    node = registry.register(actor_id, scope, parent_id=parent_id, data=data)
                handle.node = node
                ctx = ActorContext(
                    actor_id=actor_id, mailbox=mailbox, nursery=None, scope=scope, node=node
                )
                task_status.started()
                exit_ = await _supervised(actor_id, fn, ctx)
            return
        async with trio.open_nursery() as actor_nursery:
            # The actor's scope is its nursery's: one scope where there were two (a scope and
            # a nursery inside it), a measurable share of an agent's cost. A cancel or deadline
            # given to the handle before the actor ran carries over.
            scope = actor_nursery.cancel_scope
            early = handle.scope
            if early is not scope:
                if early.cancel_called:
                    scope.cancel(reason="cancelled before it started")
                scope.deadline = early.deadline
                handle.scope = scope
            del early  # not kept alive in this frame for the actor's whole life
            if registry is not None:
                node = registry.register(actor_id, scope, parent_id=parent_id, data=data)
            handle.node = node
            ctx = ActorContext(
                actor_id=actor_id,
                mailbox=mailbox,
                nursery=actor_nursery,
                scope=scope,
                node=node,
            )
            task_status.started()
            exit_ = await _supervised(actor_id, fn, ctx)
            if actor_nursery.child_tasks:  # what the actor left running ends with it
                scope.cancel(reason="actor finished")
    finally:
        mailbox.close()
        if node is not None and registry is not None:
            registry.unregister(actor_id)
        if exit_ is None:
            reason = (Registry.cancel_reason(node)[0] if node is not None else None) or "cancelled"
            exit_ = ActorExit(actor_id=actor_id, kind="cancelled", reason=reason)
        handle._exit = exit_
        handle._done.set()


async def _supervised(actor_id: str, fn: ActorFn, ctx: ActorContext[Any]) -> ActorExit:
    """Run the actor's function; what it returns or raises (an :class:`Exception`) is its exit.
    Cancellation propagates."""
    try:
        value = await fn(ctx)
    except Exception as exc:  # supervision: a failure is the exit, not a crash
        _log.debug("actor failed", actor_id=actor_id, error=repr(exc))
        return ActorExit(actor_id=actor_id, kind="failed", error=exc)
    return ActorExit(actor_id=actor_id, kind="returned", value=value)


def _new_handle(
    actor_id: str, registry: Registry | None, mailbox_size: int
) -> ActorHandle[Any]:
    return ActorHandle(actor_id, trio.CancelScope(), Mailbox(mailbox_size), None, registry)
