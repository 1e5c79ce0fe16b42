"""MCP configuration: Claude Code's .mcp.json format, ${VAR} expansion, and every bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.core import ConfigError
from runtime.mcp import McpConfig, load_mcp_config


def write(path: Path, obj: object) -> Path:
    path.write_text(json.dumps(obj) if not isinstance(obj, str) else obj, encoding="utf-8")
    return path


def test_a_claude_code_file_gives_stdio_and_http_servers(tmp_path: Path) -> None:
    path = write(
        tmp_path / ".mcp.json",
        {
            "mcpServers": {
                "git": {"command": "uvx", "args": ["mcp-server-git"], "env": {"A": "1"}},
                "local": {"type": "stdio", "command": "srv"},
                "docs": {"type": "http", "url": "https://x/mcp", "headers": {"X-Key": "k"}},
            }
        },
    )
    config = load_mcp_config([path])
    git, local, docs = config.servers
    assert (git.name, git.transport, git.command, git.args, dict(git.env)) == (
        "git",
        "stdio",
        "uvx",
        ("mcp-server-git",),
        {"A": "1"},
    )
    assert (local.transport, local.args) == ("stdio", ())
    assert (docs.transport, docs.url, dict(docs.headers)) == (
        "http",
        "https://x/mcp",
        {"X-Key": "k"},
    )
    assert git.source == str(path)


def test_vars_expand_with_defaults_and_become_secrets() -> None:
    config = McpConfig.from_mapping(
        {
            "s": {
                "command": "${BIN}/srv",
                "args": ["--token", "${TOKEN}", "${MISSING:-fallback-value}"],
                "env": {"K": "${TOKEN}"},
            },
            "h": {
                "type": "http",
                "url": "https://${HOST:-example.com}/mcp",
                "headers": {"Authorization": "Bearer ${TOKEN}"},
            },
        }
    )
    environ = {"BIN": "/opt/bin", "TOKEN": "s3cr3t-token"}
    stdio, found = config.servers[0].expanded(environ)
    assert stdio.command == "/opt/bin/srv"
    assert stdio.args == ("--token", "s3cr3t-token", "fallback-value")
    assert dict(stdio.env) == {"K": "s3cr3t-token"}
    assert "s3cr3t-token" in found
    assert "fallback-value" in found
    http, found = config.servers[1].expanded(environ)
    assert http.url == "https://example.com/mcp"
    assert "Bearer s3cr3t-token" in found
    assert "s3cr3t-token" in found


def test_an_unset_var_without_default_names_the_path_and_var_not_a_value() -> None:
    config = McpConfig.from_mapping({"s": {"command": "srv", "env": {"K": "${NOPE}"}}})
    with pytest.raises(
        ConfigError,
        match=r"mcp_servers: mcpServers\.s\.env\.K: environment variable NOPE is not set",
    ):
        config.servers[0].expanded({})


def test_malformed_json_names_the_file_and_position(tmp_path: Path) -> None:
    path = write(tmp_path / "m.json", '{"mcpServers": {')
    with pytest.raises(ConfigError, match=r"m\.json: not valid JSON: .*line 1"):
        load_mcp_config([path])


@pytest.mark.parametrize(
    ("obj", "where"),
    [
        ([], r"expected an object with mcpServers"),
        ({"servers": {}}, r"expected an object with mcpServers"),
        ({"mcpServers": []}, r"mcpServers: expected an object of servers"),
        ({"mcpServers": {"a": "x"}}, r"mcpServers\.a: expected an object"),
        ({"mcpServers": {"a": {"args": []}}}, r"mcpServers\.a\.command: expected the command"),
        (
            {"mcpServers": {"a": {"command": "x", "args": "y"}}},
            r"mcpServers\.a\.args: expected a list",
        ),
        (
            {"mcpServers": {"a": {"command": "x", "args": ["y", 3]}}},
            r"mcpServers\.a\.args\[1\]: expected a string",
        ),
        (
            {"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}},
            r"mcpServers\.a\.env\.K: expected a string",
        ),
        ({"mcpServers": {"a": {"command": "x", "cwd": "/"}}}, r"mcpServers\.a\.cwd: unknown key"),
        ({"mcpServers": {"a": {"type": "http"}}}, r"mcpServers\.a\.url: expected the server's URL"),
        (
            {"mcpServers": {"a": {"type": "http", "url": "ftp://x"}}},
            r"mcpServers\.a\.url: expected an http",
        ),
        (
            {"mcpServers": {"a": {"type": "http", "url": "http://x", "headers": {"H": []}}}},
            r"headers\.H: expected a string",
        ),
        (
            {"mcpServers": {"a.b": {"command": "x"}}},
            r"mcpServers\.a\.b: a server name may hold only",
        ),
        (
            {"mcpServers": {"a": {"type": 3, "command": "x"}}},
            r"mcpServers\.a\.type: expected a string",
        ),
    ],
)
def test_a_bad_shape_is_refused_naming_the_file_and_json_path(
    tmp_path: Path, obj: object, where: str
) -> None:
    path = write(tmp_path / "bad.json", obj)
    with pytest.raises(ConfigError, match=rf"^{tmp_path / 'bad.json'}: .*{where}"):
        load_mcp_config([path])


def test_an_unknown_transport_is_kept_as_a_server_that_will_not_start(tmp_path: Path) -> None:
    path = write(tmp_path / "m.json", {"mcpServers": {"old": {"type": "sse", "url": "http://x"}}})
    (server,) = load_mcp_config([path]).servers
    assert server.transport == "unsupported"
    assert server.problem == "unknown transport type 'sse' (this runtime speaks 'stdio' and 'http')"


def test_a_server_in_two_files_comes_from_the_later_one_with_a_warning(tmp_path: Path) -> None:
    first = write(
        tmp_path / "a.json", {"mcpServers": {"s": {"command": "one"}, "t": {"command": "t"}}}
    )
    second = write(tmp_path / "b.json", {"mcpServers": {"s": {"command": "two"}}})
    config = load_mcp_config([second], optional=[first])
    assert [(s.name, s.command) for s in config.servers] == [("t", "t"), ("s", "two")]
    assert config.warnings == (
        f"mcp server 's' is defined in {first} and {second}; using the one in {second}",
    )


def test_a_missing_optional_file_is_skipped_and_a_missing_given_file_is_an_error(
    tmp_path: Path,
) -> None:
    assert load_mcp_config([], optional=[tmp_path / ".mcp.json"]).servers == ()
    with pytest.raises(ConfigError, match=r"nope\.json: cannot read"):
        load_mcp_config([tmp_path / "nope.json"])


def test_reading_a_config_does_not_load_the_sdk() -> None:
    import subprocess
    import sys

    code = (
        "import sys, runtime.mcp as m; m.load_mcp_config([]); m.McpConfig.from_mapping({}); "
        "print('mcp' in sys.modules, 'trio' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == ["False", "False"]
