"""Keeping secrets out of subprocesses, events and logs.

Secrets are recognised by the NAME of the environment variable that holds them: a name made of
words such as ``KEY``, ``TOKEN``, ``SECRET``, ``PASSWORD``, ``PASSWD``, ``CREDENTIAL`` or ``AUTH``
(``OPENAI_API_KEY``, ``GITHUB_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``npm_config_authToken``).

* :func:`filter_env` drops such variables from the environment given to ``bash``, unless the user
  allows them by name or pattern.
* :func:`secret_values` collects their values, and :func:`redact` masks those values in any text
  (events, traces, error messages).

Matching works on words, not substrings, so ``GIT_AUTHOR_NAME`` (the word ``AUTHOR``) and
``KEYBOARD_LAYOUT`` stay, while compound words that end in a secret word (``APIKEY``,
``AUTHTOKEN``, ``DBPASSWORD``) are caught. It errs on the side of dropping: a variable dropped by
mistake is one ``allow`` entry away, a leaked key is not recoverable. Secrets that hide in values
of innocent-looking names (``DATABASE_URL=postgres://user:pw@host``) are not detected.

One policy decides what counts as a secret (:func:`worth_masking`): a value of at least
:data:`MIN_SECRET_LEN` (3) characters that is not a flag word (``true``, ``off``...) or a number
below 1000; a variable whose name only looks secret (not ``*_TOKEN``, ``*_KEY``, ``*_SECRET``,
``*PASSWORD*``) needs 8 characters. Every secret is masked as :data:`MASK` (``***``).

A run's secrets are ONE :class:`Secrets` object (the values, the mask, the matcher that holds
back a streamed text across deltas), built once when the run opens and handed to the event bus
(the one place events are masked, so the trace, ``--json``, sessions built from events, exports
and views all see masked text), to the tools and providers (text they cut or put in an error),
to the MCP servers and to the logs: :meth:`Secrets.in_logs` adds them, while the run is open, to
what :func:`redact_log_event` (a structlog processor) and :class:`RedactingLogFilter` (stdlib
logging) mask.

:func:`seal_process_environ` keeps secrets out of reach of the commands the agents run: the
secret-looking variables leave this process's environment (``os.environ`` and the copy the
kernel shows as ``/proc/<pid>/environ``, overwritten in place) once a private copy is kept for
the providers, and the process is made non-dumpable, so a same-user process that is not root
cannot read its memory either. A root process can still read another process's memory: run
``bash`` under ``--sandbox`` (a separate PID namespace) where that matters.
"""

from __future__ import annotations

import collections
import contextlib
import fnmatch
import functools
import logging
import os
import re
import sys
from collections.abc import (
    Callable,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    MutableMapping,
    Sequence,
)
from typing import Any, Final

from runtime._logs import add_mask

__all__ = [
    "MASK",
    "MIN_SECRET_LEN",
    "NO_SECRETS",
    "RedactingLogFilter",
    "Secrets",
    "filter_env",
    "log_secrets",
    "looks_secret",
    "redact",
    "redact_known",
    "redact_log_event",
    "redact_text",
    "run_environ",
    "scan_env",
    "seal_process_environ",
    "secret_values",
    "worth_masking",
]

# Words that make a name secret when a word of the name IS one, or ENDS with one (APIKEY).
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
# Words long and distinctive enough to count anywhere inside a word (SECRETSMANAGER, AUTHTOKENS).
_SECRET_INFIXES = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
# Short words that are secrets only as a whole word (MYSQL_PWD, DB_PASS), never as a part.
_SECRET_EXACT = ("PASS", "PWD", "PAT")
# Names that would match the rules above but are well known not to hold secrets.
_NOT_SECRET = frozenset({"PWD", "OLDPWD"})
MASK: Final = "***"
"""What a secret's value becomes wherever it is masked: events, logs, exports, session files,
error lines (docs/events.md#secrets)."""
MIN_SECRET_LEN: Final = 3
"""A value shorter than this is never a secret (masking ``1`` everywhere would wreck the text
and protect nothing); flag words and numbers below 1000 are not either (:func:`worth_masking`)."""
# A name that only looks secret (``GITHUB_AUTH``, ``SSH_AUTH_SOCK``) rather than clearly is
# (below), holds one only if its value is as long as a credential is.
_LOOSE_NAME_MIN_LEN = 8
# Names whose values are secrets from MIN_SECRET_LEN on.
# OpenTelemetry's exporter headers carry the backend's API key ("Authorization=Bearer …",
# "x-honeycomb-team=…"): secret, and each header's value is masked on its own too.
_OTLP_HEADERS = re.compile(r"OTEL_EXPORTER_OTLP_(?:[A-Z]+_)?HEADERS")
_CLEARLY_SECRET = re.compile(r"(_TOKEN|_KEY|_SECRET)$|PASSWORD", re.IGNORECASE)
# Values that are switches, not secrets, whoever says they are (USE_API_KEY=true, ${DEBUG:-off}).
_FLAG_VALUES = frozenset(
    {"true", "false", "yes", "no", "on", "off", "none", "null", "nil", "unset", "empty"}
)

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NON_ALNUM = re.compile(r"[^A-Za-z0-9]+")


def looks_secret(name: str) -> bool:
    """Whether an environment variable called *name* probably holds a secret."""
    if name in _NOT_SECRET:
        return False
    if _OTLP_HEADERS.fullmatch(name):
        return True
    words = _NON_ALNUM.split(_CAMEL_BOUNDARY.sub("_", name).upper())
    return any(_secret_word(word) for word in words if word)


def _secret_word(word: str) -> bool:
    if word in _SECRET_EXACT:
        return True
    # Plural forms: KEYS, TOKENS, CREDENTIALS.
    stem = word[:-1] if word.endswith("S") else word
    if any(stem.endswith(secret) for secret in _SECRET_WORDS):
        return True
    if any(infix in word for infix in _SECRET_INFIXES):
        return True
    # AUTHZ, AUTHN, AUTHORIZATION, OAUTH... but not AUTHOR, the git identity everyone needs.
    return "AUTH" in word and ("AUTHOR" not in word or "AUTHORIZ" in word)


# The heuristics per name, remembered: an environment's names barely change in a process, and
# the word rules cost a few microseconds a name (bounded, should names churn).
_looks_secret = functools.lru_cache(maxsize=4096)(looks_secret)


def filter_env(env: Mapping[str, str], allow: Iterable[str] = ()) -> dict[str, str]:
    """A copy of *env* without the variables whose names look like secrets.

    Args:
        env: the environment to filter, usually ``os.environ``.
        allow: names or ``fnmatch`` patterns (case-sensitive, like POSIX variable names) of
            secret-looking variables to keep anyway, e.g. ``["GH_TOKEN", "AWS_*"]``.

    Returns:
        A new dict; *env* is not changed.
    """
    patterns = tuple(allow)
    return {
        name: value
        for name, value in env.items()
        if not _looks_secret(name) or _allowed(name, patterns)
    }


def _allowed(name: str, patterns: Sequence[str]) -> bool:
    return any(name == p or fnmatch.fnmatchcase(name, p) for p in patterns)


def worth_masking(value: str) -> bool:
    """Whether *value* counts as a secret when something says it is one (a provider key, an
    MCP header, a variable whose name is clearly a secret's): the one rule every masker uses.

    At least :data:`MIN_SECRET_LEN` characters, and not a flag word (``true``, ``off``...) or
    a number below 1000.
    """
    if len(value) < MIN_SECRET_LEN:
        return False
    if len(value) >= _LOOSE_NAME_MIN_LEN:
        return True
    stripped = value.strip()
    if stripped.lower() in _FLAG_VALUES:
        return False
    return not (stripped.isdigit() and int(stripped) < 1000)


def secret_values(env: Mapping[str, str]) -> list[str]:
    """The values of the secret-looking variables of *env* worth masking.

    A value counts when :func:`worth_masking` says so and either the name is clearly a
    secret's (``*_TOKEN``, ``*_KEY``, ``*_SECRET``, ``*PASSWORD*``) or the value has 8
    characters or more. The list has no duplicates and is ordered longest first.
    """
    values = {value for name, value in env.items() if _worth_redacting(name, value)}
    for name, value in env.items():
        if _OTLP_HEADERS.fullmatch(name):
            for item in value.split(","):
                header = item.partition("=")[2].strip()
                # "Bearer KEY": the key alone too (a tool may print it without its scheme).
                for v in (header, header.split(" ")[-1]):
                    if len(v) >= MIN_SECRET_LEN:
                        values.add(v)
    return sorted(values, key=lambda v: (-len(v), v))


def _worth_redacting(name: str, value: str) -> bool:
    if not _looks_secret(name) or not worth_masking(value):
        return False
    return len(value) >= _LOOSE_NAME_MIN_LEN or _CLEARLY_SECRET.search(name) is not None


# Environments scanned, newest last: (items, allow) -> (filtered env, secret values).
_SCANS: collections.OrderedDict[
    tuple[tuple[tuple[str, str], ...], tuple[str, ...]], tuple[dict[str, str], tuple[str, ...]]
] = collections.OrderedDict()
_MAX_SCANS = 8


def scan_env(
    env: Mapping[str, str], allow: Iterable[str] = ()
) -> tuple[dict[str, str], tuple[str, ...]]:
    """``(filter_env(env, allow), tuple(secret_values(env)))``, computed once per distinct
    environment and *allow* (the last few are remembered), not once per run.

    Returns:
        A new dict each call (the caller may change it) and the secrets, longest first.
    """
    patterns = tuple(allow)
    key = (tuple(env.items()), patterns)
    found = _SCANS.get(key)
    if found is None:
        found = (filter_env(env, patterns), tuple(secret_values(env)))
        _SCANS[key] = found
        if len(_SCANS) > _MAX_SCANS:
            _SCANS.popitem(last=False)
    else:
        _SCANS.move_to_end(key)
    return dict(found[0]), found[1]


def redact(text: str, secrets: Iterable[str]) -> str:
    """*text* with every occurrence of each value in *secrets* that counts as a secret
    (:func:`worth_masking`) replaced by :data:`MASK`: ``Secrets(secrets).text(text)``, for a
    caller that has a list of values rather than a run's :class:`Secrets`."""
    return Secrets.of(tuple(secrets)).text(text)


@functools.lru_cache(maxsize=32)
def _secrets_pattern(secrets: tuple[str, ...]) -> re.Pattern[str] | None:
    wanted = sorted(set(secrets), key=len, reverse=True)
    if not wanted:
        return None
    # One alternation, one pass: replacing secrets one by one could create a new match across
    # the boundary of an earlier replacement.
    return re.compile("|".join(re.escape(s) for s in wanted))


class Secrets:
    """One run's secrets: the values, the one policy of what counts as one, the one mask.

    Built once per run (``runtime/wiring/_open.py``) from the run's environment (the names that
    look secret, :func:`secret_values`), the MCP servers' expanded values and any provider key,
    and handed to everything that masks: the event bus (every event), the tools (text they
    cut), the providers (their error lines), the MCP servers, the log lines (while the run is
    open, :meth:`in_logs`) and a Ray host (in the run's settings). Values that do not count as
    secrets (:func:`worth_masking`: shorter than :data:`MIN_SECRET_LEN`, a flag word, a small
    number) are left out, whoever gives them.

    Args:
        values: the values to mask.
    """

    #: What every occurrence of a secret becomes, wherever it is masked.
    mask: Final = MASK

    def __init__(self, values: Iterable[str] = ()) -> None:
        #: The values masked, longest first (no duplicates).
        self.values: tuple[str, ...] = tuple(
            sorted({v for v in values if worth_masking(v)}, key=lambda v: (-len(v), v))
        )
        self._pattern = _secrets_pattern(self.values)
        #: The ``search`` of the secrets' pattern, or ``None`` when there are none.
        self.search = self._pattern.search if self._pattern is not None else None
        self.max_len = len(self.values[0]) if self.values else 0
        # Secrets by their first character: where a streamed piece could end inside one.
        self._by_first: dict[str, tuple[str, ...]] = {}
        for secret in self.values:
            self._by_first[secret[0]] = (*self._by_first.get(secret[0], ()), secret)
        # Where one could start, found by one search (most streamed pieces hold none).
        self._firsts = (
            re.compile(f"[{''.join(re.escape(c) for c in self._by_first)}]")
            if self._by_first
            else None
        )

    @staticmethod
    @functools.lru_cache(maxsize=32)
    def of(values: tuple[str, ...]) -> Secrets:
        """The :class:`Secrets` of *values*, built once per set of values (a :class:`Secrets`
        never changes, so runs with the same secrets share one)."""
        return Secrets(values)

    def __or__(self, other: Iterable[str]) -> Secrets:
        """These secrets and *other*'s values (another :class:`Secrets`, or values)."""
        more = other.values if isinstance(other, Secrets) else tuple(other)
        if not more:
            return self
        return Secrets.of((*self.values, *more))

    def __bool__(self) -> bool:
        return self._pattern is not None

    def __contains__(self, value: object) -> bool:
        return value in self.values

    def __repr__(self) -> str:
        return f"<Secrets: {len(self.values)} values>"  # never the values themselves

    def text(self, text: str) -> str:
        """*text* with every secret masked: every character of every occurrence, overlapping
        ones too (``abab-key-ab`` twice in ``abab-key-abab-key-ab``), each run of overlapping
        occurrences one :data:`MASK`."""
        pattern = self._pattern
        # A search first: most text holds no secret.
        if pattern is None or (found := pattern.search(text)) is None:
            return text
        if not self._chained:
            return pattern.sub(MASK, text)  # no occurrence can overlap another: one C pass
        return self._masked(text, found, len(text))[0]

    @functools.cached_property
    def _chained(self) -> bool:
        """Whether an occurrence of a secret can start inside another and end beyond it (a
        secret that overlaps itself, ``abab``, or whose end starts another): then the regex's
        left-to-right replacing would show the overlapping part."""
        values = self.values
        return any(
            a.endswith(b[:k]) for a in values for b in values for k in range(1, min(len(a), len(b)))
        )

    def _masked(self, text: str, found: re.Match[str] | None, stop: int) -> tuple[str, int]:
        """``text[:stop]`` masked, from *found* (the first occurrence in *text*, or ``None``),
        and *stop*; or, when a run of occurrences crosses *stop*, the text before that run
        masked and where it starts (the cut no occurrence crosses)."""
        parts: list[str] = []
        pos = 0
        for start, end in self._runs(text, found):
            if start >= stop:
                break
            if end > stop:
                stop = start
                break
            parts += (text[pos:start], MASK)
            pos = end
        parts.append(text[pos:stop])
        return "".join(parts), stop

    def _runs(self, text: str, found: re.Match[str] | None) -> Iterator[tuple[int, int]]:
        """The runs of overlapping occurrences of the secrets in *text*, left to right, from
        *found* (the first one): ``(start, end)`` of each.

        The pattern finds the leftmost occurrence and the longest there (the alternatives are
        longest first); one starting inside it, at a secret's first character, extends it."""
        assert self._pattern is not None
        assert self._firsts is not None
        search, match, firsts = self._pattern.search, self._pattern.match, self._firsts.search
        while found is not None:
            start, end = found.span()
            inner = firsts(text, start + 1, end)
            while inner is not None:
                at = inner.start()
                longer = match(text, at)
                if longer is not None and longer.end() > end:
                    end = longer.end()
                inner = firsts(text, at + 1, end)
            yield start, end
            found = search(text, end)

    __call__ = text

    def value(self, obj: Any) -> Any:
        """*obj* with every string in it masked: strings, and the keys and values of dicts,
        lists and tuples at any depth (bounded: JSON-like values from a model or a config)."""
        if self._pattern is None or not self.holds_secret(obj, 0):
            return obj  # nothing to mask (nearly always): *obj* itself, no copy
        return self._value(obj, 0)

    def _value(self, obj: Any, depth: int) -> Any:
        if type(obj) is str:
            return self.text(obj)
        if obj is None or isinstance(obj, int | float):
            return obj
        if depth > 64:  # deeper than any sane tool input; masked whole rather than walked
            return MASK
        if isinstance(obj, dict):
            return {self._value(k, depth + 1): self._value(v, depth + 1) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            items = [self._value(v, depth + 1) for v in obj]
            return items if isinstance(obj, list) else tuple(items)
        return obj

    def holds_secret(self, obj: Any, depth: int = 0) -> bool:
        """Whether :meth:`value` would change *obj* (a secret in a string in it, or deeper
        than it walks), without building anything."""
        if self._pattern is None:
            return False
        if type(obj) is str:
            return self._pattern.search(obj) is not None
        if obj is None or isinstance(obj, int | float):
            return False
        if not isinstance(obj, dict | list | tuple):
            return False  # left as it is by _value
        if depth > 64:
            return True  # deeper than _value walks: it masks the container whole
        if isinstance(obj, dict):
            return self._any_secret(obj.keys(), depth + 1) or self._any_secret(
                obj.values(), depth + 1
            )
        return self._any_secret(obj, depth + 1)

    def _any_secret(self, items: Iterable[Any], depth: int) -> bool:
        """Whether any of a container's *items* (at *depth*) holds a secret; strings and
        numbers checked here, not through a call each (a tool's input is mostly those)."""
        assert self._pattern is not None
        search = self._pattern.search
        for item in items:
            kind = type(item)
            if kind is str:
                if search(item) is not None:
                    return True
            elif item is None or kind is int or kind is float or kind is bool:
                continue
            elif self.holds_secret(item, depth):
                return True
        return False

    def spans(self, text: str) -> Iterator[tuple[int, int]]:
        """Where the secrets are in *text*: ``(start, end)`` of each run of overlapping
        occurrences (what :meth:`text` masks as one), left to right."""
        if self._pattern is not None:
            yield from self._runs(text, self._pattern.search(text))

    def split_stream(self, text: str) -> tuple[str, str]:
        """Split streamed *text* into what can go out now (masked) and what to hold back: the
        matcher across deltas.

        *text* is the held part of the last call and the next piece. The held part is the
        longest tail that could be the start of a secret the next piece completes (every
        secret that could end beyond *text* starts in it), or, when a run of occurrences found
        whole reaches into that tail, from the start of that run: at most about twice the
        longest secret. What goes out is masked as the whole stream will be, as no occurrence
        crosses the cut. Send the held part with the next piece, or on its own (masked) once
        the stream ends.
        """
        firsts = self._firsts
        if firsts is None or not text:
            return text, ""
        end = len(text)
        found = firsts.search(text, max(0, end - self.max_len + 1))
        if found is None:
            return self.text(text), ""  # the common case: no secret could start in the tail
        hold_from = self._tail_start(text, found.start())
        if hold_from == end:
            return self.text(text), ""
        assert self._pattern is not None
        # Never cut a run of occurrences found whole: held from its start.
        out, hold_from = self._masked(text, self._pattern.search(text), hold_from)
        return out, text[hold_from:]

    def _tail_start(self, text: str, first: int) -> int:
        """Where the longest tail of *text* that is the start of a secret (not all of it)
        starts, looking from *first* (a secret's first character, where a secret would still
        reach the end of *text*) on; ``len(text)`` when none is."""
        assert self._firsts is not None
        end = len(text)
        by_first = self._by_first
        # Left to right: the first tail that starts a secret is the longest.
        for found in self._firsts.finditer(text, first):
            i = found.start()
            tail = end - i
            for secret in by_first[text[i]]:
                if len(secret) > tail and text.startswith(secret[:tail], i):
                    return i
        return end

    def cut(self, text: str, cut: Callable[[str], str]) -> str:
        """*text* masked, then *cut* (a head and a tail kept, say): masked first, as a cut
        through a secret would leave two halves no search finds."""
        return cut(self.text(text))

    @contextlib.contextmanager
    def in_logs(self) -> Generator[None, None, None]:
        """Mask these secrets in every log line (and CLI error line) while the block runs."""
        _change_log_secrets(self.values, +1)
        try:
            yield
        finally:
            _change_log_secrets(self.values, -1)


NO_SECRETS: Final = Secrets()
"""The :class:`Secrets` of a run with none (masks nothing)."""


# -- logs ------------------------------------------------------------------------------------

# The secrets of every open run in this process (a run may use its own env), counted so that
# two runs with one key keep it while either is open; masked with the union of them.
_log_secrets: collections.Counter[str] = collections.Counter()
_log_mask = NO_SECRETS


def log_secrets(secrets: Iterable[str]) -> contextlib.AbstractContextManager[None]:
    """Mask *secrets* in every log line (and CLI error line) while the block runs:
    ``Secrets(secrets).in_logs()``."""
    return Secrets(secrets).in_logs()


def _change_log_secrets(secrets: Sequence[str], delta: int) -> None:
    global _log_mask
    if not secrets:  # most runs: nothing changes, and a new Secrets is work per run
        return
    for s in secrets:
        _log_secrets[s] += delta
        if _log_secrets[s] <= 0:
            del _log_secrets[s]
    _log_mask = Secrets(_log_secrets)


def redact_text(text: str) -> str:
    """*text* with the secrets of every open run (and the sealed environment's) masked."""
    return _log_mask.text(text)


def redact_known(obj: Any) -> Any:
    """*obj* (text, or a JSON-like value) with the secrets of every open run masked: for what
    is written outside the events (a chat session file)."""
    return _log_mask.value(obj)


def redact_log_event(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> Any:
    """A structlog processor: every string in the event masked, like the run's events. Put it
    last before the renderer, after the processors that turn exceptions into strings."""
    mask = _log_mask
    if not mask:
        return event_dict
    for key, value in event_dict.items():
        if isinstance(value, str | dict | list | tuple):
            event_dict[key] = mask.value(value)
        elif isinstance(value, BaseException):
            event_dict[key] = mask.text(f"{type(value).__name__}: {value}")
    return event_dict


# The runtime's loggers mask with it when the application configured no structlog of its own
# (runtime/_logs.py).
add_mask(redact_log_event)


class RedactingLogFilter(logging.Filter):
    """A stdlib logging filter that masks secrets in a record's message (arguments merged)."""

    def filter(self, record: logging.LogRecord) -> bool:
        mask = _log_mask
        if mask:
            message = record.getMessage()
            record.msg = mask.text(message)
            record.args = None
            if record.exc_info and record.exc_info[1] is not None:
                record.exc_text = mask.text(logging.Formatter().formatException(record.exc_info))
                record.exc_info = None
        return True


# -- the process environment -----------------------------------------------------------------

_sealed_env: dict[str, str] | None = None


def run_environ() -> dict[str, str]:
    """The environment a run starts from when none is given: ``os.environ``, or, once
    :func:`seal_process_environ` ran, the copy it kept (with the secrets)."""
    return dict(_shared_environ())


def _shared_environ() -> dict[str, str]:
    """:func:`run_environ` without the copy: one dict per state of the environment, which
    nobody may change (it is the key of :func:`scan_run_environ`'s memo)."""
    if _sealed_env is not None:
        return _sealed_env
    global _environ_copy
    # Decoding os.environ costs about 0.5 us a variable; its raw table is compared instead
    # (a CPython detail: without it, the environment is decoded every time).
    raw = getattr(os.environ, "_data", None)
    if raw is None:
        return dict(os.environ)
    key = tuple(raw.items())
    if _environ_copy is None or _environ_copy[0] != key:
        _environ_copy = (key, dict(os.environ))
    return _environ_copy[1]


def scan_run_environ(allow: Iterable[str] = ()) -> tuple[dict[str, str], tuple[str, ...]]:
    """``scan_env(run_environ(), allow)``, without copying the environment or building
    :func:`scan_env`'s key from it while it has not changed (a run's set-up:
    bench/README.md, "One small run, fourth pass").

    Returns:
        A new dict each call (the caller may change it) and the secrets, longest first.
    """
    env = _shared_environ()
    patterns = tuple(allow)
    hit = _RUN_SCANS.get(patterns)
    if hit is None or hit[0] is not env:
        hit = (env, *scan_env(env, patterns))
        if len(_RUN_SCANS) >= _MAX_SCANS:
            _RUN_SCANS.clear()
        _RUN_SCANS[patterns] = hit  # keeps env alive: its identity is the key
    return dict(hit[1]), hit[2]


# allow -> (the shared environment scanned, filtered env, secret values).
_RUN_SCANS: dict[tuple[str, ...], tuple[dict[str, str], dict[str, str], tuple[str, ...]]] = {}


_environ_copy: tuple[tuple[tuple[Any, Any], ...], dict[str, str]] | None = None


def seal_process_environ(keep: Iterable[str] = ()) -> None:
    """Keep secrets out of reach of child processes of this one (the CLI calls this once, and
    so does each Ray worker that hosts subtrees, see ``runtime/cluster/_host.py``).

    A private copy of the environment is kept for the runs (:func:`run_environ`) and its
    secrets are masked in logs for the life of the process; then every secret-looking variable
    is removed from ``os.environ`` and overwritten in the environment block the kernel shows as
    ``/proc/<pid>/environ``, and the process is made non-dumpable (``PR_SET_DUMPABLE`` 0), so
    processes of the same user (not root) cannot read its memory, ``environ`` or attach to it.
    Best effort where there is no ``/proc`` or ``prctl`` (not Linux): ``os.environ`` is still
    cleaned. Calling it again does nothing: the first call's copy stays what
    :func:`run_environ` gives (a process's environment is fixed when it starts; a long-lived
    process that serves many runs, a Ray worker, gets their keys with their settings).

    Args:
        keep: names of secret-looking variables that stay: settings, not secrets, that the
            process itself still reads (a Ray worker's ``RAY_AUTH_MODE``).
    """
    global _sealed_env
    if _sealed_env is not None:
        return
    _sealed_env = dict(os.environ)
    kept = set(keep)
    names = {name for name in _sealed_env if looks_secret(name) and name not in kept}
    # For the process's life: the providers of every run use these.
    _change_log_secrets(secret_values(_sealed_env), +1)
    for name in names:
        os.environ.pop(name, None)
    if sys.platform.startswith("linux"):
        import ctypes  # only here: a plain run never needs it

        with contextlib.suppress(OSError, ValueError, AttributeError):
            _wipe_initial_environ(names)
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0


def _wipe_initial_environ(names: set[str]) -> None:
    """Overwrite ``NAME=value`` of each of *names* in the block the process was started with.

    ``os.environ.pop`` only unhooks a variable from libc's table; the bytes stay in the block
    between ``env_start`` and ``env_end`` (``/proc/self/stat``), which is what other processes
    read as ``/proc/<pid>/environ``. The block is this process's own writable memory.
    """
    import ctypes

    with open("/proc/self/stat", "rb") as f:
        stat = f.read()
    # Fields after "(comm)": the 3rd field is first; env_start and env_end are the 50th, 51st.
    fields = stat[stat.rfind(b")") + 2 :].split()
    env_start, env_end = int(fields[47]), int(fields[48])
    if not 0 < env_start < env_end or env_end - env_start > 1 << 24:
        return
    block = ctypes.string_at(env_start, env_end - env_start)
    wanted = {name.encode("utf-8", "surrogateescape") for name in names}
    offset = 0
    for entry in block.split(b"\0"):
        if entry.split(b"=", 1)[0] in wanted:
            ctypes.memset(env_start + offset, 0, len(entry))
        offset += len(entry) + 1
