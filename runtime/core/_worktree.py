"""Worktree isolation: an agent of an ``isolation = "worktree"`` type works in a git worktree
of its own (docs/worktrees.md).

Before such an agent starts, :func:`add_worktree` runs ``git worktree add`` on a new branch
``trio-agents/<run id>/<agent id>`` from the HEAD of the repository holding the workspace; the
worktree lies in the workspace's :data:`~runtime.core.RUNTIME_DIR` (``.trio-agents/worktrees/``),
which the file tools of every other agent refuse, and a ``.gitignore`` there keeps it out of the
repository's ``git status``. When the agent has ended, :func:`finish_worktree` removes a worktree
with no change (nothing uncommitted, no commit) and its branch, and keeps a changed one, or that of
an agent that was cancelled (nothing is run for it: its work may be half done).

Only HEAD's committed state is in the worktree: uncommitted changes of the workspace are not
carried over. git runs as a subprocess (``trio.run_process``): cancelling a call kills it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

import attrs
import trio

from ._errors import WorktreeError
from ._workspace import RUNTIME_DIR

__all__ = [
    "BRANCH_PREFIX",
    "LiveWorktrees",
    "Worktree",
    "WorktreeEntry",
    "add_worktree",
    "describe_entry",
    "finish_worktree",
    "git",
    "list_worktrees",
    "remove_entry",
    "worktree_folder",
    "worktree_prompt",
]

BRANCH_PREFIX: Final = "trio-agents/"
"""Every branch made for a worktree starts with it (``trio-agents/<run id>/<agent id>``)."""

_FOLDER: Final = "worktrees"
# How much of git's output a message quotes.
_QUOTE: Final = 300
# Characters git's ref names and a folder's name take without second thoughts.
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
# git reads every worktree's admin folder (.git/worktrees/NAME) while it adds or removes one,
# and fails when another add is half way through writing its own ("failed to read
# .git/worktrees/NAME/commondir"). Within a process the changes to one repository's worktrees
# take turns (_changing); another process's add can still cross one: such a failure is tried
# again, a bounded number of times, after a short pause.
_RACE = re.compile(r"failed to read \.git/worktrees/|\.git/worktrees/[^ ]*: (No such file|Success)")
_RACE_TRIES: Final = 5
_RACE_PAUSE_S: Final = 0.05
_locks: dict[Path, trio.Lock] = {}


@attrs.frozen(kw_only=True)
class Worktree:
    """One agent's worktree.

    Attributes:
        path: the worktree's folder (the root of its checkout).
        workspace: the agent's workspace in it: *path*, or the same subfolder of it the
            workspace is of its repository.
        branch: the branch made for it (``trio-agents/<run id>/<agent id>``).
        base: the commit it was made from (the workspace's HEAD then).
        repo: the top folder of the repository it belongs to.
        kept: set once the agent has ended: whether the worktree was kept.
        changes: set once the agent has ended: what changed, in a few words
            (``"2 files changed, 1 commit"``), or why it was kept unexamined.
    """

    path: Path
    workspace: Path
    branch: str
    base: str
    repo: Path
    kept: bool = True
    changes: str = ""

    def note(self) -> str:
        """What the parent's tool result says of it (docs/worktrees.md)."""
        if not self.kept:
            return f"[worktree: no changes; branch {self.branch} and {self.path} removed]"
        return (
            f"[worktree kept: branch {self.branch} at {self.path} ({self.changes}); "
            f"merge it with: git merge {self.branch}]"
        )


class LiveWorktrees:
    """The worktrees of one run that exist now, in the order they were made: what MCP servers
    are told as roots beside the workspace (docs/mcp.md, "Roots").

    A worktree is added once made and dropped once removed; a kept one stays for the rest of the
    run (its work is there to read). Listeners are called, synchronously, after each change.
    """

    def __init__(self) -> None:
        self._live: dict[Path, str] = {}
        self._listeners: list[Callable[[], None]] = []

    def add(self, path: Path, agent_id: str) -> None:
        """*path* (an agent's workspace in its worktree) exists now."""
        self._live[path] = agent_id
        self._changed()

    def remove(self, path: Path) -> None:
        """*path* is gone (its worktree was removed); nothing if it was not there."""
        if self._live.pop(path, None) is not None:
            self._changed()

    def live(self) -> list[tuple[Path, str]]:
        """Each live worktree and the agent it was made for."""
        return list(self._live.items())

    def listen(self, listener: Callable[[], None]) -> None:
        """Call *listener* after every change from now on."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()


def worktree_prompt(workspace: Path, main: Path) -> str:
    """What an agent working in the worktree *workspace* is told, after its system prompt."""
    return (
        f"You work in a git worktree of your own: {workspace}, on a branch made for your task. "
        "Your file tools and commands work there, and paths are relative to it; the main "
        f"workspace {main} is not yours to change. Your changes stay in the worktree for the "
        "user to review and merge."
    )


def _env() -> dict[str, str]:
    # git's own variables would point it at another repository (a hook's GIT_DIR); its
    # messages are parsed, so in one language; it must never wait for a password.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(LC_ALL="C", GIT_TERMINAL_PROMPT="0")
    return env


async def git(args: Sequence[str], cwd: Path) -> tuple[int, str]:
    """Run ``git ARGS`` in *cwd*; its exit code and its output (stdout, then stderr).

    Raises:
        WorktreeError: git is not installed.

    Cancellation: a checkpoint; the process is killed.
    """
    try:
        done = await trio.run_process(
            ["git", *args],
            cwd=cwd,
            env=_env(),
            stdin=b"",
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    except FileNotFoundError as exc:
        raise WorktreeError("worktree isolation needs git, which is not installed") from exc
    out = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    return done.returncode, out


def _changing(repo: Path) -> trio.Lock:
    """The lock a change to *repo*'s list of worktrees holds (see ``_RACE``)."""
    lock = _locks.get(repo)
    if lock is None:
        lock = _locks[repo] = trio.Lock()
    return lock


async def _git_worktrees(args: Sequence[str], repo: Path, what: str) -> str:
    """``git ARGS`` that adds or removes one of *repo*'s worktrees, taking turns with the
    process's other such changes, and tried again when another process's crossed it."""
    lock = _changing(repo)
    try:
        async with lock:
            for attempt in range(1, _RACE_TRIES + 1):
                code, out = await git(args, repo)
                if code == 0 or attempt == _RACE_TRIES or not _RACE.search(out):
                    break
                await trio.sleep(_RACE_PAUSE_S * attempt)
    finally:
        if not lock.locked() and not lock.statistics().tasks_waiting:
            _locks.pop(repo, None)  # one lock per repository being changed, not per one ever seen
    if code != 0:
        raise WorktreeError(f"{what}: git {args[0]} failed: {_quote(out)}")
    return out


async def _git_ok(args: Sequence[str], cwd: Path, what: str) -> str:
    code, out = await git(args, cwd)
    if code != 0:
        raise WorktreeError(f"{what}: git {args[0]} failed: {_quote(out)}")
    return out.strip()


def _quote(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _QUOTE else line[: _QUOTE - 1] + "…"


def worktree_folder(workspace: Path) -> Path:
    """Where the worktrees made from *workspace* lie."""
    return workspace / RUNTIME_DIR / _FOLDER


async def add_worktree(
    workspace: Path, *, run_id: str, agent_id: str, agent_type: str, into: Path | None = None
) -> Worktree:
    """A new worktree on a new branch from the HEAD of *workspace*'s repository.

    Args:
        into: the folder it is made in (default: :func:`worktree_folder` of *workspace*). The
            runtime gives the run's: a sub-agent's worktree made from its parent's worktree
            lies beside it, not in it, so removing the parent's can never take it along.

    Raises:
        WorktreeError: *workspace* is not in a git repository, the repository has no commit
            yet, or ``git worktree add`` failed; the message says which and what to do.

    Cancellation: a checkpoint; git is killed, and a half-made worktree may be left (``git
    worktree prune`` or ``trio-agents worktrees --clean`` tidies it).
    """
    ws = _real(workspace)
    code, out = await git(["rev-parse", "--show-toplevel"], ws)
    if code != 0:
        raise WorktreeError(
            f'agent type {agent_type!r} has isolation = "worktree", but the workspace {ws} is '
            "not in a git repository (git init and commit there, or drop the isolation)"
        )
    repo = _real(Path(out.strip()))
    code, out = await git(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], repo)
    if code != 0:
        raise WorktreeError(
            f'agent type {agent_type!r} has isolation = "worktree", but the repository {repo} '
            "has no commit yet: a worktree is made from HEAD (commit first)"
        )
    base = out.strip()
    folder = worktree_folder(ws) if into is None else into
    await trio.to_thread.run_sync(_make_folder, folder)
    name = _UNSAFE.sub("-", f"{run_id}-{agent_id}")
    branch = BRANCH_PREFIX + "/".join(_UNSAFE.sub("-", p) for p in (run_id, agent_id))
    path = folder / name
    what = f"cannot make a worktree for {agent_id}"
    await _git_worktrees(["worktree", "add", "--quiet", "-b", branch, str(path), base], repo, what)
    sub = ws.relative_to(repo) if ws != repo else Path()
    return Worktree(path=path, workspace=path / sub, branch=branch, base=base, repo=repo)


def _real(path: Path) -> Path:
    # A few system calls: not worth a thread (the run's workspace is resolved already).
    return Path(os.path.realpath(path))


def _is_folder(path: Path) -> bool:
    return path.is_dir()


def _make_folder(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    ignore = folder / ".gitignore"
    if not ignore.exists():
        # Everything here, this file included: the repository's status stays as it was.
        ignore.write_text("*\n", encoding="utf-8")


async def _changes(path: Path, base: str) -> tuple[int, int]:
    """The files changed (uncommitted, untracked included) and the commits made in *path*."""
    what = f"cannot examine the worktree {path}"
    status = await _git_ok(["status", "--porcelain", "--untracked-files=all"], path, what)
    count = await _git_ok(["rev-list", "--count", f"{base}..HEAD"], path, what)
    return len(status.splitlines()), int(count or 0)


def _describe(files: int, commits: int) -> str:
    parts = []
    if files:
        parts.append(f"{files} file{'s' if files != 1 else ''} changed, uncommitted")
    if commits:
        parts.append(f"{commits} commit{'s' if commits != 1 else ''}")
    return ", ".join(parts) or "no changes"


async def finish_worktree(worktree: Worktree, *, cancelled: bool) -> Worktree:
    """*worktree* once its agent has ended: removed with its branch if nothing changed in it,
    else kept; a cancelled agent's is kept as it is, unexamined.

    A git error keeps the worktree (the reason in :attr:`Worktree.changes`), never raises:
    the agent's outcome stands.

    Cancellation: a checkpoint; git is killed and the worktree kept.
    """
    if cancelled:
        return attrs.evolve(worktree, changes="its agent was cancelled")
    try:
        files, commits = await _changes(worktree.path, worktree.base)
        if files or commits:
            return attrs.evolve(worktree, changes=_describe(files, commits))
        what = f"cannot remove the worktree {worktree.path}"
        await _git_worktrees(["worktree", "remove", str(worktree.path)], worktree.repo, what)
        await _git_ok(["branch", "-D", worktree.branch], worktree.repo, what)
    except WorktreeError as exc:
        return attrs.evolve(worktree, changes=f"kept: {exc}")
    return attrs.evolve(worktree, kept=False, changes="no changes")


# -- listing and cleaning (trio-agents worktrees) ---------------------------------------------


@attrs.frozen(kw_only=True)
class WorktreeEntry:
    """One of the runtime's worktrees, as ``git worktree list`` shows it.

    Attributes:
        files: files changed in it (uncommitted, untracked included); ``None`` when its
            folder is gone.
        commits: commits on its branch that no other branch has.
    """

    path: Path
    branch: str
    files: int | None
    commits: int

    @property
    def missing(self) -> bool:
        """Its folder is gone (git still lists it until pruned)."""
        return self.files is None


def _parse_list(text: str) -> list[tuple[Path, str]]:
    out: list[tuple[Path, str]] = []
    path: Path | None = None
    for line in text.splitlines():
        if line.startswith("worktree "):
            path = Path(line.removeprefix("worktree "))
        elif line.startswith("branch refs/heads/") and path is not None:
            branch = line.removeprefix("branch refs/heads/")
            if branch.startswith(BRANCH_PREFIX):
                out.append((path, branch))
    return out


async def _own_commits(repo: Path, branch: str) -> int:
    """Commits on *branch* no other branch has: what deleting it would lose."""
    args = ["rev-list", "--count", branch, "--not", f"--exclude={branch}", "--branches"]
    code, out = await git(args, repo)
    return int(out.strip()) if code == 0 and out.strip().isdigit() else 0


async def list_worktrees(workspace: Path) -> tuple[Path, list[WorktreeEntry]]:
    """The repository holding *workspace* and the runtime's worktrees of it.

    Raises:
        WorktreeError: *workspace* is not in a git repository.
    """
    ws = _real(workspace)
    code, out = await git(["rev-parse", "--show-toplevel"], ws)
    if code != 0:
        raise WorktreeError(f"{ws} is not in a git repository")
    repo = _real(Path(out.strip()))
    listed = await _git_ok(["worktree", "list", "--porcelain"], repo, "cannot list worktrees")
    entries = []
    for path, branch in _parse_list(listed):
        files: int | None = None
        if _is_folder(path):
            code, status = await git(["status", "--porcelain", "--untracked-files=all"], path)
            files = len(status.splitlines()) if code == 0 else None
        entries.append(
            WorktreeEntry(
                path=path, branch=branch, files=files, commits=await _own_commits(repo, branch)
            )
        )
    return repo, entries


async def remove_entry(repo: Path, entry: WorktreeEntry, *, force: bool) -> str:
    """Remove *entry*'s worktree (and its branch, unless it has commits of its own); what was
    done, in one line.

    A worktree with uncommitted changes is removed only with *force*.
    """
    if entry.files and not force:
        return (
            f"kept {entry.path}: {entry.files} uncommitted change(s) "
            "(commit them, or remove it anyway with --clean --force)"
        )
    if entry.missing:
        await git(["worktree", "prune"], repo)
    else:
        args = ["worktree", "remove", *(["--force"] if entry.files else []), str(entry.path)]
        code, out = await git(args, repo)
        if code != 0:
            return f"kept {entry.path}: git worktree remove failed: {_quote(out)}"
    if entry.commits:
        return (
            f"removed {entry.path}; branch {entry.branch} kept: {entry.commits} commit(s) of its "
            f"own (git branch -D {entry.branch} drops it)"
        )
    code, out = await git(["branch", "-D", entry.branch], repo)
    if code != 0:
        return f"removed {entry.path}; branch {entry.branch} kept: {_quote(out)}"
    return f"removed {entry.path} and branch {entry.branch}"


def describe_entry(entry: WorktreeEntry) -> Mapping[str, object]:
    """*entry* as JSON (``worktrees --json``)."""
    return {
        "path": str(entry.path),
        "branch": entry.branch,
        "missing": entry.missing,
        "files_changed": entry.files,
        "commits": entry.commits,
    }
