"""The one terminal-text sanitiser: control characters from outside made visible.

Every text the runtime prints to a terminal that came from a model, a tool, a trace or a server
(agent names, summaries, results, streamed text, tool descriptions) goes through
:func:`visible` first, so no escape sequence of theirs reaches the terminal: OSC 52 (writes the
clipboard), OSC 0 (the window title), ``ESC[2J`` (clears the screen), a carriage return that
overwrites a line, C1 controls (``\\x9b`` is CSI to some terminals), and the bidirectional
overrides that make text read differently than it is (docs/reliability.md, "The trust
boundary"). The runtime's own styling is added after, by rich, and is untouched.

Each character is replaced on its own, so a sequence split across two stream deltas is made
harmless too: its ``ESC`` shows as ``^[`` in the first, the rest is plain text in the second.
"""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = ["visible", "visible_strings"]


def _caret(code: int) -> str:
    return "^?" if code == 0x7F else "^" + chr(code + 0x40)


_BIDI: Final = (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)
_TABLE: Final[dict[int, str]] = {
    **{c: _caret(c) for c in (*range(0x20), 0x7F)},
    **{c: f"\\x{c:02x}" for c in range(0x80, 0xA0)},
    **{c: f"\\u{c:04x}" for c in _BIDI},
}
_KEEP_LAYOUT: Final = {**_TABLE, 0x0A: "\n", 0x09: "\t"}
_UNSAFE: Final = re.compile(
    "[\x00-\x1f\x7f-\x9f" + "".join(chr(c) for c in _BIDI) + "]"
)
_UNSAFE_IN_LAYOUT: Final = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f" + "".join(chr(c) for c in _BIDI) + "]"
)


def visible(text: str, *, layout: bool = True) -> str:
    """*text* with every control character shown as text: ``ESC`` as ``^[``, ``\\r`` as
    ``^M``, DEL as ``^?``, a C1 control as ``\\x9b``, a bidirectional override as ``\\u202e``.

    Args:
        layout: keep newlines and tabs (a block of text); false for one line, where they show
            as ``^J`` and ``^I``.

    Text without any is returned as it is (one regex search).
    """
    if layout:
        if _UNSAFE_IN_LAYOUT.search(text) is None:
            return text
        return text.translate(_KEEP_LAYOUT)
    if _UNSAFE.search(text) is None:
        return text
    return text.translate(_TABLE)


def visible_strings(value: Any) -> Any:
    """*value* (JSON-like: dicts, lists, tuples, strings) with :func:`visible` applied to every
    string, keys too; other values as they are."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {visible_strings(k): visible_strings(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(visible_strings(v) for v in value)
    return value
