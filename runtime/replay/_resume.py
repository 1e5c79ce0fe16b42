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
import os
import re
from collections.abc import AsyncGenerator, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs
import orjson
import trio

from runtime.core import (
    EVENT_TYPES,
    VERSION,
    AgentStarted,
    Event,
    EventDecodeError,
    PermissionRequested,
    PermissionResolved,
    Provider,
    StreamItem,
    TextChunk,
    ThinkingChunk,
    Tool,
    ToolCall,
    ToolContext,
    ToolError,
    TraceError,
    TurnEnd,
    UnknownEventType,
    event_from_dict,
)
from runtime.trace import TraceTree

from ._recording import RecordedCall, RecordedTurn, Recording, _build
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
    runs = {e.run_id for e in events}
    if len(runs) > 1:
        raise TraceError(f"{name} holds {len(runs)} runs ({', '.join(sorted(runs))}): "
                         "a resumed trace holds one run")
    rec = Recording(source=name, run_id=events[0].run_id)
    try:
        _build(rec, events)
    except (TypeError, AttributeError, ValueError) as exc:  # a field of the wrong type
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
        resumes=sum(1 for e in events if e.type == "run_resumed"),
    )
    _scan(state, events)
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


class _Delta:
    """A text or thinking delta as the recording reads it: the bulk of a trace, so it is not
    built as an event (docs/resume.md; bench/bench_resume.py)."""

    __slots__ = ("agent_id", "run_id", "seq", "text", "ts", "type")

    def __init__(self, fields: dict[str, Any]) -> None:
        self.type = fields["type"]
        self.agent_id = fields["agent_id"]
        self.text = fields["text"]
        self.seq = fields["seq"]
        self.ts = fields["ts"]
        self.run_id = fields["run_id"]
        if not (
            self.text.__class__ is str
            and self.seq.__class__ is int
            and self.run_id.__class__ is str
            and (self.ts.__class__ is float or self.ts.__class__ is int)
        ):
            raise EventDecodeError(f"{self.type}: a field has the wrong type")


_DELTAS = (b'{"type":"text_delta",', b'{"type":"thinking_delta",')
_COMMON = frozenset(("type", "seq", "ts", "run_id"))
_stamp = object.__setattr__


def _event(fields: dict[str, Any]) -> Event:
    """The event of a decoded line: built with its class's own ``__init__`` (several times
    cheaper than the converter on a trace of a million lines); a line that does not fit goes
    through the converter, which names what is wrong."""
    cls = EVENT_TYPES.get(fields.get("type", ""))
    seq, ts, run_id = fields.get("seq"), fields.get("ts"), fields.get("run_id")
    if cls is None or seq.__class__ is not int or run_id.__class__ is not str or not (
        ts.__class__ is float or ts.__class__ is int
    ):
        return event_from_dict(fields)
    try:
        event: Event = cls(**{k: v for k, v in fields.items() if k not in _COMMON})
    except (TypeError, ValueError):
        return event_from_dict(fields)
    _stamp(event, "seq", seq)
    _stamp(event, "ts", ts)
    _stamp(event, "run_id", run_id)
    return event


_SEQ_AT = {prefix: len(prefix) + len(b'"seq":') for prefix in _DELTAS}
_AGENT_KEY = b'"agent_id":"'


def _delta_agent(line: bytes) -> bytes | None:
    """The agent id of a delta line as the runtime writes it, without decoding the line."""
    start = line.find(_AGENT_KEY)
    if start < 0:
        return None
    start += len(_AGENT_KEY)
    end = line.find(b'"', start)
    return line[start:end] if end > 0 else None


def _decode(
    data: bytes, keep: int, name: str, tree: TraceTree | None
) -> tuple[list[Any], int, float]:
    """Every event of the whole lines, checked: no corrupt line, no gap in ``seq``; each but
    the deltas also applied to *tree* (a view needs no recorded text).

    Deltas are the bulk of a trace and only the agents that are rebuilt need their text (the
    ones running at the crash, the roots, the sub-agents of interrupted calls: a finished
    call answers from the trace, bench/README.md, "Resume"). So a first pass decodes every
    other line and only checks a delta's ``seq``; a second decodes the deltas of those agents
    (as light stand-ins, :class:`_Delta`).

    Returns:
        The events in line order (without the deltas not needed), the last ``seq`` and the
        last line's ``ts``.
    """
    lines = data[:keep].splitlines()
    events: list[Any] = [None] * len(lines)
    loads = orjson.loads
    apply = tree.apply_dict if tree is not None else None
    last = 0
    deltas: list[int] = []
    text_at, thinking_at = _SEQ_AT[_DELTAS[0]], _SEQ_AT[_DELTAS[1]]
    text_head, thinking_head = _DELTAS
    for index, line in enumerate(lines):
        # A delta's seq read in place (``{"type":"text_delta","seq":N,``): the hot loop of a
        # resume, so inline; a line of another form is decoded below.
        start = (
            text_at if line.startswith(text_head)
            else thinking_at if line.startswith(thinking_head) else 0
        )
        digits = line[start : line.find(b",", start)] if start else b""
        if digits.isdigit():
            seq = int(digits)
            deltas.append(index)
        else:
            if not line.strip():
                continue
            event = _decoded(line, index, name, apply, loads)
            events[index] = event
            seq = event.seq
        if seq != last + 1:
            raise TraceError(
                f"{name}:{index + 1}: seq goes from {last} to {seq}: events are missing, "
                "so the run's state cannot be rebuilt"
            )
        last = seq
    wanted = _rebuilt_agents(events)
    for index in deltas:
        line = lines[index]
        agent = _delta_agent(line)
        if agent is None or b"\\" in agent or agent in wanted:  # an escaped id: decode it
            events[index] = _decoded(line, index, name, None, loads)
    return [e for e in events if e is not None], last, _last_ts(lines)


def _last_ts(lines: list[bytes]) -> float:
    """The ``ts`` of the last event line (the gap of ``run_resumed`` is measured from it)."""
    for line in reversed(lines):
        if line.strip():
            try:
                ts = orjson.loads(line).get("ts")
            except (orjson.JSONDecodeError, AttributeError):
                return 0.0
            return float(ts) if isinstance(ts, int | float) else 0.0
    return 0.0


def _decoded(line: bytes, index: int, name: str, apply: Any, loads: Any) -> Any:
    """One line decoded (and applied to the tree): its event, or a :class:`_Delta`."""
    try:
        fields = loads(line)
        if line.startswith(_DELTAS):
            return _Delta(fields)
        event = _event(fields)
        if apply is not None:
            apply(fields)
        return event
    except UnknownEventType as exc:
        raise TraceError(
            f"{name}:{index + 1}: event type {exc.type_name!r} is not one this version knows: "
            "its state cannot be rebuilt"
        ) from None
    except (EventDecodeError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise TraceError(
            f"{name}:{index + 1}: corrupt line ({exc}); a resume needs every event of the run"
        ) from None


def _rebuilt_agents(events: list[Any]) -> set[bytes]:
    """The ids (as bytes) of the agents a resume plays back: the roots, those not finished,
    and those whose ``agent`` call did not finish."""
    finished: set[str] = set()
    open_calls: set[str] = set()
    parents: dict[str, str | None] = {}
    for event in events:
        if event is None:
            continue
        kind = event.type
        if kind == "agent_started":
            parents[event.agent_id] = event.parent_tool_use_id
        elif kind == "agent_finished":
            finished.add(event.agent_id)
        elif kind == "tool_started" and event.name == "agent":
            open_calls.add(event.tool_use_id)
        elif kind == "tool_finished":
            open_calls.discard(event.tool_use_id)
    return {
        agent.encode()
        for agent, call in parents.items()
        if call is None or agent not in finished or call in open_calls
    }


def _scan(state: ResumeState, events: Iterable[Event]) -> None:
    """The ids, permission decisions and touched files of the recorded run."""
    rec = state.recording
    top = request = 0
    for ev in events:
        if isinstance(ev, AgentStarted):
            state.agent_ids.setdefault(ev.parent_tool_use_id, []).append(ev.agent_id or "")
            match = _AGENT_NUMBER.search(ev.agent_id or "")
            if match:
                top = max(top, int(match.group(1)))
        elif isinstance(ev, PermissionRequested | PermissionResolved):
            match = _REQUEST_NUMBER.search(ev.request_id)
            if match:
                request = max(request, int(match.group(1)))
            if isinstance(ev, PermissionResolved):
                state.decided[ev.tool_use_id] = (ev.granted, ev.reason)
                state.waiting.discard(ev.tool_use_id)
            else:
                state.waiting.add(ev.tool_use_id)
        elif ev.type == "tool_finished":
            call = rec.calls.get(ev.tool_use_id)  # type: ignore[attr-defined]
            if call is not None and call.status == "ok" and call.name in _FILE_TOOLS:
                target = call.input.get("path")
                if isinstance(target, str):
                    state.touched.pop(target, None)
                    state.touched[target] = call
    state.next_agent = top + 1
    state.next_request = request + 1
    for call in rec.calls.values():
        if call.status == "denied":
            state.decided[call.id] = (False, (call.output or "").removeprefix(_DENIED))
        elif call.status is not None:
            state.decided[call.id] = (True, "decided before the resume")


_FILE_TOOLS = ("read", "write", "edit")


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
            rec=rec, path=path, parent_tool_use_id=parent, live=rec is None
        )
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
