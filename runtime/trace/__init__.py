"""The trace layer: the tree rebuilt from events, trace files, sinks, exports and statistics.

:class:`~runtime.TraceTree` (``_tree``) rebuilds the agent tree from any interleaving of events;
``_tracefile`` streams JSONL trace files into it; ``_sinks`` writes the live stream to a file or a
pipe; ``_otlp`` exports OpenTelemetry spans and Mermaid; ``_render`` draws a tree in the
terminal; ``_stats`` computes ``trace stats`` (counts, durations, the critical path). It stands on
:mod:`runtime.core` (the events) only. The public names are re-exported by :mod:`runtime`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime._lazy import lazy_exports

if TYPE_CHECKING:
    from ._otel import open_live_spans as open_live_spans
    from ._otlp import otlp_json_lines as otlp_json_lines
    from ._otlp import read_turns as read_turns
    from ._render import COMPACTED_MARK as COMPACTED_MARK
    from ._render import StyledLine as StyledLine
    from ._render import compaction_line as compaction_line
    from ._render import event_line as event_line
    from ._render import render_header as render_header
    from ._render import render_mermaid as render_mermaid
    from ._render import render_timeline as render_timeline
    from ._render import render_tree as render_tree
    from ._render import styled_tree_lines as styled_tree_lines
    from ._render import todo_lines as todo_lines
    from ._render import tree_lines as tree_lines
    from ._sinks import JsonlSink as JsonlSink
    from ._sinks import PipeSink as PipeSink
    from ._sinks import continue_trace_file as continue_trace_file
    from ._sinks import existing_trace as existing_trace
    from ._sinks import open_pipe_writer as open_pipe_writer
    from ._sinks import open_trace_file as open_trace_file
    from ._stats import run_stats as run_stats
    from ._tracefile import OnError as OnError
    from ._tracefile import TraceLoader as TraceLoader
    from ._tracefile import follow_lines as follow_lines
    from ._tracefile import open_trace as open_trace
    from ._tracefile import read_events as read_events
    from ._tree import AgentNode as AgentNode
    from ._tree import RunningSubtree as RunningSubtree
    from ._tree import TodoItem as TodoItem
    from ._tree import TraceSet as TraceSet
    from ._tree import TraceTree as TraceTree
    from ._view import PageBuilder as PageBuilder
    from ._view import data_json as data_json
    from ._view import render_page as render_page
    from ._words import fmt_duration as fmt_duration
    from ._words import fmt_tokens as fmt_tokens
    from ._words import fmt_usd as fmt_usd
    from ._words import outcome_notes as outcome_notes

_LAZY: dict[str, str] = {
    "AgentNode": "._tree",
    "COMPACTED_MARK": "._render",
    "JsonlSink": "._sinks",
    "OnError": "._tracefile",
    "PageBuilder": "._view",
    "PipeSink": "._sinks",
    "RunningSubtree": "._tree",
    "TodoItem": "._tree",
    "StyledLine": "._render",
    "TraceLoader": "._tracefile",
    "TraceSet": "._tree",
    "TraceTree": "._tree",
    "compaction_line": "._render",
    "data_json": "._view",
    "event_line": "._render",
    "existing_trace": "._sinks",
    "fmt_duration": "._words",
    "fmt_tokens": "._words",
    "fmt_usd": "._words",
    "follow_lines": "._tracefile",
    "open_live_spans": "._otel",
    "open_pipe_writer": "._sinks",
    "open_trace": "._tracefile",
    "continue_trace_file": "._sinks",
    "open_trace_file": "._sinks",
    "otlp_json_lines": "._otlp",
    "outcome_notes": "._words",
    "read_events": "._tracefile",
    "read_turns": "._otlp",
    "render_header": "._render",
    "render_mermaid": "._render",
    "render_page": "._view",
    "render_timeline": "._render",
    "render_tree": "._render",
    "todo_lines": "._render",
    "run_stats": "._stats",
    "styled_tree_lines": "._render",
    "tree_lines": "._render",
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
