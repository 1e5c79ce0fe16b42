"""How the ``ray`` placement names a lost host, without a cluster: Ray reports the actors of a
killed node as merely "unavailable" and marks the node dead only after its health checks fail,
so the placement asks the node's raylet itself (a real socket on loopback here)."""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing

from runtime.cluster._placement import (
    _RAYLET_PROBE_S,
    _Host,
    _loss_reason,
    _Node,
    _raylet_answers,
)


class ActorUnavailableError(Exception):
    """Ray's wording when a killed node's actor is asked for its next item."""


_UNAVAILABLE = ActorUnavailableError(
    "The actor 800eba64 is unavailable: The actor is temporarily unavailable: RpcError: "
    "RPC error: Socket closed rpc_code: 14."
)


def _node(port: int | None) -> _Node:
    raylet = ("127.0.0.1", port) if port is not None else None
    return _Node(node_id="ab" * 28, cpus=1.0, resources={}, labels={}, raylet=raylet)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def _verdict(node: _Node) -> str:
    host = _Host("h3", node)
    return _loss_reason(host, _UNAVAILABLE, await _raylet_answers(node))


async def test_a_node_whose_raylet_refuses_connections_is_lost() -> None:
    reason = await _verdict(_node(_closed_port()))
    assert reason.startswith("node lost: ray host h3 (node abababab): ActorUnavailableError")


async def test_a_worker_that_died_on_a_live_node_is_named_so() -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    with listener:
        reason = await _verdict(_node(listener.getsockname()[1]))
    assert reason.startswith("worker died: ray host h3")


async def test_a_raylet_that_does_not_answer_in_time_counts_as_lost(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def never(*_: object) -> None:  # a partitioned network: the SYN goes unanswered
        await trio.sleep_forever()

    monkeypatch.setattr(trio, "open_tcp_stream", never)
    before = trio.current_time()
    assert not await _raylet_answers(_node(_closed_port()))
    assert trio.current_time() - before == pytest.approx(_RAYLET_PROBE_S)


async def test_without_a_raylet_address_the_node_list_decides() -> None:
    assert await _raylet_answers(_node(None))
