"""The agent loop: ask the model, run the tools it asks for, feed the results back, repeat.

One agent is one actor (see :mod:`runtime.actors`): :func:`agent_main` runs inside the actor's
cancel scope, which the registry knows by the agent's id. Each tool call runs under its own cancel
scope, registered by its ``tool_use_id`` under the agent; the ``agent`` tool starts the sub-agent
as an actor inside the tool call's own nursery, so the agent tree is the task tree and cancelling
any node cancels exactly its subtree. Whatever ends a node — completion, an error, a cancel from
any level — its ``*_finished`` event is emitted from a ``finally`` under a bounded shield.
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import aclosing
from types import MappingProxyType
from typing import Any, Literal, TypeVar, cast

import attrs
import trio

from runtime.actors import (
    ActorContext,
    ActorHandle,
    Node,
    Registry,
    run_actor,
    start_actor,
    start_actor_soon,
)

from ._agent import AgentOutcome, AgentSpec, cancelled_text, started_event, stopped_text
from ._agent_types import AgentType
from ._background import BackgroundChildren
from ._budget import BudgetRefused
from ._compaction import NOTE_ROOM, Compactor, compact_only, output_cap, tool_limits_for
from ._context import Owner, RunContext, SubtreeRunner
from ._context_window import fixed_chars
from ._errors import (
    ConfigError,
    ContextOverflowError,
    ProviderError,
    SubtreeCancelled,
    ToolError,
    ToolInputError,
)
from ._events import (
    AgentFinished,
    AgentStatus,
    CancelBy,
    ProviderRetry,
    RateLimited,
    TextDelta,
    ThinkingDelta,
    TodoUpdated,
    ToolFinished,
    ToolProgress,
    ToolStarted,
    ToolStatus,
    TurnFinished,
    UserMessage,
)
from ._hooks import MAX_STOP_CONTINUES, HookRunner, claude_tool_input, our_tool_input, tool_response
from ._limits import Budget
from ._messages import (
    AgentState,
    Block,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from ._messaging import Messenger
from ._middleware import ToolInvocation
from ._output import OutputSpec, output_spec
from ._prices import add_costs
from ._provider import (
    ModelRequest,
    RateLimitNotice,
    RetryNotice,
    TextChunk,
    ThinkingChunk,
    ToolCall,
    ToolSpec,
    TurnEnd,
)
from ._tool import Tool, ToolContext, ToolLimits, validate_input
from ._worktree import (
    Worktree,
    add_worktree,
    finish_worktree,
    worktree_folder,
    worktree_prompt,
)

_OUTPUT_CUT_HOW = (
    " from the middle of this output, to save context; to see them, ask for less at a time "
    "(a range of lines, a narrower query) or send the output to a file and read parts of it"
)


@attrs.define(eq=False)
class _Life:
    """One agent's run as its body and its supervisor share it."""

    state: AgentState
    t0: float
    announced: bool = False
    undelivered: tuple[str, ...] = ()
    cut: _Cut | None = None
    """How a graceful stop cuts its streaming reply short (set once it runs its turns)."""


async def agent_main(
    run: RunContext, spec: AgentSpec, life: _Life, ctx: ActorContext[str]
) -> tuple[AgentStatus, str | None, str | None]:
    """The body of an agent actor: announce the agent, then loop until the model is done.

    Returns ``(status, result, error)``. A failure (a provider error, a bug) escapes to the
    supervisor, :func:`run_agent_actor`, which ends the agent ``failed``.

    Cancellation: raises :class:`trio.Cancelled`; the supervisor reports ``cancelled``.
    """
    atype = spec.agent_type
    try:
        await run.bus.emit(
            started_event(spec),
        )
        life.announced = True
        # Reachable by messages (and by Runtime.cancel) only once it has been announced.
        run.scheduler.open_inbox(spec.agent_id, ctx.mailbox)
        run.directory.joined(spec)
        if spec.budget is not None and spec.budget.seconds is not None:
            ctx.scope.deadline = trio.current_time() + spec.budget.seconds
        log = run.log.bind(agent_id=spec.agent_id, parent_tool_use_id=spec.parent_tool_use_id)
        if spec.compact is not None:  # Runtime.compact: this agent only compacts its history
            specs = list(type_setup(run, atype).specs)
            return await compact_only(run, spec, life.state, specs, log)
        if run.hooks is not None:
            refused = await _start_hooks(run, spec, life.state, run.hooks)
            if refused is not None:
                return "failed", None, refused
        # An actor with no nursery runs nothing but this agent's turns in its scope: the cut
        # can be that scope (no scope of its own to enter), and the supervisor reads the
        # cancel as the stop (_outcome). Else the background children must not be cut.
        if ctx.nursery is None:
            life.cut = _Cut(ctx.scope)
            return await _turns(run, spec, life.state, ctx, log, None, life.cut)
        life.cut = _Cut(trio.CancelScope())
        return await _loop(run, spec, life.state, ctx, log, life.cut)
    finally:
        run.scheduler.close_inbox(spec.agent_id)
        # Take what is still queued and refuse more, with no yield in between: a message is
        # either in the history or handed back in the outcome, never lost.
        life.undelivered = tuple(ctx.mailbox.drain())
        ctx.mailbox.close()


async def run_agent_actor(
    run: RunContext,
    spec: AgentSpec,
    *,
    on_outcome: Callable[[AgentOutcome], None] | None = None,
    own_task: bool = False,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> AgentOutcome:
    """Run *spec* as an actor in a nursery of the calling task, supervise it, and return its
    outcome: the actor's exit, with ``agent_finished`` emitted for it.

    The calling task is the agent's supervisor: a failure escaping the actor ends it
    ``failed``, a cancel of its scope ``cancelled`` (``budget_exceeded`` when a budget asked),
    and every case ends with exactly one ``agent_finished`` once it was announced. With
    ``nursery.start``, it reports started as soon as the actor runs (and is registered).

    Args:
        on_outcome: called with the outcome as soon as it is known, also when the caller is
            being cancelled (a root agent's handle learns it this way when the run is aborted).
        own_task: the calling task exists only to run this agent (a root's, or one of a turn's
            parallel ``agent`` calls): the agent runs in it (``run_actor``), with its own
            scope, nursery and mailbox as ever, instead of in a task started for it. The
            events and the outcome are the same; it saves a task and a nursery per agent.

    Cancellation: if the caller is cancelled, the agent is cancelled with it, still reports
    ``agent_finished`` (under a bounded shield), and :class:`trio.Cancelled` propagates.
    """
    life = _Life(
        AgentState(
            agent_id=spec.agent_id,
            name=spec.agent_type.name,
            depth=spec.depth,
            system=_system_for(run, spec),
            messages=_with_prompt(spec.history, spec.prompt)
            if spec.compact is None
            else list(spec.history),
        ),
        trio.current_time(),
    )
    run.budget.set_budget(spec.agent_id, spec.budget)
    if run.restore is not None:  # a resumed run: its recorded turns (docs/resume.md)
        run.restore(spec, life.state)
    run.scheduler.agent_running()
    handle: ActorHandle[str] | None = None
    body = functools.partial(agent_main, run, spec, life)
    owner = Owner(spec.agent_id, spec.parent_tool_use_id)
    parent_node = spec.parent_node
    try:
        if own_task:
            handle = ActorHandle.new(
                spec.agent_id, registry=run.registry, mailbox_size=run.settings.limits.mailbox_size
            )
            await run_actor(
                handle,
                body,
                parent_id=parent_node,
                data=owner,
                # An agent starts no task of its own (its tool calls do), but for its
                # background sub-agents: only an agent that may start any has a nursery.
                nursery=may_start_sub_agents(run, spec.agent_type, spec.depth),
                task_status=task_status,
            )
        else:
            async with trio.open_nursery() as nursery:
                kwargs: dict[str, Any] = {
                    "actor_id": spec.agent_id,
                    "registry": run.registry,
                    "parent_id": parent_node,
                    "data": owner,
                    "mailbox_size": run.settings.limits.mailbox_size,
                }
                if task_status is trio.TASK_STATUS_IGNORED:
                    handle = start_actor_soon(nursery, body, **kwargs)
                else:
                    handle = await start_actor(nursery, body, **kwargs)
                    task_status.started()
    finally:
        run.scheduler.agent_stopped()
        run.budget.forget(spec.agent_id)
        outcome = _outcome(run, spec, life, handle)
        if life.announced:
            run.directory.left(spec.agent_id, outcome.status)
        if on_outcome is not None:
            on_outcome(outcome)
        if life.announced:  # an agent cancelled before it was announced leaves no trace at all
            await run.bus.emit_final(
                AgentFinished(
                    agent_id=spec.agent_id,
                    parent_tool_use_id=spec.parent_tool_use_id,
                    status=outcome.status,
                    result=outcome.result,
                    error=outcome.error,
                    turns=outcome.turns,
                    input_tokens=outcome.input_tokens,
                    output_tokens=outcome.output_tokens,
                    duration_s=outcome.duration_s,
                    cost_usd=outcome.cost_usd,
                ),
                grace_s=run.settings.limits.finish_grace_s,
                masked=("result", "error"),  # by _outcome
            )
    return outcome


def _system_for(run: RunContext, spec: AgentSpec) -> str:
    """The system prompt of *spec*'s agent: its type's, told where it works when that is not
    the run's workspace (a worktree, docs/worktrees.md)."""
    system = type_setup(run, spec.agent_type).system
    if spec.workspace is None or spec.compact is not None:
        return system
    return f"{system}\n\n{worktree_prompt(spec.workspace, run.settings.workspace)}"


def _outcome(
    run: RunContext, spec: AgentSpec, life: _Life, handle: ActorHandle[str] | None
) -> AgentOutcome:
    """The supervisor's reading of the actor's exit.

    A cancel that reached the agent (its own or an ancestor's: its ``cancel_requested`` is out)
    wins over an end the agent reached at the same instant without a checkpoint in between:
    once a subtree's cancel is in the stream, every agent in it ends ``cancelled``.
    """
    exit_ = handle.exit if handle is not None else None
    node = handle.node if handle is not None else None
    reason, by = Registry.cancel_reason(node) if node is not None else (None, None)
    result: str | None = None
    cancel_reason: str | None = None
    if exit_ is not None and exit_.kind == "returned" and reason is None:
        status, result, error = exit_.value
    elif exit_ is not None and exit_.kind == "failed" and reason is None:
        exc = exit_.error
        status = "failed"
        if isinstance(exc, ProviderError):
            error = str(exc)  # masked with every error, below
            run.log.warning("provider failed", agent_id=spec.agent_id, error=error)
        else:  # a bug ends this agent only, never its siblings
            error = f"internal error: {type(exc).__name__}: {exc}"
            run.log.error("agent crashed", agent_id=spec.agent_id, exc_info=exc)
    elif reason is None and life.cut is not None and life.cut.cut:
        # The actor's own scope was the cut (an agent with no nursery): a graceful stop.
        status, result, error = life.cut.stopped(node)
    else:
        seconds = spec.budget.seconds if spec.budget is not None else None
        # Only the subtree whose budget ran out ends budget_exceeded; agents under it were
        # cancelled because of it, and say so in their reason.
        if by == "budget" and node is not None and node.cancel_by == "budget":
            status, error, cancel_reason = "budget_exceeded", reason, reason
        elif (
            reason is None
            and seconds is not None
            and handle is not None
            and trio.current_time() >= handle.scope.deadline
        ):
            status, error = "budget_exceeded", f"budget exceeded: {seconds:g} s of wall time"
        else:
            cancel_reason = reason or "cancelled"
            status, error = "cancelled", cancelled_text(cancel_reason)
    _close_open_tool_calls(life.state)
    output = None
    if status == "completed" and result is not None and spec.agent_type.output_type is not None:
        # The loop accepted this text: the value it holds (not masked: the caller's own).
        output = output_spec(spec.agent_type.output_type).check(result)[0]
    return AgentOutcome(
        agent_id=spec.agent_id,
        name=spec.agent_type.name,
        status=status,
        result=None
        if result is None
        else run.bus.masked(result, run.settings.limits.max_result_chars),
        error=None if error is None else run.bus.masked(error),
        turns=life.state.turns,
        input_tokens=life.state.input_tokens,
        output_tokens=life.state.output_tokens,
        duration_s=trio.current_time() - life.t0,
        state=life.state,
        undelivered=life.undelivered,
        cancel_reason=cancel_reason,
        cancelled_by=cast("CancelBy | None", by) if cancel_reason is not None else None,
        output=output,
        cost_usd=life.state.cost_usd,
    )


def _with_prompt(history: tuple[Message, ...], prompt: str) -> list[Message]:
    """*history* with *prompt* as the next user message (joined to a trailing user message:
    the APIs want roles to alternate, and an earlier turn may have ended on one)."""
    block = TextBlock(text=prompt)
    if history and history[-1].role == "user":
        return [*history[:-1], Message(role="user", content=(*history[-1].content, block))]
    return [*history, Message(role="user", content=(block,))]


def _close_open_tool_calls(state: AgentState) -> None:
    """Give every tool call in the history a result, so the history stays valid for the API
    even when the agent was cancelled between asking for tools and getting their results."""
    if not state.messages or state.messages[-1].role != "assistant":
        return
    uses = state.messages[-1].tool_uses
    if uses:
        state.messages.append(
            Message(
                role="user",
                content=tuple(
                    ToolResultBlock(tool_use_id=u.id, content="cancelled", is_error=True)
                    for u in uses
                ),
            )
        )


async def _loop(
    run: RunContext,
    spec: AgentSpec,
    state: AgentState,
    ctx: ActorContext[str],
    log: Any,
    cut: _Cut,
) -> tuple[AgentStatus, str | None, str | None]:
    """The turns of an agent with a nursery: the background sub-agents it may start run there
    (docs/collaboration.md#background-sub-agents), and it waits for them."""
    assert ctx.nursery is not None  # an agent with none runs _turns itself (agent_main)
    background = BackgroundChildren(run, ctx.nursery, ctx.mailbox)
    try:
        with cut.scope:
            ended = await _turns(run, spec, state, ctx, log, background, cut)
        if cut.scope.cancelled_caught:
            ended = cut.stopped(ctx.node)
    except Exception:
        background.end(f"its parent agent {spec.agent_id} failed")
        raise
    if ended[0] == "stopped":  # its children are stopping too: they end before it
        await background.wait()
    else:
        background.end(f"its parent agent {spec.agent_id} ended ({ended[0]})")
    return ended


class _Cut:
    """How a graceful stop cuts an agent's streaming reply short (docs/collaboration.md#stop):
    the cancel scope the agent's turns run in, whether the stop cancelled it, and the text of
    the agent's last whole turn (the result of a cut agent).

    The scheduler cancels it only while a reply streams (:meth:`Scheduler.streaming`) and the
    cancel ends the agent, so one scope serves all its turns: the actor's own scope for an
    agent with no nursery, else one :func:`_loop` enters once (a scope per turn was a
    measurable share of a fan-out: bench/README.md, "The tenth session: fan-out won back").
    """

    __slots__ = ("cut", "scope", "text")

    def __init__(self, scope: trio.CancelScope) -> None:
        self.scope = scope
        self.cut = False
        self.text = ""

    def cancel(self, reason: str | None = None) -> None:
        """Cut the reply streaming now: the agent ends stopped."""
        self.cut = True
        self.scope.cancel(reason=reason)

    def stopped(self, node: Node | None) -> tuple[AgentStatus, str | None, str | None]:
        """The end of an agent whose reply a stop cut short: the reply joined nothing (its
        streamed text stays in the stream); the result is the last whole turn's text."""
        reason = Registry.stop_reason(node)[0] if node is not None else None
        return "stopped", self.text or None, stopped_text(reason)


def may_start_sub_agents(run: RunContext, atype: AgentType, depth: int) -> bool:
    """Whether an agent of *atype* at *depth* can start a sub-agent at all: only such an agent
    needs a nursery for its background sub-agents."""
    return depth < run.settings.limits.max_depth and "agent" in type_setup(run, atype).tools


async def _turns(
    run: RunContext,
    spec: AgentSpec,
    state: AgentState,
    ctx: ActorContext[str],
    log: Any,
    background: BackgroundChildren | None,
    cut: _Cut,
) -> tuple[AgentStatus, str | None, str | None]:
    atype = spec.agent_type
    max_turns = atype.max_turns or run.settings.limits.max_turns
    setup = type_setup(run, atype)
    specs = setup.specs
    compactor = Compactor.for_agent(
        run, spec.agent_type, spec.agent_id, system=state.system, tools=specs,
        # A resumed agent's recorded turns (a reply and its results each) follow its prompt.
        emit=run.bus.emit, log=log, prompt=spec.prompt,
        prompt_index=len(state.messages) - 1 - 2 * state.turns,
        fixed=setup.fixed_chars if state.system is setup.system else None,
        parent_tool_use_id=spec.parent_tool_use_id,
    )  # fmt: skip
    last_text = ""
    output_tries = 0
    stops = 0  # how often Stop hooks sent the agent on (docs/hooks.md#stop)
    while True:
        # A graceful stop: no new turn (docs/collaboration.md#stop). Until a stop is asked in
        # the run, nothing to look up.
        if run.registry.stopping and (stop := _stop_reason(ctx)) is not None:
            return "stopped", last_text or None, stopped_text(stop)
        if state.turns >= max_turns:
            # Before delivering: a message no turn will answer goes back in the outcome.
            return "max_turns", last_text or None, f"stopped after {state.turns} turns (max_turns)"
        if spec.depth > 0 and not run.scheduler.has_slot_or_lent_it(spec.agent_id):
            # A slot lent to its children while it waited for them comes back here.
            await run.scheduler.acquire_slot(spec.agent_id)
        if ctx.mailbox.pending():
            await _deliver_messages(run, spec, ctx, state)
        if (
            run.type_setups.get(atype) is not setup
            or setup.types_version != run.agent_types.version
        ):
            # The run's tools changed since the last turn (an MCP server's tools/list_changed
            # empties the setups, docs/mcp.md; a new agent type bumps the version): this turn
            # offers the new list. The history and the system prompt stay; the context
            # estimate follows from the next reported usage.
            setup = type_setup(run, atype)
            specs = setup.specs
        await compactor.before_request(state)
        request = ModelRequest(
            model=atype.model or run.settings.model,
            system=state.system,
            messages=tuple(state.messages),
            tools=specs,
            agent_type=atype.name,
            agent_id=spec.agent_id,
            output_schema=setup.output.schema if setup.output is not None else None,
        )
        held = 0.0
        if run.budget.counts_usd:
            try:
                # A money budget reserves the call's input before it starts (docs/costs.md).
                held = run.budget.reserve(spec.agent_id, _input_cost(run, request, compactor))
            except BudgetRefused:
                # Its subtree is cancelled once the calls under way in it are settled, at once
                # if none is (docs/costs.md, "Budgets in money"): that cancel ends this wait.
                await trio.sleep_forever()
        try:
            calls, last_text = await _model_turn(run, spec, state, compactor, request, ctx, cut)
        finally:
            if held:
                run.budget.release(spec.agent_id, held)
        cut.text = last_text
        if calls:
            # A stop that came as the reply ended: none of its calls runs.
            if not run.registry.stopping or _stop_reason(ctx) is None:
                await _run_tool_calls(run, spec, state, calls, log, background, setup=setup)
            if run.hooks is not None and spec.agent_id in run.hooks.stops:
                why = run.hooks.stops.pop(spec.agent_id)
                return "completed", last_text or None, f"stopped by a hook: {why}"
            state.continue_reason = "tool_use"
            continue
        if ctx.mailbox.pending():
            state.continue_reason = "user_message"
            continue
        if background is not None and background.running:
            # Not done while children of its own run: their next report is its next step.
            await _wait_for_report(run, spec, ctx, state)
            state.continue_reason = "user_message"
            continue
        if setup.output is not None:
            problem = await _check_output(
                run, spec, setup.output, last_text, state, output_tries
            )
            if problem == "retry":
                output_tries += 1
                state.continue_reason = "output_retry"
                continue
            if problem is not None:
                state.continue_reason = None
                return "failed", last_text or None, problem
        if run.hooks is not None and await _stop_hooks(run, spec, state, run.hooks, stops):
            stops += 1
            state.continue_reason = "stop_hook"
            continue
        state.continue_reason = None
        return "completed", last_text, None


def _input_cost(run: RunContext, request: ModelRequest, compactor: Compactor) -> float:
    """The estimated cost of *request*'s input (its context as the meter counts it), for a
    money budget's reservation; 0 when the model has no price."""
    cost = run.settings.prices.cost(request.model, compactor.meter.tokens, 0)
    return cost or 0.0


async def _model_turn(
    run: RunContext, spec: AgentSpec, state: AgentState, compactor: Compactor,
    request: ModelRequest, ctx: ActorContext[str], cut: _Cut,
) -> tuple[list[ToolCall], str]:
    """One model call: streamed, joined to the history and reported (``turn_finished``, with
    its cost). Returns the tool calls it asked for and its text.

    Cancellation: a graceful stop while the reply streams cancels *cut*'s scope (the reply
    joins nothing; its streamed text stays in the stream) and the agent ends stopped, as
    :func:`_loop` or, for an agent with no nursery, its supervisor (:func:`_outcome`) says.
    """
    node = ctx.node
    if node is not None:
        run.scheduler.streaming(spec.agent_id, node, cut)
    try:
        try:
            content, calls, end = await _stream_turn(run, spec, request)
        except ContextOverflowError as exc:  # compacted, then tried once more
            content, calls, end = await _stream_refitted(run, spec, request, state, compactor, exc)
    finally:
        if node is not None:
            run.scheduler.done_streaming(spec.agent_id)
    state.turns += 1
    state.input_tokens += end.input_tokens
    state.output_tokens += end.output_tokens
    cost = run.settings.prices.cost(
        request.model, end.input_tokens, end.output_tokens,
        cache_read_tokens=end.cache_read_tokens, cache_write_tokens=end.cache_write_tokens,
    )  # fmt: skip
    state.cost_usd = add_costs(state.cost_usd, cost)
    state.messages.append(Message(role="assistant", content=content))
    finished = TurnFinished(
        agent_id=spec.agent_id,
        parent_tool_use_id=spec.parent_tool_use_id,
        turn=state.turns,
        stop_reason=end.stop_reason,
        input_tokens=end.input_tokens,
        output_tokens=end.output_tokens,
        context_tokens=compactor.after_turn(state, end.input_tokens),
        context_window=compactor.window,
        tool_use_ids=[c.id for c in calls],
        cost_usd=cost,
        cache_read_tokens=end.cache_read_tokens or None,
        cache_write_tokens=end.cache_write_tokens or None,
    )
    if cut.cut:
        # A stop came as the reply ended, with no checkpoint left to cut it: the turn is whole
        # and reported, in the cancelled scope (its calls do not run; the agent ends stopped).
        await run.bus.emit_final(finished, grace_s=run.settings.limits.finish_grace_s)
    else:
        await run.bus.emit(finished)
    return calls, "".join(b.text for b in content if isinstance(b, TextBlock))


async def _start_hooks(
    run: RunContext, spec: AgentSpec, state: AgentState, hooks: HookRunner
) -> str | None:
    """A root's ``UserPromptSubmit`` (and ``SessionStart``'s context), a sub-agent's
    ``SubagentStart``: what they add joins the prompt; a refused prompt is the error."""
    context: list[str] = []
    event = "UserPromptSubmit" if spec.depth == 0 else "SubagentStart"
    if spec.depth == 0 and not spec.history:  # a conversation's start (chat: its first turn)
        context.extend(hooks.session_context)
    if hooks.has(event):
        fields: dict[str, Any] = (
            {"prompt": spec.prompt}
            if spec.depth == 0
            else {"agent_id": spec.agent_id, "agent_type": spec.agent_type.name}
        )
        verdict = await hooks.run(
            event, fields, agent_id=spec.agent_id, parent_tool_use_id=spec.parent_tool_use_id,
            match=None if spec.depth == 0 else spec.agent_type.name,
        )  # fmt: skip
        if verdict.blocked and event == "UserPromptSubmit":
            return f"prompt blocked by a UserPromptSubmit hook: {verdict.reason}"
        if verdict.stop:
            return f"stopped by a hook: {verdict.stop_reason}"
        context.extend(verdict.context)
    if context and state.messages and state.messages[-1].role == "user":
        last = state.messages[-1]
        extra = tuple(TextBlock(text=c) for c in context)
        state.messages[-1] = Message(role="user", content=(*last.content, *extra))
    return None


async def _stop_hooks(
    run: RunContext, spec: AgentSpec, state: AgentState, hooks: HookRunner, stops: int
) -> bool:
    """An agent about to end: its ``Stop`` (a sub-agent's ``SubagentStop``) hooks. Whether one
    blocked, so it goes on with their reason as a user message; after
    :data:`MAX_STOP_CONTINUES` blocks it ends anyway (docs/hooks.md#stop)."""
    event = "Stop" if spec.depth == 0 else "SubagentStop"
    if not hooks.has(event):
        return False
    fields: dict[str, Any] = {"stop_hook_active": stops > 0}
    if spec.depth > 0:
        fields |= {"agent_id": spec.agent_id, "agent_type": spec.agent_type.name}
    verdict = await hooks.run(
        event, fields, agent_id=spec.agent_id, parent_tool_use_id=spec.parent_tool_use_id,
        match=None if spec.depth == 0 else spec.agent_type.name,
    )  # fmt: skip
    if not verdict.blocked or verdict.stop:
        return False
    if stops >= MAX_STOP_CONTINUES:
        run.log.warning("hook.stop_capped", agent_id=spec.agent_id, continues=stops)
        return False
    text = f"{event} hook feedback:\n{verdict.reason}"
    state.messages.append(Message(role="user", content=(TextBlock(text=text),)))
    await run.bus.emit(
        UserMessage(agent_id=spec.agent_id, parent_tool_use_id=spec.parent_tool_use_id, text=text)
    )
    return True


def _stop_reason(ctx: ActorContext[str]) -> str | None:
    """Why this agent's subtree is stopping (its own stop or an ancestor's), else ``None``."""
    node = ctx.node
    return None if node is None else Registry.stop_reason(node)[0]


async def _check_output(
    run: RunContext, spec: AgentSpec, output: OutputSpec, text: str, state: AgentState, tries: int
) -> str | None:
    """Whether the final *text* is the agent type's output: ``None`` when it is, ``"retry"``
    when it is not and the model is asked again (the error joins the history as a user
    message), else the error that fails the agent."""
    _value, error = output.check(text)
    if error is None:
        return None
    if tries >= spec.agent_type.output_retries:
        return f"output: {error} (after {tries + 1} answers)"
    message = output.retry_message(error)
    state.messages.append(Message(role="user", content=(TextBlock(text=message),)))
    await run.bus.emit(
        UserMessage(agent_id=spec.agent_id, parent_tool_use_id=spec.parent_tool_use_id,
                    text=message)
    )
    return "retry"


async def _stream_refitted(
    run: RunContext,
    spec: AgentSpec,
    request: ModelRequest,
    state: AgentState,
    compactor: Compactor,
    overflow: ContextOverflowError,
) -> tuple[tuple[Block, ...], list[ToolCall], TurnEnd]:
    """The turn again after *request* was refused as too long: compacted, then tried once
    more (the first try is inline in the loop: one coroutine less per agent)."""
    await compactor.on_overflow(state, overflow)
    request = attrs.evolve(request, messages=tuple(state.messages))
    try:
        return await _stream_turn(run, spec, request)
    except ContextOverflowError as exc:
        raise compactor.does_not_fit(exc) from exc


async def _wait_for_report(
    run: RunContext, spec: AgentSpec, ctx: ActorContext[str], state: AgentState
) -> None:
    """Wait for the next message (a background child's report, or any other) and deliver it
    with whatever came with it. While it waits the agent is not working: it lends its
    ``max_parallel`` slot, as while it waits for a sub-agent."""
    lend = spec.depth > 0
    if lend:
        run.scheduler.child_starting(spec.agent_id)
    try:
        first = await ctx.mailbox.receive()
    finally:
        if lend:
            run.scheduler.child_finished(spec.agent_id)
    await _deliver_messages(run, spec, ctx, state, first)


async def _deliver_messages(
    run: RunContext,
    spec: AgentSpec,
    ctx: ActorContext[str],
    state: AgentState,
    first: str | None = None,
) -> None:
    """Messages injected while the agent worked join the history at this turn boundary
    (*first*: one already taken from the mailbox)."""
    texts = ctx.mailbox.drain()
    for text in texts if first is None else [first, *texts]:
        # Into the history first: a cancel while the event waits must not lose the message.
        block = TextBlock(text=text)
        last = state.messages[-1] if state.messages else None
        if last is not None and last.role == "user":
            state.messages[-1] = Message(role="user", content=(*last.content, block))
        else:
            state.messages.append(Message(role="user", content=(block,)))
        await run.bus.emit(
            UserMessage(
                agent_id=spec.agent_id, parent_tool_use_id=spec.parent_tool_use_id, text=text
            )
        )


async def _stream_turn(
    run: RunContext, spec: AgentSpec, request: ModelRequest
) -> tuple[tuple[Block, ...], list[ToolCall], TurnEnd]:
    """Stream one turn, emitting deltas; the turn joins the history only once it is whole."""
    emit = run.bus.emit
    aid, pid = spec.agent_id, spec.parent_tool_use_id
    texts: list[str] = []
    thinking: list[str] = []
    signature: str | None = None
    calls: list[ToolCall] = []
    end: TurnEnd | None = None
    # Streamed text not emitted yet because a ``block`` subscriber is behind: it goes out as
    # one delta (docs/events.md, "Coalesced deltas") as soon as there is room, before any
    # other event of this agent, or when the stream ends.
    pending: list[str] = []
    pending_kind: type[TextDelta | ThinkingDelta] = TextDelta
    has_room = run.bus.has_room
    async with aclosing(run.provider.stream(request)) as stream:
        try:
            async for item in stream:
                if type(item) is TextChunk and not pending and has_room():
                    # The common item, tested first: a text delta, and room to send it now.
                    texts.append(item.text)
                    await emit(TextDelta(agent_id=aid, parent_tool_use_id=pid, text=item.text))
                    continue
                if isinstance(item, TextChunk | ThinkingChunk):
                    if isinstance(item, TextChunk):
                        texts.append(item.text)
                        kind: type[TextDelta | ThinkingDelta] = TextDelta
                    else:
                        thinking.append(item.text)
                        signature = item.signature or signature
                        kind = ThinkingDelta
                    if pending and kind is not pending_kind:
                        joined = "".join(pending)
                        await emit(pending_kind(agent_id=aid, parent_tool_use_id=pid, text=joined))
                        pending.clear()
                    if pending or not has_room():
                        pending.append(item.text)
                        pending_kind = kind
                        if has_room():
                            await emit(
                                kind(agent_id=aid, parent_tool_use_id=pid, text="".join(pending))
                            )
                            pending.clear()
                    else:
                        await emit(kind(agent_id=aid, parent_tool_use_id=pid, text=item.text))
                    continue
                if pending:
                    await emit(
                        pending_kind(agent_id=aid, parent_tool_use_id=pid, text="".join(pending))
                    )
                    pending.clear()
                if isinstance(item, ToolCall):
                    claimed = run.scheduler.claim_tool_use_id(item.id)
                    calls.append(
                        item if claimed == item.id
                        else attrs.evolve(item, id=claimed, provider_id=item.id)
                    )
                elif isinstance(item, TurnEnd):
                    end = item
                elif isinstance(item, RetryNotice):
                    await emit(
                        ProviderRetry(
                            agent_id=aid,
                            parent_tool_use_id=pid,
                            attempt=item.attempt,
                            delay_s=item.delay_s,
                            reason=item.reason,
                        )
                    )
                elif isinstance(item, RateLimitNotice):
                    await emit(
                        RateLimited(
                            agent_id=aid,
                            parent_tool_use_id=pid,
                            wait_s=item.wait_s,
                            reason=item.reason,
                            status=item.status,
                        )
                    )
        except Exception:
            # The text streamed before a provider's error goes out before the error does.
            if pending:
                await emit(
                    pending_kind(agent_id=aid, parent_tool_use_id=pid, text="".join(pending))
                )
            raise
        if pending:
            await emit(pending_kind(agent_id=aid, parent_tool_use_id=pid, text="".join(pending)))
    if end is None:
        raise ProviderError(f"provider {run.provider.name} ended a turn without a stop reason")
    content: list[Block] = []
    if thinking or signature:
        content.append(ThinkingBlock(text="".join(thinking), signature=signature))
    if texts:
        content.append(TextBlock(text="".join(texts)))
    content.extend(ToolUseBlock(id=c.history_id, name=c.name, input=c.input) for c in calls)
    return tuple(content), calls, end


@attrs.frozen
class TypeSetup:
    """What every agent of one type gets in one run, made once (not per agent:
    bench/README.md, "Per-agent and per-run cost"): its tools, their specs as the model sees
    them, its system prompt, the size of those two in the context, and its tools' limits."""

    agent_type: AgentType
    types_version: int
    tools: Mapping[str, Tool]
    specs: tuple[ToolSpec, ...]
    system: str
    fixed_chars: int
    output_cap: int
    tool_limits: ToolLimits
    output: OutputSpec | None = None
    """What its agents must end with (docs/python-api.md, "Typed outputs"), compiled."""


def type_setup(run: RunContext, atype: AgentType) -> TypeSetup:
    """The :class:`TypeSetup` of *atype* in *run*, made on first use; made again when the run's
    agent types changed since (the ``agent`` tool's description lists them)."""
    version = run.agent_types.version
    setup = run.type_setups.get(atype)
    if setup is not None and setup.types_version == version:
        return setup
    tools = _tools_for(run, atype)
    specs = tuple(_tool_spec(run, t) for t in tools.values())
    system = _system_prompt(run, atype)
    output = output_spec(atype.output_type) if atype.output_type is not None else None
    if output is not None:
        system = f"{system}\n\n{output.instructions}"
    setup = TypeSetup(
        agent_type=atype,
        types_version=version,
        tools=MappingProxyType(tools),
        specs=specs,
        system=system,
        fixed_chars=fixed_chars(system, specs),
        output_cap=output_cap(run, atype),
        tool_limits=tool_limits_for(run, atype),
        output=output,
    )
    run.type_setups[atype] = setup
    return setup


def _system_prompt(run: RunContext, atype: AgentType) -> str:
    build = run.settings.system_prompt
    if build is None:
        return atype.system
    return build(atype, list(_tools_for(run, atype)))


_T = TypeVar("_T")


def _tools_for(run: RunContext, atype: AgentType) -> dict[str, Tool]:
    if atype.tools is None:
        return dict(run.tools)
    return select_tools(run.tools, atype.tools)


def select_tools(tools: Mapping[str, _T], names: Iterable[str]) -> dict[str, _T]:
    """The tools *names* picks, in its order: a name, or a glob over names (``mcp__git__*``:
    ``*`` any run of characters, ``?`` one). A name or glob matching nothing picks nothing."""
    out: dict[str, _T] = {}
    for name in names:
        if name in tools:
            out.setdefault(name, tools[name])
        elif "*" in name or "?" in name or "[" in name:
            for candidate in fnmatch.filter(tools, name):
                out.setdefault(candidate, tools[candidate])
    return out


def _tool_spec(run: RunContext, tool: Tool) -> ToolSpec:
    description = tool.description
    if tool.name == "agent":
        kinds = "\n".join(
            f"- {t.name}: {t.description or '(no description)'}"
            # The caller learns where the work will be (docs/worktrees.md).
            + (" (works in a git worktree of its own)" if t.isolation == "worktree" else "")
            for t in run.agent_types.values()
            if t.name != "main"
        )
        description = f"{description}\n\nAgent types:\n{kinds}"
    return ToolSpec(name=tool.name, description=description, input_schema=tool.input_schema)


@attrs.define(eq=False, kw_only=True)
class _Call:
    """One tool call of a turn, as everything that runs it shares it."""

    run: RunContext
    spec: AgentSpec
    setup: TypeSetup
    call: ToolCall
    log: Any
    index: int
    """Its place in the turn: where its result goes."""
    agent_id: str | None = None
    """The id of its first sub-agent (an ``agent`` call), given in call order by the turn."""
    own_task: bool = False
    """It runs in a task of its own, started for it (the turn emitted its ``tool_started``):
    a sub-agent it starts from that task may run in it."""
    tool: Tool | None = None
    summary: str = ""
    t0: float = 0.0
    """When its ``tool_started`` went out (the three are set by :func:`_announce_tool_call`)."""
    changed_input: dict[str, Any] | None = None
    """The input the tool ran with, when a middleware layer changed the model's."""
    background: BackgroundChildren | None = None
    """Where its agent's background sub-agents run (an agent with the ``agent`` tool)."""
    child_outcome: AgentOutcome | None = None
    """How its sub-agent ended (an ``agent`` call), also when the call was cancelled: a
    cancelled call's result carries the sub-agent's partial work."""
    worktrees: list[Worktree] | None = None
    """The worktrees of the isolated sub-agents it started: its result names them (made
    with the first: most calls start none)."""
    state: AgentState | None = None
    """The calling agent's state: a model call the tool makes for it adds to its usage."""


async def _run_tool_calls(
    run: RunContext,
    spec: AgentSpec,
    state: AgentState,
    calls: list[ToolCall],
    log: Any,
    background: BackgroundChildren | None = None,
    *,
    setup: TypeSetup | None = None,
) -> None:
    """Run one turn's tool calls and add their results to the history, in call order whatever
    order they end in — also when the agent is cancelled half-way (the calls that did not
    finish read ``cancelled``), so the history stays valid for another turn.

    The calls run at the same time when every one of them is concurrency-safe (read-only tools,
    ``agent``), else one after another. Either way they start in call order (each parallel
    call's ``tool_started`` is out before the next call starts), and the sub-agents of the
    turn's ``agent`` calls get their ids in call order before any of them starts: the same
    script gives the same ids and the same order, run after run.
    """
    if setup is None:
        setup = type_setup(run, spec.agent_type)
    tools = setup.tools
    results: list[ToolResultBlock | None] = [None] * len(calls)
    parallel = len(calls) > 1 and all(
        (t := tools.get(c.name)) is None or t.concurrency_safe for c in calls
    )
    records = [
        _Call(
            run=run,
            spec=spec,
            setup=setup,
            call=call,
            log=log,
            index=i,
            agent_id=run.scheduler.new_agent_id(call.id) if call.name == "agent" else None,
            own_task=parallel,
            background=background,
            state=state,
        )
        for i, call in enumerate(calls)
    ]
    try:
        if parallel:
            all_started = trio.Event()
            async with trio.open_nursery() as nursery:
                for record in records:
                    # Announced here, then started: each call's tool_started is out before the
                    # next call's, with no hand-over (nursery.start) per call. The call's task
                    # runs only this call, so a sub-agent it starts runs in it (own_task).
                    await _announce_tool_call(record)
                    nursery.start_soon(_run_tool_call, record, results, all_started)
                all_started.set()
        else:
            for record in records:
                await _announce_tool_call(record)
                await _run_tool_call(record, results)
    finally:
        blocks = tuple(
            r or ToolResultBlock(tool_use_id=c.history_id, content="cancelled", is_error=True)
            for r, c in zip(results, calls, strict=True)
        )
        state.messages.append(Message(role="user", content=blocks))


def _own_copy(value: Any) -> Any:
    """A tool's input, its own to change: the dicts and lists of the model's JSON copied (the
    rest is immutable). The input the model sent is also in the agent's history and in the
    ``tool_started`` already delivered; a tool that fills in its arguments (a credential
    header) must change neither."""
    kind = type(value)
    if kind is dict:
        return {k: _own_copy(v) for k, v in value.items()}
    if kind is list:
        return [_own_copy(v) for v in value]
    if kind is tuple:
        return tuple(_own_copy(v) for v in value)
    return value


def _summary(tool: Tool | None, call: ToolCall, shown: dict[str, Any]) -> str:
    if tool is None:
        return f"{call.name}: (unknown tool)"
    try:
        # From the masked input: a summary is cut to one line, maybe through a secret.
        return tool.summary(shown)
    except Exception:  # a summary is cosmetic; a bad input must not break the event
        return f"{call.name}: …"


async def _announce_tool_call(record: _Call) -> None:
    """Emit a call's ``tool_started``; note its tool, summary and start time in *record*."""
    run, spec, call = record.run, record.spec, record.call
    tool = record.tool = record.setup.tools.get(call.name)
    # Masked once, here (the same dict back when clean): the event's input and the summary.
    shown = run.bus.secrets.value(call.input)
    summary = record.summary = _summary(tool, call, shown)
    record.t0 = trio.current_time()
    await run.bus.emit(
        ToolStarted(
            agent_id=spec.agent_id,
            parent_tool_use_id=spec.parent_tool_use_id,
            tool_use_id=call.id,
            name=call.name,
            input=shown,
            summary=summary,
            depth=spec.depth,
        ),
        masked=("input", "summary"),
    )


async def _run_tool_call(
    record: _Call,
    results: list[ToolResultBlock | None],
    all_started: trio.Event | None = None,
) -> None:
    """Run one announced tool call to its ``tool_finished``; its result goes in *results*.

    Args:
        all_started: set once the turn has announced all its calls (parallel calls wait for
            it before they run).
    """
    run, spec, call, log = record.run, record.spec, record.call, record.log
    status: ToolStatus | None = None
    output = ""
    scope = trio.CancelScope()
    node = None
    try:
        if all_started is not None and not all_started.is_set():
            # The turn's calls are announced first, then run together. (Usually they are all
            # announced before this task first runs: then there is nothing to wait for, and no
            # scheduler round is spent per call on finding that out.)
            await all_started.wait()
        try:
            node = run.registry.register(
                call.id,
                scope,
                parent_id=spec.agent_id,
                data=Owner(spec.agent_id, spec.parent_tool_use_id),
            )
        except ValueError:
            status, output = "error", f"duplicate tool_use_id {call.id!r} in this run"
        else:
            with scope:
                try:
                    status, output = await _execute(record)
                except Exception as exc:  # validation, permissions, context: a bug here is
                    # this call's error, never a crash of the agent and its other calls
                    log.exception("tool call failed", tool=call.name, tool_use_id=call.id)
                    status, output = "error", f"internal error: {type(exc).__name__}: {exc}"
    finally:
        if node is not None:
            run.registry.unregister(call.id)
        if status is None:
            reason = Registry.cancel_reason(node)[0] if node is not None else None
            status, output = "cancelled", cancelled_text(reason)
        if status == "cancelled" and record.child_outcome is not None:
            output = _with_partial_work(run, output, record.child_outcome)
        if record.worktrees:  # at the end: a cut from the middle keeps it
            output = "\n\n".join([output, *(w.note() for w in record.worktrees)])
        cap = record.setup.output_cap + NOTE_ROOM
        output = run.bus.masked(output, cap, how=_OUTPUT_CUT_HOW)
        results[record.index] = ToolResultBlock(
            tool_use_id=call.history_id, content=output, is_error=status != "ok"
        )
        t0 = record.t0
        await run.bus.emit_final(
            ToolFinished(
                agent_id=spec.agent_id,
                parent_tool_use_id=spec.parent_tool_use_id,
                tool_use_id=call.id,
                name=call.name,
                status=status,
                output=output,
                duration_s=trio.current_time() - t0,
                input=record.changed_input,
                depth=spec.depth,
            ),
            grace_s=run.settings.limits.finish_grace_s,
            masked=("output",),
        )


async def _execute(record: _Call) -> tuple[ToolStatus, str]:
    """Check and run one call's tool: its status and the text the model reads."""
    run, spec, tool, call = record.run, record.spec, record.tool, record.call
    if tool is None:
        known = ", ".join(sorted(record.setup.tools))
        return "error", f"unknown tool {call.name!r}; available tools: {known}"
    if call.error is not None:
        return "error", f"invalid input for {tool.name}: {call.error}"
    if "run_in_background" in call.input and not _takes_background(tool):
        return "error", (
            f"invalid input for {tool.name}: run_in_background: only the agent tool runs in "
            "the background"
        )
    try:
        validate_input(tool, call.input)
    except ToolInputError as exc:
        return "error", f"invalid input for {tool.name}: {exc}"
    summary = record.summary
    args, hook_permission = call.input, None
    hooks = run.hooks
    if hooks is not None and hooks.has("PreToolUse"):  # before permissions: docs/hooks.md
        judged = await _pre_tool_use(record, tool, hooks)
        if isinstance(judged, str):
            return "denied", judged
        args, hook_permission = judged
    granted, reason = await run.broker.check(
        tool,
        args,
        agent_id=spec.agent_id,
        parent_tool_use_id=spec.parent_tool_use_id,
        tool_use_id=call.id,
        summary=summary,
        hook=hook_permission,
        workspace=spec.workspace,
    )
    if not granted:
        return "denied", f"permission denied: {reason}"
    status, text = await _run_tool(record, tool, args)
    if status == "ok" and hooks is not None and hooks.has("PostToolUse"):
        text = await _post_tool_use(record, tool, args, text, hooks)
    return status, text


async def _run_tool(record: _Call, tool: Tool, args: dict[str, Any]) -> tuple[ToolStatus, str]:
    """The permitted call through the user's layers to the tool: its status and text."""
    run, spec, call, log = record.run, record.spec, record.call, record.log
    # One object per call both spawns its sub-agents and reports its progress.
    spawner = _Spawner(record)
    ctx = ToolContext(
        workspace=spec.workspace or run.settings.workspace,
        agent_id=spec.agent_id,
        tool_use_id=call.id,
        depth=spec.depth,
        env=run.settings.env,
        limits=record.setup.tool_limits,
        log=log.bind(tool_use_id=call.id, tool=tool.name),
        spawner=spawner,
        report_progress=spawner,
        secrets=run.bus.secrets,
        sandbox=run.sandbox,
        messenger=spawner,
        report_todos=spawner.report_todos,
        agent_type=spec.agent_type.name,
        model=spec.agent_type.model or run.settings.model,
        parent_tool_use_id=spec.parent_tool_use_id,
        add_usage=None if record.state is None else spawner.add_usage,
    )
    try:
        if run.middleware is not None and run.middleware.tool_layers:
            return "ok", await _through_middleware(record, tool, ctx, args)
        return "ok", await tool.call(_own_copy(args), ctx)
    except SubtreeCancelled as exc:
        return "cancelled", cancelled_text(exc.reason)
    except ToolError as exc:
        return "error", str(exc)
    except Exception as exc:  # a bug in a tool is a result the model reads, not a crash
        log.exception("tool raised", tool=tool.name, tool_use_id=call.id)
        return "error", f"{tool.name} failed: {type(exc).__name__}: {exc}"


def _takes_background(tool: Tool) -> bool:
    """Whether *tool*'s input has a ``run_in_background`` of its own (the ``agent`` tool's)."""
    properties = tool.input_schema.get("properties")
    return isinstance(properties, dict) and "run_in_background" in properties


async def _through_middleware(
    record: _Call, tool: Tool, ctx: ToolContext, args: dict[str, Any]
) -> str:
    """The call through the user's tool layers (docs/python-api.md, "Middleware"); an input a
    layer changed is what the tool runs with, validated again, and ``tool_finished`` shows it."""
    run, spec, call = record.run, record.spec, record.call
    assert run.middleware is not None
    invocation = ToolInvocation(
        name=call.name,
        input=_own_copy(args),
        tool_use_id=call.id,
        agent_id=spec.agent_id,
        parent_tool_use_id=spec.parent_tool_use_id,
        depth=spec.depth,
        agent_type=spec.agent_type.name,
    )

    async def innermost(given: ToolInvocation) -> str:
        if given.input is not invocation.input or given.input != args:
            validate_input(tool, given.input)
        return await tool.call(given.input, ctx)

    text, ran = await run.middleware.call_tool(invocation, innermost)
    if ran.input != call.input:
        record.changed_input = ran.input
    return text


def _hook_fields(
    record: _Call, tool: Tool, args: Mapping[str, Any], hooks: HookRunner
) -> dict[str, Any]:
    """The tool fields of a tool event's hook input, in Claude Code's names (docs/hooks.md)."""
    spec = record.spec
    fields: dict[str, Any] = {
        "tool_name": hooks.claude_name(tool.name),
        "tool_input": claude_tool_input(tool.name, args, record.run.settings.workspace),
        "tool_use_id": record.call.id,
    }
    if spec.depth > 0:
        fields |= {"agent_id": spec.agent_id, "agent_type": spec.agent_type.name}
    return fields


async def _pre_tool_use(
    record: _Call, tool: Tool, hooks: HookRunner
) -> str | tuple[dict[str, Any], Literal["allow", "ask"] | None]:
    """A call's ``PreToolUse`` hooks: the text of a block, or the input to run with (a
    hook's ``updatedInput``, checked against the tool's schema) and the permission they gave."""
    spec, call = record.spec, record.call
    verdict = await hooks.run(
        "PreToolUse", _hook_fields(record, tool, call.input, hooks), agent_id=spec.agent_id,
        parent_tool_use_id=spec.parent_tool_use_id, match=tool.name, tool_use_id=call.id,
    )  # fmt: skip
    if verdict.stop:  # Claude Code stops before the call: it does not run either
        hooks.stops.setdefault(spec.agent_id, verdict.stop_reason)
        return f"stopped by a PreToolUse hook: {verdict.stop_reason}"
    if verdict.blocked:
        return f"blocked by a PreToolUse hook: {verdict.reason}"
    args = call.input
    if verdict.updated_input is not None:
        args = our_tool_input(tool.name, verdict.updated_input, record.run.settings.workspace)
        try:
            validate_input(tool, args)
        except ToolInputError as exc:
            return f"a PreToolUse hook's updatedInput is invalid for {tool.name}: {exc}"
        record.changed_input = args
    permission = verdict.permission
    return args, permission if permission != "deny" else None


async def _post_tool_use(
    record: _Call, tool: Tool, args: dict[str, Any], text: str, hooks: HookRunner
) -> str:
    """A successful call's ``PostToolUse`` hooks: the result the model reads, with what they
    said added (a block's reason, ``additionalContext``)."""
    spec, call = record.spec, record.call
    fields = _hook_fields(record, tool, args, hooks)
    fields["tool_response"] = tool_response(tool.name, fields["tool_input"], text)
    verdict = await hooks.run(
        "PostToolUse", fields, agent_id=spec.agent_id, parent_tool_use_id=spec.parent_tool_use_id,
        match=tool.name, tool_use_id=call.id,
    )  # fmt: skip
    if verdict.stop:
        hooks.stops.setdefault(spec.agent_id, verdict.stop_reason)
    notes = ([f"PostToolUse hook: {verdict.reason}"] if verdict.blocked else []) + list(
        verdict.context
    )
    return "\n\n".join([text, *notes]) if notes else text


async def _report_progress(
    run: RunContext,
    spec: AgentSpec,
    tool_use_id: str,
    progress: float,
    total: float | None,
    message: str | None,
) -> None:
    """A ``tool_progress`` event for one call (its message masked like every output)."""
    await run.bus.emit(
        ToolProgress(
            agent_id=spec.agent_id,
            parent_tool_use_id=spec.parent_tool_use_id,
            tool_use_id=tool_use_id,
            progress=float(progress),
            total=None if total is None else float(total),
            message=None if message is None else run.bus.masked(message)[:500],
        ),
        masked=("message",),
    )


class _Spawner:
    """Starts sub-agents for one tool call, inside that call's scope; called, it reports the
    call's progress (a ``tool_progress`` event). It is also the call's messenger and adds
    the usage of model calls the tool makes: one object per call, not one per service
    (bench/README.md, "The tenth session: fan-out won back")."""

    def __init__(self, record: _Call) -> None:
        self._record = record
        self._run = record.run
        self._parent = record.spec
        self._tool_use_id = record.call.id
        self._agent_id = record.agent_id  # used by the first sub-agent
        # The call runs in a task of its own: its first sub-agent, started from that task, may
        # run in it (any other gets a task of its own, as in a call that shares its task).
        self._own_task = trio.lowlevel.current_task() if record.own_task else None

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        await _report_progress(self._run, self._parent, self._tool_use_id, progress, total, message)

    async def send(self, to: str, text: str) -> str:
        """A ``send_message`` call's delivery (:meth:`Messenger.send`)."""
        return await Messenger(self._run, self._parent).send(to, text)

    def add_usage(self, input_tokens: int, output_tokens: int) -> None:
        """A model call the tool made for the calling agent counts in its usage."""
        state = self._record.state
        assert state is not None  # given as ToolContext.add_usage only with a state
        state.input_tokens += input_tokens
        state.output_tokens += output_tokens

    async def report_todos(self, todos: list[dict[str, str]]) -> None:
        """A ``todo_updated`` event: the calling agent's whole todo list, as it is now."""
        parent = self._parent
        await self._run.bus.emit(
            TodoUpdated(
                agent_id=parent.agent_id,
                parent_tool_use_id=parent.parent_tool_use_id,
                tool_use_id=self._tool_use_id,
                todos=todos,
            )
        )

    def _take_agent_id(self) -> str:
        agent_id, self._agent_id = self._agent_id, None
        return agent_id or self._run.scheduler.new_agent_id(self._tool_use_id)

    async def run_subagent(
        self,
        *,
        agent_type: str,
        prompt: str,
        description: str,
        budget: Mapping[str, Any] | None,
    ) -> str:
        outcome = await self._run_one(
            *self._prepare(agent_type, prompt, budget, None, description), on_outcome=self._seen
        )
        return _child_result(self._run, outcome)

    def _seen(self, outcome: AgentOutcome) -> None:
        self._record.child_outcome = outcome

    async def start_background(
        self,
        *,
        agent_type: str,
        prompt: str,
        description: str,
        budget: Mapping[str, Any] | None,
    ) -> str:
        background = self._record.background
        if background is None:  # an agent that may start no sub-agent has no nursery
            self._check_depth()
            raise ToolError("background sub-agents are not available here")
        run = self._run
        spec, runner = self._prepare(agent_type, prompt, budget, None, description)
        spec = attrs.evolve(spec, background=True)

        async def run_child() -> AgentOutcome:
            await run.scheduler.acquire_slot(spec.agent_id)  # the parent keeps its own
            try:
                # As a waited-for child runs: in a worktree of its own if its type says so
                # (docs/worktrees.md), its subtree on a host if placed on Ray (docs/cluster.md);
                # this task, in the parent's nursery, is its own.
                if spec.agent_type.isolation == "worktree":
                    return await self._run_isolated(
                        spec, runner, trio.TASK_STATUS_IGNORED, None, own_task=True
                    )
                return await self._run_placed(
                    spec, runner, trio.TASK_STATUS_IGNORED, None, own_task=True
                )
            finally:
                run.scheduler.release_slot(spec.agent_id)

        def report(outcome: AgentOutcome) -> str:
            return _background_report(run, self._record, outcome, description)

        background.start(spec.agent_id, run_child, report)
        return (
            f"Started sub-agent {spec.agent_id} ({description}) in the background. Its result "
            "comes to you as a message when it ends; go on with other work meanwhile, or end "
            "your turn to wait for it."
        )

    async def map_subagents(
        self,
        prompts: Sequence[str],
        *,
        agent_type: str = "general",
        output_type: Any = None,
        budget: Mapping[str, Any] | None = None,
    ) -> list[AgentOutcome]:
        specs = [self._prepare(agent_type, p, budget, output_type) for p in prompts]
        outcomes: list[AgentOutcome | None] = [None] * len(specs)
        run = self._run

        async def one(
            index: int,
            spec: AgentSpec,
            runner: SubtreeRunner | None,
            task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
        ) -> None:
            outcomes[index] = await self._run_one(
                spec, runner, slot_held=True, task_status=task_status
            )

        parent_id = self._parent.agent_id
        async with trio.open_nursery() as nursery:
            for index, (spec, runner) in enumerate(specs):
                # One by one in prompt order, each once a max_parallel slot is free: the
                # children's start order (and their events) follows the prompts.
                run.scheduler.child_starting(parent_id)
                holding = False
                try:
                    await run.scheduler.acquire_slot(spec.agent_id)
                    holding = True
                finally:
                    if not holding:
                        run.scheduler.child_finished(parent_id)
                if runner is None:
                    # Handed over once the child runs in a task of its own: the next one
                    # starts after it, so agent_started follows the prompts too.
                    await nursery.start(one, index, spec, runner)
                else:
                    nursery.start_soon(one, index, spec, runner)
        return [o for o in outcomes if o is not None]

    def _check_depth(self) -> int:
        """The depth a sub-agent started here would have; ToolError past ``max_depth``."""
        depth = self._parent.depth + 1
        limit = self._run.settings.limits.max_depth
        if depth > limit:
            raise ToolError(
                f"max depth {limit} reached: a sub-agent here would be at depth {depth}; do "
                "this work yourself"
            )
        return depth

    def _prepare(
        self,
        agent_type: str,
        prompt: str,
        budget: Mapping[str, Any] | None,
        output_type: Any,
        description: str = "",
    ) -> tuple[AgentSpec, SubtreeRunner | None]:
        run = self._run
        try:
            atype = run.agent_types.lookup(agent_type)
            if output_type is not None:
                atype = attrs.evolve(atype, output_type=output_type)
                output_spec(output_type)
            call_budget = Budget.from_mapping(budget, where="input.budget") if budget else None
        except ConfigError as exc:
            raise ToolError(str(exc)) from None
        depth = self._check_depth()
        if not run.scheduler.reserve_agent():
            raise ToolError(f"max agents {run.settings.limits.max_agents} reached for this run")
        if atype.budget is None and call_budget is None:
            effective = None  # the common case: no Budget to make and find empty
        else:
            effective = (atype.budget or Budget()).tighter(call_budget)
        spec = AgentSpec(
            agent_id=self._take_agent_id(),
            agent_type=atype,
            prompt=prompt,
            depth=depth,
            parent_tool_use_id=self._tool_use_id,
            parent_agent_id=self._parent.agent_id,
            budget=None if effective is None or effective.empty else effective,
            description=description,
            workspace=self._parent.workspace,
        )
        runner = None
        if atype.placement != "local":
            runner = run.placements.get(atype.placement)
            if runner is None:
                raise ToolError(f"placement {atype.placement!r} is not available in this run")
        return spec, runner

    async def _run_one(
        self,
        spec: AgentSpec,
        runner: SubtreeRunner | None,
        *,
        slot_held: bool = False,
        on_outcome: Callable[[AgentOutcome], None] | None = None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> AgentOutcome:
        run = self._run
        parent_id = self._parent.agent_id
        if not slot_held:
            run.scheduler.child_starting(parent_id)
        try:
            if not slot_held:
                # Waits visibly: this call's tool_started is out; agent_started comes when it
                # runs.
                await run.scheduler.acquire_slot(spec.agent_id)
            try:
                if spec.agent_type.isolation == "worktree":
                    return await self._run_isolated(spec, runner, task_status, on_outcome)
                return await self._run_placed(spec, runner, task_status, on_outcome)
            finally:
                run.scheduler.release_slot(spec.agent_id)
        finally:
            run.scheduler.child_finished(parent_id)

    def _run_placed(
        self,
        spec: AgentSpec,
        runner: SubtreeRunner | None,
        task_status: trio.TaskStatus[None],
        on_outcome: Callable[[AgentOutcome], None] | None,
        *,
        own_task: bool = False,
    ) -> Awaitable[AgentOutcome]:
        """*spec*'s agent here or, with a *runner*, its subtree on a host (to be awaited by
        the caller: no coroutine of its own per sub-agent). *own_task*: this task runs nothing
        else (a background child's); else the call's first sub-agent may have the call's
        task."""
        run = self._run
        if runner is not None:
            return _run_remote(run, spec, runner, on_outcome)
        if task_status is not trio.TASK_STATUS_IGNORED:
            return run_agent_actor(
                run, spec, own_task=True, on_outcome=on_outcome, task_status=task_status
            )
        if not own_task:
            own_task = self._own_task is trio.lowlevel.current_task()
            self._own_task = None
        return run_agent_actor(run, spec, own_task=own_task, on_outcome=on_outcome)

    async def _run_isolated(
        self,
        spec: AgentSpec,
        runner: SubtreeRunner | None,
        task_status: trio.TaskStatus[None],
        on_outcome: Callable[[AgentOutcome], None] | None,
        *,
        own_task: bool = False,
    ) -> AgentOutcome:
        """*spec*'s agent in a git worktree of its own, made first and, once the agent has
        ended, removed if nothing changed in it (docs/worktrees.md). A waited-for agent's
        worktree is named by its call's result, a background one's by its report.

        Raises:
            WorktreeError: the worktree cannot be made (a ToolError: the call's error result).
        """
        run = self._run
        worktree = await add_worktree(
            spec.workspace or run.settings.workspace,
            run_id=run.settings.run_id,
            agent_id=spec.agent_id,
            agent_type=spec.agent_type.name,
            into=worktree_folder(run.settings.workspace),
        )
        # A background agent's call has ended (or is ending): its result is not told.
        record = self._record
        if spec.background:
            worktrees: list[Worktree] = []
        else:
            if record.worktrees is None:
                record.worktrees = []
            worktrees = record.worktrees
        index = len(worktrees)
        # Named as unfinished until it is known: a cancel from here on keeps it so.
        worktrees.append(attrs.evolve(worktree, changes="its agent did not finish"))
        run.worktrees.add(worktree.workspace, spec.agent_id)  # an MCP root from now on
        outcome = await self._run_placed(
            attrs.evolve(spec, workspace=worktree.workspace),
            runner,
            task_status,
            on_outcome,
            own_task=own_task,
        )
        finished = await finish_worktree(worktree, cancelled=outcome.status == "cancelled")
        worktrees[index] = finished
        if not finished.kept:
            run.worktrees.remove(worktree.workspace)
        return attrs.evolve(outcome, worktree=finished)


async def _run_remote(
    run: RunContext,
    spec: AgentSpec,
    runner: SubtreeRunner,
    on_outcome: Callable[[AgentOutcome], None] | None,
) -> AgentOutcome:
    """*spec*'s subtree on a host (docs/cluster.md), its outcome told as a local one's is."""
    outcome = await runner.run_subtree(run, spec)
    if on_outcome is not None:
        on_outcome(outcome)
    return outcome


def _child_result(run: RunContext, outcome: AgentOutcome) -> str:
    """What an ``agent`` call's model reads of its sub-agent: its final text, or why not (a
    stopped one's partial work; a cancelled one's is added by the call, which also sees a
    cancel from above)."""
    name = outcome.name
    if outcome.status == "completed":
        return outcome.result or ""
    if outcome.status == "stopped":
        head = f"sub-agent {name} was {outcome.error or 'stopped'}, before it finished its task"
        return _with_partial_work(run, head, outcome)
    if outcome.status == "cancelled":
        raise SubtreeCancelled(outcome.cancel_reason or "cancelled")
    if outcome.status == "max_turns":
        raise ToolError(
            f"sub-agent {name} stopped after {outcome.turns} turns (max_turns)"
            + (f"; its last text: {outcome.result}" if outcome.result else "")
        )
    if outcome.status == "budget_exceeded":
        raise ToolError(f"sub-agent {name}: {outcome.error}")
    raise ToolError(f"sub-agent {name} failed: {outcome.error}")


def _background_report(
    run: RunContext, record: _Call, outcome: AgentOutcome, description: str
) -> str:
    """The message a background sub-agent's end leaves its parent: how it ended, and its
    result, its error, or its partial work; masked, and cut to the output limit."""
    try:
        body = _child_result(run, outcome)
    except SubtreeCancelled as exc:
        body = _with_partial_work(run, cancelled_text(exc.reason), outcome)
    except ToolError as exc:
        body = str(exc)
    head = f"[background sub-agent {outcome.agent_id} ({description}) ended {outcome.status}]"
    if outcome.worktree is not None:  # at the end, as in a call's result: a cut keeps it
        body = f"{body}\n\n{outcome.worktree.note()}"
    cap = record.setup.output_cap + NOTE_ROOM
    return run.bus.masked(f"{head}\n{body}", cap, how=_OUTPUT_CUT_HOW)


def _with_partial_work(run: RunContext, head: str, outcome: AgentOutcome) -> str:
    """*head*, then what the stopped or cancelled sub-agent of *outcome* had done: its last
    text and the tool calls it finished, one a line (docs/collaboration.md#partial-work).
    The call's output limit cuts it, as any tool output."""
    text, finished = _work_done(run, outcome.state)
    lines = [head]
    if text or finished:
        lines.append("Its partial work:")
    if text:
        lines.append(f"Its last text: {text}")
    if finished:
        lines.append(f"Tool calls it finished ({len(finished)}):")
        lines.extend(f"- {line}" for line in finished)
    return "\n".join(lines)


def _work_done(run: RunContext, state: AgentState) -> tuple[str, list[str]]:
    """An agent's last text and its finished tool calls (``summary (status)``), read from its
    history: a call whose result is a cancel (or the filler of an unanswered call) is not
    finished."""
    results: dict[str, ToolResultBlock] = {}
    for message in state.messages:
        if message.role == "user":
            for block in message.content:
                if isinstance(block, ToolResultBlock):
                    results[block.tool_use_id] = block
    text = ""
    finished: list[str] = []
    for message in state.messages:
        if message.role != "assistant":
            continue
        said = "".join(b.text for b in message.content if isinstance(b, TextBlock))
        text = said or text
        for use in message.tool_uses:
            result = results.get(use.id)
            if result is None or result.content == "cancelled" or (
                result.content.startswith("cancelled: ")
            ):
                continue
            tool = run.tools.get(use.name)
            summary = _summary(tool, ToolCall(id=use.id, name=use.name, input=use.input),
                               run.bus.secrets.value(use.input))  # fmt: skip
            finished.append(f"{summary} ({'error' if result.is_error else 'ok'})")
    return text, finished
