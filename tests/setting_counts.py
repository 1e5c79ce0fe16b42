"""How many modules of the command-line, project and wiring layers name each setting.

docs/configuration.md#one-table-for-every-setting: a setting is defined once (in
``runtime/core/_config.py``); the layers above may read it where they consume it, in at most
two modules. Run it to see the counts::

    python -m tests.setting_counts

A module names a setting when its code (not its prose: comments, docstrings and strings with a
space in them are left out) holds its flag as a string (``"--max-parallel"``), its dotted key as
a string (``"limits.max_parallel"``), or, for a name distinctive enough to search for (one with
an underscore: ``max_parallel``, ``allow_env``), that name. One-word names (``model``,
``provider``, ``mode``) are counted by their flag (and dotted key) only: the word is everywhere.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("runtime/cli", "runtime/project", "runtime/wiring")

# The settings of today's files and command line: (dotted key, flags). Written out here, not
# imported from the schema, so the count does not depend on the code it measures.
SETTINGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("provider", ("--provider",)),
    ("model", ("--model",)),
    ("permissions.mode", ("--permission-mode",)),
    ("permissions.allow", ("--allow",)),
    ("permissions.deny", ("--deny",)),
    ("permissions.allow_env", ("--allow-env",)),
    ("permissions.timeout_s", ("--permission-timeout",)),
    ("limits.max_turns", ("--max-turns",)),
    ("limits.max_depth", ("--max-depth",)),
    ("limits.max_parallel", ("--max-parallel",)),
    ("limits.max_agents", ()),
    ("limits.max_tool_output_chars", ()),
    ("limits.context_window", ("--context-window",)),
    ("limits.compact_threshold", ("--compact-threshold",)),
    ("mcp.config", ("--mcp-config",)),
    ("mcp.enabled", ("--no-mcp",)),
    ("mcp.start_timeout_s", ("--mcp-start-timeout",)),
    ("sandbox.enabled", ("--sandbox",)),
    ("sandbox.network", ("--sandbox-network",)),
    ("trace.enabled", ("--no-trace",)),
    ("trace.dir", ()),
    ("view.fps", ("--fps",)),
    ("ray.address", ("--ray-address",)),
    ("ray.hosts_per_node", ("--ray-hosts-per-node",)),
    ("ray.cpus_per_host", ("--ray-cpus-per-host",)),
    ("ray.strategy", ("--ray-strategy",)),
)


def _words(text: str) -> set[str]:
    """The names and the space-free string literals of a module's code."""
    out: set[str] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.NAME:
            out.add(token.string)
        elif token.type == tokenize.STRING:
            try:
                value = ast.literal_eval(token.string)
            except (ValueError, SyntaxError):  # an f-string: prose or built names
                continue
            if isinstance(value, str) and not any(c.isspace() for c in value):
                out.add(value)
    return out


def _needles(key: str, flags: Iterable[str]) -> set[str]:
    leaf = key.rsplit(".", 1)[-1]
    return {*flags} | ({key} if "." in key else set()) | ({leaf} if "_" in leaf else set())


def counts(root: Path = ROOT) -> dict[str, list[str]]:
    """The modules of :data:`LAYERS` naming each setting, by dotted key."""
    modules = sorted(p for layer in LAYERS for p in (root / layer).glob("*.py"))
    words = {str(p.relative_to(root)): _words(p.read_text(encoding="utf-8")) for p in modules}
    return {
        key: [m for m, found in words.items() if found & _needles(key, flags)]
        for key, flags in SETTINGS
    }


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else ROOT
    found = counts(root)
    width = max(map(len, found))
    for key, modules in found.items():
        print(f"{key:<{width}}  {len(modules)}  {', '.join(modules)}")
    print(f"most: {max(len(m) for m in found.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
