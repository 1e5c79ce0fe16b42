"""The cluster layer: sub-agent subtrees placed on Ray (docs/cluster.md).

``_placement`` runs on the driver: the asyncio bridge that awaits Ray from trio, the pool of host
actors and the pump that forwards a remote subtree's events into the run's bus. ``_host`` runs in
a Ray worker: a trio guest loop that runs the unchanged agent loop for each subtree sent to it.
It stands on :mod:`runtime.core`, :mod:`runtime.providers` and :mod:`tools`.
"""
