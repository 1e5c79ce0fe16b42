"""The ``read`` tool: a text file with line numbers, a slice at a time."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Final

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

__all__ = [
    "SWAP_RETRIES",
    "ReadTool",
    "Swapped",
    "looks_binary",
    "read_at",
    "read_file_bytes",
    "read_text_file",
]

# How much of a file decides whether it is binary (git and grep look at a similar prefix).
BINARY_SNIFF_BYTES = 8192
# How many times a file swapped for a symlink while it was opened is resolved again.
SWAP_RETRIES: Final = 3
# Longer lines are cut in the output; the note tells the model to use grep or bash for them.
_MAX_LINE_CHARS = 2_000


def looks_binary(head: bytes) -> bool:
    """Whether a file starting with *head* is binary: a NUL byte in its first 8 KB."""
    return b"\0" in head[:BINARY_SNIFF_BYTES]


class ReadTool(Tool):
    """``read``: lines of a text file, numbered like ``cat -n``."""

    name: ClassVar[str] = "read"
    description: ClassVar[str] = (
        "Read a text file in the workspace. Lines are numbered like 'cat -n' (number, tab, line). "
        "By default reads from the start; use 'offset' (first line, 1-based) and 'limit' (number "
        "of lines) to read a part. Refuses binary files and very big files."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "description": "the file to read"},
            "offset": {"type": "integer", "minimum": 1, "description": "first line (1-based)"},
            "limit": {"type": "integer", "minimum": 1, "description": "number of lines"},
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    read_only: ClassVar[bool] = True
    concurrency_safe: ClassVar[bool] = True
    needs_permission: ClassVar[bool] = False
    permission_target_kind: ClassVar[TargetKind] = "path"

    def summary(self, args: Mapping[str, Any]) -> str:
        """``read: <path>``."""
        return one_line(f"read: {args.get('path', '')}")

    def permission_target(self, args: Mapping[str, Any]) -> str:
        """The path, normalised."""
        return normalise_target(str(args.get("path", "")))

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        """Return the numbered lines.

        The file is read in a worker thread (it may be up to ``read_max_bytes``). Cancellation:
        immediate; the abandoned thread finishes a read that changes nothing.
        """
        return await trio.to_thread.run_sync(
            _read,
            ctx,
            str(args["path"]),
            int(args.get("offset", 1)),
            int(args.get("limit", ctx.limits.read_default_lines)),
            abandon_on_cancel=True,
        )


def _read(ctx: ToolContext, path: str, offset: int, limit: int) -> str:
    data = read_text_file(ctx.workspace, path, path, max_bytes=ctx.limits.read_max_bytes)
    if not data:
        return f"({path} is empty)"
    lines = data.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line does not start another
    total = len(lines)
    if offset > total:
        raise ToolError(f"input.offset: {offset} is past the end of {path} ({total} lines)")
    budget = ctx.limits.max_output_chars
    out: list[str] = []
    size = 0
    last = offset - 1
    for number in range(offset, min(total, offset - 1 + limit) + 1):
        line = lines[number - 1].removesuffix("\r")
        if len(line) > _MAX_LINE_CHARS:
            line = line[:_MAX_LINE_CHARS] + f"… [line cut: {len(line)} chars]"
        entry = f"{number:>6}\t{line}"
        if out and size + len(entry) + 1 > budget:
            break  # always show at least one line, even a long one
        out.append(entry)
        size += len(entry) + 1
        last = number
    if last < total:
        out.append(
            f"[{total - last} more lines: {last + 1}-{total} of {total}; "
            f"continue with offset={last + 1}]"
        )
    return "\n".join(out)


def read_text_file(workspace: Path, path: str, shown: str, *, max_bytes: int) -> str:
    """The text of the file *path* in *workspace* (named *shown* in messages), decoded leniently.

    Raises:
        ToolError: refused (see :func:`runtime.core.locate`), missing, a folder, too big, binary
            or unreadable.
    """
    raw = read_file_bytes(workspace, path, shown, max_bytes=max_bytes)
    if looks_binary(raw):
        raise ToolError(
            f"{shown} looks like a binary file (it has NUL bytes); read shows text only"
        )
    return raw.decode("utf-8", errors="replace")


class Swapped(Exception):
    """The file became a symlink between its resolution and its opening."""


def read_file_bytes(workspace: Path, path: str, shown: str, *, max_bytes: int) -> bytes:
    """The bytes of the regular file *path* in *workspace* (named *shown* in messages).

    The file is opened relative to its folder's descriptor, without following a symlink
    (:func:`runtime.core.locate`): what is read is what was checked, even while another process
    swaps folders and symlinks.

    Raises:
        ToolError: refused, missing, a folder, not a regular file, over *max_bytes*, unreadable,
            or swapped for a symlink again and again while being opened.
    """
    for _ in range(SWAP_RETRIES):
        with locate(workspace, path) as place:
            try:
                return read_at(place, shown, max_bytes)
            except Swapped:
                continue
    raise ToolError(f"{shown} kept changing while it was opened (a symlink swapped in); try again")


def read_at(place: Located, shown: str, max_bytes: int) -> bytes:
    """The bytes of the regular file at *place* (see :func:`read_file_bytes`).

    Raises:
        Swapped: it became a symlink (or vanished) since *place* was resolved.
        ToolError: as :func:`read_file_bytes`.
    """
    st = place.lstat()
    if st is None:
        raise ToolError(f"no such file: {shown}")
    if stat.S_ISLNK(st.st_mode):
        raise Swapped
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{shown} is a folder, not a file (list it with glob)")
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"{shown} is not a regular file")
    if st.st_size > max_bytes:
        raise ToolError(
            f"{shown} is too big to read: {st.st_size} bytes (limit {max_bytes}); "
            "search it with grep, or view a part with bash (head, tail, sed -n)"
        )
    try:
        # O_NONBLOCK: if a FIFO was swapped in meanwhile, opening it must not wait for a writer.
        fd = place.open(os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOENT):
            raise Swapped from exc
        raise ToolError(f"cannot read {shown}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as fh:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ToolError(f"{shown} is not a regular file")
            # Read one byte past the limit: the file may have grown since stat().
            raw = fh.read(max_bytes + 1)
        except OSError as exc:
            raise ToolError(f"cannot read {shown}: {exc.strerror or exc}") from exc
    if len(raw) > max_bytes:
        raise ToolError(f"{shown} is too big to read (over {max_bytes} bytes)")
    return raw
