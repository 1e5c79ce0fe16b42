"""Scenario files for the scripted provider: parsed and checked before anything runs.

The format is described in docs/scenarios.md.

A malformed file is refused with a :class:`ScenarioError` whose message starts with the JSON path
of the fault, e.g. ``agents.worker.turns[2].tool_calls[0].name: missing``.
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import orjson

from runtime.core import AgentType, ScenarioError

_TURN_KEYS = frozenset(
    {"text", "thinking", "tool_calls", "delay_s", "chunk_delay_s", "error", "usage", "stop_reason"}
)
_AGENT_KEYS = frozenset(
    {"turns", "system", "tools", "description", "model", "max_turns", "placement", "context_window"}
)
_STOP_REASONS = ("end_turn", "tool_use", "max_tokens")


@attrs.frozen(kw_only=True)
class ScriptedToolCall:
    name: str
    input: dict[str, Any]


@attrs.frozen(kw_only=True)
class ScriptedTurn:
    """One assistant turn. ``stop_reason`` defaults to ``tool_use`` when there are tool calls."""

    text: str = ""
    thinking: str = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    error: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    stop_reason: str | None = None


@attrs.frozen(kw_only=True)
class ScriptedAgent:
    """An agent type's script; ``tools=None`` means every built-in tool."""

    name: str
    turns: tuple[ScriptedTurn, ...]
    system: str | None = None
    tools: tuple[str, ...] | None = None
    description: str = ""
    model: str | None = None
    max_turns: int | None = None
    placement: str | None = None
    context_window: int | None = None


@attrs.frozen(kw_only=True)
class Scenario:
    """A whole scenario: agent type name → script. The root agent type is ``main``."""

    agents: Mapping[str, ScriptedAgent]
    source: str = "<scenario>"

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Scenario:
        """Read and check a scenario file.

        Raises:
            ScenarioError: unreadable, not JSON, or malformed (naming the JSON path).
        """
        p = Path(path)
        try:
            raw = p.read_bytes()
        except OSError as exc:
            raise ScenarioError(f"{p}: cannot read: {exc.strerror or exc}") from exc
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ScenarioError(f"{p}: not valid JSON: {exc}") from exc
        try:
            return cls.from_obj(obj, source=str(p))
        except ScenarioError as exc:
            raise ScenarioError(f"{p}: {exc}") from None

    @classmethod
    def from_obj(cls, obj: Any, *, source: str = "<scenario>") -> Scenario:
        """Check a decoded scenario. Raises :class:`ScenarioError` naming the JSON path."""
        if not isinstance(obj, dict):
            raise ScenarioError(f"(top level): expected an object, got {_kind(obj)}")
        extra = set(obj) - {"agents"}
        if extra:
            raise ScenarioError(f"{sorted(extra)[0]}: unknown key (expected 'agents')")
        agents_obj = obj.get("agents")
        if agents_obj is None:
            raise ScenarioError("agents: missing")
        if not isinstance(agents_obj, dict):
            raise ScenarioError(f"agents: expected an object, got {_kind(agents_obj)}")
        if "main" not in agents_obj:
            raise ScenarioError("agents.main: missing (the root agent type is 'main')")
        agents = {
            name: _parse_agent(f"agents.{name}", name, spec) for name, spec in agents_obj.items()
        }
        return cls(agents=agents, source=source)


# Scenarios given as decoded objects, parsed, by their JSON encoding: a library user or a test
# suite opening many runtimes on one scenario dict pays for checking it once
# (bench/README.md, "Per-agent and per-run cost"). Only
# objects that JSON encodes back to themselves are kept (so a hit parses to what a fresh check
# of the object would), and each entry is parsed from its own decoded copy: a caller changing
# its dict afterwards changes the key, never a cached scenario. Bounded, least recent first out.
_PARSED: OrderedDict[bytes, tuple[Scenario, tuple[AgentType, ...]]] = OrderedDict()
_PARSED_MAX = 16
_PARSED_MAX_BYTES = 64 * 1024


def scenario_from_mapping(obj: Mapping[str, Any]) -> tuple[Scenario, tuple[AgentType, ...]]:
    """A decoded scenario checked (:meth:`Scenario.from_obj`), with the agent types it defines
    (:func:`agent_types_from_scenario`); remembered for objects already seen in this process.

    Raises:
        ScenarioError: malformed (naming the JSON path).
    """
    try:
        key = orjson.dumps(obj)
    except TypeError:  # not JSON (a tuple, a custom mapping …): checked as given, every time
        key = None
    if key is not None:
        hit = _PARSED.get(key)
        if hit is not None:
            _PARSED.move_to_end(key)
            return hit
    scenario = Scenario.from_obj(dict(obj))  # a malformed one raises here, as ever
    if key is not None and len(key) <= _PARSED_MAX_BYTES:
        copy = orjson.loads(key)
        if copy == obj:
            scenario = Scenario.from_obj(copy)  # its own data: the caller's dict is not kept
            hit = _PARSED[key] = (scenario, tuple(agent_types_from_scenario(scenario)))
            while len(_PARSED) > _PARSED_MAX:
                _PARSED.popitem(last=False)
            return hit
    return scenario, tuple(agent_types_from_scenario(scenario))


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__
    )


def _parse_agent(path: str, name: str, spec: Any) -> ScriptedAgent:
    if not isinstance(spec, dict):
        raise ScenarioError(f"{path}: expected an object, got {_kind(spec)}")
    for key in spec:
        if key not in _AGENT_KEYS:
            raise ScenarioError(f"{path}.{key}: unknown key")
    turns_obj = spec.get("turns")
    if turns_obj is None:
        raise ScenarioError(f"{path}.turns: missing")
    if not isinstance(turns_obj, list):
        raise ScenarioError(f"{path}.turns: expected an array, got {_kind(turns_obj)}")
    turns = tuple(_parse_turn(f"{path}.turns[{i}]", t) for i, t in enumerate(turns_obj))
    tools: tuple[str, ...] | None = None
    if "tools" in spec:
        tools_obj = spec["tools"]
        if not isinstance(tools_obj, list):
            raise ScenarioError(f"{path}.tools: expected an array, got {_kind(tools_obj)}")
        for i, t in enumerate(tools_obj):
            if not isinstance(t, str) or not t:
                raise ScenarioError(f"{path}.tools[{i}]: expected a tool name, got {_kind(t)}")
        tools = tuple(tools_obj)
    max_turns = spec.get("max_turns")
    if max_turns is not None and (
        not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1
    ):
        raise ScenarioError(f"{path}.max_turns: expected a whole number >= 1")
    placement = spec.get("placement")
    if placement is not None and placement not in ("local", "ray"):
        raise ScenarioError(f"{path}.placement: expected 'local' or 'ray'")
    window = spec.get("context_window")
    if window is not None and (
        not isinstance(window, int) or isinstance(window, bool) or window < 1
    ):
        raise ScenarioError(f"{path}.context_window: expected a whole number of tokens >= 1")
    return ScriptedAgent(
        name=name,
        placement=placement,
        turns=turns,
        system=_opt_str(f"{path}.system", spec.get("system")),
        tools=tools,
        description=_opt_str(f"{path}.description", spec.get("description")) or "",
        model=_opt_str(f"{path}.model", spec.get("model")),
        max_turns=max_turns,
        context_window=window,
    )


def _opt_str(path: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ScenarioError(f"{path}: expected a string, got {_kind(value)}")
    return value


def _seconds(path: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ScenarioError(f"{path}: expected a number of seconds, got {_kind(value)}")
    if not math.isfinite(value) or value < 0:
        raise ScenarioError(f"{path}: expected a number of seconds >= 0, got {value}")
    return float(value)


def _count(path: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ScenarioError(f"{path}: expected a whole number >= 0, got {value!r}")
    return value


def _parse_turn(path: str, turn: Any) -> ScriptedTurn:
    if not isinstance(turn, dict):
        raise ScenarioError(f"{path}: expected an object, got {_kind(turn)}")
    for key in turn:
        if key not in _TURN_KEYS:
            raise ScenarioError(f"{path}.{key}: unknown key")
    calls: list[ScriptedToolCall] = []
    calls_obj = turn.get("tool_calls", [])
    if not isinstance(calls_obj, list):
        raise ScenarioError(f"{path}.tool_calls: expected an array, got {_kind(calls_obj)}")
    for i, call in enumerate(calls_obj):
        cpath = f"{path}.tool_calls[{i}]"
        if not isinstance(call, dict):
            raise ScenarioError(f"{cpath}: expected an object, got {_kind(call)}")
        for key in call:
            if key not in ("name", "input"):
                raise ScenarioError(f"{cpath}.{key}: unknown key")
        if "name" not in call:
            raise ScenarioError(f"{cpath}.name: missing")
        if not isinstance(call["name"], str) or not call["name"]:
            raise ScenarioError(f"{cpath}.name: expected a tool name, got {_kind(call['name'])}")
        args = call.get("input", {})
        if not isinstance(args, dict):
            raise ScenarioError(f"{cpath}.input: expected an object, got {_kind(args)}")
        calls.append(ScriptedToolCall(name=call["name"], input=args))
    usage_in: int | None = None
    usage_out: int | None = None
    if "usage" in turn:
        usage = turn["usage"]
        if not isinstance(usage, dict):
            raise ScenarioError(f"{path}.usage: expected an object, got {_kind(usage)}")
        for key in usage:
            if key not in ("input_tokens", "output_tokens"):
                raise ScenarioError(f"{path}.usage.{key}: unknown key")
        if "input_tokens" in usage:
            usage_in = _count(f"{path}.usage.input_tokens", usage["input_tokens"])
        if "output_tokens" in usage:
            usage_out = _count(f"{path}.usage.output_tokens", usage["output_tokens"])
    stop = turn.get("stop_reason")
    if stop is not None and stop not in _STOP_REASONS:
        raise ScenarioError(f"{path}.stop_reason: expected one of {', '.join(_STOP_REASONS)}")
    return ScriptedTurn(
        text=_opt_str(f"{path}.text", turn.get("text")) or "",
        thinking=_opt_str(f"{path}.thinking", turn.get("thinking")) or "",
        tool_calls=tuple(calls),
        delay_s=_seconds(f"{path}.delay_s", turn.get("delay_s", 0)),
        chunk_delay_s=_seconds(f"{path}.chunk_delay_s", turn.get("chunk_delay_s", 0)),
        error=_opt_str(f"{path}.error", turn.get("error")),
        input_tokens=usage_in,
        output_tokens=usage_out,
        stop_reason=stop,
    )


def agent_types_from_scenario(scenario: Scenario) -> list[AgentType]:
    """The agent types a scenario defines (its system prompts, tool lists and limits)."""
    out = []
    for name, script in scenario.agents.items():
        # What the scenario sets (an empty description counts as unset); the rest, defaults.
        given = ("system", "tools", "description", "model", "max_turns", "placement",
                 "context_window")
        kwargs: dict[str, Any] = {
            field: getattr(script, field) for field in given if getattr(script, field)
            not in (None, "")
        }
        out.append(AgentType(name=name, **kwargs))
    return out
