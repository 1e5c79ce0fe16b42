"""How many modules of the command-line, project and wiring layers name each setting.

docs/configuration.md#one-table-for-every-setting: a setting is defined once (in
``runtime/core/_config.py``); the layers above may read it where they consume it, in at most
two modules. Run it to see the counts::

    python -m tests.setting_counts

A module names a setting when its code (not its prose: comments, docstrings and strings with a
space in them are left out) holds its flag as a string (``"--max-parallel"``), its dotted key
as a string (``"limits.max_parallel"``) or as an attribute chain (``opts.limits.max_parallel``),
or the name it has of its own in Python (the ``open_runtime`` parameter ``allow_env``, the old
option field ``no_mcp``). Top-level keys (``model``, ``provider``) are counted by their flag:
the word is everywhere.
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
SETTINGS: tuple[tuple[str, tuple[str, ...], str | None], ...] = (
    ("provider", ("--provider",), None),
    ("model", ("--model",), None),
    ("permissions.mode", ("--permission-mode",), "permission_mode"),
    ("permissions.allow", ("--allow",), None),
    ("permissions.deny", ("--deny",), None),
    ("permissions.allow_env", ("--allow-env",), "allow_env"),
    ("permissions.timeout_s", ("--permission-timeout",), "permission_timeout_s"),
    ("limits.max_turns", ("--max-turns",), None),
    ("limits.max_depth", ("--max-depth",), None),
    ("limits.max_parallel", ("--max-parallel",), None),
    ("limits.max_agents", (), None),
    ("limits.max_tool_output_chars", (), None),
    ("limits.context_window", ("--context-window",), None),
    ("limits.compact_threshold", ("--compact-threshold",), None),
    ("mcp.config", ("--mcp-config",), "mcp_config"),
    ("mcp.enabled", ("--no-mcp",), "no_mcp"),
    ("mcp.start_timeout_s", ("--mcp-start-timeout",), "mcp_start_timeout_s"),
    ("sandbox.enabled", ("--sandbox",), None),
    ("sandbox.network", ("--sandbox-network",), "sandbox_network"),
    ("trace.enabled", ("--no-trace",), "no_trace"),
    ("trace.dir", (), "trace_dir"),
    ("view.fps", ("--fps",), None),
    ("ray.address", ("--ray-address",), "ray_address"),
    ("ray.hosts_per_node", ("--ray-hosts-per-node",), "ray_hosts_per_node"),
    ("ray.cpus_per_host", ("--ray-cpus-per-host",), "ray_cpus_per_host"),
    ("ray.strategy", ("--ray-strategy",), "ray_strategy"),
)
"""``(dotted key, flags, a name of its own)``: the name a setting has in Python where it is
not its leaf (an ``open_runtime`` parameter, an old option field), ``None`` where it has none."""


def _words(text: str) -> set[str]:
    """The names, the ``section.leaf`` attribute chains and the space-free string literals of a
    module's code."""
    out: set[str] = set()
    last: list[str] = []  # the last tokens, for NAME . NAME
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.NAME:
            out.add(token.string)
            if len(last) >= 2 and last[-1] == "." and last[-2].isidentifier():
                out.add(f"{last[-2]}.{token.string}")
        elif token.type == tokenize.STRING:
            try:
                value = ast.literal_eval(token.string)
            except (ValueError, SyntaxError):  # an f-string: prose or built names
                value = None
            if isinstance(value, str) and not any(c.isspace() for c in value):
                out.add(value)
        if token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
            last = [*last[-1:], token.string]
    return out


def _needles(key: str, flags: Iterable[str], own: str | None) -> set[str]:
    # A dotted key is found as a string ("limits.max_turns") and as the attribute chain
    # (opts.limits.max_turns has the words "limits.max_turns"): its leaf alone is often a
    # homonym (trace show's max_depth, a socket's timeout_s, an agent file's max_turns).
    return {*flags} | ({key} if "." in key else set()) | ({own} if own else set())


def counts(root: Path = ROOT) -> dict[str, list[str]]:
    """The modules of :data:`LAYERS` naming each setting, by dotted key."""
    modules = sorted(p for layer in LAYERS for p in (root / layer).glob("*.py"))
    words = {str(p.relative_to(root)): _words(p.read_text(encoding="utf-8")) for p in modules}
    return {
        key: [m for m, found in words.items() if found & _needles(key, flags, own)]
        for key, flags, own in SETTINGS
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
