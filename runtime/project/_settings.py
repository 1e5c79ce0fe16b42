"""Settings: ``.trio-agents/settings.toml`` in the workspace and in the user's config folder.

Precedence, per key: command-line flags, then the workspace's file, then the user's file,
then the defaults. Rule lists (``permissions.allow``, ``permissions.deny``) add up instead:
the user's rules, then the workspace's, then the flags'.

The schema is :data:`SETTINGS`, one :class:`Setting` a key; adding a key is one line there
(and its documentation in ``docs/configuration.md``)::

    Setting("limits.max_turns", positive_int, "model turns per agent", flag="--max-turns"),

A file with a key that does not exist, or a value of the wrong kind, is refused with the file,
the line and the key (and, for an unknown key, the closest valid one).
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

from ._files import ProjectFileError, read_text_capped, user_config_dir

SETTINGS_FILE = Path(".trio-agents") / "settings.toml"
MAX_SETTINGS_BYTES = 256 * 1024

Check = Callable[[Any], Any]
"""Validates a value read from a file; returns it (converted) or raises ``ValueError``."""


def choice(*values: str) -> Check:
    def check(value: Any) -> Any:
        if value not in values:
            raise ValueError(f"expected one of {', '.join(values)}; got {value!r}")
        return value

    return check


def string(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty string; got {value!r}")
    return value


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false; got {value!r}")
    return value


def positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"expected a whole number >= 1; got {value!r}")
    return value


def positive_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e12:
        raise ValueError(f"expected a number > 0; got {value!r}")
    return float(value)


def fps(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 60:
        raise ValueError(f"expected a number of frames a second above 0, at most 60; got {value!r}")
    return float(value)


def strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"expected a list of strings; got {value!r}")
    return tuple(value)


def rules(value: Any) -> tuple[str, ...]:
    from runtime.core._permissions import parse_rule

    out = strings(value)
    for rule in out:
        parse_rule(rule)  # ConfigError → reported like a ValueError by the loader
    return out


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_names(value: Any) -> tuple[str, ...]:
    out = strings(value)
    for name in out:
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"expected environment variable names; got {name!r}")
    return out


def path(value: Any) -> str:
    return string(value)


def fraction(value: Any) -> float:
    """A share of something: ``0.8`` or ``"80%"``."""
    if isinstance(value, str) and value.endswith("%"):
        try:
            value = float(value[:-1]) / 100
        except ValueError:
            raise ValueError(f"expected a fraction such as 0.8 or \"80%\"; got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise ValueError(f"expected a fraction such as 0.8 or \"80%\"; got {value!r}")
    return float(value)


@attrs.frozen
class Setting:
    """One key of the settings schema.

    Attributes:
        name: the dotted key (``limits.max_turns`` is ``max_turns`` in the ``[limits]`` table).
        check: validates a value from a file (see :data:`Check`).
        doc: one line for ``trio-agents config`` and the docs.
        flag: the command-line flag that overrides it, if any.
        default: the value when nothing sets it (``None``: the runtime's own default).
        merge: ``replace`` (the nearest layer wins) or ``append`` (lists add up).
        is_path: a relative value (or each value of a list) is taken from the folder the file
            belongs to.
    """

    name: str
    check: Check
    doc: str
    flag: str | None = None
    default: Any = None
    merge: Literal["replace", "append"] = "replace"
    is_path: bool = False


PROVIDERS = ("openai", "anthropic", "scripted")
PERMISSION_MODES = ("ask", "auto-edit", "allow-all", "deny")

SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in [
        Setting("provider", choice(*PROVIDERS), "the model provider", flag="--provider"),
        Setting("model", string, "the model name to ask the provider for", flag="--model"),
        Setting("permissions.mode", choice(*PERMISSION_MODES),
                "ask, auto-edit, allow-all or deny (default: ask on a terminal, else deny)",
                flag="--permission-mode"),
        Setting("permissions.allow", rules, "rules of calls allowed without asking",
                flag="--allow", default=(), merge="append"),
        Setting("permissions.deny", rules, "rules of calls always refused",
                flag="--deny", default=(), merge="append"),
        Setting("permissions.allow_env", env_names,
                "secret-looking environment variables the tools may see all the same",
                flag="--allow-env", default=(), merge="append"),
        Setting("permissions.timeout_s", positive_float,
                "how long a permission question waits", flag="--permission-timeout",
                default=300.0),
        Setting("limits.max_turns", positive_int, "model turns per agent", flag="--max-turns",
                default=50),
        Setting("limits.max_depth", positive_int, "deepest sub-agent (the root is 0)",
                flag="--max-depth", default=4),
        Setting("limits.max_parallel", positive_int, "sub-agents running at once",
                flag="--max-parallel", default=1000),
        Setting("limits.max_agents", positive_int, "sub-agents started in one run",
                default=100_000),
        Setting("limits.max_tool_output_chars", positive_int,
                "a longer tool result is cut", default=30_000),
        Setting("limits.context_window", positive_int,
                "every agent's context window in tokens (default: known from the model)",
                flag="--context-window"),
        Setting("limits.compact_threshold", fraction,
                "the share of the window at which an agent compacts its history",
                flag="--compact-threshold", default=0.8),
        Setting("mcp.config", strings,
                "more MCP config files, beside the workspace's .mcp.json (docs/mcp.md)",
                flag="--mcp-config", default=(), merge="append", is_path=True),
        Setting("mcp.enabled", boolean, "start the MCP servers of .mcp.json and mcp.config",
                flag="--no-mcp", default=True),
        Setting("sandbox.enabled", boolean, "run every bash call under bubblewrap",
                flag="--sandbox", default=False),
        Setting("sandbox.network", boolean, "let sandboxed commands use the network",
                flag="--sandbox-network", default=False),
        Setting("trace.enabled", boolean, "write a trace file for each run", flag="--no-trace",
                default=True),
        Setting("trace.dir", path, "the folder of new trace files",
                default=".trio-agents/traces", is_path=True),
        Setting("view.fps", fps, "the most frames a second the live tree is redrawn",
                flag="--fps", default=12.0),
    ]
}
"""The settings schema, by dotted name."""

SECTIONS = frozenset(name.rsplit(".", 1)[0] for name in SETTINGS if "." in name)


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
    workspace: Path,
    *,
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """The effective settings for *workspace*.

    Args:
        flags: values given on the command line, by setting name (``None`` values are skipped).
        env: for ``XDG_CONFIG_HOME`` / ``HOME`` (default ``os.environ``).

    Raises:
        ProjectFileError: a settings file that is not TOML, or has an unknown key or a bad
            value: one line naming the file, the line and the key.
    """
    values: dict[str, Value] = {
        name: Value(s.default, "default") for name, s in SETTINGS.items()
    }
    files = []
    for scope, file, base in settings_paths(workspace, env):
        if not file.is_file():
            continue
        files.append(file)
        for name, (value, line) in read_settings_file(file).items():
            setting = SETTINGS[name]
            if setting.is_path and isinstance(value, tuple):
                value = tuple(str((base / Path(v).expanduser()).resolve()) for v in value)
            elif setting.is_path:
                value = str((base / Path(value).expanduser()).resolve())
            _layer(values, setting, value, f"{scope} {file}:{line}")
    for name, value in (flags or {}).items():
        if value is None or (SETTINGS[name].merge == "append" and not value):
            continue
        _layer(values, SETTINGS[name], value, f"flag {SETTINGS[name].flag}")
    return Settings(values, tuple(files))


def _layer(values: dict[str, Value], setting: Setting, value: Any, source: str) -> None:
    old = values[setting.name]
    if setting.merge == "append" and old.source != "default":
        values[setting.name] = Value((*old.value, *value), f"{old.source}; {source}")
    else:
        values[setting.name] = Value(tuple(value) if setting.merge == "append" else value, source)


def read_settings_file(file: Path) -> dict[str, tuple[Any, int]]:
    """The checked values of one settings file, by dotted name, with their line numbers.

    Raises:
        ProjectFileError: see :func:`load_settings`.
    """
    content = read_text_capped(file, MAX_SETTINGS_BYTES)
    if content.truncated:
        raise ProjectFileError(f"{file}: too big (over {MAX_SETTINGS_BYTES // 1024} KiB)")
    try:
        data = tomllib.loads(content.text)
    except tomllib.TOMLDecodeError as exc:
        raise ProjectFileError(f"{file}: not valid TOML: {exc}") from None
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
                f"its keys under it ({keys})")
        if setting is None:
            raise ProjectFileError(f"{where}: {name}: unknown key{_did_you_mean(name)}")
        try:
            out[name] = (setting.check(value), line)
        except Exception as exc:  # a check's ValueError, or a rule's ConfigError
            raise ProjectFileError(f"{where}: {name}: {exc}") from None
    return out


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
            name = name.rpartition(".")[0]
        return 0


def _unquote(key: str) -> str:
    return ".".join(part.strip().strip("\"'") for part in key.split("."))
