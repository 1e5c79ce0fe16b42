"""Budgets as a layer that watches the stream and acts (not flags threaded through the loop).

:class:`BudgetLayer` is a core hook of the bus (never dropped): it keeps the agent tree (from
``agent_started``), adds each ``turn_finished``'s tokens (and a summary's, from
``context_compacted``, and an MCP sampling request's, from ``mcp_sampled``) and each
``tool_started`` to the agent and every ancestor, and when a
subtree with a budget goes over it, asks the runtime to cancel that subtree ``by="budget"``. The
cancel itself runs in the layer's own task, because a hook must not emit. Wall-clock budgets are
a deadline on the agent's cancel scope, set by the runtime when the agent starts.
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

CancelFn = Callable[[str, str], bool]
_Queue = tuple[trio.MemorySendChannel[tuple[str, str]], trio.MemoryReceiveChannel[tuple[str, str]]]


@attrs.define(eq=False)
class _Usage:
    parent: str | None
    budget: Budget | None = None
    tokens: int = 0
    tool_calls: int = 0
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
        """Give *agent_id* (about to start) a token / tool-call allowance for its subtree."""
        if budget is not None and (budget.tokens is not None or budget.tool_calls is not None):
            self._pending[agent_id] = budget
            self._counting = True
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
        elif isinstance(event, TurnFinished):
            self._add(event.agent_id, tokens=event.input_tokens + event.output_tokens)
        elif isinstance(event, ToolStarted):
            self._add(event.agent_id, tool_calls=1)
        elif isinstance(event, ContextCompacted) and (event.input_tokens or event.output_tokens):
            # A summary is a model call made for the agent: its tokens are the agent's.
            self._add(event.agent_id, tokens=event.input_tokens + event.output_tokens)
        elif isinstance(event, McpSampled) and (event.input_tokens or event.output_tokens):
            # An MCP server's sampling request is answered with the agent's model, for it.
            self._add(event.agent_id, tokens=event.input_tokens + event.output_tokens)
        elif isinstance(event, AgentFinished) and event.agent_id is not None:
            # Every agent under it has finished already (docs/events.md#invariants) and its
            # usage was added to its ancestors as it came, so it can go: memory follows the live
            # agents.
            self._agents.pop(event.agent_id, None)
            self._pending.pop(event.agent_id, None)

    def forget(self, agent_id: str) -> None:
        """Drop a budget set for an agent that never started (cancelled while waiting)."""
        self._pending.pop(agent_id, None)

    def __len__(self) -> int:
        """Agents tracked now (the live ones)."""
        return len(self._agents)

    def _add(self, agent_id: str | None, *, tokens: int = 0, tool_calls: int = 0) -> None:
        cur = agent_id
        while cur is not None:
            u = self._agents.get(cur)
            if u is None:
                return
            u.tokens += tokens
            u.tool_calls += tool_calls
            b = u.budget
            if b is not None and not u.tripped:
                why = None
                if b.tokens is not None and u.tokens > b.tokens:
                    why = f"budget exceeded: {u.tokens} tokens > {b.tokens}"
                elif b.tool_calls is not None and u.tool_calls > b.tool_calls:
                    why = f"budget exceeded: {u.tool_calls} tool calls > {b.tool_calls}"
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
