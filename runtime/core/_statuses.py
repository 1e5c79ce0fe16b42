"""The enumerated values of event fields: each a ``Literal`` type the event classes use
(``runtime/core/_events.py``), and its values as a tuple read from that type.

A module of its own, with nothing but :mod:`typing`, so that the trace reader
(``runtime/trace/_tree.py``) and the command line's choices take the very sets the event classes
are typed with, without importing attrs and building the cattrs converter (a trace file is read
without them, docs/architecture.md#reading-a-trace-file).
"""

from __future__ import annotations

import typing
from typing import Final, Literal, TypeAlias

ToolStatus: TypeAlias = Literal["ok", "error", "cancelled", "denied"]
AgentStatus: TypeAlias = Literal[
    "completed", "cancelled", "failed", "max_turns", "budget_exceeded", "stopped"
]
StopReason: TypeAlias = Literal["end_turn", "tool_use", "max_tokens", "refusal"]
CancelBy: TypeAlias = Literal["user", "control", "budget", "runtime"]

TOOL_STATUSES: Final[tuple[str, ...]] = typing.get_args(ToolStatus)
"""``tool_finished.status`` values."""
AGENT_STATUSES: Final[tuple[str, ...]] = typing.get_args(AgentStatus)
"""``agent_finished.status`` and ``run_finished.status`` values."""

RUNNING: Final = "running"
"""What a tree node shows while its end event has not come (docs/tree.md)."""
INTERRUPTED: Final = "interrupted"
"""What a tree node shows once the stream ended without its end event (a killed process)."""
NODE_STATUSES: Final[tuple[str, ...]] = (
    *AGENT_STATUSES,
    *(s for s in TOOL_STATUSES if s not in AGENT_STATUSES),
    RUNNING,
    INTERRUPTED,
)
"""Every status a node of the tree can have (``trace show --status``)."""
