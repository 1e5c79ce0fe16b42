"""What a run is asked for: :class:`RunConfig`, the one object :func:`~runtime.open_runtime`'s
keyword arguments build and the command line builds from its options.

Set-up is three steps (docs/architecture.md#set-up-configuration-plan-open)::

    RunConfig  ──plan_run──▶  RunPlan  ──open_run──▶  Runtime
    (what was asked)          (what the run will be:   (provider, MCP servers, Ray, the bus
                               checked, nothing open)   and its sinks opened; the run nursery)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, BinaryIO

import attrs

from runtime.core._config import SCHEMA

if TYPE_CHECKING:
    from runtime.cluster._placement import RayOptions
    from runtime.core._agent_types import AgentType
    from runtime.core._limits import Limits
    from runtime.core._provider import Provider
    from runtime.core._sandbox import Sandbox
    from runtime.core._tool import ToolLimits
    from runtime.mcp import McpConfig
    from runtime.project import Project
    from runtime.providers._scenario import Scenario
    from tools import Tool


def _tuple(value: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(value)


def _optional_tuple(value: Iterable[Any] | None) -> tuple[Any, ...] | None:
    return None if value is None else tuple(value)


@attrs.frozen(kw_only=True)
class RunConfig:
    """A run's configuration: exactly :func:`~runtime.open_runtime`'s parameters (their meaning
    is documented there; a test keeps the two equal, names and defaults). Iterables are kept
    as tuples, so a configuration can be planned more than once."""

    provider: Provider | str | None = None
    scenario: Scenario | str | os.PathLike[str] | Mapping[str, Any] | None = None
    model: str | None = None
    agent_types: tuple[AgentType, ...] = attrs.field(default=(), converter=_tuple)
    tools: tuple[Tool, ...] | None = attrs.field(default=None, converter=_optional_tuple)
    extra_tools: tuple[Tool, ...] = attrs.field(default=(), converter=_tuple)
    workspace: str | os.PathLike[str] = "."
    trace: str | os.PathLike[str] | bool = True
    json_out: BinaryIO | None = None
    limits: Limits | None = None
    tool_limits: ToolLimits | None = None
    permission_mode: str = "deny"
    allow: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    deny: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    permission_timeout_s: float = SCHEMA["permissions.timeout_s"].default
    env: Mapping[str, str] | None = None
    allow_env: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    run_id: str | None = None
    on_event: Callable[[Any], None] | None = None
    ray_address: str | None = None
    mcp_servers: McpConfig | Mapping[str, Any] | None = None
    project: Project | None = None
    trace_dir: str | os.PathLike[str] | None = None
    sandbox: Sandbox | bool = False
    ray: RayOptions | None = None
