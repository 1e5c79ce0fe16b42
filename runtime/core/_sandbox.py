"""The bash sandbox (``--sandbox``): every ``bash`` call runs under bubblewrap (``bwrap``).

Without it, ``bash`` runs as the user, with the user's rights: it can read and write anything the
user can, reach the network, and read this process's memory if it runs as root. The permission
rules (``bash(rm *)``) only match the command's text, which a model can always spell another way:
they are a convenience, not a boundary. The sandbox is the boundary:

* the workspace is read-write, the rest of the file system read-only;
* ``/tmp`` is a private, empty tmpfs (so is ``/var/tmp``);
* the user's secrets folders and files (``~/.ssh``, ``~/.aws``, ``~/.config/gcloud``, ``~/.gnupg``,
  ``~/.netrc``, … see :data:`HIDDEN`) are hidden: an empty folder, an empty file;
* the runtime's own files in the workspace (``.trio-agents/``: traces, sessions, settings) are
  read-only;
* no network (a new network namespace with only loopback) unless ``network=True``
  (``--sandbox-network``);
* its own PID namespace (this process and every other one are invisible: no
  ``/proc/<pid>/environ``, no ``/proc/<pid>/mem``, no signals), IPC namespace and a fresh ``/proc``;
* no capabilities (``--cap-drop ALL``), also when the runtime runs as root; no way back out
  (``--die-with-parent``: the sandbox goes when its ``bwrap`` does, and the tool stops that).

What it does not do: filter system calls (a unix socket reachable in the file system, such as
a database's, can still be connected to), limit CPU or memory, or hide files readable by the
user outside the hidden list (they are readable, not writable). The flags follow those of
Claude Code's sandbox runtime (anthropic-experimental/sandbox-runtime).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import attrs

from ._errors import ConfigError

__all__ = ["HIDDEN", "Sandbox"]

HIDDEN: tuple[str, ...] = (
    "~/.ssh",
    "~/.aws",
    "~/.azure",
    "~/.config/gcloud",
    "~/.config/gh",
    "~/.config/hub",
    "~/.config/trio-agents",
    "~/.docker",
    "~/.gnupg",
    "~/.kube",
    "~/.password-store",
    "~/.local/share/keyrings",
    "~/.terraform.d",
    "~/.cargo/credentials",
    "~/.cargo/credentials.toml",
    "~/.git-credentials",
    "~/.netrc",
    "~/.npmrc",
    "~/.pypirc",
    "~/.vault-token",
)
"""Paths hidden from sandboxed commands (``~`` is the user's home); more with ``hide``."""

# Variables that point a command at a secret outside the file system rules (an agent socket).
_UNSET = ("SSH_AUTH_SOCK", "GPG_AGENT_INFO")


@attrs.frozen(kw_only=True)
class Sandbox:
    """How ``bash`` calls are confined.

    Attributes:
        network: allow the network (default: loopback only).
        hide: more paths to hide, besides :data:`HIDDEN` (``~`` allowed).
        read_only: paths inside the workspace kept read-only (the runtime's own files).
        bwrap: the bubblewrap program (a name looked up on ``PATH``, or a path).
    """

    network: bool = False
    hide: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()
    bwrap: str = "bwrap"

    def program(self) -> str:
        """The bwrap executable.

        Raises:
            ConfigError: it is not installed.
        """
        found = shutil.which(self.bwrap)
        if found is None:
            raise ConfigError(
                f"--sandbox needs bubblewrap ({self.bwrap!r} is not on PATH): install it "
                "(Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap), "
                "or run without --sandbox"
            )
        return found

    def command(
        self, argv: Sequence[str], *, workspace: Path, env: Mapping[str, str] | None = None
    ) -> list[str]:
        """*argv* wrapped to run inside the sandbox, in *workspace*.

        Args:
            env: the command's environment (for ``HOME``; default this process's).

        Raises:
            ConfigError: bwrap is not installed.
        """
        env = os.environ if env is None else env
        home = Path(env.get("HOME") or os.path.expanduser("~"))
        ws = str(workspace)
        args = [self.program(), "--die-with-parent", "--unshare-pid", "--unshare-ipc"]
        if not self.network:
            args.append("--unshare-net")
        args += ["--cap-drop", "ALL", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        # /tmp before the workspace: a workspace under /tmp is bound over the fresh tmpfs.
        args += ["--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]
        # A read-only path that holds the workspace (a trace in a parent folder) is bound
        # before it, so the workspace bound after stays writable; the rest go on top of it.
        holding, inside = _split_holding(_existing(self.read_only, home), os.path.realpath(ws))
        for path in holding:
            args += ["--ro-bind", path, path]
        args += ["--bind", ws, ws]
        for path in inside:
            args += ["--ro-bind", path, path]
        for path in _existing((*HIDDEN, *self.hide), home):
            if os.path.isdir(path):
                args += ["--tmpfs", path]
            else:
                args += ["--ro-bind", "/dev/null", path]
        for name in _UNSET:
            args += ["--unsetenv", name]
        args += ["--chdir", ws, "--", *argv]
        return args

    def check(self, workspace: Path) -> None:
        """Run ``true`` in the sandbox once, so a machine where it cannot work is told at start.

        A blocking call of a few milliseconds; call it in a worker thread from async code.

        Raises:
            ConfigError: bwrap is missing, or cannot set up its namespaces (user namespaces
                off, a container that forbids them); the message quotes bwrap's own.
        """
        try:
            done = subprocess.run(
                self.command(["true"], workspace=workspace),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ConfigError(f"--sandbox: cannot run bubblewrap: {exc}") from exc
        if done.returncode != 0:
            lines = done.stderr.decode(errors="replace").strip().splitlines()
            detail = lines[-1] if lines else f"exit code {done.returncode}"
            raise ConfigError(
                f"--sandbox: bubblewrap cannot set up its sandbox here ({detail}); user "
                "namespaces may be off (sysctl kernel.unprivileged_userns_clone, "
                "user.max_user_namespaces) or forbidden in this container"
            )


def _split_holding(paths: list[str], ws: str) -> tuple[list[str], list[str]]:
    """*paths* split into those that are *ws* or hold it, and the others."""
    holding = [p for p in paths if ws == p or ws.startswith(p.rstrip("/") + "/")]
    return holding, [p for p in paths if p not in holding]


def _existing(paths: Iterable[str], home: Path) -> list[str]:
    """Each of *paths* with ``~`` expanded to *home* and links resolved, if it exists."""
    out: list[str] = []
    for raw in paths:
        path = str(home / raw[2:]) if raw == "~" or raw.startswith("~/") else raw
        if os.path.lexists(path):
            real = os.path.realpath(path)
            if os.path.exists(real) and real not in out:
                out.append(real)
    return out
