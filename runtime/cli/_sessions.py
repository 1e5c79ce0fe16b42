"""Chat sessions on disk: one JSON file per conversation, written atomically as its first turn
starts (so a chat killed during it can be resumed) and after every turn.

A session (:class:`ChatSession`) is what ``trio-agents chat`` needs to carry a conversation on
another day: the messages (serialised with :data:`runtime.core._messages.state_converter`), the
usage, the agent types and trace files it ran with, and a little state (how the last turn ended,
the prompt's input history). The files live in one folder (:class:`SessionStore`, by default
``.trio-agents/sessions/`` of the current folder), named ``<id>.json``; ids sort by creation
time (``20261129-193051-1a2b3c``).

Safety rules, because a session is someone's work:

* A write goes to a temporary file in the same folder, is flushed and fsynced, then replaces the
  old file with :func:`os.replace` (and the folder is fsynced): a crash leaves the old file or
  the new one, never half of one.
* A file that cannot be read — not JSON, not a session, a field of the wrong type — or that was
  written by a newer format is refused with one :class:`SessionError` line, and is never
  overwritten: :meth:`SessionStore.save` checks what it would replace.

* A session carries its own integrity: an HMAC-SHA256 of its content (``"integrity"``) under a
  per-user key kept outside every workspace (``$XDG_CONFIG_HOME/trio-agents/session.key``, else
  ``~/.config/trio-agents/session.key``; created 0600 in a 0700 folder on the first save). A file
  without one, or whose check fails (planted by an agent, edited by hand, signed by another user),
  is refused by ``chat --resume`` with one line and listed as refused: a planted session would
  otherwise be replayed to the model as the user's own words. A copy under another name keeps
  its check (a fork). The key is as safe as the user's home: an unsandboxed ``bash`` running as
  the user can read it (``--sandbox`` hides it).
* Secrets are masked in the file as they are in the events (``runtime/core/_secrets.py``).
* One chat at a time holds a session: its first load or save takes a lock (``flock`` on
  ``.<id>.lock`` beside the file, holding the pid), so a second ``chat --resume`` of the same
  session is refused with one line naming the other process instead of silently losing one of
  the two conversations. The lock goes with its process, a killed one too.
* Session files are read like every planted file (:func:`runtime.project.read_capped`): a
  ``.json`` that is a FIFO, a link to ``/dev/zero`` or out of the folder is refused, never
  read into memory; the session key is written atomically (temporary file, fsync, rename), and
  an empty or short key (a full disk during its first write) is made again.

This module does blocking file I/O; async callers run :meth:`SessionStore.write` in a worker
thread (see ``runtime.cli._chat``).
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import hashlib
import hmac
import os
import re
import secrets
import stat
import tempfile
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import attrs
import cattrs
import orjson
from cattrs.preconf.orjson import make_converter

from runtime.core import Message, SessionError, redact_known, state_converter
from runtime.project import ProjectFileError, read_capped

FORMAT_VERSION = 1
"""The session file format this version writes, and the newest it reads."""
DEFAULT_SESSIONS_DIR = Path(".trio-agents") / "sessions"
MAX_INPUT_HISTORY = 500
"""The most prompt lines kept for the up/down history."""

MAX_SESSION_BYTES = 256 * 1024 * 1024
"""The biggest session file read; a bigger one is refused (no conversation comes near it)."""
MAX_KEY_BYTES = 4096
_KEY_MIN = 32

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


@attrs.define(kw_only=True)
class Usage:
    """Tokens over every turn of the session."""

    input_tokens: int = 0
    output_tokens: int = 0


@attrs.define(kw_only=True)
class ChatState:
    """Where the conversation stands, besides its messages.

    Attributes:
        last_status: how the last turn's root agent ended (``completed``, ``cancelled``, …).
        last_error: its error, if any.
        last_agent_id: the agent id of the last turn (in the trace it was written to).
        run_ids: every run (one per ``chat`` process) the session has been in, oldest first.
        input_history: the lines typed at the prompt, oldest first (the up/down history).
        compactions: how many times the conversation's context was compacted (automatically
            or with ``/compact``); its saved messages are the compacted history.
    """

    last_status: str | None = None
    last_error: str | None = None
    last_agent_id: str | None = None
    run_ids: list[str] = attrs.Factory(list)
    input_history: list[str] = attrs.Factory(list)
    compactions: int = 0


@attrs.define(kw_only=True)
class ChatSession:
    """One conversation, as stored in ``<id>.json``.

    Attributes:
        format_version: :data:`FORMAT_VERSION` of the writer.
        created_ts: when the session began (unix seconds).
        updated_ts: when it was last written (unix seconds).
        turns: messages the user sent that ran a turn.
        first_prompt: the first of them (what ``chat --list`` shows).
        trace_path: the trace file of the latest run; *traces* lists every one, oldest first.
        messages: the whole history, as the next turn's root agent gets it.
    """

    format_version: int = FORMAT_VERSION
    id: str
    created_ts: float
    updated_ts: float
    turns: int = 0
    first_prompt: str | None = None
    workspace: str | None = None
    provider: str | None = None
    model: str | None = None
    scenario: str | None = None
    agent_types: list[str] = attrs.Factory(list)
    trace_path: str | None = None
    traces: list[str] = attrs.Factory(list)
    usage: Usage = attrs.Factory(Usage)
    state: ChatState = attrs.Factory(ChatState)
    messages: list[Message] = attrs.Factory(list)


@attrs.frozen(kw_only=True)
class SessionInfo:
    """One line of ``chat --list``: a session, or a file that cannot be read (*error*)."""

    id: str
    path: Path
    updated_ts: float
    turns: int = 0
    first_prompt: str | None = None
    error: str | None = None
    first_turn: str | None = None
    """For a session saved as its first turn started and never after: ``running`` (a chat
    holds it now) or ``cut`` (its process died: ``chat --resume`` goes on with that turn);
    ``None`` otherwise."""


# Messages are (un)structured by the one converter of the message classes (its hooks for the
# block union do not survive Converter.copy()); the session classes are plain attrs classes.
_converter: cattrs.Converter = make_converter(forbid_extra_keys=False)
_converter.register_structure_hook(Message, lambda obj, _: state_converter.structure(obj, Message))
_converter.register_unstructure_hook(Message, lambda m: state_converter.unstructure(m, Message))


KEY_FILE_NAME = "session.key"
_INTEGRITY = "integrity"
_keys: dict[Path, bytes] = {}


def default_key_file() -> Path:
    """Where the per-user session key lives: under ``$XDG_CONFIG_HOME`` (when absolute), else
    ``~/.config``, in ``trio-agents/``."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".config"
    return root / "trio-agents" / KEY_FILE_NAME


def session_key(path: Path | None = None, *, create: bool = False) -> bytes | None:
    """The session key at *path* (default :func:`default_key_file`); made if *create*.

    An empty or short file (a disk that filled up while the key was first written) counts as
    no key: it is made again when *create*.

    Returns:
        The key, or None when there is none and *create* is false.

    Raises:
        SessionError: it cannot be read or made.
    """
    path = path or default_key_file()
    if path in _keys:
        return _keys[path]
    key = _read_key(path)
    if key is None:
        if not create:
            return None
        key = _make_key(path)
    _keys[path] = key
    return key


def _read_key(path: Path) -> bytes | None:
    try:
        data = read_file(path, MAX_KEY_BYTES, what="the session key")
    except SessionError:
        if os.path.lexists(path) and not os.path.isfile(path):
            raise
        data = None  # unreadable as a key: made again
    if data is None:
        return None
    key = data.strip()
    return key if len(key) >= _KEY_MIN else None


def _make_key(path: Path) -> bytes:
    # Written whole or not at all: a temporary file, fsynced, then linked (first maker wins,
    # another chat making it meanwhile keeps its key) or renamed over an empty/short one.
    data = secrets.token_hex(32).encode() + b"\n"
    tmp: str | None = None
    try:
        missing = [p for p in (path.parent, path.parent.parent) if not p.exists()]
        for folder in reversed(missing):
            with suppress(FileExistsError):
                folder.mkdir(mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".session.key.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            made = _read_key(path)
            if made is not None:
                return made  # made meanwhile by another chat
            os.replace(tmp, path)
            tmp = None
        _fsync_dir(path.parent)
    except OSError as exc:
        raise SessionError(f"cannot create the session key {path}: {exc.strerror}") from exc
    finally:
        if tmp is not None:
            with suppress(OSError):
                os.unlink(tmp)
    return data.strip()


def read_file(path: Path, cap: int, *, what: str = "session") -> bytes | None:
    """The bytes of *path* (a session file or the key), None when it does not exist.

    Read as a planted file is (:func:`runtime.project.read_capped`): a symlink out of its
    folder, a FIFO, a device, or more than *cap* bytes is refused.

    Raises:
        SessionError: it cannot be used (one line naming it).
    """
    try:
        data, _size = read_capped(path, cap, root=path.parent)
    except ProjectFileError as exc:
        if not os.path.lexists(path):
            return None
        raise SessionError(f"cannot read {what} {exc}") from exc
    if len(data) > cap:
        raise SessionError(f"cannot read {what} {path}: over {cap // (1024 * 1024) or 1} MiB")
    return data


def _mac(key: bytes, obj: Any) -> str:
    # Sorted keys: the check does not depend on how the file was laid out, only on its content.
    canonical = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    return hmac.new(key, canonical, hashlib.sha256).hexdigest()


def check_integrity(data: bytes, *, where: str, key_file: Path | None = None) -> None:
    """Refuse a session file this user's trio-agents did not write (as it is now).

    Raises:
        SessionError: no integrity record, no key to check it with, or a failed check.
    """
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise SessionError(f"{where}: not a session file: not JSON ({exc})") from exc
    record = obj.pop(_INTEGRITY, None) if isinstance(obj, dict) else None
    given = record.get("hmac_sha256") if isinstance(record, dict) else None
    if not isinstance(given, str):
        raise SessionError(
            f"{where}: refused: it has no integrity record, so nothing shows trio-agents wrote "
            "it for you (planted by a tool, or from a version before sessions were signed)"
        )
    key = session_key(key_file)
    if key is None:
        raise SessionError(
            f"{where}: refused: there is no session key ({key_file or default_key_file()}) to "
            "check it with"
        )
    if not hmac.compare_digest(_mac(key, obj), given):
        raise SessionError(
            f"{where}: refused: its integrity check failed: it was changed outside trio-agents "
            "(or signed with another user's key)"
        )


def new_session_id() -> str:
    """A session id that sorts by creation time: ``20261129-193051-1a2b3c``."""
    now = datetime.datetime.now(datetime.UTC)
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def new_session(**fields: Any) -> ChatSession:
    """A fresh session (not written yet) with a new id and the times set to now."""
    now = time.time()
    return ChatSession(id=new_session_id(), created_ts=now, updated_ts=now, **fields)


def encode_session(session: ChatSession, *, key_file: Path | None = None) -> bytes:
    """The file's bytes: indented JSON (a person may read it), ending with a newline, signed
    with the session key at *key_file* (made on first use; see the module's docstring).

    Raises:
        SessionError: the key cannot be read or made.
    """
    # Masked like the events: a key the user typed or a tool showed stays out of the file.
    obj = redact_known(_converter.unstructure(session))
    key = session_key(key_file, create=True)
    assert key is not None  # made when missing
    obj[_INTEGRITY] = {"hmac_sha256": _mac(key, obj)}
    data: bytes = orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    return data


def decode_session(data: bytes, *, where: str) -> ChatSession:
    """Parse a session file's bytes.

    Args:
        where: how to name the file in an error (its path).

    Raises:
        SessionError: not JSON, not a session, a bad field (named by its JSON path), or a newer
            format than :data:`FORMAT_VERSION`.
    """
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise SessionError(f"{where}: not a session file: not JSON ({exc})") from exc
    if not isinstance(obj, dict):
        raise SessionError(f"{where}: not a session file: expected a JSON object")
    version = obj.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise SessionError(f"{where}: not a session file: no valid format_version")
    if version > FORMAT_VERSION:
        raise SessionError(
            f"{where}: written by a newer trio-agents (session format {version}; this one "
            f"reads format {FORMAT_VERSION} and older); upgrade to use it"
        )
    try:
        session: ChatSession = _converter.structure(obj, ChatSession)
    except Exception as exc:  # cattrs raises validation groups, KeyError, ValueError, TypeError
        details = cattrs.transform_error(exc) if isinstance(exc, BaseExceptionGroup) else []
        detail = details[0] if details else f"{type(exc).__name__}: {exc}"
        raise SessionError(f"{where}: broken session file: {detail}") from exc
    return session


def _fsync_dir(path: Path) -> None:
    # The rename is durable only once the folder's entry is on disk too.
    with suppress(OSError):
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class SessionStore:
    """The folder of session files.

    Args:
        root: the folder (created on the first write).
        key_file: the session key (default :func:`default_key_file`).
    """

    def __init__(
        self, root: str | os.PathLike[str] = DEFAULT_SESSIONS_DIR, *, key_file: Path | None = None
    ) -> None:
        self.root = Path(root)
        self.key_file = key_file
        self._locks: dict[str, int] = {}

    def hold(self, session_id: str) -> None:
        """Take the lock of *session_id* for this store (kept until :meth:`release` or the
        process ends); holding it already is fine.

        Raises:
            SessionError: another process holds it (the line names its pid), or the lock file
                cannot be made.
        """
        if session_id in self._locks:
            return
        path = self.root / f".{self.path_for(session_id).stem}.lock"
        try:
            fd = os.open(
                path,
                os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                0o600,
            )
        except OSError as exc:
            raise SessionError(f"cannot lock session {session_id}: {path}: {exc.strerror}") from exc
        held = False
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise SessionError(f"cannot lock session {session_id}: {path} is not a file")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise SessionError(f"cannot lock session {session_id}: {exc.strerror}") from exc
                other = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
                raise SessionError(
                    f"session {session_id} is open in another trio-agents chat (pid {other}); "
                    "leave that one first"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            held = True
        finally:
            if not held:  # refused or failed: the descriptor is not kept
                os.close(fd)
        self._locks[session_id] = fd

    def release(self) -> None:
        """Let go of every session lock this store holds."""
        for fd in self._locks.values():
            with suppress(OSError):
                os.close(fd)
        self._locks.clear()

    def path_for(self, session_id: str) -> Path:
        """The file of *session_id*.

        Raises:
            SessionError: the id could name something outside the folder.
        """
        if not _ID.match(session_id):
            raise SessionError(
                f"{session_id!r} is not a session id (letters, digits, '.', '_' and '-')"
            )
        return self.root / f"{session_id}.json"

    def _files(self) -> list[Path]:
        try:
            entries = list(self.root.iterdir())
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise SessionError(f"cannot read the sessions folder {self.root}: {exc}") from exc
        return [
            p
            for p in entries
            if p.suffix == ".json" and not p.name.startswith(".") and _ID.match(p.stem)
        ]

    def latest_id(self) -> str | None:
        """The session written last (by file time; ties by id), or None when there is none."""
        best: tuple[float, str] | None = None
        for path in self._files():
            try:
                key = (path.stat().st_mtime, path.stem)
            except OSError:
                continue
            if best is None or key > best:
                best = key
        return best[1] if best else None

    def resolve(self, session_id: str | None) -> str:
        """*session_id* itself, or the latest session's id for None.

        Raises:
            SessionError: None, and there is no session yet.
        """
        if session_id is not None:
            return session_id
        latest = self.latest_id()
        if latest is None:
            raise SessionError(f"no session to resume in {self.root}")
        return latest

    def load(self, session_id: str) -> ChatSession:
        """Read a session.

        The file's name is its id: a copied file is a fork of the session under the new name.

        Raises:
            SessionError: no such session, or a file that cannot be used (see
                :func:`decode_session`); the file is left as it is.
        """
        path = self.path_for(session_id)
        data = read_file(path, MAX_SESSION_BYTES)
        if data is None:
            raise SessionError(
                f"no session {session_id!r} in {self.root} (see trio-agents chat --list)"
            )
        session = decode_session(data, where=f"session {path}")
        check_integrity(data, where=f"session {path}", key_file=self.key_file)
        session.id = session_id
        return session

    def save(self, session: ChatSession) -> Path:
        """Write *session* (its ``updated_ts`` set to now) atomically; return its path.

        Raises:
            SessionError: the file there cannot be read or is of a newer format (it is kept),
                or the folder cannot be written.
        """
        session.updated_ts = time.time()
        return self.write(session.id, encode_session(session, key_file=self.key_file))

    def write(self, session_id: str, data: bytes) -> Path:
        """Replace the file of *session_id* with *data* atomically (temp file, fsync, rename).

        Raises:
            SessionError: as :meth:`save`.
        """
        path = self.path_for(session_id)
        self._check_replaceable(path)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self.hold(session_id)
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=f".{session_id}.", suffix=".tmp")
        except OSError as exc:
            raise SessionError(f"cannot write session {path}: {exc.strerror}") from exc
        replaced = False
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            replaced = True
        except OSError as exc:
            raise SessionError(f"cannot write session {path}: {exc.strerror}") from exc
        finally:
            if not replaced:  # whatever stopped us (an error, Ctrl+C): no temp file left
                with suppress(OSError):
                    os.unlink(tmp)
        _fsync_dir(self.root)
        return path

    def _check_replaceable(self, path: Path) -> None:
        # Only a file this version can read is replaced: whatever else is there (a corrupted
        # file, a newer format, something that is not a session) may be someone's only copy.
        data = read_file(path, MAX_SESSION_BYTES)
        if data is None:
            return
        try:
            decode_session(data, where=str(path))
        except SessionError as exc:
            raise SessionError(
                f"session {path}: will not overwrite a file this version cannot read; "
                "move it away first"
            ) from exc

    def _first_turn(self, session: ChatSession) -> str | None:
        # A session file with no turn but a prompt was written as its first turn started.
        if session.turns or session.first_prompt is None:
            return None
        return "running" if self.in_use(session.id) else "cut"

    def in_use(self, session_id: str) -> bool:
        """Whether a live process holds *session_id*'s lock (:meth:`hold`); this store's own
        lock does not count. Nothing is taken."""
        if session_id in self._locks:
            return False
        path = self.root / f".{self.path_for(session_id).stem}.lock"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return False  # never locked, or not a lock file we could read
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError as exc:
                return exc.errno in (errno.EAGAIN, errno.EACCES)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)

    def list_sessions(self) -> list[SessionInfo]:
        """Every session in the folder, the latest first; unreadable files carry an *error*."""
        out: list[SessionInfo] = []
        for path in self._files():
            try:
                mtime = path.stat().st_mtime
            except OSError:
                continue
            try:
                data = read_file(path, MAX_SESSION_BYTES)
                if data is None:
                    continue
                session = decode_session(data, where=path.name)
                check_integrity(data, where=path.name, key_file=self.key_file)
            except (SessionError, OSError) as exc:
                error = str(exc).removeprefix(f"{path.name}: ")
                out.append(SessionInfo(id=path.stem, path=path, updated_ts=mtime, error=error))
                continue
            out.append(
                SessionInfo(
                    id=path.stem,
                    path=path,
                    updated_ts=session.updated_ts,
                    turns=session.turns,
                    first_prompt=session.first_prompt,
                    first_turn=self._first_turn(session),
                )
            )
        out.sort(key=lambda s: (s.updated_ts, s.id), reverse=True)
        return out
