"""What every reliability test checks after its run, and the suite's running figures.

After a run, whatever was injected: the event invariants (docs/events.md#invariants) hold on the
live stream; the trace file holds exactly the live stream (every line decodes, same events,
nothing lost, nothing extra); the runtime's registry is empty; no trio task the run started is
left; no child process is left.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

import psutil
import trio

from runtime import AgentOutcome, Event, Runtime, decode_event, open_runtime
from tests.invariants import check_invariants
from tools import Tool, ToolContext

#: The suite's figures, printed at the end of the run (see conftest.py) and quoted in
#: docs/reliability.md: faults injected, cancels survived, inputs tried, events lost, …
STATS: Counter[str] = Counter()


def long_mode(config: Any) -> bool:
    """``--long`` (when tests/reliability is on the command line) or ``TRIO_AGENTS_LONG=1``."""
    if os.environ.get("TRIO_AGENTS_LONG", "") not in ("", "0"):
        return True
    try:
        return bool(config.getoption("--long"))
    except ValueError:  # the option was not registered: this conftest was not an initial one
        return False


# -- tasks and processes -------------------------------------------------------------------


def all_tasks(root: trio.lowlevel.Task | None = None) -> set[trio.lowlevel.Task]:
    """Every task under *root* (default: every task of the current trio run)."""
    found: set[trio.lowlevel.Task] = set()
    stack = [root or trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        if task is None or task in found:
            continue
        found.add(task)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return found


def child_processes() -> list[psutil.Process]:
    """This process's live descendants (zombies excluded: they are dead, only unreaped)."""
    alive = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.NoSuchProcess:
            continue
    return alive


# -- the checked run -----------------------------------------------------------------------


def read_trace(path: Path) -> list[Event]:
    """Every line of a finished trace, decoded; any bad line fails the test."""
    lines = path.read_bytes().splitlines()
    return [decode_event(line, lineno=i) for i, line in enumerate(lines, 1)]


def check_trace_matches(live: Sequence[Event], path: Path) -> None:
    """The trace file holds exactly the live stream: nothing lost, nothing added."""
    written = read_trace(path)
    STATS["events lost"] += len({e.seq for e in live} - {e.seq for e in written})
    assert [e.seq for e in written] == [e.seq for e in live], "trace and live stream differ"
    assert written == list(live), "an event reads back different from what was emitted"
    STATS["events checked"] += len(live)


@asynccontextmanager
async def checked_runtime(
    workspace: Path,
    trace: Path,
    *,
    events: list[Event] | None = None,
    foreign: trio.Nursery | None = None,
    record: bool = True,
    **kwargs: Any,
) -> AsyncGenerator[Runtime, None]:
    """:func:`open_runtime` with a trace file, and every after-run check on the way out.

    The checks run even when the block raises (a crashing subscriber): a run that ends by an
    exception must still end cleanly. Tasks under *foreign* (a test server's nursery) are not
    the run's and are not checked. Without *record* (a soak measuring memory), the live events
    are only counted, and the invariants are checked on the trace file instead.
    """
    seen: list[Event] = [] if events is None else events
    kwargs.setdefault("permission_mode", "allow-all")
    extra_tap = kwargs.pop("on_event", None)
    emitted = 0

    def tap(event: Event) -> None:
        nonlocal emitted
        emitted += 1
        if record:
            seen.append(event)
        if extra_tap is not None:
            extra_tap(event)

    # The runtime's tasks live under this task (its nurseries) or among trio's system tasks;
    # a test server's connection handlers, in a fixture's nursery, are not the run's.
    here = trio.lowlevel.current_task()
    root = trio.lowlevel.current_root_task()

    def tasks() -> set[trio.lowlevel.Task]:
        system = {t for n in root.child_nurseries for t in n.child_tasks} if root else set()
        others: set[trio.lowlevel.Task] = set()
        for task in foreign.child_tasks if foreign is not None else ():
            others |= all_tasks(task)
        return (all_tasks(here) - others) | system

    before = tasks()
    procs_before = {p.pid for p in child_processes()}
    rt: Runtime | None = None
    try:
        async with open_runtime(workspace=workspace, trace=trace, on_event=tap, **kwargs) as opened:
            rt = opened
            yield rt
            await rt._wait_roots()
            assert rt._run.registry.ids() == [], "nodes left registered after the run"
    finally:
        if rt is not None:
            assert rt._run.registry.ids() == [], "nodes left registered"
        leaked = tasks() - before
        chains = [[t.name] + [p.name for p in _ancestors(t)] for t in leaked]
        assert not leaked, f"tasks left running: {chains}"
        extra = [p for p in child_processes() if p.pid not in procs_before]
        assert not extra, f"processes left running: {extra}"
        if seen:
            check_invariants(seen)
            check_trace_matches(seen, trace)
        elif not record and emitted:
            written = read_trace(trace)
            STATS["events lost"] += max(0, emitted - len(written))
            assert [e.seq for e in written] == list(range(1, emitted + 1)), "events lost"
            check_invariants(written)
            STATS["events checked"] += emitted


async def run_checked(
    scenario: Mapping[str, Any] | None,
    workspace: Path,
    trace: Path,
    *,
    prompt: str = "go",
    **kwargs: Any,
) -> tuple[AgentOutcome, list[Event]]:
    """Run *scenario*'s main agent (or *provider*'s) to its end under :func:`checked_runtime`."""
    events: list[Event] = []
    if scenario is not None:
        kwargs["scenario"] = dict(scenario)
    async with checked_runtime(workspace, trace, events=events, **kwargs) as rt:
        outcome = await rt.run(prompt)
    return outcome, events


def finished(events: Sequence[Event], kind: str) -> dict[str, Any]:
    """``agent_finished`` (by agent id) or ``tool_finished`` (by tool_use_id) events."""
    if kind == "agent":
        return {e.agent_id: e for e in events if e.type == "agent_finished"}
    return {e.tool_use_id: e for e in events if e.type == "tool_finished"}  # type: ignore[attr-defined]


def started_names(events: Sequence[Event]) -> dict[str, str]:
    """Agent id → agent type name."""
    return {e.agent_id: e.name for e in events if e.type == "agent_started"}  # type: ignore[attr-defined,misc]


# -- tools that misbehave ------------------------------------------------------------------


class FaultyTool(Tool):
    """A tool whose behaviour each call picks from its input ``mode``.

    ``ok`` (returns), ``raise`` (a bug: RuntimeError), ``tool_error`` (a ToolError),
    ``hang`` (awaits forever, cancellable), ``sleep`` (``seconds`` of trio time).
    """

    name: ClassVar[str] = "faulty"
    description: ClassVar[str] = "A tool that fails on purpose."
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "mode": {"enum": ["ok", "raise", "tool_error", "hang", "sleep"]},
            "seconds": {"type": "number", "minimum": 0},
        },
        "required": ["mode"],
        "additionalProperties": False,
    }
    read_only: ClassVar[bool] = True
    concurrency_safe: ClassVar[bool] = True
    needs_permission: ClassVar[bool] = False

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        from runtime import ToolError

        mode = args["mode"]
        if mode == "raise":
            raise RuntimeError(f"injected bug in {ctx.tool_use_id}")
        if mode == "tool_error":
            raise ToolError(f"injected tool error in {ctx.tool_use_id}")
        if mode == "hang":
            await trio.sleep_forever()
        if mode == "sleep":
            await trio.sleep(float(args.get("seconds", 0)))
        return f"ok from {ctx.tool_use_id}"


def on_type(kind: str, fn: Callable[[Event], None]) -> Callable[[Event], None]:
    """A tap calling *fn* for events of one type."""

    def tap(event: Event) -> None:
        if event.type == kind:
            fn(event)

    return tap


def _ancestors(task: trio.lowlevel.Task) -> list[trio.lowlevel.Task]:
    out = []
    while task.parent_nursery is not None and task.parent_nursery.parent_task is not None:
        task = task.parent_nursery.parent_task
        out.append(task)
    return out
