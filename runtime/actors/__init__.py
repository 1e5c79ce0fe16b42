"""Actor primitives: spawn, mailbox, supervision, registry, subtree cancel.

Generic: nothing here knows about models or tools.
"""

from __future__ import annotations

from ._actor import ActorContext as ActorContext
from ._actor import ActorExit as ActorExit
from ._actor import ActorHandle as ActorHandle
from ._actor import run_actor as run_actor
from ._actor import start_actor as start_actor
from ._actor import start_actor_soon as start_actor_soon
from ._mailbox import Mailbox as Mailbox
from ._registry import Node as Node
from ._registry import Registry as Registry

__all__ = sorted(
    [
        "ActorContext",
        "ActorExit",
        "ActorHandle",
        "Mailbox",
        "Node",
        "Registry",
        "run_actor",
        "start_actor",
        "start_actor_soon",
    ]
)
