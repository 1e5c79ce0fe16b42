"""What every agent of one run shares (internal)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import structlog
import trio

from ._agent_types import AgentTypes
from ._approvals import PermissionBroker
from ._budget import BudgetLayer
from ._bus import EventBus
from ._limits import Limits
from ._provider import Provider
from .actors import Mailbox, Registry

if TYPE_CHECKING:
    from tools import Tool, ToolLimits

    from ._loop import AgentOutcome, AgentSpec


@attrs.frozen
class Owner:
    """Who owns a registered node: the agent that emits its ``cancel_requested``."""

    agent_id: str
    parent_tool_use_id: str | None


class SubtreeRunner(Protocol):
    """Runs a sub-agent's whole subtree somewhere other than this process (a placement)."""

    async def run_subtree(self, run: RunContext, spec: AgentSpec) -> AgentOutcome | None:
        """Run *spec* to its end and return its outcome; its events go into ``run.bus``.

        Cancellation: cancels the remote subtree, whose ``cancelled`` events still arrive.
        """
        ...


@attrs.define(eq=False, kw_only=True)
class RunContext:
    """The run-wide state agents read: one per :func:`~runtime.open_runtime`."""

    run_id: str
    bus: EventBus
    registry: Registry
    provider: Provider
    model: str
    agent_types: AgentTypes
    tools: Mapping[str, Tool]
    tool_limits: ToolLimits
    limits: Limits
    workspace: Path
    env: Mapping[str, str]
    secrets: tuple[str, ...]
    broker: PermissionBroker
    budget: BudgetLayer
    limiter: trio.CapacityLimiter
    log: Any = attrs.Factory(lambda: structlog.get_logger("trio_agents"))
    placements: dict[str, SubtreeRunner] = attrs.Factory(dict)
    # Running agents' mailboxes, by agent id: where user messages for them go.
    mailboxes: dict[str, Mailbox[str]] = attrs.Factory(dict)
    agents_started: int = 0
    running_agents: int = 0
    peak_running_agents: int = 0
    _ids: itertools.count[int] = attrs.Factory(lambda: itertools.count(1))

    def new_agent_id(self) -> str:
        return f"agent-{next(self._ids)}"
