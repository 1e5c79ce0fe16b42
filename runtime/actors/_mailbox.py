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
        self.size = size
        # The channel is made on first use: most actors never get a command, and a run may have
        # ten thousand of them alive, checking their mailbox at every turn.
        self._channel: tuple[trio.MemorySendChannel[T], trio.MemoryReceiveChannel[T]] | None = None
        self._closed = False

    def _open(self) -> tuple[trio.MemorySendChannel[T], trio.MemoryReceiveChannel[T]]:
        if self._channel is None:
            self._channel = trio.open_memory_channel[T](self.size)
            if self._closed:
                self._channel[1].close()
        return self._channel

    async def send(self, command: T) -> None:
        """Deliver *command*, waiting while the mailbox is full.

        Raises:
            trio.ClosedResourceError: the actor has finished.

        Cancellation: a checkpoint; a cancelled send delivers nothing.
        """
        try:
            await self._open()[0].send(command)
        except trio.BrokenResourceError as exc:
            raise trio.ClosedResourceError("the actor has finished") from exc

    def send_nowait(self, command: T) -> None:
        """Deliver *command* now.

        Raises:
            trio.WouldBlock: the mailbox is full.
            trio.ClosedResourceError: the actor has finished.
        """
        try:
            self._open()[0].send_nowait(command)
        except trio.BrokenResourceError as exc:
            raise trio.ClosedResourceError("the actor has finished") from exc

    async def receive(self) -> T:
        """The next command, waiting for one. Cancellation: a checkpoint; nothing is lost."""
        return await self._open()[1].receive()

    def drain(self) -> list[T]:
        """Every command waiting now, oldest first, without blocking."""
        out: list[T] = []
        if not self.pending():
            return out
        recv = self._open()[1]
        while True:
            try:
                out.append(recv.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return out

    def pending(self) -> int:
        """How many commands are waiting."""
        if self._channel is None:
            return 0
        return self._channel[1].statistics().current_buffer_used

    def close(self) -> None:
        """Refuse further commands (the actor is finishing)."""
        self._closed = True
        if self._channel is not None:
            self._channel[1].close()
