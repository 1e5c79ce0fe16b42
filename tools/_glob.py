"""The ``glob`` tool, and the file walk it shares with ``grep``.

The pattern syntax is :func:`runtime.core.compile_glob`'s (shared with permission rules).
"""

from __future__ import annotations

import heapq
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, TypeVar, TypeVarTuple

import trio

from runtime.core import (
    TargetKind,
    Tool,
    ToolContext,
    ToolError,
    compile_glob,
    is_inside,
    normalise_target,
    one_line,
    relative,
    resolve_in_workspace,
)

__all__ = ["GlobTool", "iter_files"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


def iter_files(
    root: Path, start: Path, *, skip_git: bool = True, stop: threading.Event | None = None
) -> Iterator[Path]:
    """Regular files under the folder *start*, never leaving the workspace *root*.

    Folders are visited in name order, a folder's files before its sub-folders. Symlinked
    folders are not entered (no loops, no escapes, no duplicates); a symlinked file is yielded
    only if it resolves to a regular file inside *root*. FIFOs, sockets and devices are skipped,
    so a reader never blocks on one. Unreadable folders are skipped.

    Args:
        root: the resolved workspace.
        start: a resolved folder inside *root*.
        skip_git: leave out ``.git`` folders.
        stop: when set, the walk ends early (a cancelled call running in a thread).

    Yields:
        Paths under *start*, not resolved (a symlinked file keeps its own name).
    """
    stack = [start]
    while stack:
        if stop is not None and stop.is_set():
            return
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        subfolders: list[Path] = []
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if not (skip_git and entry.name == ".git"):
                        subfolders.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    yield Path(entry.path)
                elif entry.is_symlink():
                    real = Path(os.path.realpath(entry.path))
                    if is_inside(root, real) and real.is_file():
                        yield Path(entry.path)
            except OSError:
                continue  # vanished or unreadable while we looked: not our business
        stack.extend(reversed(subfolders))


def resolve_folder(workspace: Path, path: str) -> Path:
    """The folder *path* resolved inside the workspace; a ToolError if it is not a folder."""
    real = resolve_in_workspace(workspace, path)
    if not real.exists():
        raise ToolError(f"no such folder: {path}")
    if not real.is_dir():
        raise ToolError(f"not a folder: {path}")
    return real


# The worker threads of glob and grep: their own limiter, not trio's default one, because an
# abandoned thread keeps its slot until it really ends (a grep inside one long match, up to its
# deadline): a burst of cancelled searches must not hold up every other to_thread call.
_FILE_TOOL_LIMITER: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar(
    "file_tool_limiter"
)
FILE_TOOL_THREADS = 8
"""How many glob and grep searches run at once per trio run (each in a worker thread)."""


async def run_in_thread_with_stop(
    work: Callable[[*Ts, threading.Event], T], *args: *Ts
) -> T:
    """Run ``work(*args, stop)`` in a worker thread; cancelling the call abandons the thread.

    Abandoning keeps the event loop responsive however big the tree; *stop* is set so the
    abandoned thread notices soon and ends instead of walking on for nothing. The threads have
    a limiter of their own (:data:`FILE_TOOL_THREADS`).
    """
    try:
        limiter = _FILE_TOOL_LIMITER.get()
    except LookupError:
        limiter = trio.CapacityLimiter(FILE_TOOL_THREADS)
        _FILE_TOOL_LIMITER.set(limiter)
    stop = threading.Event()
    try:
        return await trio.to_thread.run_sync(
            work, *args, stop, abandon_on_cancel=True, limiter=limiter
        )
    finally:
        stop.set()


class GlobTool(Tool):
    """``glob``: files whose paths match a pattern, sorted, relative to the workspace."""

    name: ClassVar[str] = "glob"
    description: ClassVar[str] = (
        "Find files by path pattern, e.g. '**/*.py' or 'src/**/test_*.py'. '*' matches within one "
        "folder, '**' across folders, '{a,b}' either. Matches files (not folders) relative to "
        "'path' (default: the workspace); results are sorted paths relative to the workspace. "
        ".git folders are skipped unless the pattern names them."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "description": "the glob pattern"},
            "path": {"type": "string", "description": "folder to search in (default: workspace)"},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    read_only: ClassVar[bool] = True
    concurrency_safe: ClassVar[bool] = True
    needs_permission: ClassVar[bool] = False
    permission_target_kind: ClassVar[TargetKind] = "path"

    def summary(self, args: Mapping[str, Any]) -> str:
        """``glob: <pattern>``."""
        return one_line(f"glob: {args.get('pattern', '')}")

    def permission_target(self, args: Mapping[str, Any]) -> str:
        """The folder searched, normalised (``.`` for the workspace)."""
        return normalise_target(str(args.get("path") or "."))

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        """List the matching files.

        The walk runs in a worker thread. Cancellation: immediate; the abandoned thread stops at
        its next folder. Nothing is changed on disk.
        """
        pattern = str(args["pattern"])
        if pattern.startswith("/"):
            raise ToolError(
                "input.pattern: must be relative to 'path' (give the folder in 'path')"
            )
        if ".." in PurePosixPath(pattern).parts:
            raise ToolError("input.pattern: '..' is not allowed")
        pattern = pattern.removeprefix("./")
        folder = str(args.get("path") or ".")
        limit = ctx.limits.glob_max_results
        found, total = await run_in_thread_with_stop(
            _glob, ctx.workspace, folder, pattern, limit
        )
        if not found:
            return f"no files match {pattern!r}"
        lines = "\n".join(found)
        if total > len(found):
            lines += (
                f"\n[showing the first {len(found)} of {total} matches; "
                "narrow the pattern or the path]"
            )
        return lines


def _glob(
    workspace: Path, folder: str, pattern: str, limit: int, stop: threading.Event
) -> tuple[list[str], int]:
    root = Path(os.path.realpath(workspace))
    start = resolve_folder(root, folder)
    regex = compile_glob(pattern)
    skip_git = ".git" not in PurePosixPath(pattern).parts and ".git" not in start.parts
    total = 0

    def matches() -> Iterator[str]:
        nonlocal total
        for path in iter_files(root, start, skip_git=skip_git, stop=stop):
            if regex.fullmatch(path.relative_to(start).as_posix()):
                total += 1
                yield relative(root, path)

    # nsmallest keeps only `limit` paths in memory, however many files match.
    found = heapq.nsmallest(limit, matches())
    return found, total
