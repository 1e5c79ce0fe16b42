"""The core layer: the agent loop and everything it stands on.

Events and the bus (the one flat stream), the loop and its run context, messages, the provider
protocol, limits and budgets, permissions and approvals, agent types, secrets, the errors, the
:class:`Runtime` handle, and the tool interface every tool implements. It imports only
:mod:`runtime.actors` below it; providers, tools, the trace, the cluster and the command line
stand on it (docs/architecture.md, "Layers").

Names are imported on first use (PEP 562): ``import runtime.core._events`` stays cheap for the
trace reader, which needs the events and not the loop.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runtime._logs import get_logger as get_logger

    from ._approvals import show_input as show_input
    from ._errors import AgentsError as AgentsError
    from ._errors import ConfigError as ConfigError
    from ._errors import ToolError as ToolError
    from ._errors import ToolInputError as ToolInputError
    from ._globs import Glob as Glob
    from ._globs import compile_glob as compile_glob
    from ._globs import escape_glob as escape_glob
    from ._names import publish_names as publish_names
    from ._sandbox import Sandbox as Sandbox
    from ._secrets import Redactor as Redactor
    from ._secrets import redact_log_event as redact_log_event
    from ._termtext import visible as visible
    from ._termtext import visible_strings as visible_strings
    from ._tool import SubAgentSpawner as SubAgentSpawner
    from ._tool import TargetKind as TargetKind
    from ._tool import Tool as Tool
    from ._tool import ToolContext as ToolContext
    from ._tool import ToolLimits as ToolLimits
    from ._tool import one_line as one_line
    from ._tool import validate_input as validate_input
    from ._workspace import RUNTIME_DIR as RUNTIME_DIR
    from ._workspace import Located as Located
    from ._workspace import is_inside as is_inside
    from ._workspace import is_runtime_path as is_runtime_path
    from ._workspace import locate as locate
    from ._workspace import normalise_target as normalise_target
    from ._workspace import relative as relative
    from ._workspace import resolve_in_workspace as resolve_in_workspace

_LAZY: dict[str, str] = {
    "RUNTIME_DIR": "._workspace",
    "Located": "._workspace",
    "AgentsError": "._errors",
    "ConfigError": "._errors",
    "Redactor": "._secrets",
    "Sandbox": "._sandbox",
    "SubAgentSpawner": "._tool",
    "TargetKind": "._tool",
    "Tool": "._tool",
    "ToolContext": "._tool",
    "ToolError": "._errors",
    "ToolInputError": "._errors",
    "ToolLimits": "._tool",
    "Glob": "._globs",
    "compile_glob": "._globs",
    "escape_glob": "._globs",
    "get_logger": "runtime._logs",
    "is_inside": "._workspace",
    "is_runtime_path": "._workspace",
    "locate": "._workspace",
    "normalise_target": "._workspace",
    "one_line": "._tool",
    "publish_names": "._names",
    "show_input": "._approvals",
    "visible": "._termtext",
    "visible_strings": "._termtext",
    "redact_log_event": "._secrets",
    "relative": "._workspace",
    "resolve_in_workspace": "._workspace",
    "validate_input": "._tool",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'runtime.core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return list(__all__)
