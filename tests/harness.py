"""Running scenarios in tests: every event of the run collected from a tap."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from runtime import AgentOutcome, Event, open_runtime


class EventLog(list[Event]):
    """A tap that keeps every event and lets a test wait for a condition on them."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = trio.Event()

    def __call__(self, event: Event) -> None:
        self.append(event)
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, predicate: Callable[[list[Event]], Any]) -> Any:
        """Wait (at most 10 s) until ``predicate(events)`` is true; return its value."""
        with trio.fail_after(10):
            while not (value := predicate(self)):
                await self._changed.wait()
            return value


async def run_scenario(
    scenario: Mapping[str, Any],
    workspace: Path,
    prompt: str = "go",
    **kwargs: Any,
) -> tuple[AgentOutcome, list[Event]]:
    """Run *scenario*'s main agent to its end; return its outcome and the run's events."""
    events: list[Event] = []
    kwargs.setdefault("trace", False)
    kwargs.setdefault("permission_mode", "allow-all")
    extra = kwargs.pop("on_event", None)

    def tap(event: Event) -> None:
        events.append(event)
        if extra is not None:
            extra(event)

    async with open_runtime(
        scenario=dict(scenario), workspace=workspace, on_event=tap, **kwargs
    ) as rt:
        outcome = await rt.run(prompt)
    return outcome, events


def turns(*texts: str) -> dict[str, Any]:
    """An agent script of plain text turns."""
    return {"turns": [{"text": t} for t in texts]}


def agent_call(description: str, agent: str = "general", prompt: str = "do it",
               **extra: Any) -> dict[str, Any]:
    """A scripted ``agent`` tool call."""
    return {"name": "agent",
            "input": {"description": description, "prompt": prompt, "agent": agent, **extra}}


class Ticks:
    """How many times a task sleeping 10 ms at a time got to run (see :func:`loop_ticks`)."""

    count = 0


@asynccontextmanager
async def loop_ticks() -> AsyncGenerator[Ticks]:
    """Count, in the background, whether the event loop stays free: a task that sleeps 10 ms at
    a time ticks about 100 times a second when nothing blocks the loop."""
    ticks = Ticks()

    async def tick() -> None:
        while True:
            await trio.sleep(0.01)
            ticks.count += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(tick)
        try:
            yield ticks
        finally:
            nursery.cancel_scope.cancel()
