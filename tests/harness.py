"""Running scenarios in tests: every event of the run collected from a tap."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runtime import AgentOutcome, Event, open_runtime


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
