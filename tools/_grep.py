"""The ``grep`` tool: search file contents with a Python regex.

The pattern comes from a model, so it may backtrack without end (``(a|aa)+$`` on a long line).
Python's ``re`` holds the GIL for the whole of one match: such a pattern, even in a worker
thread, would freeze the event loop and every agent with it, Ctrl+C included. So:

- the pattern must be valid ``re`` syntax (what the tool promises the model), checked with ``re``;
- it must not be huge once its counted repeats are written out (``(a{1000}){1000}`` is a
  million): the ``regex`` module compiles repeats that way, and would take the process's memory;
- lines are matched with ``regex`` in its ``re``-compatible ``VERSION0`` mode, which releases the
  GIL while it matches (``concurrent=True``) and stops a match at a deadline (``timeout``): one
  call searches for at most ``ToolLimits.grep_timeout_s``. It differs from ``re`` in corners:
  ``[[:alpha:]]`` is a POSIX class (what a model used to grep means; ``re`` reads a set of
  characters), ``\\w`` also matches combining marks but not ``²``, ``\\s`` does not match the
  separators ``\\x1c``-``\\x1f``, and some case-insensitive matches of dotted and dotless i;
- a literal every match must contain (``def `` in ``def \\w+\\(``) is looked for first with
  ``in``: most lines of a search never reach the regex engine, which costs ~2 us a call here.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import threading
import time
import warnings
from collections.abc import Generator, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from runtime.core import (
    ConfigError,
    Glob,
    Located,
    TargetKind,
    Tool,
    ToolContext,
    ToolError,
    ToolLimits,
    compile_glob,
    locate,
    normalise_target,
    one_line,
)

from ._glob import FoundFile, iter_files, run_in_thread_with_stop
from ._read import BINARY_SNIFF_BYTES, looks_binary

if TYPE_CHECKING:
    import regex

__all__ = ["GrepTool"]

# A matching line longer than this is cut in the output: minified files would drown the model.
_MAX_LINE_CHARS = 500
# The most items a pattern may have with its counted repeats written out (see the docstring).
_MAX_PATTERN_UNITS = 20_000


class GrepTool(Tool):
    """``grep``: lines matching a regex, as ``path:line:text``."""

    name: ClassVar[str] = "grep"
    description: ClassVar[str] = (
        "Search file contents with a Python regular expression. Prints matching lines as "
        "'path:line_number:line', paths relative to the workspace. 'path' is a file or folder "
        "(default: the workspace); 'include' keeps only files whose name matches a glob, e.g. "
        "'*.py' or '*.{ts,tsx}'. Binary files and .git folders are skipped."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "description": "a Python regex"},
            "path": {"type": "string", "description": "file or folder (default: workspace)"},
            "include": {"type": "string", "description": "glob on file names, e.g. '*.py'"},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    read_only: ClassVar[bool] = True
    concurrency_safe: ClassVar[bool] = True
    needs_permission: ClassVar[bool] = False
    permission_target_kind: ClassVar[TargetKind] = "path"

    def summary(self, args: Mapping[str, Any]) -> str:
        """``grep: <pattern>``."""
        return one_line(f"grep: {args.get('pattern', '')}")

    def permission_target(self, args: Mapping[str, Any]) -> str:
        """The file or folder searched, normalised (``.`` for the workspace)."""
        return normalise_target(str(args.get("path") or "."))

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        """Search and return the matching lines.

        The search runs in a worker thread, matching without the GIL, for at most
        ``ctx.limits.grep_timeout_s``. Cancellation: immediate; the abandoned thread stops at
        its next file, or at the deadline within a match. Nothing is changed on disk.

        Raises:
            ToolError: an invalid pattern, path or include, or the search hit its deadline.
        """
        pattern = str(args["pattern"])
        needle = _check_pattern(pattern)
        include = args.get("include")
        if include is not None and (include.startswith("/") or ".." in include.split("/")):
            raise ToolError("input.include: must be a relative glob without '..'")
        deadline = time.monotonic() + ctx.limits.grep_timeout_s
        search = _Search(pattern, needle, deadline)
        path = str(args.get("path") or ".")
        return await run_in_thread_with_stop(_grep, ctx, search, path, include)


class _Search:
    """What one call looks for: the pattern (compiled in the worker thread), needle, deadline."""

    def __init__(self, pattern: str, needle: str | None, deadline: float) -> None:
        self.pattern = pattern
        self.needle = needle
        self.deadline = deadline
        self._compiled: regex.Pattern[str] | None = None

    def compiled(self) -> regex.Pattern[str]:
        if self._compiled is None:
            # Imported here, in the worker thread of the first search: its ~10 ms are not
            # every run's start-up (bench/README.md, "Resume").
            import regex

            try:
                self._compiled = regex.compile(self.pattern, cache_pattern=False)
            except (regex.error, RecursionError) as exc:  # re accepted it: should not happen
                raise ToolError(f"input.pattern: invalid regex {self.pattern!r}: {exc}") from exc
        return self._compiled


def _check_pattern(pattern: str) -> str | None:
    """Check *pattern* (see the module docstring); returns a literal every match contains.

    Raises:
        ToolError: not valid ``re`` syntax, or too big once its counted repeats are expanded.
    """
    with warnings.catch_warnings():
        # re warns about what regex reads otherwise ("Possible nested set" for [[:alpha:]]):
        # not for the user's terminal, and regex is what matches.
        warnings.simplefilter("ignore")
        try:
            re.compile(pattern)
        except (re.error, RecursionError, OverflowError) as exc:
            raise ToolError(f"input.pattern: invalid regex {pattern!r}: {exc}") from exc
        try:
            from re import _parser  # type: ignore[attr-defined]

            parsed = _parser.parse(pattern)
        except (ImportError, AttributeError, re.error, RecursionError):  # a future Python
            return None
    units = _units(_parser, parsed)
    if units > _MAX_PATTERN_UNITS:
        raise ToolError(
            f"input.pattern: {pattern!r} is too big once its counted repeats are written out "
            f"(over {_MAX_PATTERN_UNITS} items); use smaller {{n}} counts"
        )
    if parsed.state.flags & re.IGNORECASE:
        return None
    best: list[int] = []
    run: list[int] = []
    for op, value in [*parsed, (None, None)]:
        if op is _parser.LITERAL:
            run.append(value)
            continue
        if len(run) > len(best):
            best = run
        run = []
    return "".join(map(chr, best)) or None


def _units(parser: Any, items: Any) -> int:
    """The size of a parsed pattern with its counted repeats written out (stops past the limit)."""
    total = 0
    repeats = (parser.MAX_REPEAT, parser.MIN_REPEAT, getattr(parser, "POSSESSIVE_REPEAT", None))
    for op, value in items:
        if op in repeats:
            low, high, body = value
            copies = low + 1 if high == parser.MAXREPEAT else high
            total += max(copies, 1) * _units(parser, body)
        elif op is parser.SUBPATTERN:
            total += _units(parser, value[-1])
        elif op is parser.BRANCH:
            total += sum(_units(parser, branch) for branch in value[1])
        elif op in (parser.ASSERT, parser.ASSERT_NOT):
            total += _units(parser, value[1])
        elif op is getattr(parser, "ATOMIC_GROUP", None):
            total += _units(parser, value)
        elif op is parser.GROUPREF_EXISTS:
            total += _units(parser, value[1]) + (_units(parser, value[2]) if value[2] else 0)
        else:
            total += 1
        if total > _MAX_PATTERN_UNITS:
            break
    return total


class _Notes:
    """What a search left out, for the result: long lines cut, big files cut."""

    def __init__(self) -> None:
        self.long_lines = 0
        self.cut_files: list[str] = []

    def lines(self, limits: ToolLimits) -> list[str]:
        out = []
        if self.long_lines:
            out.append(
                f"[{self.long_lines} lines longer than {limits.grep_max_line_bytes} bytes were "
                "searched in their first part only; search them with bash]"
            )
        if self.cut_files:
            names = ", ".join(self.cut_files[:5]) + (" …" if len(self.cut_files) > 5 else "")
            out.append(
                f"[{len(self.cut_files)} files bigger than {limits.grep_max_file_bytes} bytes "
                f"were searched in their first part only: {names}]"
            )
        return out


def _grep(
    ctx: ToolContext, search: _Search, path: str, include: str | None, stop: threading.Event
) -> str:
    try:
        include_glob = compile_glob(include.removeprefix("./")) if include else None
    except ConfigError as exc:
        raise ToolError(f"input.include: {exc}") from exc
    with locate(ctx.workspace, path) as start:
        st = start.lstat()
        if st is None:
            raise ToolError(f"no such file or folder: {path}")
        files: Generator[FoundFile]
        if stat.S_ISDIR(st.st_mode):
            files = iter_files(start, skip_git=".git" not in start.parts, stop=stop)
        elif stat.S_ISREG(st.st_mode):
            files = _one(FoundFile("", start.dir_fd, start.name))
        else:
            raise ToolError(f"not a regular file or folder: {path}")
        with contextlib.closing(files):
            return _search_files(ctx, search, start, files, include, include_glob, stop)


def _one(file: FoundFile) -> Generator[FoundFile]:
    yield file


def _search_files(
    ctx: ToolContext,
    search: _Search,
    start: Located,
    files: Iterator[FoundFile],
    include: str | None,
    include_glob: Glob | None,
    stop: threading.Event,
) -> str:
    # Without a "/", an include glob matches the file name; with one, the path under `start`.
    by_name = include is not None and "/" not in include
    prefix = "" if not start.parts else start.rel + "/"
    max_matches = ctx.limits.grep_max_matches
    max_chars = ctx.limits.max_output_chars
    notes = _Notes()
    out: list[str] = []
    size = 0
    cut_short = ""
    for file in files:
        if include_glob is not None:
            if not file.rel:
                subject = file.name
            else:
                subject = file.rel.rsplit("/", 1)[-1] if by_name else file.rel
            if not include_glob.fullmatch(subject):
                continue
        single_file = not file.rel
        shown = start.rel if single_file else prefix + file.rel
        # closing(): leaving the loop early must close the file now, not when collected.
        lines = _matching_lines(file, search, stop, ctx.limits, notes, shown, single_file)
        with contextlib.closing(lines) as matches:
            for lineno, line in matches:
                if len(out) >= max_matches:
                    cut_short = (
                        f"[stopped after {max_matches} matches; "
                        "narrow the pattern, path or include]"
                    )
                    break
                text = line if len(line) <= _MAX_LINE_CHARS else line[:_MAX_LINE_CHARS] + "…"
                entry = f"{shown}:{lineno}:{text}"
                if size + len(entry) + 1 > max_chars:
                    cut_short = (
                        f"[stopped after {len(out)} matches: output limit of {max_chars} "
                        "characters; narrow the pattern, path or include]"
                    )
                    break
                out.append(entry)
                size += len(entry) + 1
        if cut_short or stop.is_set():
            break
    if not out:
        out.append(f"no matches for {search.pattern!r}")
    if cut_short:
        out.append(cut_short)
    out += notes.lines(ctx.limits)
    return "\n".join(out)


def _matching_lines(
    file: FoundFile,
    search: _Search,
    stop: threading.Event,
    limits: ToolLimits,
    notes: _Notes,
    shown: str,
    single_file: bool,
) -> Generator[tuple[int, str]]:
    """(line number, line) pairs of *file* that match; nothing for unreadable files.

    A line longer than ``limits.grep_max_line_bytes`` is searched in its first part, the rest
    skipped without being kept; a file is read up to ``limits.grep_max_file_bytes``; *notes*
    counts both. Binary files yield nothing (or, named on their own, are an error).

    Raises:
        ToolError: the search's deadline passed, or the single file named is binary.
    """
    monotonic = time.monotonic
    needle = search.needle
    deadline = search.deadline
    compiled = search.compiled()
    max_line = limits.grep_max_line_bytes
    budget = limits.grep_max_file_bytes
    try:
        fd = os.open(
            file.name,
            os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
            dir_fd=file.dir_fd,
        )
    except OSError:
        return  # swapped for a symlink, vanished or unreadable since it was found
    with os.fdopen(fd, "rb") as fh:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return
            if looks_binary(fh.read(BINARY_SNIFF_BYTES)):
                if single_file:
                    raise ToolError(
                        f"{shown} looks like a binary file (it has NUL bytes); grep searches text"
                    )
                return
            fh.seek(0)
            lineno = 0
            while budget > 0:
                raw = fh.readline(min(max_line, budget))
                if not raw:
                    break
                budget -= len(raw)
                lineno += 1
                if not raw.endswith(b"\n") and len(raw) == max_line:
                    # A long line: skip the rest of it, a bounded read at a time.
                    notes.long_lines += 1
                    while budget > 0:
                        rest = fh.readline(min(1 << 20, budget))
                        budget -= len(rest)
                        if not rest or rest.endswith(b"\n"):
                            break
                if lineno % 64 == 0 and stop.is_set():
                    return
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                if needle is not None and needle not in line:
                    continue
                left = deadline - monotonic()
                try:
                    if left <= 0:
                        raise TimeoutError
                    found = compiled.search(line, concurrent=True, timeout=left)
                except TimeoutError:
                    raise ToolError(_too_long(search.pattern)) from None
                if found:
                    yield lineno, line
            if budget <= 0 and fh.read(1):
                notes.cut_files.append(shown)
        except OSError:
            return


def _too_long(pattern: str) -> str:
    return (
        f"the search for {pattern!r} was stopped at its time limit (grep_timeout_s); a pattern "
        "with nested repeats such as (a|aa)+ can take forever on some lines: simplify it, or "
        "narrow the path or include"
    )
