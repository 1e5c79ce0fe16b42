"""The garbage collector while runs are open (docs/architecture.md, "The garbage collector").

A fan-out keeps thousands of agents alive at once, each allocating as it streams; with
CPython's default thresholds the young generation is collected every 700 allocations and, as the
survivors pile up, the whole heap is walked again and again: on 1,000 sub-agents a fifth of the
run's CPU time went to the collector. Reference counting frees almost all of a run's garbage;
the collector only finds cycles, which can wait for more allocations. So while any run is open
the young generation is collected less often — the process's own choice is kept where it made
one (a threshold above ours, or the collector turned off), and restored when the last run
closes, unless someone changed it meanwhile.
"""

from __future__ import annotations

import gc
from collections.abc import Generator
from contextlib import contextmanager
from typing import Final

__all__ = ["RUN_THRESHOLDS", "collector_for_runs"]

RUN_THRESHOLDS: Final = (20_000, 20, 20)
"""The collector's thresholds while a run is open (those of a Ray host's worker, too)."""

_open_runs = 0
_saved: tuple[int, int, int] | None = None


@contextmanager
def collector_for_runs() -> Generator[None, None, None]:
    """Collect the young generation less often while the block runs (nested and concurrent
    runs share one change: the first to open makes it, the last to close undoes it)."""
    global _open_runs, _saved
    if _open_runs == 0 and gc.isenabled() and gc.get_threshold()[0] < RUN_THRESHOLDS[0]:
        _saved = gc.get_threshold()
        gc.set_threshold(*RUN_THRESHOLDS)
    _open_runs += 1
    try:
        yield
    finally:
        _open_runs -= 1
        if _open_runs == 0 and _saved is not None:
            if gc.get_threshold() == RUN_THRESHOLDS:  # nobody else changed it meanwhile
                gc.set_threshold(*_saved)
            _saved = None
