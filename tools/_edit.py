"""The ``edit`` tool: exact string replacement in a text file."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import trio

from runtime.core import (
    TargetKind,
    Tool,
    ToolContext,
    ToolError,
    locate,
    normalise_target,
    one_line,
)

from ._read import SWAP_RETRIES, Swapped, looks_binary, read_at
from ._write import atomic_write

__all__ = ["EditTool"]


class EditTool(Tool):
    """``edit``: replace an exact string in a file, once or everywhere."""

    name: ClassVar[str] = "edit"
    description: ClassVar[str] = (
        "Replace an exact string in a text file. 'old' must occur exactly once (include enough "
        "surrounding lines to make it unique) unless 'replace_all' is true, which replaces every "
        "occurrence. Whitespace and indentation must match exactly."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "description": "the file to edit"},
            "old": {"type": "string", "minLength": 1, "description": "the exact text to replace"},
            "new": {"type": "string", "description": "the replacement text"},
            "replace_all": {
                "type": "boolean",
                "description": "replace every occurrence (default: false)",
            },
        },
        "required": ["path", "old", "new"],
        "additionalProperties": False,
    }
    needs_permission: ClassVar[bool] = True
    edits_files: ClassVar[bool] = True
    permission_target_kind: ClassVar[TargetKind] = "path"

    def summary(self, args: Mapping[str, Any]) -> str:
        """``edit: <path>``."""
        return one_line(f"edit: {args.get('path', '')}")

    def permission_target(self, args: Mapping[str, Any]) -> str:
        """The path, normalised."""
        return normalise_target(str(args.get("path", "")))

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        """Make the replacement; say how many occurrences were replaced.

        Runs in a worker thread that is NOT abandoned on cancellation, like ``write``: when the
        call returns, the file holds either the old or the new content.
        """
        return await trio.to_thread.run_sync(
            _edit,
            ctx,
            str(args["path"]),
            str(args["old"]),
            str(args["new"]),
            bool(args.get("replace_all", False)),
        )


def _edit(ctx: ToolContext, path: str, old: str, new: str, replace_all: bool) -> str:
    shown = normalise_target(path, ctx.workspace)
    if old == new:
        raise ToolError("input.new: same as old; nothing would change")
    for _ in range(SWAP_RETRIES):
        # One resolution for the read and the write: the file replaced is the file read.
        with locate(ctx.workspace, path) as place:
            try:
                raw = read_at(place, shown, ctx.limits.read_max_bytes)
                count, updated = _replace(raw, shown, old, new, replace_all)
                atomic_write(place, updated.encode("utf-8"))
            except Swapped:
                continue
            except UnicodeEncodeError as exc:
                raise ToolError(f"input.new: not valid Unicode text ({exc.reason})") from exc
            except OSError as exc:
                raise ToolError(f"cannot write {shown}: {exc.strerror or exc}") from exc
            noun = "occurrence" if count == 1 else "occurrences"
            return f"edited {shown}: replaced {count} {noun}"
    raise ToolError(f"{shown} kept changing while it was edited (a symlink swapped in)")


def _replace(raw: bytes, shown: str, old: str, new: str, replace_all: bool) -> tuple[int, str]:
    """How many times *old* occurs in the file's *raw* bytes, and the text with it replaced."""
    if looks_binary(raw):
        raise ToolError(
            f"{shown} looks like a binary file (it has NUL bytes); edit changes text only"
        )
    try:
        # Strict: writing back a leniently decoded file would silently corrupt its bad bytes.
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(f"{shown} is not UTF-8 text; edit it with bash") from exc

    count = text.count(old)
    if count == 0 and "\r\n" in text and "\n" in old and "\r" not in old:
        # The model copies lines as read shows them, without the "\r" of a CRLF file.
        old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
        count = text.count(old)
    if count == 0:
        raise ToolError(
            f"old text not found in {shown}; it must match exactly, whitespace included "
            "(read the file again to copy it)"
        )
    if count > 1 and not replace_all:
        raise ToolError(
            f"old text occurs {count} times in {shown}; include more surrounding text to make it "
            "unique, or set replace_all to replace every occurrence"
        )
    return count, text.replace(old, new)
