"""The ``ray`` placement: sub-agent subtrees run on a Ray cluster with the same events, tree and
cancellation as local ones.

This is the parent side (the process that runs :func:`~runtime.open_runtime`); the worker side
is :mod:`runtime.cluster._host`. What runs where::

    parent process (trio)                          Ray worker process (one host actor)
    ---------------------                          -----------------------------------
    agent tool call (local)                        RayHost (async actor, trio in guest mode)
    └── RayPlacement.run_subtree ── queued ──┐     └── _serve_call: the UNCHANGED agent loop
                                             ▼
    per host: the submitter  ── submit(calls) ───▶  (many subtrees per actor call)
              the reader     ◀── Envelopes ──────  one streaming call: every subtree's batches
                  └── batches → run.bus.forward     (and a heartbeat when there is nothing)
    registry proxies of remote nodes ────────────▶  RayHost.cancel (control call)
    permission questions → run.broker ───────────▶  RayHost.answer (control call)
    the pool keeper: ray.nodes() every refresh_s     hosts on new nodes, none on gone ones

    asyncio bridge thread: the one place this process awaits Ray (ray.init runs there too)

**The pool**: by default one host actor per node that has CPUs (``hosts_per_node``, or one per
``cpus_per_host`` CPUs), pinned there with Ray's node affinity (``spread``), or hosts on one
node only (``pack``: this machine's node when it has CPUs). The keeper reads the node list every
``refresh_s`` while the placement is in use: a new node gets its hosts, a node that left takes
its hosts out of the pool. A new host first checks that it sees the workspace; one that does not
never enters the pool (and its node is not asked again). Each subtree goes to the least loaded
ready host whose node matches its agent type's ``ray_resources`` and ``ray_labels``.

**Transport**: a host's subtrees share one streaming call (the channel) and one submit per
batch of starts, so the Ray cost of a subtree is a share of a call, not a call. A host's reader
forwards each batch into the run's bus, where ``seq`` is assigned; it waits for room in the bus
first (a slow ``--json`` reader holds the hosts back, as it does local agents).

Awaiting Ray from trio: a single asyncio loop in a thread of its own (:class:`_Bridge`) awaits
the channels' items with Ray's own asyncio support and wakes the waiting trio task with
``TrioToken.run_sync_soon``: no thread per host or subtree, and no trio task ever blocks.

Cancellation: every remote node (each agent and tool call) is registered in ``run.registry``
with a :class:`_RemoteScope` proxy, so :meth:`Runtime.cancel` (the Ctrl+C picker, the control
socket, budgets) finds it; the proxy's ``cancel`` sends ``RayHost.cancel(node, reason, by)``.
When the local agent call itself is cancelled, its stream sends a cancel for the subtree's
boundary and waits (under a bounded shield) until the host reports the root's end, so the
subtree's ``cancelled`` events arrive before the call ends. Only if the host does not finish
within ``finish_grace_s`` does it abort the subtree on the host and synthesise the missing ends.

**Loss**: a host is lost when its channel fails (``worker died``, or ``node lost`` if the node's
raylet no longer takes a connection: Ray itself says "unavailable" for both), when it
says its node's raylet is gone, when its node leaves the node list, or when its channel is
silent for ``host_timeout_s`` (``node lost``). Every unfinished node of its subtrees then ends
``failed`` (tool calls ``error``) with that reason, in child-before-parent order, emitted here
so the invariants of docs/events.md#invariants hold; the host leaves the pool and later
subtrees go elsewhere.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import importlib.util
import itertools
import logging
import os
import sys
import threading
from collections import deque
from collections.abc import AsyncGenerator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from typing import Any, Literal, TypeVar, cast

import attrs
import trio

from runtime._logs import get_logger
from runtime.actors import Registry
from runtime.core import (
    AgentFinished,
    AgentOutcome,
    AgentSpec,
    AgentStarted,
    AgentStatus,
    AgentType,
    CancelBy,
    ConfigError,
    Event,
    Owner,
    RateLimited,
    RunContext,
    TextDelta,
    ThinkingDelta,
    ToolError,
    ToolFinished,
    ToolProgress,
    ToolStarted,
    ToolStatus,
    TurnFinished,
    UserMessage,
    add_costs,
    cancel_reason_of,
    cancelled_text,
    started_event,
)

from ._host import (
    Batch,
    Envelope,
    PermissionAsked,
    PermissionWithdrawn,
    ProviderConfig,
    RayHost,
    RunConfig,
    SubtreeCall,
    failed_outcome,
    pack_calls,
)
from ._limits import LimiterAsked, LimiterReport, LimiterService

__all__ = ["RayOptions", "RayPlacement", "open_ray_placement"]

T = TypeVar("T")
_log = get_logger("trio_agents.ray")

# Key variables of the HTTP providers, and their base-URL variables (runtime.providers).
_HTTP_WIRING: Mapping[str, tuple[str, str]] = {
    "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
}

Strategy = Literal["spread", "pack"]


def _positive(kind: type[int] | type[float]) -> Callable[[Any, Any, Any], None]:
    def check(_: Any, attribute: Any, value: Any) -> None:
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, (kind, int)) or value <= 0:
            raise ConfigError(f"ray.{attribute.name}: expected a number > 0, got {value!r}")

    return check


def _strategy(_: Any, attribute: Any, value: Any) -> None:
    if value not in ("spread", "pack"):
        raise ConfigError(f"ray.{attribute.name}: expected 'spread' or 'pack', got {value!r}")


@attrs.frozen(kw_only=True)
class RayOptions:
    """How the ``ray`` placement uses a cluster (CLI ``--ray-*``, ``open_runtime(ray=...)``, or
    a settings table through :meth:`from_mapping`).

    Attributes:
        address: the cluster (``host:port``, ``auto`` for the one this machine belongs to);
            default ``RAY_ADDRESS``; with neither, a private cluster on this machine.
        hosts_per_node: host actors on each node used (each is one worker process).
        cpus_per_host: instead, one host per this many CPUs of a node (at least one).
        strategy: ``spread`` (hosts on every node with CPUs) or ``pack`` (on one node).
        host_timeout_s: a host whose channel is silent this long is lost (it sends a heartbeat
            every second when idle).
        host_start_timeout_s: a host that has not answered this long after it was asked for
            leaves the pool.
        refresh_s: how often the node list is read while the placement is in use.
        num_cpus: CPUs of a private cluster (default: this machine's, at most 4).
        max_concurrency: concurrent actor calls per host.
        batch_interval_s, batch_max: a host's queued events leave the worker this long after
            the first of them, or once this many wait (or at once when a subtree ends).
    """

    address: str | None = None
    hosts_per_node: int = attrs.field(default=1, validator=_positive(int))
    cpus_per_host: float | None = attrs.field(default=None, validator=_positive(float))
    strategy: Strategy = attrs.field(default="spread", validator=_strategy)
    host_timeout_s: float = attrs.field(default=10.0, validator=_positive(float))
    host_start_timeout_s: float = attrs.field(default=60.0, validator=_positive(float))
    refresh_s: float = attrs.field(default=2.0, validator=_positive(float))
    num_cpus: int | None = attrs.field(default=None, validator=_positive(int))
    max_concurrency: int = attrs.field(default=10_000, validator=_positive(int))
    batch_interval_s: float = attrs.field(default=0.01, validator=_positive(float))
    batch_max: int = attrs.field(default=512, validator=_positive(int))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> RayOptions:
        """From a decoded settings table (``[ray]``); unknown keys are an error."""
        names = {f.name for f in attrs.fields(cls)}
        for key in data:
            if key not in names:
                raise ConfigError(f"ray.{key}: unknown key; known: {', '.join(sorted(names))}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(f"ray: {exc}") from None

    def hosts_on(self, cpus: float) -> int:
        """How many hosts a node with *cpus* CPUs gets."""
        if self.cpus_per_host is not None:
            return max(1, int(cpus // self.cpus_per_host))
        return self.hosts_per_node


class _Bridge:
    """One asyncio loop in a thread of its own: where this process awaits Ray.

    Ray's processes started by ``ray.init`` die with the thread that started them (they are
    spawned with a parent-death signal), so a local cluster is started on this thread too,
    which lives exactly as long as the placement.
    """

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="trio-agents-ray", daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    def start(self) -> None:
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run *coro* on the bridge loop; the future is safe to wait on from trio."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def call(self, fn: Callable[[], T]) -> T:
        """Run a blocking *fn* on the bridge thread itself (``ray.init``, ``ray.shutdown``).

        Cancellation: not cancellable once started (these calls take a few seconds at most).
        """

        async def run() -> T:
            await asyncio.sleep(0)
            return fn()

        fut = self.submit(run())
        with trio.CancelScope(shield=True):
            await wait_future(fut)
        return fut.result()

    async def stop(self) -> None:
        """Stop the loop (its tasks cancelled and finished first) and wait for the thread."""
        if self._thread.is_alive():
            with contextlib.suppress(Exception):  # a wait cut short: stop anyway
                await wait_future(self.submit(_cancel_all()))
            self._loop.call_soon_threadsafe(self._loop.stop)
            await trio.to_thread.run_sync(self._thread.join)


async def _cancel_all() -> None:
    """Cancel every other task of the running loop and let them finish (at most a second)."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=1.0)


async def wait_future(fut: concurrent.futures.Future[T]) -> T:
    """Wait for a :class:`concurrent.futures.Future` from trio without a thread.

    Cancellation: a checkpoint; a cancelled wait leaves *fut* running (wait on it again, or
    cancel it yourself).
    """
    if not fut.done():
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()

        def wake(_: object) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

        fut.add_done_callback(wake)
        await done.wait()
    else:
        await trio.lowlevel.checkpoint()
    return fut.result()


async def _next_envelope(gen: Any) -> Envelope | None:
    """The next item of a host's channel (on the bridge loop); ``None`` at its end."""
    if isinstance(gen, _Channel):
        return await gen.next()
    try:
        ref = await gen.__anext__()
    except StopAsyncIteration:
        return None
    envelope: Envelope = await ref
    return envelope


class _Channel:
    """A host's channel (Ray's streaming generator) read one envelope ahead, on the bridge
    loop: the next envelope is fetched while the parent forwards this one, instead of after
    (each fetch is a few hand-overs between threads that wait for the GIL while the parent's
    trio loop is busy; bench/README.md)."""

    def __init__(self, gen: Any) -> None:
        self.gen = gen
        self._ahead: asyncio.Future[Envelope | None] | None = None

    async def _fetch(self) -> Envelope | None:
        try:
            ref = await self.gen.__anext__()
        except StopAsyncIteration:
            return None
        envelope: Envelope = await ref
        return envelope

    async def next(self) -> Envelope | None:
        """The next envelope, ``None`` at the end; raises what Ray raised.

        Cancellation: cancels the fetch under way (as a cancelled read of the generator).
        """
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            ahead = asyncio.ensure_future(self._fetch())
        envelope = await ahead
        if envelope is not None:
            self._ahead = asyncio.ensure_future(self._fetch())
            # Its error, if nobody reads it (the host is lost meanwhile), is not logged.
            self._ahead.add_done_callback(_retrieved)
        return envelope


def _retrieved(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


async def _await_ref(ref: Any) -> Any:
    return await ref


# -- nodes and hosts --------------------------------------------------------------------------


@attrs.frozen
class _Node:
    node_id: str
    cpus: float
    resources: Mapping[str, float]
    labels: Mapping[str, str]
    raylet: tuple[str, int] | None = None  # where its raylet listens (``NodeManagerPort``)

    @property
    def short(self) -> str:
        return self.node_id[:8]

    def matches(self, atype: AgentType) -> bool:
        """Whether subtrees of *atype* may run here (its ``ray_resources`` / ``ray_labels``)."""
        return all(self.resources.get(k, 0.0) >= v for k, v in atype.ray_resources) and all(
            self.labels.get(k) == v for k, v in atype.ray_labels
        )


def _alive_nodes() -> list[_Node]:
    """The cluster's live nodes (a blocking GCS call: run it in a thread)."""
    import ray

    nodes = []
    for info in ray.nodes():  # type: ignore[no-untyped-call]
        if not info.get("Alive"):
            continue
        resources = {str(k): float(v) for k, v in (info.get("Resources") or {}).items()}
        host, port = info.get("NodeManagerAddress"), info.get("NodeManagerPort")
        nodes.append(
            _Node(
                node_id=str(info["NodeID"]),
                cpus=resources.get("CPU", 0.0),
                resources=resources,
                labels={str(k): str(v) for k, v in (info.get("Labels") or {}).items()},
                raylet=(str(host), int(port)) if host and port else None,
            )
        )
    return nodes


@attrs.define(eq=False)
class _Host:
    name: str
    node: _Node
    actor: Any = None
    state: Literal["starting", "ready", "dead"] = "starting"
    reason: str | None = None  # why it is dead
    active: int = 0
    streams: dict[str, _Stream] = attrs.Factory(dict)
    # Subtrees to send, each with a reference to its run's settings in Ray's object store.
    queue: list[tuple[SubtreeCall, Any]] = attrs.Factory(list)
    wake: trio.Event = attrs.Factory(trio.Event)
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)

    def where(self) -> str:
        return f"ray host {self.name} (node {self.node.short})"


class _HostLost(Exception):
    """Why a host left the pool (``node lost: ...`` or ``worker died: ...``)."""


_RAYLET_PROBE_S = 1.0


async def _raylet_answers(node: _Node) -> bool:
    """Whether *node*'s raylet still accepts a connection (``False`` if refused or silent).

    Ray reports a killed node's actors as merely "unavailable" at once and marks the node dead
    only after its health checks fail (15 s and more); this tells the two losses apart now.
    """
    if node.raylet is None:
        return True  # nothing to ask: trust the node list
    with trio.move_on_after(_RAYLET_PROBE_S):
        try:
            stream = await trio.open_tcp_stream(*node.raylet)
        except OSError:
            return False
        with trio.CancelScope(shield=True):
            await stream.aclose()  # a TCP close: no wait (and answered is answered)
        return True
    return False


def _loss_reason(host: _Host, exc: BaseException | None, node_alive: bool) -> str:
    """Name what happened: ``node lost`` or ``worker died``, then the details."""
    if exc is None:
        return f"worker died: {host.where()}: its channel ended early"
    lines = str(exc).strip().splitlines()
    detail = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    text = str(exc)
    if "node has died" in text or "node died" in text or not node_alive:
        return f"node lost: {host.where()}: {detail}"
    return f"worker died: {host.where()}: {detail}"


@attrs.define(eq=False)
class _RemoteScope:
    """Stands in the local registry for a remote node's cancel scope.

    :meth:`Registry.cancel` records the reason and ``by`` on the node, then calls
    ``scope.cancel(reason=...)``: this sends both to the host, which cancels the real scope.
    """

    stream: _Stream
    node_id: str

    def cancel(self, reason: str | None = None) -> None:
        node = self.stream.run.registry.get(self.node_id)
        by = node.cancel_by if node is not None else None
        self.stream.send_cancel(self.node_id, reason or "cancelled", by)


@attrs.define(eq=False)
class _RemoteMailbox:
    """Stands in for a remote agent's mailbox in the run's scheduler (``Runtime.send_message``).

    A message is sent to the host at once; it counts as in flight until its ``user_message``
    event comes back, and no more than the mailbox holds are in flight, so ``False`` ("full")
    is as true as it is locally.
    """

    stream: _Stream
    agent_id: str
    size: int
    in_flight: int = 0
    closed: bool = False

    def send_nowait(self, text: str) -> None:
        host, call = self.stream.host, self.stream.call
        if self.closed or self.stream.ended or host is None or call is None:
            raise trio.ClosedResourceError
        if self.in_flight >= self.size:
            raise trio.WouldBlock
        host.actor.message.remote(call.call_id, self.agent_id, text)
        self.in_flight += 1


@attrs.define(eq=False)
class _Open:
    """A remote node that has started and not finished (for synthesised ends)."""

    kind: str
    event: AgentStarted | ToolStarted
    t0: float
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0


@attrs.define(eq=False)
class _Ask:
    scope: trio.CancelScope
    done: trio.Event = attrs.Factory(trio.Event)


class RayPlacement:
    """The ``ray`` placement of one run: runs subtrees on a pool of host actors (see the
    module doc).

    Made by :func:`open_ray_placement`; implements :class:`~runtime.core._context.SubtreeRunner`.
    """

    def __init__(
        self,
        bridge: _Bridge,
        options: RayOptions,
        nursery: trio.Nursery,
        host_options: Mapping[str, Any],
        start_cluster: Callable[[], None] | None = None,
    ) -> None:
        self._bridge = bridge
        # A private cluster is started by the run's first remote subtree, not when the run
        # opens: a run that never places a sub-agent on Ray pays nothing for it.
        self._start_cluster = start_cluster
        self._start_error: str | None = None
        self.options = options
        self._nursery = nursery
        self._host_options = dict(host_options)
        self._hosts: list[_Host] = []
        self._host_names = itertools.count(1)
        self._call_ids = itertools.count(1)
        self._provider: ProviderConfig | None = None
        # The driver's side of the run's one rate limiter, for an http provider's endpoint.
        self.limits: LimiterService | None = None
        self._cache_run: RunContext | None = None
        self._config: tuple[RunContext, Any] | None = None
        self._nodes: dict[str, _Node] = {}
        self._refused: dict[str, str] = {}  # node id -> why its host could not serve the run
        self._extra: set[str] = set()  # nodes asked for by an agent type's selectors
        self._home: str | None = None  # pack: the node in use
        self._driver_node: str | None = None
        self._started = False
        self._first_refresh = trio.Event()
        self._settled = False  # the first hosts have answered (or had their time)
        self._changed = trio.Event()
        self._closing = False
        # Queued for a host to its first batch back, per subtree (the last 10,000; bench/).
        self.start_latencies: deque[float] = deque(maxlen=10_000)

    # -- the pool -----------------------------------------------------------------------------
    @property
    def hosts(self) -> list[Any]:
        """The actors of the hosts in the pool (Ray actor handles), e.g. to watch or kill them."""
        return [h.actor for h in self._hosts if h.state == "ready"]

    def pool(self) -> list[dict[str, Any]]:
        """The hosts asked for so far: name, node id, state, running subtrees, and why a dead
        one left."""
        return [
            {"name": h.name, "node": h.node.node_id, "state": h.state, "active": h.active,
             "reason": h.reason}
            for h in self._hosts
        ]

    def _notify(self) -> None:
        if not self._settled and not any(h.state == "starting" for h in self._hosts):
            self._settled = True
        self._changed.set()
        self._changed = trio.Event()

    async def _ensure_started(self, run: RunContext) -> None:
        if self._started:
            if not self._first_refresh.is_set():
                await self._first_refresh.wait()
            return
        self._started = True
        try:
            if self._start_cluster is not None:
                try:
                    # Shielded: a cancelled first subtree must not leave the run with a
                    # cluster half started (Ray's own timeouts bound it).
                    with trio.CancelScope(shield=True):
                        await self._bridge.call(self._start_cluster)
                except ConfigError as exc:
                    self._start_error = str(exc)
                    return  # every subtree of the run fails with this reason
            self._driver_node = await trio.to_thread.run_sync(_current_node)
            await self._refresh(run)
        finally:
            self._first_refresh.set()
        self._nursery.start_soon(self._keep, run)
        self._nursery.start_soon(self._settle_after, min(self.options.host_start_timeout_s, 10.0))

    async def _settle_after(self, seconds: float) -> None:
        await trio.sleep(seconds)
        if not self._settled:
            self._settled = True
            self._notify()

    async def _keep(self, run: RunContext) -> None:
        """The keeper: re-read the node list every ``refresh_s``."""
        while True:
            await trio.sleep(self.options.refresh_s)
            try:
                await self._refresh(run)
            except Exception as exc:  # the GCS is briefly unreachable: try again next time
                _log.warning("ray node list unavailable", error=f"{type(exc).__name__}: {exc}")

    async def _refresh(self, run: RunContext) -> None:
        nodes = await trio.to_thread.run_sync(_alive_nodes)
        self._nodes = {n.node_id: n for n in nodes}
        for host in self._hosts:
            if host.state != "dead" and host.node.node_id not in self._nodes:
                self._lose(host, f"node lost: {host.where()}: the node left the cluster")
        for node in self._wanted(nodes):
            have = sum(
                1 for h in self._hosts if h.state != "dead" and h.node.node_id == node.node_id
            )
            for _ in range(self.options.hosts_on(node.cpus) - have):
                self._start_host(run, node)
        self._notify()

    def _wanted(self, nodes: list[_Node]) -> list[_Node]:
        usable = [n for n in nodes if n.cpus > 0 and n.node_id not in self._refused]
        if self.options.strategy == "pack" and usable:
            ids = [n.node_id for n in usable]
            if self._home not in ids:
                self._home = (
                    self._driver_node
                    if self._driver_node in ids
                    else max(usable, key=lambda n: n.cpus).node_id
                )
            usable = [n for n in usable if n.node_id == self._home]
        extra = [
            self._nodes[i] for i in sorted(self._extra)
            if i in self._nodes and i not in self._refused
        ]
        return list({n.node_id: n for n in [*usable, *extra]}.values())

    def _start_host(self, run: RunContext, node: _Node) -> _Host:
        host = _Host(f"h{next(self._host_names)}", node)
        self._hosts.append(host)
        self._nursery.start_soon(self._host_main, run, host, name=f"ray host {host.name}")
        return host

    async def _host_main(self, run: RunContext, host: _Host) -> None:
        with host.scope:
            try:
                gen = await self._bring_up(run, host)
            except _HostLost as exc:
                self._lose(host, str(exc))
                return
            host.state = "ready"
            self._notify()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._submitter, host)
                reason = await self._reader(run, host, gen)
                self._lose(host, reason)

    async def _bring_up(self, run: RunContext, host: _Host) -> Any:
        """Start the host's actor on its node, check that it can serve the run, open its
        channel. Raises :class:`_HostLost` (and refuses the node) if it cannot."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options: dict[str, Any] = {
            "name": f"trio-agents-{run.settings.run_id}-{host.name}",
            "max_concurrency": self.options.max_concurrency,
            "num_cpus": 0,
            "max_restarts": 0,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(host.node.node_id, soft=False),
            **self._host_options,
        }
        timeout = self.options.host_start_timeout_s
        problem: str | None
        try:
            # Keys reach the worker in the run's settings, never in its environment (which the
            # host seals), a call's arguments, an event or a log line.
            # In a thread: the first host of a process makes Ray export the class (a pickle
            # and a disassembly of its methods, ~0.1-0.2 s), which must not freeze this loop.
            host.actor = await trio.to_thread.run_sync(
                lambda: _remote_class(RayHost).options(**options).remote(
                    host.name, seal_environ=True
                )
            )
            workspace = str(run.settings.workspace)
            fut = self._bridge.submit(_await_ref(host.actor.check.remote(workspace)))
            problem = f"{host.where()} did not start within {timeout:g} s"
            with trio.move_on_after(timeout):
                problem = await wait_future(fut)
            fut.cancel()
        except Exception as exc:  # the actor could not be made there (runtime env, resources)
            problem = f"{host.where()} could not start: {type(exc).__name__}: {exc}"
        if problem is not None:
            self._refused[host.node.node_id] = problem
            _log.warning("ray host refused", host=host.name, node=host.node.short, reason=problem)
            raise _HostLost(problem)
        _log.debug("ray host ready", host=host.name, node=host.node.node_id)
        return _Channel(
            host.actor.channel.options(
                num_returns="streaming", _generator_backpressure_num_objects=4
            ).remote()
        )

    async def _reader(self, run: RunContext, host: _Host, gen: Any) -> str:
        """Forward the host's envelopes into the run's bus until the host is lost; why."""
        timeout = self.options.host_timeout_s
        while True:
            await run.bus.wait_for_room()
            fut = self._bridge.submit(_next_envelope(gen))
            envelope: Envelope | None = None
            try:
                with trio.move_on_after(timeout) as waited:
                    envelope = await wait_future(fut)
            except Exception as exc:  # the worker or its node is gone: Ray says which
                listed = host.node.node_id in self._nodes
                return _loss_reason(host, exc, listed and await _raylet_answers(host.node))
            finally:
                if not fut.done():
                    fut.cancel()
            if waited.cancelled_caught:
                return f"node lost: {host.where()}: nothing from it for {timeout:g} s"
            if envelope is None:
                return f"worker died: {host.where()}: its channel ended early"
            for call_id, batch in envelope.batches():
                stream = host.streams.get(call_id)
                if stream is not None:
                    await stream.take(batch)
            if envelope.lost is not None:
                return envelope.lost

    async def _submitter(self, host: _Host) -> None:
        """Send the subtrees queued for *host*, many per actor call."""
        while True:
            await host.wake.wait()
            host.wake = trio.Event()
            await trio.lowlevel.checkpoint()  # the subtrees starting now join this submit
            queued, host.queue = host.queue, []
            # One submit per run's settings (a placement serves one run: one submit), which
            # travel once with it rather than once per subtree.
            by_config: dict[int, tuple[Any, list[SubtreeCall]]] = {}
            for call, config in queued:
                by_config.setdefault(id(config), (config, []))[1].append(call)
            for config, calls in by_config.values():
                self._submit(host, calls, config)

    def _submit(self, host: _Host, calls: list[SubtreeCall], config: Any) -> None:
        try:
            # In a tuple: Ray would resolve a reference given as an argument of its own, and the
            # host would unpickle the settings again for every submit.
            try:
                packed: tuple[SubtreeCall, ...] | bytes = pack_calls(calls)
            except Exception:  # something only Ray's own pickling can carry: let it try
                packed = tuple(calls)
            ref = host.actor.submit.remote(packed, (config,))
        except Exception:  # one of them cannot be pickled: send them one by one
            for call in calls:
                try:
                    one = host.actor.submit.remote((call,), (config,))
                except Exception as exc:
                    error = f"cannot send it to Ray: {type(exc).__name__}: {exc}"
                    self._fail_calls(host, [call], error)
                else:
                    self._nursery.start_soon(self._submitted, host, [call], one)
            return
        self._nursery.start_soon(self._submitted, host, calls, ref)

    async def _submitted(self, host: _Host, calls: list[SubtreeCall], ref: Any) -> None:
        import ray

        try:
            await wait_future(self._bridge.submit(_await_ref(ref)))
        except ray.exceptions.RayActorError:
            pass  # the host is lost: its reader reports it
        except Exception as exc:
            self._fail_calls(host, calls, f"{host.where()} refused it: {type(exc).__name__}: {exc}")

    def _fail_calls(self, host: _Host, calls: list[SubtreeCall], reason: str) -> None:
        for call in calls:
            stream = host.streams.get(call.call_id)
            if stream is not None and not stream.ended:
                self._nursery.start_soon(stream.lose, reason)

    def _lose(self, host: _Host, reason: str) -> None:
        """Take *host* out of the pool; its unfinished subtrees end ``failed`` with *reason*."""
        if host.state == "dead":
            return
        host.state = "dead"
        host.reason = reason
        host.scope.cancel(reason=reason)
        if not self._closing:
            _log.warning("ray host lost", host=host.name, node=host.node.short, reason=reason)
        for stream in list(host.streams.values()):
            if not stream.ended:
                self._nursery.start_soon(stream.lose, reason)
        if host.actor is not None:
            import ray

            with contextlib.suppress(Exception):  # already gone
                ray.kill(host.actor)
        self._notify()

    async def _pick_host(self, run: RunContext, atype: AgentType) -> _Host | str:
        """The least loaded ready host for a subtree of *atype*, or why there is none."""
        await self._ensure_started(run)
        if self._start_error is not None:
            return self._start_error
        while not self._closing:
            if atype.ray_resources or atype.ray_labels:
                matching = [n for n in self._nodes.values() if n.matches(atype)]
            else:  # no selectors (the usual case): every node
                matching = list(self._nodes.values())
            ids = {n.node_id for n in matching}
            live = [h for h in self._hosts if h.state != "dead" and h.node.node_id in ids]
            ready = [h for h in live if h.state == "ready"]
            if ready and (self._settled or len(ready) == len(live)):
                return min(ready, key=lambda h: h.active)
            if not live:
                spare = [n for n in matching if n.node_id not in self._refused]
                if not spare:
                    return self._no_host(atype, matching)
                # A node only this type's selectors ask for (or none started yet): use it.
                node = max(spare, key=lambda n: n.cpus)
                self._extra.add(node.node_id)
                for _ in range(self.options.hosts_on(node.cpus)):
                    self._start_host(run, node)
            await self._changed.wait()
        return "the run is ending"

    def _no_host(self, atype: AgentType, matching: list[_Node]) -> str:
        refused = [self._refused[n.node_id] for n in matching if n.node_id in self._refused]
        if refused:
            return f"no Ray host can serve this run: {refused[0]}"
        if atype.ray_resources or atype.ray_labels:
            return (
                f"no Ray node matches agent type {atype.name!r}: ray_resources "
                f"{dict(atype.ray_resources)}, ray_labels {dict(atype.ray_labels)}"
            )
        return "the Ray cluster has no live node"

    # -- subtrees -----------------------------------------------------------------------------
    async def run_subtree(self, run: RunContext, spec: AgentSpec) -> AgentOutcome:
        """Run *spec*'s whole subtree on a host actor; its events go into ``run.bus``.

        Returns the root agent's outcome: as the host reported it (without the agent's
        history, which the ``agent`` call does not read), or ``failed`` (with the reason) when
        the host was lost or none could run it.

        Cancellation: cancels the subtree on the worker and keeps forwarding its events (for up
        to ``run.settings.limits.finish_grace_s``) until its root has reported ``cancelled``, then
        re-raises; the parent's call ends ``cancelled``.
        """
        picked = await self._pick_host(run, spec.agent_type)
        host = picked if isinstance(picked, _Host) else None
        call_id = f"{host.name if host else 'h0'}.{next(self._call_ids)}"
        remote_budget = None
        if spec.budget is not None and (
            spec.budget.seconds is not None or spec.budget.usd is not None
        ):
            # Token and tool-call budgets of the root are kept HERE, by the run's budget
            # layer watching the forwarded events; only the wall-clock deadline goes along
            # (agent_main applies it), so nothing is cancelled twice. A money allowance goes
            # too: the host's layer refuses a call before it starts (it sees the
            # reservations), this one counts what was spent (docs/costs.md, "On Ray").
            remote_budget = attrs.evolve(spec.budget, tokens=None, tool_calls=None)
        run.budget.set_budget(spec.agent_id, spec.budget)
        if host is None:
            stream = _Stream(self, run, spec, None, None)
            await stream.fail_unsent(str(picked))
            return stream.outcome or failed_outcome(spec, str(picked))
        call = SubtreeCall(
            call_id=call_id,
            id_prefix=f"{call_id}.",
            spec=spec if remote_budget is spec.budget else attrs.evolve(spec, budget=remote_budget),
            max_agents=max(1, run.settings.limits.max_agents - run.scheduler.agents_started),
        )
        stream = _Stream(self, run, spec, host, call, self._config_ref(run))
        host.streams[call_id] = stream
        host.active += 1
        try:
            outcome = await stream.serve()
        finally:
            host.active -= 1
            host.streams.pop(call_id, None)
        return outcome or failed_outcome(spec, f"{host.where()} reported no outcome")

    def _provider_config(self, run: RunContext) -> ProviderConfig:
        if self._provider is not None and self._cache_run is run:
            return self._provider
        from runtime.providers import ScriptedProvider

        provider = run.provider
        if isinstance(provider, ScriptedProvider):
            config = ProviderConfig(kind="scripted", name="scripted", scenario=provider.scenario)
        elif provider.name in _HTTP_WIRING and hasattr(provider, "base_url"):
            key_var, url_var = _HTTP_WIRING[provider.name]
            retry = getattr(provider, "retry", None)
            self.limits = self._limiter_service(provider)
            config = ProviderConfig(
                kind="http",
                name=provider.name,
                model=getattr(provider, "model", None),
                base_url=provider.base_url,
                url_var=url_var,
                key_var=key_var,
                key=getattr(provider, "api_key", None) or None,
                max_retries=getattr(retry, "max_retries", 4),
                call_deadline_s=getattr(provider, "call_deadline_s", 600.0),
                shared_limiter=self.limits.limiter.label if self.limits is not None else None,
            )
        else:
            config = ProviderConfig(kind="object", name=provider.name, provider=provider)
        self._provider, self._cache_run = config, run
        return config

    def _limiter_service(self, provider: Any) -> LimiterService | None:
        """The driver's service of *provider*'s limiter, which every host's calls then ask
        (docs/rate-limits.md, "Ray hosts"); ``None`` for a provider without one."""
        from runtime.providers import EndpointLimiter

        limiter = getattr(provider, "limiter", None)
        if not isinstance(limiter, EndpointLimiter):
            return None
        if self.limits is not None and self.limits.limiter is limiter:
            return self.limits
        return LimiterService(limiter, self._nursery, _send_grants)

    def _config_ref(self, run: RunContext) -> Any:
        """The run's :class:`RunConfig` in Ray's object store (put once, resolved once per
        host)."""
        import ray

        if self._config is not None and self._config[0] is run:
            return self._config[1]
        config = self._provider_config(run)
        settings = RunConfig(
            run_id=run.settings.run_id,
            agent_types=tuple(run.agent_types.values()),
            provider=config,
            # MCP tools hold this process's server connections: never shipped (docs/cluster.md).
            tools=tuple(t for n, t in run.tools.items() if not n.startswith("mcp__")),
            tool_limits=run.settings.tool_limits,
            limits=run.settings.limits,
            workspace=str(run.settings.workspace),
            env=dict(run.settings.env),
            policy=run.broker.policy,
            batch_interval_s=self.options.batch_interval_s,
            batch_max=self.options.batch_max,
            system_prompt=run.settings.system_prompt,
            sandbox=run.sandbox,
            # The values the driver masks (the run's one Secrets): the host's bus masks the
            # same ones and more, so the events it sends are forwarded as they are
            # (docs/cluster.md).
            secrets=run.secrets.values,
            prices=run.settings.prices,
            model=run.settings.model,
        )
        try:
            ref = ray.put(settings)
        except Exception as exc:  # a custom tool or provider Ray cannot pickle, most likely
            raise ToolError(
                f"cannot send this run's settings (provider, tools) to Ray: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        self._config = (run, ref)
        return ref

    def _close(self) -> None:
        self._closing = True
        for host in self._hosts:
            host.scope.cancel(reason="the run is over")
            if host.actor is not None and host.state != "dead":
                import ray  # a host has an actor only once Ray is up

                with contextlib.suppress(Exception):  # already gone: nothing to clean up
                    ray.kill(host.actor)
            host.state = "dead"
        self._notify()


def _send_grants(host: _Host, grants: list[tuple[str, int]]) -> None:
    """The limiter's grants of one round for *host*'s subtrees, in one control call."""
    if host.state == "dead" or host.actor is None:
        return  # its subtrees are released as its loss ends them
    with contextlib.suppress(Exception):  # a dead host: its reader reports the loss
        host.actor.limiter_grant.remote(tuple(grants))


def _current_node() -> str | None:
    import ray

    with contextlib.suppress(Exception):  # a Ray Client connection has no node of its own
        return str(ray.get_runtime_context().get_node_id())
    return None


# Events the parent forwards without looking at them (see _Stream._forward).
_PLAIN: frozenset[type[Event]] = frozenset({TextDelta, ThinkingDelta, ToolProgress})


class _Stream:
    """One remote subtree seen from the parent: its proxies, its end, the synthesised ends.

    Its events arrive through its host's reader (:meth:`take`); :meth:`serve` runs in the
    agent call's task and waits for the end.
    """

    def __init__(
        self,
        placement: RayPlacement,
        run: RunContext,
        spec: AgentSpec,
        host: _Host | None,
        call: SubtreeCall | None,
        config: Any = None,
    ) -> None:
        self.placement = placement
        self.config = config  # the run's settings in Ray's object store
        self.run = run
        self.spec = spec
        self.host = host
        self.call = call
        self._open: dict[str, _Open] = {}
        self._asks: dict[str, _Ask] = {}
        self._mailboxes: dict[str, _RemoteMailbox] = {}
        self._root_finished: AgentFinished | None = None
        self._submitted_at = 0.0
        self._first = True
        self.outcome: AgentOutcome | None = None
        self.ended = False  # nothing more is taken from the host
        self.done = trio.Event()  # the outcome is set

    # -- control --------------------------------------------------------------------------
    def send_cancel(self, node_id: str, reason: str, by: str | None) -> None:
        """Ask the host to cancel one node of this subtree (fire and forget)."""
        if self.ended or self.host is None or self.call is None or self.host.state == "dead":
            return
        try:
            self.host.actor.cancel.remote(self.call.call_id, node_id, reason, by)
        except Exception as exc:  # a dead host: its loss is reported
            _log.warning("cancel not sent", node=node_id, error=repr(exc))

    def _add_mailbox(self, agent_id: str) -> None:
        mailbox = _RemoteMailbox(self, agent_id, self.run.settings.limits.mailbox_size)
        self._mailboxes[agent_id] = mailbox
        self.run.scheduler.open_inbox(agent_id, mailbox)

    def _drop_mailbox(self, agent_id: str) -> None:
        mailbox = self._mailboxes.pop(agent_id, None)
        if mailbox is not None:
            mailbox.closed = True
            self.run.scheduler.close_inbox(agent_id, mailbox)

    # -- the subtree's life -----------------------------------------------------------------
    async def serve(self) -> AgentOutcome | None:
        """Run the subtree to its end; see :meth:`RayPlacement.run_subtree`."""
        run, spec, host, call = self.run, self.spec, self.host, self.call
        assert host is not None
        assert call is not None
        root_node = run.registry.register(
            spec.agent_id,
            _RemoteScope(self, spec.agent_id),
            parent_id=spec.parent_node,
            data=Owner(spec.agent_id, spec.parent_tool_use_id),
        )
        try:
            try:
                self._submitted_at = trio.current_time()
                host.queue.append((call, self.config))
                host.wake.set()
                await self.done.wait()
            finally:
                if not self.ended:
                    # Cancelled: its open questions are withdrawn now, as a local subtree's are
                    # (their tasks are the placement's, not this call's), not when the host
                    # gets round to it.
                    self._cancel_asks("the subtree was cancelled")
                    await self._finish_cancelled(root_node)
                elif not self.done.is_set():  # being ended by a loss right now
                    with trio.move_on_after(run.settings.limits.finish_grace_s, shield=True):
                        await self.done.wait()
                if self._asks:  # their tasks are the placement's: wait for them here
                    self._cancel_asks("the subtree has ended")
                    with trio.move_on_after(run.settings.limits.finish_grace_s, shield=True):
                        for ask in list(self._asks.values()):
                            await ask.done.wait()
        finally:
            run.registry.unregister(spec.agent_id)
            for agent_id in list(self._mailboxes):
                self._drop_mailbox(agent_id)
            if self.placement.limits is not None:
                # Whatever the host still held (its end, a loss, a cancel it never confirmed)
                # goes back to the run's limiter.
                self.placement.limits.release(self)
        return self.outcome

    def _cancel_asks(self, reason: str) -> None:
        for ask in self._asks.values():
            ask.scope.cancel(reason=reason)

    async def take(self, batch: Batch) -> None:
        """Forward one batch from the host (the host's reader calls this)."""
        if self.ended:
            return
        if self._first:
            self._first = False
            self.placement.start_latencies.append(trio.current_time() - self._submitted_at)
        events = batch.events
        if batch.error is None and not any(type(e) is PermissionWithdrawn for e in events):
            # Nothing here waits (the usual batch): no scope, no await per event.
            forward = self._forward_now
            for event in events:
                forward(event)
        else:
            # A batch is taken whole even when the call is being cancelled: its events are
            # facts that already happened on the worker. The waits inside are each bounded.
            with trio.CancelScope(shield=True):
                for event in events:
                    await self._forward(event)
                if batch.error is not None:
                    await self._synthesise(batch.error, agent_status="failed", tool_status="error")
        if batch.final:
            self.outcome = batch.outcome or self._outcome_from_events(batch.error)
            self.ended = True
            self.done.set()

    async def lose(self, reason: str) -> None:
        """The host is lost (or refused the subtree): end every open node ``failed``."""
        if self.ended:
            return
        self.ended = True
        with trio.move_on_after(self.run.settings.limits.finish_grace_s, shield=True):
            await self._synthesise(reason, agent_status="failed", tool_status="error")
        self.outcome = self._outcome_from_events(reason)
        self.done.set()

    async def fail_unsent(self, reason: str) -> None:
        """No host could take the subtree: report its root as started, then failed."""
        spec = self.spec
        started = await self.run.bus.emit(
            started_event(spec),
        )
        self._open[spec.agent_id] = _Open("agent", started, trio.current_time())
        self.run.scheduler.agent_running()
        await self.lose(reason)

    async def _finish_cancelled(self, root_node: Any) -> None:
        """The local call was cancelled: stop the subtree on the worker and forward its last
        events; synthesise them if the worker does not answer."""
        host, call = self.host, self.call
        assert host is not None
        assert call is not None
        reason, by = Registry.cancel_reason(root_node)
        reason = reason or "the run is over"
        grace = self.run.settings.limits.finish_grace_s
        queued = [q for q in host.queue if q[0] is not call]
        if len(queued) < len(host.queue):  # never sent: nothing ran
            host.queue[:] = queued
        else:
            boundary = call.spec.parent_node or f"{call.call_id}.boundary"
            self.send_cancel(boundary, reason, by or "runtime")
            with trio.move_on_after(grace, shield=True):
                await self.done.wait()
            if self.ended:
                with trio.move_on_after(grace, shield=True):
                    await self.done.wait()
                return
            with contextlib.suppress(Exception):  # a dead host: nothing left to stop
                host.actor.abort.remote(call.call_id, cancelled_text(reason))
            reason = f"{reason} (the Ray worker did not confirm within {grace:g} s)"
        self.ended = True
        text = cancelled_text(reason)
        with trio.move_on_after(grace, shield=True):
            await self._synthesise(text, agent_status="cancelled", tool_status="cancelled")
        self.outcome = self._outcome_from_events(
            text, status="cancelled", by=cast("CancelBy", by or "runtime")
        )
        self.done.set()

    async def _forward(self, event: Event) -> None:
        if isinstance(event, PermissionWithdrawn):
            await self._withdraw(event.question_id)
        else:
            self._forward_now(event)

    def _forward_now(self, event: Event) -> None:
        """Forward *event* (anything but a :class:`PermissionWithdrawn`), keeping track of the
        subtree's open nodes, proxies and mailboxes."""
        run = self.run
        if type(event) in _PLAIN:  # most events (text, turns): nothing to keep track of
            # Masked by the host's bus (see _config_ref); unpacked for this bus alone.
            run.bus.forward(event, masked=True, fresh=True)
            return
        if isinstance(event, PermissionAsked):
            self._ask(event)
            return
        if isinstance(event, LimiterAsked | LimiterReport):
            self._limiter_message(event)
            return
        now = trio.current_time()
        if isinstance(event, AgentStarted):
            assert event.agent_id is not None
            if event.agent_id != self.spec.agent_id:  # the root was registered at the start
                self._register(
                    event.agent_id,
                    event.parent_tool_use_id,
                    Owner(event.agent_id, event.parent_tool_use_id),
                )
            self._open[event.agent_id] = _Open("agent", event, now)
            self._add_mailbox(event.agent_id)
            run.scheduler.agent_running()
        elif isinstance(event, ToolStarted):
            assert event.agent_id is not None
            self._register(
                event.tool_use_id, event.agent_id, Owner(event.agent_id, event.parent_tool_use_id)
            )
            self._open[event.tool_use_id] = _Open("tool", event, now)
        elif isinstance(event, TurnFinished):
            opened = self._open.get(event.agent_id or "")
            if opened is not None:
                opened.turns = event.turn
                opened.input_tokens += event.input_tokens
                opened.output_tokens += event.output_tokens
                opened.cost_usd = add_costs(opened.cost_usd, event.cost_usd)
        elif isinstance(event, ToolFinished):
            if self._open.pop(event.tool_use_id, None) is not None:
                run.registry.unregister(event.tool_use_id)
        elif isinstance(event, UserMessage):
            mailbox = self._mailboxes.get(event.agent_id or "")
            if mailbox is not None and mailbox.in_flight > 0:
                mailbox.in_flight -= 1
        elif isinstance(event, AgentFinished):
            assert event.agent_id is not None
            self._drop_mailbox(event.agent_id)
            if self._open.pop(event.agent_id, None) is not None:
                run.scheduler.agent_stopped()
                if event.agent_id != self.spec.agent_id:
                    run.registry.unregister(event.agent_id)
            if event.agent_id == self.spec.agent_id:
                self._root_finished = event
        run.bus.forward(event, masked=True, fresh=True)

    def _register(self, node_id: str, parent_id: str | None, owner: Owner) -> None:
        try:
            self.run.registry.register(
                node_id, _RemoteScope(self, node_id), parent_id=parent_id, data=owner
            )
        except ValueError:
            # Ids are prefixed per call, so only a model repeating a tool-call id gets here.
            _log.warning("remote node id already live; it cannot be cancelled by id", node=node_id)

    # -- the run's rate limiter -------------------------------------------------------------
    def _limiter_message(self, msg: LimiterAsked | LimiterReport) -> None:
        """A message of the host's link to the run's limiter (see ``_limits``): an ask joins
        the driver's queue, its foreseen wait reported as the agent's ``rate_limited``."""
        limits = self.placement.limits
        if limits is None or self.host is None or self.call is None:
            return  # no limiter here: the host's provider has none of the driver's
        if isinstance(msg, LimiterReport):
            limits.report(self, msg)
            return
        ticket = limits.asked(self, self.host, self.call.call_id, msg)
        if ticket is not None and msg.agent_id is not None:
            opened = self._open.get(msg.agent_id)
            parent = opened.event.parent_tool_use_id if opened is not None else None
            self.run.bus.forward(
                RateLimited(agent_id=msg.agent_id, parent_tool_use_id=parent, ts=msg.ts,
                            wait_s=ticket.wait_s, reason=ticket.reason),
                masked=True, fresh=True,
            )

    # -- permissions ------------------------------------------------------------------------
    def _ask(self, event: PermissionAsked) -> None:
        ask = _Ask(trio.CancelScope())
        self._asks[event.question_id] = ask
        # In the placement's nursery (a nursery per subtree only for this was a measurable
        # share of a remote subtree's start); serve waits for it before the subtree ends.
        self.placement._nursery.start_soon(self._ask_parent, event, ask)

    async def _ask_parent(self, event: PermissionAsked, ask: _Ask) -> None:
        run = self.run
        try:
            with ask.scope:
                tool = run.tools.get(event.name)
                if tool is None:
                    granted, reason = False, f"tool {event.name!r} is unknown to the parent run"
                else:
                    assert event.agent_id is not None
                    try:
                        granted, reason = await run.broker.check(
                            tool,
                            event.input,
                            agent_id=event.agent_id,
                            parent_tool_use_id=event.parent_tool_use_id,
                            tool_use_id=event.tool_use_id,
                            summary=event.summary,
                        )
                    except Exception as exc:  # never the placement's nursery: deny instead
                        _log.warning("remote permission question failed", error=repr(exc))
                        granted, reason = False, f"the question failed: {type(exc).__name__}"
                with contextlib.suppress(Exception):  # a dead host: the stream reports it
                    assert self.host is not None
                    assert self.call is not None
                    self.host.actor.answer.remote(
                        self.call.call_id, event.question_id, granted, reason
                    )
        finally:
            self._asks.pop(event.question_id, None)
            ask.done.set()

    async def _withdraw(self, question_id: str) -> None:
        ask = self._asks.get(question_id)
        if ask is None:
            return
        ask.scope.cancel(reason="the remote tool call ended")
        # Its permission_resolved must come before the tool call's tool_finished.
        with trio.move_on_after(self.run.settings.limits.finish_grace_s, shield=True):
            await ask.done.wait()

    async def _synthesise(
        self, reason: str, *, agent_status: AgentStatus, tool_status: ToolStatus
    ) -> None:
        """Emit the missing ``*_finished`` events, children before parents (reverse start
        order is exactly that: a node starts after its parent and its parent's earlier
        children)."""
        for ask in list(self._asks.values()):
            ask.scope.cancel(reason=reason)
            with trio.move_on_after(self.run.settings.limits.finish_grace_s):
                await ask.done.wait()
        now = trio.current_time()
        for node_id, opened in reversed(list(self._open.items())):
            start = opened.event
            if isinstance(start, ToolStarted):
                self.run.registry.unregister(node_id)
                await self.run.bus.emit(
                    ToolFinished(
                        agent_id=start.agent_id,
                        parent_tool_use_id=start.parent_tool_use_id,
                        tool_use_id=start.tool_use_id,
                        name=start.name,
                        status=tool_status,
                        output=reason,
                        duration_s=now - opened.t0,
                        depth=start.depth,
                    ),
                )
            else:
                self._drop_mailbox(node_id)
                if node_id != self.spec.agent_id:
                    self.run.registry.unregister(node_id)
                self.run.scheduler.agent_stopped()
                finished = await self.run.bus.emit(
                    AgentFinished(
                        agent_id=start.agent_id,
                        parent_tool_use_id=start.parent_tool_use_id,
                        status=agent_status,
                        result=None,
                        error=reason,
                        turns=opened.turns,
                        input_tokens=opened.input_tokens,
                        output_tokens=opened.output_tokens,
                        duration_s=now - opened.t0,
                        cost_usd=opened.cost_usd,
                    ),
                )
                if node_id == self.spec.agent_id:
                    self._root_finished = finished
            del self._open[node_id]

    def _outcome_from_events(
        self, error: str | None, *, status: AgentStatus = "failed", by: CancelBy | None = None
    ) -> AgentOutcome:
        """The root's outcome when the host's never came: from its ``agent_finished``, if it
        was forwarded, else *error* with *status*; a cancelled one gets its reason from the
        event's text (all the event carries of it) and *by*."""
        fin = self._root_finished
        if fin is None:
            outcome = failed_outcome(
                self.spec, error or "the Ray host reported no outcome", status=status
            )
        else:
            outcome = attrs.evolve(
                failed_outcome(self.spec, fin.error or error or ""),
                status=fin.status,
                result=fin.result,
                error=fin.error,
                turns=fin.turns,
                input_tokens=fin.input_tokens,
                output_tokens=fin.output_tokens,
                duration_s=fin.duration_s,
                cost_usd=fin.cost_usd,
            )
        if outcome.status != "cancelled":
            return outcome
        reason = cancel_reason_of(outcome.error or "")
        return attrs.evolve(outcome, cancel_reason=reason, cancelled_by=by)


# -- the context manager ----------------------------------------------------------------------


@asynccontextmanager
async def open_ray_placement(
    address: str | None = None,
    *,
    options: RayOptions | None = None,
    host_options: Mapping[str, Any] | None = None,
) -> AsyncGenerator[RayPlacement, None]:
    """Connect to Ray (or start a private cluster) and yield the ``ray`` placement of one run.

    Args:
        address: a Ray cluster (``host:port``, ``auto``); overrides ``options.address``;
            default ``RAY_ADDRESS``. With none, a private cluster on this machine is started
            when the run places its first subtree on Ray (a run that places none starts none;
            one that cannot be started fails those subtrees with the reason) and stopped after
            the run, even on a machine that is a node of a cluster
            (``auto`` joins that one). If Ray is already initialised in this process (a test
            session, a notebook), that connection is used as it is and left open.
        options: the pool's shape and timings (:class:`RayOptions`).
        host_options: extra ``.options()`` for the host actors (``resources``,
            ``runtime_env``, ...).

    Raises:
        ConfigError: Ray is not installed, or the named cluster cannot be reached.

    Cancellation: starting a local cluster (a few seconds) is not cancellable. On exit the
    run's host actors are killed (every subtree has ended by then), and a cluster started here
    is shut down.
    """
    if importlib.util.find_spec("ray") is None:
        raise ConfigError("agent types placed on 'ray' need Ray: pip install 'trio-agents[ray]'")
    options = options or RayOptions()
    address = address or options.address or os.environ.get("RAY_ADDRESS") or None
    bridge = _Bridge()
    bridge.start()
    owned = False
    start_cluster: Callable[[], None] | None = None
    try:
        # Ray is imported only when it is needed: importing it takes seconds, and a run whose
        # agents never start a sub-agent of a Ray-placed type must not pay for it (nor for a
        # cluster). If this process has not imported it, it has no connection either.
        ray = sys.modules.get("ray")
        if ray is None or not ray.is_initialized():
            owned = True
            if address:  # a cluster the user named: a wrong address stops the run at once
                await bridge.call(lambda: _init_ray(None, address, options.num_cpus))
            else:
                def start_cluster() -> None:
                    _init_ray(None, None, options.num_cpus)
        else:
            _quiet_ray_driver()
        async with trio.open_nursery() as nursery:
            placement = RayPlacement(
                bridge, options, nursery, host_options or {}, start_cluster=start_cluster
            )
            try:
                yield placement
            finally:
                placement._close()
                nursery.cancel_scope.cancel(reason="the run is over")
    finally:
        try:
            ray = sys.modules.get("ray")
            if owned and ray is not None and ray.is_initialized():
                await bridge.call(ray.shutdown)
        finally:
            with trio.CancelScope(shield=True):
                await bridge.stop()


def _quiet_ray_driver() -> None:
    """Send what Ray's driver prints about the cluster (a dead raylet's state dump, worker
    lines) to the log: Ray prints them to ``sys.stdout`` whatever ``log_to_driver`` says, and
    stdout carries the run's events.

    Ray has no switch for it; its error listener and its exit flush both print through
    ``ray._private.worker.print_worker_logs``, which this replaces (once per process).
    """
    try:
        from ray._private import worker as ray_worker
    except ImportError:  # pragma: no cover - a Ray without it prints nothing there
        return
    if getattr(ray_worker.print_worker_logs, "_trio_agents", False):
        return

    def to_log(data: Mapping[str, Any], print_file: Any = None, *_: Any, **__: Any) -> None:
        lines = [str(line) for line in data.get("lines") or () if str(line).strip()]
        if lines:
            _log.warning("ray says", source=str(data.get("pid", "")), line=lines[0])
            for line in lines[1:]:
                _log.debug("ray says", source=str(data.get("pid", "")), line=line)

    to_log._trio_agents = True  # type: ignore[attr-defined]
    ray_worker.print_worker_logs = to_log


@functools.cache
def _remote_class(cls: type) -> Any:
    """``ray.remote(cls)``, made once per process: Ray exports an actor class (pickles it and
    disassembles its methods for a collision check) the first time each class object is used
    in a job, so a new one per host cost ~60 ms of CPU for every host of every run
    (bench/README.md)."""
    import ray

    return ray.remote(cls)


def _init_ray(ray_mod: Any, address: str | None, num_cpus: int | None) -> None:
    if ray_mod is None:
        import ray as ray_mod  # here, on the bridge thread, when the cluster is wanted

        _quiet_ray_driver()
    kwargs: dict[str, Any] = {
        "logging_level": logging.ERROR,
        "log_to_driver": False,  # worker output must never reach our stdout (--json)
        "configure_logging": True,
    }
    try:
        if address:
            ray_mod.init(address=address, **kwargs)
        else:
            # A private cluster for this run, on this machine only: no dashboard, no usage
            # report. (Ray refuses a loopback node address and listens on every interface;
            # its token authentication guards those ports.)
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            ray_mod.init(
                # "local": always a new cluster, even on a machine that is a node of one
                # (where Ray would otherwise join it through its ray_current_cluster file and
                # refuse num_cpus).
                address="local",
                num_cpus=num_cpus or min(os.cpu_count() or 1, 4),
                include_dashboard=False,
                object_store_memory=256 * 1024 * 1024,
                **kwargs,
            )
    except Exception as exc:  # Ray raises many kinds; the user needs one clear line
        where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
        raise ConfigError(f"cannot start or reach {where}: {type(exc).__name__}: {exc}") from exc
