"""``trio-agents worktrees [--clean [--force]]``: the git worktrees isolated agents left in a
workspace's repository, listed or removed (docs/worktrees.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ._exit import EXIT_OK, EXIT_USAGE, error_line


def add_worktrees_parser(sub: Any) -> None:
    """``worktrees [--workspace DIR] [--clean [--force]] [--json]``."""
    parser = sub.add_parser(
        "worktrees",
        help="list (or remove) the git worktrees isolated agents left",
        description="List the git worktrees that agents of an isolation = \"worktree\" type "
        "left in the workspace's repository (branches trio-agents/RUN/AGENT): path, branch, "
        "files changed and commits of its own. --clean removes them: a worktree with "
        "uncommitted changes only with --force; a branch with commits of its own is kept "
        "(docs/worktrees.md).",
    )
    parser.add_argument("--workspace", metavar="DIR", help="the workspace (default: .)")
    parser.add_argument("--clean", action="store_true", help="remove them")
    parser.add_argument(
        "--force", action="store_true", help="with --clean: also those with uncommitted changes"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def cmd_worktrees(ns: argparse.Namespace) -> int:
    """Run ``trio-agents worktrees`` as parsed into *ns*."""
    if ns.force and not ns.clean:
        error_line("worktrees: --force goes with --clean")
        return EXIT_USAGE
    # Here: the command line's help imports neither trio nor what uses it.
    import trio

    from runtime.core import WorktreeError

    workspace = Path(ns.workspace or ".")
    try:
        return trio.run(_main, workspace, ns.clean, ns.force, ns.json)
    except WorktreeError as exc:
        error_line(f"worktrees: {exc}")
        return EXIT_USAGE


async def _main(workspace: Path, clean: bool, force: bool, as_json: bool) -> int:
    from runtime.core import describe_entry, list_worktrees, remove_entry, visible

    repo, entries = await list_worktrees(workspace)
    if not clean:
        if as_json:
            print(json.dumps([describe_entry(e) for e in entries]))
            return EXIT_OK
        if not entries:
            print(f"no worktrees of isolated agents in {repo}")
        for e in entries:
            state = "folder gone" if e.missing else f"{e.files} file(s) changed"
            print(visible(f"{e.branch}  {e.path}  ({state}, {e.commits} commit(s))", layout=False))
        return EXIT_OK
    said = [await remove_entry(repo, e, force=force) for e in entries]
    if as_json:
        print(json.dumps(said))
    elif not said:
        print(f"no worktrees of isolated agents in {repo}")
    for line in said if not as_json else ():
        print(visible(line, layout=False))
    return EXIT_OK
