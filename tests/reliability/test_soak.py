"""Soak: sub-agents in batches through one runtime, memory flat across batches.

Each batch is a root agent fanning out to a batch of sub-agents (one tool call each, then an
answer), run to its end in the same runtime, trace on. After each batch the Python heap is
measured (tracemalloc, after a full collection). After a warm-up, the heap must not grow with
the number of batches beyond noise: a leak of even 100 bytes per finished agent would show as
a steady climb.

Normal run: 8 batches of 125 (1,000 agents). ``--long`` / ``TRIO_AGENTS_LONG=1``: 20 batches of
500 (10,000 agents).
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path
from typing import Any

import trio

from runtime import Limits
from tests.harness import agent_call
from tests.reliability._checks import STATS, FaultyTool, checked_runtime

WARM_UP = 2


def batch_scenario(size: int) -> dict[str, Any]:
    return {
        "agents": {
            "main": {
                "tools": ["agent"],
                "turns": [
                    {
                        "text": "A batch.",
                        "tool_calls": [agent_call(f"part {i}", "worker") for i in range(size)],
                    },
                    {"text": "Batch done."},
                ],
            },
            "worker": {
                "tools": ["faulty"],
                "turns": [
                    {
                        "text": "working",
                        "tool_calls": [{"name": "faulty", "input": {"mode": "ok"}}],
                    },
                    {"text": "done"},
                ],
            },
        }
    }


async def test_memory_stays_flat_across_batches_of_sub_agents(
    long: bool, workspace: Path, tmp_path: Path
) -> None:
    batches, size = (20, 500) if long else (8, 125)
    heap: list[int] = []
    started = tracemalloc.is_tracing()
    if not started:
        tracemalloc.start()
    try:
        agents = 0

        def count(event: Any) -> None:
            nonlocal agents
            agents += event.type == "agent_started"

        # The events are not kept in memory (that list would be the growth measured); the
        # checks read them back from the trace file at the end.
        async with checked_runtime(
            workspace,
            tmp_path / "soak.jsonl",
            record=False,
            on_event=count,
            scenario=batch_scenario(size),
            extra_tools=[FaultyTool()],
            limits=Limits(max_parallel=size, max_agents=batches * (size + 1) + 1),
        ) as rt:
            for _ in range(batches):
                with trio.fail_after(600):
                    outcome = await rt.run("Run a batch.")
                assert outcome.status == "completed"
                # Let the trace writer flush its buffer (it writes at most every 20 ms).
                await trio.sleep(0.1)
                gc.collect()
                heap.append(tracemalloc.get_traced_memory()[0])
    finally:
        if not started:
            tracemalloc.stop()
    assert agents == batches * (size + 1)
    steady = heap[WARM_UP:]
    growth = steady[-1] - steady[0]
    per_agent = growth / ((len(steady) - 1) * size)
    # Noise: a few KB either way (allocator pools, a dict resizing). A leak per agent shows
    # as a climb proportional to the agents run since the warm-up.
    assert per_agent < 32, f"heap grew {growth} bytes over {len(steady) - 1} batches: {heap}"
    assert max(steady) - min(steady) < 256 * 1024, f"heap not flat: {heap}"
    STATS["agents in soak"] += agents
