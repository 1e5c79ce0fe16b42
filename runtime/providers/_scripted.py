"""The scripted provider: deterministic, offline model turns played from a :class:`Scenario`.

Every agent instance of a type plays that type's turns from the first; which turn comes next is
the number of assistant messages already in the agent's history (plus the turns a summary in it
stands for, after a compaction), so the provider keeps no per-agent state for its script and a
cancelled or failed turn is simply played again.

Tool-call ids are made here, unique in the run and the same run after run: ``tu-A.K`` is the
K-th call of agent number A (``agent-A``), so ``tu-1.2`` is the root's second call. Parallel
agents therefore never race for a shared counter: an id depends on who made the call and where,
never on when. K counts the calls of the script's turns before this one, so the provider keeps
no state for it, and a compaction that drops old calls from the history makes no id again.

An MCP server's sampling request (``purpose="sample"``) is answered by the scenario's agent
type ``sample``, or with an echo of its last text (``sampled: …``).
A compaction's summary request (``purpose="compact"``) is answered by the scenario's agent type
``compact`` when it has one (its first turn for a first summary, the next for a summary of a
history that holds one already, its last turn from then on), otherwise by a deterministic
summary made from the request. A turn whose ``error`` says the prompt is too long (e.g.
``"prompt is too long: 210000 tokens > 200000 maximum"``) fails as a provider would, with a
:class:`~runtime.core._errors.ContextOverflowError`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import orjson
import trio

from runtime.core import (
    SUMMARY_HEADER,
    ContextOverflowError,
    ModelRequest,
    ProviderError,
    StreamItem,
    TextChunk,
    ThinkingChunk,
    ToolCall,
    ToolSpec,
    TurnEnd,
    compacted_turns,
    fixed_chars,
    history_chars,
    parse_overflow,
)

from ._scenario import Scenario, ScriptedTurn

_WORDS = re.compile(r"\S+\s*|\s+")
_AGENT_NUMBER = re.compile(r"agent-(\d+)$")


def chunk_text(text: str) -> list[str]:
    """Split *text* into word-sized deltas (each word with its trailing white space)."""
    return _WORDS.findall(text) if text else []


# With no chunk delay, a checkpoint every this many deltas (besides the one that starts the
# turn): often enough that cancellation and other agents get in during a long turn, rarely
# enough that a turn's deltas reach the bus back to back, as a fast network delivers them, and
# a subscriber reads them in a few wake-ups instead of one scheduler round per delta.
CHECKPOINT_EVERY = 256


class ScriptedProvider:
    """Plays a scenario. Thread-free and fast: with zero delays a turn never sleeps; it
    checkpoints when it starts and every :data:`CHECKPOINT_EVERY` deltas (so cancellation and
    other agents get in), and between every two deltas when the turn has a ``chunk_delay_s``."""

    name = "scripted"

    def __init__(self, scenario: Scenario, *, id_prefix: str = "tu-") -> None:
        self.scenario = scenario
        self._prefix = id_prefix

    def describe(self) -> dict[str, Any]:
        return {"provider": "scripted", "scenario": self.scenario.source}

    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        """Stream the next scripted turn of ``request.agent_type``.

        The turn's own generator, found without one around it (a generator per turn, not
        two: bench/README.md, "Per-agent and per-run cost").

        Raises:
            ProviderError: the script has no such agent type or has run out of turns (when
                called), or the turn says ``error`` (after streaming its text, if any).

        Cancellation: a checkpoint when the turn starts and during delays; between deltas,
        one after each delta when the turn has a ``chunk_delay_s``, else one after every
        :data:`CHECKPOINT_EVERY`-th (a turn's deltas reach the bus back to back, as a fast
        network delivers them; bench/README.md, "The streaming path and the cost of one
        run"); a turn's tool calls and its end follow together.
        """
        if request.purpose == "compact":
            return self._summary(request)
        if request.purpose == "sample":
            return self._sample(request)
        script = self.scenario.agents.get(request.agent_type)
        if script is None:
            known = ", ".join(sorted(self.scenario.agents))
            raise ProviderError(
                f"scenario has no agent type {request.agent_type!r} (it has: {known})"
            )
        index = sum(1 for m in request.messages if m.role == "assistant")
        index += compacted_turns(request.messages)
        if index >= len(script.turns):
            raise ProviderError(
                f"scenario: agent type {request.agent_type!r} ran past its last turn "
                f"(it has {len(script.turns)}, this would be turn {index + 1})"
            )
        # The calls this agent type's earlier turns made: the K of this turn's first tu-A.K.
        made = sum(len(turn.tool_calls) for turn in script.turns[:index])
        return self._play(script.turns[index], request, made)

    async def _summary(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        script = self.scenario.agents.get("compact")
        if script is not None and script.turns:
            text = "".join(getattr(b, "text", "") for m in request.messages for b in m.content)
            index = min(text.count(SUMMARY_HEADER), len(script.turns) - 1)
            async for item in self._play(script.turns[index], request):
                yield item
            return
        await trio.lowlevel.checkpoint()
        summary = default_summary(request)
        for piece in chunk_text(summary):
            yield TextChunk(piece)
        yield TurnEnd(
            stop_reason="end_turn",
            input_tokens=estimate_input_tokens(request),
            output_tokens=max(1, len(summary) // 4),
        )

    async def _sample(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        # An MCP server's sampling request (docs/mcp.md, "Sampling"): the scenario's ``sample``
        # agent type answers (its turn by the assistant messages the request holds, its last
        # from then on), otherwise an echo of the request's last text, so a test can see what
        # the model was asked.
        script = self.scenario.agents.get("sample")
        if script is not None and script.turns:
            index = sum(1 for m in request.messages if m.role == "assistant")
            async for item in self._play(script.turns[min(index, len(script.turns) - 1)], request):
                yield item
            return
        await trio.lowlevel.checkpoint()
        asked = ""
        for message in request.messages:
            asked = "".join(getattr(b, "text", "") for b in message.content) or asked
        answer = f"sampled: {asked}"
        yield TextChunk(answer)
        yield TurnEnd(
            stop_reason="end_turn",
            input_tokens=estimate_input_tokens(request),
            output_tokens=max(1, len(answer) // 4),
        )

    async def _play(
        self, turn: ScriptedTurn, request: ModelRequest, made: int | None = None
    ) -> AsyncGenerator[StreamItem, None]:
        if turn.delay_s:
            await trio.sleep(turn.delay_s)
        else:
            await trio.lowlevel.checkpoint()
        out_chars = 0
        delay = turn.chunk_delay_s
        count = 0
        for piece in chunk_text(turn.thinking):
            out_chars += len(piece)
            yield ThinkingChunk(piece)
            count += 1
            if delay:
                await trio.sleep(delay)
            elif count % CHECKPOINT_EVERY == 0:
                await trio.lowlevel.checkpoint()
        for piece in chunk_text(turn.text):
            out_chars += len(piece)
            yield TextChunk(piece)
            count += 1
            if delay:
                await trio.sleep(delay)
            elif count % CHECKPOINT_EVERY == 0:
                await trio.lowlevel.checkpoint()
        if turn.error is not None:
            overflow = parse_overflow(turn.error)
            if overflow is not None:
                raise ContextOverflowError(turn.error, tokens=overflow.tokens, limit=overflow.limit)
            raise ProviderError(turn.error)
        owner = _agent_number(request.agent_id)
        # A summary turn (made is None) never shares an id with the agent's own calls.
        for k, call in enumerate(turn.tool_calls):
            out_chars += len(call.name) + len(orjson.dumps(call.input))
            number = made + 1 + k if made is not None else f"s{k + 1}"
            yield ToolCall(f"{self._prefix}{owner}.{number}", call.name, _fresh_input(call.input))
        stop = turn.stop_reason or ("tool_use" if turn.tool_calls else "end_turn")
        yield TurnEnd(
            stop_reason=stop,  # type: ignore[arg-type]  # checked when the scenario was parsed
            input_tokens=turn.input_tokens
            if turn.input_tokens is not None
            else estimate_input_tokens(request),
            output_tokens=turn.output_tokens
            if turn.output_tokens is not None
            else max(1, out_chars // 4),
        )


def _fresh_input(args: dict[str, Any]) -> dict[str, Any]:
    """A call's input, the tool's own to change: a scripted scenario is shared by every run that
    opens it (and, given as a dict, kept between runs: runtime/providers/_scenario.py), so
    nothing a tool does to its input may reach the script."""
    for value in args.values():
        if value is not None and not isinstance(value, str | int | float):  # bool is an int
            return copy.deepcopy(args)
    return dict(args)  # flat: copying the top level is enough


def _agent_number(agent_id: str) -> str:
    """``7`` for ``agent-7`` (also behind a placement's prefix); else the id itself."""
    tail = agent_id.rpartition("agent-")[2]
    if tail and tail.isdecimal() and len(tail) < len(agent_id):  # the usual id, without re
        return tail
    match = _AGENT_NUMBER.search(agent_id)
    return match.group(1) if match else agent_id


def estimate_input_tokens(request: ModelRequest) -> int:
    """A stable stand-in for input tokens: about four characters a token, counted as the
    agent's context meter counts them (system prompt, tools, messages)."""
    return max(
        1, (_fixed_chars(request.system, request.tools) + history_chars(request.messages)) // 4
    )


def _fixed_chars(system: str, tools: Sequence[ToolSpec]) -> int:
    """:func:`fixed_chars`, remembered for the last system prompt and tool list seen: an agent
    sends the same two objects on every turn (and so do all agents of a type in a run). Only a
    tuple is remembered: a list could change and stay the same object."""
    global _last_fixed
    last = _last_fixed
    if last[1] is tools and last[0] is system:
        return last[2]
    size = fixed_chars(system, tools)
    if type(tools) is tuple:
        _last_fixed = (system, tools, size)  # keeps both alive: their identity is the key
    return size


_last_fixed: tuple[object, object, int] = (None, None, 0)


def default_summary(request: ModelRequest) -> str:
    """A deterministic stand-in for a model's summary: the size of what was summarised, its
    first and last lines."""
    text = "".join(getattr(b, "text", "") for m in request.messages for b in m.content)
    start = text.find("<conversation>")
    body = text[start + len("<conversation>") :] if start >= 0 else text
    body = body.removesuffix("</conversation>").strip()
    lines = [line for line in body.splitlines() if line.strip()]
    first = " ".join(lines[0].split())[:200] if lines else ""
    last = " ".join(lines[-1].split())[:200] if len(lines) > 1 else ""
    summary = f"Scripted summary of {len(body):,} characters of conversation."
    if first:
        summary += f" It began: {first}"
    if last:
        summary += f" It ended: {last}"
    return summary
