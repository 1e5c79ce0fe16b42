"""Realistic event streams for tests and benchmarks, built from a small description of a run.

A run is described as a tree of :class:`AgentSpec` (turns of :class:`ToolSpec` calls; an ``agent``
call holds the sub-agent it starts). :func:`run_events` turns it into the event stream the runtime
would emit (JSON objects, as in a trace file), with consistent timestamps from a simulated clock,
in one of three orders:

- ``"canonical"``: depth first, each call's events (and sub-agent) before the next call's;
- ``"time"``: merged by timestamp, as the runtime would emit parallel sub-agents;
- ``"random"``: a random interleaving of parallel calls (needs *rng*), keeping every agent's own
  order and the constraints of docs/events.md#invariants (a sub-agent between its call's
  ``tool_started`` and ``tool_finished``).

The timestamps belong to the events, not to their position, so every order yields the same tree.
``seq`` is assigned after merging, as the runtime's bus does.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs
import orjson
from hypothesis import strategies as st

from runtime.core._events import Event, event_from_dict

_WORDS = [
    "scan",
    "the",
    "repository",
    "for",
    "failing",
    "tests",
    "and",
    "summarise",
    "what",
    "broke",
    "in",
    "each",
    "module",
    "then",
    "propose",
    "a",
    "fix",
    "with",
    "the",
    "smallest",
    "diff",
    "that",
    "keeps",
    "the",
    "public",
    "api",
    "stable",
]


@attrs.define
class ToolSpec:
    """One tool call. ``child`` is set for an ``agent`` call (its sub-agent)."""

    name: str = "bash"
    status: str = "ok"
    duration_s: float = 0.05
    child: AgentSpec | None = None
    permission: bool | None = None  # None: not asked; True granted; False denied
    permission_wait_s: float = 0.5
    cancel_by: str | None = None  # a cancel_requested for this call, by whom


@attrs.define
class AgentSpec:
    """One agent: its type, its turns (each a list of parallel calls), how it ends."""

    name: str = "main"
    turns: list[list[ToolSpec]] = attrs.Factory(list)
    status: str = "completed"
    deltas: int = 3
    turn_s: float = 0.1
    input_tokens: int = 100
    output_tokens: int = 20


def agent_call(child: AgentSpec, *, status: str | None = None, **kw: Any) -> ToolSpec:
    """An ``agent`` tool call starting *child*; its status follows the child's."""
    if status is None:
        status = {"completed": "ok", "cancelled": "cancelled"}.get(child.status, "error")
    return ToolSpec(name="agent", status=status, child=child, **kw)


def count_agents(spec: AgentSpec) -> int:
    """How many agents *spec* describes, itself included."""
    return 1 + sum(count_agents(c.child) for turn in spec.turns for c in turn if c.child)


def _duration(spec: AgentSpec) -> float:
    total = 0.0
    for turn in spec.turns:
        total += spec.turn_s + max((_call_duration(c) for c in turn), default=0.0)
    return total + spec.turn_s  # the final answering turn


def _call_duration(call: ToolSpec) -> float:
    wait = call.permission_wait_s if call.permission is not None else 0.0
    if call.permission is False:
        return wait
    if call.child is not None:
        return wait + _duration(call.child) + 0.001
    return wait + call.duration_s


class _Ids:
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._n = itertools.count(1)

    def next(self, prefix: str) -> str:
        return f"{prefix}{next(self._n)}"


def _ev(
    kind: str, ts: float, ids: _Ids, agent_id: str | None, ptu: str | None, **fields: Any
) -> dict[str, Any]:
    return {
        "type": kind,
        "seq": 0,
        "ts": round(ts, 6),
        "run_id": ids.run_id,
        "agent_id": agent_id,
        "parent_tool_use_id": ptu,
        **fields,
    }


def _merge(
    streams: list[Iterator[dict[str, Any]]], order: str, rng: random.Random | None
) -> Iterator[dict[str, Any]]:
    if order == "canonical" or len(streams) < 2:
        return itertools.chain.from_iterable(streams)
    if order == "time":
        return heapq.merge(*streams, key=lambda e: e["ts"])
    assert rng is not None, "random order needs an rng"
    return _random_merge(streams, rng)


def _random_merge(
    streams: list[Iterator[dict[str, Any]]], rng: random.Random
) -> Iterator[dict[str, Any]]:
    live = list(streams)
    while live:
        i = rng.randrange(len(live))
        try:
            yield next(live[i])
        except StopIteration:
            live.pop(i)


def _agent_stream(
    spec: AgentSpec,
    ids: _Ids,
    t0: float,
    *,
    agent_id: str,
    ptu: str | None,
    parent_agent_id: str | None,
    depth: int,
    order: str,
    rng: random.Random | None,
) -> Iterator[dict[str, Any]]:
    start = t = t0
    words = len(_WORDS)
    yield _ev(
        "agent_started",
        t,
        ids,
        agent_id,
        ptu,
        name=spec.name,
        parent_agent_id=parent_agent_id,
        depth=depth,
        prompt=" ".join(_WORDS[depth % words :]) + f" ({spec.name})",
    )
    turn_no = 0
    calls_made = 0
    answer = ""
    for turn in [*spec.turns, []]:
        turn_no += 1
        step = spec.turn_s / (spec.deltas + 1)
        for i in range(spec.deltas):
            chunk = " ".join(_WORDS[(turn_no + i) % words : (turn_no + i) % words + 4]) + " "
            answer += chunk
            yield _ev("text_delta", t + step * (i + 1), ids, agent_id, ptu, text=chunk)
        t += spec.turn_s
        last = not turn
        yield _ev(
            "turn_finished",
            t,
            ids,
            agent_id,
            ptu,
            turn=turn_no,
            stop_reason="end_turn" if last else "tool_use",
            input_tokens=spec.input_tokens,
            output_tokens=spec.output_tokens,
        )
        if last:
            break
        calls: list[tuple[ToolSpec, str]] = []
        for call in turn:
            calls_made += 1
            # Ids follow the position in the tree, so every order of the stream names alike.
            tid = f"toolu_{agent_id.removeprefix('agent_')}.{calls_made}"
            calls.append((call, tid))
            if call.child is not None:
                tool_input: dict[str, Any] = {
                    "description": f"{call.child.name} part",
                    "prompt": "do your part",
                    "agent": call.child.name,
                }
                summary = f"agent: {call.child.name} part"
            else:
                tool_input = {"command": f"ls -la src/{tid}"}
                summary = f"{call.name}: ls -la src/{tid}"
            yield _ev(
                "tool_started",
                t,
                ids,
                agent_id,
                ptu,
                tool_use_id=tid,
                name=call.name,
                input=tool_input,
                summary=summary,
            )
        streams = [
            _call_stream(
                call, tid, ids, t, agent_id=agent_id, ptu=ptu, depth=depth, order=order, rng=rng
            )
            for call, tid in calls
        ]
        yield from _merge(streams, order, rng)
        t += max(_call_duration(c) for c, _ in calls)
    status = spec.status
    yield _ev(
        "agent_finished",
        t,
        ids,
        agent_id,
        ptu,
        status=status,
        result=answer.strip() if status == "completed" else None,
        error=None if status in ("completed", "cancelled") else f"{spec.name} ended {status}",
        turns=turn_no,
        input_tokens=spec.input_tokens * turn_no,
        output_tokens=spec.output_tokens * turn_no,
        duration_s=round(t - start, 6),
    )


def _call_stream(
    call: ToolSpec,
    tid: str,
    ids: _Ids,
    t: float,
    *,
    agent_id: str,
    ptu: str | None,
    depth: int,
    order: str,
    rng: random.Random | None,
) -> Iterator[dict[str, Any]]:
    start = t
    if call.permission is not None:
        rid = f"perm_{tid.removeprefix('toolu_')}"
        yield _ev(
            "permission_requested",
            t,
            ids,
            agent_id,
            ptu,
            request_id=rid,
            tool_use_id=tid,
            name=call.name,
            summary=f"{call.name}: …",
        )
        t += call.permission_wait_s
        yield _ev(
            "permission_resolved",
            t,
            ids,
            agent_id,
            ptu,
            request_id=rid,
            tool_use_id=tid,
            granted=call.permission,
            reason="user said so",
        )
    if call.cancel_by is not None:
        yield _ev(
            "cancel_requested",
            t + 0.0005,
            ids,
            agent_id,
            ptu,
            target=tid,
            reason="taking too long",
            by=call.cancel_by,
        )
    if call.permission is not False and call.child is not None:
        child_id = f"agent_{tid.removeprefix('toolu_')}"
        yield from _agent_stream(
            call.child,
            ids,
            t + 0.0005,
            agent_id=child_id,
            ptu=tid,
            parent_agent_id=agent_id,
            depth=depth + 1,
            order=order,
            rng=rng,
        )
    output = {
        "ok": "total 48\ndrwxr-xr-x  5 user  staff  160 Jan  1 12:00 .",
        "error": "exit status 1: no such file",
        "cancelled": "cancelled: taking too long",
        "denied": "denied: user said so",
    }[call.status]
    yield _ev(
        "tool_finished",
        start + _call_duration(call),
        ids,
        agent_id,
        ptu,
        tool_use_id=tid,
        name=call.name,
        status=call.status,
        output=output,
        duration_s=round(_call_duration(call), 6),
    )


def run_events(
    roots: AgentSpec | Iterable[AgentSpec],
    *,
    run_id: str = "run_0001",
    order: str = "canonical",
    rng: random.Random | None = None,
    t0: float = 1_700_000_000.0,
    run_events: bool = True,
) -> Iterator[dict[str, Any]]:
    """The event stream (JSON objects) of a run whose root agents are *roots*, one after another.

    Args:
        roots: the root agent(s); several make a chat session.
        run_id: the run's id.
        order: ``canonical``, ``time`` or ``random`` (see the module docstring).
        rng: drives the ``random`` order.
        t0: the run's start time.
        run_events: emit ``run_started`` / ``run_finished`` around the agents.
    """
    specs = [roots] if isinstance(roots, AgentSpec) else list(roots)
    ids = _Ids(run_id)
    seq = itertools.count(1)
    t = t0

    def stream() -> Iterator[dict[str, Any]]:
        nonlocal t
        if run_events:
            yield _ev(
                "run_started",
                t,
                ids,
                None,
                None,
                version="0.1.0",
                config={"provider": "scripted", "model": "scripted", "max_turns": 20},
            )
        for spec in specs:
            yield from _agent_stream(
                spec,
                ids,
                t,
                agent_id=f"agent_{ids.next('')}",
                ptu=None,
                parent_agent_id=None,
                depth=0,
                order=order,
                rng=rng,
            )
            t += _duration(spec) + 0.01
        if run_events:
            yield _ev(
                "run_finished",
                t,
                ids,
                None,
                None,
                status=specs[-1].status,
                duration_s=round(t - t0, 6),
            )

    for event in stream():
        event["seq"] = next(seq)
        yield event


def to_events(dicts: Iterable[dict[str, Any]]) -> list[Event]:
    """The events of *dicts*, decoded as any reader would."""
    return [event_from_dict(d) for d in dicts]


def write_trace(path: Path, dicts: Iterable[dict[str, Any]]) -> int:
    """Write *dicts* as a JSONL trace file; returns how many lines."""
    n = 0
    with path.open("wb") as f:
        for d in dicts:
            f.write(orjson.dumps(d, option=orjson.OPT_APPEND_NEWLINE))
            n += 1
    return n


# ---------------------------------------------------------------------------- shapes


def small_run() -> AgentSpec:
    """main fans out to three sub-agents (one cancelled mid-way, one failing), plus a bash call."""
    return AgentSpec(
        name="main",
        turns=[
            [
                agent_call(AgentSpec(name="worker", turns=[[ToolSpec(name="bash")]])),
                agent_call(
                    AgentSpec(
                        name="sleeper",
                        status="cancelled",
                        turns=[[ToolSpec(name="bash", status="cancelled", duration_s=2.0)]],
                    ),
                    cancel_by="user",
                ),
                agent_call(AgentSpec(name="flaky", status="failed")),
            ],
            [ToolSpec(name="write", permission=False, status="denied"), ToolSpec(name="read")],
        ],
    )


def wide_deep(fanouts: list[int], *, seed: int = 7) -> AgentSpec:
    """A tree with ``fanouts[d]`` sub-agents under every agent at depth *d* (a few fail or are
    cancelled), each agent also making ordinary tool calls; leaves do two tool turns."""
    rng = random.Random(seed)

    def build(depth: int, name: str) -> AgentSpec:
        if depth == len(fanouts):
            status = rng.choices(["completed", "failed", "max_turns"], [97, 2, 1])[0]
            turns = [
                [
                    ToolSpec(
                        name=rng.choice(["bash", "read", "grep"]),
                        status="ok" if rng.random() < 0.95 else "error",
                    )
                ]
                for _ in range(2)
            ]
            return AgentSpec(name=name, turns=turns, status=status, deltas=rng.randint(3, 8))
        calls: list[ToolSpec] = []
        for i in range(fanouts[depth]):
            child = build(depth + 1, ["researcher", "coder", "reviewer", "tester"][i % 4])
            cancel = rng.random() < 0.02
            if cancel:
                child.status = "cancelled"
            calls.append(agent_call(child, cancel_by="user" if cancel else None))
        first = [ToolSpec(name="glob"), ToolSpec(name="read", permission=True)]
        return AgentSpec(name=name, turns=[first, calls], deltas=rng.randint(3, 8))

    return build(0, "main")


# ---------------------------------------------------------------------------- hypothesis


@st.composite
def agent_specs(
    draw: st.DrawFn, *, max_depth: int = 3, max_fanout: int = 3, name: str = "main", depth: int = 0
) -> AgentSpec:
    """Random agent trees: up to *max_depth* levels of up to *max_fanout* parallel calls per turn."""
    n_turns = draw(st.integers(0, 2))
    turns: list[list[ToolSpec]] = []
    for _ in range(n_turns):
        calls: list[ToolSpec] = []
        for _ in range(draw(st.integers(1, max_fanout))):
            if depth < max_depth and draw(st.booleans()):
                child = draw(
                    agent_specs(
                        max_depth=max_depth,
                        max_fanout=max_fanout,
                        name=draw(st.sampled_from(["worker", "coder", "tester"])),
                        depth=depth + 1,
                    )
                )
                calls.append(
                    agent_call(child, cancel_by="user" if child.status == "cancelled" else None)
                )
            else:
                permission = draw(st.sampled_from([None, None, True, False]))
                status = (
                    "denied"
                    if permission is False
                    else draw(st.sampled_from(["ok", "ok", "error", "cancelled"]))
                )
                calls.append(
                    ToolSpec(
                        name=draw(st.sampled_from(["bash", "read", "grep"])),
                        status=status,
                        permission=permission,
                        duration_s=draw(st.sampled_from([0.01, 0.2, 1.5])),
                        cancel_by="budget" if status == "cancelled" else None,
                    )
                )
        turns.append(calls)
    status = draw(
        st.sampled_from(
            ["completed", "completed", "cancelled", "failed", "max_turns", "budget_exceeded"]
        )
    )
    return AgentSpec(
        name=name,
        turns=turns,
        status=status,
        deltas=draw(st.integers(0, 3)),
        turn_s=draw(st.sampled_from([0.01, 0.1, 0.7])),
    )
