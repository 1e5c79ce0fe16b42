"""A chat killed mid-turn goes on with that turn (docs/resume.md, "Chat sessions").

A chat's session file is written after each turn, so a chat killed while a turn ran holds
the conversation up to the turn before; the run's trace holds the cut turn itself: its root
agent (the message, as its prompt) and everything under it. ``chat --resume`` reads that
trace (:func:`cut_turn`) and, before the next message, starts the cut turn's root again
with the conversation as its history: the resume machinery gives it its recorded turns and
the finished work under it, and it goes on live from there, in the same run and trace.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.replay import RecordedAgent, ResumeState

    from ._sessions import ChatSession


def cut_turn(record: ChatSession) -> tuple[ResumeState | None, str | None]:
    """The trace of *record*'s last run, read for a resume, when that run was killed while a
    turn ran (a root agent of it has not finished), and a note for the user when the trace
    cannot be resumed; ``(None, None)`` when no turn was cut.

    The state is set to start only the cut turn's root again: the turns before it are in
    the session's history.
    """
    from runtime.core import AgentsError
    from runtime.replay import load_resume

    path = record.trace_path
    if not path or not record.state.run_ids or not Path(path).is_file():
        return None, None
    try:
        state = load_resume(path)
    except AgentsError as exc:
        return None, f"the turn the crash cut is not resumed: {exc}"
    rec = state.recording
    if state.finished or rec.run_id != record.state.run_ids[-1]:
        return None, None
    cut = [r for r in rec.roots if r.status is None]
    if not cut:
        return None, None
    state.agent_ids[None] = [cut[-1].id]  # the cut turn's root gets its recorded id again
    return state, None


def cut_root(state: ResumeState) -> RecordedAgent:
    """The root agent of the turn the crash cut (a chat runs one turn at a time)."""
    return [r for r in state.recording.roots if r.status is None][-1]


def recorded_tokens(root: RecordedAgent) -> tuple[int, int]:
    """The input and output tokens of the recorded turns of *root* and of every agent under
    it: what the cut turn had used before the crash."""
    tokens = [0, 0]
    stack = [root]
    while stack:
        agent = stack.pop()
        for turn in agent.turns:
            tokens[0] += turn.input_tokens
            tokens[1] += turn.output_tokens
            stack.extend(c.child for c in turn.calls if c.child is not None)
    return tokens[0], tokens[1]
