"""The configured hooks as data: which events exist, one hook, a run's table of them
(docs/hooks.md#configuration).

Apart from :mod:`runtime.core._hooks` (which runs them) so that reading settings files imports
no event loop: ``trio-agents config``, ``mcp list`` and ``--help`` stay light.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final, Literal

import attrs

__all__ = ["DEFAULT_TIMEOUT_S", "HOOK_EVENTS", "Hook", "HookKind", "HookTable"]

HOOK_EVENTS: Final = (
    "PreToolUse",
    "PostToolUse",
    "UserPromptSubmit",
    "Stop",
    "SubagentStart",
    "SubagentStop",
    "PreCompact",
    "SessionStart",
    "SessionEnd",
    "Notification",
)
"""The events a hook may be configured on (docs/hooks.md#events)."""

DEFAULT_TIMEOUT_S: Final = 60.0
# A matcher of names and ``|`` only is a list of exact names, as Claude Code reads it; anything
# else is a regular expression searched in the tool's name.
_PLAIN = re.compile(r"[A-Za-z0-9_|]*")

HookKind = Literal["command", "http"]


@attrs.frozen(kw_only=True)
class Hook:
    """One configured hook.

    Attributes:
        event: one of :data:`HOOK_EVENTS`.
        matcher: Claude Code's matcher (``""`` and ``*`` match everything).
        kind: ``command`` or ``http``.
        target: the command line (``command``) or the URL (``http``).
        headers: an HTTP hook's headers, ``${VAR}`` already filled in.
        timeout_s: how long it may run before it is killed (default 60 s).
        source: the settings file and the JSON path it came from.
    """

    event: str
    matcher: str = ""
    kind: HookKind = "command"
    target: str
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    source: str = ""
    _pattern: re.Pattern[str] | None = attrs.field(default=None, alias="pattern", eq=False)

    @classmethod
    def new(cls, **kwargs: Any) -> Hook:
        """A hook with its matcher compiled.

        Raises:
            re.error: the matcher is neither a list of names nor a valid regular expression.
        """
        matcher = kwargs.get("matcher", "")
        pattern = None if matcher in ("", "*") or _PLAIN.fullmatch(matcher) else re.compile(matcher)
        return cls(pattern=pattern, **kwargs)

    def matches(self, value: str | None) -> bool:
        """Whether this hook runs for *value* (a tool's Claude Code name, a sub-agent's type,
        a trigger); events without a value run every hook."""
        m = self.matcher
        if value is None or m in ("", "*"):
            return True
        if self._pattern is None:
            return value in m.split("|")
        return self._pattern.search(value) is not None


@attrs.frozen
class HookTable:
    """The hooks of a run, in the order of their files (user, workspace, local, runtime's)."""

    hooks: tuple[Hook, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.hooks)

    def events(self) -> frozenset[str]:
        return frozenset(h.event for h in self.hooks)

    def matching(self, event: str, values: Sequence[str | None] = (None,)) -> list[Hook]:
        """The hooks of *event* that match any of *values*, identical ones once (Claude Code
        runs an identical command once, whichever file and matcher named it)."""
        out: dict[tuple[str, str], Hook] = {}
        for hook in self.hooks:
            if hook.event == event and any(hook.matches(v) for v in values):
                out.setdefault((hook.kind, hook.target), hook)
        return list(out.values())
