"""Workspace confinement: every path a file tool touches stays inside the workspace.

A path from the model is checked twice:

1. As written: it must not be empty, hold a NUL byte, start with ``~`` (never expanded: the
   model would expect a home folder) or contain a ``..`` component, even one that would land back
   inside (``src/../x``): refusing them all is simpler to trust than reasoning about each one.
2. As resolved, by :func:`locate`: component by component from a descriptor of the workspace
   folder, never following a symlink implicitly (``O_NOFOLLOW``, ``stat`` without following).
   A symlink is read and its target walked the same way (a relative one from where it lies, an
   absolute one from the workspace if it points into it); dangling ones are followed too, so a
   link to a file that does not exist yet cannot be used to create it outside. Every folder on
   the way is held open, and the tools open, read and replace the file relative to the
   descriptor of its folder. A folder swapped for a symlink between the check and the use (by
   ``bash``, which runs unconfined) therefore cannot lead out: the check and the use are the
   same walk. An absolute path that is not spelled under the workspace (``/proc/self/root/...``,
   a symlinked spelling of it) is first resolved to where it points, then walked the same way.

The runtime's own files (traces, sessions, settings, under :data:`RUNTIME_DIR` folders) are
refused to the file tools wherever such a folder lies: a model must not rewrite the audit trail
or plant a session.

What this does not cover: hard links to files outside, which are indistinguishable from ordinary
files (a write replaces the file, so it breaks the link and never changes the outside file; a
read reads the shared content, see docs/reliability.md); a folder held open by a walk being
moved out of the workspace meanwhile. Confinement keeps the model's file tools honest; it is
not a sandbox (``bash`` is not confined by it).
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections import deque
from pathlib import Path, PurePosixPath
from typing import Final

from ._errors import ToolError

__all__ = [
    "RUNTIME_DIR",
    "Located",
    "is_inside",
    "is_runtime_path",
    "locate",
    "normalise_target",
    "real_target",
    "relative",
    "resolve_in_workspace",
]

RUNTIME_DIR: Final = ".trio-agents"
"""The folder of the runtime's own files (traces, sessions, settings): off-limits to file tools."""

# Like the kernel's limit on symlinks followed in one lookup (ELOOP).
_MAX_LINKS: Final = 40
# Folders a path may go down (the walk holds a descriptor for each).
_MAX_DEPTH: Final = 256
# Components looked at in one walk, links and second looks (after a swap) included.
_MAX_STEPS: Final = 4096
_O_PATH: Final = getattr(os, "O_PATH", 0)
# A folder on the way: opened without reading it (O_PATH where it exists), never through a link.
_DIR_FLAGS: Final = (_O_PATH or os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Located:
    """Where a path lands inside the workspace, with the folder holding it open.

    Use it as a context manager (or call :meth:`close`): it holds a descriptor per folder on the
    way. Nothing here follows a symlink: open the file with :meth:`open` (``O_NOFOLLOW``
    relative to :attr:`dir_fd`), so what is opened is what was checked.

    Attributes:
        root: the resolved workspace.
        parts: the real path's components under *root* (empty for the workspace itself).
        dir_fd: a descriptor of the folder holding the last component (for the workspace
            itself, of the workspace); -1 if that folder does not exist.
        name: the last component (``"."`` for the workspace itself).
    """

    __slots__ = ("_fds", "dir_fd", "name", "parts", "root")

    def __init__(self, root: Path, fds: list[int], parts: list[str], dir_fd: int) -> None:
        self.root = root
        self.parts = parts
        self.dir_fd = dir_fd
        self.name = parts[-1] if parts else "."
        self._fds = fds

    @property
    def rel(self) -> str:
        """The real path relative to the workspace, POSIX style (``.`` for the workspace)."""
        return "/".join(self.parts) or "."

    @property
    def real(self) -> Path:
        """The real absolute path (for messages; never open it by this name)."""
        return self.root.joinpath(*self.parts)

    def lstat(self) -> os.stat_result | None:
        """The last component's status without following it; None if it does not exist."""
        if self.dir_fd < 0:
            return None
        try:
            return os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def open(self, flags: int, mode: int = 0o666) -> int:
        """``openat`` of the last component with *flags* plus ``O_NOFOLLOW | O_CLOEXEC``.

        Raises:
            OSError: from the system; ``ELOOP`` if it became a symlink since it was resolved.
        """
        if self.dir_fd < 0:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", self.rel)
        return os.open(self.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=self.dir_fd)

    def close(self) -> None:
        """Close the folders' descriptors. Idempotent."""
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)
        self.dir_fd = -1

    def __enter__(self) -> Located:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_path(path: str) -> None:
    """Refuse *path* as written (see the module docstring, step 1).

    Raises:
        ToolError: why it is refused.
    """
    if not path:
        raise ToolError("path is empty")
    if "\0" in path:
        raise ToolError(f"path {path!r} contains a NUL byte")
    try:
        os.fsencode(path)
    except UnicodeEncodeError as exc:
        raise ToolError(f"path {path!r} is not a valid file name ({exc.reason})") from exc
    if path.startswith("~"):
        raise ToolError(
            f"path {path!r} refused: '~' is not expanded; use a path inside the workspace"
        )
    if ".." in PurePosixPath(path).parts:
        raise ToolError(f"path {path!r} refused: '..' is not allowed in paths")


def locate(
    workspace: Path, path: str, *, make_folders: bool = False, runtime_dir_ok: bool = False
) -> Located:
    """Resolve *path* inside *workspace* without ever following a symlink out of it.

    Args:
        workspace: the workspace folder (resolved again here, so a symlinked one works).
        path: a path from the model, relative to the workspace or absolute.
        make_folders: create missing folders on the way to the last component (for a write).
        runtime_dir_ok: let the path lead into a :data:`RUNTIME_DIR` (for the permission
            policy, which refuses such calls with its own reason).

    Returns:
        The place, with its folder open (close it). The last component may not exist.

    Raises:
        ToolError: the path is malformed, leads out of the workspace, into the runtime's own
            files, through a file, or through too many symlinks; the message says why. Errors
            of the system (a name too long, a folder that cannot be read) are ToolErrors too.
    """
    check_path(path)
    root = Path(os.path.realpath(workspace))
    if PurePosixPath(path).is_absolute():
        parts = _parts_inside(root, path)
        if parts is None:
            raise ToolError(f"path {path!r} refused: it is outside the workspace {root}")
    else:
        parts = list(PurePosixPath(path).parts)
    if len(parts) > _MAX_DEPTH + 1:  # before a write makes any folder on the way
        raise ToolError(f"path {path!r} is too deep (over {_MAX_DEPTH} folders)")
    try:
        root_fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise ToolError(f"cannot open the workspace {root}: {exc.strerror or exc}") from exc
    fds = [root_fd]
    located = False
    try:
        place = _walk(
            root, fds, parts, path, make_folders=make_folders, runtime_dir_ok=runtime_dir_ok
        )
        located = True
        return place
    finally:
        if not located:  # whatever went wrong, Ctrl+C included: the descriptors go
            for fd in fds:
                if fd >= 0:
                    os.close(fd)


def resolve_in_workspace(workspace: Path, path: str) -> Path:
    """The real path *path* names, checked to be inside *workspace* (see :func:`locate`).

    For messages and checks only: a file tool opens through :func:`locate`, never by this name.

    Raises:
        ToolError: as :func:`locate`.
    """
    with locate(workspace, path) as place:
        return place.real


def real_target(workspace: Path, path: str, *, runtime_dir_ok: bool = False) -> str | None:
    """*path*'s real path relative to *workspace* (``.`` for itself), or None if refused."""
    try:
        with locate(workspace, path, runtime_dir_ok=runtime_dir_ok) as place:
            return place.rel
    except ToolError:
        return None


def is_runtime_path(rel: str) -> bool:
    """Whether the workspace-relative (or absolute) *rel* lies in a :data:`RUNTIME_DIR`."""
    return RUNTIME_DIR in PurePosixPath(rel).parts


def _parts_inside(root: Path, target: str) -> list[str] | None:
    """The components under *root* of the absolute *target*, or None if it is outside.

    Spelled under *root*: its own components (``..`` kept, for the walk to resolve). Else
    (``/proc/self/root/...``, a symlinked spelling of the workspace): where it resolves to,
    which the walk then checks again from the workspace's descriptor.
    """
    pure = PurePosixPath(target)
    if pure.is_relative_to(root):
        return list(pure.relative_to(root).parts)
    real = Path(os.path.realpath(target))
    if real == root or real.is_relative_to(root):
        return list(real.relative_to(root).parts)
    return None


def _walk(
    root: Path,
    fds: list[int],
    todo_parts: list[str],
    shown: str,
    *,
    make_folders: bool,
    runtime_dir_ok: bool,
) -> Located:
    # fds[i] is the folder reached through names[:i] (fds[0] the workspace), -1 if it does not
    # exist; the last name, once reached, is not opened (the caller opens it as it needs).
    names: list[str] = []
    todo = deque(todo_parts)
    links = 0
    steps = 0
    while todo:
        steps += 1
        if steps > _MAX_STEPS:  # something keeps swapping what we look at
            raise ToolError(f"path {shown!r}: it kept changing while it was resolved")
        name = todo.popleft()
        if name in ("", "."):
            continue
        if name == "..":  # only from a symlink's target: the model's paths have none
            if not names:
                raise ToolError(f"path {shown!r} refused: a symlink leads out of the workspace")
            names.pop()
            fd = fds.pop()
            if fd >= 0:
                os.close(fd)
            continue
        if name == RUNTIME_DIR and not runtime_dir_ok:
            raise ToolError(
                f"path {shown!r} refused: {RUNTIME_DIR}/ holds the runtime's own files "
                "(traces, sessions, settings), which the file tools do not touch"
            )
        parent = fds[-1]
        last = not todo
        if parent < 0:  # under a folder that does not exist: only names from here on
            if len(names) > _MAX_DEPTH:
                raise ToolError(f"path {shown!r} is too deep (over {_MAX_DEPTH} folders)")
            names.append(name)
            if not last:
                fds.append(-1)
            continue
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            if make_folders and not last:
                _make_folder(name, parent, shown)
                todo.appendleft(name)  # look again, at what is there now
                continue
            names.append(name)
            if not last:
                fds.append(-1)
            continue
        except OSError as exc:
            raise _os_error(shown, exc) from exc
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > _MAX_LINKS:
                raise ToolError(f"path {shown!r}: too many levels of symlinks (a loop?)")
            try:
                target = os.readlink(name, dir_fd=parent)
            except OSError as exc:
                if exc.errno in (errno.EINVAL, errno.ENOENT):  # no longer a link: look again
                    todo.appendleft(name)
                    continue
                raise _os_error(shown, exc) from exc
            if target.startswith("/"):
                inside = _parts_inside(root, target)
                if inside is None:
                    raise ToolError(
                        f"path {shown!r} refused: a symlink leads out of the workspace "
                        f"(to {target})"
                    )
                for fd in fds[1:]:
                    if fd >= 0:
                        os.close(fd)
                del fds[1:]
                names.clear()
                todo.extendleft(reversed(inside))
            else:
                todo.extendleft(reversed(target.split("/")))
            continue
        names.append(name)
        if last:
            break
        if len(names) > _MAX_DEPTH:
            raise ToolError(f"path {shown!r} is too deep (over {_MAX_DEPTH} folders)")
        if not stat.S_ISDIR(st.st_mode):
            if make_folders:
                raise ToolError(
                    f"cannot create the folders for {shown}: a part of the path is a file "
                    f"({'/'.join(names)})"
                )
            raise ToolError(f"path {shown!r}: {'/'.join(names)} is not a folder")
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                names.pop()  # swapped since we looked: look again
                todo.appendleft(name)
                continue
            raise _os_error(shown, exc) from exc
        fds.append(fd)
    if len(fds) > len(names):
        # Ended on a folder we opened ("sub/.", or a link to ".."): its parent holds it.
        if names:
            fd = fds.pop()
            if fd >= 0:
                os.close(fd)
        dir_fd = fds[-1]
    else:
        dir_fd = fds[-1]
    return Located(root, [fd for fd in fds if fd >= 0], names, dir_fd)


def _make_folder(name: str, parent: int, shown: str) -> None:
    try:
        os.mkdir(name, 0o777, dir_fd=parent)
    except FileExistsError:
        pass  # made meanwhile (or a dangling symlink): the walk looks again
    except OSError as exc:
        raise ToolError(f"cannot create the folders for {shown}: {exc.strerror or exc}") from exc


def _os_error(shown: str, exc: OSError) -> ToolError:
    if exc.errno == errno.ENAMETOOLONG:
        return ToolError(f"path {shown!r}: a name in it is too long")
    return ToolError(f"cannot resolve {shown!r}: {exc.strerror or exc}")


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
