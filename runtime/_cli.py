"""The ``trio-agents`` command line (SPEC §6). Imports are lazy: ``--help`` must start fast."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "trace":
        from runtime._cli_trace import main as trace_main  # lazy on purpose

        return trace_main(args[1:])
    print("trio-agents: not wired yet", args, file=sys.stderr)
    return 2
