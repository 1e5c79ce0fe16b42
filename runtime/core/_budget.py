"""Budgets as a layer that watches the stream and acts (not flags threaded through the loop).

:class:`BudgetLayer` is a core hook of the bus (never dropped): it keeps the agent tree (from
``agent_started``), adds each ``turn_finished``'s tokens (and a summary's, from
``context_compacted``, and an MCP sampling request's, from ``mcp_sampled``) and each
``tool_started`` to the agent and every ancestor, and when a
subtree with a budget goes over it, asks the runtime to cancel that subtree ``by="budget"``. The
cancel itself runs in the layer's own task, because a hook must not emit. Wall-clock budgets are
a deadline on the agent's cancel scope, set by the runtime when the agent starts.

Money (``usd``) is counted the same way, from ``turn_finished.cost_usd``, and also before a
call: the loop asks :meth:`BudgetLayer.reserve` for the call's estimated input cost, which is
held against every ancestor's allowance until the call has been settled by its
``turn_finished`` (:meth:`BudgetLayer.release`). A call that would take a subtree past its
allowance is refused, and no call in that subtree starts again; the calls under way in it
finish and are counted, and the last one's release cancels the subtree, from that agent's task
(docs/costs.md, "Budgets in money").
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import trio

from runtime._logs import get_logger

from ._events import (
    AgentFinished,
    AgentStarted,
    ContextCompacted,
    Event,
    McpSampled,
    TextDelta,
    ToolStarted,
    TurnFinished,
)
from ._limits import Budget

_log = get_logger("trio_agents.budget")


def _dollars(usd: float) -> str:
    """Dollars to the millionth, without trailing zeros (``0.0125``, ``2``)."""
    return f"{usd:.6f}".rstrip("0").rstrip(".")


class BudgetRefused(Exception):
    """A model call was refused: it would take the subtree of :attr:`agent_id` past its money
    allowance. That subtree has been cancelled ``by="budget"`` already.

    Attributes:
        agent_id: the root of the subtree whose allowance it is.
        reason: the cancel's reason (``budget exceeded: …``).
    """

    def __init__(self, agent_id: str, reason: str) -> None:
        super().__init__(reason)
        self.agent_id = agent_id
        self.reason = reason


# Reservations are sums of floats: "none left" is below a millionth of a cent.
_EPSILON = 1e-9

CancelFn = Callable[[str, str], bool]
_Queue = tuple[trio.MemorySendChannel[tuple[str, str]], trio.MemoryReceiveChannel[tuple[str, str]]]


@attrs.define(eq=False)
class _Usage:
    parent: str | None
    budget: Budget | None = None
    tokens: int = 0
    tool_calls: int = 0
    usd: float = 0.0
    reserved: float = 0.0
    # Set when a money allowance was reached: why, and no call in the subtree starts again.
    refusal: str | None = None
    tripped: bool = False


class BudgetLayer:
    """Tracks subtree usage and cancels subtrees that exceed their budget.

    Args:
        cancel: ``cancel(agent_id, reason)`` — cancels that subtree ``by="budget"`` (see
            :func:`~runtime.core._context.cancel_node`).
    """

    def __init__(self, cancel: CancelFn, *, queue_size: int = 1024) -> None:
        self._cancel = cancel
        self._agents: dict[str, _Usage] = {}
        self._pending: dict[str, Budget] = {}
        # A resumed agent's recorded usage, counted when it is announced (add_recorded).
        self._recorded: dict[str, tuple[int, int, float]] = {}
        self._queue_size = queue_size
        # Made when first needed: most runs set no token or tool-call budget, and then neither
        # the queue nor the task that carries out its cancels is needed
        # (bench/README.md, "Per-agent and per-run cost").
        self._channel: _Queue | None = None
        self._nursery: trio.Nursery | None = None
        self._serving = False
        # Nothing is counted before the first budget that can trip is set: only agents started
        # from then on can be in a budget's subtree (a budget is set as its agent starts), and
        # most runs set none, so the hook on every event returns at once
        # (bench/README.md, "One small run, fourth pass").
        self._counting = False
        # Whether some budget counts money: the loop asks before every call, and most runs
        # set none.
        self.counts_usd = False

    def _queue(self) -> _Queue:
        if self._channel is None:
            self._channel = trio.open_memory_channel(self._queue_size)
        return self._channel

    def serve_in(self, nursery: trio.Nursery) -> None:
        """Run :meth:`run` in *nursery* as soon as a budget that can trip is set (at once if
        one is set already); until then there is nothing for it to do and no task runs."""
        self._nursery = nursery
        if self._pending:
            self._serve()

    def _serve(self) -> None:
        if self._nursery is not None and not self._serving:
            self._serving = True
            self._nursery.start_soon(self.run)

    def set_budget(self, agent_id: str, budget: Budget | None) -> None:
        """Give *agent_id* (about to start) a token / tool-call / money allowance for its
        subtree."""
        if budget is not None and (
            budget.tokens is not None or budget.tool_calls is not None or budget.usd is not None
        ):
            self._pending[agent_id] = budget
            self._counting = True
            self.counts_usd = self.counts_usd or budget.usd is not None
            self._serve()

    def usage(self, agent_id: str) -> tuple[int, int]:
        """(tokens, tool calls) of *agent_id*'s subtree so far (counted for agents started
        once a budget was set in the run; before, there is nothing to count for)."""
        u = self._agents.get(agent_id)
        return (u.tokens, u.tool_calls) if u else (0, 0)

    def __call__(self, event: Event) -> None:
        """The hook."""
        if not self._counting or type(event) is TextDelta:  # TextDelta: nothing to count
            return
        if isinstance(event, AgentStarted):
            assert event.agent_id is not None
            self._agents[event.agent_id] = _Usage(
                parent=event.parent_agent_id, budget=self._pending.pop(event.agent_id, None)
            )
            if self._recorded:
                recorded = self._recorded.pop(event.agent_id, None)
                if recorded is not None:
                    self._add(event.agent_id, tokens=recorded[0], tool_calls=recorded[1],
                              usd=recorded[2])  # fmt: skip
        elif isinstance(event, TurnFinished):
            self._add(
                event.agent_id,
                tokens=event.input_tokens + event.output_tokens,
                usd=event.cost_usd or 0.0,  # unknown: a warning said so (docs/costs.md)
            )
        elif isinstance(event, ToolStarted):
            self._add(event.agent_id, tool_calls=1)
        elif isinstance(event, ContextCompacted) and (event.input_tokens or event.output_tokens):
            # A summary is a model call made for the agent: its tokens are the agent's.
            self._add(event.agent_id, tokens=event.input_tokens + event.output_tokens,
                      usd=event.cost_usd or 0.0)
        elif isinstance(event, McpSampled) and (event.input_tokens or event.output_tokens):
            # An MCP server's sampling request is answered with the agent's model, for it.
            self._add(event.agent_id, tokens=event.input_tokens + event.output_tokens)
        elif isinstance(event, AgentFinished) and event.agent_id is not None:
            # Every agent under it has finished already (docs/events.md#invariants) and its
            # usage was added to its ancestors as it came, so it can go: memory follows the live
            # agents.
            self._agents.pop(event.agent_id, None)
            self._pending.pop(event.agent_id, None)

    def add_recorded(
        self, agent_id: str, *, tokens: int, tool_calls: int, usd: float = 0.0
    ) -> None:
        """Count what a resumed run takes from its trace instead of doing it again
        (docs/resume.md): a finished subtree, an agent's recorded turns. The usage is
        *agent_id*'s and its ancestors', as it was; for an agent not announced yet, it is
        counted when it is."""
        if not self._counting:
            return
        if agent_id in self._agents:
            self._add(agent_id, tokens=tokens, tool_calls=tool_calls, usd=usd)
            return
        before = self._recorded.get(agent_id, (0, 0, 0.0))
        self._recorded[agent_id] = (before[0] + tokens, before[1] + tool_calls, before[2] + usd)

    def forget(self, agent_id: str) -> None:
        """Drop a budget set for an agent that never started (cancelled while waiting)."""
        self._pending.pop(agent_id, None)
        self._recorded.pop(agent_id, None)

    def __len__(self) -> int:
        """Agents tracked now (the live ones)."""
        return len(self._agents)

    def usd_usage(self, agent_id: str) -> tuple[float, float]:
        """(dollars spent, dollars reserved by calls under way) of *agent_id*'s subtree."""
        u = self._agents.get(agent_id)
        return (u.usd, u.reserved) if u else (0.0, 0.0)

    def reserve(self, agent_id: str, usd: float) -> float:
        """Hold *usd* (a call's estimated input cost) against the money allowance of every
        subtree *agent_id* is in, until :meth:`release`. Returns what was held (0 when no
        budget counts money).

        A refused call leaves its subtree *draining*: no call in it starts any more, and once
        the calls under way in it are settled (their reservations released) the subtree is
        cancelled ``by="budget"``; at once when none is under way.

        Raises:
            BudgetRefused: some subtree's spent and reserved dollars with *usd* would pass
                its allowance (or have reached it), or it is draining already.
        """
        if not self.counts_usd:
            return 0.0
        chain = []
        cur: str | None = agent_id
        while cur is not None and (u := self._agents.get(cur)) is not None:
            b = u.budget
            if b is not None and b.usd is not None:
                if u.refusal is not None:
                    raise BudgetRefused(cur, u.refusal)
                spent = u.usd + u.reserved
                if spent >= b.usd or spent + usd > b.usd:
                    why = (f"budget exceeded: ${_dollars(spent + usd)} spent, reserved and "
                           f"asked for > ${_dollars(b.usd)}")
                    self._drain(cur, u, why)
                    raise BudgetRefused(cur, why)
            chain.append(u)
            cur = u.parent
        for u in chain:
            u.reserved += usd
        return usd

    def release(self, agent_id: str, usd: float) -> None:
        """Give back what :meth:`reserve` held for a call that has been settled (its cost is
        counted from its ``turn_finished``) or that failed; a draining subtree whose last call
        under way this was is cancelled now."""
        if not usd:
            return
        cur: str | None = agent_id
        while cur is not None and (u := self._agents.get(cur)) is not None:
            u.reserved = max(0.0, u.reserved - usd)
            if u.refusal is not None and u.reserved < _EPSILON and not u.tripped:
                u.tripped = True
                self._cancel(cur, u.refusal)
            cur = u.parent

    def _drain(self, agent_id: str, u: _Usage, why: str) -> None:
        """No call starts in *agent_id*'s subtree any more; it is cancelled once the calls
        under way in it are settled (docs/costs.md, "Budgets in money")."""
        u.refusal = why
        if u.reserved < _EPSILON and not u.tripped:
            u.tripped = True
            self._cancel(agent_id, why)

    def _add(
        self, agent_id: str | None, *, tokens: int = 0, tool_calls: int = 0, usd: float = 0.0
    ) -> None:
        cur = agent_id
        while cur is not None:
            u = self._agents.get(cur)
            if u is None:
                return
            u.tokens += tokens
            u.tool_calls += tool_calls
            u.usd += usd
            b = u.budget
            if b is not None and not u.tripped:
                why = None
                if b.tokens is not None and u.tokens > b.tokens:
                    why = f"budget exceeded: {u.tokens} tokens > {b.tokens}"
                elif b.tool_calls is not None and u.tool_calls > b.tool_calls:
                    why = f"budget exceeded: {u.tool_calls} tool calls > {b.tool_calls}"
                elif b.usd is not None and u.usd > b.usd and u.refusal is None:
                    # Calls under way finish and are counted: the subtree drains, and the last
                    # release cancels it (this call's own is released right after this event).
                    u.refusal = f"budget exceeded: ${_dollars(u.usd)} > ${_dollars(b.usd)}"
                    if u.reserved >= _EPSILON:
                        cur = u.parent
                        continue
                    why = u.refusal
                if why is not None:
                    u.tripped = True
                    try:
                        self._queue()[0].send_nowait((cur, why))
                    except trio.WouldBlock:
                        _log.error("budget queue full; cancel dropped", agent_id=cur, reason=why)
            cur = u.parent

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Carry out the cancels the tap asked for. Runs until cancelled."""
        task_status.started()
        async for agent_id, reason in self._queue()[1]:
            self._cancel(agent_id, reason)
