"""``trio-agents mcp list``: start the configured MCP servers and show each with its tools;
``mcp login NAME`` / ``mcp logout NAME``: a remote server's OAuth login (docs/mcp-oauth.md).

Exit codes: 0 every server started (logged in, logged out), 1 one or more did not (the login
failed), 2 bad usage or a bad config file (no such server).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import AsyncGenerator, Callable
from typing import Any

from runtime.core import visible

from ._options import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    PROG,
    CliParser,
    RunOptions,
    add_mcp_options,
    error_line,
    options_from_args,
    run_command,
    setup_logging,
    warning_line,
)


def add_parser(sub: Any) -> None:
    """Add ``mcp`` (with ``mcp list``) to the subcommands *sub* of the main parser."""
    mcp = sub.add_parser(
        "mcp",
        help="MCP servers: mcp list shows the configured servers and their tools; mcp login "
        "and mcp logout keep a remote server's OAuth login",
        description="MCP servers: the ones configured in the workspace's .mcp.json and in "
        "--mcp-config files (docs/mcp.md).",
    )
    commands = mcp.add_subparsers(dest="mcp_command", metavar="COMMAND", parser_class=CliParser)
    ls = commands.add_parser(
        "list",
        help="start every configured server and list it with its tools",
        description="Start every configured MCP server (all at once), then print each with "
        "its status, transport and tools. Exit 0 when all started, 1 when one did not, 2 on "
        "a bad config file.",
    )
    res = commands.add_parser(
        "resources",
        help="start every configured server and list its resources and resource templates",
        description="Start every configured MCP server (all at once), then print each "
        "resource as @SERVER:URI (what a prompt mentions to attach it, docs/mcp.md) with its "
        "name, and each resource template. Exit codes as mcp list.",
    )
    for parser in (ls, res):
        parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
        parser.add_argument(
            "--workspace", metavar="DIR", help="where .mcp.json is read and stdio servers start"
        )
        parser.add_argument(
            "--debug", action="store_true", help="debug logs and tracebacks on stderr"
        )
        add_mcp_options(parser)
    _add_login_parsers(commands)


def main(ns: argparse.Namespace, parser: CliParser) -> int:
    """Run ``trio-agents mcp …`` as parsed into *ns*; returns the exit code."""
    if ns.mcp_command is None:
        error_line(
            f"{PROG} mcp needs a command: list, resources, login or logout "
            f"(see {PROG} mcp --help)"
        )
        return EXIT_USAGE
    import dataclasses
    from pathlib import Path

    from ._trust_cmd import verdict_for

    opts = options_from_args(ns)
    # An untrusted workspace's servers are neither started nor have their ${VAR}s expanded.
    opts = dataclasses.replace(opts, trusted=verdict_for(Path(opts.workspace or ".")).trusted)
    if ns.mcp_command in ("login", "logout"):
        return _login_main(ns, opts)
    if _no_servers(opts):
        # Nothing to start: answered at once, without the MCP SDK or an event loop (loading
        # them is most of a second on a busy machine).
        if ns.json:
            print(json.dumps({"servers": []}))
        else:
            print(NO_SERVERS)
        return EXIT_OK
    setup_logging(opts.debug)
    if ns.mcp_command == "resources":
        return run_command(lambda: list_resources(opts, as_json=ns.json), debug=opts.debug)
    return run_command(lambda: list_servers(opts, as_json=ns.json), debug=opts.debug)


NO_SERVERS = "no MCP servers configured (.mcp.json, --mcp-config)"


def _no_servers(opts: RunOptions) -> bool:
    """Whether *opts* configure no MCP server (``--no-mcp``, or no server in any file). A bad
    file or workspace is left to :func:`list_servers`, which reports it as a run does."""
    if not opts.mcp.enabled:
        return True
    from pathlib import Path

    from runtime.core import ConfigError
    from runtime.mcp import load_mcp_config

    try:
        config = load_mcp_config(
            opts.mcp.config,
            optional=[Path(opts.workspace or ".") / ".mcp.json"],
            on_warning=lambda _: None,  # said by the full command, once
        )
    except ConfigError:
        return False
    return not config.servers


@contextlib.asynccontextmanager
async def started_servers(
    opts: RunOptions, on_warning: Callable[[str], None]
) -> AsyncGenerator[Any]:
    """The MCP servers of *opts* (``.mcp.json``, ``--mcp-config``), started as a run starts
    them, all at once; closed on exit. Warnings (a server that did not start, a tool skipped)
    go to *on_warning*.

    Cancellation: closes every server (their processes do not outlive the block).
    """
    from pathlib import Path

    import attrs

    from runtime.core import ConfigError, Secrets, filter_env, run_environ, secret_values
    from runtime.mcp import open_mcp_servers

    from ._options import load_mcp_options

    workspace = Path(opts.workspace or ".")
    if not workspace.is_dir():  # noqa: ASYNC240 - once, before anything runs
        raise ConfigError(f"workspace {str(workspace)!r} is not a folder")
    config = load_mcp_options(opts)
    config = attrs.evolve(config, on_warning=on_warning)
    env = run_environ()
    async with open_mcp_servers(
        config,
        env=filter_env(env),
        environ=env,
        workspace=workspace.resolve(),  # noqa: ASYNC240 - once, before anything runs
        secrets=Secrets(secret_values(env)),
    ) as servers:
        yield servers


async def mcp_tool_names(opts: RunOptions) -> list[str]:
    """The names of the tools the MCP servers of *opts* give a run (``mcp__SERVER__TOOL``);
    a server that does not start gives none, with a warning line on stderr as a run gives."""
    async with started_servers(opts, warning_line) as servers:
        return [tool.name for tool in servers.tools]


async def list_servers(opts: RunOptions, *, as_json: bool) -> int:
    """Start the servers of *opts*, print them, close them; returns the exit code.

    Cancellation: closes every server (their processes do not outlive the command).
    """
    from runtime.mcp import McpTool

    # Start failures are in the listing itself; other warnings (a tool skipped) go to stderr.
    warnings: list[str] = []
    async with started_servers(opts, warnings.append) as servers:
        by_server: dict[str, list[Any]] = {name: [] for name in servers.servers}
        for tool in servers.tools:
            if isinstance(tool, McpTool):  # not the resource tools: they belong to no server
                by_server[tool.server.name].append(tool)
        rows: list[dict[str, Any]] = [
            {
                "name": name,
                "status": "ok" if server.state == "ready" else "failed",
                "transport": server.transport,
                "source": server.config.source,
                "error": server.error,
                "tools": [
                    {
                        "name": t.name,
                        "description": _first_line(t.description),
                        "read_only": t.read_only,
                    }
                    for t in by_server[name]
                ],
                **_resource_rows(server),
                "prompts": [
                    {
                        "name": p.name,
                        "command": f"/mcp__{name}__{p.name}",
                        "description": _first_line(p.description or ""),
                        "arguments": [
                            {"name": a.name, "required": bool(a.required)}
                            for a in (p.arguments or [])
                        ],
                    }
                    for p in server.prompts
                ],
            }
            for name, server in servers.servers.items()
        ]
    for line in warnings:
        if not any(line.startswith(f"mcp server {r['name']!r} did not start") for r in rows):
            print(f"{PROG}: warning: {visible(line, layout=False)}", file=sys.stderr)
    if as_json:  # JSON escapes every control character itself
        print(json.dumps({"servers": rows}, ensure_ascii=False))
    elif not rows:
        print(NO_SERVERS)
    else:
        # Names, descriptions and errors are the servers' words: shown, never obeyed.
        for row in rows:
            head = f"{row['name']}  {row['status']}  {row['transport']}"
            if row["status"] == "ok":
                counts = f"{len(row['tools'])} tools"
                for key in ("resources", "resource_templates", "prompts"):
                    if row[key]:
                        counts += f", {len(row[key])} {key.replace('_', ' ')}"
                print(visible(f"{head}  {counts}", layout=False))
            else:
                print(visible(f"{head}  {row['error']}", layout=False))
            for tool in row["tools"]:
                print(visible(f"  {tool['name']}  {tool['description']}", layout=False))
            _print_extras(row)
    return EXIT_FAILED if any(r["status"] != "ok" for r in rows) else EXIT_OK


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def _resource_rows(server: Any) -> dict[str, list[dict[str, Any]]]:
    return {
        "resources": [
            {"uri": r.uri, "name": r.name, "mime_type": r.mime_type, "size": r.size}
            for r in server.resources
        ],
        "resource_templates": [
            {"uri_template": t.uri_template, "name": t.name, "mime_type": t.mime_type}
            for t in server.resource_templates
        ],
    }


def _print_extras(row: dict[str, Any]) -> None:
    """A server's resources, templates and prompts under its tools (names only: the servers'
    words, shown, never obeyed)."""
    name = row["name"]
    for res in row["resources"]:
        print(visible(f"  @{name}:{res['uri']}  {res['name']}", layout=False))
    for tpl in row["resource_templates"]:
        print(visible(f"  @{name}:{tpl['uri_template']}  {tpl['name']} (template)", layout=False))
    for prompt in row["prompts"]:
        args = " ".join(
            a["name"] if a["required"] else f"[{a['name']}]" for a in prompt["arguments"][:20]
        )
        if len(prompt["arguments"]) > 20:
            args += f" … ({len(prompt['arguments'])} arguments)"
        print(visible(f"  {prompt['command']} {args}".rstrip(), layout=False))


async def list_resources(opts: RunOptions, *, as_json: bool) -> int:
    """``trio-agents mcp resources``: start the servers of *opts*, print their resources and
    resource templates, close them; returns the exit code (as :func:`list_servers`).

    Cancellation: closes every server.
    """
    warnings: list[str] = []
    async with started_servers(opts, warnings.append) as servers:
        rows = [
            {
                "name": name,
                "status": "ok" if server.state == "ready" else "failed",
                "error": server.error,
                **_resource_rows(server),
            }
            for name, server in servers.servers.items()
        ]
    if as_json:
        print(json.dumps({"servers": rows}, ensure_ascii=False))
    else:
        for row in rows:
            if row["status"] != "ok":
                print(visible(f"{row['name']}  failed  {row['error']}", layout=False))
                continue
            for res in row["resources"]:
                mime = f"  {res['mime_type']}" if res["mime_type"] else ""
                print(visible(f"@{row['name']}:{res['uri']}  {res['name']}{mime}", layout=False))
            for tpl in row["resource_templates"]:
                line = f"@{row['name']}:{tpl['uri_template']}  {tpl['name']} (template)"
                print(visible(line, layout=False))
        if not any(r["resources"] or r["resource_templates"] for r in rows):
            print("no MCP server offers resources")
    return EXIT_FAILED if any(r["status"] != "ok" for r in rows) else EXIT_OK
# -- mcp login / mcp logout (docs/mcp-oauth.md) ----------------------------------------------


def _add_login_parsers(commands: Any) -> None:
    login = commands.add_parser(
        "login",
        help="log in to a remote MCP server (OAuth in the browser); the tokens are kept 0600",
        description="Log in to the remote (HTTP) MCP server NAME with OAuth: the authorization "
        "URL is opened in the system browser (and printed), the browser comes back to a "
        "loopback address, and the tokens are kept, 0600, in the user's config folder, for "
        "every run to use and refresh. Exit 0 logged in, 1 the login failed, 2 no such server.",
    )
    logout = commands.add_parser(
        "logout",
        help="forget the OAuth login of a remote MCP server",
        description="Forget the stored OAuth tokens of the MCP server NAME (this computer's "
        "copy; the authorization server may still list the grant). Exit 0, 2 no such server.",
    )
    for parser in (login, logout):
        parser.add_argument("name", metavar="NAME", help="the server's name in .mcp.json")
        parser.add_argument(
            "--workspace", metavar="DIR", help="where .mcp.json is read (default: here)"
        )
        parser.add_argument("--debug", action="store_true", help="debug logs and tracebacks")
        add_mcp_options(parser)
    login.add_argument(
        "--no-browser",
        action="store_true",
        help="only print the authorization URL (to open on any computer that reaches this one)",
    )


def _login_main(ns: argparse.Namespace, opts: RunOptions) -> int:
    from runtime.core import ConfigError, run_environ
    from runtime.mcp import McpLoginError, TokenStore, store_dir, wants_oauth

    from ._options import load_mcp_options

    setup_logging(opts.debug)
    try:
        # Trust as a run has it: an untrusted workspace's own servers are not in the list
        # (one warning line says so), so no login to a URL the repository chose starts.
        config = load_mcp_options(opts)
        server = next((s for s in config.servers if s.name == ns.name), None)
        if server is None:
            names = ", ".join(s.name for s in config.servers) or "none"
            error_line(f"no MCP server named {ns.name!r} (configured: {names})")
            return EXIT_USAGE
        env = run_environ()
        server, _ = server.expanded(env)
    except ConfigError as exc:
        error_line(str(exc))
        return EXIT_USAGE
    if not wants_oauth(server):
        what = (
            "sets its own Authorization header"
            if server.transport == "http"
            else (f"is a {server.transport} server")
        )
        error_line(f"mcp server {server.name!r} {what}: it has no OAuth login")
        return EXIT_USAGE
    folder = store_dir(env)
    if ns.mcp_command == "logout":
        if TokenStore(server.url, folder).delete():
            print(f"logged out of mcp server {server.name!r}")
        else:
            print(f"mcp server {server.name!r} had no login")
        return EXIT_OK

    async def login_main() -> int:
        from runtime.mcp import LOGIN_TIMEOUT_S, browser_available, login

        browser = not ns.no_browser and browser_available(env)

        def show(url: str) -> None:
            how = "opening" if browser else "open"
            print(
                visible(
                    f"{how} this URL in a browser to log in to mcp server {server.name!r}:",
                    layout=False,
                ),
                file=sys.stderr,
            )
            print(visible(url, layout=False), file=sys.stderr, flush=True)

        try:
            with _login_deadline(LOGIN_TIMEOUT_S):
                asked = await login(server, folder=folder, show_url=show, open_browser=browser)
        except McpLoginError as exc:
            error_line(str(exc))
            return EXIT_FAILED
        if asked:
            print(f"logged in to mcp server {server.name!r}")
        else:
            print(f"mcp server {server.name!r} answered without a login: nothing to keep")
        return EXIT_OK

    return run_command(login_main, debug=opts.debug)


@contextlib.contextmanager
def _login_deadline(seconds: float) -> Any:
    import trio

    from runtime.mcp import McpLoginError

    with trio.move_on_after(seconds) as scope:
        yield
    if scope.cancelled_caught:
        raise McpLoginError(f"the login did not finish within {seconds:g} s")
