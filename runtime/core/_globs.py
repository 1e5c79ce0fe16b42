"""Glob patterns: the syntax shared by the ``glob`` and ``grep`` tools and permission rules.

Pattern syntax (:func:`glob_regex`), for paths:

* ``*`` any run of characters except ``/``; ``?`` one character except ``/``;
* ``**`` as a whole path component, any number of folders (zero included): ``**/*.py``,
  ``src/**/test_*.py``, ``docs/**``; elsewhere it means ``*``;
* ``[abc]``, ``[a-z]``, ``[!abc]`` character classes; ``{a,b}`` alternatives (not nested);
* wildcards match dot files too (``*`` matches ``.env``).

For free text (a ``bash`` command in a permission rule) ``/`` is an ordinary character, ``*``
matches anything (or anything but the given stop characters) and braces are literal.
"""

from __future__ import annotations

import re

__all__ = ["escape_glob", "glob_regex"]


def glob_regex(pattern: str, *, paths: bool = True, stop_chars: str = "") -> re.Pattern[str]:
    """Compile a glob *pattern* to a regex to be used with ``fullmatch``.

    Args:
        pattern: the glob.
        paths: path semantics (``/`` is special, ``**`` crosses folders, braces alternate);
            otherwise free text, where ``*`` matches any run of characters.
        stop_chars: characters no wildcard may match, on top of ``/`` for paths.
    """
    return re.compile(_translate(pattern, paths=paths, stop_chars=stop_chars), re.DOTALL)


def _translate(pattern: str, *, paths: bool, stop_chars: str) -> str:
    stops = ("/" if paths else "") + stop_chars
    star = f"[^{re.escape(stops)}]*" if stops else ".*"
    one = f"[^{re.escape(stops)}]" if stops else "."
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            j = i
            while j < n and pattern[j] == "*":
                j += 1
            whole_component = (i == 0 or pattern[i - 1] == "/") and (j == n or pattern[j] == "/")
            if paths and j - i >= 2 and whole_component:
                if j == n:
                    out.append(".*")
                else:
                    out.append("(?:.*/)?")  # zero or more folders, each ending with "/"
                    j += 1
            else:
                out.append(star)
            i = j
        elif c == "?":
            out.append(one)
            i += 1
        elif c == "[":
            cls, i = _char_class(pattern, i, stops)
            out.append(cls)
        elif c == "{" and paths and (end := pattern.find("}", i)) != -1:
            alternatives = pattern[i + 1 : end].split(",")
            inner = "|".join(
                _translate(alt, paths=paths, stop_chars=stop_chars) for alt in alternatives
            )
            out.append(f"(?:{inner})")
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def _char_class(pattern: str, start: int, stops: str) -> tuple[str, int]:
    """Translate the class opening at *start*; an unclosed ``[`` is literal, as in fnmatch."""
    j = start + 1
    if j < len(pattern) and pattern[j] == "!":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1  # a "]" first in the class is a member, not the end
    end = pattern.find("]", j)
    if end == -1:
        return re.escape("["), start + 1
    body = pattern[start + 1 : end]
    negate = body.startswith("!")
    if negate:
        body = body[1:]
    members = body.replace("\\", "\\\\").replace("^", "\\^").replace("[", "\\[")
    if negate:
        # A negated class must not match a separator or stop character either.
        return f"[^{members}{re.escape(stops)}]", end + 1
    return f"[{members}]", end + 1


def escape_glob(text: str, *, paths: bool = True) -> str:
    """A glob that matches exactly *text* (wildcards and, for paths, braces made literal)."""
    specials = "*?[{" if paths else "*?["
    return "".join(f"[{c}]" if c in specials else c for c in text)
