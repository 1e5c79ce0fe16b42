"""``trio-agents hooks``: the hooks a run in the workspace would run, and where each came from
(docs/hooks.md#configuration)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from runtime.core import visible

from ._exit import EXIT_OK


def add_hooks_parser(sub: Any) -> None:
    """``hooks [--workspace DIR] [--json]``."""
    hooks = sub.add_parser(
        "hooks",
        help="list the configured hooks and where each came from",
        description="List the hooks a run here would run (Claude Code's format: "
        "~/.claude/settings.json, .claude/settings.json, .claude/settings.local.json and the "
        "hooks tables of the runtime's settings files), each with its event, matcher, command or "
        "URL, timeout and the file and JSON path it came from; an untrusted workspace's hooks are "
        "listed as ignored (docs/hooks.md).",
    )
    hooks.add_argument("--workspace", metavar="DIR", help="the project (default: this folder)")
    hooks.add_argument("--json", action="store_true", help="print JSON")


def cmd_hooks(ns: argparse.Namespace) -> int:
    """Print the hooks of the workspace of *ns* (a bad file: a usage error, exit 2)."""
    from ._project import load_effective_settings

    settings = load_effective_settings(ns)
    rows = [
        {
            "event": h.event,
            "matcher": h.matcher,
            "type": h.kind,
            "command" if h.kind == "command" else "url": h.target,
            "timeout_s": h.timeout_s,
            "source": h.source,
        }
        for h in settings.hooks.hooks
    ]
    ignored = [{"file": where, "hooks": what} for name, what, where in settings.ignored
               if name == "hooks"]  # fmt: skip
    if ns.json:
        print(json.dumps({"hooks": rows, "ignored": ignored}, indent=2))
        return EXIT_OK
    if not rows and not ignored:
        print("no hooks configured")
    for row in rows:
        target = row.get("command", row.get("url"))
        matcher = row["matcher"] or "*"
        print(visible(f"{row['event']:<16} {matcher:<14} {row['type']:<7} {target}  "
                      f"({row['timeout_s']:g} s)  {row['source']}", layout=False))  # fmt: skip
    for entry in ignored:
        print(visible(f"ignored (untrusted workspace): {entry['file']}: {entry['hooks']}",
                      layout=False))  # fmt: skip
    return EXIT_OK
