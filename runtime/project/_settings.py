"""Settings: ``.trio-agents/settings.toml`` in the workspace and in the user's config folder.

Precedence, per key: command-line flags, then the workspace's file, then the user's file,
then the defaults. Rule lists (``permissions.allow``, ``permissions.deny``) add up instead:
the user's rules, then the workspace's, then the flags'.

What keys exist, what values each takes, its flag and its default are the one table of
settings, ``runtime/core/_config.py``: this module reads files against it. A file with a key
that does not exist, or a value of the wrong kind, is refused with the file, the line and the
key (and, for an unknown key, the closest valid one; for a table given a value, what it is).
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from runtime.core import FILE_SETTINGS, SCHEMA, SECTIONS, TABLE, HookTable
from runtime.core import Setting as Setting

from ._files import ProjectFileError, read_text_capped, user_config_dir
from ._hooks import HookConfig, load_hooks

SETTINGS_FILE = Path(".trio-agents") / "settings.toml"
MAX_SETTINGS_BYTES = 256 * 1024

SETTINGS: Mapping[str, Setting] = FILE_SETTINGS
"""The keys a settings file may set, by dotted name (rows of the one table)."""


@attrs.frozen
class Value:
    """A setting's effective value and where it came from (``default``, ``flag --model``,
    ``user ~/.config/trio-agents/settings.toml:3``, ``workspace .trio-agents/settings.toml:2``;
    an appended list may name several)."""

    value: Any
    source: str


@attrs.frozen
class Settings:
    """The effective settings; see the module docstring for the precedence.

    Attributes:
        files: the settings files that were read (user, workspace), in order.
    """

    values: Mapping[str, Value]
    files: tuple[Path, ...] = ()
    trusted: bool = True
    """Whether the workspace's file could loosen (docs/configuration.md#trust)."""
    ignored: tuple[tuple[str, Any, str], ...] = ()
    """What an untrusted workspace's file asked for and did not get, because it would loosen
    the user's settings: ``(setting, value, "file:line")`` (docs/configuration.md#trust); an
    untrusted workspace's hooks are ``("hooks", what they run, file)`` (docs/hooks.md)."""
    hooks: HookTable = attrs.Factory(HookTable)
    """The hooks of the settings files, Claude Code's and ours (docs/hooks.md)."""
    warnings: tuple[str, ...] = ()
    """Lines to say about the files (a hook's key this version does not know)."""

    def __getitem__(self, name: str) -> Any:
        return self.values[name].value

    def source(self, name: str) -> str:
        return self.values[name].source

    def is_set(self, name: str) -> bool:
        """Whether a file or a flag set *name* (not just its default)."""
        return self.values[name].source != "default"


def settings_paths(
    workspace: Path, env: Mapping[str, str] | None = None
) -> list[tuple[str, Path, Path]]:
    """``(scope, file, base folder)`` for the user's and the workspace's settings files."""
    user = user_config_dir(env)
    return [
        ("user", user / "settings.toml", user),
        ("workspace", workspace / SETTINGS_FILE, workspace),
    ]


def load_settings(
    workspace: Path | None,
    *,
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    layers: Iterable[tuple[str, Mapping[str, Any]]] = (),
    trusted: bool = True,
) -> Settings:
    """The effective settings for *workspace*: every row of the table, a file's rows included.

    Args:
        workspace: the workspace whose (and whose user's) files are read; ``None``: no file
            is read (``demo``, ``replay``), only the defaults and *flags*.
        flags: values given on the command line, by setting name (``None`` values are skipped).
        env: for ``XDG_CONFIG_HOME`` / ``HOME`` (default ``os.environ``).
        layers: more ``(source, values)`` between the files and the flags, values checked
            already (``replay``: the recorded run's settings).
        trusted: whether the workspace is trusted; when not, a value of its file that would
            loosen what the user's file and the defaults set is left out and named in
            :attr:`Settings.ignored` (a tightening one applies).

    Raises:
        ProjectFileError: a settings file that is not TOML, or has an unknown key or a bad
            value: one line naming the file, the line and the key.
    """
    values: dict[str, Value] = {s.name: Value(s.default, "default") for s in TABLE}
    files = []
    ignored: list[tuple[str, Any, str]] = []
    for scope, file, base in settings_paths(workspace, env) if workspace is not None else ():
        if not file.is_file():
            continue
        files.append(file)
        within = base if scope == "workspace" else None
        for name, (value, line) in read_settings_file(file, root=within).items():
            setting = SCHEMA[name]
            if setting.is_path and isinstance(value, tuple):
                value = tuple(str((base / Path(v).expanduser()).resolve()) for v in value)
            elif setting.is_path:
                value = str((base / Path(value).expanduser()).resolve())
            if scope == "workspace" and not trusted and _loosens(setting, values, value):
                ignored.append((name, value, f"{file}:{line}"))
                continue
            _layer(values, setting, value, f"{scope} {file}:{line}")
    for source, layer in layers:
        for name, value in layer.items():
            _layer(values, SCHEMA[name], value, source)
    for name, value in (flags or {}).items():
        setting = SCHEMA[name]
        if value is None or (setting.merge == "append" and not value):
            continue
        _layer(values, setting, value, f"flag {_shown_flag(setting)}")
    hooks = HookConfig()
    if workspace is not None:  # Claude Code's settings files too: runtime/project/_hooks.py
        hooks = load_hooks(workspace, env=env, trusted=trusted)
        ignored.extend(hooks.ignored)
    return Settings(
        values, tuple(files), trusted, tuple(ignored), hooks=hooks.table, warnings=hooks.warnings
    )


def _loosens(setting: Setting, values: Mapping[str, Value], value: Any) -> bool:
    """Whether *value* from a file would loosen what is set so far (a list's items are
    added to it, so the list with them is judged)."""
    old = values[setting.name].value
    new = (*old, *value) if setting.merge == "append" and old else value
    return setting.trust.loosens(old, new)


def _shown_flag(setting: Setting) -> str:
    return next((f for f in setting.flags if f.startswith("--")), setting.flags[0])


def _layer(values: dict[str, Value], setting: Setting, value: Any, source: str) -> None:
    old = values[setting.name]
    if setting.merge == "append" and old.source != "default":
        values[setting.name] = Value((*old.value, *value), f"{old.source}; {source}")
    else:
        values[setting.name] = Value(tuple(value) if setting.merge == "append" else value, source)


def read_settings_file(file: Path, *, root: Path | None = None) -> dict[str, tuple[Any, int]]:
    """The checked values of one settings file, by dotted name, with their line numbers.

    Args:
        root: the folder a final symlink must stay in (the workspace, for its own file: a
            link out of it is refused as every planted file is).

    Raises:
        ProjectFileError: see :func:`load_settings`.
    """
    content = read_text_capped(file, MAX_SETTINGS_BYTES, root=root)
    if content.truncated:
        raise ProjectFileError(f"{file}: too big (over {MAX_SETTINGS_BYTES // 1024} KiB)")
    try:
        data = tomllib.loads(content.text)
    except tomllib.TOMLDecodeError as exc:
        raise ProjectFileError(f"{file}: not valid TOML: {exc}") from None
    data.pop("hooks", None)  # Claude Code's table, read by runtime/project/_hooks.py
    lines = _KeyLines(content.text)
    out: dict[str, tuple[Any, int]] = {}
    for name, value in _flatten(data):
        line = lines.find(name)
        where = f"{file}:{line}" if line else str(file)
        setting = SETTINGS.get(name)
        if setting is None and name in SECTIONS:
            keys = ", ".join(k.split(".", 1)[1] for k in SETTINGS if k.startswith(f"{name}."))
            raise ProjectFileError(
                f"{where}: {name}: a table of settings, not a value: write [{name}] and "
                f"its keys under it ({keys}); got {_kind_of(value)}, {_toml(value)}")
        if setting is None:
            raise ProjectFileError(f"{where}: {name}: unknown key{_did_you_mean(name)}")
        try:
            out[name] = (setting.kind.check(value), line)
        except Exception as exc:  # a check's ValueError, or a rule's ConfigError
            raise ProjectFileError(f"{where}: {name}: {exc}") from None
    return out


def _kind_of(value: Any) -> str:
    """A TOML value's type in TOML's words (``3`` is an integer)."""
    kinds = ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string"),
             (list, "an array"))
    return next((word for t, word in kinds if isinstance(value, t)), "a date or time")


def _toml(value: Any) -> str:
    """*value* as it would be written in TOML (short)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:39] + "…"
        return '"' + shown.replace('"', '\\"') + '"'
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:39] + "…"


def _flatten(data: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and name not in SETTINGS:  # a table: name its keys
            yield from _flatten(value, f"{name}.")
        else:
            yield name, value


def _did_you_mean(name: str) -> str:
    leaf = name.rsplit(".", 1)[-1]
    same_leaf = [k for k in SETTINGS if k.rsplit(".", 1)[-1] == leaf]
    close = same_leaf or difflib.get_close_matches(name, list(SETTINGS) + list(SECTIONS), n=1)
    if close:
        return f"; did you mean {close[0]}?"
    return f"; valid keys: {', '.join(sorted(SETTINGS))}"


# Greedy classes and no nested repeats: a long line inside a multi-line string stays linear.
_TABLE = re.compile(r"\s*\[([^\[\]]+)\]\s*(?:#.*)?$")
_KEY = re.compile(r"([A-Za-z0-9_\-.\"' \t]+)=")


class _KeyLines:
    """Finds the line a dotted key is set on (tomllib does not say): table headers and
    ``key =`` lines, good for the files people write; 0 when not found."""

    def __init__(self, text: str) -> None:
        self._lines: dict[str, int] = {}
        table = ""
        for number, line in enumerate(text.split("\n"), start=1):
            if m := _TABLE.match(line):
                table = _unquote(m[1])
                self._lines.setdefault(table, number)
            elif m := _KEY.match(line):
                key = _unquote(m[1])
                self._lines.setdefault(f"{table}.{key}" if table else key, number)

    def find(self, name: str) -> int:
        while name:
            if name in self._lines:
                return self._lines[name]
            # A setting that is tables of its own ([rate_limits.NAME]): its first table.
            below = [n for key, n in self._lines.items() if key.startswith(f"{name}.")]
            if below:
                return min(below)
            name = name.rpartition(".")[0]
        return 0


def _unquote(key: str) -> str:
    return ".".join(part.strip().strip("\"'") for part in key.split("."))
