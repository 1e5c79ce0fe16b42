"""The public runtime: :func:`open_runtime` owns one run — its root nursery, bus, sinks and agents.

::

    async with open_runtime(scenario="demo.json", workspace="work") as rt:
        async with rt.subscribe() as events:   # optional: a live consumer
            handle = await rt.start("Summarise the repo")
            outcome = await handle.wait()
"""

from __future__ import annotations

import datetime
import os
import secrets as _secrets
from collections.abc import AsyncGenerator, Callable, Generator, Iterable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import attrs
import structlog
import trio

from runtime.actors import ActorHandle, Registry, start_actor
from runtime.core._agent_types import AgentType, AgentTypes, agent_types_from_scenario
from runtime.core._approvals import PendingRequest, PermissionBroker
from runtime.core._budget import BudgetLayer
from runtime.core._bus import EventBus, Policy, Subscription, Tap
from runtime.core._context import Owner, RunContext
from runtime.core._errors import ConfigError
from runtime.core._events import AgentStatus, CancelBy, CancelRequested, RunFinished, RunStarted
from runtime.core._limits import Limits
from runtime.core._loop import AgentOutcome, AgentSpec, agent_main
from runtime.core._messages import Message
from runtime.core._provider import Provider
from runtime.providers._scenario import Scenario
from runtime.providers._scripted import ScriptedProvider
from runtime.trace._sinks import JsonlSink, PipeSink, open_pipe_writer

if TYPE_CHECKING:
    from tools import Tool, ToolLimits

_CANCEL_BY = ("user", "control", "budget", "runtime")
DEFAULT_TRACE_DIR = Path(".trio-agents") / "traces"


def new_run_id() -> str:
    """A run id that sorts by start time: ``20261129-193051-1a2b3c``."""
    now = datetime.datetime.now(datetime.UTC)
    return f"{now:%Y%m%d-%H%M%S}-{_secrets.token_hex(3)}"


@attrs.define(eq=False)
class AgentHandle:
    """A root agent started by :meth:`Runtime.start`."""

    agent_id: str
    _runtime: Runtime
    _actor: ActorHandle[Any]
    _spec: AgentSpec

    @property
    def done(self) -> bool:
        return self._actor.done

    async def wait(self) -> AgentOutcome:
        """Wait for the agent to end and return its outcome.

        Cancellation: a checkpoint; cancelling the wait does not cancel the agent.
        """
        await self._actor.wait()
        return self._spec.box[0]

    async def cancel(self, reason: str = "cancelled by user", *, by: CancelBy = "user") -> bool:
        """Cancel this agent and its whole subtree (see :meth:`Runtime.cancel`)."""
        return await self._runtime.cancel(self.agent_id, reason, by=by)

    def send(self, text: str) -> bool:
        """Queue a user message for the agent's next turn (see :meth:`Runtime.send_message`)."""
        return self._runtime.send_message(self.agent_id, text)


class Runtime:
    """One run. Made by :func:`open_runtime`; every method must be called inside its block."""

    def __init__(self, run: RunContext, nursery: trio.Nursery, trace_path: Path | None) -> None:
        self._run = run
        self._nursery = nursery
        self.trace_path = trace_path
        self._roots: list[AgentHandle] = []
        self._closing = False

    @property
    def run_id(self) -> str:
        return self._run.run_id

    @property
    def agent_types(self) -> AgentTypes:
        return self._run.agent_types

    @property
    def workspace(self) -> Path:
        return self._run.workspace

    @property
    def tools(self) -> Mapping[str, Tool]:
        return self._run.tools

    @property
    def bus(self) -> EventBus:
        return self._run.bus

    @property
    def peak_running_agents(self) -> int:
        """The most agents that were running at once so far."""
        return self._run.peak_running_agents

    # -- agents ---------------------------------------------------------------
    async def start(
        self,
        prompt: str,
        *,
        agent_type: str = "main",
        history: Iterable[Message] = (),
    ) -> AgentHandle:
        """Start a root agent on *prompt* and return its handle once it runs.

        Args:
            history: earlier messages it continues from (a chat session).

        Raises:
            ConfigError: unknown agent type.

        Cancellation: a checkpoint; if cancelled, no agent was started.
        """
        if self._closing:
            raise ConfigError("the runtime is closing; no new agents")
        run = self._run
        spec = AgentSpec(
            agent_id=run.new_agent_id(),
            agent_type=run.agent_types.lookup(agent_type),
            prompt=prompt,
            depth=0,
            history=tuple(history),
        )
        budget = spec.agent_type.budget
        if budget is not None and not budget.empty:
            spec = attrs.evolve(spec, budget=budget)
        run.budget.set_budget(spec.agent_id, spec.budget)
        actor = await start_actor(
            self._nursery,
            lambda ctx: agent_main(run, spec, ctx),
            actor_id=spec.agent_id,
            registry=run.registry,
            data=Owner(spec.agent_id, None),
            mailbox_size=run.limits.mailbox_size,
        )
        handle = AgentHandle(spec.agent_id, self, actor, spec)
        # Keep running roots and the last one (its status is the run's); a long chat session
        # must not keep every earlier turn's whole history alive here.
        self._roots = [h for h in self._roots if not h.done]
        self._roots.append(handle)
        return handle

    async def run(
        self, prompt: str, *, agent_type: str = "main", history: Iterable[Message] = ()
    ) -> AgentOutcome:
        """Start a root agent and wait for its outcome.

        Cancellation: cancels the agent (it still reports ``cancelled``) and re-raises.
        """
        handle = await self.start(prompt, agent_type=agent_type, history=history)
        try:
            return await handle.wait()
        finally:
            if not handle.done:
                with trio.move_on_after(self._run.limits.finish_grace_s, shield=True):
                    await handle.cancel("the caller was cancelled", by="runtime")
                    await handle.wait()

    # -- control ---------------------------------------------------------------
    async def cancel(
        self, node_id: str, reason: str = "cancelled by user", *, by: CancelBy = "user"
    ) -> bool:
        """Cancel exactly the subtree under *node_id* (an agent id or a tool_use_id).

        Emits ``cancel_requested`` as the agent owning the node, then cancels its scope: every
        agent in it ends ``cancelled`` (``budget_exceeded`` when *by* is ``budget``), every open
        tool call ``cancelled``; a cancelled ``agent`` call tells its parent model
        ``cancelled: <reason>`` and the parent carries on. Cancelling a root agent ends it.

        Returns:
            ``False``, changing nothing, when the id is unknown, not yet announced (no
            ``agent_started`` yet) or already finished or cancelled.

        Cancellation: a checkpoint before anything happens; the cancel itself is not
        interruptible, and never waits for a slow subscriber (an abort must not hang on one).
        """
        if by not in _CANCEL_BY:
            raise ValueError(f"by must be one of {', '.join(_CANCEL_BY)}")
        await trio.lowlevel.checkpoint()
        # From here to the end nothing yields, so the node cannot finish in between: the
        # cancel_requested event always precedes the node's end.
        node = self._run.registry.get(node_id)
        if node is None or node.cancel_reason is not None:
            return False
        owner: Owner = node.data
        if owner.agent_id == node_id and node_id not in self._run.announced:
            return False
        self._run.bus.emit_nowait(
            CancelRequested,
            agent_id=owner.agent_id,
            parent_tool_use_id=owner.parent_tool_use_id,
            target=node_id,
            reason=reason,
            by=by,
        )
        return self._run.registry.cancel(node_id, reason, by=by)

    async def abort(self, reason: str = "run aborted by user", *, by: CancelBy = "user") -> None:
        """Cancel every running root agent (and so everything)."""
        for handle in list(self._roots):
            if not handle.done:
                await self.cancel(handle.agent_id, reason, by=by)

    def send_message(self, agent_id: str, text: str) -> bool:
        """Queue *text* for a running agent; it is delivered at its next turn boundary as a
        ``user_message`` event and a user message in its history.

        Returns:
            ``False`` when the agent is unknown, finished, or its mailbox is full.
        """
        mailbox = self._run.mailboxes.get(agent_id)
        if mailbox is None:
            return False
        try:
            mailbox.send_nowait(text)
        except (trio.WouldBlock, trio.ClosedResourceError):
            return False
        return True

    def resolve_permission(
        self, request_id: str, granted: bool, *, remember: bool = False, reason: str | None = None
    ) -> bool:
        """Answer a ``permission_requested`` event.

        Args:
            remember: with *granted*, allow calls like this one for the rest of the run.

        Returns:
            ``False`` when no such request is waiting.
        """
        return self._run.broker.resolve(request_id, granted, remember=remember, reason=reason)

    def pending_permissions(self) -> list[PendingRequest]:
        """Permission requests waiting for an answer now."""
        return self._run.broker.pending()

    @contextmanager
    def permission_answerer(self) -> Generator[None, None, None]:
        """Declare that someone answers permission requests while the block runs; without one,
        a call that must ask is denied at once."""
        with self._run.broker.answerer():
            yield

    # -- watching --------------------------------------------------------------
    def subscribe(self, *, buffer: int = 10_000, policy: Policy = "lag") -> Subscription:
        """A subscription to the run's flat stream from now on; use it as a context manager.

        Args:
            policy: ``lag`` (default): a reader more than *buffer* events behind is dropped with
                :class:`SubscriberLagged` and never slows the agents; ``block``: the agents wait
                for this reader (backpressure).
        """
        return self._run.bus.subscribe(buffer=buffer, policy=policy)

    def add_tap(self, tap: Tap) -> None:
        """Call *tap* synchronously on every later event (cheap observers only)."""
        self._run.bus.add_tap(tap)

    def remove_tap(self, tap: Tap) -> None:
        self._run.bus.remove_tap(tap)

    async def _wait_roots(self) -> None:
        # Roots may be started while we wait (from another task): wait until none is running.
        while running := [h for h in self._roots if not h.done]:
            await running[0]._actor.wait()

    def _final_status(self) -> AgentStatus:
        for handle in reversed(self._roots):
            if handle._spec.box:
                return handle._spec.box[0].status
        return "cancelled" if self._roots else "completed"


def _default_tools() -> list[Tool]:
    from tools import builtin_tools  # tools imports runtime modules

    return builtin_tools()


@asynccontextmanager
async def open_runtime(
    provider: Provider | str | None = None,
    *,
    scenario: Scenario | str | os.PathLike[str] | Mapping[str, Any] | None = None,
    model: str | None = None,
    agent_types: Iterable[AgentType] = (),
    tools: Iterable[Tool] | None = None,
    extra_tools: Iterable[Tool] = (),
    workspace: str | os.PathLike[str] = ".",
    trace: str | os.PathLike[str] | bool = True,
    json_out: BinaryIO | None = None,
    limits: Limits | None = None,
    tool_limits: ToolLimits | None = None,
    permission_mode: str = "deny",
    allow: Iterable[str] = (),
    deny: Iterable[str] = (),
    permission_timeout_s: float = 300.0,
    env: Mapping[str, str] | None = None,
    allow_env: Iterable[str] = (),
    run_id: str | None = None,
    on_event: Callable[[Any], None] | None = None,
    ray_address: str | None = None,
) -> AsyncGenerator[Runtime, None]:
    """Open a run: its bus, trace file, provider and root nursery. An async context manager::

        async with open_runtime("anthropic", workspace="repo") as rt:
            outcome = await rt.run("Find the TODOs")

    Args:
        provider: a :class:`Provider`, or ``"scripted"`` / ``"openai"`` / ``"anthropic"``.
            Default: ``scripted`` when a *scenario* is given.
        scenario: for the scripted provider: a :class:`Scenario`, a path, or a decoded object.
        model: the model to ask for (default: the provider's own default).
        agent_types: more agent types, beside the built-in ones (a type of the same name
            replaces one).
        tools: replaces the built-in tools; *extra_tools* adds to them.
        workspace: the folder the file tools and ``bash`` work in (they cannot leave it).
        trace: a JSONL path, ``True`` for a new file under ``.trio-agents/traces/``, or ``False``.
        json_out: also write every event as JSONL to this binary stream (``--json``).
        limits: run-wide limits (turns, depth, parallel sub-agents, …; default :class:`Limits`).
        tool_limits: the tools' own limits (timeouts, output sizes; default ``ToolLimits()``).
        permission_mode: ``ask``, ``auto-edit``, ``allow-all`` or ``deny``; *allow* / *deny*
            are rules such as ``bash(git status*)``.
        permission_timeout_s: how long a permission question waits for an answer.
        env: the environment tools see (default ``os.environ``), secrets removed unless named
            in *allow_env*.
        run_id: the run's id (default: a new one, sortable by time); names the default trace.
        on_event: a tap installed before ``run_started`` (sees every event of the run).
        ray_address: the Ray cluster for agent types placed on ``ray`` (default
            ``RAY_ADDRESS``; with neither, a local cluster is started for the run).

    On leaving the block, running root agents are awaited (leave by cancelling to stop them);
    then ``run_finished`` is emitted and the trace closed — also when the block raises or is
    cancelled, in which case every running node first ends ``cancelled``.
    """
    from runtime.core._permissions import PermissionPolicy
    from runtime.core._secrets import filter_env, secret_values
    from tools import ToolLimits as _ToolLimits

    limits = limits or Limits()
    t0 = trio.current_time()
    run_id = run_id or new_run_id()
    # Setting up a run touches the disk a few times before anything runs; that is fine.
    ws = Path(workspace).expanduser()  # noqa: ASYNC240
    if not ws.is_dir():
        raise ConfigError(f"workspace {str(ws)!r} is not a folder")
    ws = ws.resolve()
    scen: Scenario | None = None
    if scenario is not None:
        if isinstance(scenario, Scenario):
            scen = scenario
        elif isinstance(scenario, Mapping):
            scen = Scenario.from_obj(dict(scenario))
        else:
            scen = Scenario.load(scenario)
    if provider is None:
        provider = "scripted" if scen is not None else "openai"
    types = AgentTypes()
    if scen is not None:
        for t in agent_types_from_scenario(scen):
            types.add(t)
    for t in agent_types:
        types.add(t)
    tool_list = list(_default_tools() if tools is None else tools) + list(extra_tools)
    tool_map: dict[str, Tool] = {}
    for tool in tool_list:
        if tool.name in tool_map:
            raise ConfigError(f"two tools are named {tool.name!r}")
        tool_map[tool.name] = tool
    for t in types.values():
        for name in t.tools or ():
            if name not in tool_map:
                raise ConfigError(
                    f"agent type {t.name!r} names unknown tool {name!r}; "
                    f"known tools: {', '.join(sorted(tool_map))}"
                )
    policy = PermissionPolicy(
        mode=permission_mode, allow=tuple(allow), deny=tuple(deny), workspace=ws
    )
    base_env = dict(os.environ if env is None else env)
    allow_env = tuple(allow_env)
    run_env = filter_env(base_env, allow_env)
    secret_list = tuple(secret_values(base_env))
    trace_path: Path | None = None
    if trace is True:
        trace_path = DEFAULT_TRACE_DIR / f"{run_id}.jsonl"
    elif trace is not False:
        trace_path = Path(trace)

    async with AsyncExitStack() as stack:
        if isinstance(provider, str):
            if provider == "scripted":
                if scen is None:
                    raise ConfigError("the scripted provider needs a scenario (--scenario FILE)")
                prov: Provider = ScriptedProvider(scen)
            else:
                from runtime.providers import open_provider  # httpx only when needed

                prov = await stack.enter_async_context(
                    open_provider(provider, model=model, env=base_env)
                )
        else:
            prov = provider
        placements: dict[str, Any] = {}
        if any(t.placement == "ray" for t in types.values()):
            from runtime.cluster._placement import (
                open_ray_placement,  # Ray is heavy: only for runs that use it
            )

            placements["ray"] = await stack.enter_async_context(
                open_ray_placement(address=ray_address or base_env.get("RAY_ADDRESS"))
            )
        bus = EventBus(run_id)
        sinks: list[JsonlSink] = []
        if trace_path is not None:
            try:
                trace_path.parent.mkdir(parents=True, exist_ok=True)
                trace_file = trace_path.open("wb")  # noqa: ASYNC230 - once, at start-up
            except OSError as exc:
                raise ConfigError(
                    f"cannot write trace {str(trace_path)!r}: {exc.strerror}"
                ) from exc
            sinks.append(JsonlSink(trace_file, name="trace", close_file=True))
        writers: list[JsonlSink | PipeSink] = []
        json_pipe = open_pipe_writer(json_out) if json_out is not None else None
        if json_pipe is not None:
            # A subscriber, not a tap: a stalled reader makes the agents wait, not the loop.
            pipe_sink = PipeSink(json_pipe, bus, name="json")
            stack.callback(pipe_sink.close)  # owns the descriptor from here on
            writers.append(pipe_sink)
        elif json_out is not None:
            sinks.append(JsonlSink(json_out, name="json", interval_s=0.005))
        for sink in sinks:
            # Sinks first: they see every event even if a user's tap misbehaves; and they are
            # closed (flushed) by the exit stack whatever happens below.
            bus.add_tap(sink)
            stack.callback(sink.close)
        writers += sinks
        if on_event is not None:
            bus.add_tap(on_event)
        registry = Registry()
        runtime_box: list[Runtime] = []

        async def budget_cancel(agent_id: str, reason: str) -> bool:
            return await runtime_box[0].cancel(agent_id, reason, by="budget")

        budget = BudgetLayer(budget_cancel)
        bus.add_tap(budget)
        run = RunContext(
            run_id=run_id,
            bus=bus,
            registry=registry,
            provider=prov,
            model=model or getattr(prov, "model", None) or "scripted",
            agent_types=types,
            tools=tool_map,
            tool_limits=tool_limits or _ToolLimits(max_output_chars=limits.max_tool_output_chars),
            limits=limits,
            workspace=ws,
            env=run_env,
            secrets=secret_list,
            broker=PermissionBroker(bus, policy, timeout_s=permission_timeout_s),
            budget=budget,
            limiter=trio.CapacityLimiter(limits.max_parallel),
            log=structlog.get_logger("trio_agents").bind(run_id=run_id),
            placements=placements,
        )
        bus.add_tap(run.track_announced)
        config = {
            **prov.describe(),
            "provider": prov.name,
            "model": run.model,
            "workspace": str(ws),
            "permission_mode": permission_mode,
            "limits": limits.public(),
            "agent_types": sorted(types),
        }
        try:
            bus.emit_nowait(
                RunStarted,
                agent_id=None,
                parent_tool_use_id=None,
                version=_version(),
                config=config,
            )
            async with trio.open_nursery() as nursery:
                for writer in writers:
                    nursery.start_soon(writer.run)
                nursery.start_soon(budget.run)
                rt = Runtime(run, nursery, trace_path)
                runtime_box.append(rt)
                try:
                    yield rt
                    await rt._wait_roots()
                finally:
                    rt._closing = True
                    nursery.cancel_scope.cancel(reason="the run is over")
        finally:
            status = runtime_box[0]._final_status() if runtime_box else "cancelled"
            if not bus.closed:
                try:
                    bus.emit_nowait(
                        RunFinished,
                        agent_id=None,
                        parent_tool_use_id=None,
                        status=status,
                        duration_s=trio.current_time() - t0,
                    )
                finally:
                    bus.close()


def _version() -> str:
    from runtime import __version__

    return __version__
