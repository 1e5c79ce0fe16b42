"""The one table of settings: every option of a run, defined once (docs/configuration.md).

Each :class:`Setting` row says, for one setting: its dotted name (the key in a settings file:
``limits.max_turns`` is ``max_turns`` under ``[limits]``, and the attribute path in the
command line's run options), its command-line flag, the :func:`~runtime.open_runtime` parameter
it reaches, its kind (which checks a value from a file and parses one from a flag), its
default, its help and documentation, and its trust: whether a change of its value *loosens*
what a run may do (:func:`loosens`). What reads settings is generated from the table or
checked against it by a test:

- the command line's options (``runtime/cli/_options.py`` adds one argparse option a row);
- settings files (``runtime/project/_settings.py`` checks each key with its row's kind);
- ``trio-agents config`` (the rows a file may set, their values and sources);
- the run options the command line builds (their attribute paths are the rows' names);
- ``Limits``' defaults (``runtime/core/_limits.py`` reads them from here);
- the option tables of docs/configuration.md (generated: :func:`markdown_table`) and
  docs/cli.md (checked: every flag there is a row's and every row's flag is there).

This module is imported for ``--help``: the standard library only, nothing at import time but
the table.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

PROVIDERS: Final = ("openai", "anthropic", "scripted")
PERMISSION_MODES: Final = ("ask", "auto-edit", "allow-all", "deny")
"""The permission modes, narrowest last but one: ``deny`` < ``ask`` < ``auto-edit`` <
``allow-all`` is their order of trust (:data:`MODE_ORDER`)."""
MODE_ORDER: Final = ("deny", "ask", "auto-edit", "allow-all")
RAY_STRATEGIES: Final = ("spread", "pack")
MAX_FPS: Final = 60.0


# -- kinds: what a value may be ------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """What values a setting takes: one check for a value read from a file (any TOML value) and
    one parse for a flag's text, both raising ``ValueError`` with a message that names the
    problem (the callers add the file, line and key, or the flag).

    Attributes:
        name: the kind in words, for the docs.
        check: a file's value → the setting's value.
        parse: a flag's text → the setting's value (``None``: the text as is; a switch's
            value is its row's ``flag_value``).
        metavar: the flag's argument in ``--help``.
        choices: the values a flag may take (argparse lists them).
    """

    name: str
    check: Callable[[Any], Any]
    parse: Callable[[str], Any] | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float)


def _check_choice(values: tuple[str, ...]) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value not in values:
            raise ValueError(f"expected one of {', '.join(values)}; got {value!r}")
        return value

    return check


def choice(*values: str) -> Kind:
    """One of *values* (a flag lists them as its choices)."""
    return Kind(f"one of {', '.join(values)}", _check_choice(values), choices=values)


def _check_string(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty string; got {value!r}")
    return value


def _check_boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false; got {value!r}")
    return value


def _check_positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"expected a whole number >= 1; got {value!r}")
    return value


def _parse_positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise ValueError(f"expected a whole number >= 1, got {value}")
    return value


def _check_seconds(value: Any) -> float:
    if not _is_number(value) or not 0 < value < 1e12:
        raise ValueError(f"expected a number > 0; got {value!r}")
    return float(value)


def _parse_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == math.inf:
        raise ValueError(f"expected a number of seconds > 0, got {text}")
    return value


def _check_fps(value: Any) -> float:
    if not _is_number(value) or not 0 < value <= MAX_FPS:
        raise ValueError(f"expected a number of frames a second above 0, at most 60; got {value!r}")
    return float(value)


def _parse_fps(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected frames a second, got {text!r}") from None
    if not 0 < value <= MAX_FPS:
        raise ValueError(f"expected a number above 0, at most 60; got {text}")
    return value


def _check_strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"expected a list of strings; got {value!r}")
    return tuple(value)


def _check_rules(value: Any) -> tuple[str, ...]:
    from ._permissions import parse_rule  # only when a file has rules

    out = _check_strings(value)
    for rule in out:
        parse_rule(rule)  # ConfigError → reported like a ValueError by the loader
    return out


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_env_names(value: Any) -> tuple[str, ...]:
    out = _check_strings(value)
    for name in out:
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"expected environment variable names; got {name!r}")
    return out


def _parse_env_name(text: str) -> str:
    return _check_env_names([text])[0]


def _check_fraction(value: Any) -> float:
    """A share of something: ``0.8`` or ``"80%"``."""
    if isinstance(value, str) and value.endswith("%"):
        try:
            value = float(value[:-1]) / 100
        except ValueError:
            raise ValueError(f'expected a fraction such as 0.8 or "80%"; got {value!r}') from None
    if not _is_number(value) or not 0 < value < 1:
        raise ValueError(f'expected a fraction such as 0.8 or "80%"; got {value!r}')
    return float(value)


def _parse_percent(text: str) -> float:
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise ValueError(f"expected a percentage, got {text!r}") from None
    if not 1 <= value <= 100:
        raise ValueError(f"expected a percentage from 1 to 100, got {text}")
    return value / 100


def _check_dollars(value: Any) -> float:
    if not _is_number(value) or not 0 < value < 1e12:
        raise ValueError(f"expected a number of dollars > 0; got {value!r}")
    return float(value)


def _parse_dollars(text: str) -> float:
    try:
        value = float(text.strip().removeprefix("$"))
    except ValueError:
        raise ValueError(f"expected a number of dollars, got {text!r}") from None
    if not 0 < value < 1e12:
        raise ValueError(f"expected a number of dollars > 0, got {text}")
    return value


def _check_prices(value: Any) -> tuple[tuple[str, tuple[tuple[str, float], ...]], ...]:
    """``[prices."MODEL"]`` tables as ``((model, ((key, price), …)), …)``: a tuple, so a
    later file's rows add to an earlier one's (``merge="append"``; the last row of a model
    wins, ``runtime/core/_prices.py``)."""
    from ._prices import check_prices  # only when a file has prices

    try:
        check_prices(value, where="prices")
    except Exception as exc:  # ConfigError, worded as a check's ValueError
        raise ValueError(str(exc).removeprefix("prices").lstrip(".: ")) from None
    return tuple(
        (model, tuple((key, float(price)) for key, price in row.items()))
        for model, row in value.items()
    )


RATE_LIMIT_KEYS: Final = ("rpm", "tpm", "max_concurrent", "probe_first", "min_concurrent",
                          "min_rpm")
_WHOLE_KEYS: Final = ("max_concurrent", "min_concurrent")
_ENDPOINT = re.compile(r"https?://[^/\s]+\S*")


def check_rate_limit_table(value: Any) -> dict[str, dict[str, float]]:
    """``[rate_limits.NAME]`` tables (docs/rate-limits.md): NAME is ``openai``, ``anthropic``
    or a base URL; each table has ``rpm``, ``tpm`` and ``min_rpm`` (numbers above 0),
    ``max_concurrent`` and ``min_concurrent`` (whole numbers above 0, the floor not above the
    ceiling) and ``probe_first`` (true or false). The one check of the setting, for files and
    ``open_runtime``.

    Raises:
        ValueError: naming ``NAME.KEY`` at fault.
    """
    if not isinstance(value, Mapping):
        raise ValueError(f"expected tables [rate_limits.NAME]; got {value!r}")
    out: dict[str, dict[str, float]] = {}
    for name, table in value.items():
        if not isinstance(name, str) or not (
            name in ("openai", "anthropic") or _ENDPOINT.fullmatch(name)
        ):
            raise ValueError(f"{name!r}: an endpoint is openai, anthropic or a base URL "
                             "(http(s)://…)")
        if not isinstance(table, Mapping):
            raise ValueError(f"{name}: expected a table of {', '.join(RATE_LIMIT_KEYS)}; "
                             f"got {table!r}")
        for key, number in table.items():
            if key not in RATE_LIMIT_KEYS:
                raise ValueError(f"{name}.{key}: unknown key; the keys are "
                                 f"{', '.join(RATE_LIMIT_KEYS)}")
            if key == "probe_first":
                if not isinstance(number, bool):
                    raise ValueError(f"{name}.{key}: expected true or false; got {number!r}")
                continue
            whole = key in _WHOLE_KEYS
            if (not _is_number(number) or (whole and not isinstance(number, int))
                    or not 0 < number < math.inf):
                kind = "a whole number" if whole else "a number"
                raise ValueError(f"{name}.{key}: expected {kind} above 0; got {number!r}")
        if table.get("min_concurrent", 0) > table.get("max_concurrent", math.inf):
            raise ValueError(f"{name}.min_concurrent: above max_concurrent "
                             f"({table['min_concurrent']} > {table['max_concurrent']})")
        out[name] = dict(table)
    return out


RateLimitRows = tuple[tuple[str, tuple[tuple[str, float], ...]], ...]


def _check_rate_limits(value: Any) -> RateLimitRows:
    """``[rate_limits.NAME]`` tables as ``((name, ((key, value), …)), …)``: a tuple, so a later
    file's or flag's entries add to an earlier one's (``merge="append"``; for one endpoint, a
    later key wins: ``runtime/cli/_options.py``)."""
    checked = check_rate_limit_table(value)
    return tuple((name, tuple(table.items())) for name, table in checked.items())


def _parse_rate_limit(text: str) -> tuple[str, tuple[tuple[str, float], ...]]:
    """``--rate-limit NAME:KEY=N,…`` (``openai:rpm=500,tpm=200000``, ``openai:probe_first=true``;
    NAME may be a base URL, whose own colons stay in it): one endpoint's entry, checked as a
    file's is."""
    name, sep, pairs = text.strip().rpartition(":")
    if not sep or not name or "=" not in pairs:
        raise ValueError(f"expected NAME:KEY=N,… (openai:rpm=500,tpm=200000); got {text!r}")
    table: dict[str, float] = {}
    for pair in pairs.split(","):
        key, _, raw = (part.strip() for part in pair.partition("="))
        if raw.lower() in ("true", "false"):  # probe_first=true
            table[key] = raw.lower() == "true"
            continue
        try:
            table[key] = int(raw) if raw.lstrip("+-").isdigit() else float(raw)
        except ValueError:
            kind = "true or false" if key == "probe_first" else "a number"
            raise ValueError(f"{name}.{key}: expected {kind}; got {raw!r}") from None
    [row] = _check_rate_limits({name: table})
    return row


RATE_LIMITS: Final = Kind("tables of rpm, tpm, max_concurrent, probe_first, min_concurrent, "
                          "min_rpm by endpoint",
                          _check_rate_limits, _parse_rate_limit, "NAME:KEY=N,…")
STRING: Final = Kind("a non-empty string", _check_string)
PATH: Final = Kind("a path (relative: to the file's folder)", _check_string, metavar="DIR")
BOOLEAN: Final = Kind("true or false", _check_boolean)
POSITIVE_INT: Final = Kind("a whole number >= 1", _check_positive_int, _parse_positive_int, "N")
SECONDS: Final = Kind("a number of seconds > 0", _check_seconds, _parse_seconds, "S")
FPS: Final = Kind("frames a second, above 0, at most 60", _check_fps, _parse_fps, "N")
FRACTION: Final = Kind(
    'a fraction (0.8 or "80%"; a flag takes a percentage)', _check_fraction, _parse_percent,
    "PERCENT",
)
STRINGS: Final = Kind("a list of strings", _check_strings)
RULES: Final = Kind("a list of permission rules", _check_rules, metavar="RULE")
ENV_NAMES: Final = Kind("a list of environment variable names", _check_env_names,
                        _parse_env_name, "NAME")
DOLLARS: Final = Kind("a number of US dollars > 0", _check_dollars, _parse_dollars, "USD")
PRICES: Final = Kind('tables [prices."MODEL"] of dollars per million tokens', _check_prices)


# -- trust: which changes loosen ------------------------------------------------------------------


@dataclass(frozen=True)
class Trust:
    """How a change of a setting's value is judged: *loosening* lets a run do more than it
    could (a wider mode, an allow rule, the sandbox off), which a workspace's own settings file
    may not do for its user until the workspace is trusted
    (docs/configuration.md#trust-which-changes-loosen).

    Attributes:
        rule: ``neutral`` (no value loosens), ``any`` (every change loosens), ``on`` (turning
            it on loosens), ``off`` (turning it off loosens), ``more`` (a larger number, or
            ``None`` for no limit, loosens), ``added`` (a list: an item the old one lacks
            loosens), ``removed`` (a list: dropping an item loosens), ``order`` (a later value
            of *order* loosens).
        order: for ``order``: the values from narrowest to widest.
        unset: for ``order``: the value an unset setting (``None``) counts as.
        why: one line for the docs.
    """

    rule: Literal["neutral", "any", "on", "off", "more", "added", "removed", "order"]
    why: str
    order: tuple[str, ...] = ()
    unset: str | None = None

    def loosens(self, old: Any, new: Any) -> bool:
        """Whether changing the value *old* to *new* loosens (see the class)."""
        if self.rule == "neutral" or old == new:
            return False
        if self.rule == "any":
            return True
        if self.rule == "on":
            return bool(new) and not old
        if self.rule == "off":
            return bool(old) and not new
        if self.rule == "more":
            return new is None or (old is not None and new > old)
        if self.rule == "added":
            return bool(set(new or ()) - set(old or ()))
        if self.rule == "removed":
            return bool(set(old or ()) - set(new or ()))
        # "order": unset counts as *unset*; a value not in the order is the widest there is.
        rank: dict[Any, int] = {v: i for i, v in enumerate(self.order)}
        widest = len(rank)
        old_rank = rank.get(self.unset if old is None else old, widest)
        new_rank = rank.get(self.unset if new is None else new, widest)
        return new_rank > old_rank


NEUTRAL: Final = Trust("neutral", "changes what a run does, not what it may do")
MORE_LOOSENS: Final = Trust("more", "a larger limit lets a run spend more")
ANY_LOOSENS: Final = Trust("any", "decides where data or code comes from or goes")


FAN_OUT_CEILING: Final = 10_000
"""The largest default of ``limits.max_parallel`` and of an endpoint's connections."""


def fan_out_default() -> int:
    """The default bound of sub-agents running at once (``limits.max_parallel``) and of an
    endpoint's connections (``PoolLimits.max_connections``): what this process's open-files
    limit (``ulimit -n``, the soft limit) leaves once 256 are set aside for what a run opens
    besides (trace, pipes of tools and hooks, MCP servers; half the limit under 512), at most
    :data:`FAN_OUT_CEILING` and at least 8. A fan-out of N up to it starts N at once, each
    sub-agent's model call on a connection of its own, without running out of file
    descriptors (docs/configuration.md, "Concurrency and the connection pool")."""
    if sys.platform == "win32":  # no RLIMIT_NOFILE; sockets are not bound by the CRT's limit
        return FAN_OUT_CEILING
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft < 0:
        return FAN_OUT_CEILING
    room = soft - 256 if soft >= 512 else soft // 2
    return max(8, min(FAN_OUT_CEILING, room))


_FAN_OUT: Final = fan_out_default()
_FAN_OUT_DOC: Final = "the open-files limit (`ulimit -n`) less 256, at most 10,000"


# -- the table ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One row of the table (see the module docstring).

    Attributes:
        name: the dotted name: the settings-file key (``[limits] max_turns``) and the attribute
            path in the command line's run options (``opts.limits.max_turns``).
        kind: its values (:class:`Kind`).
        help: its ``--help`` line (with the default, where it has one).
        trust: whether a change loosens (:class:`Trust`); every row must say.
        default: its value when nothing sets it (``None``: the run decides, see *doc*).
        flags: its command-line flags (``()``: files only).
        flag_value: for a switch, the value its flag sets (``--no-mcp`` sets ``False``);
            ``None`` for a flag that takes a value.
        param: the :func:`~runtime.open_runtime` parameter it reaches (``limits`` for every
            ``limits.*``), ``None`` for the command line's own options.
        in_file: settings files may set it (else it is a command-line option only).
        merge: ``replace`` (the nearest layer wins) or ``append`` (lists add up).
        is_path: a relative value (or each of a list) is taken from the file's folder.
        group: the ``--help`` group its flag is listed in.
        doc: the docs' description (default: *help*).
        default_doc: the default in the docs' words (default: *default* as written).
        demo_help: ``demo``'s help for the flag, where its default differs there; ``""``:
            ``demo`` does not take the flag.
        demo_default: ``demo``'s default, where it differs (its own fresh workspace).
        event_key: where ``run_started.config`` (docs/events.md) records the value, as a dotted
            path (``replay`` takes what the user did not give from there).
        exclusive: flags of rows with the same word are mutually exclusive.
    """

    name: str
    kind: Kind
    help: str
    trust: Trust
    default: Any = None
    flags: tuple[str, ...] = ()
    flag_value: bool | None = None
    param: str | None = None
    in_file: bool = True
    merge: Literal["replace", "append"] = "replace"
    is_path: bool = False
    group: str = "run"
    doc: str = ""
    default_doc: str = ""
    demo_help: str | None = None
    demo_default: Any = None
    event_key: str | None = None
    exclusive: str = ""
    metavar: str | None = field(default=None)

    @property
    def flag(self) -> str | None:
        """Its long flag, if it has one (``--max-turns``)."""
        return next((f for f in self.flags if f.startswith("--")), None)

    @property
    def check(self) -> Callable[[Any], Any]:
        """Its kind's check of a value from a file."""
        return self.kind.check

    @property
    def section(self) -> str:
        """The ``[table]`` it is under in a file (``""`` for a top-level key)."""
        return self.name.rpartition(".")[0]

    @property
    def leaf(self) -> str:
        return self.name.rpartition(".")[2]

    @property
    def dest(self) -> str:
        """The argparse destination of its flag (``--max-turns`` → ``max_turns``)."""
        long = next((f for f in self.flags if f.startswith("--")), self.flags[0])
        return long.removeprefix("--").replace("-", "_")


_S = Setting
_MCP_ON: Final = Trust("on", "turning it on starts the servers of the workspace's .mcp.json")

TABLE: Final[tuple[Setting, ...]] = (
    # model
    _S("provider", choice(*PROVIDERS), "the model provider (default: scripted with --scenario, "
       "else openai)", ANY_LOOSENS, flags=("--provider",), param="provider", group="model",
       doc="`openai`, `anthropic` or `scripted` (ignored with `--scenario`)",
       default_doc="`openai`", demo_help=""),
    _S("model", STRING, "the model name to ask the provider for", NEUTRAL, flags=("--model",),
       param="model", group="model", doc="the model name", default_doc="the provider's default",
       demo_help="", metavar="MODEL"),
    _S("scenario", STRING, "a scripted-provider scenario (JSON); implies --provider scripted",
       ANY_LOOSENS, flags=("--scenario",), param="scenario", in_file=False, group="model",
       demo_help="play this scenario (JSON) instead of the built-in one", metavar="FILE"),
    _S("agents", STRING, "agent types to add (TOML, [agents.NAME])", ANY_LOOSENS,
       flags=("--agents",), param="agent_types", in_file=False, group="model", metavar="FILE"),
    # run
    _S("workspace", STRING, "the folder the tools work in (default: this folder)", ANY_LOOSENS,
       flags=("--workspace",), param="workspace", in_file=False, metavar="DIR",
       demo_help="the folder the tools work in (default: a fresh temporary project)"),
    _S("trace.path", STRING, "write the trace (JSONL) here (default: a new file under "
       ".trio-agents/traces/)", NEUTRAL, flags=("--trace",), param="trace", in_file=False,
       exclusive="trace", metavar="FILE"),
    _S("trace.force", BOOLEAN, "replace the file --trace names when it holds a trace already "
       "(refused without); replay: also run the recording's writes for real in a workspace that "
       "is not a git repository or a temporary folder", NEUTRAL, default=False,
       flags=("--force",), flag_value=True, in_file=False),
    _S("trace.enabled", BOOLEAN, "write no trace file", Trust("off", "the trace is the run's "
       "record"), default=True, flags=("--no-trace",), flag_value=False, param="trace",
       exclusive="trace", doc="write a trace file for each run"),
    _S("otlp", STRING, "send OpenTelemetry spans live to this OTLP/HTTP collector (e.g. "
       "http://localhost:4318; default: OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT); needs "
       "trio-agents[otel] (docs/observability.md)", ANY_LOOSENS, flags=("--otlp",),
       param="otlp", in_file=False, metavar="URL"),
    _S("json", BOOLEAN, "print every event as a JSON line on stdout, and nothing else there",
       NEUTRAL, default=False, flags=("--json",), flag_value=True, param="json_out",
       in_file=False),
    _S("limits.max_turns", POSITIVE_INT, "model turns per agent (default: 50)", MORE_LOOSENS,
       default=50, flags=("--max-turns",), param="limits",
       event_key="limits.max_turns", doc="model turns per agent"),
    _S("limits.max_depth", POSITIVE_INT, "how deep sub-agents may nest: 1 lets only the main "
       "agent start them, 2 lets those start their own, and so on (default: 4)", MORE_LOOSENS,
       default=4, flags=("--max-depth",), param="limits",
       event_key="limits.max_depth", doc="deepest sub-agent (the root is 0)"),
    _S("limits.max_parallel", POSITIVE_INT,
       f"sub-agents running at once in the whole run (default: {_FAN_OUT}, from the "
       "open-files limit: ulimit -n less 256, at most 10,000)", MORE_LOOSENS,
       default=_FAN_OUT, default_doc=_FAN_OUT_DOC,
       flags=("--max-parallel",), param="limits",
       event_key="limits.max_parallel", doc="sub-agents running at once"),
    _S("limits.max_agents", POSITIVE_INT, "sub-agents started in one run", MORE_LOOSENS,
       default=100_000, param="limits",
       event_key="limits.max_agents"),
    _S("limits.max_tool_output_chars", POSITIVE_INT, "a longer tool result is cut",
       MORE_LOOSENS, default=30_000, param="limits",
       event_key="limits.max_tool_output_chars"),
    _S("limits.context_window", POSITIVE_INT, "every agent's context window in tokens "
       "(default: known from the model's name)", NEUTRAL, flags=("--context-window",),
       param="limits",
       event_key="limits.context_window",
       doc="every agent's context window in tokens (`docs/context.md`)",
       default_doc="known from the model"),
    _S("limits.compact_threshold", FRACTION, "compact an agent's history once it fills this "
       "much of the window (default: 80)", NEUTRAL, default=0.8, flags=("--compact-threshold",),
       param="limits", event_key="limits.compact_threshold",
       doc='the share of the window at which an agent compacts (`0.8` or `"80%"`)',
       default_doc="0.8 (`--compact-threshold 80`)"),
    _S("control", STRING, "serve a control socket (JSON lines: cancel, permission, message) at "
       "this path", NEUTRAL, flags=("--control",), in_file=False, metavar="SOCK"),
    _S("ray.address", STRING, "the Ray cluster for agent types placed on ray: host:port, or "
       "auto for the cluster this machine is a node of (default RAY_ADDRESS, else a private "
       "local cluster started for the run)", ANY_LOOSENS, flags=("--ray-address",),
       param="ray_address", in_file=False, metavar="ADDR"),
    _S("ray.hosts_per_node", POSITIVE_INT,
       "Ray host actors (worker processes) per node (default 1)", NEUTRAL,
       flags=("--ray-hosts-per-node",), param="ray", in_file=False, default_doc="1"),
    _S("ray.cpus_per_host", POSITIVE_INT, "instead: one Ray host actor per N CPUs of a node",
       NEUTRAL, flags=("--ray-cpus-per-host",), param="ray", in_file=False),
    _S("ray.strategy", choice(*RAY_STRATEGIES), "spread: hosts on every node with CPUs "
       "(default); pack: on one node", NEUTRAL, flags=("--ray-strategy",), param="ray",
       in_file=False),
    _S("view.fps", FPS, "the most frames a second the live tree is redrawn on a terminal "
       "(default: 12)",
       NEUTRAL, default=12.0, flags=("--fps",),
       doc="the most frames a second the live tree is redrawn on a terminal "
       "(`docs/cli.md#run`)"),
    _S("debug", BOOLEAN, "debug logs and tracebacks on stderr", NEUTRAL, default=False,
       flags=("--debug",), flag_value=True, in_file=False),
    _S("verbose", BOOLEAN, "warnings on stderr too (retries, a sink that stopped writing); "
       "default: only the one-line outcome", NEUTRAL, default=False, flags=("-v", "--verbose"),
       flag_value=True, in_file=False),
    # permissions
    _S("permissions.mode", choice(*PERMISSION_MODES), "default: ask when stdin and stdout are "
       "terminals, else deny", Trust("order", "a wider mode runs more without asking",
                                     MODE_ORDER, unset="ask"), flags=("--permission-mode",),
       param="permission_mode", group="permissions",
       doc="`ask`, `auto-edit`, `allow-all`, `deny`",
       default_doc="`ask` on a terminal, else `deny`",
       demo_help="allow-all in the demo's own workspace", demo_default="allow-all",
       event_key="permission_mode"),
    _S("permissions.allow", RULES, "allow calls matching RULE without asking, e.g. "
       "'bash(git status*)' (repeatable)", Trust("added", "an allow rule runs calls unasked"),
       default=(), flags=("--allow",), param="allow", merge="append", group="permissions",
       event_key="permission_rules.allow",
       doc="rules of calls allowed without asking", default_doc="none"),
    _S("permissions.deny", RULES, "refuse calls matching RULE, e.g. 'bash(rm *)' (repeatable)",
       Trust("removed", "a deny rule refuses calls"), default=(), flags=("--deny",),
       param="deny", merge="append", event_key="permission_rules.deny", group="permissions",
       doc="rules of calls always refused", default_doc="none"),
    _S("permissions.allow_env", ENV_NAMES, "let the tools see the environment variable NAME "
       "although it looks secret, e.g. GH_TOKEN for gh; its value is still masked in every "
       "event (repeatable)", Trust("added", "a tool may read that secret"), default=(),
       flags=("--allow-env",), param="allow_env", merge="append", group="permissions",
       doc="secret-looking environment variables the tools may see all the same (names; their "
       "values stay masked in events)", default_doc="none"),
    _S("permissions.timeout_s", SECONDS, "how long a permission question waits for an answer "
       "(default: 300)",
       NEUTRAL, default=300.0, flags=("--permission-timeout",), param="permission_timeout_s",
       group="permissions", doc="seconds a permission question waits", default_doc="300"),
    # sandbox
    _S("sandbox.enabled", BOOLEAN, "run every bash call under bubblewrap (bwrap): the "
       "workspace read-write, a private /tmp, the rest read-only, ~/.ssh, ~/.aws and other "
       "secrets folders hidden, no network", Trust("off", "the sandbox is the boundary"),
       default=False, flags=("--sandbox",), flag_value=True, param="sandbox", group="sandbox",
       doc="run every `bash` call under bubblewrap (`docs/cli.md`)"),
    _S("sandbox.network", BOOLEAN, "with --sandbox (implied): let sandboxed commands use the "
       "network", Trust("on", "the network lets data out"), default=False,
       flags=("--sandbox-network",), flag_value=True, param="sandbox", group="sandbox",
       doc="let sandboxed commands use the network (implies the sandbox)"),
    # MCP servers
    _S("mcp.config", STRINGS, "MCP servers to add, in .mcp.json format; later files win "
       "(repeatable; the workspace's .mcp.json is read first)",
       Trust("added", "a config file's servers are commands that run"), default=(),
       flags=("--mcp-config",), param="mcp_servers", merge="append", is_path=True,
       group="mcp", doc="more MCP config files beside the workspace's `.mcp.json` "
       "(`docs/mcp.md`); they add up", default_doc="none", metavar="FILE"),
    _S("mcp.enabled", BOOLEAN, "start no MCP server at all", _MCP_ON, default=True,
       flags=("--no-mcp",), flag_value=False, param="mcp_servers", group="mcp",
       doc="start the configured MCP servers (`false` is `--no-mcp`)"),
    _S("mcp.project_servers", STRINGS, "the servers of an untrusted workspace's .mcp.json that "
       "may start all the same, by name (Claude Code's enabledMcpjsonServers)",
       Trust("added", "a listed project server starts, a command the repository chose"),
       default=(), merge="append", group="mcp",
       doc="servers of an untrusted workspace's `.mcp.json` approved one by one, by name "
       "(`docs/configuration.md#trust`)", default_doc="none"),
    _S("mcp.start_timeout_s", SECONDS, "how long each MCP server may take to start (default: "
       "30)",
       NEUTRAL, flags=("--mcp-start-timeout",), param="mcp_servers", in_file=False,
       group="mcp", default_doc="30"),
    # files only (but rate_limits: also --rate-limit)
    _S("rate_limits", RATE_LIMITS, "an endpoint's rate limits, shared by every agent of the "
       "run: openai, anthropic or a base URL, then rpm, tpm, max_concurrent, probe_first, "
       "min_concurrent, min_rpm (--rate-limit openai:rpm=500,tpm=200000; repeatable)", NEUTRAL,
       param="rate_limits",
       default=(), flags=("--rate-limit",), merge="append",
       doc="`[rate_limits.NAME]` (`openai`, `anthropic` or a base URL): `rpm`, `tpm`, "
       "`max_concurrent`, `probe_first` (send the first call alone until its reply's headers "
       "say the limits; default false), `min_concurrent`, `min_rpm` (the floors of the pace "
       "learned from refusals; default 1 and 60) (`docs/rate-limits.md`); on the command line "
       "`--rate-limit "
       "NAME:KEY=N,…`, repeatable; entries add up, a later key of an endpoint wins; the "
       "servers' headers are read as well",
       default_doc="none: learned from the servers"),
    _S("trace.dir", PATH, "the folder of new trace files", ANY_LOOSENS,
       default=".trio-agents/traces", param="trace_dir", is_path=True,
       default_doc="`.trio-agents/traces` (in the current folder)"),
    # money (docs/costs.md)
    _S("limits.max_usd", DOLLARS, "US dollars each root agent's subtree may spend on model "
       "calls; a call that would pass it is refused and the subtree ends budget_exceeded",
       MORE_LOOSENS, flags=("--max-usd",), param="limits", event_key="limits.max_usd",
       doc="US dollars the run's root agent (with its sub-agents) may spend on model calls "
       "(`docs/costs.md`)", default_doc="none"),
    _S("prices", PRICES, "model prices over the built-in table", Trust(
       "added", "a lower price lets a money budget buy more"), default=(), param="prices",
       merge="append", event_key="prices",
       doc='`[prices."MODEL"]`: `input_per_mtok`, `output_per_mtok`, `cache_read_per_mtok`, '
       "`cache_write_per_mtok` in dollars per million tokens, over the built-in table "
       "(`docs/costs.md`)", default_doc="the built-in table"),
)
"""Every setting, in ``--help`` order within its group; see :class:`Setting`."""

SCHEMA: Final[Mapping[str, Setting]] = {s.name: s for s in TABLE}
"""The rows by name."""

GROUPS: Final = {
    "model": ("model", None),
    "run": ("run", None),
    "permissions": ("permissions", None),
    "sandbox": (
        "sandbox",
        "bash is NOT confined by default: it runs as you, with your rights (files, network, "
        "keys); permission rules such as 'bash(rm *)' match the command's text only, a "
        "convenience, not a boundary. --sandbox is the boundary.",
    ),
    "mcp": ("MCP servers", None),
}
"""``--help`` groups: their title and description, in order."""


def _file_rank(setting: Setting) -> tuple[int, int]:
    sections = ("", "permissions", "limits", "mcp", "sandbox", "trace", "view")
    return sections.index(setting.section), TABLE.index(setting)


FILE_SETTINGS: Final[Mapping[str, Setting]] = {
    s.name: s for s in sorted((s for s in TABLE if s.in_file), key=_file_rank)
}
"""The rows a settings file may set, in the order ``trio-agents config`` lists them."""

SECTIONS: Final = frozenset(s.section for s in FILE_SETTINGS.values() if s.section)
"""The ``[tables]`` of a settings file."""


def loosens(name: str, old: Any, new: Any) -> bool:
    """Whether changing setting *name* from *old* to *new* loosens what a run may do.

    ``permissions.mode`` from ``ask`` to ``allow-all`` loosens, to ``deny`` does not;
    ``sandbox.enabled`` from true to false loosens; adding an allow rule loosens, adding a deny
    rule does not (docs/configuration.md#trust-which-changes-loosen).

    Raises:
        KeyError: *name* is not a setting.
    """
    return SCHEMA[name].trust.loosens(old, new)


def rows_of_param(param: str) -> Iterator[Setting]:
    """The rows that reach :func:`~runtime.open_runtime`'s parameter *param*."""
    return (s for s in TABLE if s.param == param)


def markdown_table() -> str:
    """docs/configuration.md's table of the settings a file may set (a test keeps it equal)."""
    lines = [
        "| key | value | flag | default | what loosens it (trust) |",
        "|---|---|---|---|---|",
    ]
    for s in FILE_SETTINGS.values():
        flag = ", ".join(f"`{f}`" for f in s.flags)
        default = s.default_doc or (
            "none" if s.default in ((), None) else str(s.default).lower()
            if isinstance(s.default, bool) else f"{s.default:g}"
            if isinstance(s.default, float) else str(s.default)
        )
        trust = _TRUST_WORDS[s.trust.rule]
        lines.append(f"| `{s.name}` | {s.doc or s.help} | {flag} | {default} | {trust} |")
    return "\n".join(lines)


_TRUST_WORDS: Final = {
    "neutral": "nothing",
    "any": "any change",
    "on": "turning it on",
    "off": "turning it off",
    "more": "a larger value",
    "added": "an added entry",
    "removed": "a removed entry",
    "order": "a wider mode (deny < ask < auto-edit < allow-all)",
}
