"""Property-based: random trees with random faults and random cancels keep every invariant of
docs/events.md#invariants."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import orjson
import trio
import trio.testing
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from runtime import (
    AgentFinished,
    AgentStarted,
    CancelRequested,
    Event,
    Limits,
    TraceTree,
    open_runtime,
    read_events,
)
from tests.invariants import by_type, check_invariants


@attrs.frozen
class Node:
    name: str
    delay: float
    provider_error: bool
    tool_error: bool
    children: tuple[Node, ...]


def _nodes(depth: int, name: str) -> st.SearchStrategy[Node]:
    kids = (
        st.just(())
        if depth >= 3
        else st.integers(1 if depth == 0 else 0, 4 if depth < 2 else 2).flatmap(
            lambda n: st.tuples(*[_nodes(depth + 1, f"{name}_{i}") for i in range(n)])
        )
    )
    return st.builds(
        Node,
        name=st.just(name),
        delay=st.sampled_from([0.0, 0.5, 1.0, 3.0]),
        provider_error=st.booleans().map(lambda b: b and depth > 0),
        tool_error=st.booleans(),
        children=kids,
    )


def _walk(node: Node) -> list[Node]:
    out = [node]
    for child in node.children:
        out.extend(_walk(child))
    return out


def _scenario(root: Node) -> dict[str, Any]:
    agents: dict[str, Any] = {}
    for node in _walk(root):
        calls: list[dict[str, Any]] = [
            {"name": "agent", "input": {"description": c.name, "prompt": "go", "agent": c.name}}
            for c in node.children
        ]
        if node.tool_error:
            calls.append({"name": "read", "input": {"path": "missing.txt"}})
        last: dict[str, Any] = {"text": f"done {node.name}", "delay_s": node.delay}
        if node.provider_error:
            last = {"text": "partial", "error": f"boom in {node.name}", "delay_s": node.delay}
        script = [{"tool_calls": calls, "delay_s": node.delay}, last] if calls else [last]
        agents["main" if node.name == "n" else node.name] = {"turns": script}
    return {"agents": agents}


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    root=_nodes(0, "n"),
    cancels=st.lists(st.tuples(st.floats(0, 8), st.integers(0, 50), st.booleans()), max_size=4),
)
# A provider error due at the very instant an ancestor is cancelled: the cancel is in the stream
# first, so the agent must end cancelled, not failed.
@example(
    root=Node(name="n", delay=3.0, provider_error=False, tool_error=False, children=(
        Node(name="n_0", delay=0.0, provider_error=False, tool_error=False, children=(
            Node(name="n_0_0", delay=1.0, provider_error=True, tool_error=False, children=(
                Node(name="n_0_0_0", delay=0.0, provider_error=False, tool_error=False,
                     children=()),)),)),)),
    cancels=[(5.0, 0, False)],
)
async def test_random_trees_with_faults_and_cancels_keep_the_invariants(
    root: Node, cancels: list[tuple[float, int, bool]], tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
) -> None:
    events: list[Event] = []
    workspace = tmp_path
    names: dict[str, str] = {}
    trace = tmp_path / "run.jsonl"
    trace.unlink(missing_ok=True)
    async with open_runtime(scenario=_scenario(root), workspace=workspace, trace=trace,
                            limits=Limits(max_parallel=50), on_event=events.append) as rt:
        handle = await rt.start("go")
        start = trio.current_time()
        for at, pick, by_tool in sorted(cancels):
            await trio.sleep_until(start + at)
            running = [e for e in by_type(events, AgentStarted)
                       if e.agent_id not in {f.agent_id for f in by_type(events, AgentFinished)}]
            if not running:
                break
            target = running[pick % len(running)]
            node_id = target.agent_id
            if by_tool and target.parent_tool_use_id is not None:
                node_id = target.parent_tool_use_id
            assert node_id is not None
            await rt.cancel(node_id, f"random cancel at {at:.2f}")
        await handle.wait()
    check_invariants(events)
    live_tree = orjson.dumps(TraceTree.from_events(events).to_json())
    assert orjson.dumps(TraceTree.from_events(read_events(trace)).to_json()) == live_tree, (
        "the tree from the trace file is the tree from the live stream")

    started = {e.agent_id: e for e in by_type(events, AgentStarted)}
    finished = {e.agent_id: e for e in by_type(events, AgentFinished)}
    for a in started.values():
        names[a.agent_id] = a.name  # type: ignore[index, attr-defined]
    parent_of = {a.agent_id: a.parent_agent_id for a in started.values()}  # type: ignore[attr-defined]
    call_owner = {a.parent_tool_use_id: a.agent_id for a in started.values()}

    cancelled_roots: dict[str, int] = {}
    for request in by_type(events, CancelRequested):
        target = request.target  # type: ignore[attr-defined]
        agent = call_owner.get(target, target)
        # The earliest: a node cancelled twice (by its id, then by its call's) counts from the
        # first, which may come before an end the second one follows.
        cancelled_roots.setdefault(agent, request.seq)

    def cancelled_ancestor(agent_id: str) -> int | None:
        """The earliest cancel that reached *agent_id* (its own or an ancestor's)."""
        seqs = []
        cur: str | None = agent_id
        while cur is not None:
            if cur in cancelled_roots:
                seqs.append(cancelled_roots[cur])
            cur = parent_of.get(cur)
        return min(seqs, default=None)

    event(f"subtrees cancelled: {min(len(cancelled_roots), 2)}+")
    event(f"agents: {'1' if len(started) == 1 else '2-9' if len(started) < 10 else '10+'}")
    nodes = {("main" if n.name == "n" else n.name): n for n in _walk(root)}
    for agent_id, end in finished.items():
        node = nodes[names[agent_id]]
        cancel_seq = cancelled_ancestor(agent_id)  # type: ignore[arg-type]
        if cancel_seq is not None and end.seq > cancel_seq:
            assert end.status == "cancelled", (names[agent_id], end)  # type: ignore[attr-defined]
            continue
        expected = "failed" if node.provider_error else "completed"
        assert end.status == expected, (names[agent_id], end)  # type: ignore[attr-defined]
    if not cancelled_roots:
        assert set(names.values()) == set(nodes), "every node of the script ran"
    assert rt._run.registry.ids() == [], "no node is left registered"
    assert rt._run.scheduler.running_agents == 0
