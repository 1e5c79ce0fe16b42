"""The words of a run's summary: durations, token counts, costs, what did not go to plan.

Plain text, apart from :mod:`runtime.trace._render` (which draws with rich and uses them): the
line a run ends with (``run completed in 6.1s · 5 agents · 12.3k tokens``) needs them and no
renderer, so a run whose output is not a terminal does not import rich for it
(bench/README.md, "Resume").
"""

from __future__ import annotations

import math

from ._tree import AgentNode, TraceTree

__all__ = ["fmt_duration", "fmt_tokens", "fmt_usd", "outcome_notes", "plural"]


def fmt_duration(seconds: float | None) -> str:
    """A short human duration: ``850ms``, ``1.2s``, ``2m03s``, ``1h02m``; ``?`` if unknown."""
    if seconds is None or math.isnan(seconds):
        return "?"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        minutes, secs = divmod(int(seconds), 60)
        return f"{minutes}m{secs:02d}s"
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours}h{rest // 60:02d}m"


def fmt_tokens(count: int) -> str:
    """A short token count: ``950``, ``12.3k``, ``4.1M``."""
    if count < 1000:
        return str(count)
    if count < 1_000_000:
        return f"{count / 1000:.1f}k"
    return f"{count / 1_000_000:.1f}M"


def fmt_usd(usd: float | None) -> str:
    """A short cost: ``$12.34``, ``$0.123``, ``$0.00072``; ``cost unknown`` for None
    (docs/costs.md)."""
    if usd is None:
        return "cost unknown"
    if usd >= 1:
        return f"${usd:,.2f}"
    if usd >= 0.01:
        return f"${usd:.3f}"
    return f"${usd:.2g}" if usd >= 1e-4 else f"${usd:.6f}".rstrip("0").rstrip(".")


def plural(count: int, noun: str) -> str:
    """``1 agent``, ``2 agents``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def outcome_notes(tree: TraceTree, root: AgentNode | None = None) -> str:
    """What did not go to plan below the roots (or below *root*): ``1 subtree cancelled by
    user, 1 failed``; empty when every sub-agent completed.

    A cancelled subtree is counted once, at its top (the agents under it were cancelled with
    it), with who asked (``user``, ``control``, ``budget``, ``runtime``).
    """
    agents = tree.agents
    nodes = (
        agents.values()
        if root is None
        else [n for n in tree.iter_nodes([root]) if isinstance(n, AgentNode)]
    )
    by: dict[str, int] = {}
    failed = cut = refused = 0
    for node in nodes:
        if node.status == "completed":
            cut += node.last_stop_reason == "max_tokens"
            refused += node.last_stop_reason == "refusal"
        if node.depth == 0 or node is root:
            continue
        if node.status == "failed":
            failed += 1
        elif node.status == "cancelled":
            parent = agents.get(node.parent_agent_id or "")
            if parent is not None and parent.status == "cancelled":
                continue  # inside a cancelled subtree (or run): counted at its top
            cancel = node.cancel or (node.parent.cancel if node.parent is not None else None)
            who = cancel.by if cancel is not None else "runtime"
            by[who] = by.get(who, 0) + 1
    parts = [f"{plural(count, 'subtree')} cancelled by {who}" for who, count in sorted(by.items())]
    if failed:
        parts.append(f"{failed} failed")
    if cut:
        parts.append(f"{plural(cut, 'reply')} cut at max_tokens".replace("replys", "replies"))
    if refused:
        parts.append(f"{plural(refused, 'refusal')}")
    return ", ".join(parts)
