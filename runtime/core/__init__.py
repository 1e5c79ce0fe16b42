"""The core layer: the agent loop and everything it stands on.

Events and the bus (the one flat stream), the loop and its run context, messages, the provider
protocol, limits and budgets, permissions and approvals, agent types, secrets, the errors, the
:class:`Runtime` handle, and the tool interface every tool implements. It imports only
:mod:`runtime.actors` below it; providers, tools, the trace, the cluster and the command line
stand on it (docs/architecture.md, "Layers").

Names are imported on first use (PEP 562): ``import runtime.core._events`` stays cheap for the
trace reader, which needs the events and not the loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime._lazy import lazy_exports

if TYPE_CHECKING:
    from runtime._logs import get_logger as get_logger

    from ._agent import AgentOutcome as AgentOutcome
    from ._agent import AgentSpec as AgentSpec
    from ._agent import cancel_reason_of as cancel_reason_of
    from ._agent import cancelled_text as cancelled_text
    from ._agent import started_event as started_event
    from ._agent_types import AgentType as AgentType
    from ._agent_types import AgentTypes as AgentTypes
    from ._agent_types import agent_types_from_mapping as agent_types_from_mapping
    from ._agent_types import default_agent_types as default_agent_types
    from ._agent_types import load_agent_types as load_agent_types
    from ._approvals import PermissionBroker as PermissionBroker
    from ._approvals import show_input as show_input
    from ._budget import BudgetLayer as BudgetLayer
    from ._bus import EventBus as EventBus
    from ._collector import collector_for_runs as collector_for_runs
    from ._compaction import SUMMARY_HEADER as SUMMARY_HEADER
    from ._compaction import compacted_turns as compacted_turns
    from ._config import FILE_SETTINGS as FILE_SETTINGS
    from ._config import GROUPS as GROUPS
    from ._config import PERMISSION_MODES as PERMISSION_MODES
    from ._config import PROVIDERS as PROVIDERS
    from ._config import RULES as RULES
    from ._config import SCHEMA as SCHEMA
    from ._config import SECTIONS as SECTIONS
    from ._config import TABLE as TABLE
    from ._config import Setting as Setting
    from ._config import check_rate_limit_table as check_rate_limit_table
    from ._config import fan_out_default as fan_out_default
    from ._context import Owner as Owner
    from ._context import RunContext as RunContext
    from ._context import SystemPromptBuilder as SystemPromptBuilder
    from ._context import cancel_node as cancel_node
    from ._context import new_run_context as new_run_context
    from ._context_window import DEFAULT_CHARS_PER_TOKEN as DEFAULT_CHARS_PER_TOKEN
    from ._context_window import fixed_chars as fixed_chars
    from ._context_window import history_chars as history_chars
    from ._context_window import parse_overflow as parse_overflow
    from ._elicitation import ElicitAction as ElicitAction
    from ._elicitation import ElicitationDesk as ElicitationDesk
    from ._elicitation import PendingElicitation as PendingElicitation
    from ._errors import AgentsError as AgentsError
    from ._errors import ConfigError as ConfigError
    from ._errors import ContextOverflowError as ContextOverflowError
    from ._errors import EventDecodeError as EventDecodeError
    from ._errors import ProviderError as ProviderError
    from ._errors import ScenarioError as ScenarioError
    from ._errors import SessionError as SessionError
    from ._errors import SubtreeCancelled as SubtreeCancelled
    from ._errors import ToolError as ToolError
    from ._errors import ToolInputError as ToolInputError
    from ._errors import TraceError as TraceError
    from ._errors import UnknownEventType as UnknownEventType
    from ._errors import WorktreeError as WorktreeError
    from ._events import EVENT_TYPES as EVENT_TYPES
    from ._events import AgentFinished as AgentFinished
    from ._events import AgentMessage as AgentMessage
    from ._events import AgentStarted as AgentStarted
    from ._events import AgentStatus as AgentStatus
    from ._events import CancelBy as CancelBy
    from ._events import CancelRequested as CancelRequested
    from ._events import ContextCompacted as ContextCompacted
    from ._events import ElicitationRequested as ElicitationRequested
    from ._events import ElicitationResolved as ElicitationResolved
    from ._events import Event as Event
    from ._events import HookFinished as HookFinished
    from ._events import McpSampled as McpSampled
    from ._events import MessageQueued as MessageQueued
    from ._events import PermissionRequested as PermissionRequested
    from ._events import PermissionResolved as PermissionResolved
    from ._events import ProviderRetry as ProviderRetry
    from ._events import RateLimited as RateLimited
    from ._events import ReplayDiverged as ReplayDiverged
    from ._events import RunFinished as RunFinished
    from ._events import RunResumed as RunResumed
    from ._events import RunStarted as RunStarted
    from ._events import StopReason as StopReason
    from ._events import StopRequested as StopRequested
    from ._events import TextDelta as TextDelta
    from ._events import ThinkingDelta as ThinkingDelta
    from ._events import TodoUpdated as TodoUpdated
    from ._events import ToolFinished as ToolFinished
    from ._events import ToolProgress as ToolProgress
    from ._events import ToolStarted as ToolStarted
    from ._events import ToolStatus as ToolStatus
    from ._events import TurnFinished as TurnFinished
    from ._events import UserMessage as UserMessage
    from ._events import decode_event as decode_event
    from ._events import encode_event as encode_event
    from ._events import event_from_dict as event_from_dict
    from ._events import event_to_dict as event_to_dict
    from ._globs import Glob as Glob
    from ._globs import compile_glob as compile_glob
    from ._globs import escape_glob as escape_glob
    from ._hook_table import HOOK_EVENTS as HOOK_EVENTS
    from ._hook_table import Hook as Hook
    from ._hook_table import HookTable as HookTable
    from ._hooks import HookRunner as HookRunner
    from ._lazylog import LazyLogger as LazyLogger
    from ._limits import Limits as Limits
    from ._loop import TypeSetup as TypeSetup
    from ._loop import run_agent_actor as run_agent_actor
    from ._loop import select_tools as select_tools
    from ._messages import AgentState as AgentState
    from ._messages import Block as Block
    from ._messages import Message as Message
    from ._messages import TextBlock as TextBlock
    from ._messages import ThinkingBlock as ThinkingBlock
    from ._messages import ToolResultBlock as ToolResultBlock
    from ._messages import ToolUseBlock as ToolUseBlock
    from ._messages import state_converter as state_converter
    from ._messaging import MAX_MESSAGE_CHARS as MAX_MESSAGE_CHARS
    from ._messaging import Messenger as Messenger
    from ._middleware import MiddlewareChain as MiddlewareChain
    from ._middleware import MiddlewareProvider as MiddlewareProvider
    from ._names import publish_names as publish_names
    from ._permissions import PermissionPolicy as PermissionPolicy
    from ._prices import BUILTIN_PRICES as BUILTIN_PRICES
    from ._prices import PRICES_DATE as PRICES_DATE
    from ._prices import Price as Price
    from ._prices import PriceTable as PriceTable
    from ._prices import add_costs as add_costs
    from ._prices import check_prices as check_prices
    from ._propagation import propagating as propagating
    from ._propagation import trace_headers as trace_headers
    from ._provider import ModelRequest as ModelRequest
    from ._provider import Provider as Provider
    from ._provider import RateLimitNotice as RateLimitNotice
    from ._provider import RetryNotice as RetryNotice
    from ._provider import StreamItem as StreamItem
    from ._provider import TextChunk as TextChunk
    from ._provider import ThinkingChunk as ThinkingChunk
    from ._provider import ToolCall as ToolCall
    from ._provider import ToolSpec as ToolSpec
    from ._provider import TurnEnd as TurnEnd
    from ._runtime import AgentHandle as AgentHandle
    from ._runtime import Runtime as Runtime
    from ._sandbox import Sandbox as Sandbox
    from ._secrets import NO_SECRETS as NO_SECRETS
    from ._secrets import RedactingLogFilter as RedactingLogFilter
    from ._secrets import Secrets as Secrets
    from ._secrets import filter_env as filter_env
    from ._secrets import redact_known as redact_known
    from ._secrets import redact_log_event as redact_log_event
    from ._secrets import redact_text as redact_text
    from ._secrets import run_environ as run_environ
    from ._secrets import scan_env as scan_env
    from ._secrets import scan_run_environ as scan_run_environ
    from ._secrets import seal_process_environ as seal_process_environ
    from ._secrets import secret_values as secret_values
    from ._statuses import AGENT_STATUSES as AGENT_STATUSES
    from ._statuses import INTERRUPTED as INTERRUPTED
    from ._statuses import NODE_STATUSES as NODE_STATUSES
    from ._statuses import RUNNING as RUNNING
    from ._statuses import TOOL_STATUSES as TOOL_STATUSES
    from ._termtext import visible as visible
    from ._termtext import visible_strings as visible_strings
    from ._tool import SubAgentSpawner as SubAgentSpawner
    from ._tool import TargetKind as TargetKind
    from ._tool import Tool as Tool
    from ._tool import ToolContext as ToolContext
    from ._tool import ToolLimits as ToolLimits
    from ._tool import one_line as one_line
    from ._tool import validate_input as validate_input
    from ._version import VERSION as VERSION
    from ._workspace import RUNTIME_DIR as RUNTIME_DIR
    from ._workspace import Located as Located
    from ._workspace import is_inside as is_inside
    from ._workspace import is_runtime_path as is_runtime_path
    from ._workspace import locate as locate
    from ._workspace import normalise_target as normalise_target
    from ._workspace import relative as relative
    from ._workspace import resolve_in_workspace as resolve_in_workspace
    from ._worktree import LiveWorktrees as LiveWorktrees
    from ._worktree import Worktree as Worktree
    from ._worktree import WorktreeEntry as WorktreeEntry
    from ._worktree import add_worktree as add_worktree
    from ._worktree import describe_entry as describe_entry
    from ._worktree import list_worktrees as list_worktrees
    from ._worktree import remove_entry as remove_entry

_LAZY: dict[str, str] = {
    # money (docs/costs.md)
    "BUILTIN_PRICES": "._prices",
    "PRICES_DATE": "._prices",
    "Price": "._prices",
    "PriceTable": "._prices",
    "add_costs": "._prices",
    "check_prices": "._prices",
    "AGENT_STATUSES": "._statuses",
    "AgentFinished": "._events",
    "AgentMessage": "._events",
    "AgentHandle": "._runtime",
    "AgentOutcome": "._agent",
    "AgentSpec": "._agent",
    "AgentStarted": "._events",
    "AgentState": "._messages",
    "AgentStatus": "._events",
    "AgentType": "._agent_types",
    "AgentTypes": "._agent_types",
    "AgentsError": "._errors",
    "Block": "._messages",
    "BudgetLayer": "._budget",
    "CancelBy": "._events",
    "CancelRequested": "._events",
    "StopRequested": "._events",
    "ConfigError": "._errors",
    "ContextCompacted": "._events",
    "ContextOverflowError": "._errors",
    "DEFAULT_CHARS_PER_TOKEN": "._context_window",
    "Event": "._events",
    "EventBus": "._bus",
    "EventDecodeError": "._errors",
    "FILE_SETTINGS": "._config",
    "GROUPS": "._config",
    "Glob": "._globs",
    "INTERRUPTED": "._statuses",
    "LazyLogger": "._lazylog",
    "Limits": "._limits",
    "Located": "._workspace",
    "Message": "._messages",
    "MiddlewareChain": "._middleware",
    "MiddlewareProvider": "._middleware",
    "ModelRequest": "._provider",
    "NODE_STATUSES": "._statuses",
    "NO_SECRETS": "._secrets",
    "Owner": "._context",
    "PERMISSION_MODES": "._config",
    "PROVIDERS": "._config",
    "PermissionBroker": "._approvals",
    "PermissionPolicy": "._permissions",
    "PermissionRequested": "._events",
    "PermissionResolved": "._events",
    "Provider": "._provider",
    "ProviderError": "._errors",
    "ProviderRetry": "._events",
    "RateLimitNotice": "._provider",
    "RateLimited": "._events",
    "RULES": "._config",
    "RUNNING": "._statuses",
    "RUNTIME_DIR": "._workspace",
    "RedactingLogFilter": "._secrets",
    "ReplayDiverged": "._events",
    "HookFinished": "._events",
    "HOOK_EVENTS": "._hook_table",
    "Hook": "._hook_table",
    "HookRunner": "._hooks",
    "HookTable": "._hook_table",
    "McpSampled": "._events",
    "MessageQueued": "._events",
    "ElicitationDesk": "._elicitation",
    "PendingElicitation": "._elicitation",
    "ElicitAction": "._elicitation",
    "ElicitationRequested": "._events",
    "ElicitationResolved": "._events",
    "RetryNotice": "._provider",
    "RunContext": "._context",
    "RunFinished": "._events",
    "RunResumed": "._events",
    "EVENT_TYPES": "._events",
    "RunStarted": "._events",
    "Runtime": "._runtime",
    "SCHEMA": "._config",
    "check_rate_limit_table": "._config",
    "fan_out_default": "._config",
    "SECTIONS": "._config",
    "SUMMARY_HEADER": "._compaction",
    "Sandbox": "._sandbox",
    "ScenarioError": "._errors",
    "Secrets": "._secrets",
    "SessionError": "._errors",
    "Setting": "._config",
    "StopReason": "._events",
    "StreamItem": "._provider",
    "SubAgentSpawner": "._tool",
    "SubtreeCancelled": "._errors",
    "SystemPromptBuilder": "._context",
    "TABLE": "._config",
    "TOOL_STATUSES": "._statuses",
    "TargetKind": "._tool",
    "TextBlock": "._messages",
    "ThinkingBlock": "._messages",
    "TextChunk": "._provider",
    "TextDelta": "._events",
    "ThinkingChunk": "._provider",
    "ThinkingDelta": "._events",
    "Tool": "._tool",
    "ToolCall": "._provider",
    "ToolContext": "._tool",
    "ToolError": "._errors",
    "ToolFinished": "._events",
    "ToolInputError": "._errors",
    "ToolLimits": "._tool",
    "ToolProgress": "._events",
    "ToolResultBlock": "._messages",
    "ToolSpec": "._provider",
    "ToolStarted": "._events",
    "ToolStatus": "._events",
    "ToolUseBlock": "._messages",
    "TraceError": "._errors",
    "TurnEnd": "._provider",
    "TurnFinished": "._events",
    "TypeSetup": "._loop",
    "MAX_MESSAGE_CHARS": "._messaging",
    "Messenger": "._messaging",
    "UnknownEventType": "._errors",
    "UserMessage": "._events",
    "VERSION": "._version",
    "agent_types_from_mapping": "._agent_types",
    "cancel_node": "._context",
    "cancel_reason_of": "._agent",
    "cancelled_text": "._agent",
    "collector_for_runs": "._collector",
    "started_event": "._agent",
    "compacted_turns": "._compaction",
    "compile_glob": "._globs",
    "decode_event": "._events",
    "default_agent_types": "._agent_types",
    "encode_event": "._events",
    "escape_glob": "._globs",
    "event_from_dict": "._events",
    "event_to_dict": "._events",
    "filter_env": "._secrets",
    "fixed_chars": "._context_window",
    "get_logger": "runtime._logs",
    "history_chars": "._context_window",
    "is_inside": "._workspace",
    "is_runtime_path": "._workspace",
    "load_agent_types": "._agent_types",
    "locate": "._workspace",
    "new_run_context": "._context",
    "normalise_target": "._workspace",
    "one_line": "._tool",
    "parse_overflow": "._context_window",
    "propagating": "._propagation",
    "publish_names": "._names",
    "redact_known": "._secrets",
    "redact_log_event": "._secrets",
    "redact_text": "._secrets",
    "relative": "._workspace",
    "resolve_in_workspace": "._workspace",
    "run_agent_actor": "._loop",
    "run_environ": "._secrets",
    "scan_env": "._secrets",
    "scan_run_environ": "._secrets",
    "seal_process_environ": "._secrets",
    "secret_values": "._secrets",
    "select_tools": "._loop",
    "show_input": "._approvals",
    "state_converter": "._messages",
    "trace_headers": "._propagation",
    "validate_input": "._tool",
    "visible": "._termtext",
    "visible_strings": "._termtext",
    "Worktree": "._worktree",
    "LiveWorktrees": "._worktree",
    "TodoUpdated": "._events",
    "WorktreeEntry": "._worktree",
    "add_worktree": "._worktree",
    "WorktreeError": "._errors",
    "describe_entry": "._worktree",
    "list_worktrees": "._worktree",
    "remove_entry": "._worktree",
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
