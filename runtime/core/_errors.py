"""The runtime's exceptions.

One root, shallow subclasses::

    AgentsError
    ├── ConfigError          bad options, agent-type files, limits
    ├── ScenarioError        a scripted-provider scenario file is malformed
    ├── ProviderError        a model provider failed (after its retries)
    │   └── ContextOverflowError  the prompt is longer than the model's context window
    ├── ToolError            a tool failed; becomes an ``error`` tool result
    │   ├── ToolInputError   arguments did not match the tool's schema
    │   └── WorktreeError    an agent's git worktree cannot be made (docs/worktrees.md)
    ├── SubtreeCancelled     a tool's sub-agent was cancelled; the call ends ``cancelled``
    ├── TraceError           a trace file cannot be read
    │   └── EventDecodeError one line or object is not a valid event
    │       └── UnknownEventType  a well-formed event of a type this version does not know
    └── SessionError         a chat session cannot be used (missing, unreadable, corrupt,
                             from a newer version)

Third-party errors are wrapped at the boundary with ``raise ... from exc``.
"""

from __future__ import annotations


class AgentsError(Exception):
    """Root of every error the runtime raises on purpose."""


class ConfigError(AgentsError):
    """An option, a limit or an agent-type definition is invalid."""


class ScenarioError(AgentsError):
    """A scenario file is malformed; the message starts with the JSON path of the fault."""


class ProviderError(AgentsError):
    """A model provider failed; the agent that called it ends ``failed``."""


class ContextOverflowError(ProviderError):
    """The provider refused the request because the prompt is too long for the model.

    The agent compacts its history and tries once more (docs/context.md).

    Attributes:
        tokens: the prompt's size in tokens, when the provider said.
        limit: the model's context window in tokens, when the provider said.
    """

    def __init__(self, message: str, *, tokens: int | None = None, limit: int | None = None):
        super().__init__(message)
        self.tokens = tokens
        self.limit = limit


class ToolError(AgentsError):
    """A tool failed; the message becomes the ``error`` result the model reads."""


class ToolInputError(ToolError):
    """The model's arguments do not match the tool's input schema."""


class WorktreeError(ToolError):
    """An isolated agent's git worktree cannot be made or examined (docs/worktrees.md)."""


class TraceError(AgentsError):
    """A trace file cannot be read."""


class EventDecodeError(TraceError):
    """One JSON line or object is not a valid event.

    Attributes:
        line: 1-based line number in the file, when decoding a file.
    """

    def __init__(self, message: str, *, line: int | None = None) -> None:
        super().__init__(f"line {line}: {message}" if line is not None else message)
        self.line = line


class UnknownEventType(EventDecodeError):
    """A well-formed event whose ``type`` this version does not know (a newer writer)."""

    def __init__(self, type_name: str, *, line: int | None = None) -> None:
        super().__init__(f"unknown event type {type_name!r}", line=line)
        self.type_name = type_name


class SessionError(AgentsError):
    """A chat session cannot be used: missing, unreadable, corrupt, or written by a newer
    version (raised by ``runtime.cli``'s session store; one line)."""


class SubtreeCancelled(AgentsError):
    """Raised by a tool whose work was cancelled from inside (a sub-agent cancelled by id).

    The tool call then ends with status ``cancelled`` and the model reads ``cancelled: <reason>``
    (``runtime.core._agent.cancelled_text``).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
