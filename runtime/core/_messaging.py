"""Messages between agents: who may message whom, and the delivery into a mailbox
(docs/collaboration.md#messages-between-agents).

:class:`AgentDirectory` knows the running agents of a run as a family (each agent's parent and
the description it was started with) and the ones that finished while someone who may message
them still runs; :class:`Messenger` is what one tool call of the ``send_message`` tool uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import trio

from ._errors import ToolError
from ._events import AgentMessage

if TYPE_CHECKING:
    from ._agent import AgentSpec
    from ._context import RunContext

__all__ = ["MAX_MESSAGE_CHARS", "AgentDirectory", "Messenger"]

MAX_MESSAGE_CHARS = 8000
"""The longest message one agent may send another, in characters."""


@attrs.define(eq=False)
class _Member:
    agent_id: str
    parent_id: str | None
    description: str
    name: str
    finished: str | None = None
    """Its status once it has ended."""
    children: list[str] = attrs.Factory(list)


class AgentDirectory:
    """The agents of one run as parents, children and siblings, for messages between them.

    An agent joins when it is announced and is marked finished when it ends; a finished agent
    is forgotten once its parent has ended too (nobody left may message it), so the directory
    holds the running agents and their direct children.
    """

    def __init__(self) -> None:
        self._members: dict[str, _Member] = {}

    def joined(self, spec: AgentSpec) -> None:
        """*spec*'s agent runs (its ``agent_started`` is out)."""
        self._members[spec.agent_id] = _Member(
            spec.agent_id, spec.parent_agent_id, spec.description, spec.agent_type.name
        )
        parent = self._members.get(spec.parent_agent_id or "")
        if parent is not None:
            parent.children.append(spec.agent_id)

    def left(self, agent_id: str, status: str) -> None:
        """*agent_id* has ended with *status*: its children are forgotten, and so is it
        unless its parent still runs."""
        member = self._members.get(agent_id)
        if member is None:
            return
        member.finished = status
        for child in member.children:
            self._members.pop(child, None)
        member.children.clear()
        parent = self._members.get(member.parent_id or "")
        if parent is None or parent.finished is not None:
            self._members.pop(agent_id, None)

    def get(self, agent_id: str) -> _Member | None:
        return self._members.get(agent_id)

    def reachable(self, agent_id: str) -> list[tuple[str, str]]:
        """Whom *agent_id* may message now, as ``(id, how it is related)``."""
        me = self._members.get(agent_id)
        if me is None:
            return []
        out: list[tuple[str, str]] = []
        parent = self._members.get(me.parent_id or "")
        if parent is not None and parent.finished is None:
            out.append((parent.agent_id, "parent"))
            out.extend(
                (s, "sibling")
                for s in parent.children
                if s != agent_id and self._running(s)
            )
        out.extend((c, "child") for c in me.children if self._running(c))
        return out

    def _running(self, agent_id: str) -> bool:
        member = self._members.get(agent_id)
        return member is not None and member.finished is None


class Messenger:
    """Sends messages for one agent (the ``send_message`` tool's :class:`ToolContext`)."""

    def __init__(self, run: RunContext, spec: AgentSpec) -> None:
        self._run = run
        self._spec = spec

    def describe(self, agent_id: str) -> str:
        member = self._run.directory.get(agent_id)
        if member is None or not member.description:
            return agent_id
        return f"{agent_id} ({member.description})"

    async def send(self, to: str, text: str) -> str:
        """Deliver *text* to the agent *to* names (``parent``, an agent id, or the description
        of one of this agent's sub-agents); what the model reads.

        Raises:
            ToolError: the recipient is unknown, this agent itself, not its parent, child or
                sibling, has finished, or its mailbox is full; or *text* is too long.

        Cancellation: a checkpoint only while the ``agent_message`` event is emitted; the
        message is delivered by then.
        """
        run, me = self._run, self._spec.agent_id
        if len(text) > MAX_MESSAGE_CHARS:
            raise ToolError(
                f"message of {len(text)} characters: at most {MAX_MESSAGE_CHARS}; send a "
                "shorter one (or write the rest to a file and name it)"
            )
        target = self._resolve(to)
        member = run.directory.get(target)
        assert member is not None  # _resolve found it
        if member.finished is not None:
            raise ToolError(
                f"{self.describe(target)} has finished ({member.finished}); it reads no more "
                "messages"
            )
        inbox = run.scheduler.inbox(target)
        if inbox is None:
            raise ToolError(f"{self.describe(target)} has finished; it reads no more messages")
        sender = self.describe(me)
        try:
            inbox.send_nowait(f"[message from {sender}]\n{text}")
        except trio.WouldBlock:
            raise ToolError(
                f"the mailbox of {self.describe(target)} is full "
                f"({run.settings.limits.mailbox_size} messages wait); try again later"
            ) from None
        except trio.ClosedResourceError:
            raise ToolError(
                f"{self.describe(target)} has finished; it reads no more messages"
            ) from None
        await run.bus.emit(
            AgentMessage(
                agent_id=me,
                parent_tool_use_id=self._spec.parent_tool_use_id,
                from_agent_id=me,
                to_agent_id=target,
                text=text,
            )
        )
        return f"Delivered to {self.describe(target)}; it reads it at its next step."

    def _resolve(self, to: str) -> str:
        run, me = self._run, self._spec.agent_id
        directory = run.directory
        related = dict(directory.reachable(me))
        mine = directory.get(me)
        if to == "parent":
            if self._spec.parent_agent_id is None:
                raise ToolError("you have no parent agent: you are the root of this run")
            target = self._spec.parent_agent_id
        elif to == me:
            raise ToolError("that is your own id: a message to yourself is refused")
        elif directory.get(to) is not None:
            target = to
        else:
            children = mine.children if mine is not None else []
            named = [c for c in children if (m := directory.get(c)) and m.description == to]
            if len(named) > 1:
                raise ToolError(
                    f"{len(named)} of your sub-agents have the description {to!r}: "
                    f"{', '.join(named)}; name one by its id"
                )
            if not named:
                raise ToolError(f"no agent {to!r} here; {self._whom(related)}")
            target = named[0]
        member = directory.get(target)
        if member is None:  # forgotten once finished, or known to another process (Ray)
            raise ToolError(f"{target} has finished or runs in another process: it cannot be "
                            "messaged from here")  # fmt: skip
        if target not in related and member.finished is None:
            raise ToolError(
                f"{self.describe(target)} is not your parent, child or sibling; "
                f"{self._whom(related)}"
            )
        return target

    def _whom(self, related: dict[str, str]) -> str:
        if not related:
            return "you can message nobody now (no parent, child or sibling is running)"
        names = ", ".join(
            f"parent ({self.describe(i)})" if how == "parent" else f"{self.describe(i)} ({how})"
            for i, how in related.items()
        )
        return f"you can message: {names}"
