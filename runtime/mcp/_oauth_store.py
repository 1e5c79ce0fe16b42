"""Where an MCP server's OAuth login is kept: one file per server URL, 0600, in the user's config.

A login is the tokens the authorization server issued (access and refresh token) and the
client it registered for this runtime (dynamic client registration). They are the user's,
not the workspace's: they live under ``$XDG_CONFIG_HOME/trio-agents/mcp-oauth/`` (else
``~/.config/trio-agents/mcp-oauth/``), a folder made 0700, one file per server URL (named by
a digest of the URL, so a URL is never a path), each written 0600 through a new file renamed
into place: a reader sees the old login or the new one, never half of one. docs/mcp-oauth.md
says what is kept and how to forget it (``trio-agents mcp logout NAME``).

The access token's expiry is kept as a wall-clock time (the server says "in N seconds";
that is relative to when it was said) with the token's lifetime, so a run started later knows
whether to refresh before its first request (:attr:`StoredLogin.refresh_at`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from runtime.project import user_config_dir

__all__ = ["StoredLogin", "TokenStore", "refresh_margin", "store_dir"]

MAX_FILE_BYTES = 256 * 1024
"""The biggest login file read (tokens and a client record are a few KiB)."""
STORE_NAME = "mcp-oauth"


def store_dir(env: Mapping[str, str] | None = None) -> Path:
    """The folder of the logins: ``mcp-oauth`` in the user's config folder."""
    return user_config_dir(env) / STORE_NAME


def refresh_margin(lifetime_s: float) -> float:
    """How long before an access token expires it is refreshed: a minute, or a tenth of its
    lifetime for a token that lives less than ten minutes (so a short-lived token is not
    refreshed on every request)."""
    return min(60.0, max(0.0, lifetime_s) / 10)


@attrs.frozen(kw_only=True)
class StoredLogin:
    """One server's login as read from its file.

    Attributes:
        server_url: the MCP server's URL the login is for.
        tokens: the token response (``access_token``, ``refresh_token``, ``scope`` …), or
            ``None`` before the first token.
        client: the registered client (``client_id``, ``redirect_uris`` …), or ``None``.
        expires_at: when the access token expires (``time.time()`` seconds), if it does.
        lifetime_s: the access token's lifetime as issued, if it has one.
        discovery: what the login discovered (``authorization_server``, its ``metadata``
            and the ``resource`` metadata): where a later run refreshes the token without
            discovering it all again.
    """

    server_url: str
    tokens: Mapping[str, Any] | None = None
    client: Mapping[str, Any] | None = None
    expires_at: float | None = None
    lifetime_s: float | None = None
    discovery: Mapping[str, Any] | None = None

    @property
    def refresh_at(self) -> float | None:
        """When to refresh the access token (before it expires; see :func:`refresh_margin`)."""
        if self.expires_at is None:
            return None
        return self.expires_at - refresh_margin(self.lifetime_s or 0.0)

    def secrets(self) -> list[str]:
        """Every value of this login that must never be shown: the tokens, the client secret."""
        found = [
            (self.tokens or {}).get("access_token"),
            (self.tokens or {}).get("refresh_token"),
            (self.client or {}).get("client_secret"),
        ]
        return [v for v in found if isinstance(v, str) and v]


class TokenStore:
    """The login file of one MCP server URL.

    Args:
        server_url: the server's URL (after ``${VAR}`` expansion): the key of the login.
        folder: where the login files are (default: :func:`store_dir` of the process's
            environment).

    Every method is a small synchronous file operation (a few KiB); the async adapter the
    SDK calls is in ``runtime/mcp/_oauth.py``.
    """

    def __init__(self, server_url: str, folder: Path | None = None) -> None:
        self.server_url = server_url
        self.folder = folder if folder is not None else store_dir()
        digest = hashlib.sha256(server_url.encode()).hexdigest()[:32]
        self.path = self.folder / f"{digest}.json"

    def load(self) -> StoredLogin | None:
        """The stored login, or ``None`` when there is none (or the file is not one: a login
        that cannot be read is one to do again, never a reason to stop a run)."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read(MAX_FILE_BYTES + 1)
        except OSError:
            return None
        if len(raw) > MAX_FILE_BYTES:
            return None
        try:
            data = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(data, dict) or data.get("server_url") != self.server_url:
            return None  # another URL's digest collision, or a file not written here
        tokens, client = data.get("tokens"), data.get("client")
        expires_at, lifetime = data.get("expires_at"), data.get("lifetime_s")
        discovery = data.get("discovery")
        return StoredLogin(
            server_url=self.server_url,
            tokens=tokens if isinstance(tokens, dict) else None,
            client=client if isinstance(client, dict) else None,
            expires_at=float(expires_at) if isinstance(expires_at, int | float) else None,
            lifetime_s=float(lifetime) if isinstance(lifetime, int | float) else None,
            discovery=discovery if isinstance(discovery, dict) else None,
        )

    def save_tokens(self, tokens: Mapping[str, Any]) -> StoredLogin:
        """Keep *tokens* (a token response), with their expiry as a wall-clock time."""
        old = self.load() or StoredLogin(server_url=self.server_url)
        expires_in = tokens.get("expires_in")
        lifetime = float(expires_in) if isinstance(expires_in, int | float) else None
        new = attrs.evolve(
            old,
            tokens=dict(tokens),
            expires_at=time.time() + lifetime if lifetime is not None else None,
            lifetime_s=lifetime,
        )
        self._write(new)
        return new

    def save_client(self, client: Mapping[str, Any]) -> StoredLogin:
        """Keep the registered *client*."""
        old = self.load() or StoredLogin(server_url=self.server_url)
        new = attrs.evolve(old, client=dict(client))
        self._write(new)
        return new

    def save(self, login: StoredLogin) -> None:
        """Keep *login* whole (a finished ``mcp login``)."""
        self._write(login)

    def delete(self) -> bool:
        """Forget the login; whether there was one."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    def _write(self, login: StoredLogin) -> None:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        # mkdir's mode is masked by the umask, and an old folder keeps its mode: set it.
        os.chmod(self.folder, 0o700)
        data = {
            "server_url": login.server_url,
            "tokens": login.tokens,
            "client": login.client,
            "expires_at": login.expires_at,
            "lifetime_s": login.lifetime_s,
            "discovery": login.discovery,
        }
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        # Created 0600 from the start (O_EXCL: never through a planted file or link), then
        # renamed over the old one: no moment where the tokens are readable by others. A
        # leftover of a process killed mid-write (same pid, later) is removed first.
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        done = False
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            done = True
        finally:
            if not done:
                with contextlib.suppress(OSError):
                    tmp.unlink()
