"""Each agent's model turns, from the event stream: when each model call ran, and its usage.

:class:`~runtime.trace._tree.TraceTree` keeps an agent's totals, not its turns; a ``chat`` span
(docs/observability.md#spans) and the timeline of ``trace view`` need each model call's start and
end. No event marks the start of a call, so it is inferred from the loop's order
(docs/architecture.md, "The task tree"): an agent asks its model when it starts, and again once
every tool call of its previous turn has finished (or a user message arrives after a turn that
asked for none); ``turn_finished`` ends the call. A call still under way when its agent ends
``cancelled`` or ``failed`` is kept with that status (the span of a cancelled turn is not lost),
unless what opened it was a cancelled tool result: cancelling an agent cancels its tools first,
so its next call most likely never began (an agent that carries on after a cancelled call has
its next call ended by ``turn_finished`` as usual).

O(1) per event; memory is one small tuple per turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NamedTuple

_CUT_SHORT: Final = frozenset({"cancelled", "failed"})


class Turn(NamedTuple):
    """One model call of an agent.

    Attributes:
        agent_id: whose call.
        turn: 1-based, as ``turn_finished`` numbers it.
        start: when the call began (unix seconds, inferred: see the module docstring).
        end: when it ended (``turn_finished``, or the agent's end for a call cut short).
        status: ``ok``, or the agent's status (``cancelled``/``failed``) for a call cut short.
        stop_reason: ``end_turn``, ``tool_use``, ``max_tokens`` … (None when cut short).
        input_tokens: the call's input tokens (0 when cut short).
        output_tokens: the call's output tokens.
        cost_usd: the call's cost when the event carries one.
        retries: ``(ts, attempt, delay_s, reason)`` of each ``provider_retry`` of the call.
    """

    agent_id: str
    turn: int
    start: float
    end: float
    status: str
    stop_reason: str | None
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    retries: tuple[tuple[float, int, float, str], ...]


class _Agent:
    __slots__ = ("after_cancel", "boundary", "in_model", "pending", "retries", "turn", "turns")

    def __init__(self, ts: float) -> None:
        self.boundary = ts  # when the current (or next) model call began
        self.in_model = True  # a model call is under way
        self.pending: set[str] = set()  # tool calls of the last turn still running
        self.turns: list[Turn] = []
        self.turn = 0
        self.retries: list[tuple[float, int, float, str]] = []
        # The call under way was opened by a cancelled tool result: a cancel of the agent
        # itself cancels its tools first, so it may never have started (see _agent_finished).
        self.after_cancel = False


class TurnLog:
    """The model turns of every agent of one run; feed it each event's fields in stream order.

    Attributes:
        turns: every finished (or cut short) model call, by agent id, in order.
    """

    def __init__(self) -> None:
        self._agents: dict[str, _Agent] = {}

    def apply_dict(self, fields: Mapping[str, Any]) -> Turn | None:
        """Take one event; returns the turn it ended, if it ended one. Never raises on a
        malformed event (the tree reports those): what cannot be read is ignored."""
        kind = fields.get("type")
        agent_id = fields.get("agent_id")
        ts = fields.get("ts")
        if agent_id.__class__ is not str or not isinstance(ts, int | float):
            return None
        if kind == "agent_started":
            self._agents.setdefault(agent_id, _Agent(ts))
            return None
        agent = self._agents.get(agent_id)
        if agent is None:
            return None
        if kind == "turn_finished":
            return self._turn_finished(agent, agent_id, ts, fields)
        if kind == "tool_started":
            if not agent.in_model:
                agent.pending.add(str(fields.get("tool_use_id")))
        elif kind == "tool_finished":
            tool_use_id = str(fields.get("tool_use_id"))
            if tool_use_id in agent.pending:
                agent.pending.discard(tool_use_id)
                agent.boundary = max(agent.boundary, ts)
                if not agent.pending:
                    agent.in_model = True
                    agent.after_cancel = fields.get("status") == "cancelled"
        elif kind == "user_message":
            if not agent.in_model and not agent.pending:
                agent.in_model = True
                agent.after_cancel = False
                agent.boundary = ts
        elif kind == "provider_retry" and agent.in_model:
            attempt = fields.get("attempt")
            delay = fields.get("delay_s")
            agent.retries.append(
                (
                    ts,
                    attempt if isinstance(attempt, int) else 0,
                    float(delay) if isinstance(delay, int | float) else 0.0,
                    str(fields.get("reason") or ""),
                )
            )
        elif kind == "agent_finished":
            return self._agent_finished(agent, agent_id, ts, fields)
        return None

    def _turn_finished(
        self, agent: _Agent, agent_id: str, ts: float, fields: Mapping[str, Any]
    ) -> Turn:
        number = fields.get("turn")
        agent.turn = number if isinstance(number, int) else agent.turn + 1
        cost = fields.get("cost_usd")
        stop = fields.get("stop_reason")
        turn = Turn(
            agent_id=agent_id,
            turn=agent.turn,
            start=min(agent.boundary, ts),
            end=ts,
            status="ok",
            stop_reason=stop if isinstance(stop, str) else None,
            input_tokens=_int(fields.get("input_tokens")),
            output_tokens=_int(fields.get("output_tokens")),
            cost_usd=float(cost) if isinstance(cost, int | float) else None,
            retries=tuple(agent.retries),
        )
        agent.turns.append(turn)
        agent.retries.clear()
        agent.in_model = False
        agent.pending.clear()
        agent.boundary = ts
        return turn

    def _agent_finished(
        self, agent: _Agent, agent_id: str, ts: float, fields: Mapping[str, Any]
    ) -> Turn | None:
        status = fields.get("status")
        cut = None
        if agent.in_model and status in _CUT_SHORT and not agent.after_cancel:
            cut = Turn(
                agent_id=agent_id,
                turn=agent.turn + 1,
                start=min(agent.boundary, ts),
                end=ts,
                status=str(status),
                stop_reason=None,
                input_tokens=0,
                output_tokens=0,
                cost_usd=None,
                retries=tuple(agent.retries),
            )
            agent.turns.append(cut)
        agent.in_model = False
        agent.pending.clear()
        return cut

    def turns_of(self, agent_id: str) -> list[Turn]:
        """The agent's finished (or cut short) model calls, in order."""
        agent = self._agents.get(agent_id)
        return agent.turns if agent is not None else []

    def next_turn(self, agent_id: str) -> int:
        """The number the agent's next (or current) model call will have."""
        agent = self._agents.get(agent_id)
        return (agent.turn if agent is not None else 0) + 1

    def open_turn(self, agent_id: str) -> float | None:
        """When the agent's model call under way began, if one is."""
        agent = self._agents.get(agent_id)
        return agent.boundary if agent is not None and agent.in_model else None


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
