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

from runtime.core._version import VERSION as __version__  # noqa: F401 - public, in __dir__

if TYPE_CHECKING:
    from runtime.cluster._placement import RayOptions as RayOptions
    from runtime.core._agent import AgentOutcome as AgentOutcome
    from runtime.core._agent_types import AgentType as AgentType
    from runtime.core._agent_types import AgentTypes as AgentTypes
    from runtime.core._agent_types import load_agent_types as load_agent_types
    from runtime.core._bus import EventBus as EventBus
    from runtime.core._bus import SubscriberLagged as SubscriberLagged
    from runtime.core._bus import Subscription as Subscription
    from runtime.core._context_window import context_window_for as context_window_for
    from runtime.core._errors import AgentsError as AgentsError
    from runtime.core._errors import ConfigError as ConfigError
    from runtime.core._errors import ContextOverflowError as ContextOverflowError
    from runtime.core._errors import EventDecodeError as EventDecodeError
    from runtime.core._errors import ProviderError as ProviderError
    from runtime.core._errors import ScenarioError as ScenarioError
    from runtime.core._errors import SessionError as SessionError
    from runtime.core._errors import SubtreeCancelled as SubtreeCancelled
    from runtime.core._errors import ToolError as ToolError
    from runtime.core._errors import ToolInputError as ToolInputError
    from runtime.core._errors import TraceError as TraceError
    from runtime.core._errors import UnknownEventType as UnknownEventType
    from runtime.core._events import AgentFinished as AgentFinished
    from runtime.core._events import AgentMessage as AgentMessage
    from runtime.core._events import AgentStarted as AgentStarted
    from runtime.core._events import CancelRequested as CancelRequested
    from runtime.core._events import ContextCompacted as ContextCompacted
    from runtime.core._events import ElicitationRequested as ElicitationRequested
    from runtime.core._events import ElicitationResolved as ElicitationResolved
    from runtime.core._events import Event as Event
    from runtime.core._events import HookFinished as HookFinished
    from runtime.core._events import McpSampled as McpSampled
    from runtime.core._events import MessageQueued as MessageQueued
    from runtime.core._events import PermissionRequested as PermissionRequested
    from runtime.core._events import PermissionResolved as PermissionResolved
    from runtime.core._events import ProviderRetry as ProviderRetry
    from runtime.core._events import RateLimited as RateLimited
    from runtime.core._events import ReplayDiverged as ReplayDiverged
    from runtime.core._events import RunFinished as RunFinished
    from runtime.core._events import RunResumed as RunResumed
    from runtime.core._events import RunStarted as RunStarted
    from runtime.core._events import StopRequested as StopRequested
    from runtime.core._events import TextDelta as TextDelta
    from runtime.core._events import ThinkingDelta as ThinkingDelta
    from runtime.core._events import TodoUpdated as TodoUpdated
    from runtime.core._events import ToolFinished as ToolFinished
    from runtime.core._events import ToolProgress as ToolProgress
    from runtime.core._events import ToolStarted as ToolStarted
    from runtime.core._events import TurnFinished as TurnFinished
    from runtime.core._events import UserMessage as UserMessage
    from runtime.core._events import decode_event as decode_event
    from runtime.core._events import encode_event as encode_event
    from runtime.core._events import event_from_dict as event_from_dict
    from runtime.core._events import event_to_dict as event_to_dict
    from runtime.core._function_tool import FunctionTool as FunctionTool
    from runtime.core._function_tool import tool as tool
    from runtime.core._limits import Budget as Budget
    from runtime.core._limits import Limits as Limits
    from runtime.core._messages import AgentState as AgentState
    from runtime.core._messages import Message as Message
    from runtime.core._messages import TextBlock as TextBlock
    from runtime.core._messages import ThinkingBlock as ThinkingBlock
    from runtime.core._messages import ToolResultBlock as ToolResultBlock
    from runtime.core._messages import ToolUseBlock as ToolUseBlock
    from runtime.core._middleware import ToolInvocation as ToolInvocation
    from runtime.core._permissions import Decision as Decision
    from runtime.core._permissions import PermissionPolicy as PermissionPolicy
    from runtime.core._permissions import Rule as Rule
    from runtime.core._permissions import parse_rule as parse_rule
    from runtime.core._prices import Price as Price
    from runtime.core._provider import ModelRequest as ModelRequest
    from runtime.core._provider import Provider as Provider
    from runtime.core._provider import RateLimitNotice as RateLimitNotice
    from runtime.core._provider import RetryNotice as RetryNotice
    from runtime.core._provider import TextChunk as TextChunk
    from runtime.core._provider import ThinkingChunk as ThinkingChunk
    from runtime.core._provider import ToolCall as ToolCall
    from runtime.core._provider import ToolSpec as ToolSpec
    from runtime.core._provider import TurnEnd as TurnEnd
    from runtime.core._runtime import AgentHandle as AgentHandle
    from runtime.core._runtime import Runtime as Runtime
    from runtime.core._sandbox import Sandbox as Sandbox
    from runtime.core._secrets import filter_env as filter_env
    from runtime.core._secrets import redact as redact
    from runtime.core._secrets import secret_values as secret_values
    from runtime.core._tool import SubAgentSpawner as SubAgentSpawner
    from runtime.core._tool import TargetKind as TargetKind
    from runtime.core._tool import Tool as Tool
    from runtime.core._tool import ToolContext as ToolContext
    from runtime.core._tool import ToolLimits as ToolLimits
    from runtime.core._tool import one_line as one_line
    from runtime.core._tool import validate_input as validate_input
    from runtime.providers._function import FunctionProvider as FunctionProvider
    from runtime.providers._function import ModelAnswer as ModelAnswer
    from runtime.providers._scenario import Scenario as Scenario
    from runtime.providers._scripted import ScriptedProvider as ScriptedProvider
    from runtime.trace._tracefile import TraceLoader as TraceLoader
    from runtime.trace._tracefile import follow_lines as follow_lines
    from runtime.trace._tracefile import load_traces as load_traces
    from runtime.trace._tracefile import read_events as read_events
    from runtime.trace._tree import AgentNode as AgentNode
    from runtime.trace._tree import CancelInfo as CancelInfo
    from runtime.trace._tree import RunningSubtree as RunningSubtree
    from runtime.trace._tree import ToolNode as ToolNode
    from runtime.trace._tree import TraceSet as TraceSet
    from runtime.trace._tree import TraceTree as TraceTree
    from runtime.trace._tree import split_runs as split_runs
    from runtime.wiring._open import open_runtime as open_runtime

    from .providers import AnthropicProvider as AnthropicProvider
    from .providers import OpenAIProvider as OpenAIProvider
    from .providers import RetryPolicy as RetryPolicy
    from .providers import open_provider as open_provider

_LAZY: dict[str, str] = {
    "AgentFinished": "runtime.core._events",
    "AgentMessage": "runtime.core._events",
    "AgentHandle": "runtime.core._runtime",
    "AgentNode": "runtime.trace._tree",
    "AgentOutcome": "runtime.core._agent",
    "AgentStarted": "runtime.core._events",
    "AgentState": "runtime.core._messages",
    "AgentType": "runtime.core._agent_types",
    "AgentTypes": "runtime.core._agent_types",
    "AgentsError": "runtime.core._errors",
    "AnthropicProvider": "runtime.providers",
    "Budget": "runtime.core._limits",
    "CancelInfo": "runtime.trace._tree",
    "CancelRequested": "runtime.core._events",
    "StopRequested": "runtime.core._events",
    "ConfigError": "runtime.core._errors",
    "ContextCompacted": "runtime.core._events",
    "ContextOverflowError": "runtime.core._errors",
    "Decision": "runtime.core._permissions",
    "Event": "runtime.core._events",
    "EventBus": "runtime.core._bus",
    "EventDecodeError": "runtime.core._errors",
    "FunctionProvider": "runtime.providers._function",
    "FunctionTool": "runtime.core._function_tool",
    "Limits": "runtime.core._limits",
    "Price": "runtime.core._prices",
    "Message": "runtime.core._messages",
    "ModelAnswer": "runtime.providers._function",
    "ModelRequest": "runtime.core._provider",
    "OpenAIProvider": "runtime.providers",
    "PermissionPolicy": "runtime.core._permissions",
    "PermissionRequested": "runtime.core._events",
    "PermissionResolved": "runtime.core._events",
    "Provider": "runtime.core._provider",
    "ProviderError": "runtime.core._errors",
    "ProviderRetry": "runtime.core._events",
    "RateLimitNotice": "runtime.core._provider",
    "RateLimited": "runtime.core._events",
    "RayOptions": "runtime.cluster._placement",
    "ReplayDiverged": "runtime.core._events",
    "HookFinished": "runtime.core._events",
    "RunResumed": "runtime.core._events",
    "McpSampled": "runtime.core._events",
    "MessageQueued": "runtime.core._events",
    "ElicitationRequested": "runtime.core._events",
    "ElicitationResolved": "runtime.core._events",
    "RetryNotice": "runtime.core._provider",
    "RetryPolicy": "runtime.providers",
    "Rule": "runtime.core._permissions",
    "RunFinished": "runtime.core._events",
    "RunStarted": "runtime.core._events",
    "RunningSubtree": "runtime.trace._tree",
    "Runtime": "runtime.core._runtime",
    "Sandbox": "runtime.core._sandbox",
    "Scenario": "runtime.providers._scenario",
    "ScenarioError": "runtime.core._errors",
    "ScriptedProvider": "runtime.providers._scripted",
    "SessionError": "runtime.core._errors",
    "SubAgentSpawner": "runtime.core._tool",
    "SubscriberLagged": "runtime.core._bus",
    "Subscription": "runtime.core._bus",
    "SubtreeCancelled": "runtime.core._errors",
    "TargetKind": "runtime.core._tool",
    "TextBlock": "runtime.core._messages",
    "TextChunk": "runtime.core._provider",
    "TextDelta": "runtime.core._events",
    "ThinkingBlock": "runtime.core._messages",
    "ThinkingChunk": "runtime.core._provider",
    "ThinkingDelta": "runtime.core._events",
    "Tool": "runtime.core._tool",
    "ToolCall": "runtime.core._provider",
    "ToolContext": "runtime.core._tool",
    "ToolError": "runtime.core._errors",
    "ToolFinished": "runtime.core._events",
    "ToolInputError": "runtime.core._errors",
    "ToolInvocation": "runtime.core._middleware",
    "ToolLimits": "runtime.core._tool",
    "ToolNode": "runtime.trace._tree",
    "ToolProgress": "runtime.core._events",
    "TodoUpdated": "runtime.core._events",
    "ToolResultBlock": "runtime.core._messages",
    "ToolSpec": "runtime.core._provider",
    "ToolStarted": "runtime.core._events",
    "ToolUseBlock": "runtime.core._messages",
    "TraceError": "runtime.core._errors",
    "TraceLoader": "runtime.trace._tracefile",
    "TraceSet": "runtime.trace._tree",
    "TraceTree": "runtime.trace._tree",
    "TurnEnd": "runtime.core._provider",
    "TurnFinished": "runtime.core._events",
    "UnknownEventType": "runtime.core._errors",
    "UserMessage": "runtime.core._events",
    "context_window_for": "runtime.core._context_window",
    "decode_event": "runtime.core._events",
    "encode_event": "runtime.core._events",
    "event_from_dict": "runtime.core._events",
    "event_to_dict": "runtime.core._events",
    "filter_env": "runtime.core._secrets",
    "follow_lines": "runtime.trace._tracefile",
    "load_agent_types": "runtime.core._agent_types",
    "load_traces": "runtime.trace._tracefile",
    "one_line": "runtime.core._tool",
    "open_provider": "runtime.providers",
    "open_runtime": "runtime.wiring._open",
    "parse_rule": "runtime.core._permissions",
    "read_events": "runtime.trace._tracefile",
    "redact": "runtime.core._secrets",
    "secret_values": "runtime.core._secrets",
    "split_runs": "runtime.trace._tree",
    "tool": "runtime.core._function_tool",
    "validate_input": "runtime.core._tool",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    _publish(importlib.import_module(module))
    return globals()[name]


def _publish(module: Any) -> None:
    # Every public name of *module* reports ``runtime`` as its module (``runtime.ConfigError``).
    from runtime.core._names import publish_names

    names = [public for public, where in _LAZY.items() if where == module.__name__]
    publish_names((getattr(module, public) for public in names), __name__)
    for public in names:
        globals()[public] = getattr(module, public)


def __dir__() -> list[str]:
    return [*__all__, "__version__"]
