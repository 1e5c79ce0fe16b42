"""The scripted provider: deterministic, offline model turns played from a :class:`Scenario`.

Every agent instance of a type plays that type's turns from the first; which turn comes next is
the number of assistant messages already in the agent's history, so the provider keeps no
per-agent state and a cancelled or failed turn is simply played again.

Tool-call ids are made here, unique in the run and the same run after run: ``tu-A.K`` is the
K-th call of agent number A (``agent-A``), counted over its whole history, so ``tu-1.2`` is the
root's second call. Parallel agents therefore never race for a shared counter: an id depends on
who made the call and where, never on when.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from typing import Any

import orjson
import trio

from runtime.core._errors import ProviderError
from runtime.core._messages import ToolUseBlock
from runtime.core._provider import (
    ModelRequest,
    StreamItem,
    TextChunk,
    ThinkingChunk,
    ToolCall,
    TurnEnd,
)

from ._scenario import Scenario

_WORDS = re.compile(r"\S+\s*|\s+")
_AGENT_NUMBER = re.compile(r"agent-(\d+)$")


def chunk_text(text: str) -> list[str]:
    """Split *text* into word-sized deltas (each word with its trailing white space)."""
    return _WORDS.findall(text)


class ScriptedProvider:
    """Plays a scenario. Thread-free and fast: with zero delays a turn never sleeps, but it
    checkpoints between deltas so cancellation and other agents get in."""

    name = "scripted"

    def __init__(self, scenario: Scenario, *, id_prefix: str = "tu-") -> None:
        self.scenario = scenario
        self._prefix = id_prefix

    def describe(self) -> dict[str, Any]:
        return {"provider": "scripted", "scenario": self.scenario.source}

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        """Stream the next scripted turn of ``request.agent_type``.

        Raises:
            ProviderError: the script has no such agent type, has run out of turns, or the turn
                says ``error`` (after streaming its text, if any).

        Cancellation: a checkpoint between deltas and during delays.
        """
        script = self.scenario.agents.get(request.agent_type)
        if script is None:
            known = ", ".join(sorted(self.scenario.agents))
            raise ProviderError(
                f"scenario has no agent type {request.agent_type!r} (it has: {known})"
            )
        index = sum(1 for m in request.messages if m.role == "assistant")
        if index >= len(script.turns):
            raise ProviderError(
                f"scenario: agent type {request.agent_type!r} ran past its last turn "
                f"(it has {len(script.turns)}, this would be turn {index + 1})"
            )
        turn = script.turns[index]
        if turn.delay_s:
            await trio.sleep(turn.delay_s)
        else:
            await trio.lowlevel.checkpoint()
        out_chars = 0
        for piece in chunk_text(turn.thinking):
            out_chars += len(piece)
            yield ThinkingChunk(piece)
            await self._pause(turn.chunk_delay_s)
        for piece in chunk_text(turn.text):
            out_chars += len(piece)
            yield TextChunk(piece)
            await self._pause(turn.chunk_delay_s)
        if turn.error is not None:
            raise ProviderError(turn.error)
        first = 1 + sum(
            isinstance(block, ToolUseBlock) for m in request.messages for block in m.content
        )
        owner = _agent_number(request.agent_id)
        for k, call in enumerate(turn.tool_calls, first):
            out_chars += len(call.name) + len(orjson.dumps(call.input))
            yield ToolCall(f"{self._prefix}{owner}.{k}", call.name, dict(call.input))
        stop = turn.stop_reason or ("tool_use" if turn.tool_calls else "end_turn")
        yield TurnEnd(
            stop_reason=stop,  # type: ignore[arg-type]  # checked when the scenario was parsed
            input_tokens=turn.input_tokens
            if turn.input_tokens is not None
            else _estimate_input(request),
            output_tokens=turn.output_tokens
            if turn.output_tokens is not None
            else max(1, out_chars // 4),
        )

    @staticmethod
    async def _pause(delay: float) -> None:
        if delay:
            await trio.sleep(delay)
        else:
            await trio.lowlevel.checkpoint()


def _agent_number(agent_id: str) -> str:
    """``7`` for ``agent-7`` (also behind a placement's prefix); else the id itself."""
    match = _AGENT_NUMBER.search(agent_id)
    return match.group(1) if match else agent_id


def _estimate_input(request: ModelRequest) -> int:
    """A stable stand-in for input tokens: about four characters a token."""
    chars = len(request.system)
    for message in request.messages:
        for block in message.content:
            chars += len(getattr(block, "text", "") or getattr(block, "content", "") or "")
    return max(1, chars // 4)
