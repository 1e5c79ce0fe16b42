"""Permission requests: a tool call that must ask waits on its own event; nothing else waits.

:class:`PermissionBroker` applies the :class:`~runtime.PermissionPolicy`; when the policy says
``ask`` it emits ``permission_requested`` (as the asking agent, so the request carries its
``parent_tool_use_id`` up to whoever watches the root stream) and waits — only that tool call —
for :meth:`PermissionBroker.resolve`. With nobody able to answer, or no answer in time, the call is
denied with a reason. Every request ends with one ``permission_resolved``.

What the user is asked about is the whole input (:attr:`PendingRequest.shown`: every field, as
JSON, control characters visible), never the one-line summary: a harmless first line followed by
``; echo … > hidden.txt`` must be seen to be approved. "Always" remembers the exact target of the
call (``bash(<the whole command>)``, see :meth:`PermissionPolicy.remember`), and answers the
requests already waiting that this rule covers, exactly those (docs/cli.md, "Permission prompts").
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Awaitable, Callable, Generator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from runtime._logs import get_logger

from ._events import PermissionRequested, PermissionResolved
from ._termtext import visible

if TYPE_CHECKING:
    from ._bus import EventBus
    from ._permissions import PermissionPolicy
    from ._tool import Tool


@attrs.define(eq=False)
class _Pending:
    tool: Tool
    args: Mapping[str, Any]
    tool_use_id: str
    agent_id: str
    summary: str = ""
    shown: Mapping[str, Any] = attrs.field(factory=dict)
    rule: str = ""
    done: trio.Event = attrs.Factory(trio.Event)
    granted: bool = False
    reason: str = ""
    workspace: Path | None = None
    """Where the asking agent works, when not the run's workspace (docs/worktrees.md)."""


@attrs.frozen(kw_only=True)
class PendingRequest:
    """A request waiting for an answer (for views and the control socket)."""

    request_id: str
    tool_use_id: str
    agent_id: str
    name: str
    summary: str = ""
    input: Mapping[str, Any] = attrs.field(factory=dict)
    """The call's whole input, secrets masked."""
    rule: str = ""
    """The rule answering "always" adds (``bash(<the whole command>)``), to show beside it."""

    @property
    def shown(self) -> str:
        """The whole input as the user is shown it: see :func:`show_input`."""
        return show_input(self.input)


def show_input(value: Mapping[str, Any]) -> str:
    """A tool input as a question shows it: every field, JSON (a newline in a command is
    ``\\n``, never a line break that hides what follows), indented, any other control character
    visible."""
    try:
        text = json.dumps(value, indent=2, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):  # a cycle or a key JSON cannot carry
        text = repr(value)
    return visible(text)


_log = get_logger("trio_agents.permissions")

NOBODY_TO_ASK = "nobody can answer permission requests (non-interactive)"


@attrs.frozen
class Asked:
    """A permission question as it is asked (for :attr:`PermissionBroker.notify`)."""

    tool: str
    summary: str
    agent_id: str
    parent_tool_use_id: str | None
    tool_use_id: str


class PermissionBroker:
    """Asks, waits and records answers for one run.

    A call denied only because of the mode (``deny``), or because nobody can answer in ``ask``
    mode, is a surprise to whoever wrote the tool: the first one of a run is logged as a
    warning (``permission.denied_by_mode``, with how to allow such calls), the rest are not,
    so a run of a thousand such calls says it once.

    Args:
        timeout_s: how long a request waits for an answer before it is denied.
    """

    def __init__(
        self, bus: EventBus, policy: PermissionPolicy, *, timeout_s: float = 300.0
    ) -> None:
        self.bus = bus
        self.policy = policy
        self.timeout_s = timeout_s
        self._answerers = 0
        self._pending: dict[str, _Pending] = {}
        self._ids = itertools.count(1)
        self._warned = False
        self.notify: Callable[[Asked], Awaitable[None]] | None = None
        """Told of each question as it is asked, while it waits (the ``Notification`` hooks:
        docs/hooks.md#events); the answer does not wait for it, it is cancelled then."""
        # A resumed run's recorded decisions, by tool_use_id (docs/resume.md).
        self._decided: dict[str, tuple[bool, str]] = {}

    def resume_from(self, decided: Mapping[str, tuple[bool, str]], next_request: int) -> None:
        """Answer the calls a resumed run's trace decided already (by tool_use_id: granted,
        reason) without asking again, and number new requests from *next_request* on, past the
        recorded ones (docs/resume.md)."""
        self._decided = dict(decided)
        self._ids = itertools.count(next_request)

    @property
    def can_ask(self) -> bool:
        """Whether anyone is there to answer a question."""
        return self._answerers > 0

    @contextmanager
    def answerer(self) -> Generator[None, None, None]:
        """Declare, for a ``with`` block, that someone (a terminal, a control client) answers."""
        self._answerers += 1
        try:
            yield
        finally:
            self._answerers -= 1

    def pending(self) -> list[PendingRequest]:
        """Requests waiting now, oldest first."""
        return [
            PendingRequest(
                request_id=rid,
                tool_use_id=p.tool_use_id,
                agent_id=p.agent_id,
                name=p.tool.name,
                summary=p.summary,
                input=p.shown,
                rule=p.rule,
            )
            for rid, p in self._pending.items()
        ]

    async def check(
        self,
        tool: Tool,
        args: Mapping[str, Any],
        *,
        agent_id: str,
        parent_tool_use_id: str | None,
        tool_use_id: str,
        summary: str,
        hook: Literal["allow", "ask"] | None = None,
        workspace: Path | None = None,
    ) -> tuple[bool, str]:
        """Decide whether this call may run, asking if the policy says so.

        Args:
            hook: what a ``PreToolUse`` hook decided (docs/hooks.md#decisions): ``allow``
                answers a question the policy would ask (a deny rule or mode still denies);
                ``ask`` asks even where the policy would allow.
            workspace: where the calling agent works, when not the run's workspace (see
                :meth:`PermissionPolicy.decide`).

        Returns:
            ``(granted, reason)``.

        Cancellation: a checkpoint while waiting for an answer; a cancelled wait is recorded
        as ``permission_resolved(granted=false, reason="cancelled")``.
        """
        if self._decided:
            recorded = self._decided.pop(tool_use_id, None)
            if recorded is not None:
                return recorded
        decision = self.policy.decide(tool, args, workspace=workspace)
        if decision.action == "ask" and hook == "allow":
            return True, "allowed by a PreToolUse hook"
        if decision.action == "allow" and hook != "ask":
            return True, decision.reason
        if decision.action == "deny":
            if decision.reason == "mode deny":
                self._warn_denied(tool.name, decision.reason)
            return False, decision.reason
        request_id = f"perm-{next(self._ids)}"
        await self.bus.emit(
            PermissionRequested(
                agent_id=agent_id,
                parent_tool_use_id=parent_tool_use_id,
                request_id=request_id,
                tool_use_id=tool_use_id,
                name=tool.name,
                summary=summary,
            ),
        )
        granted, reason = False, "cancelled"
        try:
            if not self.can_ask:
                granted, reason = False, NOBODY_TO_ASK
                self._warn_denied(tool.name, f"mode {self.policy.mode} and {reason}")
            else:
                shown = self.bus.secrets.value(dict(args))
                rule = self.bus.secrets.value(
                    self.policy.rule_for(tool, args, workspace=workspace)
                )
                pending = _Pending(
                    tool, args, tool_use_id, agent_id, summary, shown, rule, workspace=workspace
                )
                self._pending[request_id] = pending
                try:
                    with trio.move_on_after(self.timeout_s):
                        await self._wait(pending, Asked(tool.name, summary, agent_id,
                                                        parent_tool_use_id, tool_use_id))
                finally:
                    self._pending.pop(request_id, None)
                if pending.done.is_set():
                    granted, reason = pending.granted, pending.reason
                else:
                    granted, reason = False, f"no answer within {self.timeout_s:g} s"
        finally:
            # Every request ends with its answer on the stream, even when the call is cancelled.
            await self.bus.emit_final(
                PermissionResolved(
                    agent_id=agent_id,
                    parent_tool_use_id=parent_tool_use_id,
                    request_id=request_id,
                    tool_use_id=tool_use_id,
                    granted=granted,
                    reason=reason,
                ),
                grace_s=5,
            )
        return granted, reason

    async def _wait(self, pending: _Pending, asked: Asked) -> None:
        if self.notify is None:
            await pending.done.wait()
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.notify, asked)
            await pending.done.wait()
            nursery.cancel_scope.cancel(reason="the question was answered")

    def _warn_denied(self, tool: str, why: str) -> None:
        if self._warned:
            return
        self._warned = True
        _log.warning(
            "permission.denied_by_mode",
            tool=tool,
            reason=why,
            hint="this run denies every call that needs permission; allow them with "
            "permission_mode='allow-all' (or 'auto-edit' for file edits), or a rule such as "
            f"allow=['{tool}']",
        )

    def resolve(
        self, request_id: str, granted: bool, *, remember: bool = False, reason: str | None = None
    ) -> bool:
        """Answer a waiting request.

        Args:
            remember: also allow every later call like this one for the rest of the run.

        Returns:
            ``False`` if no such request is waiting (unknown, answered, timed out).
        """
        pending = self._pending.get(request_id)
        if pending is None or pending.done.is_set():
            return False
        pending.granted = granted
        if granted and remember:
            rule = self.policy.remember(pending.tool, pending.args, workspace=pending.workspace)
            pending.reason = reason or f"granted; remembered as {rule}"
            self._grant_covered(request_id, rule)
        else:
            pending.reason = reason or ("granted by user" if granted else "denied by user")
        pending.done.set()
        return True

    def _grant_covered(self, request_id: str, rule: str) -> None:
        # The requests already waiting that the remembered rule allows (the same exact target)
        # are answered with it; one that differs anywhere in its input keeps waiting.
        for rid, other in self._pending.items():
            if rid == request_id or other.done.is_set():
                continue
            if self.policy.decide(other.tool, other.args, workspace=other.workspace).action == (
                "allow"
            ):
                other.granted = True
                other.reason = f"granted: {rule} (always, from {request_id})"
                other.done.set()
