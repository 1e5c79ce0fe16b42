"""The cluster layer: sub-agent subtrees placed on Ray (docs/cluster.md).

``_placement`` runs on the driver: the asyncio bridge that awaits Ray from trio, the pool of host
actors and the pump that forwards a remote subtree's events into the run's bus. ``_host`` runs in
a Ray worker: a trio guest loop that runs the unchanged agent loop for each subtree sent to it.
It stands on :mod:`runtime.core`, :mod:`runtime.providers` and :mod:`tools`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime._lazy import lazy_exports

if TYPE_CHECKING:
    from ._placement import RayOptions as RayOptions
    from ._placement import open_ray_placement as open_ray_placement

_LAZY: dict[str, str] = {
    "RayOptions": "._placement",
    "open_ray_placement": "._placement",
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
