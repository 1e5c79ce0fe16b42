"""Agent types: named agent definitions (system prompt, tools, model, limits, budget).

Filled from the Python API, from scenario files and from an ``--agents`` TOML file::

    [agents.reviewer]
    description = "Reviews a diff"
    system = "You review code."
    tools = ["read", "grep", "glob"]
    model = "gpt-4.1-mini"
    max_turns = 10
    budget = { tokens = 20000, seconds = 120, tool_calls = 30 }
    context_window = 32000
    isolation = "worktree"      # a git worktree of its own per agent (docs/worktrees.md)
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import ItemsView, Iterable, Iterator, Mapping, ValuesView
from pathlib import Path
from typing import Any, Literal

import attrs

from ._errors import ConfigError
from ._limits import Budget

Placement = Literal["local", "ray"]
Isolation = Literal["none", "worktree"]

DEFAULT_SYSTEM = (
    "You are a capable software agent working in a workspace folder. Use the tools to inspect "
    "and change files and to run commands. Split independent work across parallel sub-agents "
    "with the `agent` tool when that is faster. Answer concisely when the task is done."
)
GENERAL_SYSTEM = (
    "You are a sub-agent given one focused task. Do it with the tools you have, then answer "
    "with a short report of what you found or did: your answer is all the caller sees."
)


def _pairs(value: Any) -> tuple[tuple[Any, Any], ...]:
    # A mapping in, sorted pairs stored: an agent type stays hashable and comparable.
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted((k, v) for k, v in items))


# Its hash is cached: a run's per-type setups are looked up by type (runtime/core/_loop.py).
def _output_key(value: Any) -> Any:
    # A JSON Schema given as a mapping is kept as its canonical JSON text: agent types are
    # frozen and hashed (each type's setup is made once per run), and a dict is neither.
    if isinstance(value, Mapping):
        import orjson

        return orjson.dumps(dict(value), option=orjson.OPT_SORT_KEYS).decode()
    return value


@attrs.frozen(kw_only=True, cache_hash=True)
class AgentType:
    """A kind of agent.

    Attributes:
        tools: tool names it may use; ``None`` means every tool the runtime has.
        max_turns: overrides the run's ``max_turns`` for agents of this type.
        budget: the allowance of each agent of this type (its whole subtree).
        placement: where its subtree runs (``local`` in this process).
        context_window: its model's context window in tokens (default: the run's, else known
            from the model's name; docs/context.md).
        ray_resources: with ``placement = "ray"``: only on nodes that have at least these Ray
            resources (``{"GPU": 1}``, a custom ``{"nfs": 1}``); a selector, nothing is
            reserved (docs/cluster.md).
        ray_labels: with ``placement = "ray"``: only on nodes with these Ray labels.
        output_type: the value its agents must end with: a Python type, or a JSON Schema (a
            mapping; kept as its JSON text) (docs/python-api.md, "Typed outputs").
        output_retries: how many final answers that do not match *output_type* are sent back
            to the model with the error before the agent fails.
        isolation: ``worktree``: each agent of this type works in a git worktree of its own,
            on a new branch from the workspace's HEAD (docs/worktrees.md); ``none``: in the
            workspace of its parent.
    """

    name: str
    description: str = ""
    system: str = GENERAL_SYSTEM
    tools: tuple[str, ...] | None = None
    model: str | None = None
    max_turns: int | None = None
    budget: Budget | None = None
    placement: Placement = "local"
    context_window: int | None = None
    ray_resources: tuple[tuple[str, float], ...] = attrs.field(default=(), converter=_pairs)
    ray_labels: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)
    output_type: Any = attrs.field(default=None, converter=_output_key)
    output_retries: int = 2
    isolation: Isolation = "none"

    def merged(self, other: AgentType) -> AgentType:
        """*other*'s explicit settings over this one's (a later definition refines an earlier)."""
        return _merged(self, other)


@functools.lru_cache(maxsize=256)
def _merged(base: AgentType, other: AgentType) -> AgentType:
    # Remembered: every run merges its scenario's or project's types over the defaults, and
    # both are immutable (equal inputs, equal result).
    changes = {
        f.name: getattr(other, f.name)
        for f in attrs.fields(AgentType)
        if getattr(other, f.name) != f.default and f.name != "name"
    }
    return attrs.evolve(base, **changes)


def default_agent_types() -> list[AgentType]:
    """``main`` (the root) and ``general`` (the default sub-agent type)."""
    return list(_DEFAULT_TYPES)


_DEFAULT_TYPES = (
    AgentType(name="main", description="The root agent.", system=DEFAULT_SYSTEM),
    AgentType(name="general", description="A general-purpose sub-agent for any focused task."),
)


class AgentTypes(Mapping[str, AgentType]):
    """The registry of agent types known to a run."""

    def __init__(self, types: Iterable[AgentType] = ()) -> None:
        self._types: dict[str, AgentType] = {t.name: t for t in _DEFAULT_TYPES}
        #: Counts the changes (:meth:`add`): what was made from the table is made again after one.
        self.version = 0
        for t in types:
            self.add(t)

    def add(self, agent_type: AgentType) -> None:
        """Add or refine a type (explicit settings of the newer definition win)."""
        old = self._types.get(agent_type.name)
        self._types[agent_type.name] = old.merged(agent_type) if old else agent_type
        self.version += 1

    def __getitem__(self, name: str) -> AgentType:
        return self._types[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._types)

    def __len__(self) -> int:
        return len(self._types)

    def values(self) -> ValuesView[AgentType]:  # the dict's own: Mapping's calls __getitem__
        return self._types.values()

    def items(self) -> ItemsView[str, AgentType]:
        return self._types.items()

    def lookup(self, name: str) -> AgentType:
        """The type *name*.

        Raises:
            ConfigError: unknown, naming the known ones.
        """
        try:
            return self._types[name]
        except KeyError:
            known = ", ".join(sorted(self._types))
            raise ConfigError(f"unknown agent type {name!r}; known types: {known}") from None


_TOML_KEYS = {
    "description",
    "system",
    "tools",
    "model",
    "max_turns",
    "budget",
    "placement",
    "context_window",
    "ray_resources",
    "ray_labels",
    "output_type",
    "output_retries",
    "isolation",
}


def load_agent_types(path: str | Path) -> list[AgentType]:
    """Read agent types from a TOML file (``[agents.NAME]`` tables).

    Raises:
        ConfigError: unreadable, not TOML, or a bad entry (naming ``agents.NAME.key``).
    """
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}") from exc
    try:
        return agent_types_from_mapping(data)
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None


def agent_types_from_mapping(data: Mapping[str, Any]) -> list[AgentType]:
    """Agent types from a decoded ``{"agents": {NAME: {...}}}`` mapping."""
    agents = data.get("agents")
    if not isinstance(agents, dict):
        raise ConfigError("agents: missing (expected [agents.NAME] tables)")
    out = []
    for name, spec in agents.items():
        where = f"agents.{name}"
        if not isinstance(spec, dict):
            raise ConfigError(f"{where}: expected a table")
        for key in spec:
            if key not in _TOML_KEYS:
                raise ConfigError(f"{where}.{key}: unknown key")
        kwargs: dict[str, Any] = {"name": name}
        for key in ("description", "system", "model"):
            if key in spec:
                if not isinstance(spec[key], str):
                    raise ConfigError(f"{where}.{key}: expected a string")
                kwargs[key] = spec[key]
        if "tools" in spec:
            tools = spec["tools"]
            if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
                raise ConfigError(f"{where}.tools: expected a list of tool names")
            kwargs["tools"] = tuple(tools)
        if "max_turns" in spec:
            mt = spec["max_turns"]
            if isinstance(mt, bool) or not isinstance(mt, int) or mt < 1:
                raise ConfigError(f"{where}.max_turns: expected a whole number >= 1")
            kwargs["max_turns"] = mt
        if "budget" in spec:
            if not isinstance(spec["budget"], dict):
                raise ConfigError(f"{where}.budget: expected a table")
            kwargs["budget"] = Budget.from_mapping(spec["budget"], where=f"{where}.budget")
        if "context_window" in spec:
            cw = spec["context_window"]
            if isinstance(cw, bool) or not isinstance(cw, int) or cw < 1:
                raise ConfigError(f"{where}.context_window: expected a whole number of tokens >= 1")
            kwargs["context_window"] = cw
        if "placement" in spec:
            if spec["placement"] not in ("local", "ray"):
                raise ConfigError(f"{where}.placement: expected 'local' or 'ray'")
            kwargs["placement"] = spec["placement"]
        if "ray_resources" in spec:
            res = spec["ray_resources"]
            if not isinstance(res, dict) or not all(
                isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
                for v in res.values()
            ):
                raise ConfigError(f"{where}.ray_resources: expected a table of amounts >= 0")
            kwargs["ray_resources"] = {str(k): float(v) for k, v in res.items()}
        if "ray_labels" in spec:
            labels = spec["ray_labels"]
            if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
                raise ConfigError(f"{where}.ray_labels: expected a table of strings")
            kwargs["ray_labels"] = labels
        if "output_type" in spec:
            schema = spec["output_type"]
            if not isinstance(schema, dict):
                raise ConfigError(f"{where}.output_type: expected a JSON Schema (a table)")
            from ._output import output_spec

            try:
                output_spec(schema)
            except ConfigError as exc:
                raise ConfigError(f"{where}.{exc}") from None
            kwargs["output_type"] = schema
        if "output_retries" in spec:
            tries = spec["output_retries"]
            if isinstance(tries, bool) or not isinstance(tries, int) or not 0 <= tries <= 10:
                raise ConfigError(f"{where}.output_retries: expected a whole number from 0 to 10")
            kwargs["output_retries"] = tries
        if "isolation" in spec:
            if spec["isolation"] not in ("none", "worktree"):
                raise ConfigError(f"{where}.isolation: expected 'worktree' or 'none'")
            kwargs["isolation"] = spec["isolation"]
        out.append(AgentType(**kwargs))
    return out
