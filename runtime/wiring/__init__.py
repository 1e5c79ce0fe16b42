"""From strings to objects: :func:`~runtime.open_runtime` assembles a run.

It turns a provider name, a scenario, agent-type files, permission rules and limits into the
objects of :mod:`runtime.core`, picks the built-in :mod:`tools`, opens the trace sinks of
:mod:`runtime.trace` and the Ray placement of :mod:`runtime.cluster`, and builds the
:class:`~runtime.core._context.RunContext` the agents share. The command line stands on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime._lazy import lazy_exports

if TYPE_CHECKING:
    from ._open import RunConfig as RunConfig
    from ._open import open_run as open_run
    from ._open import tool_name_known as tool_name_known

_LAZY: dict[str, str] = {
    "RunConfig": "._open",
    "open_run": "._open",
    "tool_name_known": "._open",
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
