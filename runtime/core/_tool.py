"""The tool interface: what every built-in and user tool implements.

A tool is a :class:`Tool` subclass: a name, a description, a JSON Schema for its input, flags that
tell the runtime how it may be scheduled and whether it needs permission, a one-line
:meth:`Tool.summary` for events and views, and an async :meth:`Tool.call`.

The runtime validates the model's arguments against :attr:`Tool.input_schema` before
:meth:`Tool.call` runs; a mismatch is an ``error`` result naming the field. ``call`` returns the
text the model reads, or raises :class:`~runtime.ToolError` for an ``error`` result. Any other
exception is also turned into an ``error`` result (a bug in a tool never crashes the agent).
"""

from __future__ import annotations

import abc
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeAlias

import attrs

from ._errors import ToolInputError
from ._sandbox import Sandbox
from ._schema import compile_check
from ._schema_regex import bounded_validator, pattern_deadline, reset_deadline
from ._secrets import NO_SECRETS, Secrets

if TYPE_CHECKING:
    import structlog

    from ._agent import AgentOutcome

    _Logger: TypeAlias = structlog.typing.FilteringBoundLogger
else:
    # What the annotation reads at run time (typing.get_type_hints on the public runtime
    # ToolContext): structlog is imported by the modules that log, not by the interface.
    _Logger = Any


TargetKind: TypeAlias = Literal["command", "path", "text"]


class SubAgentSpawner(Protocol):
    """What the ``agent`` tool needs from the runtime (given in :class:`ToolContext`)."""

    async def run_subagent(
        self,
        *,
        agent_type: str,
        prompt: str,
        description: str,
        budget: Mapping[str, Any] | None,
    ) -> str:
        """Run a sub-agent to its end inside the calling tool call's scope.

        Returns:
            The sub-agent's final text.

        Raises:
            ToolError: it failed, ran out of turns or budget, or could not start.
            SubtreeCancelled: it was cancelled by id.
        """
        ...

    async def start_background(
        self,
        *,
        agent_type: str,
        prompt: str,
        description: str,
        budget: Mapping[str, Any] | None,
    ) -> str:
        """Start a sub-agent in the background, in the calling agent's nursery, and return at
        once; its end reaches the calling agent as a message (docs/collaboration.md).

        Returns:
            What the model reads: the sub-agent's id and description.

        Raises:
            ToolError: it cannot start (as for :meth:`run_subagent`), or background sub-agents
                are not available here.
        """
        ...

    async def map_subagents(
        self,
        prompts: Sequence[str],
        *,
        agent_type: str = "general",
        output_type: Any = None,
        budget: Mapping[str, Any] | None = None,
    ) -> list[AgentOutcome]:
        """Run one sub-agent per prompt inside the calling tool call's scope, in parallel
        within ``max_parallel`` (started in prompt order), and return their outcomes in
        prompt order (docs/python-api.md, "Fan-out").

        A sub-agent that fails or is cancelled by id is an outcome (its ``status`` says so),
        never an exception that takes its siblings down.

        Raises:
            ToolError: unknown agent type, a bad budget or *output_type*, ``max_depth`` or
                ``max_agents`` reached (before any sub-agent starts).

        Cancellation: cancelling the call cancels them all (each ends ``cancelled``).
        """
        ...


@attrs.frozen(kw_only=True)
class ToolLimits:
    """Caps every tool honours; users set them on the runtime."""

    max_output_chars: int = 30_000
    bash_default_timeout_s: float = 120.0
    bash_max_timeout_s: float = 600.0
    read_max_bytes: int = 2_000_000
    read_default_lines: int = 2_000
    glob_max_results: int = 1_000
    grep_max_matches: int = 500
    grep_timeout_s: float = 30.0
    """The most one ``grep`` call may search for (a pattern that backtracks without end, such
    as ``(a|aa)+$``, is stopped by it, and never holds up the other agents meanwhile)."""
    grep_max_line_bytes: int = 100_000
    """A longer line is searched in its first this-many bytes only (the result says so): what
    one line costs in memory, a backtracking pattern's bookkeeping included, stays bounded."""
    grep_max_file_bytes: int = 100_000_000
    """A bigger file is searched in its first this-many bytes only (the result says so)."""


@attrs.frozen(kw_only=True)
class ToolContext:
    """Everything a tool call may use.

    Attributes:
        workspace: the resolved workspace folder; file tools stay inside it.
        env: the environment for subprocesses, with secrets already removed.
        spawner: runs sub-agents (the ``agent`` tool); ``None`` where sub-agents are not allowed.
        report_progress: emits a ``tool_progress`` event for this call (``progress``, ``total``
            or None, ``message`` or None); a long tool calls it now and then. It waits only
            while a ``block`` subscriber is full. ``None`` where nobody listens.
        secrets: the run's secrets; a tool that cuts text (keeps a head and a tail) masks
            before it cuts, or a cut through a secret leaves both halves readable.
        sandbox: where set, ``bash`` runs every command inside it (``--sandbox``).
        messenger: sends messages to the calling agent's parent, children and siblings (the
            ``send_message`` tool); ``None`` where there is nobody to message.
        report_todos: emits a ``todo_updated`` event for this call's agent with its whole todo
            list (``todo_write``); ``None`` where nobody listens.
        add_usage: adds ``(input_tokens, output_tokens)`` of a model call the tool made for
            its agent to the agent's usage.
    """

    workspace: Path
    agent_id: str
    tool_use_id: str
    depth: int
    env: Mapping[str, str]
    limits: ToolLimits
    log: _Logger
    spawner: SubAgentSpawner | None = None
    report_progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None
    secrets: Secrets = NO_SECRETS
    sandbox: Sandbox | None = None
    messenger: AgentMessenger | None = None
    report_todos: Callable[[list[dict[str, str]]], Awaitable[None]] | None = None
    # What a tool that makes model calls for its agent needs (an MCP server's sampling request,
    # docs/mcp.md "Sampling"): the agent's type and model, its place in the tree, and where the
    # call's tokens go (the agent's usage, so agent_finished and its budget count them).
    agent_type: str = ""
    model: str = ""
    parent_tool_use_id: str | None = None
    add_usage: Callable[[int, int], None] | None = None


class AgentMessenger(Protocol):
    """What the ``send_message`` tool needs from the runtime (given in :class:`ToolContext`;
    docs/collaboration.md#messages-between-agents)."""

    async def send(self, to: str, text: str) -> str:
        """Deliver *text* to the agent *to* names (``parent``, an agent id, or a sub-agent's
        description); what the model reads.

        Raises:
            ToolError: the recipient is unknown, the sender itself, not its parent, child or
                sibling, or finished; its mailbox is full; the text is too long.
        """
        ...


class Tool(abc.ABC):
    """Base class of every tool.

    Class attributes:
        input_schema: the JSON Schema of the input. It is compiled on the tool object's first
            call and kept: replace it (a new dict) rather than change it in place.
        read_only: never changes anything; never asks permission by default.
        idempotent: running it twice with the same input does what running it once does, so
            a call a crash interrupted is run again when the run resumes (docs/resume.md).
        concurrency_safe: may run at the same time as other calls of the same turn.
        needs_permission: asks (in ``ask`` mode) before running.
        edits_files: allowed without asking in ``auto-edit`` mode.
        permission_target_kind: how permission rules read :meth:`permission_target`:
            ``command`` (shell syntax aware), ``path`` (glob over folders) or ``text``.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    input_schema: ClassVar[dict[str, Any]]
    read_only: ClassVar[bool] = False
    idempotent: ClassVar[bool] = False
    concurrency_safe: ClassVar[bool] = False
    needs_permission: ClassVar[bool] = True
    edits_files: ClassVar[bool] = False
    permission_target_kind: ClassVar[TargetKind] = "text"

    def summary(self, args: Mapping[str, Any]) -> str:
        """One line for events and views, e.g. ``bash: ls -la``."""
        first = next(iter(args.values()), "") if args else ""
        return one_line(f"{self.name}: {first}")

    def permission_target(self, args: Mapping[str, Any]) -> str:
        """The argument permission rules match against (``bash(git *)`` matches the command)."""
        return ""

    @abc.abstractmethod
    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        """Do the work.

        Returns:
            The text the model reads.

        Raises:
            ToolError: an ``error`` result with this message.

        Cancellation: the runtime cancels the call's scope; the tool must leave nothing
        behind (``bash`` kills its process group).
        """


def one_line(text: str, limit: int = 120) -> str:
    """*text* folded onto one line and cut to *limit* characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class _Validation:
    """A tool's compiled checks: the fast yes (tools/_schema.py), then jsonschema, made on need."""

    __slots__ = ("fast", "schema", "validator")

    def __init__(self, schema: Any) -> None:
        self.schema = schema
        self.fast = compile_check(schema)
        self.validator: Any = None


# One compiled validation per tool object, dropped with it. Keyed by the object, not its class:
# a tool may carry its own schema, and a class id can be reused once the class is gone.
_VALIDATIONS: weakref.WeakKeyDictionary[Tool, _Validation] = weakref.WeakKeyDictionary()


def validate_input(tool: Tool, args: Any) -> None:
    """Check *args* against the tool's schema.

    Valid input of a simple schema is recognised by a compiled check; anything else, and every
    error, goes through jsonschema.

    Raises:
        ToolInputError: naming the first faulty field, e.g. ``input.command: required``.
    """
    validation = _VALIDATIONS.get(tool)
    if validation is None or validation.schema is not tool.input_schema:
        validation = _VALIDATIONS[tool] = _Validation(tool.input_schema)
    if validation.fast is not None and validation.fast(args):
        return
    import jsonschema  # imported on first use: keeps start-up fast

    validator = validation.validator
    if validator is None:
        # Patterns matched with a deadline: a schema's own regex must not freeze the loop.
        cls = bounded_validator(jsonschema.validators.validator_for(tool.input_schema))
        validator = validation.validator = cls(tool.input_schema)
    token = pattern_deadline()
    try:
        error = jsonschema.exceptions.best_match(validator.iter_errors(args))
    finally:
        reset_deadline(token)
    if error is None:
        return
    path = "input" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.path)
    if error.validator == "required" and isinstance(error.validator_value, list):
        missing = [
            f
            for f in error.validator_value
            if isinstance(error.instance, dict) and f not in error.instance
        ]
        if missing:
            raise ToolInputError(f"{path}.{missing[0]}: required field missing")
    if error.validator == "additionalProperties":
        raise ToolInputError(f"{path}: {error.message}")
    raise ToolInputError(f"{path}: {error.message}")
