"""A run whose process died, going on from its trace (docs/resume.md).

:func:`load_resume` reads the trace into a :class:`ResumeState`: the run's :class:`Recording`,
where its whole lines end (a killed writer's cut last line is left out), its last ``seq``, the
ids its agents had and the permission decisions it took. Bad input is one
:class:`~runtime.core.TraceError` line: a trace being written by a live process (its lock is
held), another version's trace, a corrupt line, a gap in ``seq``, several runs in one file.

:class:`Resumer` is the replay machinery (:class:`~runtime.replay.Replayer`) set to resume:
every agent plays its recorded turns back, with the tools answering the recorded calls with
their recorded results, and goes on live (the run's own provider) from its first turn the trace
does not hold. It is also the bus's filter (:meth:`Resumer.admit`): what the replayed prefix
emits again is already in the trace, so it reaches the run's bookkeeping (budgets, the
scheduler) but not the trace, and the trace goes on as one stream, one tree.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import os
import re
from collections.abc import AsyncGenerator, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs
import orjson
import trio

from runtime.core import (
    EVENT_TYPES,
    VERSION,
    AgentSpec,
    AgentState,
    Block,
    Event,
    EventDecodeError,
    Message,
    ModelRequest,
    Provider,
    StreamItem,
    TextBlock,
    TextChunk,
    ThinkingBlock,
    ThinkingChunk,
    Tool,
    ToolCall,
    ToolContext,
    ToolError,
    ToolResultBlock,
    ToolUseBlock,
    TraceError,
    TurnEnd,
    UnknownEventType,
    add_costs,
    event_from_dict,
)
from runtime.trace import TraceTree

from ._recording import RecordedAgent, RecordedCall, RecordedTurn, Recording, _build
from ._replayer import Replayer, _Live, _MockTool, call_label

INTERRUPTED_TEXT = (
    "interrupted: the run's process died while this call ran, so it may or may not have "
    "taken effect; it was not run again (it is neither read-only nor idempotent). Check "
    "before doing it again."
)
"""The result the model reads for a call a crash interrupted that is not run again."""

_AGENT_NUMBER = re.compile(r"agent-(\d+)$")
_REQUEST_NUMBER = re.compile(r"perm-(\d+)$")
_DENIED = "permission denied: "


@attrs.define(eq=False, kw_only=True)
class ResumeState:
    """What a trace says about a run that is to go on (see :func:`load_resume`).

    Attributes:
        recording: the run as recorded (every segment of it, when it was resumed before).
        path: the trace.
        size: its size in bytes when read.
        keep: the bytes of its whole lines (``size`` less a cut last line).
        last_seq: the ``seq`` of its last event.
        last_ts: the ``ts`` of its last event.
        agent_ids: per starting call (None: the run's roots), its agents' ids in start order.
        next_agent: the number past every recorded ``agent-N``.
        decided: per tool_use_id, the permission decision the run took (granted, reason).
        next_request: the number past every recorded ``perm-N`` request id.
        touched: per workspace path, the last recorded ``read``/``write``/``edit`` that
            finished ``ok`` on it.
        waiting: calls whose permission request had no answer at the crash: they never ran.
        replayed_whole: agents played back turn by turn (see the attribute).
        resumes: how many times the run was resumed before.
    """

    recording: Recording
    path: Path
    size: int
    keep: int
    last_seq: int
    last_ts: float
    agent_ids: dict[str | None, list[str]]
    next_agent: int
    decided: dict[str, tuple[bool, str]]
    next_request: int
    touched: dict[str, RecordedCall]
    waiting: set[str] = attrs.Factory(set)
    resumes: int = 0
    unread_reports: set[str] = attrs.Factory(set)
    """Background sub-agents whose report their parent had not read: run again, so that it
    comes (:func:`_unread_reports`)."""
    unread: dict[str, list[str]] = attrs.Factory(dict)
    """Per agent, the messages other agents sent it that it had not read at the crash, as
    its mailbox held them: delivered again once it goes on."""
    replayed_whole: set[str] = attrs.Factory(set)
    """Agents whose history the loop shaped beyond their turns (a compaction, a message
    read): played back turn by turn, never restored at once (:meth:`Resumer.restore`)."""

    @property
    def cut_bytes(self) -> int:
        """The bytes of the cut last line left out."""
        return self.size - self.keep

    @property
    def finished(self) -> bool:
        """The run ended (its trace has ``run_finished``): nothing to resume."""
        return self.recording.status is not None

    def interrupted_calls(self) -> list[RecordedCall]:
        """The tool calls that started and never finished (``agent`` calls aside: their
        sub-agents go on)."""
        return [
            c for c in self.recording.calls.values() if c.status is None and c.name != "agent"
        ]

    def running_agents(self) -> int:
        """How many agents were running when the process died."""
        return sum(1 for a in self.recording.agents.values() if a.status is None)


def load_resume(
    path: str | os.PathLike[str], *, this_version: str = VERSION, tree: TraceTree | None = None
) -> ResumeState:
    """Read the trace at *path* for a resume; with *tree*, its events are applied to it too
    (a live view that shows the run so far).

    Raises:
        TraceError: one line: not there, being written by a live process, written by
            another version, a corrupt line, a gap in ``seq``, several runs, no agent.
    """
    where = Path(path)
    name = os.fspath(path)
    try:
        with open(where, "rb") as f:
            _refuse_live_writer(f.fileno(), name)
            data = f.read()
    except OSError as exc:
        raise TraceError(f"cannot read {name}: {exc.strerror}") from exc
    keep = data.rfind(b"\n") + 1
    # The cycle collector is off while the recording is built: its passes over a growing heap
    # of a million objects that all live on cost more than the build (as for `trace show`,
    # docs/architecture.md, "Reading a trace file").
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        state = _load(data, keep, name, where, this_version, tree)
    finally:
        if was_enabled:
            gc.enable()
    return state


def _load(
    data: bytes, keep: int, name: str, where: Path, this_version: str, tree: TraceTree | None
) -> ResumeState:
    events, last_seq, last_ts = _decode(data, keep, name, tree)
    if not events:
        raise TraceError(f"{name}: not a trace (no whole event line)")
    runs = {e["run_id"] for e in events}
    if len(runs) > 1:
        raise TraceError(f"{name} holds {len(runs)} runs ({', '.join(sorted(runs))}): "
                         "a resumed trace holds one run")
    rec = Recording(source=name, run_id=events[0]["run_id"])
    try:
        _build(rec, events)
    except (TypeError, AttributeError, ValueError, KeyError) as exc:  # a field of the wrong type
        raise TraceError(f"{name}: corrupt trace ({exc}); it cannot be resumed") from None
    if rec.version is None:
        raise TraceError(f"{name}: no run_started: not the beginning of a run")
    if rec.version != this_version:
        raise TraceError(
            f"{name}: written by trio-agents {rec.version}; this is {this_version}: resume it "
            "with the version that wrote it (its state is rebuilt as that version made it)"
        )
    if not rec.roots:
        raise TraceError(f"{name}: run {rec.run_id} has no agent to resume")
    state = ResumeState(
        recording=rec,
        path=where,
        size=len(data),
        keep=keep,
        last_seq=last_seq,
        last_ts=last_ts,
        agent_ids={},
        next_agent=1,
        decided={},
        next_request=1,
        touched={},
    )
    try:
        _scan(state, events)
    except (TypeError, AttributeError, ValueError, KeyError) as exc:
        raise TraceError(f"{name}: corrupt trace ({exc}); it cannot be resumed") from None
    return state


def _refuse_live_writer(fd: int, name: str) -> None:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise TraceError(
            f"{name} is being written by a live process (its lock is held): nothing to "
            "resume until it ends"
        ) from None
    fcntl.flock(fd, fcntl.LOCK_UN)


_DELTAS = (b'{"type":"text_delta",', b'{"type":"thinking_delta",')
_FEW = 8
"""Up to this many rebuilt agents, their deltas are found by a search for each id (in C);
past it, each delta's id is read."""


def _decode(
    data: bytes, keep: int, name: str, tree: TraceTree | None
) -> tuple[list[dict[str, Any]], int, float]:
    """Every event the resume needs, each as its JSON object, the whole lines checked: no
    corrupt line, no gap in ``seq``; each but the deltas also applied to *tree* (a view needs
    no recorded text).

    Deltas are the bulk of a trace and only the agents that are rebuilt need their text (the
    ones running at the crash, the roots, the sub-agents of interrupted calls: a finished
    call answers from the trace, bench/README.md, "Resume"). So every other line is decoded,
    and its ``seq`` checked against its place: a missing line (a delta's too) shifts every
    later place, and the last line's ``seq`` is read, so a gap anywhere is found; then the
    deltas of the rebuilt agents are decoded. The text is split a few megabytes at a time:
    a million lines at once cost more in memory than in work.

    Returns:
        The events in line order (without the deltas not needed), the last ``seq`` and the
        last line's ``ts``.
    """
    loads = orjson.loads
    apply = tree.apply_dict if tree is not None else None
    blanks = 0
    count = 0
    others: list[dict[str, Any]] = []
    for base, lines in _pieces(data, keep):
        count += len(lines)
        wanted = [not line.startswith(_DELTAS) for line in lines]
        for index in itertools.compress(range(len(lines)), wanted):
            line = lines[index]
            if not line.strip():
                blanks += 1
                continue
            fields = _decoded(line, base + index, name, apply, loads)
            if fields["seq"] != base + index + 1 - blanks:
                raise _gap(data, keep, name)
            others.append(fields)
    last_seq, last_ts = _last_seq_ts(data, keep)
    if last_seq != count - blanks:
        raise _gap(data, keep, name)
    texts = _wanted_deltas(data, keep, name, _rebuilt_agents(others))
    if not texts:
        return others, last_seq, last_ts
    # Both in the order of the file; a delta's seq is its place (checked above by the lines
    # around it), so the two merge by seq.
    return list(heapq.merge(others, texts, key=_seq)), last_seq, last_ts


_PIECE = 1 << 23
"""The bytes of trace split into lines at a time (about 30,000 lines)."""


def _pieces(data: bytes, keep: int) -> Iterator[tuple[int, list[bytes]]]:
    """The whole lines of ``data[:keep]`` (which ends with a newline) a piece at a time, each
    with the index of its first line."""
    start = base = 0
    while start < keep:
        end = data.rfind(b"\n", start, min(start + _PIECE, keep)) + 1
        if end <= start:  # a line longer than a piece
            end = data.find(b"\n", start + _PIECE - 1) + 1
        lines = data[start:end].splitlines()
        yield base, lines
        base += len(lines)
        start = end


def _seq(fields: dict[str, Any]) -> int:
    seq: int = fields["seq"]
    return seq


def _wanted_deltas(
    data: bytes, keep: int, name: str, wanted: set[str]
) -> list[dict[str, Any]]:
    """The delta events of the *wanted* agents, in order."""
    needles = [orjson.dumps(agent) for agent in wanted]
    if len(wanted) <= _FEW and all(b"\\" not in n for n in needles):
        # `"agent_id":"ID",` occurs in a line as that key only: a string value's quotes are
        # escaped. So each id is searched for in the whole text (in C, where a loop over a
        # million lines in Python costs a tenth of a second per id). An id that needs
        # escaping itself is looked for the slow way, below.
        found: set[int] = set()
        for needle in needles:
            found.update(_lines_with(data, keep, b'"agent_id":' + needle + b","))
        return [
            _delta_at(data, at, name) for at in sorted(found) if data.startswith(_DELTAS, at)
        ]
    keys = {n[1:-1] for n in needles}
    out: list[dict[str, Any]] = []
    for base, lines in _pieces(data, keep):
        for index in itertools.compress(
            range(len(lines)), [line.startswith(_DELTAS) for line in lines]
        ):
            line = lines[index]
            agent = _delta_agent(line)
            if agent is None or b"\\" in agent or agent in keys:  # an escaped id: decode it
                out.append(_decoded(line, base + index, name, None, orjson.loads))
    return out


def _lines_with(data: bytes, keep: int, key: bytes) -> Iterator[int]:
    """Where each line of ``data[:keep]`` holding *key* starts."""
    at = data.find(key, 0, keep)
    while at >= 0:
        yield data.rfind(b"\n", 0, at) + 1
        end = data.find(b"\n", at, keep)
        if end < 0:
            return
        at = data.find(key, end, keep)


def _delta_at(data: bytes, start: int, name: str) -> dict[str, Any]:
    """The delta line starting at *start* decoded; its line number is counted only for an
    error."""
    line = data[start : data.find(b"\n", start)]
    try:
        return _decoded(line, 0, name, None, orjson.loads)
    except TraceError:
        return _decoded(line, data.count(b"\n", 0, start), name, None, orjson.loads)


_AGENT_KEY = b'"agent_id":"'


def _delta_agent(line: bytes) -> bytes | None:
    """The agent id of a delta line as the runtime writes it, without decoding the line."""
    start = line.find(_AGENT_KEY)
    if start < 0:
        return None
    start += len(_AGENT_KEY)
    end = line.find(b'"', start)
    return line[start:end] if end > 0 else None


def _gap(data: bytes, keep: int, name: str) -> TraceError:
    """The error naming the first gap in ``seq`` (read line by line: only on a bad trace)."""
    last = 0
    for index, line in enumerate(data[:keep].splitlines()):
        if not line.strip():
            continue
        try:
            seq = orjson.loads(line)["seq"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            continue
        if seq != last + 1:
            return TraceError(
                f"{name}:{index + 1}: seq goes from {last} to {seq}: events are missing, "
                "so the run's state cannot be rebuilt"
            )
        last = seq
    return TraceError(f"{name}: seq does not go 1, 2, …: the run's state cannot be rebuilt")


def _last_seq_ts(data: bytes, keep: int) -> tuple[int, float]:
    """The ``seq`` and ``ts`` of the last event line (the gap of ``run_resumed`` is measured
    from it)."""
    end = keep
    while end > 0:
        start = data.rfind(b"\n", 0, end - 1) + 1
        line = data[start:end]
        end = start
        if not line.strip():
            continue
        try:
            fields = orjson.loads(line)
            seq, ts = fields.get("seq"), fields.get("ts")
        except (orjson.JSONDecodeError, AttributeError):
            return -1, 0.0
        return (
            seq if isinstance(seq, int) else -1,
            float(ts) if isinstance(ts, int | float) else 0.0,
        )
    return 0, 0.0


def _decoded(line: bytes, index: int, name: str, apply: Any, loads: Any) -> dict[str, Any]:
    """One line decoded, checked as an event of this version (and applied to the tree)."""
    try:
        fields = loads(line)
        if fields.__class__ is not dict or not _plain_event(fields):
            event_from_dict(fields)  # names what is wrong
            raise EventDecodeError("not an event")
        if apply is not None:
            apply(fields)
        return fields
    except UnknownEventType as exc:
        raise TraceError(
            f"{name}:{index + 1}: event type {exc.type_name!r} is not one this version knows: "
            "its state cannot be rebuilt"
        ) from None
    except (EventDecodeError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise TraceError(
            f"{name}:{index + 1}: corrupt line ({exc}); a resume needs every event of the run"
        ) from None


def _plain_event(fields: dict[str, Any]) -> bool:
    """Whether *fields* has a known type and the common fields of the right types (the
    fields of each kind are read by the recording and the tree, which refuse a wrong one)."""
    seq, ts, run_id = fields.get("seq"), fields.get("ts"), fields.get("run_id")
    return (
        fields.get("type") in EVENT_TYPES
        and seq.__class__ is int
        and run_id.__class__ is str
        and (ts.__class__ is float or ts.__class__ is int)
        and "agent_id" in fields
    )


def _rebuilt_agents(events: list[dict[str, Any]]) -> set[str]:
    """The ids of the agents a resume plays back: the roots, those not finished, those whose
    ``agent`` call did not finish, and the background sub-agents whose report their parent
    had not read (:func:`_unread_reports`)."""
    finished: set[str] = set()
    open_calls: set[str] = set()
    parents: dict[str, str | None] = {}
    unread = _unread_reports(events)
    for event in events:
        kind = event["type"]
        if kind == "agent_started":
            parents[event["agent_id"]] = event["parent_tool_use_id"]
        elif kind == "agent_finished":
            finished.add(event["agent_id"])
        elif kind == "tool_started" and event["name"] == "agent":
            open_calls.add(event["tool_use_id"])
        elif kind == "tool_finished":
            open_calls.discard(event["tool_use_id"])
    return {
        agent
        for agent, call in parents.items()
        if call is None or agent not in finished or call in open_calls or agent in unread
    }


_REPORT_HEAD = "[background sub-agent "


def _unread_reports(events: Iterable[dict[str, Any]]) -> set[str]:
    """The background sub-agents whose report (docs/collaboration.md#background-sub-agents)
    their parent had not read at the crash: those still running, and those that ended but
    whose report was still in the mailbox."""
    parent_of: dict[str, str] = {}
    read: set[str] = set()
    for event in events:
        kind = event["type"]
        if kind == "agent_started" and event.get("background"):
            parent_of[event["agent_id"]] = event["parent_agent_id"]
        elif kind == "user_message" and event["text"].startswith(_REPORT_HEAD):
            child = event["text"][len(_REPORT_HEAD) :].split(" ", 1)[0]
            if parent_of.get(child) == event["agent_id"]:
                read.add(child)
    return set(parent_of) - read


def _scan(state: ResumeState, events: Iterable[dict[str, Any]]) -> None:
    """The ids, permission decisions and touched files of the recorded run."""
    rec = state.recording
    top = request = 0
    sent_by: dict[str, RecordedCall] = {}
    turns: dict[str, int] = {}
    for ev in events:
        kind = ev["type"]
        if kind == "turn_finished":
            turns[ev["agent_id"]] = turns.get(ev["agent_id"], 0) + 1
            continue
        if kind == "agent_started":
            agent_id = ev["agent_id"] or ""
            state.agent_ids.setdefault(ev["parent_tool_use_id"], []).append(agent_id)
            match = _AGENT_NUMBER.search(agent_id)
            if match:
                top = max(top, int(match.group(1)))
        elif kind in ("permission_requested", "permission_resolved"):
            match = _REQUEST_NUMBER.search(ev["request_id"])
            if match:
                request = max(request, int(match.group(1)))
            if kind == "permission_resolved":
                state.decided[ev["tool_use_id"]] = (ev["granted"], ev["reason"])
                state.waiting.discard(ev["tool_use_id"])
            else:
                state.waiting.add(ev["tool_use_id"])
        elif kind == "tool_finished":
            call = rec.calls.get(ev["tool_use_id"])
            if call is not None and call.status == "ok" and call.name in _FILE_TOOLS:
                target = call.input.get("path")
                if isinstance(target, str):
                    state.touched.pop(target, None)
                    state.touched[target] = call
        elif kind == "run_resumed":
            state.resumes += 1
        elif kind in _SHAPED:
            state.replayed_whole.add(ev["agent_id"])
            if kind == "user_message":
                waiting = state.unread.get(ev["agent_id"])
                if waiting and ev["text"] in waiting:
                    waiting.remove(ev["text"])
        elif kind == "message_queued":
            # A user's message (Runtime.send_message): matched by its user_message as an
            # agent's message is, above; the mailbox keeps them in the order they came.
            state.unread.setdefault(ev["agent_id"], []).append(ev["text"])
        elif kind == "agent_message":
            sender = ev["from_agent_id"]
            text = f"[message from {_described(rec, sender)}]\n{ev['text']}"
            state.unread.setdefault(ev["to_agent_id"], []).append(text)
            call = _sending_call(rec, sender, turns.get(sender, 0))
            if call is not None:
                sent_by[text] = call
    state.next_agent = top + 1
    state.next_request = request + 1
    # A message whose send_message call did not finish is not delivered again: the call
    # runs again (it is read-only, so it sends it again) or the model reads it was cut.
    state.unread = {
        agent: kept for agent, texts in state.unread.items()
        if agent in rec.agents and rec.agents[agent].status is None
        and (kept := [t for t in texts if t not in sent_by or sent_by[t].status is not None])
    }  # fmt: skip
    state.unread_reports = _unread_reports(events)
    for call in rec.calls.values():
        if call.status == "denied":
            state.decided[call.id] = (False, (call.output or "").removeprefix(_DENIED))
        elif call.status is not None:
            state.decided[call.id] = (True, "decided before the resume")


def _sending_call(rec: Recording, agent_id: str, turn: int) -> RecordedCall | None:
    """The ``send_message`` call of *agent_id*'s turn *turn* that sent a message (its last
    such call: a message goes out while its call runs, after the turn that asked for it)."""
    agent = rec.agents.get(agent_id)
    if agent is None or not 0 < turn <= len(agent.turns):
        return None
    sends = [c for c in agent.turns[turn - 1].calls if c.name == "send_message"]
    return sends[-1] if sends else None


def _described(rec: Recording, agent_id: str) -> str:
    """*agent_id* as a message's header names its sender: with the description its
    ``agent`` call gave it (runtime/core/_messaging.py)."""
    agent = rec.agents.get(agent_id)
    call = agent.parent_call if agent is not None else None
    description = call.input.get("description") if call is not None else None
    if isinstance(description, str) and description:
        return f"{agent_id} ({description})"
    return agent_id


_FILE_TOOLS = ("read", "write", "edit")
_SHAPED = ("context_compacted", "user_message")
"""Events after which an agent's history holds more than its turns."""


async def workspace_changes(
    state: ResumeState, workspace: Path, read_tool: Tool | None, ctx: ToolContext | None
) -> list[str]:
    """What changed in *workspace* since the recorded calls read or wrote it: one line per
    file (docs/resume.md, "The workspace"). A file last written must hold what was written;
    last edited, the edit's new text; last read, read the same (with *read_tool*).

    Cancellation: a checkpoint; nothing is left behind.
    """
    lines: list[str] = []
    root = Path(await trio.Path(workspace).resolve())
    for target, call in state.touched.items():
        where = f"{call.agent.path}, turn {call.turn}"
        file = (root / target).resolve()
        try:
            text = await trio.Path(file).read_text(encoding="utf-8", errors="replace")
        except OSError:
            lines.append(f"{target}: gone since {call_label(call.name, call.input)} ({where})")
            continue
        changed = False
        if call.name == "write":
            changed = text != call.input.get("content")
        elif call.name == "edit":
            new = call.input.get("new")
            changed = isinstance(new, str) and bool(new) and new not in text
        elif read_tool is not None and ctx is not None and "characters cut" not in (
            call.output or ""
        ):
            try:
                now = await read_tool.call(dict(call.input), ctx)
            except ToolError as exc:
                now = f"error: {exc}"
            changed = now != call.output
        if changed:
            lines.append(
                f"{target}: changed since {call_label(call.name, call.input)} ({where})"
            )
    return lines


class Resumer(Replayer):
    """The replay of a trace's recorded prefix that goes on live (see the module docstring).

    Args:
        state: the trace, read.
        live: the provider the run goes on with.
        tools: the run's tools, to tell which interrupted calls run again.
    """

    def __init__(self, state: ResumeState, *, live: Provider, tools: Mapping[str, Tool]) -> None:
        super().__init__(state.recording, continue_with=live)
        self.state = state
        self.model = getattr(live, "model", None) or state.recording.config.get("model") or "?"
        self._restored: dict[str, int] = {}
        self.delivered = 0
        """Messages the agents had not read at the crash, delivered again."""
        self.delivery_failed: list[str] = []
        """Agents whose mailbox was full when their unread messages came again."""
        """Per agent, how many of its first turns :meth:`restore` gave it."""
        self.rerun: list[str] = []
        self.interrupted: list[str] = []
        for call in state.interrupted_calls():
            tool = tools.get(call.name)
            # A call still waiting for its permission never ran: it is asked again and runs.
            safe = tool is not None and (
                tool.read_only or tool.idempotent or call.id in state.waiting
            )
            (self.rerun if safe else self.interrupted).append(call.id)

    def describe(self) -> dict[str, Any]:
        assert self.continue_with is not None
        return {**self.continue_with.describe(), "provider": self.continue_with.name}

    def bind(self, run: Any) -> None:
        """The run whose nodes the replay cancels as recorded (no tap: :meth:`admit` sees
        every event first)."""
        self._run = run

    def resume_tools(self, tools: Iterable[Tool]) -> list[Tool]:
        """*tools*, each but ``agent`` answering recorded calls with their recorded results,
        running live calls for real, and running an interrupted call again only when it is
        read-only or idempotent."""
        out = [_resumed(t, self) for t in tools]
        missing = {c.name for c in self.recording.calls.values()} - {t.name for t in out}
        out.extend(_resumed(None, self, name) for name in sorted(missing))
        return out

    def skip_subtree(self, call: RecordedCall) -> None:
        """An ``agent`` call that finished answers from the trace: its sub-agents are not
        rebuilt (nothing of theirs is asked or emitted again), so what they used is counted
        here, against the caller's budget and ``max_agents``, as they counted then."""
        assert self._run is not None
        tokens = tool_calls = agents = 0
        stack = [call.child] if call.child is not None else []
        while stack:
            agent = stack.pop()
            agents += 1
            for turn in agent.turns:
                tokens += turn.input_tokens + turn.output_tokens
                tool_calls += len(turn.calls)
                stack.extend(c.child for c in turn.calls if c.child is not None)
        self._run.budget.add_recorded(call.agent.id, tokens=tokens, tool_calls=tool_calls)
        for _ in range(agents):
            self._run.scheduler.reserve_agent()

    def restore(self, spec: AgentSpec, state: AgentState) -> None:
        """Give an agent about to start its recorded turns, straight from the trace: its
        history, turn count, tokens and cost as they were, without playing the turns back
        through the loop (bench/README.md, "Resume"). What is restored is the longest run of
        first turns whose calls all finished; the rest (a turn with an interrupted call, or a
        last turn without calls, whose end the loop decides) is played back. An agent whose
        history the loop shaped beyond its turns (a compaction, a message it read) is played
        back whole.

        Called by the agent's supervisor before the agent starts (RunContext.restore)."""
        rec = self.recording.agents.get(spec.agent_id)
        if rec is None or rec.id in self.state.replayed_whole:
            return
        turns = _restorable(rec, self.state.unread_reports)
        if not turns:
            return
        assert self._run is not None
        run = self._run
        model = spec.agent_type.model or run.settings.model
        tokens = tool_calls = 0
        usd: float | None = 0.0
        for turn in turns:
            state.messages.extend(_turn_messages(turn))
            tokens += turn.input_tokens + turn.output_tokens
            tool_calls += len(turn.calls)
            usd = add_costs(usd, run.settings.prices.cost(
                model, turn.input_tokens, turn.output_tokens,
                cache_read_tokens=turn.cache_read_tokens,
                cache_write_tokens=turn.cache_write_tokens,
            ))  # fmt: skip
            for call in turn.calls:
                run.scheduler.claim_tool_use_id(call.id)
                if call.name == "agent" and call.child is not None:
                    self.skip_subtree(call)
        state.turns = len(turns)
        state.input_tokens = sum(t.input_tokens for t in turns)
        state.output_tokens = sum(t.output_tokens for t in turns)
        state.cost_usd = usd
        state.continue_reason = "tool_use"
        run.budget.add_recorded(spec.agent_id, tokens=tokens, tool_calls=tool_calls,
                                usd=usd or 0.0)  # fmt: skip
        self._restored[spec.agent_id] = len(turns)

    # -- matching: by id (a resumed run reuses its recorded agent ids) ----------------------

    def _agent_started(self, event: Any) -> None:
        rec = self.recording.agents.get(event.agent_id)
        parent = event.parent_tool_use_id
        if parent is None:
            self._roots += 1
            self._root_ids.append(event.agent_id)
            path = event.name
        else:
            owner = self._agents.get(event.parent_agent_id)
            path = (owner.path if owner is not None else "?") + " \u203a " + event.name
        self._agents[event.agent_id] = _Live(
            rec=rec, path=path, parent_tool_use_id=parent, live=rec is None,
            turns=self._restored.get(event.agent_id, 0),
        )  # fmt: skip
        if rec is not None:
            self._matched.add(rec.id)

    def _forks_here(self, live: _Live) -> bool:
        # Each agent the crash left running goes on live from its first unrecorded turn; a
        # turn cut mid-stream is not a recorded one, so it is asked again.
        rec = live.rec
        return rec is not None and rec.status is None and live.turns >= len(rec.turns)

    async def _play(self, turn: RecordedTurn) -> AsyncGenerator[StreamItem, None]:
        """A recorded turn in one piece of thinking and one of text: its deltas are not
        written again, so how it is cut does not matter, and a trace of a million deltas is
        rebuilt without a million events (bench/README.md, "Resume")."""
        await trio.lowlevel.checkpoint()
        if turn.thinking:
            yield ThinkingChunk(turn.thinking)
        if turn.text:
            yield TextChunk(turn.text)
        for call in turn.calls:
            self._calls[call.id] = call
            yield ToolCall(call.id, call.name, dict(call.input))
        yield TurnEnd(
            stop_reason=turn.stop_reason,  # type: ignore[arg-type]  # read from an event
            input_tokens=turn.input_tokens,
            output_tokens=turn.output_tokens,
        )

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        """As :meth:`Replayer.stream`; the messages the agent had not read at the crash go
        into its mailbox again when it reaches its last recorded turn (or its first live one),
        so it reads them at its next step, after the turns that came before them.

        Cancellation: as :meth:`Replayer.stream`.
        """
        if self.state.unread:
            self._deliver_unread(request.agent_id)
        async for item in super().stream(request):
            yield item

    def _deliver_unread(self, agent_id: str) -> None:
        live = self._agents.get(agent_id)
        if agent_id not in self.state.unread or live is None or live.rec is None:
            return
        if live.turns < len(live.rec.turns) - 1:
            return
        assert self._run is not None
        inbox = self._run.scheduler.inbox(agent_id)
        if inbox is None:
            return
        for text in self.state.unread.pop(agent_id):
            try:
                inbox.send_nowait(text)
            except (trio.WouldBlock, trio.ClosedResourceError):
                # It held them at the crash (a mailbox is bounded), so they fit; a full
                # mailbox now has newer messages first.
                self.delivery_failed.append(agent_id)
                return
            self.delivered += 1

    async def _report(self, agent_id: str) -> None:
        """Divergences of a resume are kept in :attr:`divergences`, never emitted: the
        rebuilt prefix emits nothing."""

    # -- the bus's filter ------------------------------------------------------------------

    def admit(self, event: Event) -> bool:
        """Whether *event* goes into the stream (True) or is the recorded prefix emitted
        again (False: the trace has it already). Runs first, synchronously, in every emit."""
        self.tap(event)
        kind = event.type
        rec = self.recording
        fields: Any = event
        if kind == "agent_started":
            return fields.agent_id not in rec.agents
        if kind == "agent_finished":
            agent = rec.agents.get(fields.agent_id)
            return agent is None or agent.status is None
        if kind == "tool_started":
            return fields.tool_use_id not in rec.calls
        if kind in ("tool_finished", "permission_requested", "permission_resolved"):
            call = rec.calls.get(fields.tool_use_id)
            return call is None or call.status is None
        if kind == "cancel_requested":
            return not self._ended_as_recorded(fields.target)
        if kind == "run_started":
            return False
        if kind in ("user_message", "message_queued"):
            return True  # nothing recorded is delivered or queued again: every one is new
        if fields.agent_id is None:
            return True
        live = self._agents.get(fields.agent_id)
        return live is None or live.live

    def _ended_as_recorded(self, node: str) -> bool:
        agent = self.recording.agents.get(node)
        if agent is not None:
            return agent.status is not None
        call = self.recording.calls.get(node)
        if call is None:
            return False
        if call.child is not None:
            return call.child.status is not None
        return call.status is not None


def _restorable(agent: RecordedAgent, rerun_children: set[str]) -> list[RecordedTurn]:
    """The first turns of *agent* that :meth:`Resumer.restore` can give it: each asked for
    calls, and every one of them is in the trace and finished. Its last such turn is followed
    by another model turn, whatever the loop would check. A turn that started a background
    sub-agent of *rerun_children* is played back: its call runs again, and starts it."""
    out: list[RecordedTurn] = []
    for turn in agent.turns:
        if not turn.calls or any(c.status is None for c in turn.calls):
            break
        if any(c.child is not None and c.child.id in rerun_children for c in turn.calls):
            break
        if turn.call_ids is not None and len(turn.call_ids) != len(turn.calls):
            break  # calls the crash came before never started: the turn is played back
        out.append(turn)
    return out


def _turn_messages(turn: RecordedTurn) -> tuple[Message, Message]:
    """A recorded turn as the loop puts it in the history: the reply (thinking, text, the
    calls in the model's order), then the calls' results."""
    content: list[Block] = []
    if turn.thinking:
        content.append(ThinkingBlock(text=turn.thinking))
    if turn.text:
        content.append(TextBlock(text=turn.text))
    content.extend(ToolUseBlock(id=c.id, name=c.name, input=dict(c.input)) for c in turn.calls)
    results = tuple(
        ToolResultBlock(tool_use_id=c.id, content=c.output or "", is_error=c.status != "ok")
        for c in turn.calls
    )
    return Message(role="assistant", content=tuple(content)), Message(role="user", content=results)


class _ResumedTool(_MockTool):
    """A tool of a resumed run: recorded calls answer with their recorded results, live calls
    run, an interrupted call runs again only when the tool is read-only or idempotent."""

    replayer: Resumer
    name: ClassVar[str] = "resumed"

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        """As :meth:`_MockTool.call`, but an interrupted call never stops the run.

        Cancellation: a checkpoint; a re-run call as its tool.
        """
        rec = self.replayer.recorded_call(ctx.tool_use_id)
        if (
            rec is not None and rec.child is not None and self.real is not None
            and rec.child.id in self.replayer.state.unread_reports
        ):
            # A background sub-agent whose report was not read: started again, it goes on
            # (or plays back to its recorded end) and its report comes as it would have.
            return await self.real.call(args, ctx)
        if rec is not None and rec.status is None:
            if self.real is not None and (rec.id in self.replayer.rerun or rec.name == "agent"):
                # An interrupted `agent` call runs again: its sub-agent is rebuilt and goes on.
                return await self.real.call(args, ctx)
            await trio.lowlevel.checkpoint()
            raise ToolError(INTERRUPTED_TEXT)
        if rec is not None and rec.name == "agent":
            self.replayer.skip_subtree(rec)
        return await super().call(args, ctx)


def _resumed(real: Tool | None, resumer: Resumer, name: str = "") -> Tool:
    keys = (
        "name",
        "description",
        "input_schema",
        "read_only",
        "idempotent",
        "concurrency_safe",
        "needs_permission",
        "edits_files",
        "permission_target_kind",
    )
    if real is not None:
        namespace = {key: getattr(real, key) for key in keys}
        cls_name = f"Resumed{type(real).__name__}"
    else:
        namespace = {
            "name": name,
            "description": f"{name} as recorded (a stand-in made by the resume)",
            "input_schema": {"type": "object"},
        }
        cls_name = "RecordedTool"
    cls: type[_ResumedTool] = type(cls_name, (_ResumedTool,), namespace)
    return cls(real, resumer)
