"""Middleware: the user's own layers around every tool call and every model call
(docs/python-api.md, "Middleware").

A middleware is any object with one or both of::

    async def tool_call(self, call: ToolInvocation, proceed) -> str | object
    def model_call(self, request: ModelRequest, proceed) -> AsyncIterator[StreamItem]

``open_runtime(middleware=[a, b])`` makes ``a`` the outermost: ``a`` sees a call first and
its result last. ``proceed(call)`` runs the rest of the chain and the tool (``await`` it: the
tool's text); ``proceed(request)`` streams the rest of the chain and the model (iterate it).

Where the layers sit, one list for a tool call (docs/hooks.md#where-hooks-sit): its input is
checked against its schema; the configured ``PreToolUse`` hooks judge it (the outermost layer,
the runtime's own: :class:`~runtime.core.HookRunner`); the permission broker allows it; then
these layers, outermost first; what the last layer's ``proceed`` runs is the tool itself; the
``PostToolUse`` hooks see its result on the way out. A model call's request is what the agent
would send; the provider's retries (``provider_retry``) happen inside the innermost
``proceed``.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import attrs
import trio

from ._errors import ProviderError
from ._provider import (
    ModelRequest,
    Provider,
    RateLimitNotice,
    RetryNotice,
    StreamItem,
    TextChunk,
    ThinkingChunk,
    ToolCall,
    TurnEnd,
)

__all__ = ["MiddlewareChain", "MiddlewareProvider", "ToolInvocation"]

_ITEMS = (TextChunk, ThinkingChunk, ToolCall, TurnEnd, RetryNotice, RateLimitNotice)
# How long closing the inner layers' streams may take when the outer one ends early or is
# cancelled (an await in a finally is always bounded: docs/architecture.md).
_CLOSE_GRACE_S = 5.0


@attrs.frozen(kw_only=True)
class ToolInvocation:
    """One tool call as a middleware sees it.

    Attributes:
        name: the tool.
        input: the arguments (checked against the tool's schema); a layer may pass
            ``attrs.evolve(call, input={…})`` to ``proceed`` to change them — the tool runs with
            the changed input, and ``tool_finished`` records it (``input``).
        tool_use_id: the call's id (the node id ``cancel`` takes).
        agent_id: the agent that made it; ``parent_tool_use_id`` the call that started that
            agent (``None`` for a root); ``depth`` its depth (root 0); ``agent_type`` its type.
    """

    name: str
    input: dict[str, Any]
    tool_use_id: str
    agent_id: str
    parent_tool_use_id: str | None
    depth: int
    agent_type: str


ToolProceed = Callable[[ToolInvocation], Awaitable[str]]
ModelProceed = Callable[[ModelRequest], AsyncIterator[StreamItem]]


class MiddlewareChain:
    """The run's middleware, split into its tool-call and model-call layers, outermost first."""

    def __init__(self, layers: Sequence[object]) -> None:
        self.layers = tuple(layers)
        self.tool_layers = tuple(m for m in layers if callable(getattr(m, "tool_call", None)))
        self.model_layers = tuple(m for m in layers if callable(getattr(m, "model_call", None)))
        if not self.tool_layers and not self.model_layers and self.layers:
            names = ", ".join(type(m).__name__ for m in self.layers)
            raise TypeError(f"middleware without tool_call or model_call: {names}")

    def __bool__(self) -> bool:
        return bool(self.layers)

    async def call_tool(
        self, call: ToolInvocation, tool: ToolProceed
    ) -> tuple[str, ToolInvocation]:
        """Run *call* through the tool layers to *tool*: the result text, and the call as the
        tool got it (its input changed by a layer, or not).

        Raises:
            ToolError: a layer vetoed the call (or the tool failed, as without middleware).
        """
        ran: list[ToolInvocation] = [call]

        async def innermost(c: ToolInvocation) -> str:
            ran[0] = c
            return await tool(c)

        async def at(i: int, c: ToolInvocation) -> str:
            if i == len(self.tool_layers):
                return await innermost(c)
            value = await self.tool_layers[i].tool_call(c, functools.partial(at, i + 1))  # type: ignore[attr-defined]
            return _as_text(value)

        text = await at(0, call)
        return text, ran[0]

    def stream(self, provider: Provider, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        """*request* streamed through the model layers to *provider*."""
        return self._layer(0, provider, request)

    async def _layer(
        self, i: int, provider: Provider, request: ModelRequest
    ) -> AsyncGenerator[StreamItem, None]:
        if i == len(self.model_layers):
            inner = provider.stream(request)
            try:
                async for item in inner:
                    yield item
            finally:
                with trio.move_on_after(_CLOSE_GRACE_S, shield=True):
                    await inner.aclose()
            return
        opened: list[AsyncGenerator[StreamItem, None]] = []

        def proceed(req: ModelRequest) -> AsyncGenerator[StreamItem, None]:
            gen = self._layer(i + 1, provider, req)
            opened.append(gen)
            return gen

        layer = self.model_layers[i]
        stream = layer.model_call(request, proceed)  # type: ignore[attr-defined]
        try:
            async for item in stream:
                if not isinstance(item, _ITEMS):
                    raise ProviderError(
                        f"middleware {type(layer).__name__}.model_call yielded "
                        f"{type(item).__name__}, not a stream item"
                    )
                yield item
        finally:
            # A layer that stopped reading (or was cancelled) leaves what it opened to us.
            with trio.move_on_after(_CLOSE_GRACE_S, shield=True):
                if hasattr(stream, "aclose"):
                    await stream.aclose()
                for gen in opened:
                    await gen.aclose()


class MiddlewareProvider:
    """*provider* behind the chain's model layers: every model call of the run goes through
    them, the agents' turns and their compaction summaries alike."""

    def __init__(self, provider: Provider, chain: MiddlewareChain) -> None:
        self.inner = provider
        self.chain = chain
        self.name = provider.name

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()

    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        return self.chain.stream(self.inner, request)


def _as_text(value: Any) -> str:
    from ._function_tool import result_text

    return result_text(value)
