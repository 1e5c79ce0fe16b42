"""The registry: every live node id mapped to its cancel scope.

A cancel reaches exactly the subtree under the node it names.

Nodes form a tree (each knows its parent), mirroring the task tree: cancelling a node's scope
cancels every task nested inside it, and :meth:`Registry.cancel_reason` lets a node that was
cancelled from above learn why.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from typing import Any, Protocol

import attrs


class Cancellable(Protocol):
    """What a node's scope must do: be cancelled, with a reason.

    :class:`trio.CancelScope` is one; a placement that runs a node elsewhere (a Ray host)
    registers a proxy that forwards the cancel.
    """

    def cancel(self, reason: str | None = None) -> None:
        """Cancel what this scope covers; may be called from any task, more than once."""
        ...


@attrs.define(eq=False, kw_only=True)
class Node:
    """One live node.

    Attributes:
        data: opaque payload for the registry's user (the runtime keeps who owns the node).
        cancel_reason: set when this node itself was cancelled.
        cancel_by: who asked (free-form label, e.g. ``user`` or ``budget``).
        stop_reason: set when this node itself was asked to stop gracefully (its subtree
            finishes what is under way and starts nothing new; the runtime decides what that
            means, docs/collaboration.md).
        stop_by: who asked for the stop.
    """

    id: str
    scope: Cancellable
    parent: Node | None = None
    data: Any = None
    cancel_reason: str | None = None
    cancel_by: str | None = None
    stop_reason: str | None = None
    stop_by: str | None = None


class Registry:
    """Maps node ids to live nodes. Synchronous; safe to use from any task."""

    def __init__(self) -> None:
        self._nodes: dict[str, Node] = {}
        self.stopping = False
        """Whether any node was ever asked to stop: until one is, :meth:`stop_reason` is
        ``(None, None)`` for every node and its callers may skip it (an agent asks before
        each turn)."""

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._nodes

    def get(self, node_id: str) -> Node | None:
        """The live node *node_id*, or ``None``."""
        return self._nodes.get(node_id)

    def ids(self) -> list[str]:
        """Every live node id, in registration order."""
        return list(self._nodes)

    def register(
        self,
        node_id: str,
        scope: Cancellable,
        *,
        parent_id: str | None = None,
        data: Any = None,
    ) -> Node:
        """Add a live node.

        Raises:
            ValueError: *node_id* is already live (ids must be unique in a run).
        """
        if node_id in self._nodes:
            raise ValueError(f"node id {node_id!r} is already live")
        parent = self._nodes.get(parent_id) if parent_id is not None else None
        node = Node(id=node_id, scope=scope, parent=parent, data=data)
        self._nodes[node_id] = node
        return node

    def unregister(self, node_id: str) -> None:
        """Forget *node_id* (a finished node). Unknown ids are ignored."""
        self._nodes.pop(node_id, None)

    @contextmanager
    def registered(
        self,
        node_id: str,
        scope: Cancellable,
        *,
        parent_id: str | None = None,
        data: Any = None,
    ) -> Generator[Node, None, None]:
        """Register for the duration of a ``with`` block."""
        node = self.register(node_id, scope, parent_id=parent_id, data=data)
        try:
            yield node
        finally:
            self.unregister(node_id)

    def cancel(self, node_id: str, reason: str, *, by: str | None = None) -> bool:
        """Cancel the subtree under *node_id*.

        Returns:
            ``False`` (and changes nothing) when the id is unknown or already finished.
        """
        node = self._nodes.get(node_id)
        if node is None:
            return False
        if node.cancel_reason is None:
            node.cancel_reason = reason
            node.cancel_by = by
        node.scope.cancel(reason=reason)
        return True

    def stop(self, node_id: str, reason: str, *, by: str | None = None) -> bool:
        """Mark the subtree under *node_id* as stopping: nothing is cancelled; the nodes under
        it read :meth:`stop_reason` at the points where they would start new work.

        Returns:
            ``False`` (and changes nothing) when the id is unknown or already finished.
        """
        node = self._nodes.get(node_id)
        if node is None:
            return False
        if node.stop_reason is None:
            node.stop_reason = reason
            node.stop_by = by
        self.stopping = True
        return True

    @staticmethod
    def stop_reason(node: Node) -> tuple[str | None, str | None]:
        """Why *node* is stopping: its own stop's reason, else its nearest stopped ancestor's."""
        cur: Node | None = node
        while cur is not None:
            if cur.stop_reason is not None:
                return cur.stop_reason, cur.stop_by
            cur = cur.parent
        return None, None

    @staticmethod
    def is_under(node: Node, ancestor: Node) -> bool:
        """Whether *node* is *ancestor* or lies in its subtree."""
        cur: Node | None = node
        while cur is not None:
            if cur is ancestor:
                return True
            cur = cur.parent
        return False

    @staticmethod
    def cancel_reason(node: Node) -> tuple[str | None, str | None]:
        """Why *node* was cancelled: its own reason, else its nearest cancelled ancestor's."""
        cur: Node | None = node
        while cur is not None:
            if cur.cancel_reason is not None:
                return cur.cancel_reason, cur.cancel_by
            cur = cur.parent
        return None, None
