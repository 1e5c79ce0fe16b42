"""Which workspaces the user trusts (docs/configuration.md, "Trust").

A workspace's own files (``.trio-agents/settings.toml``, ``.claude/settings.json``,
``.claude/settings.local.json``, ``.mcp.json``) are the repository's words, not the user's: until
the user trusts the workspace they may tighten what the user set and loosen nothing. What the
user trusts is the workspace's real path together with a digest of those files, kept in the
user's config folder (``trusted.json``, 0600): a file that changed afterwards makes the
workspace untrusted again, and the runtime says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Literal

import attrs

from ._files import ProjectFileError, read_capped, user_config_dir

__all__ = [
    "TRUST_FILES",
    "TrustEntry",
    "TrustStore",
    "TrustVerdict",
    "workspace_digest",
]

TRUST_FILES = (
    Path(".trio-agents") / "settings.toml",
    Path(".claude") / "settings.json",
    Path(".claude") / "settings.local.json",
    Path(".mcp.json"),
)
"""The workspace files whose loosening asks trust covers (the same paths the loaders read)."""

STORE_NAME = "trusted.json"
_MAX_FILE_BYTES = 1 << 20
_MAX_STORE_BYTES = 4 << 20
_VERSION = 1


def workspace_digest(workspace: Path) -> str:
    """A digest of the workspace's :data:`TRUST_FILES` (each one's presence and bytes).

    A file that cannot be read (a FIFO, a link out of the workspace, too big) counts by what
    stops it, so planting one changes the digest as editing would.
    """
    h = hashlib.sha256()
    for rel in TRUST_FILES:
        path = workspace / rel
        h.update(str(rel).encode() + b"\0")
        if not os.path.lexists(path):
            h.update(b"absent\0")
            continue
        try:
            data, size = read_capped(path, _MAX_FILE_BYTES, root=workspace)
        except ProjectFileError as exc:
            h.update(b"unreadable\0" + str(exc).encode() + b"\0")
            continue
        h.update(f"{size}\0".encode() + data + b"\0")
    return h.hexdigest()


@attrs.frozen(kw_only=True)
class TrustEntry:
    """One trusted workspace: its real path, the digest of its files then, and when."""

    path: str
    digest: str
    trusted_at: float


@attrs.frozen(kw_only=True)
class TrustVerdict:
    """Whether a workspace is trusted now.

    Attributes:
        state: ``trusted``; ``untrusted`` (never trusted, or revoked); ``changed`` (trusted,
            but a file has changed since).
        path: the workspace's real path (what the store keys on).
    """

    state: Literal["trusted", "untrusted", "changed"]
    path: str

    @property
    def trusted(self) -> bool:
        return self.state == "trusted"


@attrs.define
class TrustStore:
    """The user's trusted workspaces, in ``trusted.json`` of their config folder."""

    file: Path
    entries: dict[str, TrustEntry] = attrs.Factory(dict)

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, *, file: Path | None = None) -> TrustStore:
        """Read the store (a missing one is empty).

        Raises:
            ProjectFileError: the file is not the store's JSON (one line naming it; never
                overwritten, so nothing the user trusted is lost by a bad edit).
        """
        file = file or user_config_dir(env) / STORE_NAME
        if not os.path.lexists(file):
            return cls(file)
        data, size = read_capped(file, _MAX_STORE_BYTES)
        if size > _MAX_STORE_BYTES:
            raise ProjectFileError(f"{file}: bigger than {_MAX_STORE_BYTES} bytes; refused")
        try:
            raw = json.loads(data)
            if raw.get("version") != _VERSION:
                raise ValueError(f"version {raw.get('version')!r}, expected {_VERSION}")
            entries = {
                path: TrustEntry(
                    path=path, digest=str(e["digest"]), trusted_at=float(e["trusted_at"])
                )
                for path, e in raw["workspaces"].items()
            }
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ProjectFileError(f"{file}: not a trust store ({exc}); fix or remove it") from None
        return cls(file, entries)

    def verdict(self, workspace: Path) -> TrustVerdict:
        """Whether *workspace* is trusted, with its files as they are now."""
        real = os.path.realpath(workspace)
        entry = self.entries.get(real)
        if entry is None:
            return TrustVerdict(state="untrusted", path=real)
        same = entry.digest == workspace_digest(Path(real))
        return TrustVerdict(state="trusted" if same else "changed", path=real)

    def trust(self, workspace: Path) -> TrustEntry:
        """Trust *workspace* with its files as they are now, and save the store."""
        real = os.path.realpath(workspace)
        entry = TrustEntry(path=real, digest=workspace_digest(Path(real)), trusted_at=time.time())
        self.entries[real] = entry
        self.save()
        return entry

    def revoke(self, workspace: Path) -> bool:
        """Stop trusting *workspace* (by its real path, or the path as stored); save. Whether
        it was trusted."""
        keys = {os.path.realpath(workspace), str(workspace)}
        removed = [k for k in keys if self.entries.pop(k, None) is not None]
        if removed:
            self.save()
        return bool(removed)

    def save(self) -> None:
        """Write the store whole (a temporary file, fsynced, renamed over it), 0600."""
        self.file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        body = json.dumps(
            {
                "version": _VERSION,
                "workspaces": {
                    p: {"digest": e.digest, "trusted_at": e.trusted_at}
                    for p, e in sorted(self.entries.items())
                },
            },
            indent=1,
        ).encode()
        fd, tmp = tempfile.mkstemp(dir=self.file.parent, prefix=".trusted-", suffix=".tmp")
        done = False
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), 0o600)
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.file)
            done = True
        finally:
            if not done:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)

    def __iter__(self) -> Iterator[TrustEntry]:
        return iter(sorted(self.entries.values(), key=lambda e: e.path))
