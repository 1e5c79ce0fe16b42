"""trio-agents: an actor-model multi-agent runtime on trio.

The public API: open a run with :func:`open_runtime`, start agents, watch the one flat event
stream, cancel any subtree, and rebuild the tree with :class:`TraceTree`.

Names are imported on first use (PEP 562), so ``import runtime`` — and the ``trio-agents``
command's start-up — costs almost nothing until a name is needed. Type checkers see ordinary
imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from ._agent_types import AgentType as AgentType
    from ._agent_types import AgentTypes as AgentTypes
    from ._agent_types import load_agent_types as load_agent_types
    from ._bus import EventBus as EventBus
    from ._bus import SubscriberLagged as SubscriberLagged
    from ._bus import Subscription as Subscription
    from ._errors import AgentsError as AgentsError
    from ._errors import ConfigError as ConfigError
    from ._errors import EventDecodeError as EventDecodeError
    from ._errors import ProviderError as ProviderError
    from ._errors import ScenarioError as ScenarioError
    from ._errors import SessionError as SessionError
    from ._errors import SubtreeCancelled as SubtreeCancelled
    from ._errors import ToolError as ToolError
    from ._errors import ToolInputError as ToolInputError
    from ._errors import TraceError as TraceError
    from ._errors import UnknownEventType as UnknownEventType
    from ._events import AgentFinished as AgentFinished
    from ._events import AgentStarted as AgentStarted
    from ._events import CancelRequested as CancelRequested
    from ._events import Event as Event
    from ._events import PermissionRequested as PermissionRequested
    from ._events import PermissionResolved as PermissionResolved
    from ._events import RunFinished as RunFinished
    from ._events import RunStarted as RunStarted
    from ._events import TextDelta as TextDelta
    from ._events import ThinkingDelta as ThinkingDelta
    from ._events import ToolFinished as ToolFinished
    from ._events import ToolStarted as ToolStarted
    from ._events import TurnFinished as TurnFinished
    from ._events import UserMessage as UserMessage
    from ._events import decode_event as decode_event
    from ._events import encode_event as encode_event
    from ._events import event_from_dict as event_from_dict
    from ._events import event_to_dict as event_to_dict
    from ._limits import Budget as Budget
    from ._limits import Limits as Limits
    from ._loop import AgentOutcome as AgentOutcome
    from ._messages import AgentState as AgentState
    from ._messages import Message as Message
    from ._messages import TextBlock as TextBlock
    from ._messages import ThinkingBlock as ThinkingBlock
    from ._messages import ToolResultBlock as ToolResultBlock
    from ._messages import ToolUseBlock as ToolUseBlock
    from ._permissions import Decision as Decision
    from ._permissions import PermissionPolicy as PermissionPolicy
    from ._permissions import Rule as Rule
    from ._permissions import parse_rule as parse_rule
    from ._provider import ModelRequest as ModelRequest
    from ._provider import Provider as Provider
    from ._provider import TextChunk as TextChunk
    from ._provider import ThinkingChunk as ThinkingChunk
    from ._provider import ToolCall as ToolCall
    from ._provider import ToolSpec as ToolSpec
    from ._provider import TurnEnd as TurnEnd
    from ._runtime import AgentHandle as AgentHandle
    from ._runtime import Runtime as Runtime
    from ._runtime import open_runtime as open_runtime
    from ._scenario import Scenario as Scenario
    from ._scripted import ScriptedProvider as ScriptedProvider
    from ._secrets import filter_env as filter_env
    from ._secrets import redact as redact
    from ._secrets import secret_values as secret_values
    from ._tracefile import TraceLoader as TraceLoader
    from ._tracefile import follow_lines as follow_lines
    from ._tracefile import load_traces as load_traces
    from ._tracefile import read_events as read_events
    from ._tree import AgentNode as AgentNode
    from ._tree import CancelInfo as CancelInfo
    from ._tree import RunningSubtree as RunningSubtree
    from ._tree import ToolNode as ToolNode
    from ._tree import TraceSet as TraceSet
    from ._tree import TraceTree as TraceTree
    from ._tree import split_runs as split_runs
    from .providers import AnthropicProvider as AnthropicProvider
    from .providers import OpenAIProvider as OpenAIProvider
    from .providers import RetryPolicy as RetryPolicy
    from .providers import open_provider as open_provider

_LAZY: dict[str, str] = {
    "AgentFinished": "._events",
    "AgentHandle": "._runtime",
    "AgentNode": "._tree",
    "AgentOutcome": "._loop",
    "AgentStarted": "._events",
    "AgentState": "._messages",
    "AgentType": "._agent_types",
    "AgentTypes": "._agent_types",
    "AgentsError": "._errors",
    "AnthropicProvider": ".providers",
    "Budget": "._limits",
    "CancelInfo": "._tree",
    "CancelRequested": "._events",
    "ConfigError": "._errors",
    "Decision": "._permissions",
    "Event": "._events",
    "EventBus": "._bus",
    "EventDecodeError": "._errors",
    "Limits": "._limits",
    "Message": "._messages",
    "ModelRequest": "._provider",
    "OpenAIProvider": ".providers",
    "PermissionPolicy": "._permissions",
    "PermissionRequested": "._events",
    "PermissionResolved": "._events",
    "Provider": "._provider",
    "ProviderError": "._errors",
    "RetryPolicy": ".providers",
    "Rule": "._permissions",
    "RunFinished": "._events",
    "RunStarted": "._events",
    "RunningSubtree": "._tree",
    "Runtime": "._runtime",
    "Scenario": "._scenario",
    "ScenarioError": "._errors",
    "ScriptedProvider": "._scripted",
    "SessionError": "._errors",
    "SubscriberLagged": "._bus",
    "Subscription": "._bus",
    "SubtreeCancelled": "._errors",
    "TextBlock": "._messages",
    "TextChunk": "._provider",
    "TextDelta": "._events",
    "ThinkingBlock": "._messages",
    "ThinkingChunk": "._provider",
    "ThinkingDelta": "._events",
    "ToolCall": "._provider",
    "ToolError": "._errors",
    "ToolFinished": "._events",
    "ToolInputError": "._errors",
    "ToolNode": "._tree",
    "ToolResultBlock": "._messages",
    "ToolSpec": "._provider",
    "ToolStarted": "._events",
    "ToolUseBlock": "._messages",
    "TraceError": "._errors",
    "TraceLoader": "._tracefile",
    "TraceSet": "._tree",
    "TraceTree": "._tree",
    "TurnEnd": "._provider",
    "TurnFinished": "._events",
    "UnknownEventType": "._errors",
    "UserMessage": "._events",
    "decode_event": "._events",
    "encode_event": "._events",
    "event_from_dict": "._events",
    "event_to_dict": "._events",
    "filter_env": "._secrets",
    "follow_lines": "._tracefile",
    "load_agent_types": "._agent_types",
    "load_traces": "._tracefile",
    "open_provider": ".providers",
    "open_runtime": "._runtime",
    "parse_rule": "._permissions",
    "read_events": "._tracefile",
    "redact": "._secrets",
    "secret_values": "._secrets",
    "split_runs": "._tree",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return [*__all__, "__version__"]
