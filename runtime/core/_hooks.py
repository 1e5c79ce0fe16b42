"""Hooks in Claude Code's format: the user's commands and HTTP endpoints run at fixed points of
a run (docs/hooks.md).

A :class:`HookTable` is what the settings files configured (read by :mod:`runtime.project`);
a :class:`HookRunner` runs the hooks of one event that match, in parallel, each in the task of
whatever asked (a tool call's hooks in that call's cancel scope: cancelling the call kills its
hooks' process groups), and folds their answers into one :class:`HookVerdict`. Every hook run is
one ``hook_finished`` event.

What a hook gets and may answer is Claude Code's: JSON on stdin (or an HTTP POST body), exit 0
(stdout read as JSON when it is JSON), exit 2 blocks (stderr is the reason), any other exit a
non-blocking error; a JSON answer may carry ``decision``/``reason``, ``continue``/``stopReason``,
``suppressOutput``, ``systemMessage`` and ``hookSpecificOutput`` (``permissionDecision``,
``permissionDecisionReason``, ``updatedInput``, ``additionalContext``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

import attrs
import orjson
import trio

from ._events import HookFinished
from ._hook_table import Hook, HookTable

__all__ = [
    "MAX_STOP_CONTINUES",
    "HookRunner",
    "HookVerdict",
    "claude_tool_input",
    "our_tool_input",
    "tool_response",
]

MAX_STOP_CONTINUES: Final = 5
"""How often ``Stop`` (or ``SubagentStop``) hooks may send one agent on, in its life, before it
ends anyway: a hook that always blocks cannot loop a run forever (docs/hooks.md#stop)."""
MAX_OUTPUT_BYTES: Final = 256 * 1024
"""What is kept of a hook's stdout and of its stderr; the rest is read and dropped."""
MAX_CONTEXT_CHARS: Final = 10_000
"""The most of one hook's text that reaches the model (a reason, stderr, added context)."""
_KILL_GRACE_S: Final = 1.0
_REAP_S: Final = 2.0
_CHUNK: Final = 65536


@attrs.frozen(kw_only=True)
class HookVerdict:
    """What the hooks of one event said, together.

    Attributes:
        blocked: an exit 2 or a ``decision: block`` (or ``deny``): the thing does not happen
            (``PreToolUse``, ``UserPromptSubmit``) or the agent goes on (``Stop``).
        reason: why, for the model (stderr of an exit 2, ``reason``,
            ``permissionDecisionReason`` of a deny), masked and bounded.
        permission: ``allow``, ``deny`` or ``ask`` (``PreToolUse``); deny over ask over allow.
        updated_input: a ``PreToolUse`` hook's new input, in Claude Code's field names.
        context: ``additionalContext`` (and the stdout of ``UserPromptSubmit`` and
            ``SessionStart`` hooks that is not JSON), for the model.
        stop: a ``continue: false``: the agent stops after this; ``stop_reason`` says why.
    """

    blocked: bool = False
    reason: str = ""
    permission: Literal["allow", "deny", "ask"] | None = None
    updated_input: dict[str, Any] | None = None
    context: tuple[str, ...] = ()
    stop: bool = False
    stop_reason: str = ""


NO_VERDICT: Final = HookVerdict()
_PERMISSION_RANK: Final = {"allow": 1, "ask": 2, "deny": 3}


@attrs.frozen(kw_only=True)
class _Ran:
    """One hook's run: how it ended and what it printed (or its HTTP response's body)."""

    exit_code: int | None
    stdout: str
    stderr: str
    error: str = ""
    """Why it has no exit code (a timeout, a failure to start or connect), for the log."""
    truncated: bool = False
    ok: bool = False
    """Exit 0, or a 2xx response."""
    block: bool = False
    """Exit 2 (a command hook's way to block)."""


class HookRunner:
    """Runs a run's hooks: one per run, shared by its agents.

    Args:
        table: the configured hooks.
        bus: the run's bus (``hook_finished``, and the secrets hook output is masked with).
        workspace: the hooks' working folder and ``$CLAUDE_PROJECT_DIR``.
        env: the environment the hooks' commands get (the runtime's own: hooks are the user's
            programs, not the model's).
        session_id: what ``session_id`` says (the run id).
        transcript_path: the run's trace file, or ``""``.
        permission_mode: what ``permission_mode`` says.
        tool_names: Claude Code's tool names and ours (``Bash`` → ``bash``); a tool of ours
            not in it keeps its name (``mcp__server__tool``, the user's own).
        log: where a hook's non-blocking error and ``systemMessage`` are said (``-v``).
        guard: the process's warden (``tools.warden()``): told each hook's process group while
            it runs, so that if this process dies (kill -9) the warden ends it; ``None``: none.
    """

    def __init__(
        self,
        table: HookTable,
        *,
        bus: Any,
        workspace: Path,
        env: Mapping[str, str],
        session_id: str,
        transcript_path: str = "",
        permission_mode: str = "default",
        tool_names: Mapping[str, str] | None = None,
        log: Any = None,
        guard: Any = None,
    ) -> None:
        self.table = table
        self.bus = bus
        self.workspace = workspace
        self.env = {**env, "CLAUDE_PROJECT_DIR": str(workspace)}
        self.session_id = session_id
        self.transcript_path = transcript_path
        self.permission_mode = permission_mode
        self.tool_names = dict(tool_names or {})
        self.aliases = {ours: [c for c, o in self.tool_names.items() if o == ours] for ours in
                        set(self.tool_names.values())}  # fmt: skip
        self.log = log
        self.session_context: tuple[str, ...] = ()
        """What ``SessionStart`` hooks added, given to each root agent with its prompt."""
        self.shell = shutil.which("bash") or "/bin/sh"
        self.guard = guard
        self.stops: dict[str, str] = {}
        """Agents a hook's ``continue: false`` stopped, and why: each ends after its turn."""
        self._events = table.events()

    def has(self, event: str) -> bool:
        """Whether any hook is configured on *event* (checked before building a payload)."""
        return event in self._events

    def claude_name(self, tool: str) -> str:
        """Claude Code's name of our tool *tool* (``bash`` → ``Bash``)."""
        names = self.aliases.get(tool)
        return names[0] if names else tool

    async def permission_asked(self, asked: Any) -> None:
        """The ``Notification`` hooks of a permission question (an ``Asked``: tool, summary,
        agent and call), as Claude Code runs them when it shows its permission prompt."""
        name = self.claude_name(asked.tool)
        await self.run(
            "Notification",
            {"message": f"trio-agents needs your permission to use {name}: {asked.summary}",
             "notification_type": "permission_prompt"},
            agent_id=asked.agent_id, parent_tool_use_id=asked.parent_tool_use_id,
            match="permission_prompt", tool_use_id=asked.tool_use_id,
        )  # fmt: skip

    async def run(
        self,
        event: str,
        fields: Mapping[str, Any],
        *,
        agent_id: str | None,
        parent_tool_use_id: str | None,
        match: str | None = None,
        tool_use_id: str | None = None,
    ) -> HookVerdict:
        """Run the hooks of *event* that match *match*, all at once, and fold their answers.

        Args:
            fields: the event's own fields of the JSON the hooks get (the common ones —
                ``session_id``, ``transcript_path``, ``cwd``, ``permission_mode``,
                ``hook_event_name`` — are added).
            match: what the matchers are tried on (a tool's name: Claude Code's, and for a
                tool with several, each of them).
            tool_use_id: the call being judged, for ``hook_finished``.

        Cancellation: a checkpoint; the hooks' process groups are killed (and HTTP requests
        closed) before :class:`trio.Cancelled` propagates, and their ``hook_finished`` says so
        (no exit code).
        """
        values: list[str | None] = [match]
        if match is not None and match in self.aliases:
            values = list(self.aliases[match])  # Task and Agent alike name our agent tool
        hooks = self.table.matching(event, values)
        if not hooks:
            return NO_VERDICT
        payload = {
            "session_id": self.session_id,
            "transcript_path": self.transcript_path,
            "cwd": str(self.workspace),
            "permission_mode": self.permission_mode,
            "hook_event_name": event,
            **fields,
        }
        body = orjson.dumps(payload, default=str)
        answers: list[tuple[_Ran, dict[str, Any] | None]] = [(_Ran(exit_code=None, stdout="",
                                                                   stderr=""), None)] * len(hooks)

        async def one(i: int, hook: Hook) -> None:
            answers[i] = await self._run_one(hook, body, agent_id, parent_tool_use_id, tool_use_id)

        if len(hooks) == 1:
            await one(0, hooks[0])
        else:
            async with trio.open_nursery() as nursery:
                for i, hook in enumerate(hooks):
                    nursery.start_soon(one, i, hook)
        return self._fold(event, answers)

    async def _run_one(
        self,
        hook: Hook,
        body: bytes,
        agent_id: str | None,
        parent_tool_use_id: str | None,
        tool_use_id: str | None,
    ) -> tuple[_Ran, dict[str, Any] | None]:
        """One hook to its ``hook_finished``: how it ran and its JSON answer, if any."""
        t0 = trio.current_time()
        ran: _Ran | None = None
        answer: dict[str, Any] | None = None
        try:
            if hook.kind == "http":
                ran = await _post(hook, body)
            else:
                ran = await self._spawn(hook, body)
            answer = _json_answer(ran)
        finally:
            shown = ran if ran is not None else _Ran(exit_code=None, stdout="", stderr="",
                                                     error="cancelled")  # fmt: skip
            await self.bus.emit_final(
                HookFinished(
                    agent_id=agent_id,
                    parent_tool_use_id=parent_tool_use_id,
                    hook_event=hook.event,
                    command=hook.target if hook.kind == "command" else None,
                    url=hook.target if hook.kind == "http" else None,
                    exit_code=shown.exit_code,
                    decision=_decision_of(hook.event, shown, answer),
                    duration_s=trio.current_time() - t0,
                    tool_use_id=tool_use_id,
                ),
                grace_s=5,
            )
        self._say(hook, ran, answer)
        return ran, answer

    async def _spawn(self, hook: Hook, body: bytes) -> _Ran:
        """Run a command hook in a process group of its own, killed whole at its timeout or
        on a cancel (docs/hooks.md#command-hooks)."""
        argv = [self.shell, "-c", hook.target]
        guard = self.guard
        if guard is not None and not guard.started:  # once per process (a blocking start)
            await trio.to_thread.run_sync(guard.start)
        try:
            proc = await trio.lowlevel.open_process(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.workspace,
                env=self.env,
                start_new_session=True,
            )
        except OSError as exc:
            return _Ran(exit_code=None, stdout="", stderr="", error=f"cannot start: {exc}")
        if guard is not None:
            guard.guard(proc.pid)  # its own session: the group's id is its pid
        out, err = _Capped(), _Capped()
        finished = False
        try:
            with trio.move_on_after(hook.timeout_s):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_feed, proc.stdin, body)
                    nursery.start_soon(_drain, proc.stdout, out)
                    nursery.start_soon(_drain, proc.stderr, err)
                    await _exited(proc)
                finished = True
        finally:
            # Shielded and bounded: a cancelled or timed-out hook's group is gone before the
            # caller goes on. The leader is not reaped before the group is signalled, so its
            # pid (the group's id) cannot have been given to a stranger.
            with trio.move_on_after(_KILL_GRACE_S + _REAP_S, shield=True):
                if not finished:
                    _killpg(proc.pid, signal.SIGTERM)
                    with trio.move_on_after(_KILL_GRACE_S):
                        await _exited(proc)
                _killpg(proc.pid, signal.SIGKILL if not finished else 0)
                if guard is not None:
                    guard.release(proc.pid)  # before the reap: the number is still its group's
                with trio.move_on_after(_REAP_S):
                    await proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    with trio.move_on_after(0.1, shield=True):
                        await stream.aclose()
        if not finished:
            return _Ran(exit_code=None, stdout=out.text(), stderr=err.text(),
                        error=f"timed out after {hook.timeout_s:g} s; killed")  # fmt: skip
        code = proc.returncode
        return _Ran(exit_code=code, stdout=out.text(), stderr=err.text(), truncated=out.truncated,
                    ok=code == 0, block=code == 2)  # fmt: skip

    def _say(self, hook: Hook, ran: _Ran, answer: dict[str, Any] | None) -> None:
        """A non-blocking error, and a hook's ``systemMessage``, are said in the log (``-v``)."""
        if self.log is None:
            return
        if not ran.ok and not ran.block:
            self.log.warning(
                "hook.failed", hook_event=hook.event, hook=hook.target,
                exit_code=ran.exit_code, error=ran.error or self.bus.masked(ran.stderr, 500),
            )  # fmt: skip
        message = answer.get("systemMessage") if answer is not None else None
        if isinstance(message, str) and message:
            self.log.warning("hook.message", hook_event=hook.event,
                             message=self.bus.masked(message, 500))  # fmt: skip

    def _fold(self, event: str, answers: list[tuple[_Ran, dict[str, Any] | None]]) -> HookVerdict:
        """The hooks' answers as one verdict (docs/hooks.md#decisions)."""
        blocked = stop = False
        reasons: list[str] = []
        stop_reasons: list[str] = []
        context: list[str] = []
        permission: str | None = None
        updated: dict[str, Any] | None = None
        for ran, answer in answers:
            if ran.block:
                blocked = True
                reasons.append(ran.stderr.strip() or "blocked by a hook")
                continue
            if answer is None:
                if ran.ok and event in ("UserPromptSubmit", "SessionStart") and ran.stdout.strip():
                    context.append(ran.stdout.strip())
                continue
            if answer.get("continue") is False:
                stop = True
                stop_reasons.append(str(answer.get("stopReason") or "stopped by a hook"))
            decision = answer.get("decision")
            specific = answer.get("hookSpecificOutput")
            specific = specific if isinstance(specific, dict) else {}
            wanted = specific.get("permissionDecision")
            if wanted is None and decision in ("approve", "block") and event == "PreToolUse":
                wanted = "allow" if decision == "approve" else "deny"  # the older spelling
            if wanted in _PERMISSION_RANK and event == "PreToolUse":
                if permission is None or _PERMISSION_RANK[wanted] > _PERMISSION_RANK[permission]:
                    permission = wanted
                why = specific.get("permissionDecisionReason") or answer.get("reason")
                if wanted == "deny":
                    blocked = True
                    reasons.append(str(why or "denied by a hook"))
            elif decision == "block":
                blocked = True
                reasons.append(str(answer.get("reason") or "blocked by a hook"))
            if isinstance(specific.get("updatedInput"), dict):
                updated = specific["updatedInput"]
            extra = specific.get("additionalContext")
            if isinstance(extra, str) and extra.strip():
                context.append(extra.strip())
        return HookVerdict(
            blocked=blocked,
            reason=self._for_model("\n".join(reasons)),
            permission=permission,  # type: ignore[arg-type]
            updated_input=updated,
            context=tuple(self._for_model(c) for c in context),
            stop=stop,
            stop_reason=self._for_model("\n".join(stop_reasons)),
        )

    def _for_model(self, text: str) -> str:
        return str(self.bus.masked(text, MAX_CONTEXT_CHARS)) if text else ""


def _decision_of(event: str, ran: _Ran, answer: dict[str, Any] | None) -> str | None:
    """What ``hook_finished.decision`` says: ``block``, ``allow``/``deny``/``ask``, ``stop``,
    ``error`` (a non-blocking failure: another exit code, a timeout), or ``None``."""
    if ran.block:
        return "block"
    if not ran.ok:
        return "error"
    if answer is None:
        return None
    if answer.get("continue") is False:
        return "stop"
    specific = answer.get("hookSpecificOutput")
    wanted = specific.get("permissionDecision") if isinstance(specific, dict) else None
    if wanted in _PERMISSION_RANK and event == "PreToolUse":
        return str(wanted)
    decision = answer.get("decision")
    if decision == "approve":
        return "allow"
    return "block" if decision == "block" else None


def _json_answer(ran: _Ran) -> dict[str, Any] | None:
    """A hook's stdout (or response body) as its JSON answer: only on success, only an
    object, only when whole."""
    text = ran.stdout.strip()
    if not ran.ok or ran.truncated or not text.startswith("{"):
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


class _Capped:
    """The first :data:`MAX_OUTPUT_BYTES` of a stream; the rest is read and dropped."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.truncated = False

    def feed(self, chunk: bytes | bytearray) -> None:
        room = MAX_OUTPUT_BYTES - len(self.data)
        if len(chunk) > room:
            self.truncated = True
        if room > 0:
            self.data += chunk[:room]

    def text(self) -> str:
        text = self.data.decode("utf-8", errors="replace")  # never a crash on bad bytes
        return text + "\n… [output cut]" if self.truncated else text


async def _feed(stream: trio.abc.SendStream | None, body: bytes) -> None:
    if stream is None:
        return
    # A hook that does not read its input may exit first: that is no error.
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await stream.send_all(body)
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await stream.aclose()


async def _drain(stream: trio.abc.ReceiveStream | None, into: _Capped) -> None:
    if stream is None:
        return
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        while chunk := await stream.receive_some(_CHUNK):
            into.feed(chunk)


async def _exited(proc: trio.Process) -> None:
    """Return once *proc* has exited, without reaping it where a pidfd can watch it (its pid,
    the group's id, stays reserved until :func:`_killpg` has run)."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        await proc.wait()
        return
    try:
        await trio.lowlevel.wait_readable(fd)
    finally:
        os.close(fd)


def _killpg(pgid: int, sig: int) -> None:
    if sig == 0:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _post(hook: Hook, body: bytes) -> _Ran:
    """An HTTP hook: the JSON POSTed, the response read as a command's stdout; a 2xx is a
    success, anything else a non-blocking error (docs/hooks.md#http-hooks)."""
    import httpx  # only runs with an HTTP hook configured

    headers = {"content-type": "application/json", **dict(hook.headers)}
    with trio.move_on_after(hook.timeout_s):
        try:
            async with (
                httpx.AsyncClient(follow_redirects=False, trust_env=False) as client,
                client.stream("POST", hook.target, content=body, headers=headers) as response,
            ):
                out = _Capped()
                async for chunk in response.aiter_bytes():
                    out.feed(chunk)
                    if out.truncated:
                        break
                code = response.status_code
                return _Ran(exit_code=code, stdout=out.text(), stderr="",
                            truncated=out.truncated, ok=200 <= code < 300)  # fmt: skip
        except httpx.HTTPError as exc:
            return _Ran(exit_code=None, stdout="", stderr="", error=f"{type(exc).__name__}: {exc}")
    return _Ran(exit_code=None, stdout="", stderr="", error=f"timed out after {hook.timeout_s:g} s")


# Our tools' input fields and Claude Code's, where they differ (docs/hooks.md#tool-input).
_FIELDS: Final[dict[str, dict[str, str]]] = {
    "read": {"path": "file_path"},
    "write": {"path": "file_path"},
    "edit": {"path": "file_path", "old": "old_string", "new": "new_string"},
    "grep": {"include": "glob"},
    "agent": {"agent": "subagent_type"},
}
_PATHS: Final = {"read", "write", "edit"}


def claude_tool_input(tool: str, args: Mapping[str, Any], workspace: Path) -> dict[str, Any]:
    """Our tool's input in Claude Code's field names (a file tool's path made absolute, as
    Claude Code's are; ``bash``'s ``timeout_s`` as ``timeout`` in milliseconds)."""
    names = _FIELDS.get(tool, {})
    out = {names.get(k, k): v for k, v in args.items()}
    if tool in _PATHS and isinstance(out.get("file_path"), str):
        out["file_path"] = str(workspace / out["file_path"])
    if tool == "bash" and "timeout_s" in out:
        out["timeout"] = int(float(out.pop("timeout_s")) * 1000)
    return out


def our_tool_input(tool: str, args: Mapping[str, Any], workspace: Path) -> dict[str, Any]:
    """A hook's ``updatedInput`` back in our tool's field names (the inverse of
    :func:`claude_tool_input`; a path inside the workspace made relative again)."""
    back = {c: o for o, c in _FIELDS.get(tool, {}).items()}
    out = {back.get(k, k): v for k, v in args.items()}
    if tool in _PATHS and isinstance(out.get("path"), str):
        with contextlib.suppress(ValueError):
            out["path"] = str(Path(out["path"]).relative_to(workspace))
    if tool == "bash" and "timeout" in out:
        out["timeout_s"] = float(out.pop("timeout")) / 1000
    return out


def tool_response(tool: str, claude_input: Mapping[str, Any], text: str) -> Any:
    """A ``PostToolUse`` hook's ``tool_response``: what Claude Code's tool of that name gives
    where a hook is likely to read it (``bash``: ``stdout``; a file tool: ``filePath``), with
    the result's text; another tool's is the text itself (docs/hooks.md#tool-input)."""
    if tool == "bash":
        return {"stdout": text, "stderr": "", "interrupted": False, "isImage": False}
    if tool in _PATHS:
        return {"filePath": claude_input.get("file_path"), "success": True, "output": text}
    return text
