"""The program's name, its exit codes and its one error line: what every command shares.

A module of its own, below :mod:`runtime.cli._options`, so the commands that need only these
(``permit``, ``pending``) import them without the session's module (no import cycle).
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import TextIO

PROG = "trio-agents"

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_ABORTED = 130
EXIT_TERMINATED = 143
"""128 + SIGTERM: the run was ended by SIGTERM, handled as an abort (trace finished)."""


class _Termination:
    """Whether this process got SIGTERM during a session (set by its handler; the command's
    exit code is then :data:`EXIT_TERMINATED` whatever the command returned)."""

    received = False


TERMINATION = _Termination()


def command_name() -> str:
    """How the user can type this program again, for the hints it prints (``Inspect it: …``).

    ``trio-agents`` when that name, looked up on ``PATH``, is this very program (an active
    virtual environment, an installed command); else the path it was started by
    (``.venv/bin/trio-agents`` from a shell where the environment is not active): a hint the
    user pastes must run. Started otherwise (``python -m runtime``, a test), the name.
    """
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) != PROG:
        return PROG
    found = shutil.which(PROG)
    if found is not None and _same_file(found, argv0):
        return PROG
    return argv0 if os.sep in argv0 else PROG


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def warning_line(message: str) -> None:
    """Print one ``trio-agents: warning: …`` line on stderr (newlines folded)."""
    from runtime.core import visible  # a planted file's name or a server's words: shown only

    text = visible(" ".join(message.split("\n")).strip(), layout=False)
    print(f"{PROG}: warning: {text}", file=sys.stderr, flush=True)


def error_line(message: str, *, file: TextIO | None = None) -> None:
    """Print one ``trio-agents: error: …`` line on stderr (newlines folded)."""
    from runtime.core import redact_text, visible  # masked like the events and the logs

    text = visible(redact_text(" ".join(message.split("\n")).strip()), layout=False)
    print(f"{PROG}: error: {text}", file=file or sys.stderr, flush=True)
