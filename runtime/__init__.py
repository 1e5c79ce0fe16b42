"""trio-agents: an actor-model multi-agent runtime on trio."""

from __future__ import annotations

__version__ = "0.1.0"
