"""Cancel storm: a 500-agent run takes 200 cancels of random live nodes (agents and tool calls,
at every depth) at random times.

Afterwards: the event invariants (docs/events.md#invariants) hold and the trace holds exactly
the live stream (see _checks); every node under an effective cancel that had not finished by
then ended ``cancelled``; every other node completed, and every parent carried on; the tree
rebuilt from the trace file says the same. Virtual time (autojump_clock): the leaves nap 10-60 s
each.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from runtime import Event, Limits, load_traces
from tests.harness import agent_call
from tests.reliability._checks import STATS, FaultyTool, checked_runtime

BRANCHES = 10
AGENTS = 500  # the root, 10 branches, 489 leaves
CANCELS = 200
LEAF_TYPES = 20


def storm_scenario(rng: random.Random) -> dict[str, Any]:
    leaves = AGENTS - 1 - BRANCHES
    agents: dict[str, Any] = {
        "main": {
            "tools": ["agent"],
            "turns": [
                {
                    "text": "Splitting.",
                    "tool_calls": [
                        agent_call(f"branch {i}", f"branch{i}") for i in range(BRANCHES)
                    ],
                },
                {"text": "All branches reported."},
            ],
        }
    }
    per_branch = [leaves // BRANCHES + (1 if i < leaves % BRANCHES else 0) for i in range(BRANCHES)]
    for i, count in enumerate(per_branch):
        calls = [
            agent_call(f"leaf {i}.{j}", f"leaf{rng.randrange(LEAF_TYPES)}") for j in range(count)
        ]
        agents[f"branch{i}"] = {
            "tools": ["agent"],
            "turns": [{"tool_calls": calls}, {"text": f"branch {i} done"}],
        }
    for k in range(LEAF_TYPES):
        nap = {"name": "faulty", "input": {"mode": "sleep", "seconds": rng.uniform(10, 60)}}
        agents[f"leaf{k}"] = {
            "tools": ["faulty"],
            "turns": [{"text": "napping", "tool_calls": [nap]}, {"text": "rested"}],
        }
    return {"agents": agents}


@pytest.mark.parametrize("seed", [0, 1])
async def test_a_cancel_storm_cancels_exactly_the_targeted_subtrees(
    seed: int, long: bool, workspace: Path, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    seeds = [seed] + ([seed + 100 * k for k in range(1, 5)] if long else [])
    for s in seeds:
        await _storm(s, workspace, tmp_path / f"trace-{s}.jsonl")


async def _storm(seed: int, workspace: Path, trace: Path) -> None:
    rng = random.Random(seed)
    events: list[Event] = []
    started = 0
    all_started = trio.Event()

    def count(event: Event) -> None:
        nonlocal started
        if event.type == "agent_started":
            started += 1
            if started == AGENTS:
                all_started.set()

    cancelled = 0
    async with checked_runtime(
        workspace,
        trace,
        events=events,
        on_event=count,
        scenario=storm_scenario(rng),
        extra_tools=[FaultyTool()],
        limits=Limits(max_parallel=AGENTS, max_agents=AGENTS * 2),
    ) as rt:
        handle = await rt.start("Storm.")
        await all_started.wait()
        registry = rt._run.registry
        while cancelled < CANCELS and not handle.done:
            # Seeded real jitter on purpose: a stress test whose cancels land at random points
            # of live nodes (what a run of it covers varies with the seed and the machine).
            await trio.sleep(rng.uniform(0, 0.05))
            live = [n for n in registry.ids() if n != handle.agent_id]
            if not live:
                break
            target = rng.choice(live)
            # Any node, at any depth, unless its subtree is most of what is left: the storm must
            # be able to go on to its 200th cancel (a leaf's cancel takes about three nodes with
            # it: the agent, its tool call, and its parent's agent call).
            doomed = sum(1 for n in live if _under(registry.get(n), target))
            if len(live) - doomed < 4 * (CANCELS - cancelled):
                continue
            if await rt.cancel(target, f"storm {cancelled}"):
                cancelled += 1
        outcome = await handle.wait()
    assert outcome.status == "completed"
    assert started == AGENTS
    assert cancelled == CANCELS, f"only {cancelled} cancels found a live node"
    _check_storm(events, outcome.agent_id)
    _check_tree(trace, events)
    STATS["cancels survived"] += cancelled
    STATS["agents in cancel storms"] += started


def _under(node: Any, target: str) -> bool:
    while node is not None:
        if node.id == target:
            return True
        node = node.parent
    return False


def _check_storm(events: list[Event], root: str) -> None:
    parent_call: dict[str, str | None] = {}  # agent → the agent call that started it
    owner: dict[str, str] = {}  # tool call → the agent that made it
    end_seq: dict[str, int] = {}
    status: dict[str, str] = {}
    child_of_call: dict[str, str] = {}
    cancels: dict[str, int] = {}  # target → seq of its cancel_requested
    for e in events:
        if e.type == "agent_started":
            parent_call[e.agent_id] = e.parent_tool_use_id  # type: ignore[index]
            if e.parent_tool_use_id:
                child_of_call[e.parent_tool_use_id] = e.agent_id  # type: ignore[assignment]
        elif e.type == "tool_started":
            owner[e.tool_use_id] = e.agent_id  # type: ignore[attr-defined,assignment]
        elif e.type == "agent_finished":
            end_seq[e.agent_id], status[e.agent_id] = e.seq, e.status  # type: ignore[index,attr-defined]
        elif e.type == "tool_finished":
            end_seq[e.tool_use_id], status[e.tool_use_id] = e.seq, e.status  # type: ignore[attr-defined]
        elif e.type == "cancel_requested":
            cancels[e.target] = e.seq  # type: ignore[attr-defined]

    def lineage(node: str) -> list[str]:
        chain = [node]
        while True:
            cur = chain[-1]
            up = parent_call.get(cur) if cur in parent_call else owner.get(cur)
            if up is None:
                return chain
            chain.append(up)

    expected_cancelled = 0
    for node, end in end_seq.items():
        hit = any(t in cancels and cancels[t] < end for t in lineage(node))
        if node in child_of_call:  # an agent call: cancelled if its sub-agent was
            hit = hit or status[child_of_call[node]] == "cancelled"
        if hit:
            expected_cancelled += 1
            assert status[node] == "cancelled", (node, status[node], lineage(node))
        elif node in parent_call:
            assert status[node] == "completed", (node, status[node])
        else:
            assert status[node] == "ok", (node, status[node])
    assert status[root] == "completed"
    assert expected_cancelled >= CANCELS


def _check_tree(trace: Path, events: list[Event]) -> None:
    """The tree rebuilt from the file agrees with the live stream on every node's end."""
    (tree,) = load_traces(trace)
    for e in events:
        if e.type == "agent_finished":
            node = tree.find(e.agent_id or "")
        elif e.type == "tool_finished":
            node = tree.find(e.tool_use_id)  # type: ignore[attr-defined]
        else:
            continue
        assert node is not None
        assert node.status == e.status, (node, e)  # type: ignore[attr-defined]
