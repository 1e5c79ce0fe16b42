"""What an agent is given and what it leaves: :class:`AgentSpec` and :class:`AgentOutcome`."""

from __future__ import annotations

import attrs

from ._agent_types import AgentType
from ._events import AgentStatus
from ._limits import Budget
from ._messages import AgentState, Message

__all__ = ["AgentOutcome", "AgentSpec"]


@attrs.frozen(kw_only=True)
class AgentOutcome:
    """How an agent ended: its actor's exit, as its supervisor reports it.

    What :meth:`~runtime.AgentHandle.wait` returns and what a parent's ``agent`` tool call turns
    into its result.

    Attributes:
        state: the agent's whole state at the end (history, totals); valid for another turn.
        undelivered: messages sent to the agent that it ended before taking (a chat makes
            them the next message).
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
