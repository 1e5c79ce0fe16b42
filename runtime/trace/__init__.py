"""The trace layer: the tree rebuilt from events, trace files, sinks, exports and statistics.

:class:`~runtime.TraceTree` (``_tree``) rebuilds the agent tree from any interleaving of events;
``_tracefile`` streams JSONL trace files into it; ``_sinks`` writes the live stream to a file or a
pipe; ``_otlp`` exports OpenTelemetry spans and Mermaid; ``_render`` draws a tree in the
terminal; ``_stats`` computes ``trace stats`` (counts, durations, the critical path). It stands on
:mod:`runtime.core` (the events) only. The public names are re-exported by :mod:`runtime`.
"""
