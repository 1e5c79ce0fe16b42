"""What a model call costs: a dated price table, the user's ``[prices."MODEL"]`` over it, and
the cost of one call's usage (docs/costs.md).

Prices are US dollars per million tokens. A model is looked up by its name as the provider is
asked for it, then without a provider prefix (``anthropic/``), a release date
(``claude-sonnet-4-5-20250929``, ``gpt-4o-2024-08-06``) or ``-latest``; at each step the
user's rows come before the built-in ones. Nothing is matched by a looser prefix: a model the
table does not name costs *unknown* (``None``), never zero, and the run says so once per model
in a warning line (shown with ``-v``).

This module is part of the core layer because budgets (``runtime/core/_budget.py``) reserve a
call's cost before it starts; providers only report the usage.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

import attrs

from runtime._logs import get_logger

from ._errors import ConfigError

_log = get_logger("trio_agents.prices")

PRICES_DATE: Final = "2026-12-01"
"""When the built-in table was last checked against the vendors' pricing pages."""

PRICES_SOURCES: Final = (
    "https://platform.claude.com/docs/en/about-claude/pricing",
    "https://platform.openai.com/docs/pricing",
)
"""Where the built-in figures come from (docs/costs.md)."""

PRICE_KEYS: Final = (
    "input_per_mtok",
    "output_per_mtok",
    "cache_read_per_mtok",
    "cache_write_per_mtok",
)
"""The keys of a ``[prices."MODEL"]`` table."""

_MTOK: Final = 1_000_000


@attrs.frozen(kw_only=True)
class Price:
    """One model's prices in US dollars per million tokens.

    Attributes:
        input_per_mtok: input tokens that are neither read from nor written to a cache.
        output_per_mtok: output tokens (reasoning tokens included: the APIs count them so).
        cache_read_per_mtok: input tokens read from the prompt cache (default: the input price).
        cache_write_per_mtok: input tokens written to the prompt cache (Anthropic's 5-minute
            writes; OpenAI charges none beyond the input price, the default).
    """

    input_per_mtok: float
    output_per_mtok: float
    cache_read_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None

    def __attrs_post_init__(self) -> None:
        for key in PRICE_KEYS:
            value = getattr(self, key)
            if value is not None and (not _is_number(value) or not 0 <= value < math.inf):
                raise ConfigError(f"{key}: expected a number >= 0, got {value!r}")

    def cost(
        self,
        input_tokens: int,
        output_tokens: int,
        *,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> float:
        """The dollars of one call. *input_tokens* counts the cached ones too, as the runtime's
        usage does everywhere (``turn_finished.input_tokens``)."""
        read = self.input_per_mtok if self.cache_read_per_mtok is None else self.cache_read_per_mtok
        write = (
            self.input_per_mtok if self.cache_write_per_mtok is None else self.cache_write_per_mtok
        )
        plain = max(0, input_tokens - cache_read_tokens - cache_write_tokens)
        dollars = (
            plain * self.input_per_mtok
            + cache_read_tokens * read
            + cache_write_tokens * write
            + output_tokens * self.output_per_mtok
        ) / _MTOK
        return round(dollars, 9)


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float)


def _p(inp: float, out: float, read: float, write: float | None = None) -> Price:
    return Price(
        input_per_mtok=inp, output_per_mtok=out, cache_read_per_mtok=read,
        cache_write_per_mtok=write,
    )  # fmt: skip


# The families people use, as the pricing pages list them on PRICES_DATE (docs/costs.md has
# the same table for readers). Anthropic: base input, output, cache hits, 5-minute cache
# writes. OpenAI: input, output, cached input; no cache-write charge.
BUILTIN_PRICES: Final[Mapping[str, Price]] = {
    # Anthropic
    "claude-opus-5": _p(5.0, 25.0, 0.50, 6.25),
    "claude-opus-4-8": _p(5.0, 25.0, 0.50, 6.25),
    "claude-opus-4-7": _p(5.0, 25.0, 0.50, 6.25),
    "claude-opus-4-6": _p(5.0, 25.0, 0.50, 6.25),
    "claude-opus-4-5": _p(5.0, 25.0, 0.50, 6.25),
    "claude-opus-4-1": _p(15.0, 75.0, 1.50, 18.75),
    "claude-opus-4-0": _p(15.0, 75.0, 1.50, 18.75),
    "claude-opus-4": _p(15.0, 75.0, 1.50, 18.75),
    "claude-3-opus": _p(15.0, 75.0, 1.50, 18.75),
    "claude-sonnet-4-6": _p(3.0, 15.0, 0.30, 3.75),
    "claude-sonnet-4-5": _p(3.0, 15.0, 0.30, 3.75),
    "claude-sonnet-4-0": _p(3.0, 15.0, 0.30, 3.75),
    "claude-sonnet-4": _p(3.0, 15.0, 0.30, 3.75),
    "claude-3-7-sonnet": _p(3.0, 15.0, 0.30, 3.75),
    "claude-3-5-sonnet": _p(3.0, 15.0, 0.30, 3.75),
    "claude-haiku-4-5": _p(1.0, 5.0, 0.10, 1.25),
    "claude-3-5-haiku": _p(0.80, 4.0, 0.08, 1.0),
    "claude-3-haiku": _p(0.25, 1.25, 0.03, 0.30),
    # OpenAI
    "gpt-5.5": _p(5.0, 30.0, 0.50),
    "gpt-5.4": _p(2.50, 15.0, 0.25),
    "gpt-5.4-mini": _p(0.75, 4.50, 0.075),
    "gpt-5.4-nano": _p(0.20, 1.25, 0.02),
    "gpt-5.1": _p(1.25, 10.0, 0.125),
    "gpt-5": _p(1.25, 10.0, 0.125),
    "gpt-5-mini": _p(0.25, 2.0, 0.025),
    "gpt-5-nano": _p(0.05, 0.40, 0.005),
    "gpt-4.1": _p(2.0, 8.0, 0.50),
    "gpt-4.1-mini": _p(0.40, 1.60, 0.10),
    "gpt-4.1-nano": _p(0.10, 0.40, 0.025),
    "gpt-4o": _p(2.50, 10.0, 1.25),
    "gpt-4o-mini": _p(0.15, 0.60, 0.075),
    "o3": _p(2.0, 8.0, 0.50),
    "o3-mini": _p(1.10, 4.40, 0.55),
    "o4-mini": _p(1.10, 4.40, 0.275),
}
"""The built-in table, by model family (see :data:`PRICES_DATE`, :data:`PRICES_SOURCES`)."""

# The runtime's own name for a scenario's model (the scripted provider, a model function):
# no one prices it, and saying so on every scripted run would be noise (docs/costs.md).
_PLACEHOLDERS: Final = frozenset({"scripted"})

# A release date at the end: -20250929 (Anthropic) or -2024-08-06 (OpenAI).
_DATED = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})$")


def _candidates(model: str) -> Iterator[str]:
    """*model*'s names from the most to the least specific (see the module docstring)."""
    name = model.strip()
    yield name
    name = name.lower().rpartition("/")[2]  # openrouter-style "anthropic/claude-…"
    yield name
    for suffix in ("-latest", "[1m]"):
        if name.endswith(suffix):
            name = name.removesuffix(suffix)
            yield name
    undated = _DATED.sub("", name)
    if undated != name:
        yield undated


def check_prices(value: Any, *, where: str = "prices") -> dict[str, Price]:
    """``{"MODEL": {"input_per_mtok": …, …}}`` (a settings file's ``[prices."MODEL"]`` tables,
    or ``open_runtime(prices=…)``) as :class:`Price` rows. A model the built-in table knows may
    give only the prices it changes; a new one needs at least its input and output prices.

    Raises:
        ConfigError: not a table of tables, an unknown key, a price that is not a number
            or is negative: naming ``prices."MODEL".key``.
    """
    if not isinstance(value, Mapping):
        raise ConfigError(f'{where}: expected tables [prices."MODEL"], got {value!r}')
    out: dict[str, Price] = {}
    for model, row in value.items():
        here = f'{where}."{model}"'
        if isinstance(row, Price):
            out[str(model)] = row
            continue
        if not isinstance(model, str) or not model.strip():
            raise ConfigError(f"{where}: expected model names, got {model!r}")
        if not isinstance(row, Mapping):
            raise ConfigError(f"{here}: expected a table ({', '.join(PRICE_KEYS)}), got {row!r}")
        for key, price in row.items():
            if key not in PRICE_KEYS:
                raise ConfigError(f"{here}.{key}: unknown key ({', '.join(PRICE_KEYS)})")
            if not _is_number(price) or not 0 <= price < math.inf:
                raise ConfigError(f"{here}.{key}: expected a number >= 0 (dollars per million "
                                  f"tokens), got {price!r}")
        base = next((BUILTIN_PRICES[n] for n in _candidates(model) if n in BUILTIN_PRICES), None)
        fields = attrs.asdict(base) if base is not None else {}
        fields.update({k: float(v) for k, v in row.items()})
        for key in ("input_per_mtok", "output_per_mtok"):
            if key not in fields:
                raise ConfigError(f"{here}.{key}: required for a model the built-in table "
                                  "does not price")
        out[model] = Price(**fields)
    return out


_BUILTIN_FOUND: dict[str, Price | None] = {}


def _builtin_price(model: str) -> Price | None:
    """*model*'s row of the built-in table (by its most specific name there), cached for the
    process: a table without rows of the user's is made for every run, and finding a name
    costs a regular expression (bench/README.md, "The tenth session: fan-out won back")."""
    try:
        return _BUILTIN_FOUND[model]
    except KeyError:
        pass
    found = next((BUILTIN_PRICES[n] for n in _candidates(model) if n in BUILTIN_PRICES), None)
    if len(_BUILTIN_FOUND) >= 256:
        _BUILTIN_FOUND.clear()
    _BUILTIN_FOUND[model] = found
    return found


class PriceTable:
    """The built-in table with the user's rows over it; lookups are cached per model name.

    Args:
        overrides: rows that add to or replace the built-in ones (:func:`check_prices`).
    """

    def __init__(self, overrides: Mapping[str, Price] | None = None) -> None:
        self.overrides: Mapping[str, Price] = dict(overrides or {})
        self._found: dict[str, Price | None] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled to a Ray host with the run's settings: the rows, not the cache.
        return (PriceTable, (self.overrides,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PriceTable) and self.overrides == other.overrides

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.overrides)))

    def describe(self) -> dict[str, dict[str, float]]:
        """The user's rows as ``[prices."MODEL"]`` tables (for ``run_started.config``)."""
        return {
            model: {k: v for k, v in attrs.asdict(price).items() if v is not None}
            for model, price in self.overrides.items()
        }

    def lookup(self, model: str) -> Price | None:
        """*model*'s prices, or ``None`` when neither table names it (its cost is unknown)."""
        try:
            return self._found[model]
        except KeyError:
            pass
        found = None
        if not self.overrides:  # most runs: the built-in table's answer, known process-wide
            found = _builtin_price(model)
        for name in _candidates(model) if self.overrides else ():
            found = self.overrides.get(name) or BUILTIN_PRICES.get(name)
            if found is not None:
                break
        if len(self._found) >= 256:
            self._found.clear()
        self._found[model] = found
        if found is None and model not in _PLACEHOLDERS:
            _log.warning("model has no price: its cost is unknown (add [prices.\"MODEL\"], "
                         "docs/costs.md)", model=model)
        return found

    def cost(
        self,
        model: str,
        input_tokens: int,
        output_tokens: int,
        *,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> float | None:
        """The dollars of one call of *model*, or ``None`` when its price is unknown."""
        price = self.lookup(model)
        if price is None:
            return None
        return price.cost(
            input_tokens, output_tokens,
            cache_read_tokens=cache_read_tokens, cache_write_tokens=cache_write_tokens,
        )  # fmt: skip


def add_costs(a: float | None, b: float | None) -> float | None:
    """Two costs added; unknown (``None``) if either is: a sum that left a call out would
    read as the whole (docs/costs.md, "Unknown prices")."""
    if a is None or b is None:
        return None
    return round(a + b, 9)
