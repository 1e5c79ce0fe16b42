"""Limits a user can set: nothing in a run is unbounded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ._config import SCHEMA
from ._errors import ConfigError


def _default(name: str) -> Any:
    """A limit's default, from the one table of settings (``runtime/core/_config.py``)."""
    return SCHEMA[f"limits.{name}"].default


@attrs.frozen(kw_only=True)
class Budget:
    """A subtree's allowance. ``None`` means no limit on that measure.

    Attributes:
        tokens: input + output tokens of the agent and every agent under it.
        seconds: wall-clock seconds from the agent's start.
        tool_calls: tool calls made by the agent and every agent under it.
        usd: US dollars the model calls of the agent and every agent under it may cost
            (docs/costs.md): a call reserves its input's cost before it starts, and none
            starts once the subtree's spent and reserved dollars would pass this.
    """

    tokens: int | None = None
    seconds: float | None = None
    tool_calls: int | None = None
    usd: float | None = None

    def __attrs_post_init__(self) -> None:
        for name in _MEASURES:
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not value > 0):
                raise ConfigError(f"budget.{name}: expected a positive number, got {value!r}")

    @property
    def empty(self) -> bool:
        return all(getattr(self, name) is None for name in _MEASURES)

    def tighter(self, other: Budget | None) -> Budget:
        """The stricter of the two on every measure."""
        if other is None:
            return self

        def pick(a: Any, b: Any) -> Any:
            return b if a is None else a if b is None else min(a, b)

        return Budget(
            tokens=pick(self.tokens, other.tokens),
            seconds=pick(self.seconds, other.seconds),
            tool_calls=pick(self.tool_calls, other.tool_calls),
            usd=pick(self.usd, other.usd),
        )

    @classmethod
    def from_mapping(cls, obj: Mapping[str, Any], *, where: str = "budget") -> Budget:
        """Build from ``{"tokens": …, "seconds": …, "tool_calls": …, "usd": …}``.

        Raises:
            ConfigError: an unknown key or a bad value, naming it.
        """
        for key in obj:
            if key not in _MEASURES:
                raise ConfigError(f"{where}.{key}: unknown key ({', '.join(_MEASURES)})")
        for key, value in obj.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{where}.{key}: expected a number, got {value!r}")
        return cls(
            tokens=int(obj["tokens"]) if "tokens" in obj else None,
            seconds=float(obj["seconds"]) if "seconds" in obj else None,
            tool_calls=int(obj["tool_calls"]) if "tool_calls" in obj else None,
            usd=float(obj["usd"]) if "usd" in obj else None,
        )


_MEASURES = ("tokens", "seconds", "tool_calls", "usd")


def _positive(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"{attribute.name}: expected a positive number, got {value!r}")


def _optional_positive_int(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(f"{attribute.name}: expected a whole number >= 1, got {value!r}")


def _optional_dollars(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e12
    ):
        raise ConfigError(f"{attribute.name}: expected a number of dollars > 0, got {value!r}")


def _fraction(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ConfigError(f"{attribute.name}: expected a fraction in (0, 1], got {value!r}")


@attrs.frozen(kw_only=True)
class Limits:
    """Run-wide limits. Those a user can set (every field but ``mailbox_size``,
    ``max_result_chars`` and ``finish_grace_s``) take their defaults from the settings table.

    Attributes:
        max_turns: model turns per agent before it ends ``max_turns``.
        max_depth: deepest sub-agent (the root is depth 0); deeper ``agent`` calls fail.
        max_parallel: sub-agents running at once in the whole run; the rest wait their turn.
        max_agents: sub-agents started in the whole run.
        mailbox_size: user messages waiting for one agent.
        max_tool_output_chars: a tool result longer than this is cut (with a note).
        max_result_chars: an agent's final text kept in events and results.
        finish_grace_s: how long a cancelled node may take to report that it finished.
        context_window: every agent's context window in tokens, unless its agent type sets
            one; ``None``: known from the model's name (docs/context.md).
        compact_threshold: the fraction of the window above which an agent compacts its
            history before its next request.
        max_usd: US dollars each root agent's subtree may spend on model calls (a ``usd``
            budget, tightening its type's; docs/costs.md); ``None``: no limit.
    """

    max_turns: int = attrs.field(default=_default("max_turns"), validator=_positive)
    max_depth: int = attrs.field(default=_default("max_depth"), validator=_positive)
    max_parallel: int = attrs.field(default=_default("max_parallel"), validator=_positive)
    max_agents: int = attrs.field(default=_default("max_agents"), validator=_positive)
    mailbox_size: int = attrs.field(default=16, validator=_positive)
    max_tool_output_chars: int = attrs.field(
        default=_default("max_tool_output_chars"), validator=_positive
    )
    max_result_chars: int = attrs.field(default=100_000, validator=_positive)
    finish_grace_s: float = attrs.field(default=10.0, validator=_positive)
    context_window: int | None = attrs.field(
        default=_default("context_window"), validator=_optional_positive_int
    )
    compact_threshold: float = attrs.field(
        default=_default("compact_threshold"), validator=_fraction
    )
    max_usd: float | None = attrs.field(default=_default("max_usd"), validator=_optional_dollars)

    def public(self) -> dict[str, Any]:
        """For ``run_started.config`` (a new dict each call)."""
        # Every run asks (bench/README.md, "One small run, third pass"); a frozen instance's
        # fields never change, so its dict is made once and copied (the values are numbers
        # and None).
        hit = _PUBLIC.get(id(self))
        if hit is None or hit[0] is not self:
            if len(_PUBLIC) >= 64:
                _PUBLIC.clear()
            public = attrs.asdict(self)
            if public["max_usd"] is None:  # no money budget: the config as it always was
                del public["max_usd"]
            hit = _PUBLIC[id(self)] = (self, public)
        return dict(hit[1])


# Limits.public per instance, by id; the instance is kept with it, so its id is not reused.
_PUBLIC: dict[int, tuple[Limits, dict[str, Any]]] = {}
