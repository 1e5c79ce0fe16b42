"""A recorded run as a scenario file (docs/scenarios.md): ``trace export --format scenario``.

Every instance of a scenario's agent type plays that type's turns from the first, so an agent
type whose recorded agents all said the same thing stays one type; where agents of one type
said different things, each gets a type of its own named by its tree path (``main/reviewer``,
``main/reviewer#2`` for the second such sibling), and the ``agent`` calls that start them name
that type. A recorded provider error becomes the last turn's ``error``; an agent that ended on
``max_turns`` gets that ``max_turns``. What a scenario cannot say (a cancel, a killed run, the
agent types' system prompts and tool lists) is listed in the notes.
"""

from __future__ import annotations

from typing import Any

import orjson

from ._recording import PATH_SEP, RecordedAgent, RecordedTurn, Recording


def export_scenario(rec: Recording) -> tuple[dict[str, Any], list[str]]:
    """The scenario object of *rec*'s first root's tree, and notes on what it leaves out."""
    notes: list[str] = []
    root = rec.roots[0]
    if len(rec.roots) > 1:
        notes.append(f"the run has {len(rec.roots)} root agents; only the first is exported")
    agents = list(_walk(root))
    names: dict[str, str] = {a.id: a.name for a in agents}
    names[root.id] = "main"
    scripts: dict[str, list[dict[str, Any]]] = {}
    for _ in range(len(agents) + 1):  # each pass only renames; it ends within len(agents)
        scripts = {a.id: _script(a, names) for a in reversed(agents)}
        groups: dict[str, list[RecordedAgent]] = {}
        for a in agents:
            groups.setdefault(names[a.id], []).append(a)
        changed = False
        for members in groups.values():
            first = orjson.dumps(scripts[members[0].id])
            if len(members) > 1 and any(orjson.dumps(scripts[m.id]) != first for m in members):
                changed = _rename_by_path(members, names, root) or changed
        if not changed:
            break
    out: dict[str, Any] = {}
    for a in agents:
        name = names[a.id]
        if name in out:
            continue
        spec: dict[str, Any] = {"turns": scripts[a.id]}
        if name != a.name and a is not root:
            spec["description"] = f"the {a.name} agent at {a.path} (exported from a trace)"
        if a.status == "max_turns":
            spec["max_turns"] = len(a.turns)
        out[name] = spec
    for a in agents:
        if a.status in ("cancelled", "budget_exceeded"):
            notes.append(
                f"{a.path} ended {a.status}; a scenario cannot cancel it: its script ends where "
                "the recording does, so under run --scenario it fails past its last turn"
            )
        elif a.status is None:
            notes.append(f"{a.path} was still running when the recorded run was killed")
    notes.append(
        "agent types keep only their turns: give system prompts, tool lists and limits with "
        f"--agents; run it with the recorded prompt: {root.prompt[:200]!r}"
    )
    return {"agents": out}, notes


def _walk(agent: RecordedAgent) -> list[RecordedAgent]:
    out = [agent]
    for turn in agent.turns:
        for call in turn.calls:
            if call.child is not None:
                out.extend(_walk(call.child))
    return out


def _rename_by_path(
    members: list[RecordedAgent], names: dict[str, str], root: RecordedAgent
) -> bool:
    changed = False
    seen: dict[str, int] = {}
    for m in members:
        if m is root:
            continue
        base = m.path.replace(PATH_SEP, "/")
        seen[base] = seen.get(base, 0) + 1
        name = base if seen[base] == 1 else f"{base}#{seen[base]}"
        if names[m.id] != name:
            names[m.id] = name
            changed = True
    return changed


def _script(agent: RecordedAgent, names: dict[str, str]) -> list[dict[str, Any]]:
    turns = [_turn(t, names) for t in agent.turns]
    if agent.status == "failed":
        last: dict[str, Any] = {"error": agent.error or "failed"}
        if agent.tail_text:
            last["text"] = agent.tail_text
        turns.append(last)
    return turns


def _turn(turn: RecordedTurn, names: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if turn.thinking:
        out["thinking"] = turn.thinking
    if turn.text:
        out["text"] = turn.text
    if turn.calls:
        calls = []
        for call in turn.calls:
            args = dict(call.input)
            if call.child is not None and names[call.child.id] != args.get("agent", "general"):
                args["agent"] = names[call.child.id]
            calls.append({"name": call.name, "input": args})
        out["tool_calls"] = calls
    out["usage"] = {"input_tokens": turn.input_tokens, "output_tokens": turn.output_tokens}
    default = "tool_use" if turn.calls else "end_turn"
    if turn.stop_reason != default:
        out["stop_reason"] = turn.stop_reason
    return out
