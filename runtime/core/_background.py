"""Background sub-agents: the children an agent starts with ``run_in_background`` and does
not wait for (docs/collaboration.md#background-sub-agents).

They run in the nursery of their parent agent's actor (an agent that may start sub-agents has
one), so the task tree is still the agent tree: a cancel of the parent takes them with it, and
the parent cannot end before they have. Each one's end reaches the parent as a message in its
mailbox, read at its next step as any message is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from runtime.actors import Mailbox

from ._agent import AgentOutcome
from ._context import RunContext, cancel_node

__all__ = ["BackgroundChildren"]


class BackgroundChildren:
    """The background sub-agents of one agent, running in that agent's *nursery*; their
    reports go to its *mailbox*."""

    def __init__(self, run: RunContext, nursery: trio.Nursery, mailbox: Mailbox[str]) -> None:
        self._run = run
        self._nursery = nursery
        self._mailbox = mailbox
        # Agent id → the scope of its task: a child still waiting for a slot has no node of
        # its own to cancel yet.
        self._scopes: dict[str, trio.CancelScope] = {}
        self._changed = trio.Event()

    @property
    def running(self) -> int:
        """How many have not reported yet."""
        return len(self._scopes)

    def start(
        self,
        agent_id: str,
        run_child: Callable[[], Awaitable[AgentOutcome]],
        report: Callable[[AgentOutcome], str],
    ) -> None:
        """Run ``run_child()`` in the background; ``report(outcome)`` goes to the mailbox."""
        scope = self._scopes[agent_id] = trio.CancelScope()
        self._nursery.start_soon(self._run_one, agent_id, scope, run_child, report)

    async def _run_one(
        self,
        agent_id: str,
        scope: trio.CancelScope,
        run_child: Callable[[], Awaitable[AgentOutcome]],
        report: Callable[[AgentOutcome], str],
    ) -> None:
        try:
            with scope:
                outcome = await run_child()
                await self._tell(report(outcome))
        finally:
            # Counted as running until its report is queued: a parent that finds neither a
            # message nor a running child may end.
            self._scopes.pop(agent_id, None)
            self._changed.set()

    async def wait(self) -> None:
        """Wait until every one has ended (a stopped parent's children stop, then it ends).

        Cancellation: a checkpoint; the children are cancelled with the caller's scope.
        """
        while self._scopes:
            self._changed = trio.Event()
            await self._changed.wait()
        await trio.lowlevel.checkpoint()

    async def _tell(self, text: str) -> None:
        try:
            self._mailbox.send_nowait(text)
        except trio.WouldBlock:
            # The parent drains its whole mailbox at its next step: room comes soon. The
            # report is never dropped.
            await self._mailbox.send(text)
        except trio.ClosedResourceError:  # the parent's body has ended: nobody reads it
            pass

    def end(self, reason: str) -> None:
        """The parent's loop ended otherwise than by a stop (``max_turns``, a failed output):
        cancel the children still running, as the runtime (their reports come back unread).
        """
        for agent_id, scope in list(self._scopes.items()):
            if not cancel_node(self._run, agent_id, reason, by="runtime"):
                scope.cancel(reason=reason)  # not announced yet: it never starts
