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
import io
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

from ._recording import (
    RecordedAgent,
    RecordedCall,
    RecordedTurn,
    Recording,
    Streamed,
    _agent_started,
    _cancel_requested,
    _finish_build,
    recorded_turn,
)
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
_DECIDED = (True, "decided before the resume")
"""The decision of a recorded call that ran (one tuple for them all: it is only read)."""


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

    The file is read twice, line by line for the run and a few megabytes at a time for the
    text of the agents that are rebuilt (:class:`_Reader`); nothing holds the whole file.

    Raises:
        TraceError: one line: not there, being written by a live process, written by
            another version, a corrupt line, a gap in ``seq``, several runs, no agent.
    """
    where = Path(path)
    name = os.fspath(path)
    # The cycle collector is off while the recording is built: its passes over a growing heap
    # of a million objects that all live on cost more than the build (as for `trace show`,
    # docs/architecture.md, "Reading a trace file").
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with open(where, "rb", buffering=0) as f:
            _refuse_live_writer(f.fileno(), name)
            return _Reader(name, where, this_version, tree).read(f)
    except OSError as exc:
        raise TraceError(f"cannot read {name}: {exc.strerror}") from exc
    finally:
        if was_enabled:
            gc.enable()


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


# How the trace writer starts the lines a resume reads only for the agents it rebuilds.
_DELTAS = (b'{"type":"text_delta","seq":', b'{"type":"thinking_delta","seq":')
_TURN_PREFIX = b'{"type":"turn_finished","seq":'
assert [len(p) for p in (*_DELTAS, _TURN_PREFIX)] == [27, 31, 30]  # the first reading's slices
_TURN = re.compile(
    rb'\{"type":"turn_finished","seq":(\d+),"ts":[-+.0-9eE]+,"run_id":"[^"\\]*",'
    rb'"agent_id":"([^"\\]*)","parent_tool_use_id":(?:null|"[^"\\]*"),"turn":\d+,'
    rb'"stop_reason":"(tool_use|end_turn)","input_tokens":(\d+),"output_tokens":(\d+),'
)
"""A ``turn_finished`` line as the writer lays it out, of a turn that ended as most do: its
place, agent, stop reason and tokens are read from it without decoding it."""
_STOPS = {b"tool_use": "tool_use", b"end_turn": "end_turn"}
_KINDS = {kind: kind for kind in EVENT_TYPES}
"""The event types this version knows, each as one string (a line's is looked up here)."""
_Mark = tuple[int, float, str, str | None, str | None]
"""What a rebuild reads of a decoded line that is not a turn: its ``seq``, ``ts``, type,
agent and ``tool_use_id`` (:func:`_turns_of`)."""
"""The stop reasons :data:`_TURN` reads, as one string each (not one per turn)."""
_BLOCK = 1 << 23
"""The bytes of trace the second reading takes at a time (about 40,000 lines)."""
_READ_BUFFER = 1 << 16
"""The first reading's buffer (its lines are split by the file object, in C)."""
_FEW = 8
"""Up to this many rebuilt agents, their lines are found by a search for each id (in C);
past it, each delta's id is read."""


class _Blocks:
    """The whole lines of the file *f* (unbuffered, at its start) a block at a time: each as
    ``(offset, buffer, end)``, where ``buffer[0]`` is the newline that ended the line before
    (every line starts after a newline), ``buffer[end]`` is its last newline and ``offset``
    is where ``buffer[1]`` is in the file. The buffer is reused: it holds the next block once
    the loop goes on. A last line without its newline (a killed writer) is left out."""

    def __init__(self, f: Any) -> None:
        self.f = f

    def __iter__(self) -> Iterator[tuple[int, bytearray, int]]:
        buf = bytearray(min(_BLOCK, os.fstat(self.f.fileno()).st_size) + 2)
        buf[0] = 10
        have = 1
        offset = 0
        while True:
            if have == len(buf):  # a line longer than a block
                buf.extend(bytes(len(buf)))
            read = self.f.readinto(memoryview(buf)[have:])
            if not read:
                break
            have += read
            end = buf.rfind(b"\n", 0, have)
            if end <= 0:
                continue
            yield offset, buf, end
            offset += end
            rest = have - end
            buf[:rest] = buf[end:have]
            have = rest


class _Whole(io.RawIOBase):
    """The file *f* (unbuffered, at its start) up to byte *end*: its whole lines, for a
    buffered reader to split (a killed writer's cut last line is never seen)."""

    def __init__(self, f: Any, end: int) -> None:
        super().__init__()
        self.f = f
        self.left = end

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self.left <= 0:
            return 0
        with memoryview(b) as view:
            read: int = self.f.readinto(view[: min(len(view), self.left)])
        self.left -= read
        return read


def _tail(f: Any, size: int) -> tuple[int, bytes]:
    """Where the whole lines of the file *f* (unbuffered) end (past its last newline), and
    its last whole line that is not blank (b"" if none), read from its end."""
    window = 1 << 16
    end = -1
    while True:
        start = max(0, size - window)
        f.seek(start)
        data = f.read(size - start)
        if end < 0:
            last = data.rfind(b"\n")
            if last < 0 and start > 0:
                window *= 4
                continue
            end = start + last + 1
            size = end  # what follows is the cut line
            data = data[: last + 1]
        lines = data.split(b"\n")
        for line in reversed(lines if start == 0 else lines[1:]):  # the first may be a part
            if line.strip():
                return end, line
        if start == 0:
            return end, b""
        window *= 4


class _Reader:
    """One reading of a trace for a resume: the checks (a corrupt line, a gap in ``seq``,
    several runs, the version) and the run's state (:class:`ResumeState`), built from each
    line as it is decoded, once.

    What a resume never needs is not decoded (bench/README.md, "Resume"): the deltas, and
    the ``turn_finished`` lines in the writer's layout of a turn that ended on a tool call or
    its answer, whose place, agent, stop reason and tokens are read in C (:data:`_TURN`);
    these are decoded whole only for the agents that are rebuilt (the roots, those the crash
    left running, those under an interrupted call, background children whose report was not
    read), by a second reading that looks for their lines only. Every line is counted, so a
    missing or extra one shifts the place of every later line and is found by its ``seq``.
    """

    def __init__(self, name: str, where: Path, this_version: str, tree: TraceTree | None):
        self.name = name
        self.where = where
        self.this_version = this_version
        self.tree = tree
        self.rec = Recording(source=name, run_id="")
        self.state = ResumeState(
            recording=self.rec, path=where, size=0, keep=0, last_seq=0, last_ts=0.0,
            agent_ids={}, next_agent=1, decided={}, next_request=1, touched={},
        )  # fmt: skip
        self.events: dict[str | None, list[_Mark]] = {}
        """Per agent, the marks of its decoded lines but the turns, in order (those of an
        agent that is not rebuilt are let go once that is known: a finished subtree's are
        most of a big trace's, and nothing reads them again)."""
        self.turn_lines: list[tuple[int, dict[str, Any]]] = []
        """The decoded ``turn_finished`` lines, with their line index."""
        self.blanks = 0
        self.words: dict[str, str] = {}
        """Tool names and statuses, each kept once (a million-event trace repeats them)."""
        self.runs: set[str] = set()
        self.ordered_ids = True
        # Agents with a turn decoded: their later turns are decoded too, so that the tree's
        # last stop reason is their last turn's (a finished agent's turns are not applied).
        self.stopped: set[str] = set()
        self.top = self.request = 0
        self.parents: dict[str, str | None] = {}
        self.finished: set[str] = set()
        self.open_agent_calls: set[str] = set()
        self.background_parent: dict[str, str] = {}
        self.reports_read: set[str] = set()
        self.sent: list[tuple[str, str, int]] = []
        """Messages between agents: (as the mailbox holds it, sender, sender's turn)."""
        self.handlers: dict[str, Any] = {
            "run_started": self._run_started,
            "agent_started": self._agent_started,
            "turn_finished": self._turn_finished,
            "tool_started": self._tool_started,
            "tool_finished": self._tool_finished,
            "cancel_requested": self._cancel_requested,
            "agent_finished": self._agent_finished,
            "run_finished": self._run_finished,
            "run_resumed": self._run_resumed,
            "permission_requested": self._permission,
            "permission_resolved": self._permission,
            "context_compacted": self._shaped,
            "user_message": self._user_message,
            "agent_message": self._agent_message,
            "message_queued": self._message_queued,
        }

    # -- reading -----------------------------------------------------------------------------

    def read(self, f: Any) -> ResumeState:
        name, rec, state = self.name, self.rec, self.state
        state.size = os.fstat(f.fileno()).st_size
        state.keep, last_line = _tail(f, state.size)
        f.seek(0)
        try:
            count = self._lines(io.BufferedReader(_Whole(f, state.keep), _READ_BUFFER))
        except _Gap:
            raise _gap(self.where, name) from None
        except (TypeError, AttributeError, ValueError, KeyError) as exc:  # a field's type
            raise TraceError(f"{name}: corrupt trace ({exc}); it cannot be resumed") from None
        if not self.runs:
            raise TraceError(f"{name}: not a trace (no whole event line)")
        if not rec.run_id:
            rec.run_id = next(iter(self.runs))
        state.last_seq, state.last_ts = _seq_ts(last_line)
        if state.last_seq != count - self.blanks:
            raise _gap(self.where, name)
        if len(self.runs) > 1:
            raise TraceError(f"{name} holds {len(self.runs)} runs "
                             f"({', '.join(sorted(self.runs))}): a resumed trace holds one run")
        if rec.version is None:
            raise TraceError(f"{name}: no run_started: not the beginning of a run")
        if rec.version != self.this_version:
            raise TraceError(
                f"{name}: written by trio-agents {rec.version}; this is {self.this_version}: "
                "resume it with the version that wrote it (its state is rebuilt as that "
                "version made it)"
            )
        if not rec.roots:
            raise TraceError(f"{name}: run {rec.run_id} has no agent to resume")
        try:
            self._rebuild(f)
            self._finish()
        except (TypeError, AttributeError, ValueError, KeyError) as exc:
            raise TraceError(f"{name}: corrupt trace ({exc}); it cannot be resumed") from None
        return state

    def _lines(self, lines: Iterable[bytes]) -> int:
        """Read every whole line (the first reading); returns how many there are.

        The loop is the floor's (``trace show``): the file object splits the lines, and a
        delta is passed over on its first bytes. Its place is its index, counted. A decoded
        line goes to the tree's handler of its kind and to this reading's, looked up once."""
        loads = orjson.loads
        kinds = _KINDS
        tree = self.tree
        apply = tree.apply_dict if tree is not None else None
        tree_handlers = tree.handlers if tree is not None else {}
        tree_run = tree.run_id if tree is not None else None
        handlers = self.handlers
        agents = self.rec.agents
        stopped = self.stopped
        events = self.events
        run_id = None
        index = -1
        blanks = 0
        text, thinking = _DELTAS
        turn_prefix = _TURN_PREFIX
        for index, line in enumerate(lines):
            # A slice compared costs half what startswith does (its arguments are parsed).
            if line[:27] == text or line[:31] == thinking:
                continue
            turn = line[:30] == turn_prefix
            if turn:
                match = _TURN.match(line)
                if match is not None:
                    agent_id = match[2].decode()
                    if agent_id not in stopped:
                        if int(match[1]) != index + 1 - blanks:
                            raise _Gap
                        agent = agents.get(agent_id)
                        if agent is not None:
                            turns = agent.turns
                            turns.append(RecordedTurn(
                                number=len(turns) + 1, stop_reason=_STOPS[match[3]],
                                input_tokens=int(match[4]), output_tokens=int(match[5]),
                            ))  # fmt: skip
                        continue
            try:
                fields = loads(line)
                kind = kinds[fields["type"]]  # a known type, as one string
                seq, ts, rid = fields["seq"], fields["ts"], fields["run_id"]
                if not (
                    seq.__class__ is int and rid.__class__ is str
                    and (ts.__class__ is float or ts.__class__ is int) and "agent_id" in fields
                ):  # fmt: skip
                    raise EventDecodeError("not an event")
                if apply is not None and not turn:
                    handler = tree_handlers.get(kind)
                    if rid == tree_run and handler is not None:
                        handler(fields)  # as apply_dict does, its checks made above
                    else:
                        apply(fields)
                        tree_run = tree.run_id  # type: ignore[union-attr]  # apply is its
            except (orjson.JSONDecodeError, EventDecodeError, KeyError, TypeError):
                if not line.strip():
                    blanks += 1
                    continue
                # What is wrong, with the line's number (an error; else as above).
                fields = _decoded(line, index, self.name, None if turn else apply, loads)
                kind, seq, ts, rid = fields["type"], fields["seq"], fields["ts"], fields["run_id"]
            if seq != index + 1 - blanks:
                raise _Gap
            if turn:
                self.turn_lines.append((index, fields))
                stopped.add(fields["agent_id"])
            else:
                # What the rebuild reads of it (the line itself is let go: what the tree and
                # the recording keep of it, they hold).
                agent_id = fields["agent_id"]
                mark = (seq, ts, kind, agent_id, fields.get("tool_use_id"))
                mine = events.get(agent_id)
                if mine is None:
                    events[agent_id] = [mark]
                else:
                    mine.append(mark)
            if rid != run_id:
                run_id = rid
                self.runs.add(rid)
            handler = handlers.get(kind)
            if handler is not None:
                handler(fields)
        self.blanks = blanks
        return index + 1

    # -- what each event says ----------------------------------------------------------------

    def _run_started(self, ev: dict[str, Any]) -> None:
        self.rec.version, self.rec.config = ev["version"], dict(ev["config"])

    def _agent_started(self, ev: dict[str, Any]) -> None:
        _agent_started(self.rec, ev)
        agent_id = ev["agent_id"] or ""
        self.state.agent_ids.setdefault(ev["parent_tool_use_id"], []).append(agent_id)
        match = _AGENT_NUMBER.search(agent_id)
        if match:
            self.top = max(self.top, int(match.group(1)))
        self.parents[ev["agent_id"]] = ev["parent_tool_use_id"]
        if ev.get("background"):
            self.background_parent[ev["agent_id"]] = ev["parent_agent_id"]

    def _turn_finished(self, ev: dict[str, Any]) -> None:
        agent = self.rec.agents.get(ev["agent_id"])
        if agent is not None:
            recorded_turn(ev, agent, (), (), {})

    def _tool_started(self, ev: dict[str, Any]) -> None:
        agent = self.rec.agents.get(ev["agent_id"])
        if agent is None:
            return
        turns = agent.turns
        if not turns:
            return
        inputs = ev["input"]  # read only, as the tree's (a call's input is copied to run)
        if inputs.__class__ is not dict:
            raise TypeError(f"tool_started input is not an object: {inputs!r}")
        call_id, name = ev["tool_use_id"], ev["name"]
        name = self.words.setdefault(name, name)  # one string per tool, not one per call
        call = RecordedCall(id=call_id, name=name, input=inputs, agent=agent, turn=len(turns))
        self.rec.calls[call_id] = call
        turns[-1].calls.append(call)
        if name == "agent":
            self.open_agent_calls.add(call_id)

    def _tool_finished(self, ev: dict[str, Any]) -> None:
        call_id = ev["tool_use_id"]
        call = self.rec.calls.get(call_id)
        if call is None:
            self.open_agent_calls.discard(call_id)
            return
        status = ev["status"]
        call.status, call.output = self.words.setdefault(status, status), ev["output"]
        if call.name == "agent" and call_id in self.open_agent_calls:
            self.open_agent_calls.discard(call_id)
            for child in self.state.agent_ids.get(call_id, ()):
                if child in self.finished and child not in self.background_parent:
                    # Finished under a finished call: not rebuilt (see _rebuild), so its
                    # lines are not needed again.
                    self.events.pop(child, None)
        elif call.status == "ok" and call.name in _FILE_TOOLS:
            target = call.input.get("path")
            if isinstance(target, str):
                self.state.touched.pop(target, None)
                self.state.touched[target] = call

    def _cancel_requested(self, ev: dict[str, Any]) -> None:
        _cancel_requested(self.rec, ev)

    def _agent_finished(self, ev: dict[str, Any]) -> None:
        agent = self.rec.agents.get(ev["agent_id"])
        if agent is not None:
            agent.status, agent.result, agent.error = ev["status"], ev["result"], ev["error"]
            self.finished.add(agent.id)

    def _run_finished(self, ev: dict[str, Any]) -> None:
        self.rec.status = ev["status"]

    def _run_resumed(self, ev: dict[str, Any]) -> None:
        self.state.resumes += 1

    def _permission(self, ev: dict[str, Any]) -> None:
        match = _REQUEST_NUMBER.search(ev["request_id"])
        if match:
            self.request = max(self.request, int(match.group(1)))
        if ev["type"] == "permission_resolved":
            self.state.decided[ev["tool_use_id"]] = (ev["granted"], ev["reason"])
            self.state.waiting.discard(ev["tool_use_id"])
        else:
            self.state.waiting.add(ev["tool_use_id"])

    def _shaped(self, ev: dict[str, Any]) -> None:
        """An event after which an agent's history holds more than its turns."""
        self.state.replayed_whole.add(ev["agent_id"])

    def _user_message(self, ev: dict[str, Any]) -> None:
        self._shaped(ev)
        waiting = self.state.unread.get(ev["agent_id"])
        if waiting and ev["text"] in waiting:
            waiting.remove(ev["text"])  # a message from another agent, read
        if ev["text"].startswith(_REPORT_HEAD):  # a background sub-agent's report, read
            child = ev["text"][len(_REPORT_HEAD) :].split(" ", 1)[0]
            if self.background_parent.get(child) == ev["agent_id"]:
                self.reports_read.add(child)

    def _agent_message(self, ev: dict[str, Any]) -> None:
        """A message between agents: unread until the recipient's ``user_message`` of it."""
        sender = ev["from_agent_id"]
        text = f"[message from {_described(self.rec, sender)}]\n{ev['text']}"
        self.state.unread.setdefault(ev["to_agent_id"], []).append(text)
        agent = self.rec.agents.get(sender)
        self.sent.append((text, sender, len(agent.turns) if agent is not None else 0))

    def _message_queued(self, ev: dict[str, Any]) -> None:
        """A user's message (``Runtime.send_message``): unread until the recipient's
        ``user_message`` of it, as a message between agents; the mailbox keeps their order."""
        self.state.unread.setdefault(ev["agent_id"], []).append(ev["text"])

    # -- the agents that are rebuilt ---------------------------------------------------------

    def _rebuild(self, f: Any) -> None:
        """Give the rebuilt agents their turns whole (text, thinking, the model's order of
        calls, delays) from their lines, and the tree the turns of the agents that had not
        finished (a finished agent's ``agent_finished`` has its totals)."""
        state, rec = self.state, self.rec
        state.unread_reports = set(self.background_parent) - self.reports_read
        finished, open_calls = self.finished, self.open_agent_calls
        rebuilt = {
            agent
            for agent, call in self.parents.items()
            if call is None or agent not in finished or call in open_calls
            or agent in state.unread_reports
        }  # fmt: skip
        decoded = {fields["seq"] for _, fields in self.turn_lines}
        wanted = _Wanted(self.name, f, rebuilt)  # never empty: a root is always rebuilt
        f.seek(0)
        for offset, buf, end in _Blocks(f):
            wanted.take(offset, buf, end)
        lines = [
            e for e in wanted.lines if e["type"] != "turn_finished" or e["seq"] not in decoded
        ]  # those of the first reading
        events = self.events
        mine: list[dict[str, Any] | _Mark] = [e for agent in rebuilt for e in events.get(agent, ())]
        mine.extend(e for e in events.get(None, ()) if e[2] == "run_resumed")
        mine.extend(fields for _, fields in self.turn_lines if fields["agent_id"] in rebuilt)
        mine.sort(key=_seq)
        for agent_id in rebuilt:
            if agent_id in rec.agents:
                rec.agents[agent_id].turns = []
        text = _turns_of(rec, heapq.merge(mine, lines, key=_seq))
        self.ordered_ids = all(
            t.call_ids is not None for a in rebuilt if a in rec.agents
            for t in rec.agents[a].turns
        ) and all(fields.get("tool_use_ids") is not None for _, fields in self.turn_lines)
        _finish_build(rec, text, self.ordered_ids)
        if self.tree is not None:
            self._tree_turns(lines)

    def _tree_turns(self, lines: list[dict[str, Any]]) -> None:
        """The tree's turns: those decoded, and of the agents not finished every one."""
        assert self.tree is not None
        tree = self.tree
        running = {a for a, node in tree.agents.items() if node.finished_ts is None}
        turns = list(self.turn_lines)
        turns.extend(
            (-1, fields) for fields in lines
            if fields["type"] == "turn_finished" and fields["agent_id"] in running
        )  # fmt: skip
        turns.sort(key=lambda pair: _seq(pair[1]))
        for index, fields in turns:
            try:
                tree.apply_dict(fields)
            except EventDecodeError as exc:
                where = f":{index + 1}" if index >= 0 else ""
                raise TraceError(
                    f"{self.name}{where}: corrupt line ({exc}); a resume needs every event "
                    "of the run"
                ) from None

    def _finish(self) -> None:
        state, rec = self.state, self.rec
        state.next_agent = self.top + 1
        state.next_request = self.request + 1
        # A message whose send_message call did not finish is not delivered again: the call
        # runs again (it is read-only, so it sends it again) or the model reads it was cut.
        cut = set()
        for text, sender, turn in self.sent:
            call = _sending_call(rec, sender, turn)
            if call is not None and call.status is None:
                cut.add(text)
        state.unread = {
            agent: kept for agent, texts in state.unread.items()
            if agent in rec.agents and rec.agents[agent].status is None
            and (kept := [t for t in texts if t not in cut])
        }  # fmt: skip
        for call in rec.calls.values():
            if call.status == "denied":
                state.decided[call.id] = (False, (call.output or "").removeprefix(_DENIED))
            elif call.status is not None:
                state.decided[call.id] = _DECIDED


def _turns_of(
    rec: Recording, events: Iterable[dict[str, Any] | _Mark]
) -> dict[str | None, list[str]]:
    """Give agents their turns from *events* (theirs, in order: their deltas and turns
    decoded, the marks of their other lines): as :func:`~runtime.replay._recording._build`,
    with the calls and ends the first reading recorded already. Returns the text streamed
    after each one's last turn."""
    streamed = Streamed()
    text, thinking = streamed.text, streamed.thinking
    last_ts: dict[str | None, float] = {}
    agents, calls = rec.agents, rec.calls
    for ev in events:
        fields = None
        if isinstance(ev, tuple):
            _, ts, kind, aid, tool_use_id = ev
        elif streamed.take(ev):  # a delta: its text is kept
            continue
        else:
            fields = ev
            ts, kind, aid, tool_use_id = ev["ts"], ev["type"], ev["agent_id"], None
        if kind == "turn_finished" and aid in agents and fields is not None:
            recorded_turn(fields, agents[aid], text.pop(aid, ()), thinking.pop(aid, ()), last_ts)
        elif kind == "tool_started" and aid in agents and tool_use_id is not None:
            call = calls.get(tool_use_id)
            if call is not None and call.agent is agents[aid]:
                call.agent.turns[call.turn - 1].calls.append(call)
        elif kind == "agent_finished" and aid in agents:
            agents[aid].tail_text = "".join(text.pop(aid, ()))
            agents[aid].tail_thinking = "".join(thinking.pop(aid, ()))
        elif kind == "run_resumed":
            # A turn cut by the crash was asked again: its streamed text is no turn's.
            text.clear()
            thinking.clear()
        if aid is not None:
            last_ts[aid] = ts
    return text


class _Wanted:
    """The deltas and the ``turn_finished`` lines not decoded of some agents, looked for in
    each block (see :class:`_Blocks`) and decoded, in order."""

    def __init__(self, name: str, f: Any, agents: Iterable[str]) -> None:
        self.name = name
        self.f = f
        self.lines: list[dict[str, Any]] = []
        self.agents = set(agents)
        self.needles = [b'"agent_id":' + orjson.dumps(agent) + b"," for agent in self.agents]
        self.keys = {n[len(_AGENT_KEY) : -2] for n in self.needles}

    def take(self, offset: int, buf: bytearray, end: int) -> None:
        """Decode the lines of the block that are wanted."""
        if not self.agents:
            return
        if len(self.needles) <= _FEW and all(b"\\" not in n for n in self.needles):
            # `"agent_id":"ID",` occurs in a line as that key only: a string value's quotes
            # are escaped. So each id is searched for in the block (in C, where a loop over a
            # million lines in Python costs a tenth of a second per id).
            found: set[int] = set()
            for needle in self.needles:
                at = buf.find(needle, 0, end)
                while at >= 0:
                    found.add(buf.rfind(b"\n", 0, at))
                    stop = buf.find(b"\n", at, end)
                    if stop < 0:
                        break
                    at = buf.find(needle, stop, end)
            starts: Iterable[int] = sorted(found)
        else:
            starts = _lines_of(buf, end, self.keys)
        loads = orjson.loads
        for start in starts:
            first = start + 1
            if not buf.startswith(_DELTAS, first) and _TURN.match(buf, first) is None:
                continue
            line = bytes(buf[first : buf.find(b"\n", first)])
            try:
                fields = _decoded(line, 0, self.name, None, loads)
            except TraceError:
                index = _line_index(self.f, offset + start)
                fields = _decoded(line, index, self.name, None, loads)
            self.lines.append(fields)


_AGENT_KEY = b'"agent_id":"'


def _line_index(f: Any, at: int) -> int:
    """The index of the line starting at byte *at* of the file *f* (for an error's line
    number; the file's position is left as it is)."""
    count = done = 0
    while done < at:
        data = os.pread(f.fileno(), min(_BLOCK, at - done), done)
        if not data:
            break
        count += data.count(b"\n")
        done += len(data)
    return count


def _lines_of(buf: bytearray, end: int, keys: set[bytes]) -> list[int]:
    """Where each delta or turn line of the block of an agent of *keys* starts (its newline
    before), with those whose agent id is escaped (they are decoded to know it)."""
    starts = []
    at = 0
    while at < end:
        stop = buf.find(b"\n", at + 1)
        if buf.startswith(_DELTAS, at + 1) or buf.startswith(_TURN_PREFIX, at + 1):
            key = buf.find(_AGENT_KEY, at + 1, stop)
            close = buf.find(b'"', key + len(_AGENT_KEY), stop) if key >= 0 else -1
            agent = bytes(buf[key + len(_AGENT_KEY) : close]) if close >= 0 else None
            if agent is None or b"\\" in agent or agent in keys:
                starts.append(at)
        at = stop
    return starts


def _seq(fields: dict[str, Any] | _Mark) -> int:
    seq: int = fields[0] if isinstance(fields, tuple) else fields["seq"]
    return seq


def _seq_ts(line: bytes) -> tuple[int, float]:
    """The ``seq`` and ``ts`` of the last event line (the gap of ``run_resumed`` is measured
    from it)."""
    try:
        fields = orjson.loads(line)
        seq, ts = fields.get("seq"), fields.get("ts")
    except (orjson.JSONDecodeError, AttributeError):
        return -1, 0.0
    return (
        seq if isinstance(seq, int) else -1,
        float(ts) if isinstance(ts, int | float) else 0.0,
    )


class _Gap(Exception):
    """A line whose ``seq`` is not its place: :func:`_gap` names the first gap."""


def _gap(where: Path, name: str) -> TraceError:
    """The error naming the first gap in ``seq`` (read line by line: only on a bad trace)."""
    last = 0
    with open(where, "rb", buffering=1 << 16) as f:
        for index, line in enumerate(f):
            if not line.strip() or not line.endswith(b"\n"):
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


_REPORT_HEAD = "[background sub-agent "
"""How a background sub-agent's report to its parent begins (docs/collaboration.md)."""


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
