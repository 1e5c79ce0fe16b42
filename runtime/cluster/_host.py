"""The worker side of the ``ray`` placement: one host actor per worker process runs subtrees.

Nothing here imports Ray: :class:`RayHost` is a plain class that ``_placement`` turns into
an async Ray actor, so this module is also what the worker process imports when it unpickles the
actor class and the calls it receives.

What runs on the worker::

    Ray worker process
    └── asyncio loop (Ray's, for the async actor)
        ├── RayHost.run_subtree(call)      one streaming actor call per subtree: yields Batches
        ├── RayHost.cancel / .answer       small control calls
        └── trio loop in guest mode        started on the first call, lives as long as the actor
            └── host nursery
                └── _serve_call            one per subtree, its own cancel scope; catches Exception
                    ├── _ship_events       remote bus (block subscription) → Batch → outbox
                    ├── BudgetLayer.run    budgets of agents started on this worker
                    └── boundary scope     registered as the parent's agent-call tool_use_id
                        └── run_agent_actor(remote run, spec)   the UNCHANGED agent loop

A subtree runs the unchanged agent code on a :class:`RunContext` of its own (its own bus,
registry, budget layer and broker). Its events are batched every ``batch_interval_s`` or
``batch_max`` events and yielded as :class:`Batch` objects; the parent forwards them into the
run's bus, where ``seq`` is assigned. Agent ids made here carry the call's prefix
(``h1.7.agent-3``), and so do the scripted provider's tool-call ids, so every id is unique in
the run. Sub-agents started by this subtree run here too (their placement is forced ``local``).

Cancellation: :meth:`RayHost.cancel` cancels one node of one subtree (``by`` and ``reason``
kept, so a budget cancel still ends ``budget_exceeded``); cancelling the boundary node is "the
parent's agent call was cancelled". The subtree's ``cancelled`` events then flow back like any
others before the stream ends. A Ray-level cancel of the streaming call (``ray.cancel``) aborts
the subtree at once: Ray drops whatever the generator yields after that, so the parent only uses
it as a last resort. An exception in one subtree ends that subtree ``failed``; it never reaches
the host nursery or the other subtrees.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import socket
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import attrs
import structlog
import trio

from runtime.actors import Registry
from runtime.core._agent import AgentOutcome, AgentSpec
from runtime.core._agent_types import AgentType, AgentTypes
from runtime.core._approvals import PermissionBroker
from runtime.core._bus import EventBus, Subscription
from runtime.core._context import RunContext, SystemPromptBuilder, new_run_context
from runtime.core._errors import AgentsError, ConfigError
from runtime.core._events import AgentFinished, AgentStarted, AgentStatus, Event
from runtime.core._limits import Limits
from runtime.core._loop import run_agent_actor
from runtime.core._messages import AgentState, Message, TextBlock
from runtime.core._provider import Provider
from runtime.core._sandbox import Sandbox
from runtime.providers._scenario import Scenario
from runtime.providers._scripted import ScriptedProvider

if TYPE_CHECKING:
    from runtime.core._permissions import PermissionPolicy
    from tools import Tool, ToolLimits

_log = structlog.get_logger("trio_agents.ray_host")

# How long a subtree's end may take to be reported when its stream is being torn down.
_FINISH_GRACE_S = 10.0


# -- what travels between the parent and the host ---------------------------------------------


@attrs.frozen(kw_only=True)
class ProviderConfig:
    """How the worker gets a provider: settings travel, keys come from the worker's environment.

    Attributes:
        kind: ``scripted`` (the scenario travels), ``http`` (``openai``/``anthropic``, opened
            on the worker with :func:`~runtime.providers.open_provider`; the key is read from
            *key_var* in the worker's environment, which Ray's ``runtime_env`` filled), or
            ``object`` (a picklable provider instance, sent as is).
    """

    kind: Literal["scripted", "http", "object"]
    name: str
    scenario: Scenario | None = None
    model: str | None = None
    base_url: str | None = None
    url_var: str | None = None
    key_var: str | None = None
    max_retries: int = 4
    call_deadline_s: float | None = 600.0
    provider: Any = None


@attrs.frozen(kw_only=True)
class RunConfig:
    """What every subtree of one run shares (no secrets). Sent once per host: the parent puts
    it in Ray's object store and each call carries the reference, which the host resolves once
    and keeps (unpickling the tools, agent types and scenario on every call would dominate)."""

    run_id: str
    agent_types: tuple[AgentType, ...]
    provider: ProviderConfig
    tools: tuple[Tool, ...]
    tool_limits: ToolLimits
    limits: Limits
    workspace: str
    env: Mapping[str, str]
    policy: PermissionPolicy
    batch_interval_s: float = 0.01
    batch_max: int = 512
    system_prompt: SystemPromptBuilder | None = None
    sandbox: Sandbox | None = None


@attrs.frozen(kw_only=True)
class SubtreeCall:
    """One remote subtree.

    Attributes:
        config: the run's :class:`RunConfig`, or a Ray object reference to one.
        max_agents: how many more agents the run may start (the run-wide ``max_agents``).
    """

    call_id: str
    id_prefix: str
    spec: AgentSpec
    config: Any
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


@attrs.define(eq=False, kw_only=True)
class _RemoteRunContext(RunContext):
    """A run context whose new agent ids carry the call's prefix (unique in the whole run)."""

    id_prefix: str = ""

    def new_agent_id(self) -> str:
        return f"{self.id_prefix}{super().new_agent_id()}"


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
    ) -> tuple[bool, str]:
        """Decide here when the policy can; else wait for the parent's answer.

        Cancellation: a checkpoint while waiting; a cancelled wait tells the parent the
        question is withdrawn (before the call's ``tool_finished``).
        """
        decision = self.policy.decide(tool, args)
        if decision.action != "ask":
            return decision.action == "allow", decision.reason
        qid = f"{self._prefix}q-{next(self._qids)}"
        answer = _Answer()
        self._waiting[qid] = answer
        try:
            await self.bus.emit(
                PermissionAsked,
                agent_id=agent_id,
                parent_tool_use_id=parent_tool_use_id,
                question_id=qid,
                tool_use_id=tool_use_id,
                name=tool.name,
                input=dict(args),
                summary=summary,
            )
            await answer.done.wait()
            return answer.granted, answer.reason
        finally:
            self._waiting.pop(qid, None)
            if not answer.done.is_set():
                with trio.move_on_after(_FINISH_GRACE_S, shield=True):
                    await self.bus.emit(
                        PermissionWithdrawn,
                        agent_id=agent_id,
                        parent_tool_use_id=parent_tool_use_id,
                        question_id=qid,
                    )

    def answer(self, question_id: str, granted: bool, reason: str) -> bool:
        waiting = self._waiting.get(question_id)
        if waiting is None or waiting.done.is_set():
            return False
        waiting.granted, waiting.reason = granted, reason
        waiting.done.set()
        return True


@attrs.define(eq=False)
class _CallState:
    """One subtree on this host, as the control calls see it."""

    call: SubtreeCall
    config: RunConfig
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    registry: Registry = attrs.Factory(Registry)
    broker: _ForwardingBroker | None = None
    # The parent's agent-call tool_use_id: cancelling it is "cancelled from above".
    boundary_id: str = attrs.field(
        default=attrs.Factory(
            lambda self: self.call.spec.parent_tool_use_id or f"{self.call.call_id}.boundary",
            takes_self=True,
        )
    )
    # Cancels that came before the node they name was registered here.
    early: list[tuple[str, str, str | None]] = attrs.Factory(list)
    # The root's outcome, once its supervisor has reported it.
    outcome: AgentOutcome | None = None

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
    """The hand-off from the subtree's trio tasks to the asyncio generator Ray streams from.

    Both sides run on the asyncio loop's thread (guest mode runs trio's tasks there), so plain
    data structures do; each side wakes the other through its own loop's primitives.
    """

    def __init__(self, token: trio.lowlevel.TrioToken, max_pending: int) -> None:
        self._token = token
        self._max = max_pending
        self._items: deque[Batch] = deque()
        self._ready = asyncio.Event()
        self._space: trio.Event | None = None

    # trio side
    async def put(self, batch: Batch) -> None:
        """Queue a batch, waiting while *max_pending* are unsent (backpressure from Ray)."""
        while len(self._items) >= self._max:
            self._space = trio.Event()
            await self._space.wait()
        self.put_nowait(batch)

    def put_nowait(self, batch: Batch) -> None:
        self._items.append(batch)
        self._ready.set()

    def _wake(self) -> None:
        if self._space is not None:
            self._space.set()

    # asyncio side
    async def get(self) -> Batch:
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        batch = self._items.popleft()
        if self._space is not None:
            self._token.run_sync_soon(self._wake)
        return batch


# -- the actor --------------------------------------------------------------------------------


class RayHost:
    """Hosts one trio loop (guest mode) in a Ray async actor and runs subtrees in it.

    Args:
        name: this host's name in the run (``h1``), for logs and errors.
        max_pending: batches a subtree may have queued for Ray before its agents wait.
    """

    def __init__(self, name: str, max_pending: int = 8) -> None:
        self.name = name
        self._max_pending = max_pending
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._starting: asyncio.Future[None] | None = None
        self._ended: str | None = None
        self._calls: dict[str, _CallState] = {}
        self._early: dict[str, list[tuple[str, str, str | None]]] = {}
        self._outboxes: dict[str, _Outbox] = {}
        self._configs: dict[str, RunConfig] = {}

    # -- the guest loop ---------------------------------------------------------------------
    async def _ensure_trio(self) -> trio.lowlevel.TrioToken:
        if self._ended is not None:
            raise RuntimeError(f"ray host {self.name}: its trio loop ended: {self._ended}")
        if self._token is not None:
            return self._token
        loop = asyncio.get_running_loop()
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
        # Only a bug gets here (the host nursery never ends on its own): every open stream ends
        # with an error the parent reports, and later calls are refused.
        self._ended = repr(outcome)
        _log.error("trio host loop ended", host=self.name, outcome=self._ended)
        for call_id, outbox in list(self._outboxes.items()):
            outbox.put_nowait(Batch(final=True, error=f"ray host {self.name}: trio loop ended"))
            self._outboxes.pop(call_id, None)

    # -- calls --------------------------------------------------------------------------------
    async def ping(self) -> str:
        """Start the trio loop if needed; return where this host runs."""
        await self._ensure_trio()
        return f"{self.name} pid {os.getpid()} on {socket.gethostname()}"

    async def run_subtree(self, call: SubtreeCall) -> Any:
        """Run one subtree; yield :class:`Batch` objects until its root agent has finished.

        An async generator, called as a streaming actor call.

        Cancellation: a Ray-level cancel (``ray.cancel``) raises :class:`asyncio.CancelledError`
        here; the subtree's scope is then cancelled and nothing more is streamed.
        """
        token = await self._ensure_trio()
        config = await self._config(call)
        outbox = _Outbox(token, self._max_pending)
        self._outboxes[call.call_id] = outbox
        token.run_sync_soon(self._start_call, call, config, outbox)
        finished = False
        try:
            while True:
                batch = await outbox.get()
                yield batch
                if batch.final:
                    finished = True
                    return
        finally:
            self._outboxes.pop(call.call_id, None)
            if not finished and self._ended is None:
                # Cancelled through Ray, or the consumer went away: stop the subtree.
                token.run_sync_soon(self._abort_call, call.call_id)

    async def _config(self, call: SubtreeCall) -> RunConfig:
        if isinstance(call.config, RunConfig):
            return call.config
        key = call.config.hex()
        config = self._configs.get(key)
        if config is None:
            config = await call.config
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

    # -- trio side ----------------------------------------------------------------------------
    def _start_call(self, call: SubtreeCall, config: RunConfig, outbox: _Outbox) -> None:
        assert self._nursery is not None
        state = _CallState(call, config)
        state.early.extend(self._early.pop(call.call_id, ()))
        self._calls[call.call_id] = state
        self._nursery.start_soon(self._serve_call, state, outbox, name=f"subtree {call.call_id}")

    def _cancel_in_trio(self, call_id: str, node_id: str, reason: str, by: str | None) -> None:
        state = self._calls.get(call_id)
        if state is not None:
            state.cancel(node_id, reason, by)
        elif len(self._early) < 10_000:
            # Ray may run this control call before the stream call it refers to has started;
            # it is applied when that call starts (or forgotten, if it had already ended).
            self._early.setdefault(call_id, []).append((node_id, reason, by))

    def _answer_in_trio(self, call_id: str, question_id: str, granted: bool, reason: str) -> None:
        state = self._calls.get(call_id)
        if state is not None and state.broker is not None:
            state.broker.answer(question_id, granted, reason)

    def _abort_call(self, call_id: str) -> None:
        state = self._calls.get(call_id)
        if state is not None:
            state.scope.cancel(reason="the stream was cancelled through Ray")

    async def _serve_call(self, state: _CallState, outbox: _Outbox) -> None:
        call = state.call
        outcome: AgentOutcome | None = None
        error: str | None = None
        try:
            with state.scope:
                outcome = await _run_call(state, outbox)
        except Exception as exc:  # one subtree's failure must never reach the host nursery
            error = f"ray host {self.name}: subtree {call.call_id} crashed: {exc!r}"
            _log.exception("subtree crashed", host=self.name, call_id=call.call_id)
        finally:
            self._calls.pop(call.call_id, None)
            outbox.put_nowait(Batch(outcome=outcome, final=True, error=error))


# -- running one subtree ----------------------------------------------------------------------


async def _run_call(state: _CallState, outbox: _Outbox) -> AgentOutcome | None:
    """Run the subtree of *state*, shipping its events; return the root agent's outcome."""
    config = state.config
    bus = EventBus(config.run_id)
    # ``block``: agents wait for the shipper rather than buffering without bound.
    events = bus.subscribe(buffer=max(2 * config.batch_max, 64), policy="block")
    flush_now = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            _ship_events, events, outbox, flush_now, config.batch_interval_s, config.batch_max
        )
        try:
            return await _run_root(state, bus)
        finally:
            bus.close()
            flush_now.set()


async def _ship_events(
    events: Subscription,
    outbox: _Outbox,
    flush_now: trio.Event,
    interval_s: float,
    batch_max: int,
) -> None:
    """Batch the subtree's events: a batch leaves *interval_s* after its first event, when it
    holds *batch_max* events, or when the subtree has ended. Returns once the bus is closed and
    everything was shipped."""
    ended = False
    while not ended:
        try:
            first = await events.receive()
        except trio.EndOfChannel:
            return
        batch = [first]
        ended = _drain(events, batch, batch_max)
        if not ended and len(batch) < batch_max:
            # One timer per batch, not per event: the events emitted meanwhile wait in the
            # subscription (which makes the agents wait once it is full).
            with trio.move_on_after(interval_s):
                await flush_now.wait()
            ended = _drain(events, batch, batch_max)
        await outbox.put(Batch(events=tuple(batch)))


def _drain(events: Subscription, batch: list[Event], batch_max: int) -> bool:
    """Move what is buffered into *batch*; ``True`` once the stream has ended."""
    while len(batch) < batch_max:
        try:
            batch.append(events.receive_nowait())
        except trio.WouldBlock:
            return False
        except trio.EndOfChannel:
            return True
    return False


async def _run_root(state: _CallState, bus: EventBus) -> AgentOutcome | None:
    call, config = state.call, state.config
    spec = call.spec
    registry = state.registry
    async with AsyncExitStack() as stack:
        try:
            workspace = _check_workspace(config.workspace)
            provider = await _open_provider(stack, config.provider, call.id_prefix)
        except AgentsError as exc:
            return await _fail_root(bus, spec, str(exc))
        broker = _ForwardingBroker(bus, config.policy, call.id_prefix)
        state.broker = broker

        types = AgentTypes(attrs.evolve(t, placement="local") for t in config.agent_types)
        run = new_run_context(
            run_id=config.run_id,
            bus=bus,
            provider=provider,
            model=getattr(provider, "model", None) or "scripted",
            agent_types=types,
            tools={t.name: t for t in config.tools},
            tool_limits=config.tool_limits,
            limits=attrs.evolve(config.limits, max_agents=call.max_agents),
            workspace=workspace,
            env=dict(config.env),
            secrets=_secret_values(),
            broker=broker,
            log=_log.bind(run_id=config.run_id, call_id=call.call_id),
            registry=registry,
            context_class=_RemoteRunContext,
            id_prefix=call.id_prefix,
            system_prompt=config.system_prompt,
            sandbox=config.sandbox,
        )
        boundary = trio.CancelScope()
        with registry.registered(state.boundary_id, boundary):
            for _node_id, reason, by in state.early:
                # A cancel that came before anything ran here cancels the whole subtree.
                registry.cancel(state.boundary_id, reason, by=by)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run.budget.run)
                with boundary:
                    state.outcome = await run_agent_actor(run, spec)
                nursery.cancel_scope.cancel(reason="the subtree has finished")
    return state.outcome


def _check_workspace(path: str) -> Path:
    ws = Path(path)
    if not ws.is_dir():
        raise ConfigError(
            f"workspace {path!r} is not reachable on Ray worker {socket.gethostname()}: "
            "the workspace must be on a file system every node mounts at the same path "
            "(see docs/cluster.md)"
        )
    return ws


async def _open_provider(stack: AsyncExitStack, config: ProviderConfig, prefix: str) -> Provider:
    if config.kind == "scripted":
        if config.scenario is None:
            raise ConfigError("the scripted provider needs a scenario")
        return ScriptedProvider(config.scenario, id_prefix=f"{prefix}tu-")
    if config.kind == "object":
        provider: Provider = config.provider
        return provider
    from runtime.providers import open_provider  # httpx only when needed

    env: dict[str, str] = {}
    if config.url_var and config.base_url:
        env[config.url_var] = config.base_url
    if config.key_var and os.environ.get(config.key_var):
        env[config.key_var] = os.environ[config.key_var]
    return await stack.enter_async_context(
        open_provider(
            config.name,
            model=config.model,
            env=env,
            max_retries=config.max_retries,
            call_deadline_s=config.call_deadline_s,
        )
    )


@functools.cache
def _secret_values() -> tuple[str, ...]:
    # The worker's environment is fixed for its life (keys come from Ray's runtime_env).
    from runtime.core._secrets import secret_values

    return tuple(secret_values(os.environ))


async def _fail_root(bus: EventBus, spec: AgentSpec, error: str) -> AgentOutcome:
    """Report a root agent that could not even start here: started, then failed."""
    emit: Callable[..., Any] = bus.emit
    await emit(
        AgentStarted,
        agent_id=spec.agent_id,
        parent_tool_use_id=spec.parent_tool_use_id,
        name=spec.agent_type.name,
        parent_agent_id=spec.parent_agent_id,
        depth=spec.depth,
        prompt=spec.prompt,
    )
    with trio.move_on_after(_FINISH_GRACE_S, shield=True):
        await emit(
            AgentFinished,
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
