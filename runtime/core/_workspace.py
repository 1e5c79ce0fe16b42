"""Workspace confinement: every path a file tool touches stays inside the workspace.

A path from the model is checked twice:

1. As written: it must not be empty, hold a NUL byte, start with ``~`` (never expanded: the
   model would expect a home folder) or contain a ``..`` component, even one that would land back
   inside (``src/../x``): refusing them all is simpler to trust than reasoning about each one.
2. As resolved: relative paths are taken from the workspace, then every symlink is followed
   (dangling ones too, so a link to a file that does not exist yet cannot be used to create it
   outside). The result must be the workspace or lie under it.

What this does not cover: a process (``bash`` runs unconfined) swapping a folder for a symlink
between the check and the use, and hard links to files outside, which are indistinguishable from
ordinary files. Confinement keeps the model's file tools honest; it is not a sandbox.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path, PurePosixPath

from ._errors import ToolError

__all__ = ["is_inside", "normalise_target", "relative", "resolve_in_workspace"]


def resolve_in_workspace(workspace: Path, path: str) -> Path:
    """The real path *path* names, checked to be inside *workspace*.

    Args:
        workspace: the workspace folder (resolved again here, so a symlinked one works).
        path: a path from the model, relative to the workspace or absolute.

    Returns:
        The resolved absolute path; it may not exist yet.

    Raises:
        ToolError: the path is malformed or leads out of the workspace; the message says why.
    """
    root = Path(os.path.realpath(workspace))
    if not path:
        raise ToolError("path is empty")
    if "\0" in path:
        raise ToolError(f"path {path!r} contains a NUL byte")
    if path.startswith("~"):
        raise ToolError(
            f"path {path!r} refused: '~' is not expanded; use a path inside the workspace"
        )
    if ".." in PurePosixPath(path).parts:
        raise ToolError(f"path {path!r} refused: '..' is not allowed in paths")
    given = Path(path)
    joined = given if given.is_absolute() else root / given
    real = Path(os.path.realpath(joined))
    if is_inside(root, real):
        return real
    if given.is_absolute() and not is_inside(root, Path(os.path.normpath(given))):
        raise ToolError(f"path {path!r} refused: it is outside the workspace {root}")
    raise ToolError(
        f"path {path!r} refused: a symlink leads out of the workspace (it resolves to {real})"
    )


def is_inside(root: Path, path: Path) -> bool:
    """Whether the absolute *path* is *root* or under it (no filesystem access)."""
    return path == root or path.is_relative_to(root)


def relative(root: Path, path: Path) -> str:
    """*path* (under *root*) as a POSIX path relative to *root*; ``.`` for *root* itself."""
    rel = path.relative_to(root).as_posix()
    return rel if rel else "."


def normalise_target(path: str, workspace: Path | None = None) -> str:
    """*path* as written, normalised for permission rules and messages (no filesystem access).

    ``./a//b/`` becomes ``a/b``; an absolute path under *workspace* becomes relative to it; any
    other absolute path stays absolute. The empty path becomes ``.`` (the workspace).
    """
    norm = posixpath.normpath(path) if path else "."
    if workspace is not None and norm.startswith("/"):
        root = PurePosixPath(os.path.normpath(workspace))
        candidate = PurePosixPath(norm)
        if candidate == root or candidate.is_relative_to(root):
            rel = candidate.relative_to(root).as_posix()
            return rel if rel else "."
    # normpath keeps a leading "//" (POSIX allows it to mean something special); rules do not.
    return "/" + norm.lstrip("/") if norm.startswith("//") else norm
