"""The control socket (``--control SOCK``): drive a running run from other processes.

A unix stream socket taking JSON lines; each line gets exactly one JSON line back, in order::

    {"op": "cancel", "target": ID, "reason": "…"}          → {"ok": true}
    {"op": "stop", "target": ID, "reason": "…"}
    {"op": "permission", "request_id": ID, "granted": true, "remember": false}
    {"op": "message", "agent_id": ID, "text": "…"}
    {"op": "pending"}          → {"ok": true, "pending": [{"request_id": …, …}]}
    {"op": "elicitations"}     → {"ok": true, "elicitations": [{"request_id": …, …}]}
    {"op": "elicit", "request_id": ID, "action": "accept", "content": {…}}
    anything wrong             → {"ok": false, "error": "…"}

``cancel`` cancels exactly the subtree under an agent id or a tool_use_id (``by="control"``);
``stop`` stops it gracefully: the tool calls under way finish, no new model turn is taken, the
agents end ``stopped`` (docs/collaboration.md#stop);
``permission`` answers a ``permission_requested`` event; ``message`` queues a user message for an
agent's next turn; ``pending`` lists the unanswered permission requests,
so a client that does not read the event stream can still find them; ``elicitations`` and
``elicit`` do the same for the questions MCP servers ask (docs/mcp.md, "Elicitation").

Several clients may be connected at once; each is served by its own task, and a client that
sends garbage, an over-long line or disconnects mid-line only gets an error answer or goes away:
the run never notices. While the socket is served, it counts as a permission answerer: in
``ask`` mode without a terminal a question stays pending (listed by ``pending``) for any client,
one connected now or one that connects later (``trio-agents permit``, or a one-shot
``printf '{"op":"permission",…}' | nc -U SOCK``), up to ``--permission-timeout``.

The socket file is created mode 0600 (it can cancel and approve: it is the user's alone) and
removed when the server stops. A file mode does not stop a process that runs as the user, and a
read-only mount does not stop ``connect``: a command inside ``--sandbox`` could reach a socket in
the workspace and approve its siblings' requests (or MCP calls, which run outside the sandbox).
So each client's credentials are checked when it connects (``SO_PEERCRED``, set by the kernel at
``connect``, not forgeable): another user (root aside) or a process in another PID namespace than
this run's (every sandboxed command: bwrap's ``--unshare-pid``) gets one refusal line and is
disconnected (:func:`peer_refusal`; docs/reliability.md, "The trust boundary"). The user's own
``trio-agents permit``/``pending``/``cancel`` and ``nc -U`` clients are in the user's namespace
and keep working. A stale file left by a killed run is replaced; a live one (another
run answers on it) is refused.

:func:`control_request` is the blocking client behind ``trio-agents cancel``, ``stop``,
``permit`` and ``pending`` (:func:`cmd_permit`, :func:`cmd_pending`).
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson
import trio

from runtime._logs import get_logger
from runtime.core import ConfigError

if TYPE_CHECKING:
    from runtime.core import Runtime

MAX_LINE = 64 * 1024
"""The longest request line accepted, in bytes; a longer one gets an error answer."""

_OPS = "cancel, elicit, elicitations, message, pending, permission, stop"
_log = get_logger("trio_agents.control")


class ControlServer:
    """A bound control socket; serve it with :meth:`serve`, then :meth:`close` it.

    Made by :meth:`bind` before the run starts, so a bad path fails the command before any
    agent runs.
    """

    def __init__(self, path: str, sock: trio.socket.SocketType, inode: int) -> None:
        self.path = path
        self._sock = sock
        self._inode = inode
        self.clients = 0

    @classmethod
    async def bind(cls, path: str) -> ControlServer:
        """Create and listen on the unix socket at *path*.

        Raises:
            ConfigError: the path is taken by a live socket or by something else, or the socket
                cannot be created there (the message names the path).

        Cancellation: a checkpoint; if cancelled, no socket file is left behind.
        """
        await _clear_stale(path)
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listening = False
        try:
            # Created 0600 from the start: between bind and chmod another user could connect.
            old_umask = os.umask(0o177)
            try:
                await sock.bind(path)
            finally:
                os.umask(old_umask)
            sock.listen(64)
            inode = os.stat(path).st_ino
            listening = True
        except OSError as exc:
            raise ConfigError(
                f"--control {path}: cannot listen there: {exc.strerror or exc}"
            ) from exc
        finally:
            if not listening:  # failed or cancelled: no socket left open
                sock.close()
        return cls(path, sock, inode)

    async def serve(
        self, rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Accept clients and serve each in its own task until cancelled.

        Cancellation: the way to stop it; every client connection is closed.
        """
        listener = trio.SocketListener(self._sock)
        # The socket answers for the whole run, not only while a client happens to be
        # connected: a client that comes a moment late must still find the question.
        with rt.permission_answerer(), rt.elicitation_answerer():
            async with listener, trio.open_nursery() as nursery:
                task_status.started()

                async def handler(stream: trio.SocketStream) -> None:
                    await self._serve_client(rt, stream)

                await trio.serve_listeners(handler, [listener], handler_nursery=nursery)

    def close(self) -> None:
        """Close the socket and remove its file (only if it is still ours)."""
        self._sock.close()
        try:
            if os.stat(self.path).st_ino == self._inode:
                os.unlink(self.path)
        except OSError:
            pass

    async def _serve_client(self, rt: Runtime, stream: trio.SocketStream) -> None:
        self.clients += 1
        try:
            async with stream:
                refusal = peer_refusal(stream.socket)
                if refusal is not None:
                    _log.warning("control client refused", reason=refusal)
                    await stream.send_all(orjson.dumps(_error(refusal)) + b"\n")
                    return
                await _client_loop(rt, stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the client went away; nothing to answer
        except Exception:  # a bug here must cost one client, never the run
            _log.exception("control client failed")
        finally:
            self.clients -= 1


_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def _pid_depth(pid: int | str) -> int | None:
    """How many PID namespaces deep *pid* lives (the ``NSpid`` line of its ``status``, which
    every process may read, a non-dumpable one too, unlike its ``ns/pid`` link); None if unknown.
    """
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh.read(64 * 1024).split(b"\n"):
                if line.startswith(b"NSpid:"):
                    return len(line.split()) - 1
    except OSError:
        return None
    return None


def peer_refusal(sock: Any) -> str | None:
    """Why the process at the other end of *sock* may not drive this run, or None if it may.

    Refused: a peer of another user (root may: it can anyway), a peer in another PID namespace
    (a sandboxed command), one whose namespace cannot be read (failing closed), and any peer
    when the kernel gives no credentials.
    """
    try:
        pid, uid, _ = _CRED.unpack(
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
        )
    except (OSError, AttributeError, struct.error):
        return "refused: the connecting process's credentials are unknown"
    if uid not in (os.getuid(), 0):
        return "refused: the connecting process belongs to another user"
    # The kernel gives the peer's pid as seen from this namespace: 0 for a peer this run cannot
    # see (a parent namespace); one nested deeper (a sandboxed command) has more NSpid entries.
    ours = _pid_depth("self")
    theirs = _pid_depth(pid) if pid > 0 else None
    if ours is None or theirs != ours:
        return (
            "refused: the connecting process runs in another PID namespace (a sandboxed "
            "command may not answer or cancel)"
        )
    return None


async def _clear_stale(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigError(f"--control {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISSOCK(st.st_mode):
        raise ConfigError(f"--control {path}: exists and is not a socket")
    try:
        probe = await trio.open_unix_socket(path)
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise ConfigError(f"--control {path}: {exc.strerror or exc}") from exc
        os.unlink(path)  # left by a run that was killed: nobody listens
        return
    await probe.aclose()
    raise ConfigError(f"--control {path}: another run is already listening there")


async def _client_loop(rt: Runtime, stream: trio.SocketStream) -> None:
    buf = bytearray()
    skipping = False  # inside an over-long line: drop bytes up to its newline
    while True:
        data = await stream.receive_some(65536)
        if not data:
            return
        buf += data
        while True:
            end = buf.find(b"\n")
            if end < 0:
                break
            line = bytes(buf[:end])
            del buf[: end + 1]
            if skipping:
                skipping = False
                continue
            reply = await handle_request(rt, line)
            await stream.send_all(orjson.dumps(reply) + b"\n")
        if len(buf) > MAX_LINE and not skipping:
            buf.clear()
            skipping = True
            await stream.send_all(
                orjson.dumps(_error(f"line longer than {MAX_LINE} bytes; ignored")) + b"\n"
            )
        elif skipping:
            buf.clear()


def _error(message: str) -> dict[str, Any]:
    return {"ok": False, "error": message}


def _field(req: Mapping[str, Any], key: str, kind: type, what: str) -> Any:
    value = req.get(key)
    if value is None:
        raise _BadRequest(f"{key}: missing ({what})")
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise _BadRequest(f"{key}: expected {what}")
    return value


class _BadRequest(Exception):
    pass


async def handle_request(rt: Runtime, line: bytes) -> dict[str, Any]:
    """Carry out one request line and return its answer (never raises for a bad line).

    Cancellation: a checkpoint only while a ``cancel`` or ``stop`` emits its event.
    """
    text = line.strip()
    if not text:
        return _error("empty line; send one JSON object per line")
    try:
        req = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return _error(f"not JSON: {exc}")
    if not isinstance(req, dict):
        return _error("expected a JSON object with an 'op'")
    op = req.get("op")
    try:
        if op == "cancel":
            target = _field(req, "target", str, "an agent id or a tool_use_id")
            reason = req.get("reason")
            if not isinstance(reason, str) or not reason:
                reason = "cancelled through the control socket"
            if await rt.cancel(target, reason, by="control"):
                return {"ok": True}
            return _error(f"no running node {target!r} (unknown or already finished)")
        if op == "stop":
            target = _field(req, "target", str, "an agent id or a tool_use_id")
            reason = req.get("reason")
            if not isinstance(reason, str) or not reason:
                reason = "stopped through the control socket"
            if await rt.stop(target, reason, by="control"):
                return {"ok": True}
            return _error(
                f"no running node {target!r} to stop (unknown, already finished, cancelled or "
                "stopping, or on a Ray host)"
            )
        if op == "permission":
            request_id = _field(req, "request_id", str, "the request_id of a permission request")
            granted = _field(req, "granted", bool, "true or false")
            remember = req.get("remember", False)
            if not isinstance(remember, bool):
                raise _BadRequest("remember: expected true or false")
            if rt.resolve_permission(
                request_id,
                granted,
                remember=remember,
                reason="granted through the control socket"
                if granted
                else "denied through the control socket",
            ):
                return {"ok": True}
            return _error(f"no pending permission request {request_id!r}")
        if op == "message":
            agent_id = _field(req, "agent_id", str, "an agent id")
            message = _field(req, "text", str, "the message text")
            if rt.send_message(agent_id, message):
                return {"ok": True}
            return _error(f"agent {agent_id!r} is not running (or its mailbox is full)")
        if op == "pending":
            return {
                "ok": True,
                "pending": [
                    {
                        "request_id": p.request_id,
                        "tool_use_id": p.tool_use_id,
                        "agent_id": p.agent_id,
                        "name": p.name,
                        "summary": p.summary,
                        "input": p.input,
                        "always_rule": p.rule,
                    }
                    for p in rt.pending_permissions()
                ],
            }
        if op in ("elicit", "elicitations"):
            return _elicitation_op(rt, op, req)
    except _BadRequest as exc:
        return _error(str(exc))
    if op is None:
        return _error(f"op: missing (one of {_OPS})")
    return _error(f"op: unknown {op!r} (one of {_OPS})")


def _elicitation_op(rt: Runtime, op: str, req: Mapping[str, Any]) -> dict[str, Any]:
    if op == "elicitations":
        return {
            "ok": True,
            "elicitations": [
                {
                    "request_id": q.request_id,
                    "tool_use_id": q.tool_use_id,
                    "agent_id": q.agent_id,
                    "server": q.server,
                    "message": q.message,
                    "mode": q.mode,
                    "requested_schema": q.requested_schema,
                    "url": q.url,
                }
                for q in rt.pending_elicitations()
            ],
        }
    request_id = _field(req, "request_id", str, "the request_id of an elicitation")
    action = req.get("action")
    if action not in ("accept", "decline", "cancel"):
        raise _BadRequest("action: expected accept, decline or cancel")
    content = req.get("content")
    if content is not None and not isinstance(content, dict):
        raise _BadRequest("content: expected a JSON object")
    try:
        answered = rt.resolve_elicitation(
            request_id, action, content, reason=f"{action} through the control socket"
        )
    except ValueError as exc:
        raise _BadRequest(f"content: {exc}") from None
    if answered:
        return {"ok": True}
    return _error(f"no pending elicitation {request_id!r}")


# -- the client ----------------------------------------------------------------------------


class ControlConnectError(OSError):
    """The control socket cannot be reached (no run listens there)."""


def control_request(path: str, request: Mapping[str, Any], *, timeout_s: float = 10.0) -> Any:
    """Send one request to the control socket at *path* and return its decoded answer.

    A blocking client (it runs outside trio, in ``trio-agents cancel``).

    Raises:
        ControlConnectError: nothing listens at *path*.
        OSError: the connection broke or the answer did not come within *timeout_s*.
        ValueError: the answer is not JSON.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect(path)
        except OSError as exc:
            raise ControlConnectError(exc.errno, exc.strerror or str(exc)) from exc
        sock.sendall(orjson.dumps(dict(request)) + b"\n")
        buf = bytearray()
        while b"\n" not in buf:
            data = sock.recv(65536)
            if not data:
                raise OSError("the run closed the connection without an answer")
            buf += data
    return orjson.loads(bytes(buf[: buf.index(b"\n")]))


def _ask(path: str, request: Mapping[str, Any]) -> tuple[int, Any]:
    """One request for a command line client: ``(0, answer)``, or an exit code after one line."""
    from ._exit import EXIT_FAILED, EXIT_OK, EXIT_USAGE, error_line

    try:
        answer = control_request(path, request)
    except ControlConnectError as exc:
        error_line(
            f"cannot connect to {path}: {exc.strerror} (is a run started with --control there?)"
        )
        return EXIT_USAGE, None
    except (OSError, ValueError) as exc:
        error_line(f"control socket {path}: {exc}")
        return EXIT_FAILED, None
    if isinstance(answer, dict) and answer.get("ok") is True:
        return EXIT_OK, answer
    detail = answer.get("error") if isinstance(answer, dict) else None
    error_line(str(detail or f"unexpected answer: {answer!r}"))
    return EXIT_FAILED, None


def cmd_permit(path: str, request_id: str, answer: str, *, always: bool = False) -> int:
    """``trio-agents permit --control SOCK REQUEST_ID yes|no [--always]``.

    Returns:
        0 answered, 1 refused (no such request waiting: unknown, answered or timed out),
        2 nothing listens at *path*.
    """
    granted = answer == "yes"
    request = {
        "op": "permission",
        "request_id": request_id,
        "granted": granted,
        "remember": granted and always,
    }
    code, _ = _ask(path, request)
    return code


def cmd_pending(path: str, *, as_json: bool = False) -> int:
    """``trio-agents pending --control SOCK``: the permission requests waiting, one a line.

    Returns:
        0 (also when none waits), 1 the run answered with an error, 2 nothing listens at *path*.
    """
    code, answer = _ask(path, {"op": "pending"})
    if answer is None:
        return code
    pending = answer.get("pending")
    if not isinstance(pending, list):
        pending = []
    if as_json:
        print(orjson.dumps(pending).decode())
        return code
    if not pending:
        print("No permission request is waiting.")
        return code
    from runtime.core import show_input, visible

    # The whole input under each request, as the terminal's question shows it: what is
    # approved is what was read, not a summary cut at some width.
    for item in pending:
        if isinstance(item, dict):
            head = (
                f"{item.get('request_id')}  {item.get('summary') or item.get('name')}  "
                f"(agent {item.get('agent_id')}, call {item.get('tool_use_id')})"
            )
            print(visible(head, layout=False))
            given = item.get("input")
            if isinstance(given, dict):
                print("\n".join(f"    {line}" for line in show_input(given).split("\n")))
            rule = item.get("always_rule")
            if isinstance(rule, str) and rule:
                line = f"    (--always: allows {rule} for the rest of the run)"
                print(visible(line, layout=False))
    return code


def cmd_elicit(ns: Any) -> int:
    """``trio-agents elicit --control SOCK [REQUEST_ID accept|decline|cancel [NAME=VALUE…]]``:
    list the questions waiting, or answer one (docs/mcp.md, "Elicitation").

    Returns:
        0 listed or answered, 1 the run refused (no such question, content that does not
        match its schema), 2 nothing listens at SOCK or bad usage.
    """
    from ._exit import EXIT_USAGE, error_line

    path: str = ns.control
    code, answer = _ask(path, {"op": "elicitations"})
    if answer is None:
        return code
    waiting = [q for q in answer.get("elicitations") or [] if isinstance(q, dict)]
    if ns.request_id is None:
        _print_questions(waiting, as_json=ns.json)
        return code
    if ns.action is None:
        error_line("elicit: give the answer after REQUEST_ID: accept, decline or cancel")
        return EXIT_USAGE
    content: dict[str, Any] | None = None
    if ns.action == "accept":
        question = next((q for q in waiting if q.get("request_id") == ns.request_id), None)
        schema = question.get("requested_schema") if question is not None else None
        try:
            content = _content(ns.content, ns.fields, schema if isinstance(schema, dict) else {})
        except ValueError as exc:
            error_line(f"elicit: {exc}")
            return EXIT_USAGE
    request: dict[str, Any] = {"op": "elicit", "request_id": ns.request_id, "action": ns.action}
    if content is not None:
        request["content"] = content
    code, _ = _ask(path, request)
    return code


def _content(given: str | None, fields: list[str], schema: Mapping[str, Any]) -> dict[str, Any]:
    """The answer's content: ``--content`` JSON, then ``NAME=VALUE`` words typed by the
    question's schema (a number, an integer, a boolean, else the text)."""
    content: dict[str, Any] = {}
    if given is not None:
        try:
            parsed = orjson.loads(given)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"--content: not JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise ValueError("--content: expected a JSON object")
        content.update(parsed)
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    for word in fields:
        name, eq, value = word.partition("=")
        if not eq or not name:
            raise ValueError(f"{word!r}: expected NAME=VALUE")
        kind = (properties.get(name) or {}).get("type") if isinstance(properties, dict) else None
        content[name] = _typed(name, value, kind)
    return content


def _typed(name: str, value: str, kind: Any) -> Any:
    try:
        if kind == "integer":
            return int(value)
        if kind == "number":
            return float(value)
    except ValueError:
        raise ValueError(f"{name}: expected a {kind}, not {value!r}") from None
    if kind == "boolean":
        if value.lower() in ("true", "yes", "1"):
            return True
        if value.lower() in ("false", "no", "0"):
            return False
        raise ValueError(f"{name}: expected true or false, not {value!r}")
    return value


def _print_questions(waiting: list[dict[str, Any]], *, as_json: bool) -> None:
    if as_json:
        print(orjson.dumps(waiting).decode())
        return
    if not waiting:
        print("No question is waiting.")
        return
    from runtime.core import visible

    # The servers' words: shown (control characters visible), never obeyed.
    for q in waiting:
        head = (
            f"{q.get('request_id')}  {q.get('server')}: {q.get('message')}  "
            f"(agent {q.get('agent_id')}, call {q.get('tool_use_id')})"
        )
        print(visible(head, layout=False))
        if q.get("mode") == "url":
            print(visible(f"    open: {q.get('url')}", layout=False))
            continue
        schema = q.get("requested_schema")
        properties = schema.get("properties") if isinstance(schema, dict) else None
        required = set(schema.get("required") or []) if isinstance(schema, dict) else set()
        for name, spec in (properties or {}).items():
            spec = spec if isinstance(spec, dict) else {}
            kind = spec.get("type", "string")
            note = spec.get("description") or spec.get("title") or ""
            star = "" if name in required else " (optional)"
            print(visible(f"    {name}={kind}{star}  {note}".rstrip(), layout=False))
