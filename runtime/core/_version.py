"""The version of trio-agents (also ``runtime.__version__``; kept equal to pyproject.toml's)."""

from __future__ import annotations

__all__ = ["VERSION"]

VERSION = "0.1.0"
