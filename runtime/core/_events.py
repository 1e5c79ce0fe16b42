"""Events: the one flat stream every consumer reads (docs/events.md).

Every event is a frozen attrs class. On the wire (the JSONL trace, ``--json`` output) an event is
one JSON object whose ``type`` key names its class; :func:`event_converter` is the one cattrs
converter that turns events into such objects and back (made on first use).
:func:`encode_event` / :func:`decode_event` are the fast paths used by the trace writer and
readers.
"""

from __future__ import annotations

import types
import typing
from typing import Any, ClassVar, Final, Literal

import attrs
import cattrs
import orjson
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn
from cattrs.preconf.orjson import make_converter

from ._errors import EventDecodeError, UnknownEventType
from ._statuses import AGENT_STATUSES as AGENT_STATUSES
from ._statuses import TOOL_STATUSES as TOOL_STATUSES
from ._statuses import AgentStatus as AgentStatus
from ._statuses import CancelBy as CancelBy
from ._statuses import StopReason as StopReason
from ._statuses import ToolStatus as ToolStatus

# Marks a field the runtime fills with an id, never with text: the bus does not search it for
# secrets (neither does it search a ``Literal`` field, an enum).
_ID: Final = {"id": True}


@attrs.frozen(kw_only=True)
class Event:
    """Fields every event has. Not emitted itself.

    An emitter builds an event with its class and leaves ``seq``, ``ts`` and ``run_id`` out:
    the bus stamps them when the event enters the stream (``runtime/core/_bus.py``). Decoding
    requires them (:func:`event_from_dict`).
    """

    type: ClassVar[str] = ""
    seq: int = 0
    ts: float = 0.0
    run_id: str = ""
    agent_id: str | None
    parent_tool_use_id: str | None


@attrs.frozen(kw_only=True)
class RunStarted(Event):
    type: ClassVar[str] = "run_started"
    version: str
    config: dict[str, Any]


@attrs.frozen(kw_only=True)
class AgentStarted(Event):
    type: ClassVar[str] = "agent_started"
    name: str
    parent_agent_id: str | None
    depth: int
    prompt: str
    background: bool = False
    """Started with ``run_in_background``: its parent does not wait for it
    (docs/collaboration.md#background-sub-agents)."""


@attrs.frozen(kw_only=True)
class TextDelta(Event):
    type: ClassVar[str] = "text_delta"
    text: str


@attrs.frozen(kw_only=True)
class ThinkingDelta(Event):
    type: ClassVar[str] = "thinking_delta"
    text: str


@attrs.frozen(kw_only=True)
class ToolStarted(Event):
    type: ClassVar[str] = "tool_started"
    tool_use_id: str = attrs.field(metadata=_ID)
    name: str
    input: dict[str, Any]
    summary: str
    # The calling agent's depth (root 0); None in traces of older versions.
    depth: int | None = None


@attrs.frozen(kw_only=True)
class PermissionRequested(Event):
    type: ClassVar[str] = "permission_requested"
    request_id: str = attrs.field(metadata=_ID)
    tool_use_id: str = attrs.field(metadata=_ID)
    name: str
    summary: str


@attrs.frozen(kw_only=True)
class PermissionResolved(Event):
    type: ClassVar[str] = "permission_resolved"
    request_id: str = attrs.field(metadata=_ID)
    tool_use_id: str = attrs.field(metadata=_ID)
    granted: bool
    reason: str


@attrs.frozen(kw_only=True)
class ToolFinished(Event):
    type: ClassVar[str] = "tool_finished"
    tool_use_id: str = attrs.field(metadata=_ID)
    name: str
    status: ToolStatus
    output: str
    duration_s: float
    # The input the tool really ran with, when a middleware layer changed the model's
    # (docs/python-api.md, "Middleware"); None when it ran with tool_started's input.
    input: dict[str, Any] | None = None
    # The calling agent's depth (root 0); None in traces of older versions.
    depth: int | None = None


@attrs.frozen(kw_only=True)
class TurnFinished(Event):
    type: ClassVar[str] = "turn_finished"
    turn: int
    stop_reason: StopReason
    input_tokens: int
    output_tokens: int
    context_tokens: int | None = None
    """How big the agent's context is after this turn (tokens, estimated), when it is known."""
    context_window: int | None = None
    """The agent's model's context window (tokens), when it is known."""
    tool_use_ids: list[str] | None = attrs.field(default=None, metadata=_ID)
    """The tool calls this turn asked for, in the model's order (None in older traces)."""
    cost_usd: float | None = None
    """What this turn's model call cost in US dollars; None when the model has no price
    (docs/costs.md)."""
    cache_read_tokens: int | None = None
    """Of ``input_tokens``, those read from the prompt cache (None: none, or not reported)."""
    cache_write_tokens: int | None = None
    """Of ``input_tokens``, those written to the prompt cache (None: none, or not reported)."""


@attrs.frozen(kw_only=True)
class UserMessage(Event):
    type: ClassVar[str] = "user_message"
    text: str


@attrs.frozen(kw_only=True)
class MessageQueued(Event):
    """A message from outside the run (``Runtime.send_message``: the control socket's
    ``message``, a line typed during a chat turn) is in a running agent's mailbox, emitted as
    that agent. It reaches its history at its next step (its ``user_message``, with the same
    text); one the process died before it read goes into its mailbox again on a resume
    (docs/resume.md)."""

    type: ClassVar[str] = "message_queued"
    text: str


@attrs.frozen(kw_only=True)
class CancelRequested(Event):
    type: ClassVar[str] = "cancel_requested"
    target: str
    reason: str
    by: CancelBy


@attrs.frozen(kw_only=True)
class AgentFinished(Event):
    type: ClassVar[str] = "agent_finished"
    status: AgentStatus
    result: str | None
    error: str | None
    turns: int
    input_tokens: int
    output_tokens: int
    duration_s: float
    cost_usd: float | None = None
    """What the agent's own model calls cost in US dollars (like its tokens, its sub-agents'
    not included); None when one of them has no price (docs/costs.md)."""


@attrs.frozen(kw_only=True)
class RunFinished(Event):
    type: ClassVar[str] = "run_finished"
    status: AgentStatus
    duration_s: float


@attrs.frozen(kw_only=True)
class ToolProgress(Event):
    """A long tool call reported how far it has got (an MCP progress notification, say)."""

    type: ClassVar[str] = "tool_progress"
    tool_use_id: str = attrs.field(metadata=_ID)
    progress: float
    total: float | None
    message: str | None


@attrs.frozen(kw_only=True)
class ProviderRetry(Event):
    """The agent's model call failed in a way worth retrying and will be tried again."""

    type: ClassVar[str] = "provider_retry"
    attempt: int
    delay_s: float
    reason: str


@attrs.frozen(kw_only=True)
class ContextCompacted(Event):
    """The agent's history was made smaller to fit its model's context window."""

    type: ClassVar[str] = "context_compacted"
    method: Literal["trim", "summary"]
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    input_tokens: int = 0
    """What the summary request cost (``summary`` only; counted in the agent's usage)."""
    output_tokens: int = 0
    cost_usd: float | None = None
    """The summary request's cost in US dollars (``summary`` only; None for a trim, or when
    the model has no price: docs/costs.md)."""


@attrs.frozen(kw_only=True)
class ReplayDiverged(Event):
    """A replayed run did something other than what its trace recorded."""

    type: ClassVar[str] = "replay_diverged"
    node: str
    detail: str


@attrs.frozen(kw_only=True)
class RateLimited(Event):
    """The agent's model call waits its turn at the endpoint's rate limit (docs/rate-limits.md)."""

    type: ClassVar[str] = "rate_limited"
    wait_s: float
    """The wait foreseen when it began (its place in line at the rate known then)."""
    reason: Literal["refused", "paused", "requests", "tokens"]
    status: int | None = None
    """For ``refused``: the HTTP status that refused this agent's try (429, 529)."""


@attrs.frozen(kw_only=True)
class HookFinished(Event):
    """One run of a configured hook (docs/hooks.md): what ran, how it ended, what it decided.

    ``tool_use_id`` is the call it judged (``PreToolUse``, ``PostToolUse``, a permission's
    ``Notification``), else ``None``; ``parent_tool_use_id`` stays the emitting agent's, as on
    every event, so the tree finds the agent and, under it, the call.
    """

    type: ClassVar[str] = "hook_finished"
    hook_event: str
    command: str | None = None
    url: str | None = None
    exit_code: int | None = None
    """The command's exit code, an HTTP hook's status; ``None``: killed at its timeout,
    cancelled, or it never started (or connected)."""
    decision: str | None = None
    duration_s: float = 0.0
    tool_use_id: str | None = attrs.field(default=None, metadata=_ID)


@attrs.frozen(kw_only=True)
class StopRequested(Event):
    """A graceful stop of the subtree under *target* was asked for (docs/collaboration.md):
    emitted, like ``cancel_requested``, as the agent that owns the target."""

    type: ClassVar[str] = "stop_requested"
    target: str
    reason: str
    by: CancelBy


@attrs.frozen(kw_only=True)
class AgentMessage(Event):
    """One agent sent another a message (``send_message``, docs/collaboration.md): it is in
    the recipient's mailbox, read at its next step (its ``user_message``)."""

    type: ClassVar[str] = "agent_message"
    from_agent_id: str = attrs.field(metadata=_ID)
    to_agent_id: str = attrs.field(metadata=_ID)
    text: str


# -- the todo tool (docs/tools.md, "todo_write") -----------------------------------------------


@attrs.frozen(kw_only=True)
class TodoUpdated(Event):
    """An agent wrote its todo list (``todo_write``): the whole list, as it is now."""

    type: ClassVar[str] = "todo_updated"
    tool_use_id: str = attrs.field(metadata=_ID)
    todos: list[dict[str, str]]
    """Each item: ``content``, ``status`` (``pending``, ``in_progress``, ``completed``) and
    ``activeForm`` (Claude Code's ``TodoWrite`` keys)."""


@attrs.frozen(kw_only=True)
class RunResumed(Event):
    """A run whose process died goes on from its trace (docs/resume.md)."""

    type: ClassVar[str] = "run_resumed"
    version: str
    gap_s: float
    """From the trace's last recorded event to this one: how long the run was down."""
    last_seq: int
    """The ``seq`` of the last recorded event; this one is the next."""
    cut_bytes: int
    """The bytes of a cut last line (a killed writer) left out of the trace; 0 if none."""
    source: str | None
    """The trace this one continues, when it is written to another file (else null)."""
    config: dict[str, Any]
    """What the continuation runs with (as ``run_started.config``; never secrets)."""
    rerun: list[str] = attrs.field(factory=list, metadata=_ID)
    """Interrupted tool calls run again (read-only or idempotent tools; calls still waiting for
    permission, which had not run)."""
    interrupted: list[str] = attrs.field(factory=list, metadata=_ID)
    """Interrupted tool calls not run again: the model reads that they were interrupted."""


# -- MCP servers asking the client (docs/mcp.md, "Sampling" and "Elicitation") -----------------


@attrs.frozen(kw_only=True)
class McpSampled(Event):
    """An MCP server's ``sampling/createMessage`` was answered (or not) with the calling
    agent's model, during that agent's call ``tool_use_id`` to the server."""

    type: ClassVar[str] = "mcp_sampled"
    tool_use_id: str = attrs.field(metadata=_ID)
    server: str
    model: str
    status: Literal["ok", "declined", "error", "cancelled"]
    reason: str = ""
    input_tokens: int = 0
    """What the model call cost (counted in the agent's usage and budget)."""
    output_tokens: int = 0


@attrs.frozen(kw_only=True)
class ElicitationRequested(Event):
    """An MCP server asked the user a question during the call ``tool_use_id``."""

    type: ClassVar[str] = "elicitation_requested"
    request_id: str = attrs.field(metadata=_ID)
    tool_use_id: str = attrs.field(metadata=_ID)
    server: str
    message: str
    mode: Literal["form", "url"]
    requested_schema: dict[str, Any] | None = None
    url: str | None = None


@attrs.frozen(kw_only=True)
class ElicitationResolved(Event):
    """The answer to an ``elicitation_requested`` (every request ends with one)."""

    type: ClassVar[str] = "elicitation_resolved"
    request_id: str = attrs.field(metadata=_ID)
    tool_use_id: str = attrs.field(metadata=_ID)
    action: Literal["accept", "decline", "cancel"]
    reason: str = ""


EVENT_TYPES: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (
        RunStarted,
        AgentStarted,
        TextDelta,
        ThinkingDelta,
        ToolStarted,
        PermissionRequested,
        PermissionResolved,
        ToolFinished,
        TurnFinished,
        UserMessage,
        MessageQueued,
        CancelRequested,
        AgentFinished,
        RunFinished,
        ToolProgress,
        ProviderRetry,
        ContextCompacted,
        ReplayDiverged,
        RateLimited,
        HookFinished,
        StopRequested,
        AgentMessage,
        TodoUpdated,
        RunResumed,
        McpSampled,
        ElicitationRequested,
        ElicitationResolved,
    )
}

COMMON_FIELDS: Final = tuple(a.name for a in attrs.fields(Event))
"""The fields every event has, in their order on the wire."""
_STAMPED: Final = ("seq", "ts", "run_id")
_SEARCHED: dict[type[Event], tuple[str, ...]] = {}


def searched_fields(cls: type[Event]) -> tuple[str, ...]:
    """The fields of *cls* that may hold text, so a secret: its own fields but ids (marked
    ``metadata={"id": True}``), enums (``Literal``) and numbers. Read from the class, once."""
    names = _SEARCHED.get(cls)
    if names is None:
        hints = typing.get_type_hints(cls)
        names = _SEARCHED[cls] = tuple(
            a.name
            for a in attrs.fields(cls)
            if a.name not in COMMON_FIELDS
            and not a.metadata.get("id")
            and not _never_text(hints[a.name])
        )
    return names


def _never_text(hint: Any) -> bool:
    """Whether a field of type *hint* can hold no text: an enum, a number, or null."""
    if typing.get_origin(hint) is Literal:
        return True
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    args = typing.get_args(hint) if union else (hint,)
    return all(a in (int, float, bool, type(None)) or typing.get_origin(a) is Literal for a in args)


_CONVERTER: list[cattrs.Converter] = []
_STRUCTURE: dict[str, Any] = {}


def event_converter() -> cattrs.Converter:
    """The one cattrs converter of events, made on first use: generating its functions for
    every event class is tens of milliseconds, and a process that only writes events (the
    trace writer's fast path below) or reads a trace as JSON objects never needs it
    (bench/README.md, "Resume")."""
    if not _CONVERTER:
        converter = make_converter(forbid_extra_keys=False)
        for tag, cls in EVENT_TYPES.items():
            _STRUCTURE[tag] = make_dict_structure_fn(cls, converter)
            converter.register_unstructure_hook(cls, _make_unstructure(cls, converter))
            converter.register_structure_hook(cls, _STRUCTURE[tag])
        converter.register_structure_hook(Event, _structure_event)
        _CONVERTER.append(converter)
    return _CONVERTER[0]


def _make_unstructure(cls: type[Event], converter: cattrs.Converter) -> Any:
    inner = make_dict_unstructure_fn(cls, converter)
    tag = cls.type

    def unstructure(event: Event) -> dict[str, Any]:
        out: dict[str, Any] = {"type": tag}
        out.update(inner(event))
        return out

    return unstructure


def _structure_event(obj: Any, _: Any) -> Event:
    if not isinstance(obj, dict):
        raise EventDecodeError(f"an event is a JSON object, not {type(obj).__name__}")
    tag = obj.get("type")
    if not isinstance(tag, str):
        raise EventDecodeError("field 'type': missing or not a string")
    structure = _STRUCTURE.get(tag)
    if structure is None:
        if not _CONVERTER:  # the structure functions are made with the converter
            event_converter()
        structure = _STRUCTURE.get(tag)
        if structure is None:
            raise UnknownEventType(tag)
    for name in _STAMPED:  # defaults only for emitters: every line on the wire has them
        if name not in obj:
            raise EventDecodeError(f"invalid {tag} event: required field missing @ {tag}.{name}")
    try:
        event: Event = structure(obj, EVENT_TYPES[tag])
        return event
    except cattrs.BaseValidationError as exc:
        detail = "; ".join(cattrs.transform_error(exc, path=tag))
        raise EventDecodeError(f"invalid {tag} event: {detail}") from exc
    except (TypeError, ValueError) as exc:
        raise EventDecodeError(f"invalid {tag} event: {exc}") from exc


def event_to_dict(event: Event) -> dict[str, Any]:
    """The JSON object of *event* (``type`` first)."""
    result: dict[str, Any] = event_converter().unstructure(event, type(event))
    return result


def event_from_dict(obj: Any) -> Event:
    """Build an event from its JSON object.

    Raises:
        UnknownEventType: the ``type`` is not one this version knows.
        EventDecodeError: anything else is wrong; the message names the field.
    """
    return _structure_event(obj, Event)


def _make_fast_dict(cls: type[Event]) -> Any:
    # The trace writer encodes every event, so it skips the converter: a generated function
    # builds the same object (``type`` first, fields in order) with no per-field dispatch, and
    # hands nested values (``input``, ``config``: already JSON) to orjson as they are. About 4x
    # faster than the converter; anything orjson cannot encode falls back to it.
    names = [a.name for a in attrs.fields(cls)]
    body = ", ".join(f"{n!r}: e.{n}" for n in names)
    namespace: dict[str, Any] = {}
    exec(f"def fast(e):\n    return {{'type': {cls.type!r}, {body}}}\n", namespace)
    return namespace["fast"]


_FAST_DICT: dict[type[Event], Any] = {cls: _make_fast_dict(cls) for cls in EVENT_TYPES.values()}
_APPEND_NEWLINE = orjson.OPT_APPEND_NEWLINE


def encode_event(event: Event) -> bytes:
    """One JSONL line (with its newline) for *event*: the JSON of :func:`event_to_dict`."""
    fast = _FAST_DICT.get(type(event))
    if fast is not None:
        try:
            return orjson.dumps(fast(event), option=_APPEND_NEWLINE)
        except TypeError:  # a value only the converter knows how to unstructure
            pass
    return orjson.dumps(event_to_dict(event), option=_APPEND_NEWLINE)


def decode_event(line: bytes | str, *, lineno: int | None = None) -> Event:
    """Decode one JSON line into an event.

    Raises:
        EventDecodeError: naming *lineno* and the faulty field.
    """
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise EventDecodeError(f"not JSON: {exc}", line=lineno) from exc
    try:
        return _structure_event(obj, Event)
    except UnknownEventType as exc:
        raise UnknownEventType(exc.type_name, line=lineno) from None
    except EventDecodeError as exc:
        raise EventDecodeError(str(exc), line=lineno) from exc.__cause__
