"""A recorded run, read from its trace file into what a replay plays back (docs/replay.md).

:func:`load_recording` reads a JSONL trace (docs/events.md) and builds a :class:`Recording`: for
each agent, in tree order, its recorded model turns (text, thinking, tool calls with their
inputs, usage, stop reason), what each tool call returned, and how the agent ended (a provider
error, a cancel, or nothing at all when the run was killed). Agents are linked to the tool call
that started them, so a replay can match them by their place in the tree, never by their ids.

Bad input is refused with one :class:`~runtime.core._errors.TraceError` line: a corrupt line
(a replay needs every event), several runs in one file without ``run_id``, a trace written by a
newer version. A truncated last line (a killed writer) is not an error: the recording ends
there and says so in :attr:`Recording.notes`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from runtime.core import (
    VERSION,
    Event,
    EventDecodeError,
    TraceError,
    UnknownEventType,
    event_to_dict,
)
from runtime.trace import read_events

PATH_SEP = " \u203a "
"""Joins agent type names into a tree path: ``main \u203a reviewer`` (a single right angle
quotation mark, as the picker and the views draw it)."""


@attrs.define(eq=False, kw_only=True)
class RecordedCall:
    """One tool call as recorded. ``status`` is None when the run was killed during it."""

    id: str
    name: str
    input: dict[str, Any]
    agent: RecordedAgent
    turn: int
    status: str | None = None
    output: str | None = None
    child: RecordedAgent | None = None
    """The sub-agent an ``agent`` call started."""
    cancel_reason: str | None = None
    """A cancel aimed at this very call (not an ``agent`` call: that one is its child's)."""
    cancel_by: str | None = None


@attrs.define(eq=False, kw_only=True)
class RecordedTurn:
    """One model turn as recorded (``number`` counts from 1 per agent)."""

    number: int
    text: str = ""
    thinking: str = ""
    calls: list[RecordedCall] = attrs.Factory(list)
    stop_reason: str = "end_turn"
    input_tokens: int = 0
    output_tokens: int = 0
    delay_s: float = 0.0
    """From the agent's previous step to the end of this turn: what ``--realtime`` waits."""
    call_ids: list[str] | None = None
    """The turn's tool_use_ids in the model's order (traces before 0.1 lack them)."""
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    """Of the input, what was read from or written to the prompt cache: a replay costs what
    the recorded run cost (docs/costs.md)."""


@attrs.define(eq=False, kw_only=True)
class RecordedAgent:
    """One agent as recorded. ``status`` is None when the run was killed while it ran."""

    id: str
    name: str
    prompt: str
    path: str
    parent_call: RecordedCall | None
    turns: list[RecordedTurn] = attrs.Factory(list)
    tail_text: str = ""
    """Text streamed after the last whole turn (a turn cut by a cancel or an error)."""
    tail_thinking: str = ""
    status: str | None = None
    result: str | None = None
    error: str | None = None
    cancel_reason: str | None = None
    cancel_by: str | None = None
    cancel_target: str | None = None
    """The node the recorded cancel of this agent named: its own id, or its ``agent`` call's."""


@attrs.define(eq=False, kw_only=True)
class Recording:
    """One run of a trace, ready to be replayed.

    Attributes:
        source: the trace file.
        run_id: the recorded run's id.
        version: the trio-agents version that wrote it (None when ``run_started`` is missing).
        config: ``run_started.config``.
        roots: root agents in start order.
        agents: every agent by its recorded id.
        calls: every tool call by its recorded tool_use_id.
        status: ``run_finished.status``; None when the run was killed before it ended.
        notes: what a replay of this trace cannot reproduce, one line each.
    """

    source: str
    run_id: str
    version: str | None = None
    config: dict[str, Any] = attrs.Factory(dict)
    roots: list[RecordedAgent] = attrs.Factory(list)
    agents: dict[str, RecordedAgent] = attrs.Factory(dict)
    calls: dict[str, RecordedCall] = attrs.Factory(dict)
    status: str | None = None
    notes: list[str] = attrs.Factory(list)

    @property
    def killed(self) -> bool:
        """The recorded run did not end (no ``run_finished``): its process was killed."""
        return self.status is None

    def turn_id(self, agent: RecordedAgent, number: int) -> str:
        """The id ``--until`` names a turn by: ``AGENT_ID#N``."""
        return f"{agent.id}#{number}"

    def find_node(self, node_id: str) -> tuple[RecordedAgent, int]:
        """The agent and turn number a fork at *node_id* (a tool_use_id or ``AGENT_ID#N``) starts
        at live: the turn that asked for the call, or the turn itself.

        Raises:
            TraceError: no such tool call or turn in this run.
        """
        call = self.calls.get(node_id)
        if call is not None:
            return call.agent, call.turn
        agent_id, _, number = node_id.rpartition("#")
        agent = self.agents.get(agent_id)
        if agent is not None and number.isdigit() and 1 <= int(number) <= len(agent.turns) + 1:
            return agent, int(number)
        raise TraceError(
            f"--until {node_id}: no such tool call or turn in run {self.run_id} (give a "
            "tool_use_id, or AGENT_ID#N for an agent's turn N; `trio-agents trace show` lists them)"
        )


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def load_recording(
    path: str | os.PathLike[str], *, run_id: str | None = None, this_version: str = VERSION
) -> Recording:
    """Read the run *run_id* (default: the only one) of the trace at *path*, refusing a trace
    written by a version newer than *this_version* (default: this one's).

    Raises:
        TraceError: one line: missing or not a trace, a corrupt line, several runs and no
            *run_id* (listing them), no such run, or a trace from a newer version.
    """
    name = os.fspath(path)
    errors: list[EventDecodeError] = []
    events = list(read_events(path, on_error=errors.append))
    bad = [e for e in errors if not isinstance(e, UnknownEventType)]
    if bad:
        first = bad[0]
        where = f":{first.line}" if getattr(first, "line", None) else ""
        raise TraceError(
            f"{name}{where}: corrupt line ({first}); a replay needs every event of the run"
        )
    runs: dict[str, list[Event]] = {}
    for event in events:
        runs.setdefault(event.run_id, []).append(event)
    if run_id is None:
        if len(runs) > 1:
            raise TraceError(
                f"{name} holds {len(runs)} runs ({', '.join(runs)}); choose one with --run RUN_ID"
            )
        run_id = next(iter(runs))
    elif run_id not in runs:
        raise TraceError(f"{name}: no run {run_id!r} (it holds: {', '.join(runs)})")
    rec = Recording(source=name, run_id=run_id)
    _build(rec, map(event_to_dict, runs[run_id]))
    if rec.version is not None and _version_tuple(rec.version) > _version_tuple(this_version):
        raise TraceError(
            f"{name}: written by trio-agents {rec.version}, newer than this one "
            f"({this_version}); replay it with that version or newer"
        )
    unknown = sorted({e.type_name for e in errors if isinstance(e, UnknownEventType)})
    if unknown:
        rec.notes.append(f"event types this version does not know were skipped: {unknown}")
    if rec.version is None:
        rec.notes.append("the trace has no run_started: its version and settings are unknown")
    elif "permission_rules" not in rec.config:
        rec.notes.append(
            "the trace predates run_started.config.permission_rules: give the recorded run's "
            "--allow and --deny rules again"
        )
    with open(path, "rb") as f:  # a killed writer leaves its last line without a newline
        f.seek(0, os.SEEK_END)
        if f.tell():
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                rec.notes.append("the last line of the trace is cut short (a killed writer)")
    if not rec.roots:
        raise TraceError(f"{name}: run {run_id} has no agent to replay")
    return rec


def _build(rec: Recording, events: Iterable[Mapping[str, Any]]) -> None:
    """Fill *rec* from its run's events, each given as its JSON object (a trace line decoded:
    a resume reads its trace without building an event per line, bench/README.md, "Resume")."""
    streamed = Streamed()
    text, thinking, take = streamed.text, streamed.thinking, streamed.take
    last_ts: dict[str | None, float] = {}
    ordered_ids = True
    agents, calls = rec.agents, rec.calls
    for ev in events:
        if take(ev):
            continue
        aid = ev["agent_id"]
        kind = ev["type"]
        agent = agents.get(aid) if aid is not None else None
        if kind == "run_started":
            rec.version, rec.config = ev["version"], dict(ev["config"])
        elif kind == "agent_started":
            _agent_started(rec, ev)
        elif kind == "turn_finished" and agent is not None:
            turn = recorded_turn(ev, agent, text.pop(aid, ()), thinking.pop(aid, ()), last_ts)
            if turn.call_ids is None:
                ordered_ids = False
        elif kind == "tool_started" and agent is not None and agent.turns:
            call = RecordedCall(
                id=ev["tool_use_id"],
                name=ev["name"],
                input=dict(ev["input"]),
                agent=agent,
                turn=len(agent.turns),
            )
            calls[call.id] = call
            agent.turns[-1].calls.append(call)
        elif kind == "tool_finished":
            done = calls.get(ev["tool_use_id"])
            if done is not None:
                done.status, done.output = ev["status"], ev["output"]
        elif kind == "cancel_requested":
            _cancel_requested(rec, ev)
        elif kind == "agent_finished" and agent is not None:
            agent.status, agent.result, agent.error = ev["status"], ev["result"], ev["error"]
            agent.tail_text = "".join(text.pop(aid, ()))
            agent.tail_thinking = "".join(thinking.pop(aid, ()))
        elif kind == "run_finished":
            rec.status = ev["status"]
        elif kind == "run_resumed":
            # A turn cut by the crash was asked again: its streamed text is no turn's.
            text.clear()
            thinking.clear()
        if aid is not None:
            last_ts[aid] = ev["ts"]
    _finish_build(rec, text, ordered_ids)


class Streamed:
    """The text and thinking each agent streamed since its last turn (deltas are no events
    of a recording: they are joined into the turn they end in)."""

    __slots__ = ("text", "thinking")

    def __init__(self) -> None:
        self.text: dict[str | None, list[str]] = {}
        self.thinking: dict[str | None, list[str]] = {}

    def take(self, ev: Mapping[str, Any]) -> bool:
        """Keep the text of *ev* if it is a delta; returns whether it was."""
        kind = ev["type"]
        if kind == "text_delta":
            self.text.setdefault(ev["agent_id"], []).append(ev["text"])
            return True
        if kind == "thinking_delta":
            self.thinking.setdefault(ev["agent_id"], []).append(ev["text"])
            return True
        return False


def recorded_turn(
    ev: Mapping[str, Any],
    agent: RecordedAgent,
    text: Iterable[str],
    thinking: Iterable[str],
    last_ts: Mapping[str | None, float],
) -> RecordedTurn:
    """The ``turn_finished`` *ev* as *agent*'s next turn (appended), with the text and
    thinking streamed since its last one; *last_ts*: each agent's last event's ``ts``."""
    ids = ev.get("tool_use_ids")
    turn = RecordedTurn(
        number=len(agent.turns) + 1,
        text="".join(text),
        thinking="".join(thinking),
        stop_reason=ev["stop_reason"],
        input_tokens=ev["input_tokens"],
        output_tokens=ev["output_tokens"],
        delay_s=max(0.0, ev["ts"] - last_ts.get(agent.id, ev["ts"])),
        call_ids=None if ids is None else list(ids),
        cache_read_tokens=ev.get("cache_read_tokens") or 0,
        cache_write_tokens=ev.get("cache_write_tokens") or 0,
    )
    agent.turns.append(turn)
    return turn


def _agent_started(rec: Recording, ev: Mapping[str, Any]) -> None:
    parent = ev["parent_tool_use_id"]
    call = rec.calls.get(parent) if parent else None
    parent_path = call.agent.path + PATH_SEP if call is not None else ""
    agent = RecordedAgent(
        id=ev["agent_id"] or "",
        name=ev["name"],
        prompt=ev["prompt"],
        path=parent_path + ev["name"],
        parent_call=call,
    )
    rec.agents[agent.id] = agent
    if call is not None:
        call.child = agent
    elif parent is None:
        rec.roots.append(agent)


def _cancel_requested(rec: Recording, ev: Mapping[str, Any]) -> None:
    node = ev["target"]
    target = rec.agents.get(node)
    if target is None and node in rec.calls:  # an `agent` call: its sub-agent
        target = rec.calls[node].child
    if target is not None:
        target.cancel_reason, target.cancel_by = ev["reason"], ev["by"]
        target.cancel_target = node
    elif node in rec.calls:  # a plain tool call, cancelled on its own
        call = rec.calls[node]
        call.cancel_reason, call.cancel_by = ev["reason"], ev["by"]


def _finish_build(
    rec: Recording, text: dict[str | None, list[str]], ordered_ids: bool
) -> None:
    for aid, parts in text.items():  # agents the killed run left mid-turn
        if aid in rec.agents and rec.agents[aid].status is None:
            rec.agents[aid].tail_text = "".join(parts)
    for agent in rec.agents.values():
        for turn in agent.turns:
            if turn.call_ids is not None and len(turn.calls) > 1:
                order = {cid: i for i, cid in enumerate(turn.call_ids)}
                turn.calls.sort(key=lambda c: order.get(c.id, len(order)))
    if not ordered_ids and any(len(t.calls) > 1 for a in rec.agents.values() for t in a.turns):
        rec.notes.append(
            "the trace predates turn_finished.tool_use_ids: parallel tool calls of a turn are "
            "replayed in the order they started, which may not be the order the model gave"
        )
