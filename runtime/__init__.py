"""trio-agents: an actor-model multi-agent runtime on trio.

The public API: open a run with :func:`open_runtime`, start agents, watch the one flat event
stream, cancel any subtree, and rebuild the tree with :class:`TraceTree`.
"""

from __future__ import annotations

__version__ = "0.1.0"

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

__all__ = sorted(
    [
        "AgentFinished",
        "AgentHandle",
        "AgentOutcome",
        "AgentStarted",
        "AgentState",
        "AgentType",
        "AgentTypes",
        "AgentsError",
        "Budget",
        "CancelRequested",
        "ConfigError",
        "Event",
        "EventBus",
        "EventDecodeError",
        "Limits",
        "Message",
        "ModelRequest",
        "PermissionRequested",
        "PermissionResolved",
        "Provider",
        "ProviderError",
        "RunFinished",
        "RunStarted",
        "Runtime",
        "Scenario",
        "ScenarioError",
        "ScriptedProvider",
        "SessionError",
        "SubscriberLagged",
        "Subscription",
        "SubtreeCancelled",
        "TextBlock",
        "TextChunk",
        "TextDelta",
        "ThinkingBlock",
        "ThinkingChunk",
        "ThinkingDelta",
        "ToolCall",
        "ToolError",
        "ToolFinished",
        "ToolInputError",
        "ToolResultBlock",
        "ToolSpec",
        "ToolStarted",
        "ToolUseBlock",
        "TraceError",
        "TurnEnd",
        "TurnFinished",
        "UnknownEventType",
        "UserMessage",
        "decode_event",
        "encode_event",
        "event_from_dict",
        "event_to_dict",
        "load_agent_types",
        "open_runtime",
    ]
)
