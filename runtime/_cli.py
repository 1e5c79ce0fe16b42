"""The ``trio-agents`` command line (SPEC §6). Imports are lazy: ``--help`` must start fast."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = sys.argv[1:] if argv is None else argv
    print("trio-agents: not wired yet", args, file=sys.stderr)
    return 2
