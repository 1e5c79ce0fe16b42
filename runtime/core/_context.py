"""What every agent of one run shares: :class:`RunContext`, built by :func:`new_run_context`.

A run context is the run's services, its :class:`RunSettings` (immutable) and its
:class:`Scheduler` (the state that changes as agents start and end; docs/architecture.md).

:func:`cancel_node` is the one implementation of "cancel exactly this subtree", used by
:meth:`~runtime.Runtime.cancel`, budgets and the Ray host alike.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from runtime._logs import get_logger
from runtime.actors import Registry

from ._agent_types import AgentType, AgentTypes
from ._approvals import PermissionBroker
from ._budget import BudgetLayer
from ._bus import EventBus
from ._elicitation import ElicitationDesk
from ._events import CancelBy, CancelRequested, StopRequested
from ._limits import Limits
from ._prices import PriceTable
from ._provider import Provider

if TYPE_CHECKING:
    from ._agent import AgentOutcome, AgentSpec
    from ._hooks import HookRunner
    from ._loop import TypeSetup
    from ._messages import AgentState
    from ._messaging import AgentDirectory
    from ._middleware import MiddlewareChain
    from ._sandbox import Sandbox
    from ._secrets import Secrets
    from ._tool import Tool, ToolLimits
    from ._worktree import LiveWorktrees

__all__ = [
    "Inbox",
    "Owner",
    "RunContext",
    "RunSettings",
    "Scheduler",
    "SubtreeRunner",
    "cancel_node",
    "new_run_context",
    "stop_node",
]


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


class Inbox(Protocol):
    """Where a running agent's user messages go: its mailbox, or a remote agent's stand-in."""

    def send_nowait(self, value: str, /) -> None:
        """Queue *value*; raises :class:`trio.WouldBlock` when full, or
        :class:`trio.ClosedResourceError` once the agent has ended."""
        ...


@attrs.frozen(kw_only=True)
class RunSettings:
    """What a run was set up with, the same for all its agents and for as long as it runs."""

    run_id: str
    model: str
    limits: Limits
    tool_limits: ToolLimits
    workspace: Path
    env: Mapping[str, str]
    # None: an agent's system prompt is its type's prompt alone.
    system_prompt: SystemPromptBuilder | None = None
    prices: PriceTable = attrs.field(factory=PriceTable)
    """What each model's calls cost (docs/costs.md)."""


_OWN_ID_HEAD = "tu-"
_OWN_ID = re.compile(r"tu-\d+\.(?:s?\d+)")


class Cuttable(Protocol):
    """What cuts a streaming model reply short for a graceful stop (the agent loop's cut)."""

    def cancel(self, reason: str | None = None) -> None:
        """Cancel the reply streaming now."""
        ...


class Scheduler:
    """Which agents of a run exist and run, as the run's agents and placements change it.

    It gives out agent ids, keeps ``max_parallel`` (slots, and the slots lent by agents
    waiting for their children), knows which agents are announced (cancellable by id) and where
    their messages go, and counts agents against ``max_agents``. Nothing in it yields except
    :meth:`acquire_slot`.
    """

    def __init__(self, *, max_parallel: int, max_agents: int, id_prefix: str = "") -> None:
        self._max_parallel = max_parallel
        self._max_agents = max_agents
        # The Ray host prefixes its subtrees' ids with the call's, so that they are unique in
        # the whole run (docs/cluster.md).
        self._id_prefix = id_prefix
        self._ids = itertools.count(1)
        self._reused: dict[str | None, list[str]] | None = None
        self._limiter: trio.CapacityLimiter | None = None
        # Sub-agents holding a slot of the limiter, and how many children each agent waits for.
        self._slot_holders: set[str] = set()
        self._active_children: dict[str, int] = {}
        # Agents whose agent_started went through the bus and whose agent_finished has not:
        # only those can be cancelled by id (local or remote alike: remote events pass the bus).
        self._announced: set[str] = set()
        self._inboxes: dict[str, Inbox] = {}
        self._reserved = 0
        self.agents_started = 0
        """Agents started in this run (remote ones as their events arrive)."""
        self.running_agents = 0
        """Agents running now."""
        self.peak_running_agents = 0
        """The most agents that ran at once."""
        # Every tool_use_id the run's calls were given, and per reused id the last suffix: a
        # server that numbers calls per response (call_0 in every response) must not make two
        # nodes of the tree one (docs/events.md#tool-call-ids).
        self._tool_ids: set[str] = set()
        self._tool_id_reuse: dict[str, int] = {}
        # The agents streaming a model reply now, with what cuts that reply: a graceful stop
        # cuts a reply short, never a tool call (docs/collaboration.md#stop).
        self._streaming: dict[str, tuple[Any, Cuttable]] = {}

    def claim_tool_use_id(self, wanted: str) -> str:
        """*wanted* when no call of the run had it yet; else a run-unique id made from it
        (``call_0~2``, ``call_0~3``, …; an empty id becomes ``call~2``). The runtime's own
        ``tu-A.K`` ids are unique already and pass as they are."""
        if wanted.startswith(_OWN_ID_HEAD) and _OWN_ID.fullmatch(wanted):
            # tu-A.K, made by the runtime's own providers: unique by construction (agent A's
            # K-th call), and not kept, so a long-lived runtime's memory stays flat.
            return wanted
        ids = self._tool_ids
        if wanted and wanted not in ids:
            ids.add(wanted)
            return wanted
        base = wanted or "call"
        n = self._tool_id_reuse.get(base, 1)
        while True:
            n += 1
            candidate = f"{base}~{n}"
            if candidate not in ids:
                break
        self._tool_id_reuse[base] = n
        ids.add(candidate)
        return candidate

    def new_agent_id(self, parent_tool_use_id: str | None = None) -> str:
        """A new agent id, unique in the run (``agent-<n>``, after the prefix if any).

        Args:
            parent_tool_use_id: the call starting it (None for a root): in a resumed run,
                the k-th agent a recorded call (or the run) starts gets its recorded id
                again (:meth:`reuse_agent_ids`).
        """
        reused = self._reused
        if reused is not None:
            queue = reused.get(parent_tool_use_id)
            if queue:
                return queue.pop(0)
        return f"{self._id_prefix}agent-{next(self._ids)}"

    def reuse_agent_ids(self, recorded: Mapping[str | None, list[str]], next_number: int) -> None:
        """Give agents of a resumed run their recorded ids (docs/resume.md): *recorded* lists,
        per starting call (None: the run's roots), the ids its agents had, in start order;
        other agents are numbered from *next_number* on, past every recorded one."""
        self._reused = {key: list(ids) for key, ids in recorded.items()}
        self._ids = itertools.count(next_number)

    # -- max_parallel ---------------------------------------------------------------------
    def _the_limiter(self) -> trio.CapacityLimiter:
        # Made when the first sub-agent needs a slot: a run without sub-agents never does
        # (bench/README.md, "One small run, third pass").
        if self._limiter is None:
            self._limiter = trio.CapacityLimiter(self._max_parallel)
        return self._limiter

    @property
    def slots_held(self) -> int:
        """How many sub-agents hold a ``max_parallel`` slot now."""
        return len(self._slot_holders)

    def has_slot_or_lent_it(self, agent_id: str) -> bool:
        """Whether *agent_id* holds a slot, or lent it to children it is waiting for."""
        return agent_id in self._slot_holders or agent_id in self._active_children

    async def acquire_slot(self, agent_id: str) -> None:
        """Take a ``max_parallel`` slot for *agent_id* (waiting for one if none is free).

        Cancellation: checked first; a checkpoint only when it waits (a free slot is taken
        without a scheduler round: a fan-out takes a thousand of them at once).
        """
        if agent_id not in self._slot_holders:
            await trio.lowlevel.checkpoint_if_cancelled()
            limiter = self._the_limiter()
            try:
                limiter.acquire_on_behalf_of_nowait(agent_id)  # first come, first served
            except trio.WouldBlock:
                await limiter.acquire_on_behalf_of(agent_id)
            self._slot_holders.add(agent_id)

    def release_slot(self, agent_id: str) -> None:
        """Give *agent_id*'s slot back, if it holds one."""
        if agent_id in self._slot_holders:
            self._slot_holders.discard(agent_id)
            self._the_limiter().release_on_behalf_of(agent_id)

    def child_starting(self, parent_id: str) -> None:
        """*parent_id* is about to wait for a sub-agent: while it waits it is not running, so
        it lends its slot to its children. Without this, agents waiting for their own
        sub-agents can hold every slot and the run deadlocks."""
        count = self._active_children.get(parent_id, 0)
        self._active_children[parent_id] = count + 1
        if count == 0:
            self.release_slot(parent_id)

    def child_finished(self, parent_id: str) -> None:
        """One sub-agent *parent_id* waited for has ended (the parent takes a slot again at
        its next turn, :meth:`has_slot_or_lent_it`)."""
        count = self._active_children.get(parent_id, 1) - 1
        if count <= 0:
            self._active_children.pop(parent_id, None)
        else:
            self._active_children[parent_id] = count

    # -- announcements and messages --------------------------------------------------------
    def track_announced(self, event: Any) -> None:
        """A core hook of the bus keeping :meth:`is_announced` true."""
        kind = event.type
        if kind == "agent_started":
            self._announced.add(event.agent_id)
        elif kind == "agent_finished":
            self._announced.discard(event.agent_id)

    def is_announced(self, agent_id: str) -> bool:
        """Whether *agent_id*'s ``agent_started`` is out and its ``agent_finished`` is not."""
        return agent_id in self._announced

    def open_inbox(self, agent_id: str, inbox: Inbox) -> None:
        """Make *agent_id* reachable by messages (:meth:`~runtime.Runtime.send_message`)."""
        self._inboxes[agent_id] = inbox

    def close_inbox(self, agent_id: str, inbox: Inbox | None = None) -> None:
        """*agent_id* takes no more messages (given *inbox*: only if it is still that one)."""
        if inbox is None or self._inboxes.get(agent_id) is inbox:
            self._inboxes.pop(agent_id, None)

    def inbox(self, agent_id: str) -> Inbox | None:
        """Where *agent_id*'s messages go; ``None`` when it is unknown or has ended."""
        return self._inboxes.get(agent_id)

    # -- graceful stops ---------------------------------------------------------------------
    def streaming(self, agent_id: str, node: Any, cut: Cuttable) -> None:
        """*agent_id* (registered as *node*) streams a model reply now; a stop cancels *cut*."""
        self._streaming[agent_id] = (node, cut)

    def done_streaming(self, agent_id: str) -> None:
        """*agent_id*'s model reply has ended."""
        self._streaming.pop(agent_id, None)

    def interrupt_replies(self, under: Any) -> None:
        """Cut short every model reply streaming in the subtree of the registry node *under*."""
        for node, cut in list(self._streaming.values()):
            if Registry.is_under(node, under):
                cut.cancel(reason="stopped")

    # -- counts -----------------------------------------------------------------------------
    def reserve_agent(self) -> bool:
        """Count one more sub-agent against ``max_agents``; ``False`` when none is left."""
        if self._reserved >= self._max_agents:
            return False
        self._reserved += 1
        return True

    def agent_running(self) -> None:
        """An agent started running."""
        self.agents_started += 1
        self.running_agents += 1
        self.peak_running_agents = max(self.peak_running_agents, self.running_agents)

    def agent_stopped(self) -> None:
        """A running agent ended."""
        self.running_agents -= 1


@attrs.frozen(eq=False, kw_only=True)
class RunContext:
    """What every agent of one run shares: one per :func:`~runtime.open_runtime` (and one per
    subtree on a Ray host).

    Its own fields are the run's services: the bus (and through it the sinks), the node
    registry, the provider, the agent types and tools, the secrets, the permission broker, the
    budget layer, the log, the sandbox and the placements. :attr:`settings` is what the run
    was set up with (never changes); :attr:`scheduler` is the state that changes as agents
    start and end.
    """

    settings: RunSettings
    scheduler: Scheduler
    bus: EventBus
    registry: Registry
    provider: Provider
    agent_types: AgentTypes
    tools: Mapping[str, Tool]
    secrets: Secrets  # the bus's: the one object of the run
    broker: PermissionBroker
    budget: BudgetLayer
    log: Any = attrs.Factory(lambda: get_logger("trio_agents"))
    sandbox: Sandbox | None = None
    placements: Mapping[str, SubtreeRunner] = attrs.Factory(dict)
    # What each agent type gets in this run, by type (a frozen value), made on first use:
    # runtime/core/_loop.type_setup. A Ray host shares one for the run's subtrees.
    type_setups: dict[AgentType, TypeSetup] = attrs.Factory(dict)
    # The user's tool-call layers (their model-call layers wrap the provider itself).
    middleware: MiddlewareChain | None = None
    # The configured hooks (docs/hooks.md): None when there are none.
    hooks: HookRunner | None = None
    # The running agents as a family, for messages between them (docs/collaboration.md).
    directory: AgentDirectory = attrs.Factory(lambda: _new_directory())
    # Questions MCP servers ask the user, waiting like permission requests (docs/mcp.md).
    elicitations: ElicitationDesk = attrs.Factory(ElicitationDesk)
    # What a root agent's prompt becomes before it starts: the MCP resources it mentions as
    # ``@server:uri`` attached (docs/mcp.md, "Resources"); None: as given.
    expand_prompt: Callable[[str], Awaitable[str]] | None = None
    # The run's worktrees that exist now: MCP servers' roots beside the workspace (docs/mcp.md,
    # "Roots").
    worktrees: LiveWorktrees = attrs.Factory(lambda: _new_worktrees())
    # A resumed run's agents go on from their recorded turns (docs/resume.md): called with
    # each agent's spec and fresh state before it starts; None in a new run.
    restore: Callable[[AgentSpec, AgentState], None] | None = None


def _new_worktrees() -> LiveWorktrees:
    from ._worktree import LiveWorktrees

    return LiveWorktrees()


def _new_directory() -> AgentDirectory:
    from ._messaging import AgentDirectory

    return AgentDirectory()


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
    if owner.agent_id == node_id and not run.scheduler.is_announced(node_id):
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


def stop_node(run: RunContext, node_id: str, reason: str, *, by: CancelBy) -> bool:
    """Stop the subtree under *node_id* (an agent id or a tool_use_id) in *run*, gracefully.

    Emits ``stop_requested`` as the agent owning the node and marks the node: every agent in
    its subtree lets the tool calls under way finish, takes no new model turn (a reply being
    streamed is cut short) and ends ``stopped`` (docs/collaboration.md#stop). Nothing in it
    yields, as in :func:`cancel_node`.

    Returns:
        ``False``, changing nothing, when the id is unknown, an agent not yet announced,
        already finished, cancelled or stopping, or a node running on a Ray host (a stop
        reaches the agents of this process only).
    """
    node = run.registry.get(node_id)
    if node is None or not isinstance(node.scope, trio.CancelScope):
        return False
    if Registry.cancel_reason(node)[0] is not None or Registry.stop_reason(node)[0] is not None:
        return False
    owner: Owner = node.data
    if owner.agent_id == node_id and not run.scheduler.is_announced(node_id):
        return False
    run.bus.emit_nowait(
        StopRequested(
            agent_id=owner.agent_id,
            parent_tool_use_id=owner.parent_tool_use_id,
            target=node_id,
            reason=reason,
            by=by,
        ),
    )
    run.registry.stop(node_id, reason, by=by)
    run.scheduler.interrupt_replies(node)
    return True


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
    sandbox: Sandbox | None = None,
    placements: Mapping[str, SubtreeRunner] | None = None,
    system_prompt: SystemPromptBuilder | None = None,
    registry: Registry | None = None,
    budget: BudgetLayer | None = None,
    id_prefix: str = "",
    type_setups: dict[AgentType, TypeSetup] | None = None,
    middleware: MiddlewareChain | None = None,
    prices: PriceTable | None = None,
    hooks: HookRunner | None = None,
    expand_prompt: Callable[[str], Awaitable[str]] | None = None,
) -> RunContext:
    """The one way a run's :class:`RunContext` is built, locally and on a Ray host alike.

    Besides the given parts it makes the registry, the :class:`Scheduler` and the budget
    layer, whose cancels go through :func:`cancel_node`, and installs the run's core hooks on
    *bus* (budget accounting, then announcement tracking). The caller runs
    ``run.budget.run`` in a task of its own for as long as agents run (or has
    ``run.budget.serve_in(nursery)`` start it there once a budget is set).

    Args:
        registry: the node registry to use (default: a new one).
        budget: a budget layer shared with other contexts (the Ray host keeps one per run
            for all its subtrees): installed on *bus* all the same, but its cancels and its
            task are the caller's.
        id_prefix: what the new agent ids start with (the Ray host's: the call's).
        type_setups: the agent types' setups to share (the Ray host's: the run's).
        middleware: the user's layers around tool calls (docs/python-api.md, "Middleware").
        prices: what model calls cost (default: the built-in table, docs/costs.md).
        hooks: the configured hooks' runner (docs/hooks.md).
    """
    run: RunContext | None = None

    def budget_cancel(agent_id: str, reason: str) -> bool:
        assert run is not None
        return cancel_node(run, agent_id, reason, by="budget")

    if budget is None:
        budget = BudgetLayer(budget_cancel)
    scheduler = Scheduler(
        max_parallel=limits.max_parallel, max_agents=limits.max_agents, id_prefix=id_prefix
    )
    run = RunContext(
        settings=RunSettings(
            run_id=run_id,
            model=model,
            limits=limits,
            tool_limits=tool_limits,
            workspace=workspace,
            env=env,
            system_prompt=system_prompt,
            prices=prices if prices is not None else PriceTable(),
        ),
        scheduler=scheduler,
        bus=bus,
        registry=registry if registry is not None else Registry(),
        provider=provider,
        agent_types=agent_types,
        tools=tools,
        secrets=secrets,
        broker=broker,
        budget=budget,
        log=log,
        sandbox=sandbox,
        placements=placements or {},
        type_setups=type_setups if type_setups is not None else {},
        middleware=middleware or None,
        hooks=hooks,
        expand_prompt=expand_prompt,
    )
    bus.add_core_hook(budget)
    bus.add_core_hook(scheduler.track_announced)
    return run
