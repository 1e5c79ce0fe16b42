"""The ``write`` tool, and the atomic file replacement ``edit`` shares."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import trio

from runtime.core import (
    TargetKind,
    Tool,
    ToolContext,
    ToolError,
    normalise_target,
    one_line,
    resolve_in_workspace,
)

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


def atomic_write(real: Path, data: bytes) -> None:
    """Replace the file *real* with *data* so readers see the old or the new file, never a mix.

    The data goes to a temporary file in the same folder (same filesystem, so the rename is
    atomic), is flushed to disk, then renamed over *real*. An existing file keeps its
    permission bits; a new one gets the usual ``0o666 & ~umask``. On failure the temporary
    file is removed and *real* is untouched.

    Raises:
        OSError: from the filesystem.
    """
    try:
        mode = stat.S_IMODE(os.stat(real).st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_UMASK
    # Keep the temporary name well under NAME_MAX whatever the file's own name is.
    fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name[:100]}.", suffix=".tmp")
    replaced = False
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, real)
        replaced = True
    finally:
        if not replaced:  # whatever stopped us: no temporary file left behind
            with contextlib.suppress(OSError):
                os.unlink(tmp)


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
    real = resolve_in_workspace(ctx.workspace, path)
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(f"input.content: not valid Unicode text ({exc.reason})") from exc
    if real.is_dir():
        raise ToolError(f"{shown} is a folder; give a file path")
    existed = real.exists()
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise ToolError(
            f"cannot create the folders for {shown}: a part of the path is a file"
        ) from exc
    except OSError as exc:
        raise ToolError(f"cannot create the folders for {shown}: {exc.strerror or exc}") from exc
    try:
        atomic_write(real, data)
    except OSError as exc:
        raise ToolError(f"cannot write {shown}: {exc.strerror or exc}") from exc
    verb = "overwrote" if existed else "created"
    return f"{verb} {shown}: {len(data)} bytes, {count_lines(content)} lines"
