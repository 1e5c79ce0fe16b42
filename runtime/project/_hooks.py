"""Hooks configuration: the ``hooks`` table of Claude Code's settings files and of the runtime's
own (docs/hooks.md#configuration).

Read, in this order, and merged as Claude Code merges them (every file's hooks run; the same
command named twice runs once): ``~/.claude/settings.json`` and the runtime's user
``settings.toml`` (the user's), then the workspace's ``.claude/settings.json``,
``.claude/settings.local.json`` and ``.trio-agents/settings.toml``. A workspace's hooks are
commands the repository would run on the user's machine: they count only in a trusted workspace
(docs/configuration.md#trust); otherwise each file's hooks are named in
:attr:`HookConfig.ignored`, which the settings add to what they ignored.

A malformed entry is one error naming the file and the JSON path; a key this version does not
know is a warning (Claude Code adds keys over time), as is an event or hook type it does not
run.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from runtime.core import HOOK_EVENTS, Hook, HookTable

from ._files import ProjectFileError, read_text_capped, user_config_dir

__all__ = ["HookConfig", "hook_sources", "hooks_from_mapping", "load_hooks"]

MAX_FILE_BYTES = 1 << 20
MAX_HOOKS = 256
_GROUP_KEYS = frozenset({"matcher", "hooks"})
_HOOK_KEYS = {
    "command": frozenset({"type", "command", "timeout", "async", "statusMessage", "once"}),
    "http": frozenset({"type", "url", "headers", "allowedEnvVars", "timeout", "statusMessage",
                       "once"}),
}  # fmt: skip
# Keys Claude Code has that change nothing here
# (docs/hooks.md#what-differs-from-claude-code-and-why).
_IGNORED_KEYS = frozenset({"async", "statusMessage", "once"})
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


@attrs.frozen
class HookConfig:
    """The hooks of a workspace and its user.

    Attributes:
        table: the hooks that run.
        ignored: an untrusted workspace's hooks, one ``("hooks", what, file)`` per file.
        warnings: unknown keys, events and hook types (one line each).
    """

    table: HookTable = attrs.Factory(HookTable)
    ignored: tuple[tuple[str, Any, str], ...] = ()
    warnings: tuple[str, ...] = ()


def hook_sources(workspace: Path, env: Mapping[str, str] | None = None) -> list[tuple[str, Path]]:
    """``(scope, file)`` for every file hooks are read from, in order (``user``/``workspace``)."""
    env = os.environ if env is None else env
    claude = env.get("CLAUDE_CONFIG_DIR", "")  # Claude Code's own override of ~/.claude
    home = Path(env.get("HOME") or Path.home())
    folder = Path(claude) if os.path.isabs(claude) else home / ".claude"
    return [
        ("user", folder / "settings.json"),
        ("user", user_config_dir(env) / "settings.toml"),
        ("workspace", workspace / ".claude" / "settings.json"),
        ("workspace", workspace / ".claude" / "settings.local.json"),
        ("workspace", workspace / ".trio-agents" / "settings.toml"),
    ]


def load_hooks(
    workspace: Path, *, env: Mapping[str, str] | None = None, trusted: bool = True
) -> HookConfig:
    """The hooks of *workspace* and its user (see the module docstring).

    Raises:
        ProjectFileError: a file that is not JSON (TOML), or a malformed ``hooks`` entry: one
            line naming the file and the JSON path.
    """
    env = os.environ if env is None else env
    hooks: list[Hook] = []
    ignored: list[tuple[str, Any, str]] = []
    warnings: list[str] = []
    for scope, file in hook_sources(workspace, env):
        if not file.is_file():
            continue
        raw = _read(file, root=workspace if scope == "workspace" else None)
        if "hooks" not in raw:
            continue
        found = hooks_from_mapping(
            raw["hooks"], source=f"{scope} {file}", where=str(file), warn=warnings.append,
            env=env if scope == "user" else None,
        )  # fmt: skip
        if scope == "workspace" and not trusted and found:
            ignored.append(("hooks", _summary(found), str(file)))
            continue
        hooks.extend(found)
    if len(hooks) > MAX_HOOKS:
        raise ProjectFileError(f"{len(hooks)} hooks configured; at most {MAX_HOOKS}")
    return HookConfig(HookTable(tuple(hooks)), tuple(ignored), tuple(warnings))


def hooks_from_mapping(
    data: Any,
    *,
    source: str = "",
    where: str = "hooks",
    warn: Any = None,
    env: Mapping[str, str] | None = None,
) -> tuple[Hook, ...]:
    """The hooks of one ``hooks`` object (Claude Code's shape: event → matcher groups →
    hooks), checked.

    Args:
        source: where they came from, for ``trio-agents hooks``.
        where: the file, for errors and warnings.
        warn: called with each warning line (default: none said).
        env: the environment an HTTP hook's headers fill ``$VAR``/``${VAR}`` from (only the
            variables its ``allowedEnvVars`` names); ``None``: nothing is filled in (a
            workspace's file may not read the user's environment).

    Raises:
        ProjectFileError: one line, ``FILE: hooks.EVENT[i].hooks[j].KEY: problem``.
    """
    say = warn or (lambda _line: None)
    if not isinstance(data, dict):
        raise ProjectFileError(f"{where}: hooks: expected an object of events; got {_kind(data)}")
    out: list[Hook] = []
    for event, groups in data.items():
        path = f"hooks.{event}"
        if event not in HOOK_EVENTS:
            say(f"{where}: {path}: an event this version does not run; skipped")
            continue
        if not isinstance(groups, list):
            raise ProjectFileError(f"{where}: {path}: expected an array of matchers; got "
                                   f"{_kind(groups)}")  # fmt: skip
        for i, group in enumerate(groups):
            out.extend(_group(event, group, f"{path}[{i}]", where, source, say, env))
    return tuple(out)


def _group(
    event: str, group: Any, path: str, where: str, source: str, say: Any,
    env: Mapping[str, str] | None,
) -> list[Hook]:  # fmt: skip
    if not isinstance(group, dict):
        raise ProjectFileError(f"{where}: {path}: expected an object with hooks; got "
                               f"{_kind(group)}")  # fmt: skip
    for key in group.keys() - _GROUP_KEYS:
        say(f"{where}: {path}.{key}: unknown key; ignored")
    matcher = group.get("matcher", "")
    if not isinstance(matcher, str):
        raise ProjectFileError(f"{where}: {path}.matcher: expected a string; got {_kind(matcher)}")
    entries = group.get("hooks")
    if not isinstance(entries, list):
        raise ProjectFileError(f"{where}: {path}.hooks: expected an array of hooks; got "
                               f"{_kind(entries)}")  # fmt: skip
    out = []
    for j, entry in enumerate(entries):
        hook = _hook(event, matcher, entry, f"{path}.hooks[{j}]", where, source, say, env)
        if hook is not None:
            out.append(hook)
    return out


def _hook(
    event: str, matcher: str, entry: Any, path: str, where: str, source: str, say: Any,
    env: Mapping[str, str] | None,
) -> Hook | None:  # fmt: skip
    if not isinstance(entry, dict):
        raise ProjectFileError(f"{where}: {path}: expected an object; got {_kind(entry)}")
    kind = entry.get("type")
    if kind not in _HOOK_KEYS:
        if isinstance(kind, str) and kind:
            say(f"{where}: {path}.type: {kind!r} hooks are not run by this version; skipped")
            return None
        raise ProjectFileError(f"{where}: {path}.type: expected \"command\" or \"http\"; got "
                               f"{json.dumps(kind)}")  # fmt: skip
    for key in sorted(entry.keys() - _HOOK_KEYS[kind]):
        say(f"{where}: {path}.{key}: unknown key; ignored")
    for key in sorted(entry.keys() & _IGNORED_KEYS):
        say(f"{where}: {path}.{key}: not supported here; ignored (docs/hooks.md)")
    timeout = entry.get("timeout", 60)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < 1e6:
        raise ProjectFileError(f"{where}: {path}.timeout: expected seconds > 0; got "
                               f"{json.dumps(timeout)}")  # fmt: skip
    field = "command" if kind == "command" else "url"
    target = entry.get(field)
    if not isinstance(target, str) or not target.strip():
        raise ProjectFileError(f"{where}: {path}.{field}: expected a non-empty string; got "
                               f"{json.dumps(target)}")  # fmt: skip
    headers: tuple[tuple[str, str], ...] = ()
    if kind == "http":
        if not re.match(r"https?://", target):
            raise ProjectFileError(f"{where}: {path}.url: expected an http:// or https:// URL; "
                                   f"got {json.dumps(target)}")  # fmt: skip
        headers = _headers(entry, path, where, env)
    try:
        return Hook.new(event=event, matcher=matcher, kind=kind, target=target, headers=headers,
                        timeout_s=float(timeout), source=f"{source}: {path}")  # fmt: skip
    except re.error as exc:
        raise ProjectFileError(f"{where}: {path.rsplit('.hooks[', 1)[0]}.matcher: not a regular "
                               f"expression: {exc}") from None  # fmt: skip


def _headers(
    entry: Mapping[str, Any], path: str, where: str, env: Mapping[str, str] | None
) -> tuple[tuple[str, str], ...]:
    headers = entry.get("headers", {})
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise ProjectFileError(f"{where}: {path}.headers: expected an object of strings")
    allowed = entry.get("allowedEnvVars", [])
    if not isinstance(allowed, list) or not all(isinstance(v, str) for v in allowed):
        raise ProjectFileError(f"{where}: {path}.allowedEnvVars: expected an array of names")
    names = set(allowed) if env is not None else set()

    def fill(m: re.Match[str]) -> str:
        name = m[1] or m[2]
        # As Claude Code: a variable not listed (or a workspace's) is sent empty, never read.
        return (env or {}).get(name, "") if name in names else ""

    # Stripped: an emptied variable must not leave a value ending in a space (not valid HTTP).
    return tuple((k, _VAR.sub(fill, v).strip()) for k, v in headers.items())


def _read(file: Path, *, root: Path | None) -> dict[str, Any]:
    content = read_text_capped(file, MAX_FILE_BYTES, root=root)
    if content.truncated:
        raise ProjectFileError(f"{file}: too big (over {MAX_FILE_BYTES // 1024} KiB)")
    try:
        data = (tomllib.loads(content.text) if file.suffix == ".toml"
                else json.loads(content.text) if content.text.strip() else {})  # fmt: skip
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        kind = "TOML" if file.suffix == ".toml" else "JSON"
        raise ProjectFileError(f"{file}: not valid {kind}: {exc}") from None
    if not isinstance(data, dict):
        raise ProjectFileError(f"{file}: expected a JSON object; got {_kind(data)}")
    return data


def _summary(hooks: tuple[Hook, ...]) -> str:
    """What an ignored file's hooks would have run, for the trust question."""
    return "; ".join(f"{h.event}: {h.target}" for h in hooks)


def _kind(value: Any) -> str:
    kinds = ((bool, "a boolean"), (int, "a number"), (float, "a number"), (str, "a string"),
             (list, "an array"), (dict, "an object"), (type(None), "null"))  # fmt: skip
    return next((word for t, word in kinds if isinstance(value, t)), type(value).__name__)
