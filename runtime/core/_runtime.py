"""The handle on a run: :class:`Runtime` (start, cancel, message, watch) and :class:`AgentHandle`.

"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, final

import attrs
import trio

from ._agent import AgentOutcome, AgentSpec
from ._agent_types import AgentTypes
from ._approvals import PendingRequest
from ._bus import EventBus, Policy, Subscription, Tap
from ._compaction import agent_window
from ._context import Owner, RunContext, cancel_node, stop_node
from ._elicitation import ElicitAction, PendingElicitation
from ._errors import ConfigError
from ._events import AgentStatus, CancelBy, MessageQueued
from ._limits import Budget, Limits
from ._loop import run_agent_actor
from ._messages import Message
from ._output import output_spec

if TYPE_CHECKING:
    from ._tool import Tool

__all__ = ["AgentHandle", "Runtime"]

_CANCEL_BY = ("user", "control", "budget", "runtime")


@final
@attrs.define(eq=False)
class AgentHandle:
    """A root agent started by :meth:`Runtime.start`. Made by the runtime, not by users."""

    agent_id: str
    _runtime: Runtime
    _done: trio.Event = attrs.field(factory=trio.Event, init=False)
    _outcome: AgentOutcome | None = attrs.field(default=None, init=False)
    # Started with start_soon (Runtime.run): whether its task has begun, and whether its
    # caller gave up before it did (then it never starts).
    _begun: bool = attrs.field(default=False, init=False)
    _withdrawn: bool = attrs.field(default=False, init=False)

    @property
    def done(self) -> bool:
        """Whether the agent has ended (and its ``agent_finished`` was emitted)."""
        return self._done.is_set()

    @property
    def outcome(self) -> AgentOutcome | None:
        """The outcome once the agent has ended, else ``None``."""
        return self._outcome

    async def wait(self) -> AgentOutcome:
        """Wait for the agent to end and return its outcome (its actor's exit, as the runtime
        supervised it).

        Cancellation: a checkpoint; cancelling the wait does not cancel the agent.
        """
        await self._done.wait()
        assert self._outcome is not None
        return self._outcome

    async def cancel(self, reason: str = "cancelled by user", *, by: CancelBy = "user") -> bool:
        """Cancel this agent and its whole subtree (see :meth:`Runtime.cancel`)."""
        return await self._runtime.cancel(self.agent_id, reason, by=by)

    def send(self, text: str) -> bool:
        """Queue a user message for the agent's next turn (see :meth:`Runtime.send_message`)."""
        return self._runtime.send_message(self.agent_id, text)


# How often a cancelled caller of Runtime.run asks again to cancel a root that is not yet
# announced (a rare path: only while a block subscriber holds its agent_started back).
_ANNOUNCE_POLL_S = 0.005


@final
class Runtime:
    """One run. Made by :func:`~runtime.open_runtime` (not meant to be built or subclassed by
    users); every method must be called inside its block."""

    def __init__(self, run: RunContext, nursery: trio.Nursery, trace_path: Path | None) -> None:
        self._run = run
        self._nursery = nursery
        self.trace_path = trace_path
        self._roots: list[AgentHandle] = []
        self._closing = False
        # The recorded roots of a resumed run, in start order: (prompt, agent type).
        self.resume_roots: list[tuple[str, str]] | None = None
        # The run's MCP servers (runtime.mcp.McpServers) when some are configured: the chat
        # completes prompt arguments and follows resources through them (docs/mcp.md).
        self.mcp_servers: Any = None

    async def resume(self) -> AgentOutcome | None:
        """Go on with a run opened with ``open_runtime(resume=TRACE)``: start its recorded
        root agents again, in order, one after another (finished ones are rebuilt from the
        trace without a model call; docs/resume.md); returns the last root's outcome.

        Raises:
            ConfigError: this run was not opened with ``resume=``.

        Cancellation: cancels the running root with the caller's scope.
        """
        if self.resume_roots is None:
            raise ConfigError("this run was not opened with open_runtime(resume=TRACE)")
        outcome = None
        for prompt, agent_type in self.resume_roots:
            handle = await self.start(prompt, agent_type=agent_type)
            outcome = await handle.wait()
        return outcome

    @property
    def run_id(self) -> str:
        return self._run.settings.run_id

    @property
    def agent_types(self) -> AgentTypes:
        return self._run.agent_types

    @property
    def workspace(self) -> Path:
        return self._run.settings.workspace

    @property
    def tools(self) -> Mapping[str, Tool]:
        return self._run.tools

    @property
    def bus(self) -> EventBus:
        return self._run.bus

    @property
    def limits(self) -> Limits:
        return self._run.settings.limits

    def context_window(self, agent_type: str = "main") -> int:
        """The context window (tokens) of agents of *agent_type*: the type's own, else the
        run's, else known from its model's name (docs/context.md).

        Raises:
            ConfigError: unknown agent type.
        """
        return agent_window(self._run, self._run.agent_types.lookup(agent_type))

    @property
    def peak_running_agents(self) -> int:
        """The most agents that were running at once so far."""
        return self._run.scheduler.peak_running_agents

    # -- agents ---------------------------------------------------------------
    async def start(
        self,
        prompt: str,
        *,
        agent_type: str = "main",
        history: Iterable[Message] = (),
        output_type: Any = None,
    ) -> AgentHandle:
        """Start a root agent on *prompt* and return its handle once it runs.

        Args:
            history: earlier messages it continues from (a chat session).
            output_type: the value it must end with (a type, or a JSON Schema), over its agent
                type's; the outcome's ``output`` (docs/python-api.md, "Typed outputs").

        Raises:
            ConfigError: unknown agent type, or an *output_type* with no JSON Schema.

        Cancellation: a checkpoint; if cancelled, no agent was started.
        """
        spec = await self._root_spec(prompt, agent_type, history, output_type)
        return await self._start_spec(spec)

    async def _root_spec(
        self,
        prompt: str,
        agent_type: str,
        history: Iterable[Message],
        output_type: Any = None,
    ) -> AgentSpec:
        # Without this, a start in an already-cancelled scope announced the agent (the body
        # runs up to its first checkpoint) and returned its handle instead of raising.
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closing:
            raise ConfigError("the runtime is closing; no new agents")
        run = self._run
        atype = run.agent_types.lookup(agent_type)
        if output_type is not None:
            atype = attrs.evolve(atype, output_type=output_type)
        if atype.output_type is not None:
            output_spec(atype.output_type)  # a type with no schema: ConfigError now, not later
        if run.expand_prompt is not None:
            prompt = await run.expand_prompt(prompt)
        return AgentSpec(
            agent_id=run.scheduler.new_agent_id(),
            agent_type=atype,
            prompt=prompt,
            depth=0,
            history=tuple(history),
        )

    def _new_root(self, spec: AgentSpec) -> tuple[AgentSpec, AgentHandle]:
        budget = spec.agent_type.budget
        max_usd = self._run.settings.limits.max_usd
        if max_usd is not None:  # the run's --max-usd, for each root's subtree
            budget = Budget(usd=max_usd).tighter(budget)
        if budget is not None and not budget.empty:
            spec = attrs.evolve(spec, budget=budget)
        return spec, AgentHandle(spec.agent_id, self)

    def _add_root(self, handle: AgentHandle) -> None:
        # Keep running roots and the last one (its status is the run's); a long chat session
        # must not keep every earlier turn's whole history alive here.
        self._roots = [h for h in self._roots if not h.done]
        self._roots.append(handle)

    async def _start_spec(self, spec: AgentSpec) -> AgentHandle:
        spec, handle = self._new_root(spec)
        await self._nursery.start(self._supervise_root, spec, handle)
        self._add_root(handle)
        return handle

    async def _cancel_root(self, handle: AgentHandle, reason: str) -> None:
        """Cancel a root that has begun, as the runtime. One not yet announced (blocked sending
        its ``agent_started`` to a full ``block`` subscriber) cannot be cancelled by id until it
        is: ask again until it is, or until it ends (the caller bounds the wait)."""
        while not await handle.cancel(reason, by="runtime"):
            if handle.done or self._run.scheduler.is_announced(handle.agent_id):
                return  # ended, or already being cancelled by someone else
            await trio.sleep(_ANNOUNCE_POLL_S)

    def _withdraw(self, handle: AgentHandle) -> None:
        """Forget a root whose caller gave up before its task began: it never starts, so it
        leaves no event and does not count for the run's status (as a cancelled start())."""
        if not handle._begun:
            handle._withdrawn = True
            self._roots = [h for h in self._roots if h is not handle]

    async def compact(
        self,
        history: Iterable[Message],
        *,
        instructions: str | None = None,
        agent_type: str = "main",
    ) -> AgentOutcome:
        """Compact a conversation now (chat's ``/compact``) and return the agent's outcome.

        A root agent of *agent_type* is started on *history* to trim and summarise it with its
        own provider and model, as an agent near its context window does (docs/context.md);
        it emits ``context_compacted`` and ends without a model turn of its own. The compacted
        history is ``outcome.state.messages``; ``outcome.result`` says what was done.

        Args:
            instructions: what the summary should focus on.

        Raises:
            ConfigError: unknown agent type.

        Cancellation: cancels the agent (it still reports ``cancelled``) and re-raises; the
        conversation given is not changed.
        """
        if self._closing:
            raise ConfigError("the runtime is closing; no new agents")
        run = self._run
        words = f" {instructions}" if instructions else ""
        spec = AgentSpec(
            agent_id=run.scheduler.new_agent_id(),
            agent_type=run.agent_types.lookup(agent_type),
            prompt=f"/compact{words}",
            depth=0,
            history=tuple(history),
            compact=instructions or "",
        )
        return await self._run_spec(spec)

    async def run(
        self,
        prompt: str,
        *,
        agent_type: str = "main",
        history: Iterable[Message] = (),
        output_type: Any = None,
    ) -> AgentOutcome:
        """Start a root agent and wait for its outcome.

        Args:
            output_type: as for :meth:`start`; the value is ``outcome.output``.

        Cancellation: cancels the agent (it still reports ``cancelled``) and re-raises; if the
        agent had not begun yet, it never starts (no event).
        """
        spec = await self._root_spec(prompt, agent_type, history, output_type)
        return await self._run_spec(spec)

    async def map(
        self,
        prompts: Iterable[str],
        *,
        agent_type: str = "main",
        output_type: Any = None,
    ) -> list[AgentOutcome]:
        """One root agent per prompt, in parallel, at most ``max_parallel`` running at once;
        their outcomes in prompt order (docs/python-api.md, "Fan-out").

        The agents get their ids in prompt order before any starts (``agent-N``, as
        ``outcome.agent_id`` says); cancelling one by its id once it runs ends it ``cancelled``
        and leaves the others running: a cancelled or failed agent is an outcome, not an
        exception.

        Raises:
            ConfigError: unknown agent type, or an *output_type* with no JSON Schema (before
                any agent starts).

        Cancellation: cancels every agent still running (each reports ``cancelled``) and
        re-raises.
        """
        specs = [await self._root_spec(p, agent_type, (), output_type) for p in prompts]
        outcomes: list[AgentOutcome | None] = [None] * len(specs)
        slots = trio.CapacityLimiter(max(1, self._run.settings.limits.max_parallel))

        async def wait(index: int, handle: AgentHandle) -> None:
            try:
                outcomes[index] = await self._wait_or_cancel(handle)
            finally:
                slots.release_on_behalf_of(handle.agent_id)

        async with trio.open_nursery() as nursery:
            # Started one by one in prompt order, each once a slot is free and handed over once
            # it runs: the order agents start in (their agent_started) follows the prompts.
            for index, spec in enumerate(specs):
                await slots.acquire_on_behalf_of(spec.agent_id)
                handle = None
                try:
                    handle = await self._start_spec(spec)
                finally:
                    if handle is None:  # not started (cancelled): its slot is free again
                        slots.release_on_behalf_of(spec.agent_id)
                nursery.start_soon(wait, index, handle)
        return [o for o in outcomes if o is not None]

    async def _run_spec(self, spec: AgentSpec) -> AgentOutcome:
        # Started without nursery.start's hand-over (a temporary nursery and a scheduler round
        # per run: bench/README.md, "One small run, third pass"): the caller waits for the
        # outcome anyway, and a caller cancelled before the agent's task has begun withdraws it
        # (it never starts, as a cancelled start() would leave it).
        spec, handle = self._new_root(spec)
        self._add_root(handle)
        self._nursery.start_soon(self._supervise_root, spec, handle)
        return await self._wait_or_cancel(handle)

    async def _wait_or_cancel(self, handle: AgentHandle) -> AgentOutcome:
        try:
            return await handle.wait()
        finally:
            if not handle._begun:
                self._withdraw(handle)
            elif not handle.done:
                with trio.move_on_after(self._run.settings.limits.finish_grace_s, shield=True):
                    await self._cancel_root(handle, "the caller was cancelled")
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
        return cancel_node(self._run, node_id, reason, by=by)

    async def stop(
        self, node_id: str, reason: str = "stopped by user", *, by: CancelBy = "user"
    ) -> bool:
        """Stop the subtree under *node_id* (an agent id or a tool_use_id) gracefully.

        Emits ``stop_requested`` as the agent owning the node. Every agent in the subtree lets
        its tool calls under way finish, takes no new model turn (a reply being streamed is
        cut short) and ends ``stopped``, with its last text as its result; the parent of a
        stopped sub-agent reads that partial work and carries on (docs/collaboration.md#stop).

        Returns:
            ``False``, changing nothing, when the id is unknown, not yet announced, already
            finished, cancelled or stopping, or runs on a Ray host.

        Cancellation: a checkpoint before anything happens; the stop itself does not wait.
        """
        if by not in _CANCEL_BY:
            raise ValueError(f"by must be one of {', '.join(_CANCEL_BY)}")
        await trio.lowlevel.checkpoint()
        return stop_node(self._run, node_id, reason, by=by)

    async def abort(self, reason: str = "run aborted by user", *, by: CancelBy = "user") -> None:
        """Cancel every running root agent (and so everything)."""
        for handle in list(self._roots):
            if not handle.done:
                await self.cancel(handle.agent_id, reason, by=by)

    def send_message(self, agent_id: str, text: str) -> bool:
        """Queue *text* for a running agent; it is delivered at its next turn boundary as a
        ``user_message`` event and a user message in its history.

        A queued message is a ``message_queued`` event at once (masked like every event), so
        a run killed before the agent read it puts it back on resume (docs/resume.md).

        Returns:
            ``False`` when the agent is unknown, finished, or its mailbox is full (nothing
            is queued, nothing emitted).
        """
        run = self._run
        mailbox = run.scheduler.inbox(agent_id)
        if mailbox is None:
            return False
        try:
            mailbox.send_nowait(text)
        except (trio.WouldBlock, trio.ClosedResourceError):
            return False
        # Nothing yields between the two: the agent cannot read it before the event is out.
        node = run.registry.get(agent_id)
        owner = node.data if node is not None else None
        run.bus.emit_nowait(
            MessageQueued(
                agent_id=agent_id,
                parent_tool_use_id=owner.parent_tool_use_id if isinstance(owner, Owner) else None,
                text=text,
            )
        )
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

    def pending_elicitations(self) -> list[PendingElicitation]:
        """Questions MCP servers asked the user that wait for an answer now (docs/mcp.md,
        "Elicitation")."""
        return self._run.elicitations.pending()

    @contextmanager
    def elicitation_answerer(self) -> Generator[None, None, None]:
        """Declare that someone answers MCP servers' questions while the block runs; without
        one, a question is declined at once."""
        with self._run.elicitations.answerer():
            yield

    def resolve_elicitation(
        self,
        request_id: str,
        action: ElicitAction,
        content: Mapping[str, Any] | None = None,
        *,
        reason: str | None = None,
    ) -> bool:
        """Answer an ``elicitation_requested`` event: ``accept`` (with *content* matching the
        requested schema, in form mode), ``decline`` or ``cancel``.

        Returns:
            ``False`` when no such question is waiting.

        Raises:
            ValueError: *content* does not match the requested schema (one line).
        """
        return self._run.elicitations.resolve(request_id, action, content, reason=reason)

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

    async def _supervise_root(
        self,
        spec: AgentSpec,
        handle: AgentHandle,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        # The runtime supervises root agents as an agent call supervises a sub-agent.
        def report(outcome: AgentOutcome) -> None:
            handle._outcome = outcome

        handle._begun = True
        if handle._withdrawn:  # its caller gave up before this task began
            handle._done.set()
            return
        try:
            await run_agent_actor(
                self._run, spec, on_outcome=report, own_task=True, task_status=task_status
            )
        finally:
            handle._done.set()

    async def _wait_roots(self) -> None:
        # Roots may be started while we wait (from another task): wait until none is running.
        while running := [h for h in self._roots if not h.done]:
            await running[0]._done.wait()

    def final_status(self) -> AgentStatus:
        """The run's status: the last root agent's (``completed`` for a run with none)."""
        for handle in reversed(self._roots):
            if handle.outcome is not None:
                return handle.outcome.status
        return "cancelled" if self._roots else "completed"
