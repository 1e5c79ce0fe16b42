"""The bare-trio floors: each benchmark's shape written directly in trio, doing only the
unavoidable work, so a ratio against it measures the runtime's own overhead.

The unavoidable work of a multi-agent run is: one task per agent, in a nursery; every event the
runtime emits for that agent, built as a plain dict with the same fields, sent through a bounded
trio memory channel; one consumer that gives each event its ``seq`` and JSON-encodes it (orjson,
as the runtime does) into a file. Nothing else: no provider, no tools, no history, no registry.

Every floor takes the runtime's own events (as dicts, from a run of the same scenario) so the
counts, the fields and the sizes of what it encodes are exactly the runtime's.
"""

from __future__ import annotations

import gc
import itertools
import math
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import orjson
import trio
import trio.testing

Dicts = Sequence[dict[str, Any]]

# The channel between the agents and the consumer. Bounded, as the house style asks; large
# enough that producers rarely wait, which makes the floor lower (stricter), not higher.
CHANNEL_SIZE = 1024


async def _consume(
    recv: trio.MemoryReceiveChannel[dict[str, Any]], out: IO[bytes] | None
) -> int:
    """The one consumer: seq at the merge point, then JSON-encode into the file (when there
    is one: a run with the trace off encodes nothing)."""
    seq = itertools.count(1)
    count = 0
    async with recv:
        async for event in recv:
            event["seq"] = next(seq)
            if out is not None:
                out.write(orjson.dumps(event, option=orjson.OPT_APPEND_NEWLINE))
            count += 1
    return count


async def _send_all(send: trio.MemorySendChannel[dict[str, Any]], events: Dicts) -> None:
    for template in events:
        await send.send({**template, "ts": time.time()})


async def tree_floor(
    root_before: Dicts, children: Sequence[Dicts], root_after: Dicts, path: Path
) -> float:
    """A root task and one task per child in a nursery, each sending its events.

    Returns the wall time in seconds, from opening the trace file to its close.
    """
    t0 = time.perf_counter()
    send, recv = trio.open_memory_channel[dict[str, Any]](CHANNEL_SIZE)
    with path.open("wb") as out:

        async def child(events: Dicts, send: trio.MemorySendChannel[dict[str, Any]]) -> None:
            async with send:
                await _send_all(send, events)

        async with trio.open_nursery() as outer:
            outer.start_soon(_consume, recv, out)
            async with send:
                await _send_all(send, root_before)
                async with trio.open_nursery() as nursery:
                    for events in children:
                        nursery.start_soon(child, events, send.clone())
                await _send_all(send, root_after)
    return time.perf_counter() - t0


async def chain_floor(events: Dicts, path: Path, *, hops: int = 2) -> float:
    """One producer, *hops* forwarding tasks (one per level of nesting; 0: the producer sends
    straight to the consumer), one encoding consumer.

    Returns the wall time in seconds for all of *events* to be encoded.
    """

    async def forward(
        recv: trio.MemoryReceiveChannel[dict[str, Any]],
        send: trio.MemorySendChannel[dict[str, Any]],
    ) -> None:
        async with recv, send:
            async for event in recv:
                await send.send(event)

    t0 = time.perf_counter()
    with path.open("wb") as out:
        async with trio.open_nursery() as nursery:
            first_send, recv = trio.open_memory_channel[dict[str, Any]](CHANNEL_SIZE)
            for _ in range(hops):
                send, next_recv = trio.open_memory_channel[dict[str, Any]](CHANNEL_SIZE)
                nursery.start_soon(forward, recv, send)
                recv = next_recv
            nursery.start_soon(_consume, recv, out)
            async with first_send:
                await _send_all(first_send, events)
    return time.perf_counter() - t0


async def run_floor(events: Dicts) -> float:
    """One small run with the trace off: a nursery, one agent task sending *events* through a
    bounded channel to a consumer that numbers them (nothing is encoded). Wall seconds."""
    t0 = time.perf_counter()
    send, recv = trio.open_memory_channel[dict[str, Any]](CHANNEL_SIZE)

    async def agent(send: trio.MemorySendChannel[dict[str, Any]]) -> None:
        async with send:
            await _send_all(send, events)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_consume, recv, None)
        nursery.start_soon(agent, send)
    return time.perf_counter() - t0


async def cancel_floor(n: int, finishing: Dicts, cancel_events: Dicts, path: Path) -> float:
    """*n* parked tasks; cancel them all; each then sends its *finishing* events.

    Returns the seconds from the cancel until the consumer has encoded every finishing event.
    """
    send, recv = trio.open_memory_channel[dict[str, Any]](CHANNEL_SIZE)
    parked = 0
    all_parked = trio.Event()

    async def worker(send: trio.MemorySendChannel[dict[str, Any]]) -> None:
        nonlocal parked
        async with send:
            try:
                parked += 1
                if parked == n:
                    all_parked.set()
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True):
                    await _send_all(send, finishing)

    with path.open("wb") as out:
        async with trio.open_nursery() as outer:
            outer.start_soon(_consume, recv, out)
            async with send, trio.open_nursery() as nursery:
                for _ in range(n):
                    nursery.start_soon(worker, send.clone())
                await all_parked.wait()
                await trio.testing.wait_all_tasks_blocked()
                t0 = time.perf_counter()
                await _send_all(send, cancel_events)
                nursery.cancel_scope.cancel()
        elapsed = time.perf_counter() - t0
    return elapsed


async def memory_floor(n: int) -> float:
    """Bytes per idle task: one trio task with its own nursery, cancel scope and channel.

    Measured with tracemalloc (Python allocations; the caller starts it), at the moment all *n*
    are parked.
    """
    parked = 0
    all_parked = trio.Event()
    release = trio.Event()

    async def idle() -> None:
        nonlocal parked
        with trio.CancelScope():
            send, recv = trio.open_memory_channel[object](16)
            async with trio.open_nursery():
                parked += 1
                if parked == n:
                    all_parked.set()
                await release.wait()
            send.close()
            recv.close()

    gc.collect()
    base = tracemalloc.get_traced_memory()[0]
    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(idle)
        await all_parked.wait()
        await trio.testing.wait_all_tasks_blocked()
        used = tracemalloc.get_traced_memory()[0] - base
        release.set()
    return used / n


def process_floor(code: str = "pass", runs: int = 5) -> tuple[float, float]:
    """Median wall seconds and peak RSS (bytes) of ``python -c CODE``: the interpreter's own."""
    walls: list[float] = []
    peaks: list[float] = []
    for _ in range(runs):
        wall, peak, _rc = timed_process([sys.executable, "-c", code])
        walls.append(wall)
        peaks.append(peak)
    return median(walls), median(peaks)


# Forks the command from a fresh, small interpreter: a child forked straight from a benchmark
# process that has grown to hundreds of MB would inherit that as its ``ru_maxrss``.
_LAUNCHER = """
import os, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        os.execvp(sys.argv[1], sys.argv[1:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
print(time.perf_counter() - t0, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status))
"""


def timed_process(argv: Sequence[str], **kwargs: Any) -> tuple[float, float, int]:
    """Run *argv*; return its wall seconds, its peak RSS in bytes, and its exit code.

    Its output goes to /dev/null (producing it is part of the cost).
    """
    proc = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        check=True,
        **kwargs,
    )
    wall, peak, code = proc.stdout.decode().split()
    return float(wall), float(peak), int(code)


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
