"""What a server asks of the client: sampling, elicitation, roots, logging (docs/mcp.md).

The SDK answers each request a server sends in a task of the connection, not of the agent
whose tool call made the server ask. :class:`ServerRequests` ties the two back together: every
tool call in flight on the server is registered (:meth:`ServerRequests.calling`, a
:class:`Caller`), a request is answered for the call that caused it (the only one in flight, or
the oldest one: stdio says no more), in a cancel scope that the call's end cancels. So a
cancelled subtree cancels its sampling and its questions with it, and a server that asks
outside any call is declined: nobody is there to bill or to ask.

* **Sampling** (``sampling/createMessage``) goes to the calling agent's model through the run's
  provider (its rate limits and retries), after the permission broker allows it (a request
  named ``mcp_sampling`` whose target is the server's name); its tokens are the agent's, and it
  ends with one ``mcp_sampled`` event under the call. Bounded: a few at a time per server,
  :data:`MAX_SAMPLES_PER_CALL` per call, :data:`MAX_SAMPLE_CHARS` of messages and
  :data:`MAX_SAMPLE_TOKENS` of answer each.
* **Elicitation** (``elicitation/create``) becomes a question on the run's
  :class:`~runtime.core.ElicitationDesk` (the terminal or a control-socket client answers),
  declined at once when nobody can answer; cancelled after :data:`ELICITATION_TIMEOUT_S`
  unanswered; at most :data:`MAX_QUESTIONS_PER_CALL` per call (the rest declined unasked).
* **Roots** (``roots/list``): the workspace and the run's worktrees that exist now; when one is
  made or removed the server is sent ``notifications/roots/list_changed``
  (:meth:`ServerRequests.roots_changed`).
* **Logging** (``notifications/message``): to the debug log, one line each, bounded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Mapping
from contextlib import aclosing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import mcp_types
import trio

from runtime._logs import get_logger
from runtime.core import McpSampled as SampledEvent
from runtime.core import (
    Message,
    ModelRequest,
    PendingElicitation,
    ProviderError,
    Secrets,
    TextBlock,
    TextChunk,
    Tool,
    ToolContext,
    ToolError,
    TurnEnd,
    one_line,
)

if TYPE_CHECKING:
    from mcp.client.session import ClientRequestContext

    from runtime.core import RunContext

__all__ = ["Caller", "SamplingRequest", "ServerRequests"]

MAX_SAMPLES_PER_CALL = 20
"""The most sampling requests one tool call may make; the rest are declined (a flood)."""
MAX_CONCURRENT_SAMPLES = 2
"""Sampling requests of one server answered at the same time; the others wait their turn."""
MAX_SAMPLE_CHARS = 200_000
"""The most characters of messages (and system prompt) one sampling request may send."""
MAX_SAMPLE_TOKENS = 4096
"""The most tokens a sampling answer may have, whatever the server asks for."""
MAX_QUESTIONS_PER_CALL = 20
"""The most questions (elicitations) one tool call may ask; the rest are declined unasked."""
MAX_LOG_CHARS = 2000
"""A server's log message is cut to this many characters in the debug log."""
ELICITATION_TIMEOUT_S = 600.0
"""How long a question waits for an answer before it is cancelled."""

_STOP_REASONS: Mapping[str, str] = {
    "end_turn": "endTurn",
    "max_tokens": "maxTokens",
    "stop_sequence": "stopSequence",
    "tool_use": "toolUse",
}


@attrs.define(eq=False, kw_only=True)
class Caller:
    """A tool call in flight on a server: whom its requests are for.

    Attributes:
        scopes: the cancel scopes of the requests being answered for it; cancelled when the
            call ends (returns, fails or is cancelled with its subtree).
    """

    agent_id: str
    tool_use_id: str
    parent_tool_use_id: str | None = None
    agent_type: str = ""
    model: str = ""
    add_usage: Callable[[int, int], None] | None = None
    samples: int = 0
    questions: int = 0
    scopes: set[trio.CancelScope] = attrs.Factory(set)

    @classmethod
    def of(cls, ctx: ToolContext) -> Caller:
        """The caller a tool call's context describes."""
        return cls(
            agent_id=ctx.agent_id,
            tool_use_id=ctx.tool_use_id,
            parent_tool_use_id=ctx.parent_tool_use_id,
            agent_type=ctx.agent_type,
            model=ctx.model,
            add_usage=ctx.add_usage,
        )

    @contextmanager
    def scope(self) -> Generator[trio.CancelScope, None, None]:
        """A cancel scope that the call's end cancels."""
        with trio.CancelScope() as scope:
            self.scopes.add(scope)
            try:
                yield scope
            finally:
                self.scopes.discard(scope)


class SamplingRequest(Tool):
    """What a sampling request is asked as: ``mcp_sampling``, its target the server's name
    (``--allow 'mcp_sampling(everything)'``). Never called: only the permission broker sees
    it."""

    name: ClassVar[str] = "mcp_sampling"
    description: ClassVar[str] = "an MCP server asks for a completion from the agent's model"
    input_schema: ClassVar[dict[str, Any]] = {"type": "object"}
    needs_permission: ClassVar[bool] = True
    permission_target_kind = "text"

    def permission_target(self, args: Mapping[str, Any]) -> str:
        return str(args.get("server", ""))

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        raise ToolError("mcp_sampling is not a tool the model can call")


_GATE = SamplingRequest()
_log = get_logger("trio_agents.mcp")


class ServerRequests:
    """Answers the requests of one server; bound to a run by :meth:`bind` (until then, and
    in ``trio-agents mcp list``, sampling and elicitation are declined).

    Args:
        server: the server's configured name.
        workspace: the root the server is told about.
    """

    def __init__(self, server: str, workspace: Path, secrets: Secrets) -> None:
        self.server = server
        self.workspace = workspace
        self._root_uri = workspace.resolve().as_uri()
        self.secrets = secrets
        self.run: RunContext | None = None
        self.callers: dict[str, Caller] = {}
        self._limiter = trio.CapacityLimiter(MAX_CONCURRENT_SAMPLES)
        self._logged = 0
        self._roots_moved = trio.Event()

    def bind(self, run: RunContext) -> None:
        """Answer for *run* from now on (its worktrees among the roots)."""
        self.run = run
        run.worktrees.listen(self._on_roots_moved)
        if run.worktrees.live():
            self._roots_moved.set()

    def _on_roots_moved(self) -> None:
        self._roots_moved.set()

    async def roots_changed(self) -> None:
        """Wait until the roots have changed since the last wait ended (changes meanwhile are
        told once). Cancellation: a checkpoint; nothing is lost."""
        await self._roots_moved.wait()
        self._roots_moved = trio.Event()

    @contextmanager
    def calling(self, caller: Caller) -> Generator[None, None, None]:
        """Register *caller* for the block; its requests still being answered are cancelled
        when the block ends."""
        self.callers[caller.tool_use_id] = caller
        try:
            yield
        finally:
            self.callers.pop(caller.tool_use_id, None)
            for scope in list(caller.scopes):
                scope.cancel(reason="the tool call that made the request is over")

    def _caller(self) -> Caller | None:
        # The oldest call in flight: over stdio a request does not say which call it is for.
        return next(iter(self.callers.values()), None)

    # -- roots and logging -------------------------------------------------------------------

    async def list_roots(self, context: ClientRequestContext) -> mcp_types.ListRootsResult:
        """The workspace, then each worktree of the run that exists now (docs/mcp.md,
        "Roots")."""
        await trio.lowlevel.checkpoint()
        roots = [mcp_types.Root.model_validate({"uri": self._root_uri, "name": "workspace"})]
        live = self.run.worktrees.live() if self.run is not None else []
        roots += [
            mcp_types.Root.model_validate({"uri": path.as_uri(), "name": f"worktree of {agent}"})
            for path, agent in live
        ]
        return mcp_types.ListRootsResult(roots=roots)

    async def log(self, params: mcp_types.LoggingMessageNotificationParams) -> None:
        """A server's log message, to the debug log (at most 1000 a server per connection)."""
        await trio.lowlevel.checkpoint()
        self._logged += 1
        if self._logged > 1000:
            return
        data = params.data if isinstance(params.data, str) else _json(params.data)
        _log.debug(
            "mcp.server_log",
            server=self.server,
            level=params.level,
            logger=params.logger,
            message=self.secrets.text(one_line(data, MAX_LOG_CHARS)),
        )

    # -- sampling ----------------------------------------------------------------------------

    async def sample(
        self, context: ClientRequestContext, params: mcp_types.CreateMessageRequestParams
    ) -> mcp_types.CreateMessageResult | mcp_types.ErrorData:
        """Answer ``sampling/createMessage`` with the calling agent's model (module docs)."""
        run, caller = self.run, self._caller()
        if run is None or caller is None:
            await trio.lowlevel.checkpoint()
            return _refusal("sampling is answered only during an agent's call to this server")
        caller.samples += 1
        if caller.samples > MAX_SAMPLES_PER_CALL:
            why = f"more than {MAX_SAMPLES_PER_CALL} sampling requests in one tool call"
            await self._sampled(run, caller, "declined", why)
            return _refusal(why)
        messages, chars = _messages(params)
        if chars > MAX_SAMPLE_CHARS:
            why = f"the request holds {chars} characters (at most {MAX_SAMPLE_CHARS})"
            await self._sampled(run, caller, "declined", why)
            return _refusal(why)
        result: mcp_types.CreateMessageResult | mcp_types.ErrorData
        status, why, used = "error", "", (0, 0)
        try:
            with caller.scope() as scope:
                async with self._limiter:
                    shown = _shown(self.server, params, messages)
                    last = messages[-1].text if messages else ""
                    granted, reason = await run.broker.check(
                        _GATE,
                        shown,
                        agent_id=caller.agent_id,
                        parent_tool_use_id=caller.parent_tool_use_id,
                        tool_use_id=caller.tool_use_id,
                        summary=one_line(f"mcp_sampling: {self.server}: {last}"),
                    )
                    if not granted:
                        status, why = "declined", f"permission denied: {reason}"
                    else:
                        text, stop, used = await self._complete(run, caller, params, messages)
                        status = "ok"
            if scope.cancelled_caught:
                status, why = "cancelled", "the tool call that made the request is over"
            if status == "ok":
                result = mcp_types.CreateMessageResult(
                    role="assistant",
                    content=mcp_types.TextContent(type="text", text=text),
                    model=caller.model or run.settings.model,
                    stop_reason=_STOP_REASONS.get(stop, stop),
                )
            else:
                result = _refusal(why or status)
        except ProviderError as exc:
            status, why = "error", self.secrets.text(one_line(str(exc), 300))
            result = _refusal(f"the model call failed: {why}")
        finally:
            if caller.add_usage is not None and any(used):
                caller.add_usage(*used)
            await self._sampled(run, caller, status, why, used, final=True)
        return result

    async def _complete(
        self,
        run: RunContext,
        caller: Caller,
        params: mcp_types.CreateMessageRequestParams,
        messages: tuple[Message, ...],
    ) -> tuple[str, str, tuple[int, int]]:
        # The server's model preferences are hints among models this run does not choose
        # between: the calling agent's model answers (docs/mcp.md, "Sampling").
        request = ModelRequest(
            model=caller.model or run.settings.model,
            system=params.system_prompt or "",
            messages=messages,
            tools=(),
            agent_type=caller.agent_type,
            agent_id=caller.agent_id,
            max_tokens=max(1, min(params.max_tokens, MAX_SAMPLE_TOKENS)),
            purpose="sample",
        )
        parts: list[str] = []
        end: TurnEnd | None = None
        async with aclosing(run.provider.stream(request)) as stream:
            async for item in stream:
                if isinstance(item, TextChunk):
                    parts.append(item.text)
                elif isinstance(item, TurnEnd):
                    end = item
        if end is None:
            raise ProviderError(f"provider {run.provider.name} ended a turn without a stop reason")
        return "".join(parts), end.stop_reason, (end.input_tokens, end.output_tokens)

    async def _sampled(
        self,
        run: RunContext,
        caller: Caller,
        status: Any,
        reason: str,
        used: tuple[int, int] = (0, 0),
        *,
        final: bool = False,
    ) -> None:
        event = SampledEvent(
            agent_id=caller.agent_id,
            parent_tool_use_id=caller.parent_tool_use_id,
            tool_use_id=caller.tool_use_id,
            server=self.server,
            model=caller.model or run.settings.model,
            status=status,
            reason=reason,
            input_tokens=used[0],
            output_tokens=used[1],
        )
        if final:  # also when the call was cancelled: its cost is on the record
            await run.bus.emit_final(event, grace_s=5)
        else:
            await run.bus.emit(event)

    # -- elicitation -------------------------------------------------------------------------

    async def elicit(
        self, context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        """Ask the user the server's question (module docs); declined when nobody can answer."""
        run, caller = self.run, self._caller()
        if run is None or caller is None:
            await trio.lowlevel.checkpoint()
            return mcp_types.ElicitResult(action="decline")
        caller.questions += 1
        if caller.questions > MAX_QUESTIONS_PER_CALL:
            # A server that asks on and on (each answer, or decline, followed by another
            # question) stops reaching the user: nothing more is shown for this call.
            await trio.lowlevel.checkpoint()
            if caller.questions == MAX_QUESTIONS_PER_CALL + 1:
                _log.warning(
                    "mcp.questions_declined",
                    server=self.server,
                    tool_use_id=caller.tool_use_id,
                    reason=f"more than {MAX_QUESTIONS_PER_CALL} questions in one tool call",
                )
            return mcp_types.ElicitResult(action="decline")
        if isinstance(params, mcp_types.ElicitRequestURLParams):
            question = self._question(caller, params.message, "url", url=params.url)
        else:
            question = self._question(
                caller, params.message, "form", schema=params.requested_schema
            )
        action: Any = "cancel"
        content: dict[str, Any] | None = None
        with caller.scope():
            action, content, _ = await run.elicitations.ask(
                run.bus,
                question,
                parent_tool_use_id=caller.parent_tool_use_id,
                timeout_s=ELICITATION_TIMEOUT_S,
            )
        return mcp_types.ElicitResult(action=action, content=content)

    def _question(
        self,
        caller: Caller,
        message: str,
        mode: Any,
        *,
        url: str | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> PendingElicitation:
        return PendingElicitation(
            request_id="",
            tool_use_id=caller.tool_use_id,
            agent_id=caller.agent_id,
            server=self.server,
            message=one_line(message, 2000),
            mode=mode,
            requested_schema=schema,
            url=url,
        )


def _refusal(message: str) -> mcp_types.ErrorData:
    return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=message)


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        return repr(value)


def _messages(params: mcp_types.CreateMessageRequestParams) -> tuple[tuple[Message, ...], int]:
    """The request's messages as the provider takes them (text; an image or audio as a
    placeholder; consecutive messages of one role joined), and their size in characters."""
    out: list[Message] = []
    chars = len(params.system_prompt or "")
    for message in params.messages:
        content = message.content
        blocks = content if isinstance(content, list) else [content]
        texts = []
        for block in blocks:
            if isinstance(block, mcp_types.TextContent):
                texts.append(block.text)
            else:
                texts.append(f"[{getattr(block, 'mime_type', None) or block.type} content]")
        text = "\n".join(texts)
        chars += len(text)
        if chars > MAX_SAMPLE_CHARS:
            return (), chars
        if out and out[-1].role == message.role:
            text = out[-1].text + "\n" + text
            out.pop()
        out.append(Message(role=message.role, content=(TextBlock(text=text),)))
    return tuple(out), chars


def _shown(
    server: str, params: mcp_types.CreateMessageRequestParams, messages: tuple[Message, ...]
) -> dict[str, Any]:
    """What the user is asked to allow: the server, and the whole request it makes."""
    return {
        "server": server,
        "system": params.system_prompt or "",
        "messages": [{"role": m.role, "text": m.text} for m in messages],
        "max_tokens": min(params.max_tokens, MAX_SAMPLE_TOKENS),
    }
