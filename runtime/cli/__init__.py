"""The command line: ``trio-agents`` and ``python -m runtime`` (docs/cli.md).

``_main`` parses the command and dispatches; ``_options`` holds the options shared by
``run``/``demo``/``chat``, logging, exit codes and the session around a run; ``_demo``,
``_chat`` (with ``_keyboard``, the line editor, and ``_sessions``, saved conversations) and
``_trace_cmd`` are the commands; ``_live`` is the live tree view (``_frame`` writes its frames),
``_picker`` the Ctrl+C picker, ``_control`` the control socket. It is the top layer: nothing
imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime._lazy import lazy_exports

if TYPE_CHECKING:
    from ._main import main as main

_LAZY: dict[str, str] = {
    "main": "._main",
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
