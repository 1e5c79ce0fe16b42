"""Helpers for the tool tests: a ToolContext, a validated call, process checks."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil
import structlog
import trio

from tools import Tool, ToolContext, ToolLimits, validate_input


def make_ctx(
    workspace: Path, *, env: Mapping[str, str] | None = None, **limits: Any
) -> ToolContext:
    """A context for one call in *workspace*; *limits* override :class:`ToolLimits` fields."""
    return ToolContext(
        workspace=workspace.resolve(),
        agent_id="agent-test",
        tool_use_id="call-test",
        depth=0,
        env=dict(os.environ) if env is None else dict(env),
        limits=ToolLimits(**limits),
        log=structlog.get_logger(),
    )


async def call(tool: Tool, args: Mapping[str, Any], ctx: ToolContext) -> str:
    """Validate *args* against the tool's schema (as the runtime does), then call the tool."""
    validate_input(tool, dict(args))
    return await tool.call(args, ctx)


def is_running(pid: int) -> bool:
    """Whether *pid* is a live process (a zombie is dead: it only waits to be reaped)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def running_in_group(pgid: int) -> list[int]:
    """Pids of the live (non-zombie) processes in process group *pgid*."""
    found = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return found


async def read_fifo(path: Path) -> str:
    """Wait for a writer on the FIFO *path* and return what it wrote (bound with fail_after)."""

    def read() -> str:
        with path.open() as fh:
            return fh.read()

    return await trio.to_thread.run_sync(read, abandon_on_cancel=True)
