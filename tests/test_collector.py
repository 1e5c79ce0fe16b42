"""The garbage collector's thresholds while runs are open (runtime/core/_collector.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from runtime import open_runtime
from runtime.core import collector_for_runs
from runtime.core._collector import RUN_THRESHOLDS


@pytest.fixture
def default_thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        yield
    finally:
        gc.set_threshold(*saved)


async def test_a_run_collects_less_often_and_gives_the_thresholds_back(
    workspace: Path, default_thresholds: None
) -> None:
    seen: list[tuple[int, int, int]] = []
    async with open_runtime(scenario={"agents": {"main": {"turns": [{"text": "hi"}]}}},
                            workspace=workspace) as rt:  # fmt: skip
        seen.append(gc.get_threshold())
        await rt.run("go")
    assert seen == [RUN_THRESHOLDS]
    assert gc.get_threshold() == (700, 10, 10)


async def test_concurrent_runs_share_one_change_undone_by_the_last(
    default_thresholds: None,
) -> None:
    first, second = collector_for_runs(), collector_for_runs()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_threshold() == RUN_THRESHOLDS  # the second run is still open
    second.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10)
    await trio.lowlevel.checkpoint()


def test_the_processs_own_choice_is_kept(default_thresholds: None) -> None:
    gc.set_threshold(50_000, 5, 5)  # higher than the runtime's: left alone
    with collector_for_runs():
        assert gc.get_threshold() == (50_000, 5, 5)
    gc.set_threshold(700, 10, 10)
    with collector_for_runs():
        gc.set_threshold(1_000, 10, 10)  # the process changed it during the run: kept
    assert gc.get_threshold() == (1_000, 10, 10)
    gc.disable()
    try:
        with collector_for_runs():
            assert gc.get_threshold() == (1_000, 10, 10)
    finally:
        gc.enable()
