"""The ``ray`` placement: sub-agent subtrees run on a Ray cluster with the same events, tree and
cancellation as local ones.

This is the parent side (the process that runs :func:`~runtime.open_runtime`); the worker side
is :mod:`runtime.cluster._host`. What runs where::

    parent process (trio)                          Ray worker process (one host actor)
    ---------------------                          -----------------------------------
    agent tool call (local)                        RayHost (async actor, trio in guest mode)
    └── RayPlacement.run_subtree                   └── _serve_call: the UNCHANGED agent loop
        ├── the pump: Batch → run.bus.forward  ◀───────  Batches (streaming actor call)
        ├── registry proxies of remote nodes   ───────▶  RayHost.cancel (control call)
        └── permission questions → run.broker  ───────▶  RayHost.answer (control call)

    asyncio bridge thread: the one place this process awaits Ray (ray.init runs there too)

Awaiting Ray from trio: a single asyncio loop in a thread of its own (:class:`_Bridge`) awaits
the streaming call's items with Ray's own asyncio support, and wakes the waiting trio task with
``TrioToken.run_sync_soon``. So thousands of open subtrees cost no thread each (trio's default
thread limiter would cap them at 40), and no trio task ever blocks the trio loop. An item being
awaited when the trio side is cancelled is not abandoned: the pump keeps that future and picks
it up again while it drains the cancelled subtree, so no batch is lost.

Cancellation: every remote node (each agent and tool call) is registered in ``run.registry``
with a :class:`_RemoteScope` proxy, so :meth:`Runtime.cancel` (the Ctrl+C picker, the control
socket, budgets) finds it; the proxy's ``cancel`` sends ``RayHost.cancel(node, reason, by)``.
When the local agent call itself is cancelled, the pump sends a cancel for the subtree's
boundary, then keeps forwarding (under a bounded shield) until the host reports the root's end,
so the subtree's ``cancelled`` events arrive before the call ends. Only if the host does not
finish within ``finish_grace_s`` does the pump ``ray.cancel`` the streaming call and synthesise
the missing ends. A lost worker (killed actor, crashed process) ends every unfinished remote
node ``failed`` (tool calls ``error``) with the reason, in child-before-parent order, emitted
here so the invariants of docs/events.md#invariants hold.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import os
import threading
from collections.abc import AsyncGenerator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import attrs
import structlog
import trio

from runtime.actors import Registry
from runtime.core._agent import AgentOutcome, AgentSpec
from runtime.core._context import Owner, RunContext
from runtime.core._errors import ConfigError, ToolError
from runtime.core._events import (
    AgentFinished,
    AgentStarted,
    AgentStatus,
    Event,
    ToolFinished,
    ToolStarted,
    TurnFinished,
)

from ._host import (
    Batch,
    PermissionAsked,
    PermissionWithdrawn,
    ProviderConfig,
    RayHost,
    RunConfig,
    SubtreeCall,
    failed_outcome,
)

__all__ = ["RayPlacement", "open_ray_placement"]

T = TypeVar("T")
_log = structlog.get_logger("trio_agents.ray")

# Key variables of the HTTP providers, and their base-URL variables (runtime.providers).
_HTTP_WIRING: Mapping[str, tuple[str, str]] = {
    "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
}


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
        """Stop the loop and wait for the thread to end."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            await trio.to_thread.run_sync(self._thread.join)


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


async def _next_item(gen: Any) -> Batch | None:
    """The next item of a streaming call (on the bridge loop); ``None`` at its end."""
    try:
        ref = await gen.__anext__()
    except StopAsyncIteration:
        return None
    batch: Batch = await ref
    return batch


# -- hosts ------------------------------------------------------------------------------------


@attrs.define(eq=False)
class _Host:
    name: str
    actor: Any
    active: int = 0
    dead: bool = False


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
class _Open:
    """A remote node that has started and not finished (for synthesised ends)."""

    kind: str
    event: AgentStarted | ToolStarted
    t0: float
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


@attrs.define(eq=False)
class _Ask:
    scope: trio.CancelScope
    done: trio.Event = attrs.Factory(trio.Event)


class RayPlacement:
    """The ``ray`` placement of one run: runs subtrees on host actors (see the module doc).

    Made by :func:`open_ray_placement`; implements :class:`~runtime.core._context.SubtreeRunner`.
    """

    def __init__(
        self,
        bridge: _Bridge,
        *,
        hosts: int,
        max_concurrency: int,
        batch_interval_s: float,
        batch_max: int,
        host_options: Mapping[str, Any],
    ) -> None:
        self._bridge = bridge
        self._want_hosts = hosts
        self._max_concurrency = max_concurrency
        self._batch_interval_s = batch_interval_s
        self._batch_max = batch_max
        self._host_options = dict(host_options)
        self._hosts: list[_Host] = []
        self._host_names = itertools.count(1)
        self._call_ids = itertools.count(1)
        self._provider: tuple[ProviderConfig, dict[str, str]] | None = None
        self._cache_run: RunContext | None = None
        self._config: tuple[RunContext, Any] | None = None

    @property
    def hosts(self) -> list[Any]:
        """The live host actors (Ray actor handles), e.g. to watch or kill them."""
        return [h.actor for h in self._hosts if not h.dead]

    def _pick_host(self, run: RunContext) -> _Host:
        live = [h for h in self._hosts if not h.dead]
        while len(live) < self._want_hosts:
            live.append(self._start_host(run))
        return min(live, key=lambda h: h.active)

    def _start_host(self, run: RunContext) -> _Host:
        import ray

        _, env_vars = self._provider_config(run)
        name = f"h{next(self._host_names)}"
        options: dict[str, Any] = {
            "name": f"trio-agents-{run.run_id}-{name}",
            "max_concurrency": self._max_concurrency,
            "num_cpus": 0,
            "max_restarts": 0,
            **self._host_options,
        }
        if env_vars:
            # Keys reach the worker through Ray's runtime environment, never in a call's
            # arguments, an event or a log line.
            runtime_env = dict(options.pop("runtime_env", None) or {})
            runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **env_vars}
            options["runtime_env"] = runtime_env
        actor = ray.remote(RayHost).options(**options).remote(name)
        host = _Host(name, actor)
        self._hosts.append(host)
        return host

    def _provider_config(self, run: RunContext) -> tuple[ProviderConfig, dict[str, str]]:
        if self._provider is not None and self._cache_run is run:
            return self._provider
        from runtime.providers._scripted import ScriptedProvider

        provider = run.provider
        env_vars: dict[str, str] = {}
        if isinstance(provider, ScriptedProvider):
            config = ProviderConfig(kind="scripted", name="scripted", scenario=provider.scenario)
        elif provider.name in _HTTP_WIRING and hasattr(provider, "base_url"):
            key_var, url_var = _HTTP_WIRING[provider.name]
            key = getattr(provider, "api_key", None)
            if key:
                env_vars[key_var] = key
            retry = getattr(provider, "retry", None)
            config = ProviderConfig(
                kind="http",
                name=provider.name,
                model=getattr(provider, "model", None),
                base_url=provider.base_url,
                url_var=url_var,
                key_var=key_var,
                max_retries=getattr(retry, "max_retries", 4),
                call_deadline_s=getattr(provider, "call_deadline_s", 600.0),
            )
        else:
            config = ProviderConfig(kind="object", name=provider.name, provider=provider)
        self._provider, self._cache_run = (config, env_vars), run
        return config, env_vars

    def _config_ref(self, run: RunContext) -> Any:
        """The run's :class:`RunConfig` in Ray's object store (put once, resolved once per
        host)."""
        import ray

        if self._config is not None and self._config[0] is run:
            return self._config[1]
        config, _ = self._provider_config(run)
        settings = RunConfig(
            run_id=run.run_id,
            agent_types=tuple(run.agent_types.values()),
            provider=config,
            tools=tuple(run.tools.values()),
            tool_limits=run.tool_limits,
            limits=run.limits,
            workspace=str(run.workspace),
            env=dict(run.env),
            policy=run.broker.policy,
            batch_interval_s=self._batch_interval_s,
            batch_max=self._batch_max,
            system_prompt=run.system_prompt,
            sandbox=run.sandbox,
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

    async def run_subtree(self, run: RunContext, spec: AgentSpec) -> AgentOutcome:
        """Run *spec*'s whole subtree on a host actor; its events go into ``run.bus``.

        Returns the root agent's outcome: as the host reported it, or ``failed`` (with the
        reason) when the host was lost or could not run it.

        Cancellation: cancels the subtree on the worker and keeps forwarding its events (for up
        to ``run.limits.finish_grace_s``) until its root has reported ``cancelled``, then
        re-raises; the parent's call ends ``cancelled``.
        """
        host = self._pick_host(run)
        call_id = f"{host.name}.{next(self._call_ids)}"
        remote_budget = None
        if spec.budget is not None and spec.budget.seconds is not None:
            # Token and tool-call budgets of the root are kept HERE, by the run's budget
            # layer watching the forwarded events; only the wall-clock deadline goes along
            # (agent_main applies it), so nothing is cancelled twice.
            remote_budget = attrs.evolve(spec.budget, tokens=None, tool_calls=None)
        call = SubtreeCall(
            call_id=call_id,
            id_prefix=f"{call_id}.",
            spec=attrs.evolve(spec, budget=remote_budget),
            config=self._config_ref(run),
            max_agents=max(1, run.limits.max_agents - run.agents_started),
        )
        run.budget.set_budget(spec.agent_id, spec.budget)
        stream = _Stream(self, run, spec, host, call)
        host.active += 1
        try:
            outcome = await stream.serve()
        finally:
            host.active -= 1
        return outcome or failed_outcome(spec, f"ray host {host.name} reported no outcome")

    def _lost(self, host: _Host) -> None:
        if not host.dead:
            host.dead = True
            _log.warning("ray host lost", host=host.name)

    def _kill_all(self) -> None:
        import ray

        for host in self._hosts:
            if not host.dead:
                with contextlib.suppress(Exception):  # already gone: nothing to clean up
                    ray.kill(host.actor)
                host.dead = True


class _Stream:
    """One remote subtree seen from the parent: the pump, the proxies, the synthesised ends."""

    def __init__(
        self,
        placement: RayPlacement,
        run: RunContext,
        spec: AgentSpec,
        host: _Host,
        call: SubtreeCall,
    ) -> None:
        self.placement = placement
        self.run = run
        self.spec = spec
        self.host = host
        self.call = call
        self._gen: Any = None
        self._pending: concurrent.futures.Future[Batch | None] | None = None
        self._open: dict[str, _Open] = {}
        self._asks: dict[str, _Ask] = {}
        self._root_finished: AgentFinished | None = None
        self.outcome: AgentOutcome | None = None
        self.ended = False
        self._nursery: trio.Nursery | None = None

    # -- control --------------------------------------------------------------------------
    def send_cancel(self, node_id: str, reason: str, by: str | None) -> None:
        """Ask the host to cancel one node of this subtree (fire and forget)."""
        if self.ended:
            return
        try:
            self.host.actor.cancel.remote(self.call.call_id, node_id, reason, by)
        except Exception as exc:  # a dead host: the stream reports the loss
            _log.warning("cancel not sent", node=node_id, error=repr(exc))

    # -- the pump ---------------------------------------------------------------------------
    async def serve(self) -> AgentOutcome | None:
        """Run the subtree to its end; see :meth:`RayPlacement.run_subtree`."""
        run, spec = self.run, self.spec
        root_node = run.registry.register(
            spec.agent_id,
            _RemoteScope(self, spec.agent_id),
            parent_id=spec.parent_tool_use_id,
            data=Owner(spec.agent_id, spec.parent_tool_use_id),
        )
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                try:
                    if self._start():
                        await self._pump()
                finally:
                    if not self.ended:
                        await self._finish_cancelled(root_node)
                    for ask in self._asks.values():
                        ask.scope.cancel(reason="the subtree has ended")
        finally:
            run.registry.unregister(spec.agent_id)
        return self.outcome

    def _start(self) -> bool:
        try:
            self._gen = self.host.actor.run_subtree.options(num_returns="streaming").remote(
                self.call
            )
        except Exception as exc:  # e.g. a provider or tool Ray cannot pickle
            error = f"cannot send it to Ray: {type(exc).__name__}: {exc}"
            _log.warning("subtree not sent", call_id=self.call.call_id, error=error)
            self.outcome = failed_outcome(self.spec, error)
            self.ended = True
            return False
        return True

    async def _pump(self) -> None:
        while not self.ended:
            if self._pending is None:
                # Backpressure, as for local agents: a full block subscriber (a --json pipe
                # whose reader is slow) holds the next batch back, and so the remote subtree.
                # Before asking for it: a cancel here loses nothing.
                await self.run.bus.wait_for_room()
                self._pending = self.placement._bridge.submit(_next_item(self._gen))
            try:
                batch = await wait_future(self._pending)
            except Exception as exc:
                self._pending = None
                await self._lose(exc)
                return
            self._pending = None
            if batch is None:
                # The stream ended without its final item: the host went away mid-call.
                await self._lose(None)
                return
            await self._take(batch)

    async def _take(self, batch: Batch) -> None:
        # A batch is taken whole even when the call is being cancelled: its events are facts
        # that already happened on the worker. The waits inside are each bounded.
        with trio.CancelScope(shield=True):
            for event in batch.events:
                await self._forward(event)
            if batch.final:
                if batch.error is not None:
                    await self._synthesise(batch.error, agent_status="failed", tool_status="error")
                self.outcome = batch.outcome or self._outcome_from_events(batch.error)
                self.ended = True

    async def _forward(self, event: Event) -> None:
        run = self.run
        if isinstance(event, PermissionAsked):
            self._ask(event)
            return
        if isinstance(event, PermissionWithdrawn):
            await self._withdraw(event.question_id)
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
            run.agents_started += 1
            run.running_agents += 1
            run.peak_running_agents = max(run.peak_running_agents, run.running_agents)
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
        elif isinstance(event, ToolFinished):
            if self._open.pop(event.tool_use_id, None) is not None:
                run.registry.unregister(event.tool_use_id)
        elif isinstance(event, AgentFinished):
            assert event.agent_id is not None
            if self._open.pop(event.agent_id, None) is not None:
                run.running_agents -= 1
                if event.agent_id != self.spec.agent_id:
                    run.registry.unregister(event.agent_id)
            if event.agent_id == self.spec.agent_id:
                self._root_finished = event
        run.bus.forward(event)

    def _register(self, node_id: str, parent_id: str | None, owner: Owner) -> None:
        try:
            self.run.registry.register(
                node_id, _RemoteScope(self, node_id), parent_id=parent_id, data=owner
            )
        except ValueError:
            # Ids are prefixed per call, so only a model repeating a tool-call id gets here.
            _log.warning("remote node id already live; it cannot be cancelled by id", node=node_id)

    # -- permissions ------------------------------------------------------------------------
    def _ask(self, event: PermissionAsked) -> None:
        assert self._nursery is not None
        ask = _Ask(trio.CancelScope())
        self._asks[event.question_id] = ask
        self._nursery.start_soon(self._ask_parent, event, ask)

    async def _ask_parent(self, event: PermissionAsked, ask: _Ask) -> None:
        run = self.run
        try:
            with ask.scope:
                tool = run.tools.get(event.name)
                if tool is None:
                    granted, reason = False, f"tool {event.name!r} is unknown to the parent run"
                else:
                    assert event.agent_id is not None
                    granted, reason = await run.broker.check(
                        tool,
                        event.input,
                        agent_id=event.agent_id,
                        parent_tool_use_id=event.parent_tool_use_id,
                        tool_use_id=event.tool_use_id,
                        summary=event.summary,
                    )
                with contextlib.suppress(Exception):  # a dead host: the stream reports it
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
        with trio.move_on_after(self.run.limits.finish_grace_s, shield=True):
            await ask.done.wait()

    # -- endings ----------------------------------------------------------------------------
    async def _finish_cancelled(self, root_node: Any) -> None:
        """The local call was cancelled (or the pump failed): stop the subtree on the worker
        and forward its last events; synthesise them if the worker does not answer."""
        reason, by = Registry.cancel_reason(root_node)
        reason = reason or "the run is over"
        boundary = self.call.spec.parent_tool_use_id or f"{self.call.call_id}.boundary"
        self.send_cancel(boundary, reason, by or "runtime")
        grace = self.run.limits.finish_grace_s
        with trio.move_on_after(grace, shield=True):
            await self._pump()
        if self.ended:
            return
        import ray

        with contextlib.suppress(Exception):  # nothing left to cancel
            ray.cancel(self._gen)
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        with trio.move_on_after(grace, shield=True):
            await self._synthesise(
                f"cancelled: {reason} (the Ray worker did not confirm within {grace:g} s)",
                agent_status="cancelled",
                tool_status="cancelled",
            )
        self.outcome = self._outcome_from_events(f"cancelled: {reason}", status="cancelled")
        self.ended = True

    async def _lose(self, exc: BaseException | None) -> None:
        """The host went away: end every open remote node ``failed`` with the reason."""
        import ray

        if exc is None or isinstance(exc, ray.exceptions.RayActorError):
            self.placement._lost(self.host)
        reason = _loss_reason(self.host.name, exc)
        with trio.move_on_after(self.run.limits.finish_grace_s, shield=True):
            await self._synthesise(reason, agent_status="failed", tool_status="error")
        self.outcome = self._outcome_from_events(reason)
        self.ended = True

    async def _synthesise(
        self, reason: str, *, agent_status: AgentStatus, tool_status: str
    ) -> None:
        """Emit the missing ``*_finished`` events, children before parents (reverse start
        order is exactly that: a node starts after its parent and its parent's earlier
        children)."""
        for ask in list(self._asks.values()):
            ask.scope.cancel(reason=reason)
            with trio.move_on_after(self.run.limits.finish_grace_s):
                await ask.done.wait()
        now = trio.current_time()
        for node_id, opened in reversed(list(self._open.items())):
            start = opened.event
            if isinstance(start, ToolStarted):
                self.run.registry.unregister(node_id)
                await self.run.bus.emit(
                    ToolFinished,
                    agent_id=start.agent_id,
                    parent_tool_use_id=start.parent_tool_use_id,
                    tool_use_id=start.tool_use_id,
                    name=start.name,
                    status=tool_status,
                    output=reason,
                    duration_s=now - opened.t0,
                )
            else:
                if node_id != self.spec.agent_id:
                    self.run.registry.unregister(node_id)
                self.run.running_agents -= 1
                finished = await self.run.bus.emit(
                    AgentFinished,
                    agent_id=start.agent_id,
                    parent_tool_use_id=start.parent_tool_use_id,
                    status=agent_status,
                    result=None,
                    error=reason,
                    turns=opened.turns,
                    input_tokens=opened.input_tokens,
                    output_tokens=opened.output_tokens,
                    duration_s=now - opened.t0,
                )
                if node_id == self.spec.agent_id:
                    self._root_finished = finished
            del self._open[node_id]

    def _outcome_from_events(
        self, error: str | None, *, status: AgentStatus = "failed"
    ) -> AgentOutcome:
        fin = self._root_finished
        if fin is None:
            return failed_outcome(
                self.spec, error or "the Ray host reported no outcome", status=status
            )
        base = failed_outcome(self.spec, fin.error or error or "")
        return attrs.evolve(
            base,
            status=fin.status,
            result=fin.result,
            error=fin.error,
            turns=fin.turns,
            input_tokens=fin.input_tokens,
            output_tokens=fin.output_tokens,
            duration_s=fin.duration_s,
        )


def _loss_reason(host: str, exc: BaseException | None) -> str:
    if exc is None:
        return f"ray host {host} lost: its stream ended early (worker killed or crashed)"
    first = str(exc).strip().splitlines()
    detail = first[0] if first else ""
    return f"ray host {host} lost: {type(exc).__name__}: {detail}".rstrip(": ")


# -- the context manager ----------------------------------------------------------------------


@asynccontextmanager
async def open_ray_placement(
    address: str | None = None,
    *,
    hosts: int | None = None,
    max_concurrency: int = 10_000,
    batch_interval_s: float = 0.01,
    batch_max: int = 512,
    num_cpus: int | None = None,
    host_options: Mapping[str, Any] | None = None,
) -> AsyncGenerator[RayPlacement, None]:
    """Connect to Ray (or start a local cluster) and yield the ``ray`` placement of one run.

    Args:
        address: a Ray cluster (``ray://…`` or ``host:port``); default ``RAY_ADDRESS``; with
            neither, a local cluster on this machine is started for the run and stopped after it.
            If Ray is already initialised in this process (a test session, a notebook), that
            connection is used as it is and left open.
        hosts: host actors to spread subtrees over (default ``TRIO_AGENTS_RAY_HOSTS`` or 1);
            each is one worker process with one trio loop.
        max_concurrency: concurrent calls per host actor (Ray's default for async actors is
            1,000; each open subtree holds one).
        batch_interval_s, batch_max: a batch of events leaves the worker this long after its
            first event, or once it holds this many.
        num_cpus: CPUs of a local cluster (default: this machine's, at most 4).
        host_options: extra ``.options()`` for the host actors (``resources``,
            ``scheduling_strategy``, ``runtime_env``, …).

    Raises:
        ConfigError: Ray is not installed, or the cluster cannot be reached or started.

    Cancellation: starting a local cluster (a few seconds) is not cancellable. On exit the
    run's host actors are killed (every subtree has ended by then), and a cluster started here
    is shut down.
    """
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(
            "agent types placed on 'ray' need Ray: pip install 'trio-agents[ray]'"
        ) from exc
    address = address or os.environ.get("RAY_ADDRESS") or None
    hosts = hosts or int(os.environ.get("TRIO_AGENTS_RAY_HOSTS", "1") or 1)
    bridge = _Bridge()
    bridge.start()
    owned = False
    try:
        if not ray.is_initialized():
            owned = True
            await bridge.call(lambda: _init_ray(ray, address, num_cpus))
        placement = RayPlacement(
            bridge,
            hosts=max(1, hosts),
            max_concurrency=max_concurrency,
            batch_interval_s=batch_interval_s,
            batch_max=batch_max,
            host_options=host_options or {},
        )
        try:
            yield placement
        finally:
            placement._kill_all()
    finally:
        try:
            if owned and ray.is_initialized():
                await bridge.call(ray.shutdown)
        finally:
            with trio.CancelScope(shield=True):
                await bridge.stop()


def _init_ray(ray_mod: Any, address: str | None, num_cpus: int | None) -> None:
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
                num_cpus=num_cpus or min(os.cpu_count() or 1, 4),
                include_dashboard=False,
                object_store_memory=256 * 1024 * 1024,
                **kwargs,
            )
    except Exception as exc:  # Ray raises many kinds; the user needs one clear line
        where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
        raise ConfigError(f"cannot start or reach {where}: {type(exc).__name__}: {exc}") from exc
