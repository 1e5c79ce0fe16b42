"""MCP servers as tools (docs/mcp.md): configuration, the server actors, the tools.

Servers are configured in Claude Code's ``.mcp.json`` format (:func:`load_mcp_config`,
:class:`McpConfig`); :func:`open_mcp_servers` starts them all at once and keeps one connection
per server for a run; their tools are named ``mcp__SERVER__TOOL``. This layer stands on
:mod:`runtime.core` (the tool interface, errors) and the ``mcp`` SDK; :mod:`runtime.wiring`
opens it for a run and :mod:`runtime.cli` lists it (``trio-agents mcp list``).

Names are imported on first use (PEP 562): reading a configuration does not load the SDK, so a
run without MCP servers never pays for it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._config import DEFAULT_START_TIMEOUT_S as DEFAULT_START_TIMEOUT_S
    from ._config import McpConfig as McpConfig
    from ._config import McpServerConfig as McpServerConfig
    from ._config import load_mcp_config as load_mcp_config
    from ._oauth import LOGIN_TIMEOUT_S as LOGIN_TIMEOUT_S
    from ._oauth import McpLoginError as McpLoginError
    from ._oauth import browser_available as browser_available
    from ._oauth import login as login
    from ._oauth import wants_oauth as wants_oauth
    from ._oauth_store import TokenStore as TokenStore
    from ._oauth_store import store_dir as store_dir
    from ._server import McpServer as McpServer
    from ._server import McpServers as McpServers
    from ._server import open_mcp_servers as open_mcp_servers
    from ._tool import McpTool as McpTool
    from ._tool import render_result as render_result
    from ._tool import tool_name as tool_name

_LAZY: dict[str, str] = {
    "DEFAULT_START_TIMEOUT_S": "._config",
    "McpConfig": "._config",
    "McpServer": "._server",
    "McpServerConfig": "._config",
    "McpServers": "._server",
    "McpTool": "._tool",
    "load_mcp_config": "._config",
    "open_mcp_servers": "._server",
    "render_result": "._tool",
    "tool_name": "._tool",
    # OAuth for remote servers (docs/mcp-oauth.md)
    "LOGIN_TIMEOUT_S": "._oauth",
    "McpLoginError": "._oauth",
    "TokenStore": "._oauth_store",
    "browser_available": "._oauth",
    "login": "._oauth",
    "store_dir": "._oauth_store",
    "wants_oauth": "._oauth",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'runtime.mcp' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return list(__all__)
