"""Questions an MCP server asks the user (docs/mcp.md, "Elicitation"), waiting like permissions.

:class:`ElicitationDesk` holds the questions waiting for an answer. A question is asked as the
agent whose tool call made the server ask (``elicitation_requested``, under that call), waits
only that call, and ends with one ``elicitation_resolved``: answered (``accept`` with the
content, ``decline``, ``cancel``) by a control-socket client or the Python API
(:meth:`ElicitationDesk.resolve`), declined at once when nobody can answer
(:meth:`ElicitationDesk.answerer`), cancelled when nobody answers in time or the call is cancelled.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from ._events import ElicitationRequested, ElicitationResolved

if TYPE_CHECKING:
    from ._bus import EventBus

__all__ = ["ElicitAction", "ElicitationDesk", "PendingElicitation"]

ElicitAction = Literal["accept", "decline", "cancel"]

NOBODY_TO_ANSWER = "nobody can answer questions (non-interactive)"


@attrs.frozen(kw_only=True)
class PendingElicitation:
    """A question waiting for an answer (for views and the control socket).

    Attributes:
        mode: ``form`` (answer with content matching :attr:`requested_schema`) or ``url``
            (the user opens :attr:`url`; the answer is only whether they did).
    """

    request_id: str
    tool_use_id: str
    agent_id: str
    server: str
    message: str
    mode: Literal["form", "url"]
    requested_schema: Mapping[str, Any] | None = None
    url: str | None = None


@attrs.define(eq=False)
class _Waiting:
    shown: PendingElicitation
    done: trio.Event = attrs.Factory(trio.Event)
    action: ElicitAction = "cancel"
    content: dict[str, Any] | None = None
    reason: str = ""


class ElicitationDesk:
    """The questions of one run waiting for the user."""

    def __init__(self) -> None:
        self._waiting: dict[str, _Waiting] = {}
        self._ids = itertools.count(1)
        self._answerers = 0

    @property
    def can_ask(self) -> bool:
        """Whether anyone answers questions (a control socket, a terminal that asks them)."""
        return self._answerers > 0

    @contextmanager
    def answerer(self) -> Generator[None, None, None]:
        """Declare, for a ``with`` block, that someone answers questions. Kept apart from the
        permission answerers: a terminal that answers permissions but not questions must not
        leave a server's question waiting for nobody."""
        self._answerers += 1
        try:
            yield
        finally:
            self._answerers -= 1

    def pending(self) -> list[PendingElicitation]:
        """Questions waiting now, oldest first."""
        return [w.shown for w in self._waiting.values()]

    async def ask(
        self,
        bus: EventBus,
        question: PendingElicitation,
        *,
        parent_tool_use_id: str | None,
        timeout_s: float,
    ) -> tuple[ElicitAction, dict[str, Any] | None, str]:
        """Ask *question* (its ``request_id`` is given here) and wait for the answer.

        Returns:
            ``(action, content, reason)``: content only with ``accept`` in form mode.

        Cancellation: a checkpoint while waiting; a cancelled wait ends ``cancel`` (its
        ``elicitation_resolved`` still goes out).
        """
        request_id = f"elicit-{next(self._ids)}"
        question = attrs.evolve(question, request_id=request_id)
        await bus.emit(
            ElicitationRequested(
                agent_id=question.agent_id,
                parent_tool_use_id=parent_tool_use_id,
                request_id=request_id,
                tool_use_id=question.tool_use_id,
                server=question.server,
                message=question.message,
                mode=question.mode,
                requested_schema=dict(question.requested_schema)
                if question.requested_schema is not None
                else None,
                url=question.url,
            )
        )
        action: ElicitAction = "cancel"
        content: dict[str, Any] | None = None
        reason = "cancelled"
        try:
            if not self.can_ask:
                action, reason = "decline", NOBODY_TO_ANSWER
            else:
                waiting = self._waiting[request_id] = _Waiting(question)
                try:
                    with trio.move_on_after(timeout_s):
                        await waiting.done.wait()
                finally:
                    self._waiting.pop(request_id, None)
                if waiting.done.is_set():
                    action, content, reason = waiting.action, waiting.content, waiting.reason
                else:
                    action, reason = "cancel", f"no answer within {timeout_s:g} s"
        finally:
            await bus.emit_final(
                ElicitationResolved(
                    agent_id=question.agent_id,
                    parent_tool_use_id=parent_tool_use_id,
                    request_id=request_id,
                    tool_use_id=question.tool_use_id,
                    action=action,
                    reason=reason,
                ),
                grace_s=5,
            )
        return action, content, reason

    def resolve(
        self,
        request_id: str,
        action: ElicitAction,
        content: Mapping[str, Any] | None = None,
        *,
        reason: str | None = None,
    ) -> bool:
        """Answer a waiting question.

        Returns:
            ``False`` if no such question is waiting (unknown, answered, timed out).

        Raises:
            ValueError: an ``accept`` whose content does not match the requested schema
                (one line naming the field); the question keeps waiting.
        """
        waiting = self._waiting.get(request_id)
        if waiting is None or waiting.done.is_set():
            return False
        schema = waiting.shown.requested_schema
        if action == "accept" and waiting.shown.mode == "form" and schema is not None:
            _check(content or {}, schema)
        waiting.action = action
        waiting.content = dict(content) if content is not None and action == "accept" else None
        waiting.reason = reason or f"{action} by user"
        waiting.done.set()
        return True


def _check(content: Mapping[str, Any], schema: Mapping[str, Any]) -> None:
    import jsonschema

    try:
        validator = jsonschema.validators.validator_for(schema)(schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(dict(content)))
    except jsonschema.exceptions.SchemaError as exc:
        raise ValueError(f"the server's schema cannot be checked: {exc.message}") from None
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "content"
        raise ValueError(f"{where}: {error.message}")
