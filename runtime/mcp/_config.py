"""MCP server configuration: Claude Code's ``.mcp.json`` format, read and checked.

::

    {"mcpServers": {
        "git":  {"command": "uvx", "args": ["mcp-server-git"], "env": {"GIT_TOKEN": "${GH_TOKEN}"}},
        "docs": {"type": "http", "url": "https://example.com/mcp",
                 "headers": {"Authorization": "Bearer ${DOCS_TOKEN:-none}"}}}}

A stdio server has ``command`` (and optional ``args``, ``env``; ``type`` may say ``stdio``); an
HTTP server (streamable HTTP) has ``"type": "http"``, ``url`` and optional ``headers``.
``${VAR}`` and ``${VAR:-default}`` are expanded in ``command``, ``args``, ``env``, ``url`` and
``headers`` when the servers start (:meth:`McpServerConfig.expanded`); an unset variable without
a default is a :class:`~runtime.core.ConfigError`. The expanded values are secrets from then on:
they are masked in every trace, log line and error message.

Checking is in two steps, so that one odd server does not cost the others: a file that is not
JSON, or whose shape is wrong (a string where a list belongs), is refused whole with the file and
the JSON path of the fault; a server whose ``type`` this runtime does not speak (``sse``) is kept
as *unsupported*, and fails to start with one warning like any server that cannot start.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from runtime.core import ConfigError
from runtime.project import read_text_capped

MAX_CONFIG_BYTES = 1024 * 1024
"""The biggest MCP config file read (``.mcp.json``, ``--mcp-config``)."""

__all__ = [
    "DEFAULT_START_TIMEOUT_S",
    "McpConfig",
    "McpServerConfig",
    "load_mcp_config",
]

Transport = Literal["stdio", "http", "unsupported"]
DEFAULT_START_TIMEOUT_S = 30.0
# What a server name may be: it becomes part of tool names (mcp__NAME__TOOL), which the model
# APIs restrict to these characters.
_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]+")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_STDIO_KEYS = frozenset({"type", "command", "args", "env"})
_HTTP_KEYS = frozenset({"type", "url", "headers"})


@attrs.frozen(kw_only=True)
class McpServerConfig:
    """One configured server, as written (``${VAR}`` not yet expanded).

    Attributes:
        name: the key under ``mcpServers``; tools are named ``mcp__NAME__TOOL``.
        transport: ``stdio``, ``http``, or ``unsupported`` (a ``type`` this runtime does not
            speak; *problem* says which).
        source: where it was defined (a file path, or ``mcp_servers`` for the Python API).
    """

    name: str
    transport: Transport
    source: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = attrs.field(factory=dict)
    url: str = ""
    headers: Mapping[str, str] = attrs.field(factory=dict, repr=False)
    problem: str | None = None

    def expanded(self, environ: Mapping[str, str]) -> tuple[McpServerConfig, list[str]]:
        """This server with ``${VAR}`` / ``${VAR:-default}`` replaced from *environ*.

        Returns:
            The expanded config and the values to mask from now on (every substituted value
            and every header value, longest first; :class:`~runtime.core.Secrets` keeps
            those that count as secrets).

        Raises:
            ConfigError: a variable is unset and has no default (naming the file, the JSON
                path and the variable, never a value).
        """
        secrets: set[str] = set(self.headers.values())
        where = f"{self.source}: mcpServers.{self.name}"

        def exp(text: str, path: str) -> str:
            def sub(match: re.Match[str]) -> str:
                name, default = match[1], match[2]
                value = environ.get(name)
                if value is None:
                    if default is None:
                        raise ConfigError(
                            f"{where}.{path}: environment variable {name} is not set "
                            f"(write ${{{name}:-default}} to give a default)"
                        )
                    value = default
                secrets.add(value)
                return value

            return _VAR.sub(sub, text)

        out = attrs.evolve(
            self,
            command=exp(self.command, "command"),
            args=tuple(exp(a, f"args[{i}]") for i, a in enumerate(self.args)),
            env={k: exp(v, f"env.{k}") for k, v in self.env.items()},
            url=exp(self.url, "url"),
            headers={k: exp(v, f"headers.{k}") for k, v in self.headers.items()},
        )
        secrets |= set(out.headers.values())
        # Which of them count as secrets is the run's one policy (runtime/core/_secrets.py).
        return out, sorted(secrets, key=lambda s: -len(s))


@attrs.frozen(kw_only=True)
class McpConfig:
    """The MCP servers of a run, and how to start them.

    Attributes:
        servers: the servers, each name once.
        start_timeout_s: how long each server may take to start (spawn or connect,
            ``initialize`` and the tool list); the servers start at the same time.
        warnings: what loading found worth saying (a server defined twice); shown when the
            servers start.
        on_warning: called with each one-line warning (a server that cannot start, a tool
            skipped); default: a structlog warning.
    """

    servers: tuple[McpServerConfig, ...] = ()
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S
    warnings: tuple[str, ...] = ()
    on_warning: Callable[[str], None] | None = attrs.field(default=None, eq=False)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "mcp_servers") -> McpConfig:
        """Servers from a decoded ``{"mcpServers": {...}}`` object, or the inner ``{NAME: {...}}``
        (the form ``open_runtime(mcp_servers=...)`` takes).

        Raises:
            ConfigError: a bad shape, naming *source* and the JSON path.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: expected an object of servers")
        if "mcpServers" in data:
            servers = _parse_servers(data["mcpServers"], source, prefix="mcpServers")
        else:
            servers = _parse_servers(data, source, prefix="")
        return cls(servers=tuple(servers))


def _parse_servers(obj: Any, source: str, *, prefix: str) -> list[McpServerConfig]:
    if not isinstance(obj, Mapping):
        raise ConfigError(f"{source}: {prefix or '(top level)'}: expected an object of servers")
    return [_parse_server(name, spec, source, prefix) for name, spec in obj.items()]


def _parse_server(name: Any, spec: Any, source: str, prefix: str) -> McpServerConfig:
    where = f"{prefix}.{name}" if prefix else str(name)

    def fail(path: str, message: str) -> ConfigError:
        return ConfigError(f"{source}: {where}{path}: {message}")

    if not isinstance(name, str) or not _SERVER_NAME.fullmatch(name):
        raise fail("", "a server name may hold only letters, digits, '_' and '-'")
    if "__" in name or name.endswith("_"):
        # Tools are mcp__NAME__TOOL: with 'git__x' (or 'git_') a rule or glob for server
        # 'git' (mcp__git__*) would also match this server's tools (docs/mcp.md).
        raise fail(
            "",
            "a server name may not hold '__' or end with '_' (its tools would match the "
            "rules of another server's name: mcp__git__* matches mcp__git__x__TOOL)",
        )
    if not isinstance(spec, Mapping):
        raise fail("", "expected an object")
    kind = spec.get("type", "http" if "url" in spec and "command" not in spec else "stdio")
    if not isinstance(kind, str):
        raise fail(".type", "expected a string")
    if kind not in ("stdio", "http"):
        return McpServerConfig(
            name=name,
            transport="unsupported",
            source=source,
            problem=f"unknown transport type {kind!r} (this runtime speaks 'stdio' and 'http')",
        )
    keys = _STDIO_KEYS if kind == "stdio" else _HTTP_KEYS
    for key in spec:
        if key not in keys:
            raise fail(
                f".{key}",
                f"unknown key for a {kind} server (expected one of {', '.join(sorted(keys))})",
            )
    if kind == "stdio":
        command = spec.get("command")
        if not isinstance(command, str) or not command.strip():
            raise fail(".command", "expected the command to run (a non-empty string)")
        args = spec.get("args", [])
        if not isinstance(args, list):
            raise fail(".args", "expected a list of strings")
        for i, arg in enumerate(args):
            if not isinstance(arg, str):
                raise fail(f".args[{i}]", "expected a string")
        return McpServerConfig(
            name=name,
            transport="stdio",
            source=source,
            command=command,
            args=tuple(args),
            env=_string_map(spec.get("env", {}), fail, ".env"),
        )
    url = spec.get("url")
    if not isinstance(url, str) or not url.strip():
        raise fail(".url", "expected the server's URL (a non-empty string)")
    if not re.match(r"(?i)https?://", url) and not url.startswith("${"):
        raise fail(".url", "expected an http:// or https:// URL")
    return McpServerConfig(
        name=name,
        transport="http",
        source=source,
        url=url,
        headers=_string_map(spec.get("headers", {}), fail, ".headers"),
    )


def _string_map(obj: Any, fail: Callable[[str, str], ConfigError], path: str) -> dict[str, str]:
    if not isinstance(obj, Mapping):
        raise fail(path, "expected an object of strings")
    out: dict[str, str] = {}
    for key, value in obj.items():
        if not isinstance(value, str):
            raise fail(f"{path}.{key}", "expected a string")
        out[str(key)] = value
    return out


def load_mcp_config(
    paths: Iterable[str | Path],
    *,
    optional: Sequence[str | Path] = (),
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
    on_warning: Callable[[str], None] | None = None,
) -> McpConfig:
    """Read and merge ``.mcp.json``-style files, later files over earlier ones.

    Args:
        paths: the files, in order; each must exist.
        optional: files read first if they exist (the workspace's ``.mcp.json``).

    A server named in two files is taken from the later one, with a warning (in
    :attr:`McpConfig.warnings`).

    Raises:
        ConfigError: a file that cannot be read, is not JSON, or has a bad shape (naming the
            file and the JSON path).
    """
    merged: dict[str, McpServerConfig] = {}
    warnings: list[str] = []
    files = [(Path(p), True) for p in optional] + [(Path(p), False) for p in paths]
    for path, may_be_missing in files:
        if may_be_missing and not os.path.lexists(path):
            continue
        # A workspace's own file is read as every planted file is (a FIFO, a device or a
        # link out of the workspace refused, the size capped); a --mcp-config file is the
        # user's and may be a link anywhere, still to a regular file.
        root = path.parent if may_be_missing else None
        content = read_text_capped(path, MAX_CONFIG_BYTES, root=root)
        if content.truncated:
            raise ConfigError(f"{path}: too big (over {MAX_CONFIG_BYTES // 1024} KiB)")
        text = content.text
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{path}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
            ) from exc
        if not isinstance(data, dict) or "mcpServers" not in data:
            raise ConfigError(f"{path}: expected an object with mcpServers")
        for server in _parse_servers(data["mcpServers"], str(path), prefix="mcpServers"):
            old = merged.pop(server.name, None)
            if old is not None:
                warnings.append(
                    f"mcp server {server.name!r} is defined in {old.source} and {server.source}; "
                    f"using the one in {server.source}"
                )
            merged[server.name] = server
    return McpConfig(
        servers=tuple(merged.values()),
        start_timeout_s=start_timeout_s,
        warnings=tuple(warnings),
        on_warning=on_warning,
    )
