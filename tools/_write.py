"""The ``write`` tool, and the atomic file replacement ``edit`` shares."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from collections.abc import Mapping
from typing import Any, ClassVar

import trio

from runtime.core import (
    Located,
    TargetKind,
    Tool,
    ToolContext,
    ToolError,
    locate,
    normalise_target,
    one_line,
)

from ._read import SWAP_RETRIES, Swapped

__all__ = ["WriteTool", "atomic_write", "count_lines"]


def _read_umask() -> int:
    # /proc tells the umask without changing it; os.umask() can only be read by setting it,
    # which races with other threads creating files, so it is the fallback (run once, at import).
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            match = re.search(r"^Umask:\s*([0-7]+)$", fh.read(), re.MULTILINE)
        if match:
            return int(match.group(1), 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def atomic_write(place: Located, data: bytes) -> bool:
    """Replace the file at *place* with *data* so readers see the old or the new file, never a mix.

    The data goes to a new temporary file in the same folder, created relative to the folder's
    descriptor (same filesystem, so the rename is atomic; same folder that was checked, whatever
    was swapped meanwhile), is flushed to disk, then renamed over the file. An existing file
    keeps its permission bits; a new one gets the usual ``0o666 & ~umask``. The rename replaces
    the name, so a hard link to the old file (another name elsewhere) keeps the old content. On
    failure the temporary file is removed and the file is untouched.

    Returns:
        Whether the file existed before.

    Raises:
        Swapped: the file became a symlink since *place* was resolved.
        OSError: from the filesystem.
    """
    st = place.lstat()
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise Swapped
    mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_UMASK
    # Keep the temporary name well under NAME_MAX whatever the file's own name is.
    tmp = f".{place.name[:100]}.{secrets.token_hex(6)}.tmp"
    fd = os.open(
        tmp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
        dir_fd=place.dir_fd,
    )
    replaced = False
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
            os.fchmod(fh.fileno(), mode)
        os.replace(tmp, place.name, src_dir_fd=place.dir_fd, dst_dir_fd=place.dir_fd)
        replaced = True
    finally:
        if not replaced:  # whatever stopped us: no temporary file left behind
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=place.dir_fd)
    return st is not None


def count_lines(text: str) -> int:
    """Lines in *text*, counting a last line without a newline."""
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


class WriteTool(Tool):
    """``write``: create or overwrite a file with the given content."""

    name: ClassVar[str] = "write"
    description: ClassVar[str] = (
        "Write a file in the workspace, replacing it if it exists. Creates missing folders. "
        "The write is atomic: the file never holds a partial content."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "description": "the file to write"},
            "content": {"type": "string", "description": "the complete new content"},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }
    needs_permission: ClassVar[bool] = True
    edits_files: ClassVar[bool] = True
    permission_target_kind: ClassVar[TargetKind] = "path"

    def summary(self, args: Mapping[str, Any]) -> str:
        """``write: <path>``."""
        return one_line(f"write: {args.get('path', '')}")

    def permission_target(self, args: Mapping[str, Any]) -> str:
        """The path, normalised."""
        return normalise_target(str(args.get("path", "")))

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        """Write the file; say how many bytes and lines were written.

        The write runs in a worker thread that is NOT abandoned on cancellation: a cancelled
        call waits for the (atomic) write to finish or fail, so when it returns the file is
        either fully the old or fully the new content, and nothing runs on in the background.
        """
        return await trio.to_thread.run_sync(
            _write, ctx, str(args["path"]), str(args["content"])
        )


def _write(ctx: ToolContext, path: str, content: str) -> str:
    shown = normalise_target(path, ctx.workspace)
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(f"input.content: not valid Unicode text ({exc.reason})") from exc
    missing = _missing_folders(ctx, path)
    written = False
    try:
        result = _write_data(ctx, path, shown, data, content)
        written = True
        return result
    finally:
        if not written:
            # A write that failed (or was cancelled) leaves the workspace as it found it: the
            # folders it made on the way (docs/tools.md) go again, deepest first, each only
            # while it is still empty.
            _remove_folders(ctx, missing)


def _missing_folders(ctx: ToolContext, path: str) -> list[str]:
    """The folders on the way to *path* that do not exist yet (workspace-relative, shallowest
    first): those a write makes."""
    try:
        with locate(ctx.workspace, path) as place:
            parts = place.parts
        for depth in range(1, len(parts)):
            folder = "/".join(parts[:depth])
            with locate(ctx.workspace, folder) as place:
                if place.lstat() is None:  # the first missing one: all below it are too
                    return ["/".join(parts[:i]) for i in range(depth, len(parts))]
    except ToolError:
        return []  # refused as it stands: the write is refused the same way, making nothing
    return []


def _remove_folders(ctx: ToolContext, folders: list[str]) -> None:
    for folder in reversed(folders):
        try:
            with locate(ctx.workspace, folder) as place:
                os.rmdir(place.name, dir_fd=place.dir_fd)
        except (OSError, ToolError):
            return  # not empty (someone else's now), or gone: the ones above it stay too


def _write_data(ctx: ToolContext, path: str, shown: str, data: bytes, content: str) -> str:
    for _ in range(SWAP_RETRIES):
        with locate(ctx.workspace, path, make_folders=True) as place:
            st = place.lstat()
            if not place.parts or (st is not None and stat.S_ISDIR(st.st_mode)):
                raise ToolError(f"{shown} is a folder; give a file path")
            try:
                existed = atomic_write(place, data)
            except Swapped:
                continue
            except OSError as exc:
                raise ToolError(f"cannot write {shown}: {exc.strerror or exc}") from exc
            break
    else:
        raise ToolError(f"{shown} kept changing while it was written (a symlink swapped in)")
    verb = "overwrote" if existed else "created"
    return f"{verb} {shown}: {len(data)} bytes, {count_lines(content)} lines"
