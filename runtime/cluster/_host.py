"""The worker side of the ``ray`` placement: one host actor per worker process runs subtrees.

Nothing here imports Ray: :class:`RayHost` is a plain class that ``_placement`` turns into
an async Ray actor, so this module is also what the worker process imports when it unpickles the
actor class and the calls it receives.

What runs on the worker::

    Ray worker process
    ├── asyncio loop (Ray's, for the async actor)
    │   ├── RayHost.channel()              ONE streaming actor call per host: yields Envelopes
    │   │                                  (what the host's _Outbox holds: every subtree's
    │   │                                  events queued meanwhile, one batch per subtree)
    │   ├── RayHost.submit(calls, (settings,))   starts subtrees (many per call)
    │   ├── RayHost.cancel/.answer/.message/.abort   small control calls
    │   └── trio loop in guest mode        started on the first call, lives as long as the actor
    │       └── host nursery
    │           ├── _run_here              one per run while any of its subtrees runs here: the
    │           │                          run's budget layer, and an http run's provider (one
    │           │                          HTTP client for the host; its limiter asks the
    │           │                          driver's: runtime/cluster/_limits.py)
    │           └── _serve_call            one task per subtree, its own cancel scope (registered
    │               │                      as the parent's agent-call tool_use_id); catches
    │               │                      Exception
    │               └── run_agent_actor(remote run, spec, own_task)   the UNCHANGED agent loop,
    │                                      in this task; its bus hands every event to the outbox
    └── the node watch (a thread)          the raylet that started this worker dies: report
                                           "node lost" on the channel, then exit at once (the
                                           bash warden then stops every bash process group)

A subtree runs the unchanged agent code on a :class:`RunContext` of its own (its own bus,
registry, broker and ``max_parallel`` limiter: cheap objects; the budget layer, the log
secrets, the provider, the agent types' set-ups and the environment are the run's, made once
on this host and shared by its subtrees; the budget layer routes a cancel to the subtree whose
registry holds the agent). No task, nursery, subscription or timer is added per subtree: its bus
(:func:`_subtree_bus`: a plain :class:`~runtime.core._bus.EventBus` given the outbox as its
backpressure) hands each event to the host's :class:`_Outbox` as it is emitted. Its bus masks
the run's secrets (the driver's one :class:`~runtime.core._secrets.Secrets`, its values shipped
in the run's settings, with the provider key and the worker's own), so a tool's output is masked
before it is cut and before the remote model sees it.

Secrets on the worker: the provider key and the run's secret values travel in the run's
settings (Ray's object store), never in the worker's environment; a host started by the
placement seals the worker process's environment first
(:func:`~runtime.core._secrets.seal_process_environ`: secret-looking variables out of
``os.environ`` and ``/proc/<pid>/environ``, the process non-dumpable), so the commands its agents
run cannot read a key from there. It is sealed once for the worker's life; every run's keys come
with that run's settings, so a worker that serves several runs needs nothing from its
environment. The outbox sends what it holds ``batch_interval_s`` after the first event queued
since the last envelope, or at once when a subtree ends or ``batch_max`` events wait, as one
:class:`Envelope` with a :class:`Batch` per subtree; the parent forwards them into the run's
bus, where ``seq`` is assigned. A subtree's end carries the root's outcome without its
history. Agent ids made here carry the call's prefix
(``h1.7.agent-3``), and so do the scripted provider's tool-call ids, so every id is unique in
the run. Sub-agents started by this subtree run here too (their placement is forced ``local``).

Cancellation: :meth:`RayHost.cancel` cancels one node of one subtree (``by`` and ``reason``
kept, so a budget cancel still ends ``budget_exceeded``); cancelling the boundary node is "the
parent's agent call was cancelled". The subtree's ``cancelled`` events then flow back like any
others before its final batch. :meth:`RayHost.abort` stops a subtree at once and is the parent's
last resort (its events are no longer awaited). An exception in one subtree ends that subtree
``failed``; it never reaches the host nursery or the other subtrees.

The channel doubles as the host's heartbeat: with nothing to send it yields an empty envelope
every ``heartbeat_s``, so the parent can tell a silent host from a lost one.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import gc
import itertools
import operator
import os
import pickle
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

import attrs
import trio

from runtime._logs import get_logger
from runtime.actors import Registry
from runtime.core import (
    AgentFinished,
    AgentOutcome,
    AgentsError,
    AgentSpec,
    AgentState,
    AgentStatus,
    AgentType,
    AgentTypes,
    BudgetLayer,
    ConfigError,
    Event,
    EventBus,
    LazyLogger,
    Limits,
    Message,
    PermissionBroker,
    PriceTable,
    Provider,
    RunContext,
    Sandbox,
    Secrets,
    SystemPromptBuilder,
    TextBlock,
    TypeSetup,
    cancel_node,
    new_run_context,
    run_agent_actor,
    run_environ,
    seal_process_environ,
    secret_values,
    started_event,
)
from runtime.providers import Scenario, ScriptedProvider

from ._limits import CURRENT_CALL, RemoteLimiter

if TYPE_CHECKING:
    from runtime.core import PermissionPolicy, Tool, ToolLimits

_log = get_logger("trio_agents.ray_host")
E = TypeVar("E", bound=Event)

# How long a subtree's end may take to be reported when its stream is being torn down.
_FINISH_GRACE_S = 10.0
# How long a host whose node is lost waits for that news to leave before it exits.
_LOST_REPORT_S = 1.0
# Subtrees a host starts per trio scheduling round. A burst (200 arriving in one submit) started
# all at once advances in lockstep and ends all together, so nothing goes back to the parent
# until the last one is done; started a few at a time, the first ones finish and ship while
# later ones start, and the parent forwards them meanwhile (bench/README.md,
# "The Ray placement", "Earlier passes").
_ADMIT_PER_TICK = 16


# -- what travels between the parent and the host ---------------------------------------------


@attrs.frozen(kw_only=True)
class ProviderConfig:
    """How the worker gets a provider: its settings and its key travel with the run's settings.

    Attributes:
        kind: ``scripted`` (the scenario travels), ``http`` (``openai``/``anthropic``, opened
            on the worker with :func:`~runtime.providers.open_provider`), or ``object`` (a
            picklable provider instance, sent as is).
        key: the ``http`` provider's key (never shown in a repr); without one, *key_var* of
            the worker's own environment as it was before it was sealed (a cluster that gives
            its workers a key).
    """

    kind: Literal["scripted", "http", "object"]
    name: str
    scenario: Scenario | None = None
    model: str | None = None
    base_url: str | None = None
    url_var: str | None = None
    key_var: str | None = None
    key: str | None = attrs.field(default=None, repr=False)
    max_retries: int = 4
    call_deadline_s: float | None = 600.0
    provider: Any = None
    shared_limiter: str | None = None
    """``http``: the driver's limiter of the endpoint (its label) decides every call's turn
    (docs/rate-limits.md, "Ray hosts"); ``None``: the host's provider has a limiter of its
    own."""


@attrs.frozen(kw_only=True)
class RunConfig:
    """What every subtree of one run shares. Sent once per host: the parent puts it in Ray's
    object store and each call carries the reference, which the host resolves once and keeps
    (unpickling the tools, agent types and scenario on every call would dominate).

    It holds secrets (the run's environment, the provider key, *secrets*: the values the
    driver masks, MCP header values included), so none of them is ever shown in its repr.
    """

    run_id: str
    agent_types: tuple[AgentType, ...]
    provider: ProviderConfig
    tools: tuple[Tool, ...]
    tool_limits: ToolLimits
    limits: Limits
    workspace: str
    env: Mapping[str, str] = attrs.field(repr=False)
    policy: PermissionPolicy
    batch_interval_s: float = 0.01
    batch_max: int = 512
    system_prompt: SystemPromptBuilder | None = None
    sandbox: Sandbox | None = None
    secrets: tuple[str, ...] = attrs.field(default=(), repr=False)
    prices: PriceTable = attrs.field(factory=PriceTable)
    """The run's prices: remote agents cost their calls as the driver's do (docs/costs.md)."""
    model: str | None = None
    """The run's model, as the driver's agents ask for it (a scripted run's too: its cost is
    that model's); None: the provider's own."""
    # What every subtree of the run on one host shares, made once there (see _shared).
    _cache: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    def workspace_path(self) -> Path:
        """The workspace, checked once on this host (a host is checked before it gets work).

        Raises:
            ConfigError: this worker does not see it.
        """
        path = self._cache.get("workspace")
        if path is None:
            path = self._cache["workspace"] = _check_workspace(self.workspace)
        return path

    def env_copy(self) -> Mapping[str, str]:
        """The run's environment, one read-only copy shared by the run's subtrees here."""
        env = self._cache.get("env")
        if env is None:
            env = self._cache["env"] = MappingProxyType(dict(self.env))
        return env

    def type_setups(self) -> dict[AgentType, TypeSetup]:
        """What each agent type's agents get (``RunContext.type_setups``), shared by the run's
        subtrees here: it depends on the types, tools and settings, all the run's."""
        made: dict[AgentType, TypeSetup] = self._cache.setdefault("type_setups", {})
        return made

    def run_secrets(self) -> Secrets:
        """The run's secrets here, one object made once: the driver's, the provider key, and
        those of this worker's own environment (as it was before it was sealed)."""
        secrets = self._cache.get("secrets")
        if secrets is None:
            own = secret_values(run_environ())
            key = (self.provider.key,) if self.provider.key else ()
            secrets = self._cache["secrets"] = Secrets.of((*self.secrets, *key, *own))
        assert isinstance(secrets, Secrets)
        return secrets

    def limits_for(self, max_agents: int) -> Limits:
        """The run's limits with this subtree's ``max_agents`` (one object per value: making
        one with ``attrs.evolve`` per subtree showed in the profiles)."""
        made: dict[int, Limits] = self._cache.setdefault("limits", {})
        limits = made.get(max_agents)
        if limits is None:
            if len(made) >= 64:
                made.clear()
            limits = made[max_agents] = attrs.evolve(self.limits, max_agents=max_agents)
        return limits

    def shared(self) -> tuple[AgentTypes, dict[str, Tool]]:
        """The agent types (all placed ``local`` here) and the tools by name, made once."""
        made = self._cache.get("shared")
        if made is None:
            types = AgentTypes(attrs.evolve(t, placement="local") for t in self.agent_types)
            made = self._cache["shared"] = (types, {t.name: t for t in self.tools})
        return made


@attrs.frozen(kw_only=True)
class SubtreeCall:
    """One remote subtree.

    Attributes:
        config: the run's :class:`RunConfig`, or a Ray object reference to one; ``None``
            when it comes with the submit (once for all its calls).
        max_agents: how many more agents the run may start (the run-wide ``max_agents``).
    """

    call_id: str
    id_prefix: str
    spec: AgentSpec
    config: Any = None
    max_agents: int


@attrs.frozen(kw_only=True)
class Batch:
    """What one item of the stream carries.

    Attributes:
        final: the last item; *outcome* is the root agent's (``None`` if it never started).
        error: why the host could not run the subtree to its end (the parent reports it).
    """

    events: tuple[Event, ...] = ()
    outcome: AgentOutcome | None = None
    final: bool = False
    error: str | None = None


@attrs.frozen(kw_only=True)
class Envelope:
    """One item of a host's channel: batches of any of its subtrees, in the order queued.

    Attributes:
        data: the ``(call_id, batch)`` pairs packed by :func:`pack_items` (what the host
            sends); empty for a heartbeat.
        items: the same pairs as objects, only when they could not be packed (Ray's own
            pickling then carries them, as it carries everything else).
        lost: set when the host is going away (its node is lost): why. Its last item.
    """

    data: bytes = b""
    items: tuple[tuple[str, Batch], ...] = ()
    lost: str | None = None

    def batches(self) -> tuple[tuple[str, Batch], ...] | list[tuple[str, Batch]]:
        """The ``(call_id, batch)`` pairs, unpacked."""
        return unpack_items(self.data) if self.data else self.items


# Per class packed (each event class, the outcome and its state): its field names, a getter of
# their values (in attrs order), and a maker of an object from them.
_Shape = tuple[tuple[str, ...], Callable[[Any], Any], Callable[[Any], Any]]
_SHAPES: dict[type[Any], _Shape] = {}


def _shape(cls: type[Any]) -> _Shape:
    shape = _SHAPES.get(cls)
    if shape is None:
        # Every class here has more than one field, so the getter always gives a tuple.
        fields = attrs.fields(cls)
        # Built by keyword: every field must be an init field named as its alias (a private or
        # init=False field would need the alias and evolve's rules; the round-trip test fails).
        assert all(a.init and a.alias == a.name for a in fields), cls
        names = tuple(a.name for a in fields)
        shape = _SHAPES[cls] = (names, operator.attrgetter(*names), _maker(cls, names))
    return shape


def _maker(cls: type[Any], names: tuple[str, ...]) -> Callable[[Any], Any]:
    """``make(values)`` is ``cls(**dict(zip(names, values)))``, written out for *cls* (the
    way attrs writes its ``__init__``): the parent rebuilds every event of a remote subtree,
    and the dict and the unpacking were most of that (bench/README.md)."""
    # Names no field can have (fields never start with "__"): a field named "cls" or "values"
    # must not rebind the class or the tuple being unpacked.
    assert all(name.isidentifier() and not name.startswith("__") for name in names)
    unpacked = ", ".join(names) + ","
    keywords = ", ".join(f"{name}={name}" for name in names)
    source = f"def make(__values):\n    {unpacked} = __values\n    return __cls({keywords})\n"
    namespace: dict[str, Any] = {"__cls": cls}
    exec(compile(source, f"<event maker {cls.__qualname__}>", "exec"), namespace)
    make: Callable[[Any], Any] = namespace["make"]
    return make


def _outcome_shapes() -> tuple[_Shape, _Shape, int]:
    outcome, state = _shape(AgentOutcome), _shape(AgentState)
    return outcome, state, outcome[0].index("state")


_OUTCOME_SHAPES = _outcome_shapes()


def _pack_outcome(outcome: AgentOutcome | None) -> Any:
    """A subtree's outcome as a list of its field values, its state's among them as a tuple of
    that state's field values (``None``, or an outcome or a state of a subclass, goes as
    itself): the attrs objects' ``__getstate__``/``__setstate__`` made the outcomes nearly
    40 % of what packing a 200-subtree burst's envelopes cost the host (bench/README.md)."""
    if type(outcome) is not AgentOutcome or type(outcome.state) is not AgentState:
        return outcome
    outcome_shape, state_shape, at = _OUTCOME_SHAPES
    values = list(outcome_shape[1](outcome))
    values[at] = state_shape[1](outcome.state)
    return values


def _unpack_outcome(packed: Any) -> AgentOutcome | None:
    """The outcome :func:`_pack_outcome` packed, rebuilt equal."""
    if type(packed) is not list:
        outcome: AgentOutcome | None = packed
        return outcome
    outcome_shape, state_shape, at = _OUTCOME_SHAPES
    packed[at] = state_shape[2](packed[at])
    made: AgentOutcome = outcome_shape[2](packed)
    return made


def pack_items(items: list[tuple[str, Batch]] | tuple[tuple[str, Batch], ...]) -> bytes:
    """Batches as one ``bytes`` object for the channel: each event as its class and the tuple
    of its field values, pickled by the standard (C) pickler in one go (a subtree's outcome
    likewise, see :func:`_pack_outcome`).

    Handing Ray the events themselves made it pickle every one through cloudpickle's
    per-object hook and the attrs ``__getstate__``, and unpickle them on the parent's Ray
    thread (the GIL taken from the parent's trio loop): about 10x the cost of this
    (bench/README.md). :func:`unpack_items` is the inverse.

    Raises:
        Exception: something in a batch cannot be pickled (the caller sends objects instead).
    """
    packed = []
    shapes = _SHAPES
    for call_id, batch in items:
        events = []
        for event in batch.events:
            cls = type(event)
            shape = shapes.get(cls) or _shape(cls)
            events.append((cls, shape[1](event)))
        packed.append((call_id, events, _pack_outcome(batch.outcome), batch.final, batch.error))
    return pickle.dumps(packed, protocol=pickle.HIGHEST_PROTOCOL)


def unpack_items(data: bytes) -> list[tuple[str, Batch]]:
    """The ``(call_id, batch)`` pairs :func:`pack_items` packed, events rebuilt equal."""
    out = []
    shapes = _SHAPES
    for call_id, events, outcome, final, error in pickle.loads(data):
        rebuilt = tuple((shapes.get(cls) or _shape(cls))[2](values) for cls, values in events)
        out.append(
            (call_id, Batch(events=rebuilt, outcome=_unpack_outcome(outcome), final=final,
                            error=error))
        )
    return out


def pack_calls(calls: tuple[SubtreeCall, ...] | list[SubtreeCall]) -> bytes:
    """Subtree calls as one ``bytes`` object for a submit: each call as its id, prefix and
    ``max_agents`` and the tuple of its spec's field values, pickled by the standard (C)
    pickler. Ray pickles its arguments with cloudpickle, whose per-object hook and the attrs
    ``__getstate__`` made a 200-call submit cost the parent ~1 ms more before the host could
    start (bench/README.md). :func:`unpack_calls` is the inverse.

    Raises:
        ValueError: a call carries its own settings (a Ray object reference travels as an
            argument of Ray's, so Ray keeps it alive).
        Exception: something in a spec cannot be pickled (the caller sends objects instead).
    """
    spec_shape = _SHAPES.get(AgentSpec) or _shape(AgentSpec)
    packed = []
    for call in calls:
        if call.config is not None:
            raise ValueError("a call with its own settings travels as an object")
        packed.append((call.call_id, call.id_prefix, call.max_agents, spec_shape[1](call.spec)))
    return pickle.dumps(packed, protocol=pickle.HIGHEST_PROTOCOL)


def unpack_calls(data: bytes) -> tuple[SubtreeCall, ...]:
    """The calls :func:`pack_calls` packed, rebuilt equal."""
    make_spec = (_SHAPES.get(AgentSpec) or _shape(AgentSpec))[2]
    return tuple(
        SubtreeCall(call_id=call_id, id_prefix=prefix, max_agents=max_agents,
                    spec=make_spec(spec))
        for call_id, prefix, max_agents, spec in pickle.loads(data)
    )


@attrs.frozen(kw_only=True)
class PermissionAsked(Event):
    """A remote tool call waits for the parent's permission broker (never forwarded)."""

    type: ClassVar[str] = "x_ray_permission_asked"
    question_id: str
    tool_use_id: str
    name: str
    input: dict[str, Any]
    summary: str


@attrs.frozen(kw_only=True)
class PermissionWithdrawn(Event):
    """The asking tool call ended (cancelled) before an answer came (never forwarded)."""

    type: ClassVar[str] = "x_ray_permission_withdrawn"
    question_id: str


# -- the remote run ---------------------------------------------------------------------------


@attrs.define(eq=False)
class _Answer:
    done: trio.Event = attrs.Factory(trio.Event)
    granted: bool = False
    reason: str = ""


class _ForwardingBroker(PermissionBroker):
    """Applies the run's policy here; a call that must ask waits for the PARENT's broker.

    The question travels in the event stream (so it stays after its ``tool_started``); the
    parent asks whoever answers there (terminal, control socket), applying its own timeout, and
    the answer comes back through :meth:`RayHost.answer`.
    """

    def __init__(self, bus: EventBus, policy: PermissionPolicy, prefix: str) -> None:
        super().__init__(bus, policy)
        self._prefix = prefix
        self._qids = itertools.count(1)
        self._waiting: dict[str, _Answer] = {}

    async def check(
        self,
        tool: Tool,
        args: Mapping[str, Any],
        *,
        agent_id: str,
        parent_tool_use_id: str | None,
        tool_use_id: str,
        summary: str,
        hook: Literal["allow", "ask"] | None = None,
        workspace: Path | None = None,
    ) -> tuple[bool, str]:
        """Decide here when the policy can; else wait for the parent's answer (*hook*: as
        :meth:`PermissionBroker.check`; a Ray host runs no hooks, so it is never set here).

        Cancellation: a checkpoint while waiting; a cancelled wait tells the parent the
        question is withdrawn (before the call's ``tool_finished``).
        """
        decision = self.policy.decide(tool, args, workspace=workspace)
        if decision.action == "ask" and hook == "allow":
            return True, "allowed by a PreToolUse hook"
        if decision.action != "ask" and not (decision.action == "allow" and hook == "ask"):
            return decision.action == "allow", decision.reason
        qid = f"{self._prefix}q-{next(self._qids)}"
        answer = _Answer()
        self._waiting[qid] = answer
        try:
            await self.bus.emit(
                PermissionAsked(
                    agent_id=agent_id,
                    parent_tool_use_id=parent_tool_use_id,
                    question_id=qid,
                    tool_use_id=tool_use_id,
                    name=tool.name,
                    input=dict(args),
                    summary=summary,
                ),
            )
            await answer.done.wait()
            return answer.granted, answer.reason
        finally:
            self._waiting.pop(qid, None)
            if not answer.done.is_set():
                with trio.move_on_after(_FINISH_GRACE_S, shield=True):
                    await self.bus.emit(
                        PermissionWithdrawn(
                            agent_id=agent_id,
                            parent_tool_use_id=parent_tool_use_id,
                            question_id=qid,
                        ),
                    )

    def answer(self, question_id: str, granted: bool, reason: str) -> bool:
        waiting = self._waiting.get(question_id)
        if waiting is None or waiting.done.is_set():
            return False
        waiting.granted, waiting.reason = granted, reason
        waiting.done.set()
        return True


@attrs.define(eq=False)
class _RunHere:
    """What every subtree of one run running on this host shares, made when the first starts
    and dropped when the last ends: the budget layer and its task, the run's secrets
    masked in log lines, and an ``http`` run's provider (one HTTP client and connection pool
    for the host, and its link to the driver's rate limiter): one of each per run, instead of
    one per subtree."""

    layer: BudgetLayer
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    users: int = 0
    secrets: contextlib.ExitStack = attrs.Factory(contextlib.ExitStack)
    limiter: RemoteLimiter | None = None
    provider: Provider | None = None
    error: str | None = None  # why the provider could not be opened
    ready: trio.Event = attrs.Factory(trio.Event)  # the provider is open (or error is set)


@attrs.define(eq=False)
class _CallState:
    """One subtree on this host, as the control calls see it."""

    call: SubtreeCall
    config: RunConfig
    budget: BudgetLayer
    here: _RunHere
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    registry: Registry = attrs.Factory(Registry)
    broker: _ForwardingBroker | None = None
    run: RunContext | None = None
    # The root's outcome, once its supervisor has reported it.
    outcome: AgentOutcome | None = None
    # The parent's agent-call tool_use_id (a background root's parent agent id: the node it
    # registers under): cancelling it is "cancelled from above".
    boundary_id: str = attrs.field(
        default=attrs.Factory(
            lambda self: self.call.spec.parent_node or f"{self.call.call_id}.boundary",
            takes_self=True,
        )
    )
    # Cancels that came before the node they name was registered here.
    early: list[tuple[str, str, str | None]] = attrs.Factory(list)

    def cancel(self, node_id: str, reason: str, by: str | None) -> None:
        if self.registry.cancel(node_id, reason, by=by):
            return
        if node_id not in (self.boundary_id, self.call.spec.agent_id) or self.outcome is not None:
            return  # unknown or finished: nothing to do
        if self.boundary_id in self.registry:
            # The root is being registered right now: cancelling from above ends it
            # ``cancelled`` with this reason.
            self.registry.cancel(self.boundary_id, reason, by=by)
        else:
            self.early.append((node_id, reason, by))


class _Outbox:
    """The hand-off from the subtrees' trio tasks to the asyncio generator Ray streams from.

    One per host, shared by every subtree on it: each subtree's bus puts its events here as it
    emits them (a tap: no task, subscription or timer per subtree), and the channel takes
    everything queued as one envelope: ``interval_s`` after the first event queued since the
    last envelope, or at once when a subtree has ended or ``batch_max`` events are queued.
    Each subtree's events come out in the order emitted, as one :class:`Batch` per envelope,
    and its end (the final batch, with the events still queued) after all of them.

    Both sides run on the asyncio loop's thread (guest mode runs trio's tasks there), so plain
    data structures do; each side wakes the other through its own loop's primitives.
    """

    def __init__(self, max_pending: int, interval_s: float = 0.01, batch_max: int = 512) -> None:
        self._max = max_pending
        self.interval_s = interval_s
        self.batch_max = batch_max
        self._events: dict[str, list[Event]] = {}  # by call id, in the order first queued
        self._ends: dict[str, tuple[AgentOutcome | None, str | None]] = {}
        self._count = 0
        self._ready = asyncio.Event()  # something is queued
        self._urgent = asyncio.Event()  # send it now (an end, batch_max events, the news)
        self._space: trio.Event | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        # An end waited its whole grace for room: later ends do not wait until the next take.
        self.stalled = False
        self._closed = False

    # trio side
    def add(self, call_id: str, event: Event) -> None:
        """Queue *event* of subtree *call_id* (a tap of that subtree's bus: never waits)."""
        if self._closed:
            return
        events = self._events.get(call_id)
        if events is None:
            events = self._events[call_id] = []
        events.append(event)
        self._count += 1
        if self._count == 1:
            self._ready.set()
        elif self._count >= self.batch_max:
            self._urgent.set()

    def finish(self, call_id: str, outcome: AgentOutcome | None, error: str | None) -> None:
        """Queue the end of subtree *call_id*: its final batch leaves with the next envelope."""
        if self._closed:
            return
        self._ends[call_id] = (outcome, error)
        self.wake()

    def close(self) -> None:
        """Take nothing more: the host is going away (what is queued still leaves)."""
        self._closed = True

    def wake(self) -> None:
        """Make the channel send what is queued now (possibly nothing: the host's news)."""
        self._ready.set()
        self._urgent.set()

    def has_room(self) -> bool:
        """Whether fewer than *max_pending* events wait for Ray."""
        return self._count < self._max

    async def wait_for_room(self) -> None:
        """Wait while *max_pending* events wait for Ray (backpressure from Ray).

        Cancellation: a checkpoint only while it waits.
        """
        while self._count >= self._max:
            if self._space is None:
                self._space = trio.Event()
                self._token = trio.lowlevel.current_trio_token()
            await self._space.wait()

    def _wake_space(self) -> None:
        space, self._space = self._space, None
        if space is not None:
            space.set()

    # asyncio side
    async def take(self, wait_s: float) -> list[tuple[str, Batch]]:
        """Everything queued, once there is something (see the class doc); ``[]`` after
        *wait_s* with nothing."""
        if not self._ready.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), wait_s)
        if self._ready.is_set() and not self._urgent.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._urgent.wait(), self.interval_s)
        return self.take_nowait()

    def take_nowait(self) -> list[tuple[str, Batch]]:
        """Everything queued, as ``(call_id, batch)`` pairs: the subtrees still running, then
        those that ended (each end carrying its last events)."""
        events, ends = self._events, self._ends
        items = [(c, Batch(events=tuple(e))) for c, e in events.items() if c not in ends]
        items += [
            (c, Batch(events=tuple(events.get(c, ())), outcome=o, final=True, error=err))
            for c, (o, err) in ends.items()
        ]
        self._events, self._ends, self._count = {}, {}, 0
        self._ready.clear()
        self._urgent.clear()
        self.stalled = False
        if self._space is not None and self._token is not None:
            self._token.run_sync_soon(self._wake_space)
        return items


class _OutboxBackpressure:
    """A subtree bus's :class:`~runtime.core.Backpressure`: emitters wait while the host's
    outbox is full, as they wait for a ``block`` subscriber elsewhere (that is the
    backpressure from Ray); an end waits at most its grace, then the outbox counts as stalled
    (later ends do not wait until the next take)."""

    def __init__(self, outbox: _Outbox) -> None:
        self._outbox = outbox

    def has_room(self) -> bool:
        return self._outbox.has_room()

    async def wait_for_room(self) -> None:
        await self._outbox.wait_for_room()

    def passed(self) -> None:
        pass

    def final_must_wait(self) -> bool:
        return not self._outbox.has_room() and not self._outbox.stalled

    async def wait_final(self, grace_s: float) -> None:
        with trio.move_on_after(grace_s, shield=True) as waited:
            await self._outbox.wait_for_room()
        if waited.cancelled_caught:
            self._outbox.stalled = True


def _subtree_bus(run_id: str, secrets: Secrets, outbox: _Outbox, call_id: str) -> EventBus:
    """A subtree's event bus on a host: it masks and numbers its events as any bus does, and
    hands each one straight to the host's :class:`_Outbox` (a tap: no subscription, no
    shipper task), its emitters waiting while the outbox is full."""
    bus = EventBus(run_id, secrets=secrets, backpressure=_OutboxBackpressure(outbox))
    bus.add_tap(functools.partial(outbox.add, call_id))
    return bus


# -- the actor --------------------------------------------------------------------------------


class RayHost:
    """Hosts one trio loop (guest mode) in a Ray async actor and runs subtrees in it.

    Args:
        name: this host's name in the run (``h1``), for logs and errors.
        max_pending: events the host may have queued for Ray before its agents wait.
        heartbeat_s: with nothing to send, the channel yields an empty envelope this often.
        watch_node: watch the process that started this worker (the raylet) and leave when
            it dies (see the module doc).
        seal_environ: seal this process's environment (see the module doc); the placement
            asks for it, always in a worker process of its own.
    """

    def __init__(
        self,
        name: str,
        max_pending: int = 65_536,
        heartbeat_s: float = 1.0,
        watch_node: bool = True,
        seal_environ: bool = False,
    ) -> None:
        if seal_environ:
            # Ray's own mode switch stays: the worker may read it again (its value is no secret).
            seal_process_environ(keep=("RAY_AUTH_MODE",))
        self.name = name
        self._heartbeat_s = heartbeat_s
        self._token: trio.lowlevel.TrioToken | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._nursery: trio.Nursery | None = None
        self._starting: asyncio.Future[None] | None = None
        self._ended: str | None = None
        self._lost: str | None = None
        self._lost_sent = threading.Event()
        self._calls: dict[str, _CallState] = {}
        self._open: set[str] = set()  # calls whose final batch is not queued yet
        self._early: dict[str, list[tuple[str, str, str | None]]] = {}
        self._outbox = _Outbox(max_pending)
        self._configs: dict[str, RunConfig] = {}
        self._runs: dict[str, _RunHere] = {}  # by run id
        self._admit: collections.deque[_CallState] = collections.deque()  # submitted, not started
        self._admitting = False
        # What the worker imported (Ray, the runtime: most of its heap) is there for good: the
        # garbage collector need not walk it on every collection of a busy subtree.
        gc.freeze()
        # Many short subtrees allocate fast: collect the young generation less often.
        gc.set_threshold(20_000, 20, 20)
        if watch_node:
            threading.Thread(
                target=_watch_parent, args=(self._node_lost,), name="trio-agents-node-watch",
                daemon=True,
            ).start()

    # -- the guest loop ---------------------------------------------------------------------
    async def _ensure_trio(self) -> trio.lowlevel.TrioToken:
        if self._ended is not None:
            raise RuntimeError(f"ray host {self.name}: its trio loop ended: {self._ended}")
        if self._token is not None:
            return self._token
        loop = asyncio.get_running_loop()
        self._loop = loop
        if self._starting is None:
            self._starting = loop.create_future()
            trio.lowlevel.start_guest_run(
                self._trio_main,
                self._starting,
                run_sync_soon_threadsafe=loop.call_soon_threadsafe,
                run_sync_soon_not_threadsafe=loop.call_soon,
                done_callback=self._trio_done,
                host_uses_signal_set_wakeup_fd=False,
            )
        await asyncio.shield(self._starting)
        return self._started_token()

    def _started_token(self) -> trio.lowlevel.TrioToken:
        # Set by _trio_main before it resolves the start future (a method call, so mypy does
        # not keep the ``None`` it narrowed to before the await).
        assert self._token is not None
        return self._token

    async def _trio_main(self, started: asyncio.Future[None]) -> None:
        self._token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            started.set_result(None)
            await trio.sleep_forever()

    def _trio_done(self, outcome: Any) -> None:
        # Only a bug gets here (the host nursery never ends on its own): every open subtree
        # ends with an error the parent reports, and later calls are refused.
        self._ended = repr(outcome)
        _log.error("trio host loop ended", host=self.name, outcome=self._ended)
        self._fail_open(f"worker died: ray host {self.name}: its trio loop ended")

    def _fail_open(self, error: str) -> None:
        for call_id in list(self._open):
            self._outbox.finish(call_id, None, error)
        self._open.clear()

    # -- the node watch (asyncio side) --------------------------------------------------------
    def _node_lost(self, what: str) -> None:
        """Called on the watch thread when this worker's raylet is gone; never returns."""
        _log.error("node lost", host=self.name, reason=what)
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to tell
                loop.call_soon_threadsafe(self._report_lost, what)
                self._lost_sent.wait(_LOST_REPORT_S)
        # Exiting closes the bash warden's pipe: it stops every bash process group at once.
        os._exit(70)

    def _report_lost(self, what: str) -> None:
        self._lost = f"node lost: ray host {self.name} on {socket.gethostname()}: {what}"
        # What the subtrees do from now on (the abort below ends them ``cancelled``) is not
        # reported: the parent ends them ``failed``, naming the loss.
        self._outbox.close()
        self._outbox.wake()  # the channel sends the news
        if self._token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(self._abort_all)

    def _abort_all(self) -> None:
        for state in self._calls.values():
            state.scope.cancel(reason="the node was lost")

    # -- calls --------------------------------------------------------------------------------
    async def ping(self) -> str:
        """Start the trio loop if needed; return where this host runs."""
        await self._ensure_trio()
        return f"{self.name} pid {os.getpid()} on {socket.gethostname()}"

    async def check(self, workspace: str) -> str | None:
        """Start the trio loop; ``None`` if this host can serve the run, else why not."""
        await self._ensure_trio()
        try:
            _check_workspace(workspace)
        except ConfigError as exc:
            return str(exc)
        return None

    async def channel(self) -> Any:
        """Yield :class:`Envelope` objects for as long as the host lives (a streaming call).

        Cancellation: a Ray-level cancel ends the stream; the subtrees go on (the parent
        aborts them with :meth:`abort`).
        """
        await self._ensure_trio()
        while True:
            items = await self._outbox.take(self._heartbeat_s)
            envelope = _envelope(items, self._lost)
            if self._lost is not None:
                yield envelope
                await asyncio.sleep(0.1)  # Ray sends the item before the worker exits
                self._lost_sent.set()
                return
            yield envelope

    async def submit(
        self, calls: tuple[SubtreeCall, ...] | bytes, config: tuple[Any, ...] = ()
    ) -> None:
        """Start *calls*; their batches leave through :meth:`channel`.

        Args:
            calls: the calls, or :func:`pack_calls` of them.
            config: ``(settings,)``: the run's :class:`RunConfig` or a Ray object reference to
                one (in a tuple, so Ray passes the reference as it is), for every call whose
                own ``config`` is ``None``.
        """
        token = await self._ensure_trio()
        shared = config[0] if config else None
        if isinstance(calls, bytes):
            calls = unpack_calls(calls)
        starts = []
        for call in calls:
            try:
                resolved = await self._config(call.config if call.config is not None else shared)
            except Exception as exc:  # the settings cannot be read here: fail that call only
                self._outbox.finish(
                    call.call_id, None, f"ray host {self.name}: cannot read the run's "
                    f"settings: {type(exc).__name__}: {exc}",
                )
                continue
            self._outbox.interval_s = resolved.batch_interval_s
            self._outbox.batch_max = resolved.batch_max
            self._open.add(call.call_id)
            starts.append((call, resolved))
        # One hand-over to the trio loop for the whole submit (each is a wake-up of its own).
        token.run_sync_soon(self._start_calls, starts)

    async def _config(self, ref: Any) -> RunConfig:
        if isinstance(ref, RunConfig):
            return ref
        if ref is None:
            raise ConfigError("no settings came with the call")
        key = ref.hex()
        config = self._configs.get(key)
        if config is None:
            config = await ref
            if len(self._configs) >= 8:  # one per run; a host serves one run
                self._configs.pop(next(iter(self._configs)))
            self._configs[key] = config
        return config

    async def cancel(self, call_id: str, node_id: str, reason: str, by: str | None) -> None:
        """Cancel node *node_id* of subtree *call_id* (an agent, a tool call, or the boundary:
        the parent's agent call). Unknown or finished nodes are ignored."""
        token = await self._ensure_trio()
        token.run_sync_soon(self._cancel_in_trio, call_id, node_id, reason, by)

    async def answer(self, call_id: str, question_id: str, granted: bool, reason: str) -> None:
        """Deliver the parent's answer to a permission question of subtree *call_id*."""
        token = await self._ensure_trio()
        token.run_sync_soon(self._answer_in_trio, call_id, question_id, granted, reason)

    async def limiter_grant(self, grants: tuple[tuple[str, int], ...]) -> None:
        """The driver's limiter grants these ``(call_id, ticket)`` their turns."""
        token = await self._ensure_trio()
        token.run_sync_soon(self._grant_in_trio, grants)

    async def message(self, call_id: str, agent_id: str, text: str) -> None:
        """Queue *text* for agent *agent_id* of subtree *call_id* (``Runtime.send_message``)."""
        token = await self._ensure_trio()
        token.run_sync_soon(self._message_in_trio, call_id, agent_id, text)

    async def abort(self, call_id: str, reason: str) -> None:
        """Stop subtree *call_id* now (the parent no longer waits for its events)."""
        token = await self._ensure_trio()
        token.run_sync_soon(self._abort_call, call_id, reason)

    # -- trio side ----------------------------------------------------------------------------
    def _start_calls(self, starts: list[tuple[SubtreeCall, RunConfig]]) -> None:
        for call, config in starts:
            self._start_call(call, config)

    def _start_call(self, call: SubtreeCall, config: RunConfig) -> None:
        assert self._nursery is not None
        here = self._runs.get(config.run_id)
        if here is None:
            here = self._runs[config.run_id] = _RunHere(BudgetLayer(self._budget_cancel))
            here.secrets.enter_context(config.run_secrets().in_logs())
            if config.provider.shared_limiter:
                here.limiter = _remote_limiter(config.provider, self._outbox)
            self._nursery.start_soon(_run_here, here, config)
        here.users += 1
        state = _CallState(call, config, here.layer, here)
        state.early.extend(self._early.pop(call.call_id, ()))
        # Known to the control calls at once (a cancel, an abort or a message finds it), run
        # when the admitter gets to it.
        self._calls[call.call_id] = state
        self._admit.append(state)
        if not self._admitting:
            self._admitting = True
            self._nursery.start_soon(self._admitter)

    async def _admitter(self) -> None:
        """Start the submitted subtrees, ``_ADMIT_PER_TICK`` per scheduling round."""
        assert self._nursery is not None
        try:
            while self._admit:
                for _ in range(min(_ADMIT_PER_TICK, len(self._admit))):
                    state = self._admit.popleft()
                    self._nursery.start_soon(
                        self._serve_call, state, name=f"subtree {state.call.call_id}"
                    )
                await trio.lowlevel.checkpoint()
        finally:
            self._admitting = False

    def _budget_cancel(self, agent_id: str, reason: str) -> bool:
        """A shared budget layer's cancel: in whichever subtree the agent runs (a rare event,
        so a walk over the live subtrees is fine)."""
        for state in list(self._calls.values()):
            if state.run is not None and agent_id in state.registry:
                return cancel_node(state.run, agent_id, reason, by="budget")
        return False

    def _release_run(self, run_id: str) -> None:
        here = self._runs.get(run_id)
        if here is not None:
            here.users -= 1
            if here.users <= 0:
                here.scope.cancel(reason="no subtree of the run is left here")
                here.secrets.close()
                del self._runs[run_id]

    def _cancel_in_trio(self, call_id: str, node_id: str, reason: str, by: str | None) -> None:
        state = self._calls.get(call_id)
        if state is not None:
            state.cancel(node_id, reason, by)
        elif len(self._early) < 10_000:
            # Ray may run this control call before the submit it refers to; it is applied
            # when that call starts (or forgotten, if it had already ended).
            self._early.setdefault(call_id, []).append((node_id, reason, by))

    def _answer_in_trio(self, call_id: str, question_id: str, granted: bool, reason: str) -> None:
        state = self._calls.get(call_id)
        if state is not None and state.broker is not None:
            state.broker.answer(question_id, granted, reason)

    def _grant_in_trio(self, grants: tuple[tuple[str, int], ...]) -> None:
        for call_id, number in grants:
            state = self._calls.get(call_id)
            if state is not None and state.here.limiter is not None:
                state.here.limiter.granted(number)

    def _message_in_trio(self, call_id: str, agent_id: str, text: str) -> None:
        state = self._calls.get(call_id)
        mailbox = state.run.scheduler.inbox(agent_id) if state and state.run else None
        if mailbox is None:
            return  # it has finished: the parent counted the message as undelivered
        try:
            mailbox.send_nowait(text)
        except (trio.WouldBlock, trio.ClosedResourceError):
            # The parent keeps no more in flight than the mailbox holds; only a message racing
            # the agent's end gets here.
            _log.warning("message not delivered", host=self.name, agent_id=agent_id)

    def _abort_call(self, call_id: str, reason: str) -> None:
        state = self._calls.get(call_id)
        if state is not None:
            state.scope.cancel(reason=reason)

    async def _serve_call(self, state: _CallState) -> None:
        call = state.call
        # This task's and its agents' model calls ask the driver's limiter as this subtree's.
        CURRENT_CALL.set(call.call_id)
        outcome: AgentOutcome | None = None
        error: str | None = None
        try:
            with state.scope:
                outcome = await _run_root(state, self._outbox)
        except Exception as exc:  # one subtree's failure must never reach the host nursery
            error = f"ray host {self.name}: subtree {call.call_id} crashed: {exc!r}"
            _log.exception("subtree crashed", host=self.name, call_id=call.call_id)
        finally:
            self._calls.pop(call.call_id, None)
            self._release_run(state.config.run_id)
            if call.call_id in self._open:
                self._open.discard(call.call_id)
                self._outbox.finish(call.call_id, _without_history(outcome), error)


def _without_history(outcome: AgentOutcome | None) -> AgentOutcome | None:
    """*outcome* as the parent gets it: without the agent's history and system prompt.

    The parent's ``agent`` call reads a sub-agent's status, result, error and counts, never
    its history (only root agents' histories are kept: chats, ``Runtime.compact``), and the
    history was most of what a subtree's end cost to pickle and unpickle (bench/README.md).
    """
    if outcome is None:
        return None
    state = outcome.state
    return attrs.evolve(
        outcome,
        state=AgentState(
            agent_id=state.agent_id,
            name=state.name,
            depth=state.depth,
            turns=state.turns,
            input_tokens=state.input_tokens,
            output_tokens=state.output_tokens,
            continue_reason=state.continue_reason,
        ),
    )


def _envelope(items: list[tuple[str, Batch]], lost: str | None) -> Envelope:
    if not items:
        return Envelope(lost=lost)
    try:
        return Envelope(data=pack_items(items), lost=lost)
    except Exception:  # an unpicklable value in an event or an outcome: let Ray try its way
        return Envelope(items=tuple(items), lost=lost)


def _watch_parent(on_lost: Callable[[str], None]) -> None:
    """Wait for the process that started this one (a Ray worker's raylet) to end; then call
    *on_lost*. A pidfd where Linux has them (woken at once), else a poll of the parent pid."""
    ppid = os.getppid()
    if ppid <= 1:
        return  # already an orphan: nothing to watch
    fd: int | None = None
    with contextlib.suppress(AttributeError, OSError):
        fd = os.pidfd_open(ppid)
    if fd is not None and os.getppid() == ppid:
        select.select([fd], [], [])
    else:
        while os.getppid() == ppid:
            time.sleep(0.2)
    on_lost(f"its raylet (pid {ppid}) is gone")


# -- running one subtree ----------------------------------------------------------------------


async def _run_here(here: _RunHere, config: RunConfig) -> None:
    """The task of one run on this host: opens an ``http`` run's provider (its client closed
    when the run's last subtree here has ended) and runs the budget layer."""
    with here.scope:
        try:
            async with AsyncExitStack() as stack:
                if config.provider.kind == "http":
                    try:
                        here.provider = await _open_provider(
                            stack, config.provider, "", config.run_secrets(), here.limiter
                        )
                    except AgentsError as exc:
                        here.error = str(exc)
                here.ready.set()
                await here.layer.run()
        finally:
            here.ready.set()


def _remote_limiter(config: ProviderConfig, outbox: _Outbox) -> RemoteLimiter:
    """A run's link to the driver's limiter: its messages go in the asking subtree's stream."""
    def send(call_id: str, event: Event, urgent: bool) -> None:
        outbox.add(call_id, event)
        if urgent:
            outbox.wake()

    return RemoteLimiter(config.shared_limiter or config.name, send)


async def _run_root(state: _CallState, outbox: _Outbox) -> AgentOutcome | None:
    """Build the subtree's run context (its own bus, registry, broker and ``max_parallel``
    limiter; the run's shared budget layer) and run its root in the calling task, its events
    going to *outbox* as they are emitted. Runs inside ``state.scope``."""
    config = state.config
    bus = _subtree_bus(config.run_id, config.run_secrets(), outbox, state.call.call_id)
    try:
        if config.provider.kind != "http":
            try:
                workspace = _workspace_for(config, state.call.spec)
                provider = _plain_provider(config.provider, state.call.id_prefix)
            except AgentsError as exc:
                return await _fail_root(bus, state.call.spec, str(exc))
            # Cancelling the boundary cancels the subtree's own scope: one scope fewer.
            return await _run_agent(state, bus, provider, workspace, None)
        # The host's provider of the run (one client and pool for its subtrees), opened by the
        # run's task here: entering opens nothing on the network, so this wait is short.
        await state.here.ready.wait()
        shared = state.here.provider
        if shared is None:
            error = state.here.error or "the run's provider was closed"
            return await _fail_root(bus, state.call.spec, error)
        try:
            workspace = _workspace_for(config, state.call.spec)
        except AgentsError as exc:
            return await _fail_root(bus, state.call.spec, str(exc))
        return await _run_agent(state, bus, shared, workspace, None)
    finally:
        bus.close()


async def _run_agent(
    state: _CallState,
    bus: EventBus,
    provider: Provider,
    workspace: Path,
    boundary: trio.CancelScope | None,
) -> AgentOutcome | None:
    """Run the subtree's root agent with *boundary* (``None``: ``state.scope``, which the
    caller has entered) registered as the parent's agent call."""
    call, config = state.call, state.config
    registry = state.registry
    broker = _ForwardingBroker(bus, config.policy, call.id_prefix)
    state.broker = broker
    types, tools = config.shared()
    run = new_run_context(
        run_id=config.run_id,
        bus=bus,
        provider=provider,
        model=config.model or getattr(provider, "model", None) or "scripted",
        agent_types=types,
        tools=tools,
        tool_limits=config.tool_limits,
        limits=config.limits_for(call.max_agents),
        workspace=workspace,
        env=config.env_copy(),
        secrets=bus.secrets,
        broker=broker,
        log=LazyLogger(_log, run_id=config.run_id, call_id=call.call_id),
        registry=registry,
        id_prefix=call.id_prefix,
        system_prompt=config.system_prompt,
        sandbox=config.sandbox,
        budget=state.budget,
        type_setups=config.type_setups(),
        prices=config.prices,
    )
    state.run = run
    registry.register(state.boundary_id, boundary or state.scope)
    try:
        for _node_id, reason, by in state.early:
            # A cancel that came before anything ran here cancels the whole subtree.
            registry.cancel(state.boundary_id, reason, by=by)
        # The agent runs in this task (the subtree's own), with its own scope, nursery and
        # mailbox as ever: no task or nursery more per subtree.
        if boundary is None:
            state.outcome = await run_agent_actor(run, call.spec, own_task=True)
        else:
            with boundary:
                state.outcome = await run_agent_actor(run, call.spec, own_task=True)
    finally:
        registry.unregister(state.boundary_id)
    return state.outcome


def _workspace_for(config: RunConfig, spec: AgentSpec) -> Path:
    """The run's workspace here; for a subtree in a worktree (docs/worktrees.md), checked that
    this host sees the worktree the driver has just made: its folder is new, so seeing it
    means sharing the driver's file system, not only a folder of the same name."""
    workspace = config.workspace_path()
    if spec.workspace is not None and not (spec.workspace / ".git").exists():
        raise ConfigError(
            f"agent type {spec.agent_type.name!r} has isolation = \"worktree\", but Ray worker "
            f"{socket.gethostname()} does not see its worktree {spec.workspace}: a worktree "
            "type runs on Ray only where the nodes share the workspace's file system "
            "(see docs/worktrees.md)"
        )
    return workspace


def _check_workspace(path: str) -> Path:
    ws = Path(path)
    if not ws.is_dir():
        raise ConfigError(
            f"workspace {path!r} is not reachable on Ray worker {socket.gethostname()}: "
            "the workspace must be on a file system every node mounts at the same path "
            "(see docs/cluster.md)"
        )
    return ws


def _plain_provider(config: ProviderConfig, prefix: str) -> Provider:
    """The provider of a ``scripted`` or ``object`` config (nothing to open or close)."""
    if config.kind == "scripted":
        if config.scenario is None:
            raise ConfigError("the scripted provider needs a scenario")
        return ScriptedProvider(config.scenario, id_prefix=f"{prefix}tu-")
    provider: Provider = config.provider
    return provider


async def _open_provider(
    stack: AsyncExitStack,
    config: ProviderConfig,
    prefix: str,
    secrets: Secrets,
    limiter: RemoteLimiter | None = None,
) -> Provider:
    if config.kind != "http":
        return _plain_provider(config, prefix)
    from runtime.providers import open_provider  # httpx only when needed

    env: dict[str, str] = {}
    if config.url_var and config.base_url:
        env[config.url_var] = config.base_url
    if config.key_var:
        key = config.key or run_environ().get(config.key_var)
        if key:
            env[config.key_var] = key
    return await stack.enter_async_context(
        open_provider(
            config.name,
            model=config.model,
            env=env,
            max_retries=config.max_retries,
            call_deadline_s=config.call_deadline_s,
            secrets=secrets,
            limiter=limiter,
        )
    )


async def _fail_root(bus: EventBus, spec: AgentSpec, error: str) -> AgentOutcome:
    """Report a root agent that could not even start here: started, then failed."""
    await bus.emit(
        started_event(spec)
    )
    with trio.move_on_after(_FINISH_GRACE_S, shield=True):
        await bus.emit(
            AgentFinished(
                agent_id=spec.agent_id,
                parent_tool_use_id=spec.parent_tool_use_id,
                status="failed",
                result=None,
                error=error,
                turns=0,
                input_tokens=0,
                output_tokens=0,
                duration_s=0.0,
            )
        )
    return failed_outcome(spec, error)


def failed_outcome(spec: AgentSpec, error: str, *, status: AgentStatus = "failed") -> AgentOutcome:
    """An outcome for a root agent whose own report never came (or that never ran)."""
    state = AgentState(
        agent_id=spec.agent_id,
        name=spec.agent_type.name,
        depth=spec.depth,
        system=spec.agent_type.system,
        messages=[*spec.history, Message(role="user", content=(TextBlock(text=spec.prompt),))],
    )
    return AgentOutcome(
        agent_id=spec.agent_id,
        name=spec.agent_type.name,
        status=status,
        result=None,
        error=error,
        turns=0,
        input_tokens=0,
        output_tokens=0,
        duration_s=0.0,
        state=state,
    )
