"""Starting actors: an actor is a trio task with its own cancel scope, nursery and mailbox.

:func:`start_actor` starts one inside a nursery the caller owns, so actors form the same tree as
the tasks that run them, and cancelling an actor's scope cancels exactly its subtree.

Supervision: an :class:`Exception` raised by an actor never crashes its siblings or its parent's
nursery; it is caught and becomes an :class:`ActorExit` message, delivered through
:meth:`ActorHandle.wait` and, if given, the parent's ``supervisor`` channel.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Literal, TypeVar

import attrs
import structlog
import trio

from ._mailbox import Mailbox
from ._registry import Node, Registry

CmdT = TypeVar("CmdT")

ExitKind = Literal["returned", "failed", "cancelled"]

_log = structlog.get_logger("trio_agents.actors")
# How long an actor may spend telling its supervisor it exited, when the run is being torn down.
_NOTIFY_GRACE_S = 5.0


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
    nursery: trio.Nursery
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
    supervisor: trio.MemorySendChannel[ActorExit] | None = None,
) -> ActorHandle[Any]:
    """Start ``fn(ctx)`` as an actor in *nursery* and return its handle once it runs.

    Args:
        registry: where the actor's node is registered (under *parent_id*) while it lives.
        supervisor: also receives the :class:`ActorExit` (sent with a bounded, shielded wait).

    Cancellation: a checkpoint; if cancelled before the actor started, nothing is left running.
    """
    handle: ActorHandle[Any] = await nursery.start(
        _run_actor, fn, actor_id, registry, parent_id, data, mailbox_size, supervisor
    )
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
    supervisor: trio.MemorySendChannel[ActorExit] | None = None,
) -> None:
    """Like :func:`start_actor`, but return at once, without a handle.

    For a caller that only waits for the actor to end (by leaving *nursery*): it saves
    :meth:`trio.Nursery.start`'s hand-over — a temporary nursery and a round trip through the
    scheduler per actor — which matters when a turn starts a thousand sub-agents. The actor is
    registered (under *parent_id*) when its task starts, exactly as with :func:`start_actor`.
    """
    nursery.start_soon(
        _run_actor, fn, actor_id, registry, parent_id, data, mailbox_size, supervisor
    )


async def _run_actor(
    fn: ActorFn,
    actor_id: str,
    registry: Registry | None,
    parent_id: str | None,
    data: Any,
    mailbox_size: int,
    supervisor: trio.MemorySendChannel[ActorExit] | None,
    *,
    task_status: trio.TaskStatus[ActorHandle[Any]] = trio.TASK_STATUS_IGNORED,
) -> None:
    scope = trio.CancelScope()
    mailbox: Mailbox[Any] = Mailbox(mailbox_size)
    node = (
        registry.register(actor_id, scope, parent_id=parent_id, data=data)
        if registry is not None
        else None
    )
    handle: ActorHandle[Any] = ActorHandle(actor_id, scope, mailbox, node, registry)
    exit_: ActorExit | None = None
    try:
        with scope:
            async with trio.open_nursery() as actor_nursery:
                ctx = ActorContext(
                    actor_id=actor_id,
                    mailbox=mailbox,
                    nursery=actor_nursery,
                    scope=scope,
                    node=node,
                )
                task_status.started(handle)
                try:
                    value = await fn(ctx)
                except Exception as exc:  # supervision: a failure is a message, not a crash
                    _log.warning("actor failed", actor_id=actor_id, error=repr(exc))
                    exit_ = ActorExit(actor_id=actor_id, kind="failed", error=exc)
                else:
                    exit_ = ActorExit(actor_id=actor_id, kind="returned", value=value)
                actor_nursery.cancel_scope.cancel(reason="actor finished")
    finally:
        mailbox.close()
        if registry is not None:
            registry.unregister(actor_id)
        if exit_ is None:
            reason = (Registry.cancel_reason(node)[0] if node is not None else None) or "cancelled"
            exit_ = ActorExit(actor_id=actor_id, kind="cancelled", reason=reason)
        handle._exit = exit_
        handle._done.set()
        if supervisor is not None:
            with trio.move_on_after(_NOTIFY_GRACE_S, shield=True):
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await supervisor.send(exit_)
