"""A long-lived child process (an MCP server) guarded as a ``bash`` call is.

:func:`open_guarded_process` starts it in its own session with a tag in its environment, has the
warden (``tools/_warden.py``) guard the tag before the process exists and its group once it
does, and at the end of the block stops the group and every tagged process that left it with
``setsid`` — the same code that stops a bash call's processes (``tools/_bash.py``). If this
process dies first, the warden ends them (docs/mcp.md, "Each server is an actor of the run").
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

import trio

from ._bash import _ProcessGroup
from ._warden import CALL_TAG_VAR, warden

__all__ = ["open_guarded_process"]


@contextlib.asynccontextmanager
async def open_guarded_process(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    grace_s: float,
    **popen: Any,
) -> AsyncGenerator[trio.Process, None]:
    """Start *argv* in its own session, guarded as a bash call is, and stop all of it at the end.

    The process and everything it starts carry a fresh tag (``CALL_TAG_VAR``); the warden knows
    the tag before the process exists and its group once it does, so if this process dies (kill
    -9, the OOM killer) the warden ends them. Leaving the block (normally, by an error, or
    cancelled) stops the group (SIGTERM, then SIGKILL after *grace_s*) and every tagged process
    that left it with ``setsid``, then reaps the process.

    Args:
        popen: passed to :func:`trio.lowlevel.open_process` (``stdin``, ``stdout``, ``stderr``).

    Raises:
        OSError: the command cannot be started.

    Cancellation: the stop at the end is shielded and bounded (a few times *grace_s*).
    """
    tag = secrets.token_hex(8)
    guard = warden()
    if not guard.started:
        await trio.to_thread.run_sync(guard.start)
    guard.guard_call(tag)
    try:
        proc = await trio.lowlevel.open_process(
            list(argv), env={**env, CALL_TAG_VAR: tag}, cwd=cwd, start_new_session=True, **popen
        )
        group = _ProcessGroup(proc, tag)
        guard.guard(group.pgid)
        try:
            yield proc
        finally:
            try:
                with trio.move_on_after(3 * grace_s + 1.0, shield=True):
                    await group.stop(grace_s)
            finally:
                guard.release(group.pgid)  # before the reap: the number is still its group's
                with trio.move_on_after(1.0, shield=True):
                    await group.reap()
                group.close()
    finally:
        guard.release_call(tag)
