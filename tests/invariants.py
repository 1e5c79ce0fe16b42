"""The event invariants of docs/events.md#invariants, checked on a whole run's events.

Shared by many tests.
"""

from __future__ import annotations

from collections.abc import Sequence

from runtime import (
    AgentFinished,
    AgentStarted,
    Event,
    HookFinished,
    RunFinished,
    RunResumed,
    RunStarted,
    ToolFinished,
    ToolStarted,
)


def check_invariants(events: Sequence[Event]) -> None:
    """Assert every invariant of docs/events.md#invariants on one complete run."""
    assert events, "no events"
    assert isinstance(events[0], RunStarted), events[0]
    assert isinstance(events[-1], RunFinished), events[-1]
    seqs = [e.seq for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "seq must increase with no gaps"
    assert len({e.run_id for e in events}) == 1
    agent_start: dict[str, int] = {}
    agent_end: dict[str, int] = {}
    agent_ptuid: dict[str, str | None] = {}
    tool_start: dict[str, int] = {}
    tool_end: dict[str, int] = {}
    tool_owner: dict[str, str] = {}
    # Background sub-agents (docs/collaboration.md): their call returns at once, so they end
    # after it, but before their parent agent.
    background: dict[str, str] = {}
    for i, e in enumerate(events):
        if isinstance(e, RunStarted | RunFinished | RunResumed):  # RunResumed: docs/resume.md
            assert e.agent_id is None
            continue
        if isinstance(e, HookFinished) and e.hook_event in ("SessionStart", "SessionEnd"):
            assert e.agent_id is None  # the run's own hooks (docs/hooks.md)
            continue
        assert e.agent_id is not None
        if isinstance(e, AgentStarted):
            assert e.agent_id not in agent_start, f"{e.agent_id} started twice"
            agent_start[e.agent_id] = i
            agent_ptuid[e.agent_id] = e.parent_tool_use_id
            if e.parent_tool_use_id is not None:
                assert e.parent_tool_use_id in tool_start, "sub-agent started before its tool call"
                assert tool_owner[e.parent_tool_use_id] == e.parent_agent_id
                if e.background:
                    assert e.parent_agent_id is not None
                    assert e.parent_agent_id not in agent_end, "background child after parent"
                    background[e.agent_id] = e.parent_agent_id
                else:
                    assert e.parent_tool_use_id not in tool_end
        else:
            assert e.agent_id in agent_start, f"{e.type} from {e.agent_id} before agent_started"
            assert e.agent_id not in agent_end, f"{e.type} from {e.agent_id} after agent_finished"
            assert e.parent_tool_use_id == agent_ptuid[e.agent_id], "parent_tool_use_id mismatch"
        if isinstance(e, AgentFinished):
            agent_end[e.agent_id] = i
            ptuid = e.parent_tool_use_id
            if e.agent_id in background:
                assert background[e.agent_id] not in agent_end, (
                    "background sub-agent finished after its parent agent"
                )
            elif ptuid is not None:
                assert ptuid not in tool_end, "sub-agent finished after its tool call"
        if isinstance(e, ToolStarted):
            assert e.tool_use_id not in tool_start, f"tool {e.tool_use_id} started twice"
            tool_start[e.tool_use_id] = i
            tool_owner[e.tool_use_id] = e.agent_id
        if isinstance(e, ToolFinished):
            assert e.tool_use_id in tool_start, "tool_finished without tool_started"
            assert e.tool_use_id not in tool_end, f"tool {e.tool_use_id} finished twice"
            assert tool_owner[e.tool_use_id] == e.agent_id
            tool_end[e.tool_use_id] = i
    assert set(agent_start) == set(agent_end), (
        f"agents never finished: {set(agent_start) - set(agent_end)}"
    )
    assert set(tool_start) == set(tool_end), f"tools never finished: {set(tool_start) - set(tool_end)}"
    for tid, owner in tool_owner.items():
        assert agent_start[owner] < tool_start[tid] < tool_end[tid] < agent_end[owner]


def by_type(events: Sequence[Event], cls: type[Event]) -> list[Event]:
    return [e for e in events if isinstance(e, cls)]
