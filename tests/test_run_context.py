"""A run's context: its scheduler (ids, slots lent to children, counts, inboxes) and the
per-type setups, which an equal agent type (a Ray host's unpickled copy) shares."""

from __future__ import annotations

import pickle
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from runtime import open_runtime
from runtime.actors import Mailbox
from runtime.core._context import Scheduler
from runtime.core._loop import type_setup


def test_agent_ids_count_up_after_the_prefix() -> None:
    plain, prefixed = Scheduler(max_parallel=1, max_agents=1), Scheduler(
        max_parallel=1, max_agents=1, id_prefix="call-7."
    )
    assert [plain.new_agent_id() for _ in range(3)] == ["agent-1", "agent-2", "agent-3"]
    assert [prefixed.new_agent_id() for _ in range(2)] == ["call-7.agent-1", "call-7.agent-2"]


def test_reserving_agents_stops_at_max_agents() -> None:
    scheduler = Scheduler(max_parallel=1, max_agents=2)
    assert [scheduler.reserve_agent() for _ in range(3)] == [True, True, False]


def test_counts_keep_the_peak_of_running_agents() -> None:
    scheduler = Scheduler(max_parallel=1, max_agents=10)
    for _ in range(3):
        scheduler.agent_running()
    scheduler.agent_stopped()
    scheduler.agent_running()
    scheduler.agent_stopped()
    scheduler.agent_stopped()
    assert (scheduler.agents_started, scheduler.running_agents) == (4, 1)
    assert scheduler.peak_running_agents == 3


async def test_a_parent_waiting_for_a_child_lends_it_its_slot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    scheduler = Scheduler(max_parallel=1, max_agents=10)
    await scheduler.acquire_slot("parent")
    assert scheduler.has_slot_or_lent_it("parent")
    scheduler.child_starting("parent")
    assert scheduler.slots_held == 0
    assert scheduler.has_slot_or_lent_it("parent"), "lent, not lost"
    with trio.fail_after(1):  # the only slot is free: taken without waiting
        await scheduler.acquire_slot("child")
    scheduler.release_slot("child")
    scheduler.child_finished("parent")
    assert not scheduler.has_slot_or_lent_it("parent"), "it takes one back at its next turn"
    await scheduler.acquire_slot("parent")
    with trio.move_on_after(5) as waited:  # the slot is the parent's again
        await scheduler.acquire_slot("other")
    assert waited.cancelled_caught


def test_an_inbox_is_closed_only_by_its_own_agent_and_mailbox() -> None:
    scheduler = Scheduler(max_parallel=1, max_agents=10)
    old, new = Mailbox[str](1), Mailbox[str](1)
    scheduler.open_inbox("agent-1", old)
    scheduler.open_inbox("agent-1", new)
    scheduler.close_inbox("agent-1", old)  # a stale close leaves the current one
    assert scheduler.inbox("agent-1") is new
    scheduler.close_inbox("agent-1")
    assert scheduler.inbox("agent-1") is None


@pytest.mark.parametrize("copy", ["evolve", "pickle"])
async def test_an_equal_agent_type_shares_its_setup(workspace: Path, copy: str) -> None:
    scenario = {"agents": {"main": {"turns": [{"text": "hi"}]}}}
    async with open_runtime(scenario=scenario, workspace=workspace, trace=False) as rt:
        run = rt._run
        atype = run.agent_types.lookup("general")
        twin = attrs.evolve(atype) if copy == "evolve" else pickle.loads(pickle.dumps(atype))
        assert twin is not atype
        setup = type_setup(run, atype)
        assert type_setup(run, twin) is setup
        assert len([t for t in run.type_setups if t.name == "general"]) == 1
