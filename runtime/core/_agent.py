"""What an agent is given and what it leaves: :class:`AgentSpec` and :class:`AgentOutcome`.

A cancel's reason is data (:attr:`AgentOutcome.cancel_reason`, ``SubtreeCancelled.reason``);
:func:`cancelled_text` is the one place that makes the ``cancelled: <reason>`` text the model
reads and the ``*_finished`` events carry (docs/events.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from ._agent_types import AgentType
from ._events import AgentStarted, AgentStatus, CancelBy
from ._limits import Budget
from ._messages import AgentState, Message
from ._worktree import Worktree

__all__ = ["AgentOutcome", "AgentSpec", "cancel_reason_of", "cancelled_text", "stopped_text"]

_CANCELLED = "cancelled: "
_STOPPED = "stopped: "


def cancelled_text(reason: str | None) -> str:
    """What a cancelled node's result says: ``cancelled: <reason>`` (the model reads it as a
    tool result; ``tool_finished.output`` and ``agent_finished.error`` carry it)."""
    return f"{_CANCELLED}{reason or 'cancelled'}"


def stopped_text(reason: str | None) -> str:
    """What a stopped agent's ``agent_finished.error`` says: ``stopped: <reason>``
    (docs/collaboration.md#stop)."""
    return f"{_STOPPED}{reason or 'stopped'}"


def cancel_reason_of(text: str) -> str:
    """The reason in a :func:`cancelled_text` read back from a trace, which keeps only the
    text (a replay re-enacts the cancel with it)."""
    return text.removeprefix(_CANCELLED)


@attrs.frozen(kw_only=True)
class AgentOutcome:
    """How an agent ended: its actor's exit, as its supervisor reports it.

    What :meth:`~runtime.AgentHandle.wait` returns and what a parent's ``agent`` tool call turns
    into its result.

    Attributes:
        state: the agent's whole state at the end (history, totals); valid for another turn.
        error: why it did not complete, as ``agent_finished.error`` says it; for a cancelled
            agent, :func:`cancelled_text` of :attr:`cancel_reason`.
        undelivered: messages sent to the agent that it ended before taking (a chat makes
            them the next message).
        cancel_reason: set when a cancel ended the agent (status ``cancelled``, or
            ``budget_exceeded`` when a budget cancelled it): the cancel's reason, its own or
            its nearest cancelled ancestor's.
        cancelled_by: who asked for that cancel.
        output: for an agent type with an ``output_type``, the value its final answer held
            (an instance of the type, or the decoded JSON of a schema); ``None`` otherwise
            (docs/python-api.md, "Typed outputs").
        worktree: for an agent of an ``isolation = "worktree"`` type, its worktree: kept or
            removed, and why (docs/worktrees.md).
    """

    agent_id: str
    name: str
    status: AgentStatus
    result: str | None
    error: str | None
    turns: int
    input_tokens: int
    output_tokens: int
    duration_s: float
    state: AgentState
    undelivered: tuple[str, ...] = ()
    cancel_reason: str | None = None
    cancelled_by: CancelBy | None = None
    output: Any = None
    cost_usd: float | None = 0.0
    """What the agent's own model calls cost in US dollars; None: one had no price
    (docs/costs.md)."""
    worktree: Worktree | None = None


@attrs.frozen(kw_only=True)
class AgentSpec:
    """Everything needed to start one agent."""

    agent_id: str
    agent_type: AgentType
    prompt: str
    depth: int
    parent_tool_use_id: str | None = None
    parent_agent_id: str | None = None
    history: tuple[Message, ...] = ()
    budget: Budget | None = None
    compact: str | None = None
    """Set: the agent only compacts *history* (focused on this text, if any), then ends
    (:meth:`~runtime.Runtime.compact`)."""
    background: bool = False
    """Started with ``run_in_background``: its parent does not wait for it; it runs in the
    parent agent's nursery and reports to its mailbox (docs/collaboration.md)."""
    description: str = ""
    """The ``description`` of the ``agent`` call that started it."""
    workspace: Path | None = None
    """Where its file tools and commands work, when not the run's workspace: the git worktree
    of an isolated agent, inherited by its sub-agents (docs/worktrees.md)."""

    @property
    def parent_node(self) -> str | None:
        """The registry node it hangs under: its ``agent`` call's, or for a background agent
        (whose call has ended) its parent agent's, so a cancel or stop of the parent still
        reaches it (docs/collaboration.md#background-sub-agents). A Ray host registers the
        same id as the subtree's boundary (docs/cluster.md)."""
        return self.parent_agent_id if self.background else self.parent_tool_use_id


def started_event(spec: AgentSpec) -> AgentStarted:
    """The ``agent_started`` of the agent *spec* describes: the one way it is built, by the
    loop, by the Ray placement for a subtree no host took, and by a host for a root it could
    not start."""
    return AgentStarted(
        agent_id=spec.agent_id,
        parent_tool_use_id=spec.parent_tool_use_id,
        name=spec.agent_type.name,
        parent_agent_id=spec.parent_agent_id,
        depth=spec.depth,
        prompt=spec.prompt,
        background=spec.background,
    )
