"""Reading the project's files: bounded, confined, UTF-8, with YAML front matter.

Every file here is read with a size cap (a bigger file is cut, and the caller warns); a path
that leads out of the folder it must stay in (``..``, a symlink, an absolute path) is refused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from runtime.core._errors import ConfigError

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


@attrs.frozen
class TextFile:
    """A file's text, cut at the cap when ``truncated``."""

    path: Path
    text: str
    truncated: bool
    size: int


def read_text_capped(path: Path, cap: int, *, fd: int | None = None) -> TextFile:
    """Read at most *cap* bytes of *path* as UTF-8 (a multi-byte character cut by the cap is
    dropped), never more however big the file is.

    Args:
        fd: read this open descriptor (taken over and closed) instead of opening *path*, which
            then only names the file in messages.

    Raises:
        ProjectFileError: unreadable, or not UTF-8 text.
    """
    try:
        with path.open("rb") if fd is None else os.fdopen(fd, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            data = f.read(cap + 1)
    except OSError as exc:
        raise ProjectFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
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
    return TextFile(path, text.replace("\r\n", "\n"), truncated, max(size, len(data)))


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


def _branch(dot_git: Path) -> str | None:
    try:
        git_dir = dot_git
        if dot_git.is_file():  # a worktree or submodule: "gitdir: <path>"
            line = dot_git.read_text(encoding="utf-8", errors="replace")[:4096].strip()
            if not line.startswith("gitdir:"):
                return None
            git_dir = (dot_git.parent / line.removeprefix("gitdir:").strip()).resolve()
        head = (git_dir / "HEAD").read_text(encoding="utf-8", errors="replace")[:4096].strip()
    except OSError:
        return None
    if head.startswith("ref:"):
        return head.removeprefix("ref:").strip().removeprefix("refs/heads/")
    if re.fullmatch(r"[0-9a-f]{7,64}", head):
        return f"detached at {head[:12]}"
    return None
