"""Reading the project's files: bounded, confined, UTF-8, with YAML front matter.

Every file here is read with a size cap (a bigger file is cut, and the caller warns); a path
that leads out of the folder it must stay in (``..``, a symlink, an absolute path) is refused.
:func:`read_capped` is the one way the runtime opens a file that came with a workspace or sits
in a config folder (settings, instructions, agent and skill files, ``.mcp.json``, sessions,
``.git/HEAD``): a final symlink is followed only while it stays in its folder, anything but a
regular file (``/dev/zero``, a FIFO, a socket) is refused without blocking, and no more than the
cap is ever read (docs/reliability.md, "The trust boundary").
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from runtime.core import ConfigError

APP = "trio-agents"


class ProjectFileError(ConfigError):
    """A project file that cannot be used; the message names the file (and line, if known)."""


def user_config_dir(env: Mapping[str, str] | None = None) -> Path:
    """The user's config folder: ``$XDG_CONFIG_HOME/trio-agents``, else
    ``~/.config/trio-agents`` (the XDG base directory rule: a relative value is ignored)."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_CONFIG_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / APP
    home = env.get("HOME") or str(Path.home())
    return Path(home) / ".config" / APP


def inside(path: Path, root: Path) -> bool:
    """Whether *path* (resolved, symlinks followed) is *root* or under it."""
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError, RuntimeError):
        return False
    return True


_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def open_regular(path: Path, *, root: Path | None = None) -> int:
    """Open *path* for reading, refusing what a hostile folder could plant there.

    ``O_NONBLOCK`` so a FIFO cannot hang the open; anything but a regular file is refused
    after it. A final symlink is followed only to a target inside *root* (when given; a
    user's own config folder passes none, so a dotfiles link works, still to a regular file).

    Returns:
        The open descriptor (the caller closes it).

    Raises:
        ProjectFileError: missing, unreadable, a symlink out of *root*, or not a regular file.
    """
    try:
        fd = os.open(path, _READ_FLAGS | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno != errno.ELOOP:  # ELOOP: the last part is a symlink
            raise ProjectFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        if root is not None and not inside(path, root):
            raise ProjectFileError(f"{path}: a symlink out of {root}; refused") from None
        try:
            fd = os.open(os.path.realpath(path), _READ_FLAGS | os.O_NOFOLLOW)
        except OSError as again:
            raise ProjectFileError(f"{path}: cannot read: {again.strerror or again}") from again
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:  # pragma: no cover - fstat of an open descriptor
        os.close(fd)
        raise ProjectFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ProjectFileError(f"{path}: not a regular file; refused")
    return fd


def read_capped(
    path: Path, cap: int, *, root: Path | None = None, fd: int | None = None
) -> tuple[bytes, int]:
    """At most *cap* + 1 bytes of *path* (opened with :func:`open_regular`), and its size.

    More than *cap* bytes back means the file is bigger than the cap.

    Args:
        root: see :func:`open_regular`.
        fd: read this open descriptor (taken over and closed) instead of opening *path*; it
            must be a regular file too.

    Raises:
        ProjectFileError: see :func:`open_regular`; or a read error.
    """
    if fd is None:
        fd = open_regular(path, root=root)
    elif not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ProjectFileError(f"{path}: not a regular file; refused")
    try:
        size = os.fstat(fd).st_size
        chunks: list[bytes] = []
        left = cap + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise ProjectFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return data, max(size, len(data))


@attrs.frozen
class TextFile:
    """A file's text, cut at the cap when ``truncated``."""

    path: Path
    text: str
    truncated: bool
    size: int


def read_text_capped(
    path: Path, cap: int, *, fd: int | None = None, root: Path | None = None
) -> TextFile:
    """Read at most *cap* bytes of *path* as UTF-8 (a multi-byte character cut by the cap is
    dropped), never more however big the file is (with :func:`read_capped`).

    Args:
        fd: read this open descriptor (taken over and closed) instead of opening *path*, which
            then only names the file in messages.
        root: a final symlink must stay inside it (see :func:`open_regular`).

    Raises:
        ProjectFileError: unreadable, not a regular file, or not UTF-8 text.
    """
    data, size = read_capped(path, cap, root=root, fd=fd)
    truncated = len(data) > cap
    if truncated:
        data = data[:cap]
    if b"\0" in data:
        raise ProjectFileError(f"{path}: not a text file")
    for drop in range(4 if truncated else 1):
        try:
            text = data[: len(data) - drop].decode("utf-8")
        except UnicodeDecodeError:
            continue
        break
    else:
        raise ProjectFileError(f"{path}: not UTF-8 text")
    return TextFile(path, text.replace("\r\n", "\n"), truncated, size)


@attrs.frozen
class FrontMatter:
    """A Markdown file split into its YAML front matter (a mapping) and its body."""

    data: dict[str, Any]
    body: str
    present: bool


_FENCE = re.compile(r"^---[ \t]*$")
_END = re.compile(r"^(---|\.\.\.)[ \t]*$")
# `key: value` where the value holds ": " (Claude Code's descriptions often do, and are not
# quoted): YAML reads that as a nested mapping and fails. Such a line is quoted and retried.
_PLAIN_KV = re.compile(r"^(?P<key>[A-Za-z_][\w-]*):[ \t]+(?P<value>[^\s\"'\[{|>&*!%@`#].*)$")


def split_front_matter(text: str, path: Path) -> FrontMatter:
    """Parse ``---``-fenced YAML front matter (``yaml.safe_load``) off the top of *text*.

    A file without front matter gives an empty mapping and ``present=False``.

    Raises:
        ProjectFileError: the front matter is not YAML or not a mapping (naming the line).
    """
    lines = text.split("\n")
    if not lines or not _FENCE.match(lines[0].lstrip("\ufeff")):
        return FrontMatter({}, text, False)
    for end in range(1, len(lines)):
        if _END.match(lines[end]):
            break
    else:
        raise ProjectFileError(f"{path}:1: the front matter has no closing '---' line")
    head = "\n".join(lines[1:end])
    body = "\n".join(lines[end + 1 :]).strip("\n")
    data = _load_yaml(head, path)
    return FrontMatter(data, body, True)


def _load_yaml(head: str, path: Path) -> dict[str, Any]:
    import yaml  # imported on use: only repositories with such files pay for it

    # The C loader when PyYAML has it (several times faster); both are safe loaders.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(head, Loader=loader)
    except yaml.YAMLError as first:
        quoted = "\n".join(_quote_plain(line) for line in head.split("\n"))
        try:
            data = yaml.load(quoted, Loader=loader) if quoted != head else None
        except yaml.YAMLError:
            data = None
        if data is None:
            raise ProjectFileError(_yaml_message(_python_error(head) or first, path)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ProjectFileError(
            f"{path}:2: the front matter is not a mapping of keys (got {type(data).__name__})"
        )
    return {str(k): v for k, v in data.items()}


def _python_error(head: str) -> Exception | None:
    # The pure-Python loader says where and what more precisely than the C one; a bad file is
    # rare, so it is asked only then.
    import yaml

    try:
        yaml.safe_load(head)
    except yaml.YAMLError as exc:
        return exc
    return None


def _quote_plain(line: str) -> str:
    m = _PLAIN_KV.match(line)
    if m is None or ": " not in m["value"]:
        return line
    value = m["value"].replace("\\", "\\\\").replace('"', '\\"')
    return f'{m["key"]}: "{value}"'


def _yaml_message(exc: Any, path: Path) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).split("\n")[0]
    # +2: the opening '---' is line 1 and YAML counts from 0.
    where = f"{path}:{mark.line + 2}" if mark is not None else f"{path}"
    return f"{where}: the front matter is not valid YAML: {problem}"


def foreign_owner(folder: Path) -> int | None:
    """The uid owning *folder* when it is not this process's user, else None (also when it
    cannot be looked at)."""
    try:
        uid = os.stat(folder).st_uid
    except OSError:
        return None
    return uid if uid != os.geteuid() else None


@attrs.frozen
class GitInfo:
    """The git repository holding the workspace, if any."""

    root: Path | None = None
    branch: str | None = None
    """The current branch, or ``detached at <sha>``; ``None`` when unknown."""


def git_info(workspace: Path, *, max_up: int = 64) -> GitInfo:
    """Find the repository holding *workspace* (a ``.git`` folder or file in it or a parent)
    and read its current branch from ``HEAD``, without running git."""
    folder = workspace
    for _ in range(max_up):
        dot_git = folder / ".git"
        if dot_git.exists():
            return GitInfo(folder, _branch(dot_git))
        if folder.parent == folder:
            break
        folder = folder.parent
    return GitInfo()


_GIT_CAP = 4096


def _branch(dot_git: Path) -> str | None:
    # Read as every planted file is: a HEAD that is a FIFO or a link to /dev/zero gives no
    # branch, never a hang or a MemoryError.
    try:
        git_dir = dot_git
        if not dot_git.is_dir():  # a worktree or submodule: "gitdir: <path>"
            data, _ = read_capped(dot_git, _GIT_CAP, root=dot_git.parent)
            line = data[:_GIT_CAP].decode("utf-8", errors="replace").strip()
            if not line.startswith("gitdir:"):
                return None
            git_dir = (dot_git.parent / line.removeprefix("gitdir:").strip()).resolve()
        data, _ = read_capped(git_dir / "HEAD", _GIT_CAP, root=git_dir)
        head = data[:_GIT_CAP].decode("utf-8", errors="replace").strip()
    except (OSError, ProjectFileError):
        return None
    if head.startswith("ref:"):
        return head.removeprefix("ref:").strip().removeprefix("refs/heads/")
    if re.fullmatch(r"[0-9a-f]{7,64}", head):
        return f"detached at {head[:12]}"
    return None
