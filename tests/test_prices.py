"""The price table and a call's cost (runtime/core/_prices.py, docs/costs.md)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import structlog

from runtime.core import BUILTIN_PRICES, PRICES_DATE, ConfigError, Price, PriceTable, check_prices
from runtime.core._prices import add_costs

DOCS = Path(__file__).resolve().parents[1] / "docs" / "costs.md"


def test_a_model_is_found_by_its_exact_name() -> None:
    assert PriceTable().lookup("claude-sonnet-4-5") == BUILTIN_PRICES["claude-sonnet-4-5"]
    assert PriceTable().lookup("gpt-4o-mini") == BUILTIN_PRICES["gpt-4o-mini"]


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-3-5-haiku-20241022", "claude-3-5-haiku"),
        ("claude-3-7-sonnet-latest", "claude-3-7-sonnet"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("anthropic/claude-opus-4-5", "claude-opus-4-5"),
        ("Claude-Haiku-4-5", "claude-haiku-4-5"),
        ("claude-sonnet-4-6[1m]", "claude-sonnet-4-6"),
    ],
)
def test_a_dated_or_prefixed_name_is_its_family(model: str, family: str) -> None:
    assert PriceTable().lookup(model) == BUILTIN_PRICES[family]


def test_no_looser_prefix_is_matched_and_the_unknown_model_is_said_once() -> None:
    table = PriceTable()
    capture = structlog.testing.LogCapture()
    structlog.configure(  # the suite's own configuration is restored after the test
        processors=[capture], wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG)
    )
    for _ in range(3):
        assert table.lookup("gpt-4o-audio-preview") is None
        assert table.cost("gpt-4o-audio-preview", 100, 10) is None
    lines = [c for c in capture.entries if "no price" in c["event"]]
    assert [(c["log_level"], c["model"]) for c in lines] == [("warning", "gpt-4o-audio-preview")]


def test_a_users_row_overrides_the_family_and_a_dated_row_beats_it() -> None:
    rows = check_prices({
        "claude-sonnet-4-5": {"cache_read_per_mtok": 0.25},
        "claude-sonnet-4-5-20250929": {"input_per_mtok": 1, "output_per_mtok": 2},
        "my-llama": {"input_per_mtok": 0, "output_per_mtok": 0},
    })
    table = PriceTable(rows)
    family = table.lookup("claude-sonnet-4-5-20990101")
    assert family == Price(input_per_mtok=3.0, output_per_mtok=15.0, cache_read_per_mtok=0.25,
                           cache_write_per_mtok=3.75)
    # A dated row of a known family takes the rest of its row from the family's.
    assert table.lookup("claude-sonnet-4-5-20250929") == Price(
        input_per_mtok=1.0, output_per_mtok=2.0, cache_read_per_mtok=0.3,
        cache_write_per_mtok=3.75,
    )
    assert table.cost("my-llama", 10**6, 10**6) == pytest.approx(0.0)  # zero, not unknown


def test_the_cost_prices_the_cached_parts_of_the_input_apart() -> None:
    sonnet = BUILTIN_PRICES["claude-sonnet-4-5"]
    # 1M input of which 200k read from the cache and 100k written to it, 100k output.
    got = sonnet.cost(1_000_000, 100_000, cache_read_tokens=200_000, cache_write_tokens=100_000)
    assert got == pytest.approx(0.7 * 3 + 0.2 * 0.3 + 0.1 * 3.75 + 0.1 * 15)
    # OpenAI's cache writes cost the input price (no cache-write column).
    gpt = BUILTIN_PRICES["gpt-4o"]
    assert gpt.cost(1000, 0, cache_write_tokens=1000) == gpt.cost(1000, 0)


def test_unknown_is_not_zero_when_costs_add_up() -> None:
    assert add_costs(0.5, 0.25) == pytest.approx(0.75)
    assert add_costs(0.5, None) is None
    assert add_costs(None, 0.0) is None


@pytest.mark.parametrize(
    ("rows", "line"),
    [
        ({"gpt-4o": {"input_per_mtok": "2.5"}},
         'prices."gpt-4o".input_per_mtok: expected a number >= 0 (dollars per million tokens), '
         "got '2.5'"),
        ({"gpt-4o": {"output_per_mtok": -1}},
         'prices."gpt-4o".output_per_mtok: expected a number >= 0'),
        ({"gpt-4o": {"input_per_mtk": 1}}, 'prices."gpt-4o".input_per_mtk: unknown key'),
        ({"new-model": {"input_per_mtok": 1}},
         'prices."new-model".output_per_mtok: required for a model the built-in table'),
        ({"gpt-4o": 3}, 'prices."gpt-4o": expected a table'),
        ({"gpt-4o": {"input_per_mtok": True}}, 'prices."gpt-4o".input_per_mtok: expected a'),
    ],
)
def test_a_bad_row_is_one_error_naming_the_setting(rows: dict[str, object], line: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_prices(rows)
    assert str(info.value).startswith(line)
    assert "\n" not in str(info.value)


def test_the_docs_table_is_the_codes_table_with_its_date() -> None:
    text = DOCS.read_text()
    assert f"**{PRICES_DATE}**" in text

    def shown(value: float | None) -> str:
        return "—" if value is None else f"{value:g}"

    rows = {
        m[1]: m[2]
        for m in re.finditer(r"^\| `([^`]+)` \| (.+) \|$", text, re.M)
    }
    expected = {
        model: " | ".join(shown(v) for v in (p.input_per_mtok, p.output_per_mtok,
                                               p.cache_read_per_mtok, p.cache_write_per_mtok))
        for model, p in BUILTIN_PRICES.items()
    }
    assert rows == expected
