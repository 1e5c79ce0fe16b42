"""``trace view`` / ``trace serve``: a trace as one self-contained web page (docs/observability.md).

:class:`PageBuilder` reads trace lines into the run trees (:class:`~runtime.trace._tree.TraceSet`,
through :class:`~runtime.trace._tracefile.TraceLoader`, so the reading rules are those of every
other trace command), each node's events (deltas of one stream merged into one row, at most
:data:`MAX_ROWS` rows a node) and each agent's model turns (:mod:`runtime.trace._turns`).
:meth:`PageBuilder.data` is the page's model: one JSON object, the same for a file and a live
trace. :func:`render_page` puts it, the style and the script (plain files kept beside this
module in ``view/``, no build step) into one HTML document that loads nothing from the network.

What makes the page safe to open whatever a model wrote: the data goes in a
``<script type="application/json">`` element with every ``<``, ``>`` and ``&`` written as a
``\\u`` escape (no text can close the element), the script builds the page with ``textContent``
only (never HTML from data), and a Content-Security-Policy allows only the page's own script
(by a per-page nonce), no request but to the page's own origin (``trace serve``'s updates).
"""

from __future__ import annotations

import html
import secrets
import time
from collections.abc import Iterable
from importlib import resources
from typing import Any, Final

import orjson

from ._render import compaction_line, first_line
from ._stats import run_stats
from ._tracefile import OnError, TraceLoader
from ._tree import AgentNode, ToolNode, TraceSet, TraceTree
from ._turns import TurnLog
from ._words import fmt_duration, fmt_tokens

MAX_ROWS: Final = 500
"""Event rows kept per node; the rest are counted (a tool reporting progress a million times)."""
TEXT_ROW_KEEP: Final = 1000
"""Characters of streamed text a merged delta row keeps."""
OUTPUT_KEEP: Final = 200
_COMMON: Final = frozenset({"type", "seq", "ts", "run_id", "agent_id", "parent_tool_use_id"})
_TOOL_EVENTS: Final = frozenset(
    {
        "tool_started",
        "tool_finished",
        "permission_requested",
        "permission_resolved",
        "tool_progress",
    }
)
_STREAMS: Final = frozenset({"text_delta", "thinking_delta"})
_ESCAPES: Final = ((b"<", b"\\u003c"), (b">", b"\\u003e"), (b"&", b"\\u0026"))


class _Rows:
    """One node's event rows: ``[seq, ts, type, text]``, a stream of deltas merged into one."""

    __slots__ = ("dropped", "rows", "stream")

    def __init__(self) -> None:
        self.rows: list[list[Any]] = []
        self.dropped = 0
        self.stream: list[Any] | None = None  # the row deltas are being merged into

    def add(self, seq: int, ts: float, kind: str, text: str) -> list[Any] | None:
        """Add a row; returns it, or None when the node already has :data:`MAX_ROWS`."""
        self.stream = None
        if len(self.rows) >= MAX_ROWS:
            self.dropped += 1
            return None
        row = [seq, ts, kind, text]
        self.rows.append(row)
        return row

    def delta(self, seq: int, ts: float, kind: str, text: str) -> None:
        """Add a delta: to the row of the stream it continues, else as a row of its own
        (``[seq, ts, kind, text, count]``)."""
        row = self.stream
        if row is not None and row[2] == kind:
            row[4] += 1
            if len(row[3]) < TEXT_ROW_KEEP:
                row[3] = (row[3] + text)[:TEXT_ROW_KEEP]
            return
        row = self.add(seq, ts, kind, text[:TEXT_ROW_KEEP])
        if row is not None:
            row.append(1)
            self.stream = row


class _RunIndex:
    """What the page shows of one run beyond its tree: events by node, turns."""

    def __init__(self) -> None:
        self.rows: dict[str, _Rows] = {}
        self.turns = TurnLog()
        self.agent_cost: dict[str, float] = {}

    def _rows(self, node_id: str) -> _Rows:
        rows = self.rows.get(node_id)
        if rows is None:
            rows = self.rows[node_id] = _Rows()
        return rows

    def apply(self, fields: dict[str, Any]) -> None:
        self.turns.apply_dict(fields)
        kind = str(fields.get("type"))
        seq = fields.get("seq", 0)
        ts = fields.get("ts", 0.0)
        if kind in _TOOL_EVENTS:
            node = str(fields.get("tool_use_id"))
        elif kind in ("cancel_requested", "stop_requested"):
            node = str(fields.get("target"))
        else:
            node = str(fields.get("agent_id"))
        if kind in _STREAMS:
            self._rows(node).delta(seq, ts, kind, str(fields.get("text") or ""))
            return
        if kind == "agent_finished" and isinstance(fields.get("cost_usd"), int | float):
            self.agent_cost[node] = float(fields["cost_usd"])
        self._rows(node).add(seq, ts, kind, describe(fields))


def describe(fields: dict[str, Any]) -> str:
    """One line saying what an event says (plain text: the page shows it as text)."""
    kind = fields.get("type")
    get = fields.get
    if kind == "agent_started":
        return f"{get('name')} started (depth {get('depth')}): {first_line(get('prompt'), 200)}"
    if kind == "agent_finished":
        text = (
            f"{get('status')} after {get('turns')} turns, {fmt_duration(get('duration_s'))}, "
            f"tokens {_tokens(get('input_tokens'), get('output_tokens'))}"
        )
        if get("error"):
            text += f": {first_line(get('error'), 200)}"
        return text
    if kind == "tool_started":
        return str(get("summary") or get("name"))
    if kind == "tool_finished":
        text = f"{get('status')} in {fmt_duration(get('duration_s'))}"
        output = first_line(get("output"), OUTPUT_KEEP)
        return f"{text}: {output}" if output else text
    if kind == "turn_finished":
        return (
            f"turn {get('turn')} ended ({get('stop_reason')}), tokens "
            f"{_tokens(get('input_tokens'), get('output_tokens'))}"
        )
    if kind == "permission_requested":
        return f"asks permission: {get('summary')}"
    if kind == "permission_resolved":
        answer = "granted" if get("granted") else "denied"
        return f"permission {answer}: {first_line(get('reason'), 200)}"
    if kind == "cancel_requested":
        return f"cancel requested by {get('by')}: {first_line(get('reason'), 200)}"
    if kind == "agent_message":
        return f"message to {get('to_agent_id')}: {first_line(get('text'), 200)}"
    if kind == "stop_requested":
        return f"stop requested by {get('by')}: {first_line(get('reason'), 200)}"
    if kind == "provider_retry":
        return (
            f"model call retried (attempt {get('attempt')}) in "
            f"{fmt_duration(get('delay_s'))}: {first_line(get('reason'), 200)}"
        )
    if kind == "rate_limited":
        status = get("status")
        why = f"refused, HTTP {status}" if status else get("reason")
        return f"waits {fmt_duration(get('wait_s'))} for the rate limit ({why})"
    if kind == "context_compacted":
        return compaction_line(fields)
    if kind == "run_started":
        config = fields.get("config")
        if not isinstance(config, dict):
            config = {}
        model = f"{config.get('provider')} · {config.get('model')}"
        return f"run started (trio-agents {get('version')}, {model})"
    if kind == "run_finished":
        return f"run {get('status')} in {fmt_duration(get('duration_s'))}"
    if kind == "user_message":
        return f"message: {first_line(get('text'), 200)}"
    if kind == "message_queued":
        return f"message queued: {first_line(get('text'), 200)}"
    rest = {k: v for k, v in fields.items() if k not in _COMMON}
    return first_line(orjson.dumps(rest).decode(), 300)


def _tokens(count_in: object, count_out: object) -> str:
    return f"{fmt_tokens(_int(count_in))}→{fmt_tokens(_int(count_out))}"


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class PageBuilder:
    """Trace lines in, the page's data out; feed a whole file, or a growing one.

    Args:
        name: how warnings name the file.
        on_error: called for every skipped line (as :class:`TraceLoader`'s).
    """

    def __init__(self, *, name: str = "trace", on_error: OnError | None = None) -> None:
        self.traces = TraceSet(keep_details=True)
        self.loader = TraceLoader(self.traces, name=name, on_error=on_error)
        self._index: dict[str, _RunIndex] = {}
        self.changed = False
        """Whether a line was applied since :meth:`data` last ran."""

    def feed(self, lineno: int, line: bytes) -> None:
        """Apply one trace line (bad lines go to ``on_error``, as everywhere)."""
        fields = self.loader.feed(lineno, line)
        if fields is None:
            return
        run_id = fields.get("run_id")
        if not isinstance(run_id, str):
            return
        index = self._index.get(run_id)
        if index is None:
            index = self._index[run_id] = _RunIndex()
        index.apply(fields)
        self.changed = True

    def feed_all(self, lines: Iterable[bytes]) -> None:
        """Apply every line of a file, then check it was a trace (:meth:`TraceLoader.finish`)."""
        for lineno, line in enumerate(lines, 1):
            self.feed(lineno, line)
        self.loader.finish()

    def end(self) -> None:
        """The file is complete: unfinished nodes become ``interrupted``."""
        self.traces.end()

    def data(self, *, live: bool = False) -> dict[str, Any]:
        """The page's model: every run, its facts, its nodes in tree order with their details."""
        self.changed = False
        runs = [
            run_data(tree, self._index.get(str(tree.run_id)) or _RunIndex())
            for tree in self.traces.trees
        ]
        return {"live": live, "generated": time.time(), "runs": runs}


def run_data(tree: TraceTree, index: _RunIndex) -> dict[str, Any]:
    """One run as the page shows it (times are seconds from the run's start)."""
    tree.rollup()
    t0 = tree.started_ts
    if t0 is None:
        t0 = min((a.started_ts for a in tree.agents.values() if a.started_ts), default=0.0)
    stats = run_stats(tree)
    nodes: list[dict[str, Any]] = []
    position: dict[int, int] = {}
    for node in tree.iter_nodes():
        parent = node.parent
        entry = _node(tree, node, index, t0)
        entry["p"] = position[id(parent)] if parent is not None and id(parent) in position else -1
        if entry["p"] >= 0:
            up = nodes[entry["p"]]
            entry["lv"] = up["lv"] + 1
            entry["ad"] = up["ad"] + (1 if up["k"] == "tool" and node.kind == "agent" else 0)
        else:
            entry["lv"] = entry["ad"] = 0
        position[id(node)] = len(nodes)
        nodes.append(entry)
    _subtree_costs(nodes)
    last = tree.last_ts if tree.last_ts > -1e300 else t0
    cost = [n["cost"] for n in nodes if n["k"] == "agent" and n["cost"] is not None]
    return {
        "run_id": tree.run_id,
        "status": tree.status,
        "ended": tree.ended,
        "started_ts": t0,
        "duration_s": tree.duration_s,
        "now": max(0.0, last - t0),
        "version": tree.version,
        "provider": (tree.config or {}).get("provider"),
        "model": (tree.config or {}).get("model"),
        "agents": len(tree.agents),
        "tool_calls": len(tree.tools),
        "input_tokens": tree.total_input_tokens,
        "output_tokens": tree.total_output_tokens,
        "cost_usd": round(sum(cost), 6) if cost else None,
        "max_parallel_agents": stats["max_parallel_agents"]["count"],
        "permission_wait_s": stats["permission_wait"]["wall_s"],
        "nodes": nodes,
        "run_events": index.rows["None"].rows if "None" in index.rows else [],
    }


def _node(
    tree: TraceTree, node: AgentNode | ToolNode, index: _RunIndex, t0: float
) -> dict[str, Any]:
    start = node.started_ts
    end = node.finished_ts
    if end is None and node.duration_s is not None and start is not None:
        end = start + node.duration_s  # interrupted: to the trace's last event
    rows = index.rows.get(node.id)
    entry: dict[str, Any] = {
        "k": node.kind,
        "id": node.id,
        "name": node.name,
        "status": node.status,
        "t0": None if start is None else start - t0,
        "t1": None if end is None else end - t0,
        "dur": node.duration_s,
        "events": rows.rows if rows is not None else [],
        "more_events": rows.dropped if rows is not None else 0,
    }
    if node.cancel is not None:
        entry["cancel"] = {"by": node.cancel.by, "reason": node.cancel.reason}
    if isinstance(node, AgentNode):
        turns = index.turns.turns_of(node.id)
        cost = index.agent_cost.get(node.id)
        if cost is None and any(t.cost_usd is not None for t in turns):
            cost = sum(t.cost_usd or 0.0 for t in turns)
        open_turn = index.turns.open_turn(node.id) if node.finished_ts is None else None
        entry.update(
            {
                "in": node.input_tokens,
                "out": node.output_tokens,
                "tin": node.total_input_tokens,
                "tout": node.total_output_tokens,
                "cost": cost,
                "turns": node.turns,
                "prompt": node.prompt,
                "text": node.text,
                "result": node.result,
                "error": node.error,
                "model_calls": [[t.start - t0, t.end - t0, t.status, t.turn] for t in turns]
                + ([[open_turn - t0, None, "running", len(turns) + 1]] if open_turn else []),
            }
        )
    else:
        entry.update(
            {
                "summary": node.summary,
                "input": orjson.dumps(node.input, option=orjson.OPT_INDENT_2).decode()
                if node.input
                else "",
                "output": node.output,
                "output_len": node.output_len,
                "waits": [[a - t0, b - t0] for a, b in node.permission_intervals],
            }
        )
    return entry


def _subtree_costs(nodes: list[dict[str, Any]]) -> None:
    """Each agent's ``scost``: its own cost and that of every agent below it (None if none)."""
    for entry in nodes:
        entry["scost"] = entry.get("cost") if entry["k"] == "agent" else None
    for entry in reversed(nodes):  # children come after their parents
        parent = entry["p"]
        if parent < 0 or entry["scost"] is None:
            continue
        up = nodes[parent]
        up["scost"] = (up["scost"] or 0.0) + entry["scost"]


# --------------------------------------------------------------------------- the page


def _asset(name: str) -> str:
    return resources.files("runtime.trace").joinpath("view", name).read_text(encoding="utf-8")


def data_json(data: dict[str, Any]) -> bytes:
    """*data* as JSON that is safe inside an HTML ``<script>`` element (and anywhere else)."""
    raw = orjson.dumps(data)
    for char, escape in _ESCAPES:
        raw = raw.replace(char, escape)
    return raw


def render_page(data: dict[str, Any]) -> bytes:
    """The whole page: the template with the style, the script and *data* put in."""
    nonce = secrets.token_urlsafe(16)
    runs = data.get("runs") or []
    title = f"trio-agents · run {runs[-1]['run_id']}" if runs else "trio-agents · trace"
    page = _asset("page.html")
    page = page.replace("{{nonce}}", nonce).replace("{{title}}", html.escape(title))
    before_style, _, rest = page.partition("{{style}}")
    before_data, _, rest = rest.partition("{{data}}")
    before_script, _, after = rest.partition("{{script}}")
    return b"".join(
        [
            before_style.encode(),
            _asset("view.css").encode(),
            before_data.encode(),
            data_json(data),
            before_script.encode(),
            _asset("view.js").encode(),
            after.encode(),
        ]
    )
