"""``trace stats``: counts, tokens, costs and durations per agent type and status, the tools, the
most agents at once, compactions, permission waits, and the critical path of a run's tree.

A pure function of a :class:`~runtime.TraceTree` (:func:`run_stats`), shared by the command line
and any Python user; the command line only prints it (docs/cli.md#trace).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._tree import AgentNode, ToolNode, TraceTree

__all__ = ["run_stats"]


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"sum": 0.0, "p50": 0.0, "max": 0.0}
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    p50 = ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {"sum": round(sum(ordered), 6), "p50": round(p50, 6), "max": round(ordered[-1], 6)}


class _Group:
    __slots__ = ("cost_usd", "count", "durations", "input_tokens", "output_tokens", "statuses")

    def __init__(self) -> None:
        self.count = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.cost_usd: float | None = 0.0
        self.durations: list[float] = []
        self.statuses: dict[str, int] = {}

    def add(
        self, status: str, duration: float | None, input_tokens: int = 0, output_tokens: int = 0,
        cost_usd: float | None = 0.0,
    ) -> None:
        self.count += 1
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        if self.cost_usd is not None:  # unknown stays unknown (docs/costs.md)
            self.cost_usd = None if cost_usd is None else round(self.cost_usd + cost_usd, 9)
        if duration is not None:
            self.durations.append(duration)
        self.statuses[status] = self.statuses.get(status, 0) + 1

    def to_json(self, *, tokens: bool = True, statuses: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"count": self.count}
        if tokens:
            out["input_tokens"] = self.input_tokens
            out["output_tokens"] = self.output_tokens
            out["cost_usd"] = self.cost_usd
        out["duration_s"] = _summary(self.durations)
        if statuses:
            out["statuses"] = dict(sorted(self.statuses.items()))
        return out


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total = 0.0
    end = -float("inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _critical_path(tree: TraceTree) -> list[tuple[int, AgentNode | ToolNode]]:
    """The chain of nodes that set the run's wall time, as ``(level, node)`` in time order.

    An agent's time is its turns one after another, each waiting for its slowest tool call:
    calls that overlap in time form one turn's parallel group, and the one that ended last
    held the agent up. So the path goes through that call of every group, and on into the
    sub-agent it started, the same way; it starts at the root agent that ended last.
    """
    from ._tree import AgentNode

    last = tree.last_ts

    def end(node: AgentNode | ToolNode) -> float:
        start = node.started_ts
        return -math.inf if start is None else start + (node.elapsed(last) or 0.0)

    roots = tree.roots
    if not roots:
        return []
    path: list[tuple[int, AgentNode | ToolNode]] = []
    stack: list[tuple[int, AgentNode | ToolNode]] = [(0, max(roots, key=end))]
    while stack:
        level, node = stack.pop()
        path.append((level, node))
        if isinstance(node, AgentNode):
            calls = sorted(
                (c for c in node.children if c.started_ts is not None),
                key=lambda c: c.started_ts or 0.0,
            )
            critical: list[ToolNode] = []
            group_end = -math.inf
            for call in calls:
                if critical and (call.started_ts or 0.0) < group_end:
                    if end(call) > end(critical[-1]):
                        critical[-1] = call
                    group_end = max(group_end, end(call))
                else:
                    critical.append(call)
                    group_end = end(call)
            stack.extend((level + 1, call) for call in reversed(critical))
        else:
            stack.extend((level + 1, child) for child in reversed(node.children))
    return path


def _rate_limits(tree: TraceTree) -> dict[str, Any]:
    """The waits at the endpoints' rate limits (docs/rate-limits.md): in all, and per subtree
    (an agent and every agent under it), longest first."""
    agents = tree.agents
    waited: dict[str, float] = {}
    refused: dict[str, int] = {}
    total_s, total_refused, waiting_agents = 0.0, 0, 0
    for agent in agents.values():
        own_s, own_refused = agent.rate_waited_s, agent.rate_refusals
        if not own_s and not own_refused:
            continue
        waiting_agents += 1
        total_s += own_s
        total_refused += own_refused
        node: Any = agent
        seen = 0
        while node is not None and seen <= len(agents):  # a corrupt trace may hold a cycle
            waited[node.id] = waited.get(node.id, 0.0) + own_s
            refused[node.id] = refused.get(node.id, 0) + own_refused
            parent = node.parent_agent_id
            node = agents.get(parent) if parent is not None else None
            seen += 1
    subtrees = sorted(waited, key=lambda i: (-waited[i], agents[i].depth, i))
    return {
        "agents_waited": waiting_agents,
        "wait_s": round(total_s, 6),
        "refusals": total_refused,
        "by_subtree": [
            {"id": i, "name": agents[i].name, "depth": agents[i].depth,
             "wait_s": round(waited[i], 6), "refusals": refused[i]}
            for i in subtrees
        ],
    }


def run_stats(tree: TraceTree) -> dict[str, Any]:
    """The statistics of one run, as JSON-ready data (what ``trace stats --json`` prints)."""
    tree.rollup()
    last = tree.last_ts
    by_type: dict[str, _Group] = {}
    by_status: dict[str, _Group] = {}
    edges: list[tuple[float, int]] = []
    for agent in tree.agents.values():
        duration = agent.elapsed(last)
        for key, groups in ((agent.name, by_type), (agent.status, by_status)):
            group = groups.get(key)
            if group is None:
                group = groups[key] = _Group()
            group.add(
                agent.status, duration, agent.input_tokens, agent.output_tokens, agent.cost_usd
            )
        if agent.started_ts is not None:
            edges.append((agent.started_ts, 1))
            edges.append((agent.started_ts + (duration or 0.0), -1))
    tools: dict[str, _Group] = {}
    waits: list[tuple[float, float]] = []
    requests = 0
    wait_sum = 0.0
    for tool in tree.tools.values():
        group = tools.get(tool.name)
        if group is None:
            group = tools[tool.name] = _Group()
        group.add(tool.status, tool.elapsed(last))
        intervals = tool.permission_intervals
        if intervals:
            requests += len(intervals)
            wait_sum += tool.permission_wait_s
            waits.extend(intervals)
    # Most agents at once: a sweep over start/end edges; an end sorts before a start at the
    # same instant, so a hand-over is not counted as overlap.
    edges.sort()
    running = peak = 0
    peak_at: float | None = None
    for ts, step in edges:
        running += step
        if running > peak:
            peak, peak_at = running, ts
    compactions = {
        "count": len(tree.compactions),
        "trim": sum(1 for c in tree.compactions if c.method == "trim"),
        "summary": sum(1 for c in tree.compactions if c.method == "summary"),
        "tokens_before": sum(c.tokens_before for c in tree.compactions),
        "tokens_after": sum(c.tokens_after for c in tree.compactions),
        "input_tokens": sum(c.input_tokens for c in tree.compactions),
        "output_tokens": sum(c.output_tokens for c in tree.compactions),
    }
    wall = tree.duration_s
    start = tree.started_ts
    wait_wall = _union_length(waits)
    path = _critical_path(tree)
    return {
        "run_id": tree.run_id,
        "status": tree.status,
        "wall_s": wall,
        "agents": len(tree.agents),
        "tool_calls": len(tree.tools),
        "input_tokens": tree.total_input_tokens,
        "output_tokens": tree.total_output_tokens,
        "cost_usd": tree.total_cost_usd,
        "by_agent_type": {k: g.to_json() for k, g in sorted(by_type.items())},
        "by_status": {k: g.to_json(statuses=False) for k, g in sorted(by_status.items())},
        "tools": {k: g.to_json(tokens=False) for k, g in sorted(tools.items())},
        "max_parallel_agents": {
            "count": peak,
            "at_s": None if peak_at is None or start is None else round(peak_at - start, 6),
        },
        "critical_path": [
            {
                "level": level,
                "kind": node.kind,
                "id": node.id,
                "name": node.name,
                "status": node.status,
                "start_s": None
                if node.started_ts is None or start is None
                else round(node.started_ts - start, 6),
                "duration_s": node.elapsed(last),
            }
            for level, node in path
        ],
        "permission_wait": {
            "requests": requests,
            "sum_s": round(wait_sum, 6),
            "wall_s": round(wait_wall, 6),
            "share_of_wall": round(wait_wall / wall, 4) if wall else 0.0,
        },
        "compactions": compactions,
        "rate_limits": _rate_limits(tree),
        "hooks": {
            "runs": tree.hook_totals.runs,
            "blocked": tree.hook_totals.blocked,
            "failed": tree.hook_totals.failed,
            "duration_s": tree.hook_totals.duration_s,
        },
    }
