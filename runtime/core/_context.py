"""What every agent of one run shares: :class:`RunContext`, built by :func:`new_run_context`.

:func:`cancel_node` is the one implementation of "cancel exactly this subtree", used by
:meth:`~runtime.Runtime.cancel`, budgets and the Ray host alike.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from runtime._logs import get_logger
from runtime.actors import Mailbox, Registry

from ._agent_types import AgentType, AgentTypes
from ._approvals import PermissionBroker
from ._budget import BudgetLayer
from ._bus import EventBus
from ._events import CancelBy, CancelRequested
from ._limits import Limits
from ._provider import Provider

if TYPE_CHECKING:
    from ._agent import AgentOutcome, AgentSpec
    from ._sandbox import Sandbox
    from ._secrets import Secrets
    from ._tool import Tool, ToolLimits

__all__ = ["Owner", "RunContext", "SubtreeRunner", "cancel_node", "new_run_context"]


@attrs.frozen
class Owner:
    """Who owns a registered node: the agent that emits its ``cancel_requested``."""

    agent_id: str
    parent_tool_use_id: str | None


class SubtreeRunner(Protocol):
    """Runs a sub-agent's whole subtree somewhere other than this process (a placement)."""

    async def run_subtree(self, run: RunContext, spec: AgentSpec) -> AgentOutcome:
        """Run *spec* to its end and return its outcome; its events go into ``run.bus``.

        Cancellation: cancels the remote subtree, whose ``cancelled`` events still arrive.
        """
        ...


class SystemPromptBuilder(Protocol):
    """Makes an agent's whole system prompt from its type and the names of its tools (the
    project's instructions, environment and skills around the type's own prompt; see
    ``runtime.project``). Sent to Ray hosts with the run's settings: it must pickle."""

    def __call__(self, agent_type: AgentType, tools: Sequence[str]) -> str: ...


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
    secrets: Secrets  # the bus's: the one object of the run
    broker: PermissionBroker
    budget: BudgetLayer
    log: Any = attrs.Factory(lambda: get_logger("trio_agents"))
    sandbox: Sandbox | None = None
    placements: dict[str, SubtreeRunner] = attrs.Factory(dict)
    # None: an agent's system prompt is its type's prompt alone.
    system_prompt: SystemPromptBuilder | None = None
    # Running agents' mailboxes, by agent id: where user messages for them go.
    mailboxes: dict[str, Mailbox[str]] = attrs.Factory(dict)
    # max_parallel bookkeeping: which sub-agents hold a slot of ``limiter``, and how many
    # children each agent is waiting for (an agent waiting for children gives its slot up).
    slot_holders: set[str] = attrs.Factory(set)
    active_children: dict[str, int] = attrs.Factory(dict)
    # Agents whose agent_started went through the bus and whose agent_finished has not: only
    # those can be cancelled by id (local or remote alike, since remote events pass the bus).
    announced: set[str] = attrs.Factory(set)
    # Per agent type (by id), what its agents get in this run: runtime/core/_loop.type_setup.
    type_setups: dict[int, Any] = attrs.Factory(dict)
    agents_reserved: int = 0
    agents_started: int = 0
    running_agents: int = 0
    peak_running_agents: int = 0
    _ids: itertools.count[int] = attrs.Factory(lambda: itertools.count(1))
    _limiter: trio.CapacityLimiter | None = None

    def new_agent_id(self) -> str:
        return f"agent-{next(self._ids)}"

    @property
    def limiter(self) -> trio.CapacityLimiter:
        """The run-wide ``max_parallel`` limiter, made when the first sub-agent needs a slot
        (a run without sub-agents never does; issue 20)."""
        if self._limiter is None:
            self._limiter = trio.CapacityLimiter(self.limits.max_parallel)
        return self._limiter

    def track_announced(self, event: Any) -> None:
        """A core hook of the bus keeping :attr:`announced` true."""
        kind = event.type
        if kind == "agent_started":
            self.announced.add(event.agent_id)
        elif kind == "agent_finished":
            self.announced.discard(event.agent_id)

    async def acquire_slot(self, agent_id: str) -> None:
        """Take a ``max_parallel`` slot for *agent_id* (waiting for one if none is free).

        Cancellation: checked first; a checkpoint only when it waits (a free slot is taken
        without a scheduler round: a fan-out takes a thousand of them at once).
        """
        if agent_id not in self.slot_holders:
            await trio.lowlevel.checkpoint_if_cancelled()
            try:
                self.limiter.acquire_on_behalf_of_nowait(agent_id)  # first come, first served
            except trio.WouldBlock:
                await self.limiter.acquire_on_behalf_of(agent_id)
            self.slot_holders.add(agent_id)

    def release_slot(self, agent_id: str) -> None:
        """Give *agent_id*'s slot back, if it holds one."""
        if agent_id in self.slot_holders:
            self.slot_holders.discard(agent_id)
            self.limiter.release_on_behalf_of(agent_id)

    def child_starting(self, parent_id: str) -> None:
        """*parent_id* is about to wait for a sub-agent: while it waits it is not running, so
        it lends its slot to its children. Without this, agents waiting for their own
        sub-agents can hold every slot and the run deadlocks."""
        count = self.active_children.get(parent_id, 0)
        self.active_children[parent_id] = count + 1
        if count == 0:
            self.release_slot(parent_id)

    def child_finished(self, parent_id: str) -> None:
        count = self.active_children.get(parent_id, 1) - 1
        if count <= 0:
            self.active_children.pop(parent_id, None)
        else:
            self.active_children[parent_id] = count


def cancel_node(run: RunContext, node_id: str, reason: str, *, by: CancelBy) -> bool:
    """Cancel exactly the subtree under *node_id* (an agent id or a tool_use_id) in *run*.

    Emits ``cancel_requested`` as the agent owning the node, then cancels the node's scope. Not
    async, and nothing in it yields: the node cannot finish between the lookup and the cancel,
    so ``cancel_requested`` always precedes the node's end, and a slow subscriber cannot stall
    it (the event is queued with :meth:`EventBus.emit_nowait`).

    Returns:
        ``False``, changing nothing, when the id is unknown, an agent not yet announced (no
        ``agent_started`` yet), or already finished or cancelled.
    """
    node = run.registry.get(node_id)
    if node is None or node.cancel_reason is not None:
        return False
    owner: Owner = node.data
    if owner.agent_id == node_id and node_id not in run.announced:
        return False
    run.bus.emit_nowait(
        CancelRequested(
            agent_id=owner.agent_id,
            parent_tool_use_id=owner.parent_tool_use_id,
            target=node_id,
            reason=reason,
            by=by,
        ),
    )
    return run.registry.cancel(node_id, reason, by=by)


def new_run_context(
    *,
    run_id: str,
    bus: EventBus,
    provider: Provider,
    model: str,
    agent_types: AgentTypes,
    tools: Mapping[str, Tool],
    tool_limits: ToolLimits,
    limits: Limits,
    workspace: Path,
    env: Mapping[str, str],
    secrets: Secrets,
    broker: PermissionBroker,
    log: Any,
    placements: dict[str, SubtreeRunner] | None = None,
    registry: Registry | None = None,
    context_class: type[RunContext] | None = None,
    budget: BudgetLayer | None = None,
    **extra: Any,
) -> RunContext:
    """The one way a run's :class:`RunContext` is built, locally and on a Ray host alike.

    Besides the given parts it makes the registry, the ``max_parallel`` limiter and the budget
    layer, whose cancels go through :func:`cancel_node`, and installs the run's core hooks on
    *bus* (budget accounting, then announcement tracking). The caller runs
    ``run.budget.run`` in a task of its own for as long as agents run (or has
    ``run.budget.serve_in(nursery)`` start it there once a budget is set).

    Args:
        registry: the node registry to use (default: a new one).
        context_class: a :class:`RunContext` subclass (the Ray host's prefixes agent ids);
            *extra* are its own fields.
        budget: a budget layer shared with other contexts (the Ray host keeps one per run
            for all its subtrees): installed on *bus* all the same, but its cancels and its
            task are the caller's.
    """
    run: RunContext | None = None

    def budget_cancel(agent_id: str, reason: str) -> bool:
        assert run is not None
        return cancel_node(run, agent_id, reason, by="budget")

    if budget is None:
        budget = BudgetLayer(budget_cancel)
    run = (context_class or RunContext)(
        run_id=run_id,
        bus=bus,
        registry=registry if registry is not None else Registry(),
        provider=provider,
        model=model,
        agent_types=agent_types,
        tools=tools,
        tool_limits=tool_limits,
        limits=limits,
        workspace=workspace,
        env=env,
        secrets=secrets,
        broker=broker,
        budget=budget,
        log=log,
        placements=placements or {},
        **extra,
    )
    bus.add_core_hook(budget)
    bus.add_core_hook(run.track_announced)
    return run
