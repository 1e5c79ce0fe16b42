"""A bounded mailbox: the commands an actor receives."""

from __future__ import annotations

from typing import Generic, TypeVar

import trio

T = TypeVar("T")


class Mailbox(Generic[T]):
    """A bounded FIFO of commands for one actor.

    Senders get backpressure (:meth:`send` waits) or a refusal (:meth:`send_nowait` raises
    :class:`trio.WouldBlock`); the actor drains it at points of its choosing.
    """

    def __init__(self, size: int = 16) -> None:
        if size < 1:
            raise ValueError("a mailbox holds at least one command")
        self._send, self._recv = trio.open_memory_channel[T](size)
        self.size = size

    async def send(self, command: T) -> None:
        """Deliver *command*, waiting while the mailbox is full.

        Raises:
            trio.ClosedResourceError: the actor has finished.

        Cancellation: a checkpoint; a cancelled send delivers nothing.
        """
        try:
            await self._send.send(command)
        except trio.BrokenResourceError as exc:
            raise trio.ClosedResourceError("the actor has finished") from exc

    def send_nowait(self, command: T) -> None:
        """Deliver *command* now.

        Raises:
            trio.WouldBlock: the mailbox is full.
            trio.ClosedResourceError: the actor has finished.
        """
        try:
            self._send.send_nowait(command)
        except trio.BrokenResourceError as exc:
            raise trio.ClosedResourceError("the actor has finished") from exc

    async def receive(self) -> T:
        """The next command, waiting for one. Cancellation: a checkpoint; nothing is lost."""
        return await self._recv.receive()

    def drain(self) -> list[T]:
        """Every command waiting now, oldest first, without blocking."""
        out: list[T] = []
        while True:
            try:
                out.append(self._recv.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return out

    def pending(self) -> int:
        """How many commands are waiting."""
        return self._recv.statistics().current_buffer_used

    def close(self) -> None:
        """Refuse further commands (the actor is finishing)."""
        self._recv.close()
