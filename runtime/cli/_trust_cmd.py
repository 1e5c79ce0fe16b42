"""Trusting a workspace: ``trio-agents trust``, and the question a run asks when an untrusted
workspace's files want to loosen the user's settings (docs/configuration.md#trust)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.core import visible

from ._exit import EXIT_OK, EXIT_USAGE, PROG, error_line, warning_line

if TYPE_CHECKING:
    from runtime.project import Settings, TrustStore, TrustVerdict


def add_trust_parser(sub: Any) -> None:
    """``trust [DIR]``, ``trust --list``, ``trust --revoke DIR``."""
    trust = sub.add_parser(
        "trust",
        help="trust a workspace: its own settings files and .mcp.json may then loosen yours",
        description="Trust a workspace (default: this folder): its .trio-agents/settings.toml, "
        ".claude/settings*.json and .mcp.json may then loosen your settings and start their MCP "
        "servers. What is trusted is the folder's real path and the files as they are now: a "
        "changed file makes it untrusted again (docs/configuration.md#trust).",
    )
    trust.add_argument("dir", nargs="?", metavar="DIR", help="the workspace (default: .)")
    trust.add_argument("--list", action="store_true", help="the trusted workspaces")
    trust.add_argument("--revoke", action="store_true", help="stop trusting DIR")
    trust.add_argument("--json", action="store_true", help="with --list: as JSON")


def _store() -> TrustStore:
    from runtime.project import TrustStore

    return TrustStore.load()


def cmd_trust(ns: argparse.Namespace) -> int:
    """Run ``trio-agents trust`` as parsed into *ns*."""
    store = _store()
    if ns.list:
        entries = list(store)
        if ns.json:
            print(json.dumps([{"path": e.path, "state": store.verdict(Path(e.path)).state}
                              for e in entries]))
        elif not entries:
            print("no trusted workspaces")
        for e in entries if not ns.json else ():
            state = store.verdict(Path(e.path)).state
            note = "" if state == "trusted" else "  (changed since: untrusted until trusted again)"
            print(visible(f"{e.path}{note}", layout=False))
        return EXIT_OK
    folder = Path(ns.dir or ".").expanduser()
    if ns.revoke:
        if ns.dir is None:
            error_line("trust --revoke needs the workspace: trio-agents trust --revoke DIR")
            return EXIT_USAGE
        if store.revoke(folder):
            print(f"no longer trusted: {os.path.realpath(folder)}")
        else:
            print(f"was not trusted: {os.path.realpath(folder)}")
        return EXIT_OK
    if not folder.is_dir():
        error_line(f"workspace {str(folder)!r} is not a folder")
        return EXIT_USAGE
    entry = store.trust(folder)
    print(f"trusted: {entry.path}")
    return EXIT_OK


def verdict_for(workspace: Path) -> TrustVerdict:
    """Whether *workspace* is trusted; a trust store that cannot be read is one warning and
    counts as trusting nothing."""
    from runtime.project import ProjectFileError, TrustVerdict

    try:
        return _store().verdict(workspace)
    except ProjectFileError as exc:
        warning_line(str(exc))
        return TrustVerdict(state="untrusted", path=os.path.realpath(workspace))


def settle(settings: Settings, verdict: TrustVerdict, *, can_ask: bool) -> bool:
    """What to do about the settings an untrusted workspace's file asked for: ask the user on
    a terminal (one key, y or N), else say in one warning line what was ignored and how to
    trust. Whether the user trusted the workspace just now (then load the settings again)."""
    if not settings.ignored:
        return False
    asked = "; ".join(f"{name} = {_shown(value)} ({where})"
                      for name, value, where in settings.ignored)
    changed = " (its files changed since you trusted it)" if verdict.state == "changed" else ""
    if can_ask:
        question = (f"{PROG}: the workspace {verdict.path}{changed} asks to loosen your settings: "
                    f"{asked}. Trust it? [y/N] ")
        if ask_yes_no(visible(question, layout=False)):
            _store().trust(Path(verdict.path))
            return True
    names = ", ".join(name for name, _, _ in settings.ignored)
    warning_line(visible(
        f"ignored what the untrusted workspace's files ask to loosen: {names}{changed}; "
        f"to apply them: {PROG} trust {verdict.path}", layout=False))
    return False


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def ask_yes_no(question: str) -> bool:
    """Ask on the terminal; one key answers (``y`` yes, anything else no)."""
    sys.stderr.write(question)
    sys.stderr.flush()
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, ValueError, OSError):
        return False
    key = _one_key(fd)
    sys.stderr.write(("y" if key in ("y", "Y") else "n") + "\n")
    return key in ("y", "Y")


def _one_key(fd: int) -> str:
    import termios
    import tty

    try:
        old = termios.tcgetattr(fd)
    except termios.error:
        line = sys.stdin.readline()
        return line[:1]
    try:
        tty.setcbreak(fd)
        with contextlib.suppress(OSError):
            return os.read(fd, 1).decode(errors="replace")
        return ""
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)
