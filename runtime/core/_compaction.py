"""Compaction: an agent makes its history smaller when it nears its model's context window.

Each agent has a :class:`Compactor` (made by the loop), which keeps the agent's
:class:`~runtime.core._context_window.ContextMeter` and, before a request whose context would be
above ``compact_threshold`` of the window, compacts in two stages (docs/context.md):

1. **trim**, no model call (:func:`trim_tool_results`): tool results older than the last
   :data:`KEEP_TURNS` turns, or larger than a quarter of the window, become a one-line stub
   naming the call and the size elided. The result block stays, with its ``tool_use_id``: every
   ``tool_use`` keeps its ``tool_result``. The full output is still in the trace
   (``tool_finished``).
2. **summary**, when trimming was not enough (:func:`split_for_summary`,
   :func:`build_compacted`): the agent's own provider and model are asked, with
   :data:`SUMMARY_SYSTEM`, for a summary of the older part of the conversation, given as a plain
   transcript. The new history is one user message — the original task verbatim, the summary,
   and the request being worked on verbatim if it was in the summarised part — then the last
   turns verbatim, from an assistant message on. Roles still alternate, nothing in the tail
   points before it, and a ``tool_use`` and its result always land in the same part, so the
   history stays valid for the OpenAI and the Anthropic message rules
   (:func:`history_problems` states them; the property tests check every compaction).

A request the provider refuses as too long (:class:`~runtime.core._errors.ContextOverflowError`)
is compacted and tried once more (:meth:`Compactor.on_overflow`); if it still does not fit, the
agent fails with an error that says so, and how big the context was.

Every stage that changed the history emits ``context_compacted``; a summary's tokens are added
to the agent's usage (and so to its budget).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs
import orjson

from ._context_window import (
    ContextMeter,
    context_window_for,
    fixed_chars,
    history_chars,
    message_chars,
)
from ._errors import ContextOverflowError, ProviderError
from ._events import ContextCompacted
from ._messages import (
    AgentState,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from ._prices import PriceTable, add_costs
from ._provider import ModelRequest, Provider, TextChunk, ToolSpec, TurnEnd

if TYPE_CHECKING:
    from ._agent import AgentSpec
    from ._agent_types import AgentType
    from ._context import RunContext
    from ._events import AgentStatus
    from ._hooks import HookRunner
    from ._tool import Tool, ToolLimits

KEEP_TURNS: Final = 3
"""Model turns at the end of the history that compaction keeps verbatim."""
STUB_MIN_CHARS: Final = 240
"""A tool result shorter than this is left as it is (its stub would hardly be shorter)."""
TRIM_ENOUGH: Final = 0.75
"""Trimming alone is enough when it brings the context under this share of the threshold."""
TAIL_SHARE: Final = 0.4
"""The verbatim tail keeps fewer turns when it would fill more than this share of the window."""
TRANSCRIPT_SHARE: Final = 0.6
"""The most of the window a summary request's transcript may fill."""
TRANSCRIPT_BLOCK_CHARS: Final = 2_000
"""Each text, tool input or tool output is cut to this in the transcript given to summarise."""
SUMMARY_MAX_TOKENS: Final = 4_096
MIN_SUMMARISED_CHARS: Final = 500
"""Less than this before the tail is not worth a model call to summarise."""
RETRY_GROWTH: Final = 0.1
"""After a compaction that could not get under the threshold, the next automatic one waits until
the context has grown by this share of the window (no model call per turn for nothing)."""

SUMMARY_HEADER: Final = "[Summary of the earlier conversation"
PINNED_HEADER: Final = "[The request being worked on, verbatim]"
_SUMMARY_COUNTS: Final = re.compile(re.escape(SUMMARY_HEADER) + r": (\d+) messages, (\d+) turns")

SUMMARY_SYSTEM: Final = (
    "You summarise a conversation between a user and an AI agent that works with tools in a "
    "software workspace. Your summary replaces that part of the conversation in the agent's "
    "context, so the agent must be able to carry on the work from the summary alone.\n"
    "Keep: what the user asked for and every constraint they gave (in their words where the "
    "wording matters); decisions taken and why; what was done (files read, created or changed; "
    "commands run) and what was found; errors met and how they were solved; what is left to do "
    "and the next step. Keep file paths, names, numbers and identifiers exact. Leave out "
    "chatter and tool output that no longer matters.\n"
    "Write plain text, at most about 800 words. Do not call tools. Answer with the summary only."
)


# -- the parts, pure functions ----------------------------------------------------------------


def tail_start(messages: Sequence[Message], turns: int) -> int:
    """The index of the *turns*-th assistant message from the end (0 if there are fewer)."""
    seen = 0
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "assistant":
            seen += 1
            if seen == turns:
                return i
    return 0


def stub_text(description: str, size: int) -> str:
    """The one line that replaces a trimmed tool result."""
    return (
        f"[{description}: output of {size:,} characters elided to save context; the full "
        "output is in the run's trace; run the tool again if you need it]"
    )


def trim_tool_results(
    messages: Sequence[Message],
    *,
    keep_turns: int = KEEP_TURNS,
    cap_chars: int,
    describe: Callable[[ToolUseBlock | None], str],
) -> tuple[list[Message], int]:
    """Replace old or large tool results by one-line stubs.

    Args:
        keep_turns: results answering the last this many turns stay, unless over *cap_chars*.
        cap_chars: a result longer than this is stubbed wherever it is.
        describe: names a call for its stub (e.g. ``bash: ls -la``); gets None for a result
            whose call is not in the history.

    Returns:
        The new history (the same message objects where nothing changed) and how many results
        were stubbed.
    """
    boundary = tail_start(messages, keep_turns)
    uses: dict[str, ToolUseBlock] = {}
    out: list[Message] = []
    stubbed = 0
    for i, message in enumerate(messages):
        if message.role == "assistant":
            for block in message.content:
                if isinstance(block, ToolUseBlock):
                    uses[block.id] = block
            out.append(message)
            continue
        blocks: list[Any] = []
        changed = False
        for block in message.content:
            if (
                isinstance(block, ToolResultBlock)
                and len(block.content) >= STUB_MIN_CHARS
                and (i < boundary or len(block.content) > cap_chars)
            ):
                stub = stub_text(describe(uses.get(block.tool_use_id)), len(block.content))
                if len(stub) < len(block.content):
                    block = attrs.evolve(block, content=stub)
                    changed = True
                    stubbed += 1
            blocks.append(block)
        out.append(Message(role=message.role, content=tuple(blocks)) if changed else message)
    return out, stubbed


@attrs.frozen(kw_only=True)
class Split:
    """A history cut for a summary: what stays before it, what it replaces, what stays after.

    Attributes:
        head: the original task's text blocks, kept verbatim.
        middle: the messages the summary replaces (an earlier summary among them).
        tail: the last turns, kept verbatim; starts with an assistant message.
        turns: model turns the middle stands for (earlier summaries' turns included).
    """

    head: tuple[TextBlock, ...]
    middle: tuple[Message, ...]
    tail: tuple[Message, ...]
    turns: int
    messages: int


def _is_marker(block: object) -> bool:
    return isinstance(block, TextBlock) and (
        block.text.startswith(SUMMARY_HEADER) or block.text.startswith(PINNED_HEADER)
    )


def split_for_summary(
    messages: Sequence[Message], *, keep_turns: int = KEEP_TURNS, tail_chars: int | None = None
) -> Split | None:
    """Cut *messages* into head, middle and tail for a summary; None when there is no middle.

    The tail is the last *keep_turns* turns (fewer if they would take more than *tail_chars*,
    at least one), from an assistant message on, so a tool call and its result are never on two
    sides of a cut. The head is the first user message's own text (an earlier summary and an
    earlier pinned request in it go to the middle, to be summarised again).
    """
    if not messages:
        return None
    head_msg = messages[0] if messages[0].role == "user" else None
    start = 1 if head_msg is not None else 0
    # Assistant positions from the end, and the size of the tail from each one on.
    candidates: list[tuple[int, int]] = []
    size = 0
    for i in range(len(messages) - 1, start, -1):
        size += message_chars(messages[i])
        if messages[i].role == "assistant":
            candidates.append((i, size))
            if len(candidates) == keep_turns:
                break
    if not candidates:
        return None
    cut = candidates[0][0]  # at least the last turn stays
    for index, tail_size in candidates:
        if tail_chars is not None and tail_size > tail_chars:
            break
        cut = index
    middle = list(messages[start:cut])
    head: tuple[TextBlock, ...] = ()
    if head_msg is not None:
        head = tuple(b for b in head_msg.content if isinstance(b, TextBlock) and not _is_marker(b))
        moved = tuple(b for b in head_msg.content if not isinstance(b, TextBlock) or _is_marker(b))
        if moved:
            middle.insert(0, Message(role="user", content=moved))
    turns = sum(1 for m in middle if m.role == "assistant") + compacted_turns(middle)
    return Split(
        head=head, middle=tuple(middle), tail=tuple(messages[cut:]), turns=turns, messages=cut
    )


def summary_text(summary: str, *, messages: int, turns: int) -> str:
    """The text block that stands for *messages* messages (*turns* model turns)."""
    return f"{SUMMARY_HEADER}: {messages} messages, {turns} turns]\n{summary.strip()}"


def build_compacted(split: Split, summary: str, *, pinned: str | None = None) -> list[Message]:
    """The history after a summary: task, summary and pinned request in one user message, then
    the tail."""
    blocks: list[TextBlock] = list(split.head)
    blocks.append(TextBlock(text=summary_text(summary, messages=split.messages, turns=split.turns)))
    if pinned is not None:
        blocks.append(TextBlock(text=f"{PINNED_HEADER}\n{pinned}"))
    return [Message(role="user", content=tuple(blocks)), *split.tail]


def compacted_turns(messages: Sequence[Message]) -> int:
    """How many model turns the summaries in *messages* stand for.

    The scripted provider adds them to the assistant messages it counts, so an agent whose
    history was summarised goes on with the next scripted turn.
    """
    total = 0
    for message in messages:
        if message.role != "user":
            continue
        for block in message.content:
            if isinstance(block, TextBlock) and block.text.startswith(SUMMARY_HEADER):
                found = _SUMMARY_COUNTS.match(block.text)
                if found is not None:
                    total += int(found.group(2))
    return total


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[: limit - 40]} … [{len(text) - limit + 40:,} characters cut]"


def transcript(messages: Sequence[Message], *, max_chars: int) -> str:
    """The conversation as plain text for a summary request, at most about *max_chars* long.

    Each text, tool input and tool output is cut to :data:`TRANSCRIPT_BLOCK_CHARS`; if the
    whole is still too long, its middle goes (the start has the task and any earlier summary,
    the end what happened last).
    """
    names: dict[str, str] = {}
    parts: list[str] = []
    for message in messages:
        for block in message.content:
            if isinstance(block, TextBlock):
                label = "earlier summary" if block.text.startswith(SUMMARY_HEADER) else message.role
                limit = (
                    max(TRANSCRIPT_BLOCK_CHARS, 8_000)
                    if label == "earlier summary"
                    else (TRANSCRIPT_BLOCK_CHARS)
                )
                parts.append(f"[{label}] {_cut(block.text, limit)}")
            elif isinstance(block, ToolUseBlock):
                names[block.id] = block.name
                args = orjson.dumps(block.input).decode()
                parts.append(f"[{block.name} called] {_cut(args, TRANSCRIPT_BLOCK_CHARS)}")
            elif isinstance(block, ToolResultBlock):
                name = names.get(block.tool_use_id, "tool")
                error = " (error)" if block.is_error else ""
                parts.append(
                    f"[{name} result{error}] {_cut(block.content, TRANSCRIPT_BLOCK_CHARS)}"
                )
            # Thinking is the model's own scratch work: not worth summarising.
    text = "\n\n".join(parts)
    if len(text) > max_chars:
        keep_head = max_chars // 3
        keep_tail = max_chars - keep_head
        cut = len(text) - keep_head - keep_tail
        text = (
            f"{text[:keep_head]}\n\n[… {cut:,} characters of the conversation left out here …]"
            f"\n\n{text[-keep_tail:]}"
        )
    return text


def summary_prompt(text: str, instructions: str | None = None) -> str:
    """The user message of a summary request around a :func:`transcript`."""
    focus = f"\n\nFocus the summary on: {instructions.strip()}" if instructions else ""
    return (
        "Below is the earlier part of a conversation between a user and an agent that works "
        "with tools. It is about to be removed from the agent's context to make room. Write "
        "the summary that will replace it."
        + focus
        + "\n\n<conversation>\n"
        + text
        + "\n</conversation>"
    )


def history_problems(messages: Sequence[Message]) -> list[str]:
    """What makes *messages* invalid for the OpenAI or the Anthropic message rules (empty: none).

    The rules: the first message is a user message; roles alternate; every ``tool_use`` of an
    assistant message is answered by a ``tool_result`` with its id in the very next message
    (a user message), and every ``tool_result`` answers a ``tool_use`` of the message just
    before it; no message is empty; ids are unique.
    """
    problems: list[str] = []
    seen_ids: set[str] = set()
    for i, message in enumerate(messages):
        if not message.content:
            problems.append(f"message {i}: empty")
        if i == 0 and message.role != "user":
            problems.append("message 0: the first message is not a user message")
        if i > 0 and messages[i - 1].role == message.role:
            problems.append(f"message {i}: two {message.role} messages in a row")
        results = [b for b in message.content if isinstance(b, ToolResultBlock)]
        uses = [b for b in message.content if isinstance(b, ToolUseBlock)]
        if message.role == "assistant" and results:
            problems.append(f"message {i}: a tool_result in an assistant message")
        if message.role == "user" and uses:
            problems.append(f"message {i}: a tool_use in a user message")
        for use in uses:
            if use.id in seen_ids:
                problems.append(f"message {i}: tool_use id {use.id} used twice")
            seen_ids.add(use.id)
        if results:
            before = messages[i - 1] if i > 0 else None
            asked = {b.id for b in before.tool_uses} if before is not None else set()
            problems.extend(
                f"message {i}: tool_result {r.tool_use_id} answers no tool_use of the message "
                "before"
                for r in results
                if r.tool_use_id not in asked
            )
        if uses:
            after = messages[i + 1] if i + 1 < len(messages) else None
            if after is not None:
                answered = {b.tool_use_id for b in after.content if isinstance(b, ToolResultBlock)}
                problems.extend(
                    f"message {i}: tool_use {u.id} has no tool_result"
                    for u in uses
                    if u.id not in answered
                )
    return problems


# -- one agent's compactor --------------------------------------------------------------------


def agent_window(run: RunContext, agent_type: AgentType) -> int:
    """The context window of an agent of *agent_type*: its type's, the run's, else its model's."""
    return (
        agent_type.context_window
        or run.settings.limits.context_window
        or _window_for_model(agent_type.model or run.settings.model)
    )


@functools.lru_cache(maxsize=256)
def _window_for_model(model: str) -> int:
    return context_window_for(model)


NOTE_ROOM: Final = 400
"""Room over :func:`output_cap` for the note a tool adds to an output it cut (``read``'s
``continue with offset=…``): the loop cuts only what is longer than both."""


def output_cap(run: RunContext, agent_type: AgentType) -> int:
    """The most characters of one tool output an agent of *agent_type* gets: the run's
    ``max_tool_output_chars``, and never more than about a quarter of its window (a window in
    tokens is about four times as many characters), so one output cannot fill it. Tools cut
    their own output to it (with a note, within :data:`NOTE_ROOM`); the loop cuts any output
    longer than that."""
    return min(run.settings.limits.max_tool_output_chars, agent_window(run, agent_type))


def tool_limits_for(run: RunContext, agent_type: AgentType) -> ToolLimits:
    """The run's tool limits, with the output cap of :func:`output_cap` (tools cut their own
    output with a note saying how to get the rest, e.g. ``read`` with ``offset``)."""
    cap = output_cap(run, agent_type)
    limits = run.settings.tool_limits
    if cap < limits.max_output_chars:
        return attrs.evolve(limits, max_output_chars=cap)
    return limits


def _describer(tools: Mapping[str, Tool]) -> Callable[[ToolUseBlock | None], str]:
    def describe(use: ToolUseBlock | None) -> str:
        if use is None:
            return "tool result"
        tool = tools.get(use.name)
        if tool is None:
            return use.name
        try:
            return tool.summary(use.input)
        except Exception:  # a summary is cosmetic; a bad input must not stop a compaction
            return use.name

    return describe


@attrs.frozen(kw_only=True)
class Outcome:
    """What one :meth:`Compactor.compact` did (for ``/compact``)."""

    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    methods: tuple[Literal["trim", "summary"], ...]
    summary_failed: str | None = None


Emit = Callable[[ContextCompacted], Awaitable[object]]


class Compactor:
    """One agent's context accounting and compaction (see the module docstring).

    Args:
        provider, model: the agent's own, for summaries.
        window: the agent's context window in tokens.
        threshold: the share of the window above which the agent compacts before a request.
        fixed: characters every request carries besides the messages (system, tool specs).
        emit: the run's ``bus.emit``, for this agent's ``context_compacted`` events.
        prompt: the agent's own prompt, kept verbatim by a summary.
        prompt_index: the index of the message that holds it.
        parent_tool_use_id: the agent's, for its events.
    """

    def __init__(
        self,
        *,
        provider: Provider,
        model: str,
        agent_type: str,
        agent_id: str,
        window: int,
        threshold: float,
        fixed: int,
        tools: Mapping[str, Tool],
        emit: Emit,
        log: Any,
        prompt: str | None = None,
        prompt_index: int = 0,
        parent_tool_use_id: str | None = None,
        hooks: HookRunner | None = None,
        prices: PriceTable | None = None,
    ) -> None:
        self.meter = ContextMeter(window, fixed=fixed)
        self._prices = prices if prices is not None else PriceTable()
        self.threshold = threshold
        self._provider = provider
        self._model = model
        self._agent_type = agent_type
        self._agent_id = agent_id
        self._parent_tool_use_id = parent_tool_use_id
        self._emit = emit
        self._log = log
        self._tools = tools  # described only when compacting (_describer)
        self._prompt = prompt
        self._prompt_index = prompt_index
        self._retry_at = 0
        self._hooks = hooks  # PreCompact (docs/hooks.md#events)

    @classmethod
    def for_agent(
        cls,
        run: RunContext,
        agent_type: AgentType,
        agent_id: str,
        *,
        system: str,
        tools: Sequence[ToolSpec],
        emit: Emit,
        log: Any,
        prompt: str | None,
        prompt_index: int,
        fixed: int | None = None,
        parent_tool_use_id: str | None = None,
    ) -> Compactor:
        """The compactor of one agent of *run* (*fixed*: ``fixed_chars(system, tools)``, when
        the caller knows it already)."""
        return cls(
            provider=run.provider,
            model=agent_type.model or run.settings.model,
            agent_type=agent_type.name,
            agent_id=agent_id,
            window=agent_window(run, agent_type),
            threshold=run.settings.limits.compact_threshold,
            fixed=fixed_chars(system, tools) if fixed is None else fixed,
            tools=run.tools,
            emit=emit,
            log=log,
            prompt=prompt,
            prompt_index=prompt_index,
            parent_tool_use_id=parent_tool_use_id,
            hooks=run.hooks,
            prices=run.settings.prices,
        )

    @property
    def window(self) -> int:
        return self.meter.window

    @property
    def limit(self) -> int:
        """The size above which the agent compacts before its next request."""
        return int(self.meter.window * self.threshold)

    # -- the loop's hooks -------------------------------------------------------------------

    async def before_request(self, state: AgentState) -> None:
        """Count what was appended since the last request; compact if the context is too big.

        O(new messages) when nothing is to be done. Cancellation: a cancelled summary leaves
        the history as it was (or trimmed, which is valid).
        """
        tokens = self.meter.sync(state.messages)
        if tokens >= self.limit and tokens >= self._retry_at:
            try:
                await self.compact(state)
            except ProviderError:
                raise
            except Exception:  # a bug here must not end the agent: it may still fit
                self._log.exception("compaction failed; going on without it")
                self._retry_at = tokens + int(self.meter.window * RETRY_GROWTH)

    def after_turn(self, state: AgentState, input_tokens: int) -> int:
        """The provider reported *input_tokens* for the request; the assistant's answer has been
        appended. Returns the context's size now (for ``turn_finished.context_tokens``)."""
        self.meter.reported(input_tokens)
        return self.meter.sync(state.messages)

    async def on_overflow(self, state: AgentState, exc: ContextOverflowError) -> None:
        """The provider refused the last request as too long: learn its sizes and compact.

        Raises:
            ProviderError: nothing could be compacted; the message says so in plain words.

        Cancellation: as :meth:`compact`.
        """
        if exc.limit is not None:
            self.meter.learn_window(exc.limit)
        if exc.tokens is not None:
            self.meter.reported(exc.tokens)
        elif exc.limit is None:
            # Refused, and no figures: the window is smaller than this context, whatever the
            # table says about the model.
            self.meter.learn_window(max(1, int(self.meter.tokens * 0.9)))
        size = max(self.meter.tokens, exc.tokens or 0)
        self._log.warning(
            "context too long for the model; compacting", tokens=size, window=self.window
        )
        outcome = await self.compact(state)
        if not outcome.methods:
            raise self.does_not_fit(exc, tokens=size) from exc

    def does_not_fit(
        self, exc: ContextOverflowError, *, tokens: int | None = None
    ) -> ProviderError:
        """The error an agent fails with when its context cannot be made to fit."""
        size = tokens if tokens is not None else max(self.meter.tokens, exc.tokens or 0)
        window = exc.limit or self.window
        return ProviderError(
            f"the conversation does not fit the model's context window: about {size:,} tokens "
            f"for a window of {window:,}, and compacting it did not make enough room "
            f"(the provider said: {exc})"
        )

    # -- compaction -------------------------------------------------------------------------

    async def compact(
        self,
        state: AgentState,
        *,
        instructions: str | None = None,
        summarise: bool = False,
    ) -> Outcome:
        """Trim, then summarise if trimming was not enough (or *summarise* says so).

        Args:
            instructions: what the summary should focus on (``/compact …``).
            summarise: summarise even when trimming was enough (``/compact``).

        Cancellation: a checkpoint during the summary request; cancelled, the history is as
        the last finished stage left it (always valid).
        """
        if self._hooks is not None and self._hooks.has("PreCompact"):
            trigger = "manual" if summarise else "auto"
            await self._hooks.run(
                "PreCompact", {"trigger": trigger, "custom_instructions": instructions or ""},
                agent_id=self._agent_id, parent_tool_use_id=self._parent_tool_use_id, match=trigger,
            )  # fmt: skip
        meter = self.meter
        before = meter.sync(state.messages)
        first = before
        count_before = len(state.messages)
        methods: list[Literal["trim", "summary"]] = []
        window_chars = int(meter.window * meter.ratio)
        trimmed, stubbed = trim_tool_results(
            state.messages,
            cap_chars=max(STUB_MIN_CHARS, window_chars // 4),
            describe=_describer(self._tools),
        )
        if stubbed:
            state.messages[:] = trimmed
            after = meter.reset(state.messages)
            methods.append("trim")
            await self._emit(
                ContextCompacted(
                    agent_id=self._agent_id,
                    parent_tool_use_id=self._parent_tool_use_id,
                    method="trim",
                    tokens_before=before,
                    tokens_after=after,
                    messages_before=count_before,
                    messages_after=len(state.messages),
                )
            )
            before = after
        enough = self.limit * TRIM_ENOUGH
        failed: str | None = None
        if summarise or before > enough:
            failed = await self._summary_stage(state, instructions, window_chars, before)
            if failed is None:
                methods.append("summary")
        after = meter.tokens
        # Still over the line: the next automatic try waits until the context has grown.
        self._retry_at = after + int(meter.window * RETRY_GROWTH) if after >= self.limit else 0
        return Outcome(
            tokens_before=first,
            tokens_after=after,
            messages_before=count_before,
            messages_after=len(state.messages),
            methods=tuple(methods),
            summary_failed=failed,
        )

    async def _summary_stage(
        self, state: AgentState, instructions: str | None, window_chars: int, before: int
    ) -> str | None:
        """Summarise the older part of the history; returns why not, or None once done."""
        split = split_for_summary(state.messages, tail_chars=int(window_chars * TAIL_SHARE))
        if split is None:
            return "nothing old enough to summarise"
        replaced = history_chars(state.messages[: len(state.messages) - len(split.tail)])
        if replaced < MIN_SUMMARISED_CHARS:
            return "too little to summarise"
        summary = await self._ask_summary(split.middle, instructions, window_chars)
        if isinstance(summary, str):
            return summary
        text, input_tokens, output_tokens = summary
        prompt = self._prompt
        pinned: str | None = None
        cut = len(state.messages) - len(split.tail)
        if prompt and self._prompt_index < cut and not any(prompt in b.text for b in split.head):
            pinned = prompt
        count_before = len(state.messages)
        new = build_compacted(split, text, pinned=pinned)
        # The call was made: its tokens and cost are the agent's, whether the summary is kept
        # or not (docs/costs.md).
        state.input_tokens += input_tokens
        state.output_tokens += output_tokens
        cost = self._prices.cost(self._model, input_tokens, output_tokens)
        state.cost_usd = add_costs(state.cost_usd, cost)
        if message_chars(new[0]) >= replaced:
            return "the summary was no shorter than what it would replace"
        state.messages[:] = new
        if self._prompt_index >= cut:
            self._prompt_index -= cut - 1
        else:
            self._prompt_index = 0
        after = self.meter.reset(state.messages)
        await self._emit(
            ContextCompacted(
                agent_id=self._agent_id,
                parent_tool_use_id=self._parent_tool_use_id,
                method="summary",
                tokens_before=before,
                tokens_after=after,
                messages_before=count_before,
                messages_after=len(new),
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cost_usd=cost,
            )
        )
        return None

    async def _ask_summary(
        self, middle: Sequence[Message], instructions: str | None, window_chars: int
    ) -> tuple[str, int, int] | str:
        """The summary of *middle* and its usage, or why there is none."""
        max_chars = int(window_chars * TRANSCRIPT_SHARE)
        for _ in range(2):
            request = ModelRequest(
                model=self._model,
                system=SUMMARY_SYSTEM,
                messages=(
                    Message(
                        role="user",
                        content=(
                            TextBlock(
                                text=summary_prompt(
                                    transcript(middle, max_chars=max_chars), instructions
                                )
                            ),
                        ),
                    ),
                ),
                tools=(),
                agent_type=self._agent_type,
                agent_id=self._agent_id,
                max_tokens=SUMMARY_MAX_TOKENS,
                purpose="compact",
            )
            parts: list[str] = []
            end: TurnEnd | None = None
            try:
                async with aclosing(self._provider.stream(request)) as stream:
                    async for item in stream:
                        if isinstance(item, TextChunk):
                            parts.append(item.text)
                        elif isinstance(item, TurnEnd):
                            end = item
            except ContextOverflowError:
                max_chars //= 2  # the transcript itself was too long: once more, shorter
                continue
            except ProviderError as exc:
                self._log.warning("summary request failed", error=str(exc))
                return f"the summary request failed: {exc}"
            text = "".join(parts).strip()
            if not text:
                return "the model answered the summary request with no text"
            used_in = end.input_tokens if end is not None else 0
            used_out = end.output_tokens if end is not None else 0
            return text, used_in, used_out
        return "even a shortened transcript was too long for the model"


async def compact_only(
    run: RunContext, spec: AgentSpec, state: AgentState, tools: Sequence[ToolSpec], log: Any
) -> tuple[AgentStatus, str | None, str | None]:
    """The body of an agent started by ``Runtime.compact``: compact its history (trim, then
    summarise whatever the size, focused on ``spec.compact``), then end ``completed`` with a
    result that says what was done."""
    compactor = Compactor.for_agent(
        run,
        spec.agent_type,
        spec.agent_id,
        system=state.system,
        tools=tools,
        emit=run.bus.emit,
        log=log,
        prompt=None,
        prompt_index=0,
        parent_tool_use_id=spec.parent_tool_use_id,
    )
    done = await compactor.compact(state, instructions=spec.compact or None, summarise=True)
    if not done.methods:
        return "completed", f"not compacted: {done.summary_failed or 'nothing to compact'}", None
    return (
        "completed",
        f"compacted: about {done.tokens_before:,} → {done.tokens_after:,} tokens, "
        f"{done.messages_before} → {done.messages_after} messages ({', '.join(done.methods)})",
        None,
    )
