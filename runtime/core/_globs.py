"""Glob patterns: the syntax shared by the ``glob`` and ``grep`` tools and permission rules.

Pattern syntax (:func:`compile_glob`), for paths:

* ``*`` any run of characters except ``/``; ``?`` one character except ``/``;
* ``**`` as a whole path component, any number of folders (zero included): ``**/*.py``,
  ``src/**/test_*.py``, ``docs/**``; elsewhere it means ``*``;
* ``[abc]``, ``[a-z]``, ``[!abc]`` character classes (never matching ``/``); ``{a,b}``
  alternatives (not nested, at most :data:`MAX_ALTERNATIVES` once expanded; a ``**`` touching
  or inside a group means ``*``);
* wildcards match dot files too (``*`` matches ``.env``).

For free text (a ``bash`` command in a permission rule) ``/`` is an ordinary character, ``*``
matches anything (or anything but the given stop characters) and braces are literal.

Matching never backtracks: a pattern comes from a model, and a regex translation such as
``*a*a*a*a*a*a*a*a*b`` run by ``re`` takes exponential time holding the GIL (the whole runtime
froze). Instead the text is cut at its separators (``/`` for paths, the stop characters for
text) into parts, each matched against its part of the pattern by the classic greedy method: the
fixed runs between two ``*`` are searched for left to right, each at its first place (the first
place is always as good as any later one, since a ``*`` can absorb whatever lies between). The
same is done one level up, with ``**`` absorbing whole components. Each search is a ``re``
search of a fixed-length pattern (no quantifier), so a match costs at worst the text's length
times the pattern's, in C.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final

from ._errors import ConfigError

__all__ = ["MAX_ALTERNATIVES", "Glob", "compile_glob", "escape_glob"]

MAX_ALTERNATIVES: Final = 256
"""The most patterns ``{a,b}`` alternatives may expand to (``{a,b}{c,d}`` is four)."""

# A token of a part: a one-character regex fragment, or None for "*".
_Token = str | None
_Part = Callable[[str], bool]
_STARSTAR: Final = "**"
# Where a {a,b} group stood once expanded (a NUL: no path or command holds one).
_MARK: Final = "\0"


class Glob:
    """A compiled glob: :meth:`fullmatch` tells whether a whole text matches it.

    Attributes:
        pattern: the glob as written.
    """

    __slots__ = ("_alternatives", "_split", "pattern")

    def __init__(
        self,
        pattern: str,
        alternatives: list[Callable[[list[str], list[str]], bool]],
        split: Callable[[str], tuple[list[str], list[str]]],
    ) -> None:
        self.pattern = pattern
        self._alternatives = alternatives
        self._split = split

    def __repr__(self) -> str:
        return f"Glob({self.pattern!r})"

    def fullmatch(self, text: str) -> bool:
        """Whether all of *text* matches the pattern (time bounded by len(text) * len(pattern))."""
        parts, seps = self._split(text)
        return any(alt(parts, seps) for alt in self._alternatives)


def compile_glob(pattern: str, *, paths: bool = True, stop_chars: str = "") -> Glob:
    """Compile a glob *pattern* (see the module docstring).

    Args:
        pattern: the glob.
        paths: path semantics (``/`` is special, ``**`` crosses folders, braces alternate);
            otherwise free text, where ``*`` matches any run of characters.
        stop_chars: for free text, characters no wildcard may match (a literal one in the
            pattern still matches itself).

    Raises:
        ConfigError: braces expanding to more than :data:`MAX_ALTERNATIVES` patterns, or a
            bad character class (``[z-a]``).
        ValueError: *stop_chars* given with *paths*.
    """
    if paths and stop_chars:
        raise ValueError("stop_chars apply to free text only")
    stops = "/" if paths else stop_chars
    expanded = _expand_braces(pattern) if paths else [pattern]
    try:
        alternatives = [_compile_one(alt, stops, paths=paths) for alt in expanded]
    except re.error as exc:  # a class such as [z-a]
        raise ConfigError(f"glob {pattern!r}: bad character class ({exc})") from exc
    if stops:
        splitter = re.compile(f"([{re.escape(stops)}])")

        def split(text: str) -> tuple[list[str], list[str]]:
            pieces = splitter.split(text)
            return pieces[::2], pieces[1::2]
    else:

        def split(text: str) -> tuple[list[str], list[str]]:
            return [text], []

    return Glob(pattern, alternatives, split)


def escape_glob(text: str, *, paths: bool = True) -> str:
    """A glob that matches exactly *text* (wildcards and, for paths, braces made literal)."""
    specials = "*?[{" if paths else "*?["
    return "".join(f"[{c}]" if c in specials else c for c in text)


# --------------------------------------------------------------------------- compiling


def _expand_braces(pattern: str) -> list[str]:
    """Every pattern the ``{a,b}`` groups of *pattern* stand for, in order."""
    done: list[str] = []
    todo = [pattern]
    while todo:
        current = todo.pop()
        brace = _first_brace(current)
        if brace is None:
            done.append(current)
            continue
        start, end = brace
        head, tail = current[:start], current[end + 1 :]
        alternatives = current[start + 1 : end].split(",")
        # The mark keeps a "*" next to the group from merging with one in it into a "**".
        todo.extend(head + _MARK + alt + _MARK + tail for alt in reversed(alternatives))
        if len(done) + len(todo) > MAX_ALTERNATIVES:
            raise ConfigError(
                f"glob {pattern!r}: its {{a,b}} alternatives expand to more than "
                f"{MAX_ALTERNATIVES} patterns"
            )
    return done


def _first_brace(pattern: str) -> tuple[int, int] | None:
    """Where the first ``{...}`` outside a character class starts and ends, if any."""
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "[":
            end = _class_end(pattern, i)
            if end is not None:
                i = end + 1
                continue
        elif c == "{":
            end = pattern.find("}", i)
            if end != -1:
                return i, end
        i += 1
    return None


def _class_end(pattern: str, start: int) -> int | None:
    """The index of the ``]`` closing the class that opens at *start*; None if unclosed."""
    j = start + 1
    if j < len(pattern) and pattern[j] == "!":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1  # a "]" first in the class is a member, not the end
    end = pattern.find("]", j)
    return None if end == -1 else end


def _tokens(pattern: str, stops: str, *, paths: bool) -> list[list[_Token] | str]:
    """*pattern* cut into parts at its literal separators: token lists, ``**`` or separators.

    The result alternates: part, separator, part, ... (a part is a token list, or
    :data:`_STARSTAR` for a whole-component ``**`` in path mode).
    """
    out: list[list[_Token] | str] = []
    part: list[_Token] = []
    part_start = 0
    i, n = 0, len(pattern)
    merge = True  # whether a "*" joins the one before it (not across a group's mark)
    while i < n:
        c = pattern[i]
        if c == _MARK and paths:
            merge = False
            i += 1
            continue
        if c == "*":
            j = i
            while j < n and pattern[j] == "*":
                j += 1
            rest = pattern[j:]
            whole = i == part_start and (not rest or rest[0] == "/")
            if paths and j - i >= 2 and whole:
                out.append(_STARSTAR)
                if not rest:
                    return out
                out.append("/")
                part = []
                part_start = i = n - len(rest) + 1
                continue
            if not part or part[-1] is not None or not merge:
                part.append(None)
            merge = True
            i = j
        elif c in stops:
            out.append(part)
            out.append(c)
            part = []
            i += 1
            part_start = i
            merge = True
        elif c == "?":
            part.append(".")
            i += 1
        elif c == "[" and (end := _class_end(pattern, i)) is not None:
            body = pattern[i + 1 : end]
            negate = body.startswith("!")
            if negate:
                body = body[1:]
            members = body.replace("\\", "\\\\").replace("^", "\\^").replace("[", "\\[")
            part.append(f"[^{members}]" if negate else f"[{members}]")
            i = end + 1
        else:
            part.append(re.escape(c))
            i += 1
    out.append(part)
    return out


def _compile_one(
    pattern: str, stops: str, *, paths: bool
) -> Callable[[list[str], list[str]], bool]:
    pieces = _tokens(pattern, stops, paths=paths)
    parts: list[_Part | None] = []  # None: a whole-component "**"
    seps: list[str] = []
    for k, piece in enumerate(pieces):
        if isinstance(piece, list):
            parts.append(_compile_part(piece))
        elif k % 2:
            seps.append(piece)  # odd places hold separators
        else:
            parts.append(None)  # a whole-component "**"
    if parts and parts[-1] is None and len(parts) > 1:
        # "docs/**": at least one component after "docs/" (the empty one of "docs/" included).
        parts.insert(-1, _any_part)
        seps.insert(-1, "/")
    if None not in parts:
        fixed: list[_Part] = [p for p in parts if p is not None]

        def match_fixed(text_parts: list[str], text_seps: list[str]) -> bool:
            return (
                len(text_parts) == len(fixed)
                and text_seps == seps
                and all(m(t) for m, t in zip(fixed, text_parts, strict=True))
            )

        return match_fixed
    # Path mode with "**": every separator is "/", so only the components matter.
    runs: list[list[_Part]] = [[]]
    for p in parts:
        if p is None:
            runs.append([])
        else:
            runs[-1].append(p)

    def match_components(text_parts: list[str], text_seps: list[str]) -> bool:
        return _match_runs(runs, text_parts)

    return match_components


def _any_part(text: str) -> bool:
    return True


def _compile_part(tokens: Sequence[_Token]) -> _Part:
    """A matcher of one part (no separator in it) for *tokens* (``None`` is ``*``)."""
    chunks: list[list[str]] = [[]]
    for token in tokens:
        if token is None:
            chunks.append([])
        else:
            chunks[-1].append(token)
    if len(chunks) == 1:
        whole = re.compile("".join(chunks[0]), re.DOTALL)
        return lambda text: whole.fullmatch(text) is not None
    first = re.compile("".join(chunks[0]), re.DOTALL)
    last = re.compile("".join(chunks[-1]), re.DOTALL)
    first_len, last_len = len(chunks[0]), len(chunks[-1])
    middle = [(re.compile("".join(c), re.DOTALL), len(c)) for c in chunks[1:-1] if c]

    def match(text: str) -> bool:
        end = len(text) - last_len
        if end < first_len or not first.match(text, 0, first_len):
            return False
        if not last.match(text, end):
            return False
        pos = first_len
        for regex, _size in middle:
            found = regex.search(text, pos, end)
            if found is None:
                return False
            pos = found.end()
        return True

    return match


def _match_runs(runs: list[list[_Part]], parts: list[str]) -> bool:
    """Whether *parts* matches run, ``**``, run, ``**``, ..., run (each run fixed-length)."""
    first, last = runs[0], runs[-1]
    end = len(parts) - len(last)
    if end < len(first):
        return False
    if not all(m(p) for m, p in zip(first, parts, strict=False)):
        return False
    if not all(m(p) for m, p in zip(last, parts[end:], strict=True)):
        return False
    pos = len(first)
    for run in runs[1:-1]:
        if not run:
            continue
        size = len(run)
        while True:
            if pos + size > end:
                return False
            if all(m(p) for m, p in zip(run, parts[pos : pos + size], strict=True)):
                break
            pos += 1
        pos += size
    return True
