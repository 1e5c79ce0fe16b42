"""The reliability suite's options and its closing figures.

``--long`` runs the big versions (a 10,000-agent soak, more seeds). pytest only honours an
option registered by an *initial* conftest: this one is initial when ``tests/reliability`` (or a
file in it) is on the command line. From the repository root (``pytest``, ``.ci/run``) use the
environment instead: ``TRIO_AGENTS_LONG=1 pytest tests/reliability``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.reliability._checks import STATS, long_mode


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        default=False,
        help="reliability suite: run the long soak and more random seeds",
    )


@pytest.fixture(scope="session")
def long(request: pytest.FixtureRequest) -> bool:
    """Whether the big versions run (``--long`` or ``TRIO_AGENTS_LONG=1``)."""
    return long_mode(request.config)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not STATS:
        return
    terminalreporter.section("reliability figures")
    # Each figure counts what its own test checked and found right; two figures on one topic
    # come from different tests and different runs, so neither is a share of the other.
    terminalreporter.write_line("(each line: checks that passed, counted by the test that made them)")
    for key in sorted(STATS):
        terminalreporter.write_line(f"{key}: {STATS[key]:,}")
