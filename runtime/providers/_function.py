"""A model written as a Python function: :class:`FunctionProvider` (docs/python-api.md,
"Testing agents").

Scenario files play literal turns; a function sees the request (the agent type, the whole
history, the tools offered) and answers from it, so a test can script agents whose next step
depends on what they were asked or what a tool returned — twenty sub-agents that each count a
different file, a reviewer that approves only when the tests passed.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any, TypeAlias

import orjson
import trio

from runtime.core import (
    ModelRequest,
    ProviderError,
    StreamItem,
    TextChunk,
    ToolCall,
    TurnEnd,
)

from ._scripted import _agent_number, chunk_text, estimate_input_tokens

__all__ = ["FunctionProvider", "ModelAnswer"]

ModelAnswer: TypeAlias = str | ToolCall | Sequence[ToolCall] | tuple[str, Sequence[ToolCall]] | None
"""What a model function returns: the turn's text, its tool calls, or both as ``(text, calls)``;
``None`` is an empty answer."""


class FunctionProvider:
    """A provider whose every turn is ``fn(request)``.

    ``fn`` is a sync or async function of a :class:`~runtime.ModelRequest` returning a
    :data:`ModelAnswer`. Tool calls without an id get one the way the scripted provider makes
    them (``tu-A.K``: the K-th call of agent A), so ids and sibling order are the same run after
    run. The text is streamed as word-sized ``text_delta`` events; usage is estimated from the
    request's size (about four characters a token), as the scripted provider does.

    A sync ``fn`` runs on the event loop: keep it quick (it is a test's script); write it
    ``async`` when it must wait (``await trio.sleep(…)`` stands in for model latency).

    The request's ``purpose`` is ``"compact"`` when the agent asks for a summary of its
    history (docs/context.md); answer with a text.

    Raises (from the stream):
        ProviderError: *fn* raised (the agent then fails with that message, as with any model
            error), or returned something that is not a :data:`ModelAnswer`.
    """

    name = "function"

    def __init__(
        self,
        fn: Callable[[ModelRequest], ModelAnswer | Awaitable[ModelAnswer]],
        *,
        id_prefix: str = "tu-",
    ) -> None:
        self.fn = fn
        self._prefix = id_prefix
        self._calls_made: dict[str, int] = {}

    def describe(self) -> dict[str, Any]:
        qualname = getattr(self.fn, "__qualname__", type(self.fn).__name__)
        return {
            "provider": "function",
            "function": f"{getattr(self.fn, '__module__', '?')}.{qualname}",
        }

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        """Ask *fn* for the turn and stream its answer.

        Cancellation: a checkpoint before *fn* is called; an async *fn* is cancelled where it
        awaits.
        """
        await trio.lowlevel.checkpoint()
        try:
            answer = self.fn(request)
            if inspect.isawaitable(answer):
                answer = await answer
        except trio.Cancelled:
            raise
        except Exception as exc:
            raise ProviderError(
                f"model function {getattr(self.fn, '__name__', self.fn)!r} raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        text, calls = _split(answer)
        out_chars = 0
        for piece in chunk_text(text):
            out_chars += len(piece)
            yield TextChunk(piece)
        owner = _agent_number(request.agent_id)
        for call in calls:
            tool_use_id = call.id
            if not tool_use_id:
                made = self._calls_made.get(request.agent_id, 0) + 1
                self._calls_made[request.agent_id] = made
                tool_use_id = f"{self._prefix}{owner}.{made}"
            out_chars += len(call.name) + len(orjson.dumps(call.input))
            yield ToolCall(tool_use_id, call.name, dict(call.input), call.error)
        yield TurnEnd(
            stop_reason="tool_use" if calls else "end_turn",
            input_tokens=estimate_input_tokens(request),
            output_tokens=max(1, out_chars // 4),
        )


def _split(answer: Any) -> tuple[str, list[ToolCall]]:
    if answer is None:
        return "", []
    if isinstance(answer, str):
        return answer, []
    if isinstance(answer, ToolCall):
        return "", [answer]
    if isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[0], str):
        return answer[0], _calls(answer[1])
    if isinstance(answer, Sequence):
        return "", _calls(answer)
    raise ProviderError(
        f"a model function returned {type(answer).__name__}: return a str, a ToolCall, a list "
        "of ToolCall, or (text, [ToolCall, …])"
    )


def _calls(items: Any) -> list[ToolCall]:
    if not isinstance(items, Sequence) or isinstance(items, str):
        raise ProviderError("a model function's tool calls must be a list of ToolCall")
    calls = list(items)
    for item in calls:
        if not isinstance(item, ToolCall):
            raise ProviderError(
                f"a model function returned {type(item).__name__} among its tool calls: "
                "use ToolCall(name=…, input={…})"
            )
        if not item.name:
            raise ProviderError("a model function returned a ToolCall without a name")
    return calls
