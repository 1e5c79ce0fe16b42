"""The ``glob`` tool, and the file walk it shares with ``grep``.

The pattern syntax is :func:`runtime.core.compile_glob`'s (shared with permission rules).
"""

from __future__ import annotations

import heapq
import os
import posixpath
import stat
import threading
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, Final, NamedTuple, TypeVar, TypeVarTuple

import trio

from runtime.core import (
    RUNTIME_DIR,
    ConfigError,
    Located,
    TargetKind,
    Tool,
    ToolContext,
    ToolError,
    compile_glob,
    locate,
    normalise_target,
    one_line,
)

__all__ = ["FoundFile", "GlobTool", "iter_files", "open_folder"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class FoundFile(NamedTuple):
    """A regular file :func:`iter_files` found; its descriptor is valid until the next one.

    Attributes:
        rel: the file's path under the walk's start, POSIX style (not resolved: a symlink keeps
            its own name).
        dir_fd: a descriptor of the folder holding the file (the link's target's, for a link).
        name: the file's name in that folder: open it with ``dir_fd`` and ``O_NOFOLLOW``.
    """

    rel: str
    dir_fd: int
    name: str


MAX_WALK_DEPTH: Final = 256
"""How deep the walk goes below its start: it holds a descriptor per level."""


def iter_files(
    start: Located, *, skip_git: bool = True, stop: threading.Event | None = None
) -> Generator[FoundFile]:
    """Regular files under the folder *start*, never leaving the workspace.

    Folders are visited in name order, a folder's files before its sub-folders. The walk goes
    from descriptor to descriptor (each folder opened relative to its parent, never through a
    symlink), so a folder swapped for a symlink meanwhile is skipped, not followed. Symlinked
    folders are not entered (no loops, no escapes, no duplicates); a symlinked file is yielded
    only if it resolves to a regular file inside the workspace. FIFOs, sockets and devices are
    skipped, so a reader never blocks on one. Unreadable folders, ``.trio-agents`` folders (the
    runtime's own files) and folders deeper than :data:`MAX_WALK_DEPTH` are skipped.

    Args:
        start: a located folder of the workspace.
        skip_git: leave out ``.git`` folders.
        stop: when set, the walk ends early (a cancelled call running in a thread).

    Yields:
        The files, each valid until the next is asked for.
    """
    try:
        top = start.open(os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    # One entry per open folder on the way down: its descriptor, path (relative to the start,
    # "" for the start, else ending with "/") and sub-folders still to visit.
    stack: list[tuple[int, str, Iterator[str]]] = []
    pending: tuple[int, str] | None = (top, "")
    try:
        while pending is not None or stack:
            if stop is not None and stop.is_set():
                return
            if pending is not None:
                fd, folder = pending
                pending = None
                subfolders: list[str] = []
                yield from _folder_files(fd, folder, start, skip_git, subfolders)
                stack.append((fd, folder, iter(subfolders)))
                continue
            fd, folder, names = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                os.close(fd)
                continue
            if len(stack) > MAX_WALK_DEPTH:
                continue
            try:
                child = os.open(name, _SUBFOLDER_FLAGS, dir_fd=fd)
            except OSError:
                continue  # swapped for a symlink, vanished or unreadable: not entered
            pending = (child, f"{folder}{name}/")
    finally:
        if pending is not None:
            os.close(pending[0])
        for fd, _, _ in stack:
            os.close(fd)


_SUBFOLDER_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _folder_files(
    fd: int, folder: str, start: Located, skip_git: bool, subfolders: list[str]
) -> Iterator[FoundFile]:
    """Yield the regular files of the open folder *fd*; add its sub-folders' names, sorted."""
    try:
        with os.scandir(fd) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                if not (skip_git and entry.name == ".git") and entry.name != RUNTIME_DIR:
                    subfolders.append(entry.name)
            elif entry.is_file(follow_symlinks=False):
                yield FoundFile(folder + entry.name, fd, entry.name)
            elif entry.is_symlink():
                rel = folder + entry.name
                with locate(start.root, posixpath.join(*start.parts, rel)) as place:
                    st = place.lstat()
                    if st is not None and stat.S_ISREG(st.st_mode):
                        yield FoundFile(rel, place.dir_fd, place.name)
        except (OSError, ToolError):
            continue  # vanished, unreadable or leading out while we looked: not our business


def open_folder(workspace: Path, path: str) -> Located:
    """The folder *path* located inside the workspace (close it); a ToolError if not a folder."""
    place = locate(workspace, path)
    ok = False
    try:
        st = place.lstat()
        if st is None:
            raise ToolError(f"no such folder: {path}")
        if not stat.S_ISDIR(st.st_mode):
            raise ToolError(f"not a folder: {path}")
        ok = True
    finally:
        if not ok:  # the caller gets no place to close
            place.close()
    return place


# The worker threads of glob and grep: their own limiter, not trio's default one, because an
# abandoned thread keeps its slot until it really ends (a grep inside one long match, up to its
# deadline): a burst of cancelled searches must not hold up every other to_thread call.
_FILE_TOOL_LIMITER: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar(
    "file_tool_limiter"
)
FILE_TOOL_THREADS = 8
"""How many glob and grep searches run at once per trio run (each in a worker thread)."""


async def run_in_thread_with_stop(work: Callable[[*Ts, threading.Event], T], *args: *Ts) -> T:
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
    try:
        glob = compile_glob(pattern)
    except ConfigError as exc:
        raise ToolError(f"input.pattern: {exc}") from exc
    with open_folder(workspace, folder) as start:
        prefix = "" if not start.parts else start.rel + "/"
        skip_git = ".git" not in PurePosixPath(pattern).parts and ".git" not in start.parts
        total = 0

        def matches() -> Iterator[str]:
            nonlocal total
            for found in iter_files(start, skip_git=skip_git, stop=stop):
                if glob.fullmatch(found.rel):
                    total += 1
                    yield prefix + found.rel

        # nsmallest keeps only `limit` paths in memory, however many files match.
        found = heapq.nsmallest(limit, matches())
    return found, total
