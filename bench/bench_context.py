"""Context accounting: the per-turn cost of deciding whether to compact stays flat (issue 18).

An agent's history grows by one turn at a time (an assistant message with a tool call, then a
user message with a 2,000-character result) up to 2,000 turns. At every turn the agent's
:class:`~runtime.core._compaction.Compactor` does what the loop asks of it: ``before_request``
(count what was appended, decide) and ``after_turn`` (take the provider's report, count the
answer). The window is large enough that nothing is compacted: this is the cost every turn
pays. Figures:

* ``context_decision_first_100`` / ``context_decision_last_100`` — mean microseconds per turn
  over turns 1-100 and 1,901-2,000; ``context_decision_growth`` is the second over the first
  (target <= 1.5: flat).
* ``context_full_recount_last_100`` — for contrast, what counting the whole history each turn
  (the naive way) costs at turns 1,901-2,000.
* ``context_compaction_at_2000`` — one compaction (trim, then a summary from the scripted
  provider) of the 2,000-turn history, in milliseconds: the price paid when it does happen.

Each figure is the median of ``--reps`` repetitions. Prints one JSON object per figure, one a
line.

Usage: ``python bench/bench_context.py [--reps N] [--turns N]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import structlog
import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.core._compaction import Compactor
from runtime.core._context_window import history_chars
from runtime.core._messages import AgentState, Message, TextBlock, ToolResultBlock, ToolUseBlock
from runtime.providers._scenario import Scenario
from runtime.providers._scripted import ScriptedProvider
from tools import builtin_tools

BLOCK = 100


def make_turn(i: int) -> tuple[Message, Message]:
    answer = Message(
        role="assistant",
        content=(
            TextBlock(text=f"Turn {i}: " + "looking at the next file " * 16),
            ToolUseBlock(id=f"call_{i}", name="read", input={"path": f"src/file_{i}.py"}),
        ),
    )
    result = Message(
        role="user",
        content=(ToolResultBlock(tool_use_id=f"call_{i}", content=f"{i}\t" + "x" * 2000),),
    )
    return answer, result


async def _noop_emit(*_: Any, **__: Any) -> None:
    await trio.lowlevel.checkpoint()  # what a bus emit costs at least; only on a compaction


def make_compactor(window: int) -> Compactor:
    return Compactor(
        provider=ScriptedProvider(Scenario.from_obj({"agents": {"main": {"turns": []}}})),
        model="bench",
        agent_type="main",
        agent_id="agent-1",
        window=window,
        threshold=0.8,
        fixed=5_000,
        tools={t.name: t for t in builtin_tools()},
        emit=_noop_emit,
        log=structlog.get_logger("bench"),
        prompt="the task",
    )


async def one_run(turns: int) -> tuple[list[float], list[float], float]:
    """Per-turn decision costs (s), full-recount costs of the last block (s), one compaction."""
    compactor = make_compactor(window=10**9)
    state = AgentState(agent_id="agent-1", name="main", depth=0, messages=[])
    state.messages.append(Message(role="user", content=(TextBlock(text="the task"),)))
    decision: list[float] = []
    recount: list[float] = []
    clock = time.perf_counter
    tokens = 2_000
    for i in range(turns):
        answer, result = make_turn(i)
        t0 = clock()
        await compactor.before_request(state)
        state.messages.append(answer)
        compactor.after_turn(state, tokens)
        decision.append(clock() - t0)
        state.messages.append(result)
        tokens += 650
    # The naive way, measured apart (walking the whole history evicts the caches the turns
    # above would otherwise find warm): count the whole 2,000-turn history, once a turn.
    for _ in range(BLOCK):
        t0 = clock()
        history_chars(state.messages)
        recount.append(clock() - t0)
    # Now a window this history overflows: one real compaction.
    small = make_compactor(window=100_000)
    small.meter.sync(state.messages)
    t0 = clock()
    await small.compact(state)
    return decision, recount, clock() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--turns", type=int, default=2_000)
    args = parser.parse_args()
    first: list[float] = []
    last: list[float] = []
    naive: list[float] = []
    compaction: list[float] = []
    for _ in range(args.reps):
        decision, recount, compact_s = trio.run(one_run, args.turns)
        first.append(statistics.fmean(decision[:BLOCK]) * 1e6)
        last.append(statistics.fmean(decision[-BLOCK:]) * 1e6)
        naive.append(statistics.fmean(recount) * 1e6)
        compaction.append(compact_s * 1e3)
    f, l_ = statistics.median(first), statistics.median(last)
    n = args.turns
    results = [
        {"name": "context_decision_first_100", "value": round(f, 2), "unit": "us per turn"},
        {
            "name": "context_decision_last_100",
            "value": round(l_, 2),
            "unit": f"us per turn (turns {n - BLOCK + 1}-{n})",
        },
        {
            "name": "context_decision_growth",
            "value": round(l_ / f, 3),
            "floor": 1.0,
            "unit": f"x (per-turn cost at turns {n - BLOCK + 1}-{n} / at 1-100)",
            "target": "ratio <= 1.5 (flat)",
            "met": l_ / f <= 1.5,
        },
        {
            "name": "context_full_recount_last_100",
            "value": round(statistics.median(naive), 2),
            "unit": f"us per turn (the naive way: count the whole history, at {n} turns)",
        },
        {
            "name": f"context_compaction_at_{n}",
            "value": round(statistics.median(compaction), 2),
            "unit": "ms (one trim + scripted summary of the whole history)",
        },
    ]
    for result in results:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
