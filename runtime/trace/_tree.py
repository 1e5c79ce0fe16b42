"""The run tree, rebuilt from the flat event stream (docs/tree.md).

:class:`TraceTree` is the one implementation of the tree: the live view feeds it events as they are
emitted, ``trace show`` feeds it a file of a million lines. Both go through the same per-type
handlers, which read an event's fields by name from a mapping: :meth:`TraceTree.apply_dict` hands
them the JSON object straight from the decoder (the fast path for files), :meth:`TraceTree.apply`
hands them a read-only view of an :class:`~runtime.core._events.Event`.

The handlers cost O(1) per event, except that token usage is added to every ancestor when a turn or
an agent finishes (O(depth), so rolled-up totals are always current without a pass over the tree).

The stream may break the runtime's promises (a killed process truncates the file; a reader may
see a sub-agent's events before its parent's ``tool_started``): a node referenced before its start
event is created as a placeholder and filled in, and attached, when that event arrives. An agent
whose parent tool call never shows up is listed among the roots rather than hidden. Nodes never
finished stay ``running`` while the stream is live and become ``interrupted`` at
:meth:`TraceTree.end`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import orjson

# The event classes' own sets (a module of typing only: no attrs, no converter to build).
from runtime.core import AGENT_STATUSES as AGENT_STATUSES
from runtime.core import INTERRUPTED as INTERRUPTED
from runtime.core import RUNNING as RUNNING
from runtime.core import TOOL_STATUSES as TOOL_STATUSES
from runtime.core import EventDecodeError, UnknownEventType

if TYPE_CHECKING:
    from runtime.core import Event

TEXT_KEEP: Final = 2000
"""How many trailing characters of an agent's streamed text a node keeps."""
OUTPUT_KEEP: Final = 2000
"""How many leading characters of a tool's output a node keeps."""
PROMPT_KEEP: Final = 2000
"""How many leading characters of an agent's prompt a node keeps."""

BROKEN_LINKS: Final = "(broken links)"
"""The id of the root that holds agents whose parents form a cycle in a corrupt file."""

# Compact the text chunks once they hold twice what we keep: amortised O(1) per character.
_TEXT_COMPACT: Final = 2 * TEXT_KEEP
# Lookups that also hand back one shared string per status: a million-event file then holds
# a handful of status strings, not one per node.
_AGENT_STATUS: Final = {status: status for status in AGENT_STATUSES}
_TOOL_STATUS: Final = {status: status for status in TOOL_STATUSES}
# The input of a call whose input is not kept (shared, never mutated).
_NO_INPUT: Final[dict[str, Any]] = {}

Fields: TypeAlias = Mapping[str, Any]
Node: TypeAlias = "AgentNode | ToolNode"
_Handler: TypeAlias = Callable[[Fields], None]


def _invalid(kind: str, field: str) -> EventDecodeError:
    return EventDecodeError(f"invalid {kind} event: field {field!r} missing or of a wrong type")


def _num(value: object) -> bool:
    # bool is an int subclass; class identity keeps it out, and is cheaper than isinstance.
    return value.__class__ is float or value.__class__ is int


def _opt_str(value: object) -> bool:
    return value is None or value.__class__ is str


MAX_DIVERGENCES = 100
"""How many ``replay_diverged`` a :class:`TraceTree` keeps (it counts them all)."""


@dataclasses.dataclass(frozen=True)
class CancelInfo:
    """Who asked to cancel a node, and why (from ``cancel_requested``)."""

    reason: str
    by: str
    ts: float


@dataclasses.dataclass(frozen=True, slots=True)
class RetryInfo:
    """A ``provider_retry``: the try that failed, when, the wait before the next, and why."""

    attempt: int
    ts: float
    delay_s: float
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class RateWaitInfo:
    """A ``rate_limited``: when the agent began to wait its turn at the endpoint, the wait
    foreseen, and why (docs/rate-limits.md)."""

    ts: float
    wait_s: float
    reason: str
    status: int | None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Compaction:
    """One ``context_compacted`` event: an agent made its history smaller.

    Attributes:
        method: ``trim`` (old tool outputs stubbed) or ``summary`` (older turns summarised).
        input_tokens, output_tokens: what the summary request cost (0 for a trim).
    """

    agent_id: str
    ts: float
    method: str
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    input_tokens: int
    output_tokens: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunningSubtree:
    """A running ``agent`` tool call and its sub-agent, as the Ctrl+C picker lists it.

    Attributes:
        tool_use_id: the id of the ``agent`` call; cancelling it cancels the whole subtree.
        agent_name: the sub-agent's type (from its ``agent_started``, else from the call's input).
        description: the call's ``description`` input.
        agent_id: the sub-agent's id, or None while it waits for a parallel-limit slot.
        caller_id: the agent that made the call.
        depth: the sub-agent's depth (1 for a child of a root agent).
        started_ts: when the call started.
        background: a background sub-agent whose call has ended: cancel or stop it by its
            agent id (:attr:`target`).
    """

    tool_use_id: str
    agent_name: str
    description: str
    agent_id: str | None
    caller_id: str | None
    depth: int
    started_ts: float | None
    background: bool = False

    @property
    def target(self) -> str:
        """The node to cancel or stop for this subtree: the call, or a background sub-agent
        itself once its call has ended."""
        return self.agent_id if self.background and self.agent_id else self.tool_use_id


# The nodes are dataclasses whose public instance attributes are exactly their JSON keys
# (docs/tree.md#the-tree-as-json), in order: orjson writes such objects straight from their
# __dict__ (skipping "_" names), which keeps `trace show --json` on a million events cheap. What
# is not JSON has a "_" name and a read-only property.
#
# __init__ sets every attribute a node will ever have, internals included, always in the same
# order: CPython keeps the attribute values of a class's instances in a compact array keyed by
# names shared by all of them, sized when the instance is made. An attribute first set later
# (say `_finished_ts` when the call ends) may not fit, and then that instance is converted to a
# full dict on the spot. With every start before any finish (a wide fan-out) that made a
# tool_finished 2-4 us instead of 1.1 us (CPython 3.11; the writer's time order happened to
# dodge it). That array holds at most 29 names: a class whose instances get 30 or more keeps
# each instance's attributes in a full dict, five times the memory (an AgentNode with 32 took
# 1.6 KB and a million-event `trace show` 30 % more time). So figures that few agents have live
# in one `_rare` object made on first write; tests/test_tree.py keeps every node class
# under that size.


def _renderer() -> Any:
    """:mod:`runtime.trace._render`, which draws trees and so depends on this module: it is
    reached by name only when a tree is asked to draw itself, so neither module needs the other
    to load (no import cycle)."""
    import importlib

    return importlib.import_module("runtime.trace._render")


class _NodeBase:
    """What agents and tool calls share: a start seen or not, an end, a duration."""

    _seen_start: bool
    _finished_ts: float | None
    duration_s: float | None
    started_ts: float | None

    @property
    def started(self) -> bool:
        """Whether the node's start event was seen (else it is a placeholder)."""
        return self._seen_start

    @property
    def finished(self) -> bool:
        """Whether the node's end event was seen."""
        return self._finished_ts is not None

    @property
    def finished_ts(self) -> float | None:
        """When the node finished."""
        return self._finished_ts

    def render(self) -> str:
        """This node's subtree as ``trace show`` draws it (plain text, no colours)."""
        node_lines = _renderer().node_lines
        return "\n".join(line.plain for line in node_lines(self, color=False))

    def __str__(self) -> str:
        return self.render()

    def __rich__(self) -> Any:
        from rich.console import Group

        return Group(*_renderer().node_lines(self))

    def elapsed(self, now: float) -> float | None:
        """The duration once finished (or interrupted), else the time from its start to *now*."""
        if self.duration_s is not None:
            return self.duration_s
        if self.started_ts is None:
            return None
        return max(0.0, now - self.started_ts)


@dataclasses.dataclass(frozen=True, slots=True)
class TodoItem:
    """One item of an agent's todo list (``todo_updated``, docs/events.md)."""

    content: str
    status: str
    active_form: str


_TODO_STATUSES: Final = frozenset({"pending", "in_progress", "completed"})
_MAX_TODOS: Final = 1000  # a hand-made trace cannot make the tree hold more than this per agent


def _todo_items(todos: object) -> tuple[TodoItem, ...] | None:
    """*todos* (a ``todo_updated`` event's) as items; None if it is not a list of them."""
    if todos.__class__ is not list:
        return None
    out = []
    for item in todos[:_MAX_TODOS]:
        if item.__class__ is not dict:
            return None
        content, status, active = item.get("content"), item.get("status"), item.get("activeForm")
        if content.__class__ is not str or active.__class__ is not str:
            return None
        if status not in _TODO_STATUSES:
            return None
        out.append(TodoItem(content, status, active))
    return tuple(out)


class _AgentRare:
    """An agent's figures that most agents of a big trace never set: made on first use, so that
    an AgentNode keeps fewer than 30 attributes (see the note above the node classes)."""

    __slots__ = (
        "context_tokens",
        "context_window",
        "dropped",
        "rate_refusals",
        "rate_wait",
        "rate_waited_s",
        "retry",
        "stop",
        "thinking_len",
        "todos",
        "user_messages",
    )

    def __init__(self) -> None:
        self.user_messages = 0
        self.thinking_len = 0
        self.dropped = 0
        self.retry: RetryInfo | None = None
        self.rate_wait: RateWaitInfo | None = None
        self.rate_waited_s = 0.0
        self.rate_refusals = 0
        self.stop: str | None = None
        self.context_tokens: int | None = None
        self.context_window: int | None = None
        self.todos: tuple[TodoItem, ...] | None = None


_NO_RARE: Final = _AgentRare()  # read-only stand-in while an agent has none of its own


class _AgentInternals(_NodeBase):
    _parent: ToolNode | None
    _parent_agent_id: str | None
    _prompt: str
    _chunks: list[str] | None
    _chunks_len: int
    _rare: _AgentRare


@dataclasses.dataclass(init=False, eq=False, repr=False)
class AgentNode(_AgentInternals):
    """One agent: its own fields, its tool calls in call order, its usage own and rolled up.

    The tree updates the attributes in place; read them, do not write them. ``name`` is ``"?"``
    until the agent's ``agent_started`` is seen. ``duration_s`` is the agent's own figure once
    finished, the time to the last event of the trace once interrupted, else None (see
    :meth:`elapsed`). ``total_*_tokens`` cover the subtree; they are current after
    :meth:`TraceTree.rollup` (which every reader of the tree here calls), as is ``subtree_cost_usd``
(``cost_usd`` is the agent's own; None: unknown, docs/costs.md). ``compactions`` counts
    the agent's ``context_compacted`` events (their details are in :attr:`TraceTree.compactions`).
    """

    kind: str
    id: str
    name: str
    status: str
    parent_tool_use_id: str | None
    duration_s: float | None
    input_tokens: int
    output_tokens: int
    total_input_tokens: int
    total_output_tokens: int
    cost_usd: float | None
    subtree_cost_usd: float | None
    depth: int
    turns: int
    started_ts: float | None
    result: str | None
    error: str | None
    cancel: CancelInfo | None
    compactions: int
    children: list[ToolNode]

    def __init__(self, agent_id: str, parent_tool_use_id: str | None) -> None:
        self.kind = "agent"
        self.id = agent_id
        self.name = "?"
        self.status = RUNNING
        self.parent_tool_use_id = parent_tool_use_id
        self.duration_s = None
        self.input_tokens = 0
        self.output_tokens = 0
        self.total_input_tokens = 0
        self.total_output_tokens = 0
        self.cost_usd = 0.0
        self.subtree_cost_usd = 0.0
        self.depth = 0
        self.turns = 0
        self.started_ts = None
        self.result = None
        self.error = None
        self.cancel = None
        self.compactions = 0
        self.children = []
        self._parent = None
        self._parent_agent_id = None
        self._prompt = ""
        self._seen_start = False
        self._finished_ts = None
        self._chunks = None
        self._chunks_len = 0
        self._rare = _NO_RARE

    def __repr__(self) -> str:
        return f"<AgentNode {self.id} {self.name} {self.status}>"

    def _more(self) -> _AgentRare:
        """The agent's own rare figures, made on first write."""
        rare = self._rare
        if rare is _NO_RARE:
            rare = self._rare = _AgentRare()
        return rare

    @property
    def last_stop_reason(self) -> str | None:
        """Why the agent's latest turn ended (``max_tokens``: its reply was cut; ``refusal``)."""
        return self._rare.stop

    @property
    def retry(self) -> RetryInfo | None:
        """The model call's latest retry (``provider_retry``), until the turn streams or ends."""
        return self._rare.retry

    @property
    def rate_wait(self) -> RateWaitInfo | None:
        """The model call's wait at its endpoint's rate limit (``rate_limited``), until the call
        streams or the turn ends."""
        return self._rare.rate_wait

    @property
    def rate_waited_s(self) -> float:
        """The waits the agent's ``rate_limited`` events foresaw, summed (docs/rate-limits.md)."""
        return self._rare.rate_waited_s

    @property
    def rate_refusals(self) -> int:
        """The refusals (429, 529) the agent's own model calls met."""
        return self._rare.rate_refusals

    @property
    def parent(self) -> ToolNode | None:
        """The ``agent`` tool call that started this agent (None for a root)."""
        return self._parent

    @property
    def parent_agent_id(self) -> str | None:
        """The id of the agent that made that call."""
        return self._parent_agent_id

    @property
    def prompt(self) -> str:
        """The first :data:`PROMPT_KEEP` characters of the agent's prompt."""
        return self._prompt

    @property
    def user_messages(self) -> int:
        """How many messages were injected into the agent while it ran."""
        return self._rare.user_messages

    @property
    def todos(self) -> tuple[TodoItem, ...] | None:
        """The agent's last todo list (its latest ``todo_updated``); None if it wrote none."""
        return self._rare.todos

    @property
    def current_todo(self) -> str | None:
        """The ``activeForm`` of the first ``in_progress`` item of its last todo list."""
        for item in self._rare.todos or ():
            if item.status == "in_progress":
                return item.active_form
        return None

    @property
    def context_tokens(self) -> int | None:
        """The agent's context size after its last turn or compaction (tokens), if reported."""
        return self._rare.context_tokens

    @property
    def context_window(self) -> int | None:
        """The agent's context window (tokens), if reported."""
        return self._rare.context_window

    @property
    def thinking_len(self) -> int:
        """How many characters of thinking the agent streamed."""
        return self._rare.thinking_len

    @property
    def text(self) -> str:
        """The last :data:`TEXT_KEEP` characters of the agent's streamed text (each turn's
        text ends on a line of its own)."""
        return "".join(self._chunks)[-TEXT_KEEP:] if self._chunks else ""

    def text_tail(self, count: int) -> str:
        """The last *count* characters of :attr:`text`, joining only the pieces they are in
        (a running agent's label shows them on every frame of the live view)."""
        chunks = self._chunks
        if not chunks:
            return ""
        size = 0
        start = len(chunks)
        while start > 0 and size < count:
            start -= 1
            size += len(chunks[start])
        return "".join(chunks[start:])[-min(count, TEXT_KEEP) :]

    @property
    def text_len(self) -> int:
        """How many characters of text the agent streamed in all."""
        return self._rare.dropped + self._chunks_len

    def _compact(self) -> None:
        joined = "".join(self._chunks or ())
        kept = joined[-TEXT_KEEP:]
        self._more().dropped += len(joined) - len(kept)
        self._chunks = [kept]
        self._chunks_len = len(kept)


class _ToolInternals(_NodeBase):
    _parent: AgentNode | None
    _agent_id: str | None
    _input: dict[str, Any]
    _output_len: int
    _permission_pending: dict[str, float] | None
    _permission_intervals: list[tuple[float, float]] | None
    _permission_granted: bool | None
    _progress: tuple[float, float | None, str | None] | None
    _hooks: list[HookRun] | None


@dataclasses.dataclass(frozen=True)
class HookRun:
    """One ``hook_finished`` of a call (docs/hooks.md#seeing-hooks)."""

    hook_event: str
    target: str
    exit_code: int | None
    decision: str | None
    duration_s: float


@dataclasses.dataclass
class HookTotals:
    """The run's hook runs, for ``trace stats``: how many, how many blocked (or denied) and
    failed, and their time."""

    runs: int = 0
    blocked: int = 0
    failed: int = 0
    duration_s: float = 0.0


@dataclasses.dataclass(init=False, eq=False, repr=False)
class ToolNode(_ToolInternals):
    """One tool call: what was asked, how it ended, and (for ``agent``) the sub-agent it started.

    ``name`` is ``"?"`` until the call's ``tool_started`` (or ``tool_finished``) is seen;
    ``duration_s`` is as for :class:`AgentNode`; ``output`` keeps the first :data:`OUTPUT_KEEP`
    characters (:attr:`output_len` counts all).
    """

    kind: str
    id: str
    name: str
    status: str
    duration_s: float | None
    summary: str
    started_ts: float | None
    output: str
    permission_wait_s: float
    cancel: CancelInfo | None
    children: list[AgentNode]

    def __init__(
        self,
        tool_use_id: str,
        name: str = "?",
        summary: str = "",
        started_ts: float | None = None,
    ) -> None:
        self.kind = "tool"
        self.id = tool_use_id
        self.name = name
        self.status = RUNNING
        self.duration_s = None
        self.summary = summary
        self.started_ts = started_ts
        self.output = ""
        self.permission_wait_s = 0.0
        self.cancel = None
        self.children = []
        self._parent = None
        self._agent_id = None
        self._input = _NO_INPUT
        self._seen_start = False
        self._finished_ts = None
        self._output_len = 0
        self._permission_pending = None
        self._permission_intervals = None
        self._permission_granted = None
        self._progress = None
        self._hooks = None

    def __repr__(self) -> str:
        return f"<ToolNode {self.id} {self.name} {self.status}>"

    @property
    def hooks(self) -> tuple[HookRun, ...]:
        """The hooks that judged this call, in the order they ended."""
        return tuple(self._hooks) if self._hooks else ()

    @property
    def parent(self) -> AgentNode | None:
        """The agent that made the call (None while only its sub-agent's events were seen)."""
        return self._parent

    @property
    def agent_id(self) -> str | None:
        """The id of the agent that made the call."""
        return self._agent_id

    @property
    def input(self) -> dict[str, Any]:
        """The call's input object."""
        return self._input

    @property
    def output_len(self) -> int:
        """The length of the whole output (``output`` keeps its start)."""
        return self._output_len

    @property
    def awaiting_permission(self) -> bool:
        """Whether a permission request for this call is still unanswered."""
        return bool(self._permission_pending)

    @property
    def permission_intervals(self) -> tuple[tuple[float, float], ...]:
        """``(asked, answered)`` times of each answered permission request."""
        return tuple(self._permission_intervals) if self._permission_intervals else ()

    @property
    def permission_granted(self) -> bool | None:
        """The last permission answer, None if never asked."""
        return self._permission_granted

    @property
    def progress(self) -> tuple[float, float | None, str | None] | None:
        """The latest ``tool_progress`` of the call while it runs: ``(progress, total,
        message)``; None before any, and once the call has finished."""
        return self._progress if self._finished_ts is None else None


def node_json(node: AgentNode | ToolNode) -> dict[str, Any]:
    """The JSON object of one node without its ``children`` (``cancel`` stays a dataclass)."""
    return {k: v for k, v in node.__dict__.items() if k[0] != "_" and k != "children"}


class _EventFields(Mapping[str, Any]):
    """An event's attributes read as a mapping, so :meth:`TraceTree.apply` shares the dict core."""

    __slots__ = ("_event",)

    def __init__(self, event: Event) -> None:
        self._event = event

    def __getitem__(self, key: str) -> Any:
        try:
            return getattr(self._event, key)
        except AttributeError:
            raise KeyError(key) from None

    def __iter__(self) -> Iterator[str]:
        import attrs  # loaded already wherever there are Event objects

        yield "type"
        yield from attrs.fields_dict(type(self._event))

    def __len__(self) -> int:
        import attrs

        return 1 + len(attrs.fields(type(self._event)))


class TraceTree:
    """The tree of one run, built incrementally from its events (docs/tree.md).

    Feed it with :meth:`apply` (events) or :meth:`apply_dict` (their JSON objects), in any
    interleaving; call :meth:`end` when the stream is over for good, which turns every unfinished
    node ``interrupted``. Events of another run than the first one seen are counted in
    ``other_run_events`` and ignored: split a multi-run stream with :class:`TraceSet`.

    Args:
        run_id: the run this tree is for (default: the first event's).
        keep_details: keep what the live view shows but a report does not: each agent's
            streamed text and the input of every tool call (without it, only ``agent`` calls
            keep their input). A file reader may then skip decoding text deltas.

    Attributes:
        run_id: the run's id (None until the first event).
        agents: every agent by id, in first-seen order.
        tools: every tool call by id, in first-seen order.
        ended: whether :meth:`end` was called (or ``run_finished`` seen).
        run_status: the status from ``run_finished``, if seen.
        version: the writer's version from ``run_started``, if seen.
        config: the run's config from ``run_started``, if seen.
        last_ts: the latest timestamp of a non-delta event (``-inf`` if none).
        handlers: the per-type handlers, for loops that already know an event's run.
    """

    def __init__(self, run_id: str | None = None, *, keep_details: bool = True) -> None:
        self.run_id = run_id
        self.keep_details = keep_details
        self.agents: dict[str, AgentNode] = {}
        self.tools: dict[str, ToolNode] = {}
        self.ended = False
        self.run_status: str | None = None
        self.run_duration_s: float | None = None
        self.run_started_ts: float | None = None
        self.run_finished_ts: float | None = None
        self.version: str | None = None
        self.config: dict[str, Any] | None = None
        self.last_ts = -math.inf
        self.other_run_events = 0
        self.compactions: list[Compaction] = []
        """Every ``context_compacted`` of the run, in order."""
        self.divergences: list[tuple[str, str]] = []
        """The first :data:`MAX_DIVERGENCES` ``replay_diverged`` of a replayed run, as
        ``(node, detail)``; ``divergence_count`` counts them all."""
        self.divergence_count = 0
        self.resumes: list[float] = []
        """The ``gap_s`` of each ``run_resumed``: the run went on after its process died
        (docs/resume.md)."""
        self._roots: list[AgentNode] = []
        # Placeholder tool calls some sub-agent pointed at, whose tool_started is not in yet.
        self._unattached: dict[str, ToolNode] = {}
        # Running `agent` calls in start order, for the Ctrl+C picker.
        self._agent_calls: dict[str, ToolNode] = {}
        # Ended `run_in_background` calls whose sub-agent still runs (docs/collaboration.md).
        self._background_calls: dict[str, ToolNode] = {}
        # cancel_requested naming a node not seen yet.
        self._pending_cancel: dict[str, CancelInfo] = {}
        # Usage changed since the last rollup (totals are summed lazily, once per read).
        self._dirty = False
        # Every agent's parent agent came into `agents` before it (so a reversed pass over
        # `agents` sums children before parents); false once a tool call with sub-agents is
        # attached to its caller after the fact (the caller may be newer, or a cycle formed).
        self._agents_in_order = True
        # One string per tool name / agent type, shared by every node that has it.
        self._names: dict[str, str] = {}
        # A tool call attached to its caller after its sub-agents may close a cycle (a corrupt
        # file): checked, and broken, on the next read of the roots (O(nodes), once per change).
        self._cycles_checked = True
        # Calls cut from their caller to break a cycle, shown under the "broken links" root.
        self._broken: list[ToolNode] = []
        self._broken_root: AgentNode | None = None
        self._cycle_agents = 0
        # Lines naming a node a second time (the first one stands): how many, and the first id.
        self.duplicates = 0
        self.hook_totals = HookTotals()  # trace stats' hooks (docs/hooks.md#seeing-hooks)
        self._first_duplicate: str | None = None
        self.handlers: dict[str, _Handler] = {
            "run_started": self._run_started,
            "agent_started": self._agent_started,
            "text_delta": self._text_delta if keep_details else self._delta_no_text,
            "thinking_delta": self._thinking_delta if keep_details else self._delta_no_text,
            "tool_started": self._tool_started,
            "permission_requested": self._permission_requested,
            "permission_resolved": self._permission_resolved,
            "tool_finished": self._tool_finished,
            "turn_finished": self._turn_finished,
            "provider_retry": self._provider_retry,
            "rate_limited": self._rate_limited,
            "user_message": self._user_message,
            "message_queued": self._message_queued,
            "cancel_requested": self._cancel_requested,
            "stop_requested": self._stop_requested,
            "agent_message": self._agent_message,
            "agent_finished": self._agent_finished,
            "run_finished": self._run_finished,
            "context_compacted": self._context_compacted,
            "replay_diverged": self._replay_diverged,
            "tool_progress": self._tool_progress,
            "hook_finished": self._hook_finished,
            "todo_updated": self._todo_updated,
            "run_resumed": self._run_resumed,
            "mcp_sampled": self._mcp_sampled,
            "elicitation_requested": self._elicitation,
            "elicitation_resolved": self._elicitation,
        }

    # ------------------------------------------------------------------ building

    @classmethod
    def from_events(
        cls, events: Iterable[Event], *, live: bool = False, keep_details: bool = True
    ) -> TraceTree:
        """Build the tree of the (first) run in *events*.

        Args:
            events: the stream, in any interleaving.
            live: the stream goes on after *events* (unfinished nodes stay ``running``);
                otherwise it is over and they become ``interrupted``.
            keep_details: see the class.
        """
        tree = cls(keep_details=keep_details)
        for event in events:
            tree.apply(event)
        if not live:
            tree.end()
        return tree

    def apply(self, event: Event) -> None:
        """Add one event to the tree. O(1) amortised.

        Raises:
            EventDecodeError: a field the tree relies on has a wrong value.
        """
        if event.run_id != self.run_id and not self._adopt(event.run_id):
            return
        handler = self.handlers.get(event.type)
        if handler is not None:
            handler(_EventFields(event))

    def apply_dict(self, fields: Fields) -> None:
        """Add one event given as its JSON object (as decoded from a trace line).

        The fields the tree uses are checked; on failure nothing is changed.

        Raises:
            UnknownEventType: the ``type`` is not one this version knows.
            EventDecodeError: a field the tree relies on is missing or has a wrong value.
        """
        kind = fields.get("type")
        handler = self.handlers.get(kind) if kind.__class__ is str else None
        if handler is None:
            if kind.__class__ is str:
                raise UnknownEventType(str(kind))
            raise EventDecodeError("field 'type': missing or not a string")
        run_id = fields.get("run_id")
        if run_id != self.run_id:
            if run_id.__class__ is not str:
                raise _invalid(str(kind), "run_id")
            if not self._adopt(run_id):
                return
        handler(fields)

    def _adopt(self, run_id: str) -> bool:
        if self.run_id is None:
            self.run_id = run_id
            return True
        self.other_run_events += 1
        return False

    def end(self) -> None:
        """Mark the stream ended: every node not finished becomes ``interrupted``. Idempotent.

        An interrupted node's ``duration_s`` is then the time from its start to the last event.
        """
        self.ended = True
        last = self.last_ts
        for agent in self.agents.values():
            if agent.status == RUNNING:
                agent.status = INTERRUPTED
                agent.duration_s = agent.elapsed(last)
        for tool in self.tools.values():
            if tool.status == RUNNING:
                tool.status = INTERRUPTED
                tool.duration_s = tool.elapsed(last)
                tool._permission_pending = None
        self._agent_calls.clear()
        self._background_calls.clear()

    # ------------------------------------------------------------------ reading

    @property
    def status(self) -> str:
        """The run's status: from ``run_finished``, else ``running`` / ``interrupted``.

        A stream with no run events (a library user's own stream) that ended with every node
        finished takes the status of its last root agent.
        """
        if self.run_status is not None:
            return self.run_status
        if not self.ended:
            return RUNNING
        roots = self._roots
        if roots and all(n._finished_ts is not None for n in self.agents.values()):
            return roots[-1].status
        return INTERRUPTED

    @property
    def empty(self) -> bool:
        """Whether no event has left a mark on the tree yet."""
        return not (self.agents or self.tools or self.version is not None or self.run_status)

    @property
    def roots(self) -> list[AgentNode]:
        """Root agents in start order, then agents whose parent tool call never appeared."""
        if not self._cycles_checked:
            self._break_cycles()
        roots = self._base_roots()
        if self._broken_root is not None:
            roots.append(self._broken_root)
        return roots

    def _base_roots(self) -> list[AgentNode]:
        if not self._unattached:
            return list(self._roots)
        detached = [agent for tool in self._unattached.values() for agent in tool.children]
        return self._roots + detached

    def _break_cycles(self) -> None:
        """Cut the cycles a corrupt file's parent links form; their agents go under "broken links".

        Every agent not reachable from a root sits in, or below, a cycle (each node has one
        parent). For each, walk up to the cycle and cut the call that closes it from its caller.
        """
        self._cycles_checked = True
        seen: set[int] = {id(node) for node in self.iter_nodes(self._base_roots())}
        seen.update(id(node) for node in self.iter_nodes(self._broken))
        for agent in self.agents.values():
            if id(agent) in seen:
                continue
            path: set[int] = set()
            node: Node = agent
            while id(node) not in path and id(node) not in seen:
                path.add(id(node))
                parent = node._parent
                if parent is None:
                    break
                node = parent
            if id(node) in path:  # back where we were: a cycle; cut the call that closes it
                call = node if isinstance(node, ToolNode) else node._parent
                if call is not None and call._parent is not None:
                    call._parent.children.remove(call)
                    call._parent = None
                    self._broken.append(call)
            for below in self.iter_nodes(self._broken[-1:] if self._broken else ()):
                if id(below) not in seen:
                    seen.add(id(below))
                    if isinstance(below, AgentNode):
                        self._cycle_agents += 1
        if self._broken and self._broken_root is None:
            root = self._broken_root = AgentNode(BROKEN_LINKS, None)
            root.name = "broken links"
            root.status = INTERRUPTED
        if self._broken_root is not None:
            self._broken_root.children = list(self._broken)
        self._dirty = True

    def anomalies(self) -> list[str]:
        """What the stream got wrong that the tree worked around, one line per kind."""
        _ = self.roots  # brings the cycle check up to date
        out: list[str] = []
        if self._cycle_agents:
            out.append(
                f"{self._cycle_agents} agents whose parents form a cycle (a corrupt file) are "
                f"shown under the '{BROKEN_LINKS}' root"
            )
        if self.duplicates:
            out.append(
                f"{self.duplicates} events name a node a second time (first: "
                f"{self._first_duplicate!r}); the first line of each stands"
            )
        return out

    def _duplicate(self, node_id: str) -> None:
        self.duplicates += 1
        if self._first_duplicate is None:
            self._first_duplicate = node_id

    @property
    def started_ts(self) -> float | None:
        """When the run started: ``run_started``, else its first root agent's start."""
        if self.run_started_ts is not None:
            return self.run_started_ts
        starts = [a.started_ts for a in self.roots if a.started_ts is not None]
        return min(starts) if starts else None

    @property
    def duration_s(self) -> float | None:
        """The run's wall time: from ``run_finished``, else from its start to the last event."""
        if self.run_duration_s is not None:
            return self.run_duration_s
        start = self.started_ts
        if start is None or self.last_ts < start:
            return None
        return self.last_ts - start

    def rollup(self) -> None:
        """Bring every agent's ``total_*_tokens`` up to date: O(nodes) after a change, else O(1)."""
        if not self._dirty:
            return
        self._dirty = False
        if self._agents_in_order:
            # Children before parents without a walk over every tool call: each agent adds its
            # subtree's totals into the agent above it.
            agents = list(self.agents.values())
            for agent in agents:
                agent.total_input_tokens = agent.input_tokens
                agent.total_output_tokens = agent.output_tokens
                agent.subtree_cost_usd = agent.cost_usd
            for agent in reversed(agents):
                call = agent._parent
                if call is not None:
                    owner = call._parent
                    if owner is not None:
                        owner.total_input_tokens += agent.total_input_tokens
                        owner.total_output_tokens += agent.total_output_tokens
                        owner.subtree_cost_usd = _add_cost(
                            owner.subtree_cost_usd, agent.subtree_cost_usd
                        )
            return
        order: list[AgentNode] = []
        stack = list(self.roots)
        while stack:  # agents only, parents before children
            agent = stack.pop()
            order.append(agent)
            for call in agent.children:
                if call.children:
                    stack.extend(call.children)
        for agent in reversed(order):  # children before parents
            total_in = agent.input_tokens
            total_out = agent.output_tokens
            cost = agent.cost_usd
            for tool in agent.children:
                for child in tool.children:
                    total_in += child.total_input_tokens
                    total_out += child.total_output_tokens
                    cost = _add_cost(cost, child.subtree_cost_usd)
            agent.total_input_tokens = total_in
            agent.total_output_tokens = total_out
            agent.subtree_cost_usd = cost

    @property
    def total_input_tokens(self) -> int:
        """Input tokens over the whole run."""
        self.rollup()
        return sum(a.total_input_tokens for a in self.roots)

    @property
    def total_output_tokens(self) -> int:
        """Output tokens over the whole run."""
        self.rollup()
        return sum(a.total_output_tokens for a in self.roots)

    @property
    def total_cost_usd(self) -> float | None:
        """US dollars over the whole run; None when some call's model has no price."""
        self.rollup()
        total: float | None = 0.0
        for root in self.roots:
            total = _add_cost(total, root.subtree_cost_usd)
        return total

    def find(self, node_id: str) -> AgentNode | ToolNode | None:
        """The agent or tool call with this id, if any."""
        return self.agents.get(node_id) or self.tools.get(node_id)

    def iter_nodes(self, roots: Iterable[Node] | None = None) -> Iterator[Node]:
        """Every node reachable from *roots* (default: all roots), depth first, in order."""
        stack: list[Node] = list(self.roots if roots is None else roots)
        stack.reverse()
        pop = stack.pop
        extend = stack.extend
        while stack:
            node = pop()
            yield node
            if node.children:
                extend(reversed(node.children))

    @staticmethod
    def ancestors(node: Node) -> Iterator[Node]:
        """The nodes above *node*, nearest first."""
        parent = node._parent
        while parent is not None:
            yield parent
            parent = parent._parent

    def select(
        self, *, subtree: str | None = None, status: str | None = None
    ) -> tuple[list[Node], set[Node] | None]:
        """The roots to show and the nodes to keep for a filtered view.

        Args:
            subtree: show only the subtree of this agent or tool id.
            status: keep only the nodes with this status and the paths from the roots to them.

        Returns:
            ``(roots, keep)``; *keep* is None when every node is kept.

        Raises:
            KeyError: no node has the id *subtree*.
        """
        roots: list[Node]
        all_roots = self.roots  # breaks any cycle first: ancestors() below then ends
        if subtree is not None:
            node = self.find(subtree)
            if node is None:
                raise KeyError(subtree)
            roots = [node]
        else:
            roots = list(all_roots)
        if status is None:
            return roots, None
        keep: set[Node] = set()
        matching: list[Node] = [n for n in self.agents.values() if n.status == status]
        matching += [n for n in self.tools.values() if n.status == status]
        for hit in matching:
            if hit in keep:
                continue
            keep.add(hit)
            for up in self.ancestors(hit):
                if up in keep:
                    break
                keep.add(up)
        return [r for r in roots if r in keep], keep

    def render(self, **options: Any) -> str:
        """The tree as ``trace show`` prints it (plain text, no colours).

        Args:
            options: as :func:`runtime.trace._render.tree_lines` (``subtree``, ``max_depth``,
                ``status``, ``title``, ``now``).
        """
        options.setdefault("spinner", False)
        lines = _renderer().tree_lines(self, color=False, **options)
        return "\n".join(line.plain for line in lines)

    def __str__(self) -> str:
        return self.render()

    def __rich__(self) -> Any:
        return _renderer().render_tree(self, spinner=False)

    def to_json(
        self,
        *,
        subtree: str | None = None,
        max_depth: int | None = None,
        status: str | None = None,
        now: float | None = None,
    ) -> dict[str, Any]:
        """The tree as JSON (docs/tree.md#the-tree-as-json): dicts, lists, nodes left as they are.

        The nodes are dataclasses whose fields are their JSON keys; ``orjson.dumps`` writes them
        natively (``json`` needs :func:`node_json` as its ``default``). The whole tree
        is returned without copying; a filtered view is copied into dicts.

        Args:
            subtree: only the subtree of this agent or tool id (it is then the one root).
            max_depth: leave out sub-agents more than this many levels below the roots.
            status: keep only nodes with this status and the paths to them.
            now: the time the ``duration_s`` of running nodes runs to (default: the last event's).

        Raises:
            KeyError: no node has the id *subtree*.
        """
        self.rollup()
        roots, keep = self.select(subtree=subtree, status=status)
        out: dict[str, Any] = {"run_id": self.run_id, "status": self.status}
        out["duration_s"] = self.duration_s
        running = not self.ended and (self._agent_calls or self.agents or self.tools)
        if keep is None and max_depth is None and not running:
            out["roots"] = roots
        else:
            at = self.last_ts if now is None else now
            out["roots"] = [_subtree_json(r, at, max_depth, keep) for r in roots]
        return out

    def iter_json(self, *, levels: int = 3, **kwargs: Any) -> Iterator[bytes]:
        """:meth:`to_json` encoded, in pieces: one JSON document (and a newline) in all.

        The top *levels* of nodes are written one by one and each deeper subtree in one piece,
        so a huge tree never exists as one huge string. Takes :meth:`to_json`'s arguments.
        """
        obj = self.to_json(**kwargs)
        roots = obj.pop("roots")
        yield orjson.dumps(obj)[:-1] + b',"roots":['
        for i, root in enumerate(roots):
            if i:
                yield b","
            yield from _json_pieces(root, levels)
        yield b"]}\n"

    def to_plain_json(self, **kwargs: Any) -> dict[str, Any]:
        """:meth:`to_json` with every node converted to a dict (for ``json`` or comparisons)."""
        obj = self.to_json(**kwargs)
        roots = obj.pop("roots")
        result: dict[str, Any] = orjson.loads(orjson.dumps(obj))
        result["roots"] = [_plain_subtree(root) for root in roots]
        return result

    def running_subtrees(self) -> list[RunningSubtree]:
        """The running ``agent`` tool calls with their sub-agents, in start order; then the
        background sub-agents still running whose call has ended (``background``)."""
        out: list[RunningSubtree] = []
        calls: Iterable[ToolNode] = self._agent_calls.values()
        if self._background_calls:
            calls = [*calls, *self._background_calls.values()]
        for call in calls:
            child = call.children[0] if call.children else None
            if call._finished_ts is not None and (child is None or child.status != RUNNING):
                continue  # a background child not started yet: nothing to pick
            caller = call._parent
            wanted = call._input.get("agent")
            description = call._input.get("description")
            if child is not None and child._seen_start:
                name = child.name
            else:
                name = wanted if isinstance(wanted, str) and wanted else "general"
            out.append(
                RunningSubtree(
                    tool_use_id=call.id,
                    agent_name=name,
                    description=description if isinstance(description, str) else "",
                    agent_id=child.id if child is not None else None,
                    caller_id=call._agent_id,
                    depth=child.depth if child is not None else (caller.depth + 1 if caller else 1),
                    started_ts=call.started_ts,
                    background=call._finished_ts is not None,
                )
            )
        return out

    # ------------------------------------------------------------------ node plumbing

    def _agent_for(self, fields: Fields, kind: str) -> AgentNode:
        agent = self.agents.get(fields["agent_id"])
        if agent is not None:
            return agent
        return self._agent_missing(fields, kind)

    def _agent_missing(self, fields: Fields, kind: str) -> AgentNode:
        """A placeholder for the agent an event names, known not to be in ``agents`` yet."""
        agent_id = fields["agent_id"]
        parent_tool_use_id = fields["parent_tool_use_id"]
        if agent_id.__class__ is not str:
            raise _invalid(kind, "agent_id")
        if not _opt_str(parent_tool_use_id):
            raise _invalid(kind, "parent_tool_use_id")
        return self._new_agent(agent_id, parent_tool_use_id)

    def _new_agent(self, agent_id: str, parent_tool_use_id: str | None) -> AgentNode:
        agent = AgentNode(agent_id, parent_tool_use_id)
        self.agents[agent_id] = agent
        if parent_tool_use_id is None:
            self._roots.append(agent)
        else:
            tool = self.tools.get(parent_tool_use_id)
            if tool is None:
                tool = self._new_tool(parent_tool_use_id)
                self._unattached[parent_tool_use_id] = tool
            agent._parent = tool
            agent.parent_tool_use_id = tool.id  # the same string, not a copy per agent
            tool.children.append(agent)
            owner = tool._parent
            if owner is not None:
                agent.depth = owner.depth + 1
                agent._parent_agent_id = owner.id
        if self._pending_cancel:
            agent.cancel = self._pending_cancel.pop(agent_id, None)
        return agent

    def _new_tool(self, tool_use_id: str) -> ToolNode:
        tool = ToolNode(tool_use_id)
        self.tools[tool_use_id] = tool
        if self._pending_cancel:
            tool.cancel = self._pending_cancel.pop(tool_use_id, None)
        return tool

    def _tool_for(self, fields: Fields, kind: str) -> ToolNode:
        """The tool call an event names, created (and attached to the emitting agent) if new."""
        tool = self.tools.get(fields["tool_use_id"])
        if tool is not None:
            return tool
        return self._tool_missing(fields, kind)

    def _tool_missing(self, fields: Fields, kind: str) -> ToolNode:
        """As :meth:`_tool_for`, for a call known not to be in ``tools`` yet."""
        tool_use_id = fields["tool_use_id"]
        if tool_use_id.__class__ is not str:
            raise _invalid(kind, "tool_use_id")
        owner = self._agent_for(fields, kind)
        tool = self._new_tool(tool_use_id)
        self._attach(tool, owner)
        return tool

    def _attach(self, tool: ToolNode, owner: AgentNode) -> None:
        tool._parent = owner
        tool._agent_id = owner.id
        owner.children.append(tool)
        if tool.children:
            self._dirty = True
            self._agents_in_order = False
            self._cycles_checked = False
            for child in tool.children:
                child._parent_agent_id = owner.id
                if not child._seen_start:
                    child.depth = owner.depth + 1

    # ------------------------------------------------------------------ handlers
    # Each handler reads and checks every field it needs before changing anything, so a
    # rejected event leaves the tree as it was. They are the hot path of reading a file:
    # keep them flat.

    def _run_started(self, fields: Fields) -> None:
        ts = fields["ts"]
        version = fields["version"]
        config = fields["config"]
        if not _num(ts):
            raise _invalid("run_started", "ts")
        if version.__class__ is not str:
            raise _invalid("run_started", "version")
        if config.__class__ is not dict:
            raise _invalid("run_started", "config")
        if ts > self.last_ts:
            self.last_ts = ts
        self.run_started_ts = ts
        self.version = version
        self.config = config

    def _run_finished(self, fields: Fields) -> None:
        ts = fields["ts"]
        status = fields["status"]
        duration = fields["duration_s"]
        if not _num(ts):
            raise _invalid("run_finished", "ts")
        status = _AGENT_STATUS.get(status) if status.__class__ is str else None
        if status is None:
            raise _invalid("run_finished", "status")
        if not _num(duration):
            raise _invalid("run_finished", "duration_s")
        if ts > self.last_ts:
            self.last_ts = ts
        self.run_finished_ts = ts
        self.run_status = status
        self.run_duration_s = duration
        self.end()

    def _agent_started(self, fields: Fields) -> None:
        kind = "agent_started"
        ts = fields["ts"]
        name = fields["name"]
        parent_agent_id = fields["parent_agent_id"]
        depth = fields["depth"]
        prompt = fields["prompt"]
        if not _num(ts):
            raise _invalid(kind, "ts")
        if name.__class__ is not str:
            raise _invalid(kind, "name")
        if not _opt_str(parent_agent_id):
            raise _invalid(kind, "parent_agent_id")
        if depth.__class__ is not int:
            raise _invalid(kind, "depth")
        if prompt.__class__ is not str:
            raise _invalid(kind, "prompt")
        agent = self.agents.get(fields["agent_id"]) or self._agent_missing(fields, kind)
        if agent._seen_start:
            self._duplicate(agent.id)
            return  # a duplicate line: the first one stands
        if ts > self.last_ts:
            self.last_ts = ts
        agent._seen_start = True
        agent.name = self._names.setdefault(name, name)
        agent._parent_agent_id = parent_agent_id
        agent.depth = depth
        agent._prompt = prompt[:PROMPT_KEEP]
        agent.started_ts = ts

    def _text_delta(self, fields: Fields) -> None:
        text = fields["text"]
        if text.__class__ is not str:
            raise _invalid("text_delta", "text")
        agent = self.agents.get(fields["agent_id"]) or self._agent_missing(fields, "text_delta")
        rare = agent._rare
        if rare.retry is not None or rare.rate_wait is not None:
            rare.retry = rare.rate_wait = None  # the retried (or waiting) call answers
        chunks = agent._chunks
        if chunks is None:
            agent._chunks = [text]
        else:
            chunks.append(text)
        agent._chunks_len += len(text)
        if agent._chunks_len > _TEXT_COMPACT:
            agent._compact()

    def _provider_retry(self, fields: Fields) -> None:
        ts = fields["ts"]
        attempt = fields["attempt"]
        delay = fields["delay_s"]
        reason = fields["reason"]
        if not _num(ts):
            raise _invalid("provider_retry", "ts")
        if attempt.__class__ is not int:
            raise _invalid("provider_retry", "attempt")
        if not _num(delay):
            raise _invalid("provider_retry", "delay_s")
        if reason.__class__ is not str:
            raise _invalid("provider_retry", "reason")
        agent = self.agents.get(fields["agent_id"]) or self._agent_missing(fields, "provider_retry")
        if ts > self.last_ts:
            self.last_ts = ts
        agent._more().retry = RetryInfo(attempt, ts, float(delay), reason)

    def _rate_limited(self, fields: Fields) -> None:
        ts = fields["ts"]
        wait = fields["wait_s"]
        reason = fields["reason"]
        status = fields.get("status")
        if not _num(ts):
            raise _invalid("rate_limited", "ts")
        if not _num(wait):
            raise _invalid("rate_limited", "wait_s")
        if reason.__class__ is not str:
            raise _invalid("rate_limited", "reason")
        if status is not None and status.__class__ is not int:
            raise _invalid("rate_limited", "status")
        agent = self.agents.get(fields["agent_id"]) or self._agent_missing(fields, "rate_limited")
        if ts > self.last_ts:
            self.last_ts = ts
        rare = agent._more()
        rare.rate_wait = RateWaitInfo(ts, float(wait), reason, status)
        rare.rate_waited_s += float(wait)
        if reason == "refused":
            rare.rate_refusals += 1

    def _thinking_delta(self, fields: Fields) -> None:
        text = fields["text"]
        if text.__class__ is not str:
            raise _invalid("thinking_delta", "text")
        agent = self.agents.get(fields["agent_id"]) or self._agent_missing(fields, "thinking_delta")
        agent._more().thinking_len += len(text)

    def _delta_no_text(self, fields: Fields) -> None:
        if fields["text"].__class__ is not str:
            raise _invalid(str(fields["type"]), "text")
        if fields["agent_id"] not in self.agents:
            self._agent_missing(fields, str(fields["type"]))

    def _todo_updated(self, fields: Fields) -> None:
        items = _todo_items(fields["todos"])
        if items is None:
            raise _invalid("todo_updated", "todos")
        agent = self.agents.get(fields["agent_id"]) or self._agent_missing(fields, "todo_updated")
        agent._more().todos = items

    def _user_message(self, fields: Fields) -> None:
        if fields["text"].__class__ is not str:
            raise _invalid("user_message", "text")
        agent = self.agents.get(fields["agent_id"]) or self._agent_missing(fields, "user_message")
        agent._more().user_messages += 1

    def _tool_started(self, fields: Fields) -> None:
        kind = "tool_started"
        ts = fields["ts"]
        tool_use_id = fields["tool_use_id"]
        name = fields["name"]
        tool_input = fields["input"]
        summary = fields["summary"]
        if not _num(ts):
            raise _invalid(kind, "ts")
        if tool_use_id.__class__ is not str:
            raise _invalid(kind, "tool_use_id")
        if name.__class__ is not str:
            raise _invalid(kind, "name")
        if tool_input.__class__ is not dict:
            raise _invalid(kind, "input")
        if summary.__class__ is not str:
            raise _invalid(kind, "summary")
        owner = self.agents.get(fields["agent_id"]) or self._agent_missing(fields, kind)
        if ts > self.last_ts:
            self.last_ts = ts
        name = self._names.setdefault(name, name)
        if not self.keep_details and name != "agent":
            tool_input = _NO_INPUT
        tools = self.tools
        tool: ToolNode | None
        if not self._pending_cancel:
            # The common case, inlined (a new call, nothing pointed at it yet): the hot path
            # of reading a big file. One probe of the big dict: the node is made first, and
            # dropped if the id was already there.
            new = ToolNode(tool_use_id, name, summary, ts)
            tool = tools.setdefault(tool_use_id, new)
            if tool is new:
                new._seen_start = True
                new._input = tool_input
                new._parent = owner
                new._agent_id = owner.id
                owner.children.append(new)
                if name == "agent":
                    self._agent_calls[tool_use_id] = new
                return
        else:
            tool = tools.get(tool_use_id)
        if tool is None:
            tool = self._new_tool(tool_use_id)
        elif tool._seen_start:
            self._duplicate(tool.id)
            return  # a duplicate line: the first one stands
        tool._seen_start = True
        tool.name = name
        tool._input = tool_input
        tool.summary = summary
        tool.started_ts = ts
        if tool._parent is None:
            if self._unattached:
                self._unattached.pop(tool_use_id, None)
            self._attach(tool, owner)
        if name == "agent" and tool._finished_ts is None:
            self._agent_calls[tool_use_id] = tool

    def _tool_finished(self, fields: Fields) -> None:
        kind = "tool_finished"
        ts = fields["ts"]
        name = fields["name"]
        status = fields["status"]
        output = fields["output"]
        duration = fields["duration_s"]
        if not _num(ts):
            raise _invalid(kind, "ts")
        if name.__class__ is not str:
            raise _invalid(kind, "name")
        status = _TOOL_STATUS.get(status) if status.__class__ is str else None
        if status is None:
            raise _invalid(kind, "status")
        if output.__class__ is not str:
            raise _invalid(kind, "output")
        if not _num(duration):
            raise _invalid(kind, "duration_s")
        tool = self.tools.get(fields["tool_use_id"]) or self._tool_missing(fields, kind)
        if tool._finished_ts is not None:
            self._duplicate(tool.id)
            return  # a duplicate line: the first one stands
        if ts > self.last_ts:
            self.last_ts = ts
        if tool.name == "?":
            tool.name = self._names.setdefault(name, name)
        tool.status = status
        tool.output = output[:OUTPUT_KEEP]
        tool._output_len = len(output)
        tool.duration_s = duration
        tool._finished_ts = ts
        if tool._permission_pending is not None:
            tool._permission_pending = None
        if name == "agent":
            self._agent_calls.pop(tool.id, None)
            if tool._input.get("run_in_background") is True and not any(
                child._finished_ts is not None for child in tool.children
            ):
                self._background_calls[tool.id] = tool

    def _permission_requested(self, fields: Fields) -> None:
        ts = fields["ts"]
        request_id = fields["request_id"]
        if not _num(ts):
            raise _invalid("permission_requested", "ts")
        if request_id.__class__ is not str:
            raise _invalid("permission_requested", "request_id")
        tool = self._tool_for(fields, "permission_requested")
        if ts > self.last_ts:
            self.last_ts = ts
        if tool._finished_ts is None:
            if tool._permission_pending is None:
                tool._permission_pending = {}
            tool._permission_pending[request_id] = ts

    def _permission_resolved(self, fields: Fields) -> None:
        ts = fields["ts"]
        request_id = fields["request_id"]
        granted = fields["granted"]
        if not _num(ts):
            raise _invalid("permission_resolved", "ts")
        if request_id.__class__ is not str:
            raise _invalid("permission_resolved", "request_id")
        if granted.__class__ is not bool:
            raise _invalid("permission_resolved", "granted")
        tool = self._tool_for(fields, "permission_resolved")
        if ts > self.last_ts:
            self.last_ts = ts
        tool._permission_granted = granted
        pending = tool._permission_pending
        asked = pending.pop(request_id, None) if pending else None
        if tool._permission_intervals is None:
            tool._permission_intervals = []
        if asked is not None:
            tool._permission_intervals.append((asked, ts))
            tool.permission_wait_s += max(0.0, ts - asked)

    def _turn_finished(self, fields: Fields) -> None:
        turn = fields["turn"]
        input_tokens = fields["input_tokens"]
        output_tokens = fields["output_tokens"]
        if turn.__class__ is not int:
            raise _invalid("turn_finished", "turn")
        if input_tokens.__class__ is not int:
            raise _invalid("turn_finished", "input_tokens")
        if output_tokens.__class__ is not int:
            raise _invalid("turn_finished", "output_tokens")
        agent = self.agents.get(fields["agent_id"]) or self._agent_missing(fields, "turn_finished")
        chunks = agent._chunks
        if chunks and not chunks[-1].endswith("\n"):
            # One turn's text ends here: the next turn's does not run on from it.
            chunks.append("\n")
            agent._chunks_len += 1
        stop = fields["stop_reason"]
        context = fields.get("context_tokens")
        rare = agent._rare
        if rare is not _NO_RARE or stop.__class__ is str or context.__class__ is int:
            rare = agent._more()
            rare.retry = rare.rate_wait = None
            rare.stop = stop if stop.__class__ is str else None
            if context.__class__ is int:
                rare.context_tokens = context
                window = fields.get("context_window")
                rare.context_window = window if window.__class__ is int else None
        if agent._finished_ts is not None:
            return  # agent_finished already set the totals
        cost = fields.get("cost_usd")  # absent in older traces: unknown
        if cost is not None and not _num(cost):
            raise _invalid("turn_finished", "cost_usd")
        agent.turns = turn
        agent.input_tokens += input_tokens
        agent.output_tokens += output_tokens
        agent.cost_usd = _add_cost(agent.cost_usd, cost)
        self._dirty = True

    def _context_compacted(self, fields: Fields) -> None:
        kind = "context_compacted"
        ts = fields["ts"]
        method = fields["method"]
        if not _num(ts):
            raise _invalid(kind, "ts")
        if method.__class__ is not str:
            raise _invalid(kind, "method")
        numbers = {}
        for name in ("tokens_before", "tokens_after", "messages_before", "messages_after"):
            value = fields[name]
            if value.__class__ is not int:
                raise _invalid(kind, name)
            numbers[name] = value
        for name in ("input_tokens", "output_tokens"):  # a summary's cost; absent: none
            value = fields.get(name, 0)
            if value.__class__ is not int:
                raise _invalid(kind, name)
            numbers[name] = value
        cost = fields.get("cost_usd")
        if cost is not None and not _num(cost):
            raise _invalid(kind, "cost_usd")
        agent = self.agents.get(fields["agent_id"]) or self._agent_missing(fields, kind)
        if ts > self.last_ts:
            self.last_ts = ts
        agent.compactions += 1
        agent._more().context_tokens = numbers["tokens_after"]
        self.compactions.append(Compaction(agent_id=agent.id, ts=ts, method=method, **numbers))
        if agent._finished_ts is None and (numbers["input_tokens"] or numbers["output_tokens"]):
            # A summary is a model call of the agent's: its usage, as agent_finished will say.
            agent.input_tokens += numbers["input_tokens"]
            agent.output_tokens += numbers["output_tokens"]
            # Absent (an older trace): unknown, as agent_finished would then say.
            agent.cost_usd = _add_cost(agent.cost_usd, cost)
            self._dirty = True

    def _mcp_sampled(self, fields: Fields) -> None:
        numbers = {}
        for name in ("input_tokens", "output_tokens"):
            value = fields.get(name, 0)
            if value.__class__ is not int:
                raise _invalid("mcp_sampled", name)
            numbers[name] = value
        agent = self.agents.get(fields["agent_id"]) or self._agent_missing(fields, "mcp_sampled")
        if agent._finished_ts is None and (numbers["input_tokens"] or numbers["output_tokens"]):
            # A model call of the agent's, made for a server it called: its usage, as
            # agent_finished will say (docs/mcp.md, "Sampling").
            agent.input_tokens += numbers["input_tokens"]
            agent.output_tokens += numbers["output_tokens"]
            self._dirty = True

    def _replay_diverged(self, fields: Fields) -> None:
        ts = fields["ts"]
        node = fields["node"]
        detail = fields["detail"]
        if not _num(ts):
            raise _invalid("replay_diverged", "ts")
        if node.__class__ is not str:
            raise _invalid("replay_diverged", "node")
        if detail.__class__ is not str:
            raise _invalid("replay_diverged", "detail")
        if ts > self.last_ts:
            self.last_ts = ts
        self.divergence_count += 1
        if len(self.divergences) < MAX_DIVERGENCES:
            self.divergences.append((node, detail))

    def _hook_finished(self, fields: Fields) -> None:
        kind = "hook_finished"
        event, exit_code, decision = fields["hook_event"], fields["exit_code"], fields["decision"]
        duration, tool_use_id = fields["duration_s"], fields["tool_use_id"]
        target = fields["command"] or fields["url"] or ""
        if event.__class__ is not str:
            raise _invalid(kind, "hook_event")
        if exit_code is not None and exit_code.__class__ is not int:
            raise _invalid(kind, "exit_code")
        if decision is not None and decision.__class__ is not str:
            raise _invalid(kind, "decision")
        if not _num(duration):
            raise _invalid(kind, "duration_s")
        if target.__class__ is not str:
            raise _invalid(kind, "command")
        totals = self.hook_totals
        totals.runs += 1
        totals.duration_s += duration
        if decision in ("block", "deny"):
            totals.blocked += 1
        elif decision == "error":
            totals.failed += 1
        if tool_use_id is None:
            return
        tool = self._tool_for(fields, kind)
        if tool._hooks is None:
            tool._hooks = []
        tool._hooks.append(HookRun(event, target, exit_code, decision, duration))

    def _run_resumed(self, fields: Fields) -> None:
        ts = fields["ts"]
        gap = fields["gap_s"]
        if not _num(ts):
            raise _invalid("run_resumed", "ts")
        if not _num(gap):
            raise _invalid("run_resumed", "gap_s")
        if ts > self.last_ts:
            self.last_ts = ts
        self.resumes.append(float(gap))

    def _tool_progress(self, fields: Fields) -> None:
        kind = "tool_progress"
        progress = fields["progress"]
        total = fields["total"]
        message = fields["message"]
        if not _num(fields["ts"]):
            raise _invalid(kind, "ts")
        if not _num(progress):
            raise _invalid(kind, "progress")
        if total is not None and not _num(total):
            raise _invalid(kind, "total")
        if message is not None and message.__class__ is not str:
            raise _invalid(kind, "message")
        tool = self._tool_for(fields, kind)
        if tool._finished_ts is None:
            tool._progress = (progress, total, message)

    def _cancel_requested(self, fields: Fields) -> None:
        ts = fields["ts"]
        target = fields["target"]
        reason = fields["reason"]
        by = fields["by"]
        if not _num(ts):
            raise _invalid("cancel_requested", "ts")
        if target.__class__ is not str:
            raise _invalid("cancel_requested", "target")
        if reason.__class__ is not str:
            raise _invalid("cancel_requested", "reason")
        if by.__class__ is not str:
            raise _invalid("cancel_requested", "by")
        if ts > self.last_ts:
            self.last_ts = ts
        info = CancelInfo(reason, by, ts)
        node = self.find(target)
        if node is None:
            self._pending_cancel.setdefault(target, info)
        elif node.cancel is None:  # the first request is the one that took effect
            node.cancel = info
            if isinstance(node, ToolNode):
                for child in node.children:  # a sub-agent that already ended cancelled
                    if child.status == "cancelled" and child.cancel is None:
                        child.cancel = info

    def _stop_requested(self, fields: Fields) -> None:
        # Checked and timed, kept on no node: a stopped agent's own end says it all (its
        # status, and ``error`` ``stopped: <reason>``; docs/tree.md).
        ts = fields["ts"]
        if not _num(ts):
            raise _invalid("stop_requested", "ts")
        for name in ("target", "reason", "by"):
            if fields[name].__class__ is not str:
                raise _invalid("stop_requested", name)
        if ts > self.last_ts:
            self.last_ts = ts

    def _agent_message(self, fields: Fields) -> None:
        # Checked and timed, kept on no node: the recipient's user_message holds the text.
        ts = fields["ts"]
        if not _num(ts):
            raise _invalid("agent_message", "ts")
        for name in ("from_agent_id", "to_agent_id", "text"):
            if fields[name].__class__ is not str:
                raise _invalid("agent_message", name)
        if ts > self.last_ts:
            self.last_ts = ts

    def _message_queued(self, fields: Fields) -> None:
        # Checked and timed, kept on no node: the agent's user_message holds the text once
        # it reads it (docs/events.md).
        ts = fields["ts"]
        if not _num(ts):
            raise _invalid("message_queued", "ts")
        if fields["text"].__class__ is not str:
            raise _invalid("message_queued", "text")
        if ts > self.last_ts:
            self.last_ts = ts

    def _elicitation(self, fields: Fields) -> None:
        # An MCP server's question and its answer (docs/events.md): timed, kept on no node
        # (the terminal's prompts ask it; its content is not in the stream).
        ts = fields["ts"]
        if not _num(ts):
            raise _invalid(str(fields["type"]), "ts")
        if ts > self.last_ts:
            self.last_ts = ts

    def _agent_finished(self, fields: Fields) -> None:
        kind = "agent_finished"
        ts = fields["ts"]
        status = fields["status"]
        result = fields["result"]
        error = fields["error"]
        turns = fields["turns"]
        input_tokens = fields["input_tokens"]
        output_tokens = fields["output_tokens"]
        duration = fields["duration_s"]
        if not _num(ts):
            raise _invalid(kind, "ts")
        status = _AGENT_STATUS.get(status) if status.__class__ is str else None
        if status is None:
            raise _invalid(kind, "status")
        if not _opt_str(result):
            raise _invalid(kind, "result")
        if not _opt_str(error):
            raise _invalid(kind, "error")
        if turns.__class__ is not int:
            raise _invalid(kind, "turns")
        if input_tokens.__class__ is not int:
            raise _invalid(kind, "input_tokens")
        if output_tokens.__class__ is not int:
            raise _invalid(kind, "output_tokens")
        if not _num(duration):
            raise _invalid(kind, "duration_s")
        cost = fields.get("cost_usd")  # absent in older traces: unknown
        if cost is not None and not _num(cost):
            raise _invalid(kind, "cost_usd")
        agent = self.agents.get(fields["agent_id"]) or self._agent_missing(fields, kind)
        if agent._finished_ts is not None:
            self._duplicate(agent.id)
            return  # a duplicate line: the first one stands
        if ts > self.last_ts:
            self.last_ts = ts
        agent.status = status
        agent.result = result
        agent.error = error
        agent.turns = turns
        agent.duration_s = duration
        agent._finished_ts = ts
        call = agent._parent
        if call is not None and self._background_calls:
            self._background_calls.pop(call.id, None)
        if status == "cancelled" and agent.cancel is None and call is not None:
            agent.cancel = call.cancel  # cancelled with the call that started it: say why
        # The agent's own totals replace what its turns added up to.
        agent.input_tokens = input_tokens
        agent.output_tokens = output_tokens
        # An agent that made no model call cost nothing, whatever an older trace says.
        agent.cost_usd = 0.0 if cost is None and not turns else cost
        self._dirty = True


def _add_cost(a: float | None, b: float | None) -> float | None:
    """Two costs added; unknown if either is (docs/costs.md, "Unknown prices")."""
    if a is None or b is None:
        return None
    return round(a + b, 9)


def _json_pieces(node: Node | dict[str, Any], levels: int) -> Iterator[bytes]:
    # Iterative, like _subtree_json: a stack of (node, levels left) and closing brackets.
    stack: list[tuple[Node | dict[str, Any], int] | bytes] = [(node, levels)]
    while stack:
        item = stack.pop()
        if isinstance(item, bytes):
            yield item
            continue
        current, left = item
        if isinstance(current, dict):
            children = current["children"]
            head = {k: v for k, v in current.items() if k != "children"}
        else:
            children = current.children
            head = node_json(current)
        if left <= 0 or not children:
            try:
                yield orjson.dumps(current)
                continue
            except orjson.JSONEncodeError:
                if not children:
                    raise
                # Deeper than orjson nests (255 levels, 64 agents): one level at a time.
                left = 1
        yield orjson.dumps(head)[:-1] + b',"children":['
        stack.append(b"]}")
        for i in range(len(children) - 1, -1, -1):
            stack.append((children[i], left - 1))
            if i:
                stack.append(b",")


def _plain_subtree(root: Node | dict[str, Any]) -> dict[str, Any]:
    # Iterative: a chain of agents may be deeper than any recursive encoder or decoder goes.
    top: dict[str, Any] = {}
    stack: list[tuple[Node | dict[str, Any], dict[str, Any]]] = [(root, top)]
    while stack:
        src, dst = stack.pop()
        if isinstance(src, dict):
            kids = src["children"]
            fields = {k: v for k, v in src.items() if k != "children"}
        else:
            kids = src.children
            fields = node_json(src)
        dst.update(orjson.loads(orjson.dumps(fields)))
        dst["children"] = [{} for _ in kids]
        stack.extend(zip(kids, dst["children"], strict=True))
    return top


def _subtree_json(
    root: Node, now: float, max_depth: int | None, keep: set[Node] | None
) -> dict[str, Any]:
    # Iterative, so a pathological file of very deep chains cannot hit the recursion limit.
    out = node_json(root)
    limit = math.inf if max_depth is None else max_depth
    stack: list[tuple[Node, dict[str, Any], int]] = [(root, out, 0)]
    while stack:
        node, obj, level = stack.pop()
        if obj["duration_s"] is None:
            obj["duration_s"] = node.elapsed(now)
        kids: list[dict[str, Any]] = []
        obj["children"] = kids
        if node.kind == "tool":
            level += 1
            if level > limit:
                continue
        for child in node.children:
            if keep is not None and child not in keep:
                continue
            child_obj = node_json(child)
            kids.append(child_obj)
            stack.append((child, child_obj, level))
    return out


class TraceSet:
    """The trees of every run in one stream (a trace file may hold several), in first-seen order.

    Args:
        keep_details: passed to every :class:`TraceTree`.
    """

    def __init__(self, *, keep_details: bool = True) -> None:
        self.keep_details = keep_details
        self.by_run: dict[str, TraceTree] = {}

    @classmethod
    def from_events(
        cls, events: Iterable[Event], *, live: bool = False, keep_details: bool = True
    ) -> TraceSet:
        """Split *events* into runs and build each run's tree (as :meth:`TraceTree.from_events`)."""
        traces = cls(keep_details=keep_details)
        for event in events:
            traces.apply(event)
        if not live:
            traces.end()
        return traces

    @property
    def trees(self) -> list[TraceTree]:
        """One tree per run, in the order runs first appear.

        A run named only by events that were then rejected (a garbage line with a ``run_id``)
        has an empty tree, which is left out.
        """
        return [tree for tree in self.by_run.values() if not tree.empty]

    def tree_for(self, run_id: str) -> TraceTree:
        """The tree of *run_id*, created empty if new.

        Raises:
            EventDecodeError: *run_id* is not a string.
        """
        tree = self.by_run.get(run_id)
        if tree is None:
            if run_id.__class__ is not str:
                raise EventDecodeError("field 'run_id': missing or not a string")
            tree = self.by_run[run_id] = TraceTree(run_id, keep_details=self.keep_details)
        return tree

    def apply(self, event: Event) -> None:
        """Add one event to its run's tree."""
        self.tree_for(event.run_id).apply(event)

    def apply_dict(self, fields: Fields) -> None:
        """Add one event's JSON object to its run's tree (as :meth:`TraceTree.apply_dict`)."""
        run_id = fields.get("run_id")
        if run_id.__class__ is not str:
            raise EventDecodeError("field 'run_id': missing or not a string")
        self.tree_for(run_id).apply_dict(fields)

    def end(self) -> None:
        """Mark every run's stream ended."""
        for tree in self.by_run.values():
            tree.end()


def split_runs(
    events: Iterable[Event], *, live: bool = False, keep_details: bool = True
) -> list[TraceTree]:
    """One tree per run in *events*, in the order runs first appear."""
    return TraceSet.from_events(events, live=live, keep_details=keep_details).trees
