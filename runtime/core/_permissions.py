"""The permission policy: which tool calls run, which are refused, which need a human.

This module only DECIDES; :mod:`runtime.core._approvals` asks the human when the answer is ``ask``.

Modes (``--permission-mode``):

=============  ==============================================================================
``ask``        every call of a tool that needs permission asks
``auto-edit``  file-editing tools (``write``, ``edit``) run; other tools that need permission ask
``allow-all``  everything runs
``deny``       every call of a tool that needs permission is refused
=============  ==============================================================================

Rules are ``tool`` (every call of that tool) or ``tool(pattern)``, where the pattern is a glob
matched against the call's :meth:`~tools.Tool.permission_target`:

* ``bash(git status*)``: the command. ``*`` matches any text, but in ALLOW rules no wildcard
  matches a shell operator or substitution (``; & | < > ( ) ` $`` or a newline), so
  ``bash(git status*)`` does not allow ``git status; rm -rf ~``. DENY rules are also tried on
  each part of a chained command, so ``bash(rm *)`` denies ``ls && rm -rf x``. These are
  conveniences against mistakes, not a sandbox: bash can always run code in ways no pattern
  foresees.
* ``write(docs/**)``, ``edit(*.py)``: a path relative to the workspace. ``*`` stays within one
  folder, ``**`` crosses folders (``docs/**`` is everything under ``docs``). A pattern without
  ``/`` matches the file name at any depth, like ``.gitignore`` (``edit(*.py)`` is every Python
  file); start it with ``./`` to anchor it at the workspace (``write(./setup.py)``). When the
  policy knows the workspace, the path is resolved as the tool will resolve it (symlinks,
  ``/proc/self/root/...`` and every other spelling): a deny rule matching either the given or
  the real path denies; an allow rule must match the real path.
* The runtime's own files (any ``.trio-agents/`` folder: traces, sessions, settings) are
  refused to every tool whose target is a path, before any rule and whatever the mode.
* Other tools: a plain glob (``*`` matches anything) on whatever their target is.

The tool part may be a glob over tool names after its first letter (``*`` any run of
characters, ``?`` one):
``mcp__git__*`` is every tool of the MCP server ``git``, ``mcp__*`` every MCP tool.

Order of decision: deny rules, allow rules, tools that need no permission (read-only tools),
then the mode. A rule naming a tool that does not exist is accepted and never matches.

How a tool's target is read is told by its ``permission_target_kind`` class attribute:
``"command"``, ``"path"``, or anything else (plain text, the default).
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import attrs

from ._errors import ConfigError
from ._globs import Glob, compile_glob, escape_glob
from ._workspace import RUNTIME_DIR, is_runtime_path, normalise_target, real_target

if TYPE_CHECKING:
    from ._tool import Tool

__all__ = ["Decision", "PermissionMode", "PermissionPolicy", "Rule", "parse_rule"]

PermissionMode = Literal["ask", "auto-edit", "allow-all", "deny"]
_MODES: tuple[str, ...] = get_args(PermissionMode)

# What no wildcard of an allow rule may match in a command: anything that chains, pipes,
# redirects or substitutes, i.e. anything that could smuggle a second command in.
_SHELL_OPERATORS = ";&|<>()`$\n\r"
# Where to cut a command into parts for deny rules. Naive about quotes on purpose: cutting too
# often only makes deny rules match more.
_COMMAND_SPLIT = re.compile(r"&&|\|\||[;&|\n\r`()]|\$\(")
_RULE = re.compile(
    r"(?P<tool>[A-Za-z_][A-Za-z0-9_.:*?-]*)(?:\((?P<pattern>.*)\))?", re.DOTALL
)


@attrs.frozen(kw_only=True)
class Decision:
    """What the policy says about one call.

    Attributes:
        action: ``allow`` (run it), ``deny`` (refuse it) or ``ask`` (a human decides).
        reason: why, for events and for the model, e.g. ``denied by rule bash(rm *)``.
    """

    action: Literal["allow", "deny", "ask"]
    reason: str


@attrs.frozen
class Rule:
    """One parsed rule: a tool name and an optional pattern (``None``: every call)."""

    tool: str
    pattern: str | None = None

    def __str__(self) -> str:
        return self.tool if self.pattern is None else f"{self.tool}({self.pattern})"

    def matches(self, tool: str, targets: Iterable[str], kind: str, *, deny: bool) -> bool:
        """Whether this rule covers a call of *tool* whose target reads as *targets*.

        *targets* holds the forms of the target to try (a path as given and as resolved); the
        rule covers the call when it matches any of them (the policy gives allow rules only
        the resolved form).
        """
        if tool != self.tool and not (
            ("*" in self.tool or "?" in self.tool) and fnmatch.fnmatchcase(tool, self.tool)
        ):
            return False
        if self.pattern is None:
            return True
        return any(self._matches_one(t, kind, deny=deny) for t in targets)

    def _matches_one(self, target: str, kind: str, *, deny: bool) -> bool:
        assert self.pattern is not None
        if kind == "command":
            if not deny:
                strict = _glob(self.pattern, paths=False, stop_chars=_SHELL_OPERATORS)
                return strict.fullmatch(target)
            glob = _glob(self.pattern, paths=False)
            parts = [target, *(p.strip() for p in _COMMAND_SPLIT.split(target))]
            return any(glob.fullmatch(p) for p in parts if p)
        if kind == "path":
            return _path_matches(self.pattern, target, deny=deny)
        return _glob(self.pattern, paths=False).fullmatch(target)


def _path_matches(pattern: str, target: str, *, deny: bool) -> bool:
    anchored = "/" in pattern
    glob = _glob(pattern.removeprefix("./"), paths=True)
    if not anchored:
        # Like .gitignore: a pattern without "/" is about the file name, wherever it is.
        return glob.fullmatch(target.rstrip("/").rsplit("/", 1)[-1])
    if glob.fullmatch(target):
        return True
    if deny and target.startswith("/"):
        # An absolute path the policy could not make relative (it does not know the
        # workspace): try every tail, so "secrets/**" still denies "/ws/secrets/key".
        parts = target.strip("/").split("/")
        return any(glob.fullmatch("/".join(parts[i:])) for i in range(len(parts)))
    return False


def parse_rule(text: str) -> Rule:
    """Parse ``tool`` or ``tool(pattern)``.

    Raises:
        ConfigError: the text is not a rule; the message quotes it and shows the syntax.
    """
    match = _RULE.fullmatch(text.strip())
    if match is None:
        raise ConfigError(
            f"bad permission rule {text!r}: expected 'tool' or 'tool(pattern)', "
            "e.g. 'bash(git status*)' or 'write(docs/**)'"
        )
    return Rule(match["tool"], match["pattern"])


def _to_rules(items: Iterable[str | Rule]) -> tuple[Rule, ...]:
    if items == ():  # the usual case: no rules
        return ()
    if isinstance(items, str):
        raise ConfigError(f"permission rules must be a list of rules, not the string {items!r}")
    return tuple(item if isinstance(item, Rule) else parse_rule(item) for item in items)


def _check_mode(mode: str) -> PermissionMode:
    if mode not in _MODES:
        raise ConfigError(
            f"unknown permission mode {mode!r}; expected one of {', '.join(_MODES)}"
        )
    return mode  # type: ignore[return-value]  # checked just above


@attrs.define
class PermissionPolicy:
    """Decides, call by call, whether a tool may run (see the module docs for the rules).

    Args:
        mode: ``ask``, ``auto-edit``, ``allow-all`` or ``deny``.
        allow: rules (strings or :class:`Rule`) for calls that run without asking.
        deny: rules for calls that are refused whatever else says.
        workspace: the run's workspace; with it, path rules also see absolute paths inside it
            and the real path behind a symlink.

    Raises:
        ConfigError: an unknown mode or a malformed rule.
    """

    mode: PermissionMode = attrs.field(converter=_check_mode)
    allow: tuple[Rule, ...] = attrs.field(default=(), converter=_to_rules)
    deny: tuple[Rule, ...] = attrs.field(default=(), converter=_to_rules)
    workspace: Path | None = attrs.field(default=None, kw_only=True)
    protected: tuple[str, ...] = attrs.field(default=(), kw_only=True)
    """Absolute paths (files or folders) no tool may change, whatever the mode or rules: files
    the runtime acts on (``.mcp.json``: its commands run at the next start) or writes (a trace
    outside ``.trio-agents/``)."""

    def decide(
        self, tool: Tool, args: Mapping[str, Any], *, workspace: Path | None = None
    ) -> Decision:
        """Whether a call of *tool* with *args* (already validated) may run.

        Args:
            workspace: where the calling agent works, when not the policy's workspace (an
                isolated agent's worktree, docs/worktrees.md): its paths are read from there.
        """
        kind = _kind(tool)
        targets = self._targets(tool, args, kind, workspace)
        if kind == "path" and any(is_runtime_path(t) for t in targets):
            return Decision(
                action="deny",
                reason=f"{RUNTIME_DIR}/ holds the runtime's own files (traces, sessions, "
                "settings): no tool call may touch them, whatever the mode or rules",
            )
        if kind == "path" and not tool.read_only and (hit := self._protected_hit(targets)):
            return Decision(
                action="deny",
                reason=f"{hit} is one of the runtime's own files (a trace, or a file whose "
                "commands it runs): no tool may change it, whatever the mode or rules",
            )
        for rule in self.deny:
            if rule.matches(tool.name, targets, kind, deny=True):
                return Decision(action="deny", reason=f"denied by rule {rule}")
        # An allow rule must match where the call really leads: the last form.
        real = targets[-1:]
        for rule in self.allow:
            if rule.matches(tool.name, real, kind, deny=False):
                return Decision(action="allow", reason=f"allowed by rule {rule}")
        if not tool.needs_permission:
            why = "read-only tool" if tool.read_only else "tool needs no permission"
            return Decision(action="allow", reason=why)
        match self.mode:
            case "allow-all":
                return Decision(action="allow", reason="mode allow-all")
            case "deny":
                return Decision(action="deny", reason="mode deny")
            case "auto-edit" if tool.edits_files:
                return Decision(action="allow", reason="mode auto-edit allows file edits")
            case "auto-edit":
                return Decision(action="ask", reason="mode auto-edit asks for this tool")
            case _:
                return Decision(action="ask", reason="mode ask")

    def remember(
        self, tool: Tool, args: Mapping[str, Any], *, workspace: Path | None = None
    ) -> str:
        """Allow, for the rest of the run, calls of *tool* with the same target as *args*.

        The rule covers exactly that target: the same command for ``bash``, the same path for
        file tools (wildcards in it are escaped).

        Returns:
            The rule added, as text (``bash(git status)``, ``write(./notes.md)``).
        """
        rule = self._rule_for(tool, args, workspace)
        if rule not in self.allow:
            self.allow = (*self.allow, rule)
        return str(rule)

    def rule_for(
        self, tool: Tool, args: Mapping[str, Any], *, workspace: Path | None = None
    ) -> str:
        """The rule :meth:`remember` would add for this call, as text (nothing is added): what
        a question shows next to "always"."""
        return str(self._rule_for(tool, args, workspace))

    def _rule_for(self, tool: Tool, args: Mapping[str, Any], workspace: Path | None) -> Rule:
        kind = _kind(tool)
        target = self._targets(tool, args, kind, workspace)[-1]
        if kind == "path":
            pattern = _escape(target, paths=True)
            if "/" not in pattern:
                pattern = "./" + pattern  # anchored: only this file, not any file so named
        else:
            pattern = _escape(target, paths=False)
        return Rule(tool.name, pattern)

    def _protected_hit(self, targets: list[str]) -> str | None:
        if not self.protected or self.workspace is None:
            return None
        for target in targets:
            where = Path(os.path.normpath(self.workspace / target))
            for path in self.protected:
                if where == Path(path) or where.is_relative_to(path):
                    return normalise_target(str(where), self.workspace)
        return None

    def _targets(
        self, tool: Tool, args: Mapping[str, Any], kind: str, workspace: Path | None = None
    ) -> list[str]:
        """The forms of the call's target: as given, then (paths) where it really leads."""
        try:
            target = tool.permission_target(args)
        except Exception:
            target = ""  # a faulty tool must not crash the decision; "" matches few rules
        if kind != "path":
            return [target]
        root = workspace or self.workspace
        given = normalise_target(target, root)
        if root is None:
            return [given]
        # The file the call would really touch, resolved as the tool resolves it (symlinks,
        # /proc/self/root/..., every spelling). Touches the disk (a few system calls per
        # component); small enough to do on the event loop. None: the tool will refuse it.
        real = real_target(root, target or ".", runtime_dir_ok=True)
        if real is None or real == given:
            return [given]
        return [given, real]


def _kind(tool: Tool) -> str:
    return tool.permission_target_kind


@functools.lru_cache(maxsize=1024)
def _glob(pattern: str, *, paths: bool, stop_chars: str = "") -> Glob:
    return compile_glob(pattern, paths=paths, stop_chars=stop_chars)


def _escape(text: str, *, paths: bool) -> str:
    return escape_glob(text, paths=paths)
