"""The replay provider: plays a :class:`~runtime.replay._recording.Recording` back as a run.

:class:`Replayer` is a provider (runtime/core/_provider.py) and a tap of the run's bus at once.
As a tap it matches every live agent to its recorded counterpart by its place in the tree: the
k-th root to the k-th recorded root, a sub-agent to the sub-agent of the recorded tool call its
``agent`` call replays (the provider made that call, so it knows which one it was). As a
provider it streams each agent's recorded turns in order, with the recorded tool-call ids (so
the replay's tree lines up with the recording's, node for node), and then ends the agent as it
ended: a recorded provider error is raised again, a recorded cancel is requested again (on the
node the recording named, before anything under it ends cancelled), and an agent the killed
run left running stops the replay there (:attr:`Replayer.stopped`).

Divergence: every ``tool_finished`` and ``agent_finished`` of the replay is compared with its
recording; a difference becomes one ``replay_diverged`` event (docs/events.md), e.g.
``main \u203a reviewer, turn 3``: ``read(src/x.py) returned 41 lines, recorded 38``. With ``strict``
the first one ends the run ``failed``: the root's running calls are cancelled and every agent's
next model call fails with the divergence.

Fork: with ``until`` (a recorded agent and turn number) and a ``continue_with`` provider, the
replay plays up to (not including) that turn; from then on every agent's next turn comes from
the live provider, which sees the replayed history.

:meth:`Replayer.mock_tools` wraps tools so that a replayed call returns its recorded output
instead of running (``--mock-tools``); the ``agent`` tool always runs, so the tree is rebuilt.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable, Mapping
from typing import Any, ClassVar

import attrs
import trio

from runtime.core import (
    ModelRequest,
    Provider,
    ProviderError,
    ReplayDiverged,
    RunContext,
    StreamItem,
    SubtreeCancelled,
    TextChunk,
    ThinkingChunk,
    Tool,
    ToolCall,
    ToolContext,
    ToolError,
    TurnEnd,
    cancel_node,
    cancel_reason_of,
)
from runtime.providers import chunk_text, default_summary, estimate_input_tokens

from ._recording import PATH_SEP, RecordedAgent, RecordedCall, RecordedTurn, Recording

MAX_REPORTED = 1000
"""The most ``replay_diverged`` events one replay emits (it counts them all)."""


@attrs.define(eq=False, kw_only=True)
class _Live:
    """A live agent of the replay and what it replays."""

    rec: RecordedAgent | None
    path: str
    parent_tool_use_id: str | None = None
    turns: int = 0
    live: bool = False
    """Its turns come from the fork's live provider."""
    tools: set[str] = attrs.Factory(set)
    """Its tool calls still running (live ids)."""


@attrs.define(eq=False, kw_only=True)
class Divergence:
    """One difference between the replay and its recording."""

    node: str
    detail: str
    agent_id: str | None = None

    def __str__(self) -> str:
        return f"{self.node}: {self.detail}"


class Replayer:
    """Plays a recording back (see the module docstring).

    Args:
        recording: what to play.
        strict: end the run ``failed`` at the first divergence.
        realtime: wait each turn's recorded time before streaming it (default: no waits).
        until: ``(agent, turn number)``: the first turn a fork asks the live provider for.
        continue_with: the fork's live provider.
    """

    name = "replay"

    def __init__(
        self,
        recording: Recording,
        *,
        strict: bool = False,
        realtime: bool = False,
        until: tuple[RecordedAgent, int] | None = None,
        continue_with: Provider | None = None,
        until_id: str | None = None,
    ) -> None:
        self.recording = recording
        self.strict = strict
        self.realtime = realtime
        self.until = until
        self.until_id = until_id
        self.continue_with = continue_with
        if continue_with is not None:  # run_started.config names the provider a fork goes on with
            self.name = continue_with.name
        self.forked = False
        self.divergences: list[Divergence] = []
        self.divergence_count = 0
        self.stopped: str | None = None
        """Why the replay stopped before its end (the recording ends there: a killed run)."""
        self.halted: Divergence | None = None
        """The divergence a ``strict`` replay stopped at."""
        self.model = (
            getattr(continue_with, "model", None) or recording.config.get("model") or "replay"
        )
        self._run: RunContext | None = None
        self._agents: dict[str, _Live] = {}
        self._calls: dict[str, RecordedCall] = {}
        self._matched: set[str] = set()
        self._pending: list[Divergence] = []
        self._halt_sent = False
        self._checked: set[str] = set()
        self._cancelled: set[str] = set()
        """The nodes whose recorded cancel was requested again."""
        self._roots = 0
        self._root_ids: list[str] = []

    # -- wiring -----------------------------------------------------------------------------

    def attach(self, run: RunContext) -> None:
        """Watch *run*'s events (call before its first agent starts)."""
        self._run = run
        run.bus.add_tap(self.tap)

    def describe(self) -> dict[str, Any]:
        rec = self.recording
        replay = {"trace": rec.source, "run_id": rec.run_id, "strict": self.strict}
        if self.continue_with is not None:
            return {
                **self.continue_with.describe(),
                "provider": self.continue_with.name,
                "forked_from": {**replay, "until": self.until_id},
            }
        return {"provider": "replay", "replay_of": replay}

    def mock_tools(self, tools: Iterable[Tool]) -> list[Tool]:
        """*tools*, each but ``agent`` answering replayed calls with their recorded output, and
        a stand-in for every recorded tool not among them (an MCP server's, a user's): it takes
        any input, asks permission like a tool that changes things, and answers the same way."""
        out = [t if t.name == "agent" else _mocked(t, self) for t in tools]
        missing = {c.name for c in self.recording.calls.values()} - {t.name for t in out}
        out.extend(_stand_in(name, self) for name in sorted(missing))
        return out

    def recorded_call(self, tool_use_id: str) -> RecordedCall | None:
        """The recorded call a live call replays (None for a live call after a fork)."""
        return self._calls.get(tool_use_id)

    # -- the tap: matching and comparing -----------------------------------------------------

    def tap(self, event: Any) -> None:
        """Match agents and compare results; runs synchronously inside each emit."""
        kind = event.type
        if kind == "agent_started":
            self._agent_started(event)
        elif kind == "tool_started":
            live = self._agents.get(event.agent_id)
            if live is not None:
                live.tools.add(event.tool_use_id)
        elif kind == "tool_finished":
            live = self._agents.get(event.agent_id)
            if live is not None:
                live.tools.discard(event.tool_use_id)
            call = self._calls.get(event.tool_use_id)
            quiet = self.stopped or self.forked or self.halted
            if call is not None and live is not None and not quiet:
                detail = _compare_call(call, event.status, event.output)
                if detail is not None:
                    self._diverge(f"{live.path}, turn {call.turn}", detail, event.agent_id)
        elif kind == "agent_finished":
            live = self._agents.get(event.agent_id)
            if live is None or live.rec is None or self.stopped or self.halted or live.live:
                return
            want = live.rec.status
            if want is not None and event.status != want and not self.forked:
                self._diverge(live.path, f"ended {event.status}, recorded {want}", event.agent_id)

    def _agent_started(self, event: Any) -> None:
        rec: RecordedAgent | None
        parent = event.parent_tool_use_id
        if parent is None:
            roots = self.recording.roots
            rec = roots[self._roots] if self._roots < len(roots) else None
            self._roots += 1
            self._root_ids.append(event.agent_id)
            path = event.name
        else:
            call = self._calls.get(parent)
            rec = call.child if call is not None else None
            owner = self._agents.get(event.parent_agent_id)
            path = (owner.path if owner is not None else "?") + PATH_SEP + event.name
            if call is None:  # started by a live turn after a fork: live from the start
                self._agents[event.agent_id] = _Live(
                    rec=None, path=path, parent_tool_use_id=parent, live=True
                )
                return
        self._agents[event.agent_id] = _Live(
            rec=rec, path=path, parent_tool_use_id=parent, live=self.forked
        )
        if rec is None:
            self._diverge(path, "started, but the recording has no agent here", event.agent_id)
        else:
            self._matched.add(rec.id)
            if rec.name != event.name:
                self._diverge(path, f"is a {event.name}, recorded {rec.name}", event.agent_id)

    def _diverge(self, node: str, detail: str, agent_id: str | None) -> None:
        self.divergence_count += 1
        div = Divergence(node=node, detail=detail, agent_id=agent_id)
        if len(self.divergences) < MAX_REPORTED:
            self.divergences.append(div)
            self._pending.append(div)
        if self.strict and self.halted is None:
            self.halted = div

    async def _report(self, agent_id: str) -> None:
        """Emit the divergences found so far as events of *agent_id*, which is asking for a
        model turn: a tap cannot emit (the other readers have not seen its event yet), and an
        agent's events must lie inside its span, so they go out from the next agent to ask.

        Cancellation: not a checkpoint (the bus waits only for a full ``block`` reader).
        """
        run = self._run
        live = self._agents.get(agent_id)
        if run is None or live is None:
            return
        while self._pending:
            div = self._pending.pop(0)
            await run.bus.emit(
                ReplayDiverged(
                    agent_id=agent_id,
                    parent_tool_use_id=live.parent_tool_use_id,
                    node=div.node,
                    detail=div.detail,
                ),
            )
        if self.halted is not None and not self._halt_sent:
            self._halt_sent = True
            reason = f"replay diverged (--strict): {self.halted}"
            for root in self._root_ids:  # their running calls, so each root fails next
                root_live = self._agents.get(root)
                for tool_use_id in list(root_live.tools if root_live is not None else ()):
                    cancel_node(run, tool_use_id, reason, by="runtime")

    def _check_left_out(self, root: RecordedAgent) -> None:
        """Recorded agents under *root* that the replay never started, once they cannot come."""
        if self.stopped or self.halted or self.forked or root.id in self._checked:
            return
        self._checked.add(root.id)
        stack = [root]
        while stack:
            rec = stack.pop()
            if rec.id not in self._matched:
                self._diverge(rec.path, "was recorded, but the replay has no agent here", None)
                continue
            stack.extend(c.child for t in rec.turns for c in t.calls if c.child is not None)

    def finish(self) -> list[Divergence]:
        """Check what the run left out, once the roots have ended; returns every divergence.

        Divergences found after the last root's last model turn (its own end, say) cannot be
        events of the run any more: they are only in the returned list.
        """
        for root in self.recording.roots[: self._roots]:
            self._check_left_out(root)
        return self.divergences

    # -- the provider ------------------------------------------------------------------------

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        """Stream the next recorded turn of the requesting agent.

        Raises:
            ProviderError: the agent's recorded provider error; a ``strict`` replay that
                diverged; an agent with no recorded counterpart, or past its last turn.

        Cancellation: a checkpoint between deltas; a recorded cancel waits to be cancelled.
        """
        live = self._agents.get(request.agent_id)
        if live is not None and (live.live or self._forks_here(live)):
            live.live = True
            assert self.continue_with is not None
            async for item in self.continue_with.stream(request):
                yield item
            return
        if request.purpose == "compact":
            await trio.lowlevel.checkpoint()
            summary = default_summary(request)
            for piece in chunk_text(summary):
                yield TextChunk(piece)
            yield TurnEnd(
                stop_reason="end_turn",
                input_tokens=estimate_input_tokens(request),
                output_tokens=max(1, len(summary) // 4),
            )
            return
        await self._report(request.agent_id)
        if self.halted is not None:
            if request.agent_id not in self._root_ids:
                await trio.sleep_forever()  # the halt cancels the root's calls, this one with them
            raise ProviderError(f"replay stopped at the first divergence (--strict): {self.halted}")
        if live is None or live.rec is None:
            raise ProviderError("replay: this agent has no recorded counterpart")
        rec = live.rec
        index = live.turns
        live.turns += 1
        if rec.parent_call is None and not any(t.calls for t in rec.turns[index:]):
            # A root's last turn: everything under it has ended, so what never started won't.
            self._check_left_out(rec)
            await self._report(request.agent_id)
        if index < len(rec.turns):
            async for item in self._play(rec.turns[index]):
                yield item
            return
        async for item in self._end(rec, live, request.agent_id, index + 1):
            yield item

    def _forks_here(self, live: _Live) -> bool:
        if self.continue_with is None:
            return False
        if self.forked:
            return True
        if self.until is not None and live.rec is self.until[0] and live.turns + 1 >= self.until[1]:
            self.forked = True
            return True
        return False

    async def _play(self, turn: RecordedTurn) -> AsyncGenerator[StreamItem, None]:
        if self.realtime and turn.delay_s:
            await trio.sleep(turn.delay_s)
        else:
            await trio.lowlevel.checkpoint()
        for piece in chunk_text(turn.thinking):
            yield ThinkingChunk(piece)
        for piece in chunk_text(turn.text):
            yield TextChunk(piece)
        for call in turn.calls:
            # The recorded id: unique in the recorded run, so in its replay too (a fork's live
            # provider makes ids of its own kind: ``tu-fork-…``, the model's).
            self._calls[call.id] = call
            yield ToolCall(call.id, call.name, dict(call.input))
        yield TurnEnd(
            stop_reason=turn.stop_reason,  # type: ignore[arg-type]  # read from an event
            input_tokens=turn.input_tokens,
            output_tokens=turn.output_tokens,
            cache_read_tokens=turn.cache_read_tokens,
            cache_write_tokens=turn.cache_write_tokens,
        )

    async def _end(
        self, rec: RecordedAgent, live: _Live, agent_id: str, number: int
    ) -> AsyncGenerator[StreamItem, None]:
        """The agent asks for a turn past its recorded ones: end it as it ended."""
        for piece in chunk_text(rec.tail_thinking):
            yield ThinkingChunk(piece)
        for piece in chunk_text(rec.tail_text):
            yield TextChunk(piece)
        if rec.status == "failed":
            raise ProviderError(rec.error or "failed (the recording gives no reason)")
        if rec.status in ("cancelled", "budget_exceeded"):
            if not self.cancel_as_recorded(rec):
                reason = rec.cancel_reason or cancel_reason_of(rec.error or "cancelled")
                by = rec.cancel_by or ("budget" if rec.status == "budget_exceeded" else "runtime")
                self._cancel(agent_id, reason, by)
            await trio.sleep_forever()
        if rec.status is None:
            self.stop(f"the trace ends here: the recorded run was killed while {live.path} ran")
            await trio.sleep_forever()
        self._diverge(
            f"{live.path}, turn {number}",
            f"asked for another turn; the recording has {len(rec.turns)}",
            agent_id,
        )
        raise ProviderError(
            f"replay: {live.path} asked for turn {number}; the recording has {len(rec.turns)}"
        )

    def cancel_as_recorded(self, rec: RecordedAgent | RecordedCall) -> bool:
        """Request the recorded cancel that ended *rec* (a call, or an agent, cancelled by it
        or by a cancel of an ancestor), on the node the recording named, so that
        ``cancel_requested`` comes before whatever under it ends ``cancelled``, as recorded.

        Returns:
            Whether the cancel is under way (requested now or before); False when the
            recording names none, or its node is not in this run.
        """
        if isinstance(rec, RecordedCall):
            if rec.cancel_reason is not None:
                return self._cancel_once(rec.id, rec.cancel_reason, rec.cancel_by)
            agent: RecordedAgent | None = rec.agent
        else:
            agent = rec
        while agent is not None:
            if agent.cancel_reason is not None:
                node = self._live_node(agent)
                if node is None:
                    return False
                return self._cancel_once(node, agent.cancel_reason, agent.cancel_by)
            agent = agent.parent_call.agent if agent.parent_call is not None else None
        return False

    def _live_node(self, agent: RecordedAgent) -> str | None:
        """The live id of the node a recorded cancel of *agent* named: its ``agent`` call (the
        replay keeps the recorded call ids), else the live agent that plays it."""
        call = agent.parent_call
        if call is not None and agent.cancel_target == call.id:
            return call.id
        return next((aid for aid, live in self._agents.items() if live.rec is agent), None)

    def _cancel_once(self, node_id: str, reason: str, by: str | None) -> bool:
        if node_id in self._cancelled:
            return True  # requested already: under way, or done (a checkpoint raises then)
        assert self._run is not None
        if not cancel_node(self._run, node_id, reason, by=by or "runtime"):  # type: ignore[arg-type]
            return False  # unknown here, or not announced yet: the caller ends it itself
        self._cancelled.add(node_id)
        return True

    def _cancel(self, node_id: str, reason: str, by: str) -> None:
        assert self._run is not None
        cancel_node(self._run, node_id, reason, by=by)  # type: ignore[arg-type]  # from an event

    def stop(self, message: str) -> None:
        """End the replay where the recording ends: every root is cancelled with *message*."""
        if self.stopped is None:
            self.stopped = message
        assert self._run is not None
        for root in self._root_ids:
            cancel_node(self._run, root, message, by="runtime")


def call_label(name: str, args: Mapping[str, Any]) -> str:
    """``read(src/x.py)``: the tool and its first short text argument."""
    first = next((v for v in args.values() if isinstance(v, str)), "")
    first = " ".join(first.split())
    if len(first) > 60:
        first = first[:59] + "…"
    return f"{name}({first})"


def _compare_call(call: RecordedCall, status: str, output: str) -> str | None:
    """How a replayed call's end differs from its recording, or None."""
    if call.status is None or (status == call.status and output == call.output):
        return None
    label = call_label(call.name, call.input)
    recorded = call.output or ""
    if call.status == "denied" and status != "denied":
        return f"{label} was allowed, recorded denied ({recorded})"
    if status == "denied" and call.status != "denied":
        return f"{label} was denied ({output}), recorded {call.status}"
    if status != call.status:
        return f"{label} ended {status}, recorded {call.status}"
    got, want = len(output.splitlines()), len(recorded.splitlines())
    if got != want:
        return f"{label} returned {got} lines, recorded {want}"
    lines = zip(output.splitlines(), recorded.splitlines(), strict=False)
    for number, (a, b) in enumerate(lines, 1):
        if a != b:
            return f"{label} returned other text on line {number} of {got}"
    return f"{label} returned other text"


class _MockTool(Tool):
    """A tool answering replayed calls with their recorded output (:meth:`Replayer.mock_tools`)."""

    name: ClassVar[str] = "mock"
    description: ClassVar[str] = ""
    input_schema: ClassVar[dict[str, Any]] = {}

    def __init__(self, real: Tool | None, replayer: Replayer) -> None:
        self.real = real
        """The tool it stands for; None for a recorded tool this runtime does not have."""
        self.replayer = replayer

    def summary(self, args: Mapping[str, Any]) -> str:
        return self.real.summary(args) if self.real is not None else super().summary(args)

    def permission_target(self, args: Mapping[str, Any]) -> str:
        return self.real.permission_target(args) if self.real is not None else ""

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        """The recorded output of a replayed call; a live call (after a fork) runs for real.

        Cancellation: a checkpoint; a call the killed run left running waits to be cancelled.
        """
        rec = self.replayer.recorded_call(ctx.tool_use_id)
        if rec is None and self.real is None:
            await trio.lowlevel.checkpoint()
            raise ToolError(f"{self.name} is not available in this replay (it was only recorded)")
        if rec is None:
            assert self.real is not None
            return await self.real.call(args, ctx)
        await trio.lowlevel.checkpoint()
        output = rec.output or ""
        if rec.status == "ok":
            return output
        if rec.status == "cancelled":
            if self.replayer.cancel_as_recorded(rec):
                await trio.sleep_forever()  # the cancel is on its way down to this call
            raise SubtreeCancelled(cancel_reason_of(output))
        if rec.status is None:
            self.replayer.stop(
                f"the trace ends here: the recorded run was killed during {rec.id} "
                f"({call_label(rec.name, rec.input)})"
            )
            await trio.sleep_forever()
        raise ToolError(output)


def _mocked(real: Tool, replayer: Replayer) -> Tool:
    cls = type(real)
    namespace = {
        key: getattr(real, key)
        for key in (
            "name",
            "description",
            "input_schema",
            "read_only",
            "concurrency_safe",
            "needs_permission",
            "edits_files",
            "permission_target_kind",
        )
    }
    mock_cls: type[_MockTool] = type(f"Replayed{cls.__name__}", (_MockTool,), namespace)
    return mock_cls(real, replayer)


def _stand_in(name: str, replayer: Replayer) -> Tool:
    namespace = {
        "name": name,
        "description": f"{name} as recorded (a stand-in made by the replay)",
        "input_schema": {"type": "object"},
    }
    cls: type[_MockTool] = type("RecordedTool", (_MockTool,), namespace)
    return cls(None, replayer)
