"""The bash sandbox (``--sandbox``): real bubblewrap, real commands trying to get out.

Each test runs ``bash`` through the tool with a :class:`Sandbox` and checks from the outside what
the command could see or change. They skip, saying why, where bwrap is missing or cannot create
its namespaces (``.ci/run`` installs bubblewrap first).
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import trio
from _toolkit import call, make_ctx

from runtime import open_runtime
from runtime.core import ConfigError, Sandbox, ToolContext, ToolError
from tools._bash import BashTool

ROOT = Path(__file__).resolve().parents[1]


def _why_no_bwrap() -> str | None:
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
    try:
        Sandbox().check(Path.cwd())
    except ConfigError as exc:
        return str(exc)
    return None


_NO_BWRAP = _why_no_bwrap()
needs_bwrap = pytest.mark.skipif(_NO_BWRAP is not None, reason=str(_NO_BWRAP))


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder outside the workspace and outside /tmp and /var/tmp (which the sandbox
    replaces): in the home folder, else in the checkout (which may itself lie under /tmp)."""
    base = Path.home()
    private = ("/tmp", "/var/tmp")
    if not os.access(base, os.W_OK) or any(base.resolve().is_relative_to(p) for p in private):
        base = ROOT
    folder = Path(tempfile.mkdtemp(prefix=".sandbox-test-", dir=base))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def sandboxed(
    workspace: Path, *, env: dict[str, str] | None = None, **options: object
) -> ToolContext:
    ctx = make_ctx(workspace, env=env)
    return attrs.evolve(ctx, sandbox=Sandbox(**options))  # type: ignore[arg-type]


async def sh(command: str, ctx: ToolContext) -> str:
    return await call(BashTool(), {"command": command}, ctx)


@needs_bwrap
async def test_the_workspace_is_writable_and_the_rest_read_only(
    workspace: Path, outside: Path
) -> None:
    (outside / "precious").write_text("keep")
    out = await sh(
        f"echo new > made.txt && echo changed > {outside}/precious; "
        f"touch {outside}/planted; echo rc=$?",
        sandboxed(workspace),
    )
    assert (workspace / "made.txt").read_text() == "new\n"
    assert "Read-only file system" in out
    assert (outside / "precious").read_text() == "keep"
    assert not (outside / "planted").exists()


@needs_bwrap
async def test_tmp_is_private(workspace: Path, tmp_path: Path) -> None:
    host_file = tmp_path / "host-only.txt"
    host_file.write_text("x")
    out = await sh(
        f"ls {host_file} 2>&1; echo inside > /tmp/from-sandbox.txt; ls /tmp", sandboxed(workspace)
    )
    assert "No such file or directory" in out
    assert not await trio.Path("/tmp/from-sandbox.txt").exists()


@needs_bwrap
async def test_secrets_folders_are_hidden(workspace: Path, outside: Path) -> None:
    home = outside
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("aws_secret_access_key=abc")
    (home / ".netrc").write_text("machine x password hunter2")
    (home / "notes.txt").write_text("readable")
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "SSH_AUTH_SOCK": "/run/agent.sock"}
    out = await sh(
        "ls -A ~/.ssh ~/.aws; cat ~/.netrc; cat ~/notes.txt; echo; echo sock=$SSH_AUTH_SOCK.",
        sandboxed(workspace, env=env, hide=("~/notes.txt",)),
    )
    assert "PRIVATE KEY" not in out
    assert "id_ed25519" not in out
    assert "credentials" not in out
    assert "hunter2" not in out
    assert "readable" not in out  # hidden through the hide option
    assert "sock=." in out


@needs_bwrap
async def test_the_runtimes_own_files_are_read_only(workspace: Path) -> None:
    traces = workspace / ".trio-agents" / "traces"
    traces.mkdir(parents=True)
    (traces / "run.jsonl").write_text("{}\n")
    ctx = sandboxed(workspace, read_only=(str(workspace / ".trio-agents"),))
    out = await sh("echo forged > .trio-agents/traces/run.jsonl; echo ok > fine.txt", ctx)
    assert "Read-only file system" in out
    assert (traces / "run.jsonl").read_text() == "{}\n"
    assert (workspace / "fine.txt").exists()


@needs_bwrap
@pytest.mark.parametrize("network", [False, True])
async def test_no_network_unless_allowed(workspace: Path, network: bool) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        out = await sh(
            f"(echo hi > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo connected || echo refused",
            sandboxed(workspace, network=network),
        )
    finally:
        listener.close()
    assert ("connected" if network else "refused") in out


@needs_bwrap
async def test_the_runtime_process_is_out_of_sight(workspace: Path) -> None:
    # Its own PID namespace: this process (and its environ, its memory) does not exist there.
    me = os.getpid()
    out = await sh(
        f"test -e /proc/{me} && echo visible; kill -0 {me} 2>&1; "
        "echo procs=$(ls /proc | grep -c '^[0-9]')",
        sandboxed(workspace),
    )
    assert "visible" not in out
    assert "No such process" in out
    procs = int(out.split("procs=")[1].split()[0])
    assert procs < 10, out


@needs_bwrap
async def test_no_capabilities_even_as_root(workspace: Path) -> None:
    out = await sh(
        "grep CapEff /proc/self/status; mount -o remount,rw / 2>&1; echo end", sandboxed(workspace)
    )
    assert "CapEff:\t0000000000000000" in out


@needs_bwrap
async def test_a_timeout_stops_everything_in_the_sandbox(workspace: Path) -> None:
    marker = f"sleep 3{os.getpid() % 100}7"
    ctx = sandboxed(workspace)
    with trio.fail_after(20):
        with pytest.raises(ToolError, match="timed out"):
            await call(
                BashTool(kill_grace_s=0.5),
                {"command": f"setsid {marker} & {marker}", "timeout_s": 0.5},
                ctx,
            )
    left = await trio.run_process(["pgrep", "-f", marker], capture_stdout=True, check=False)
    assert left.stdout == b"", left.stdout


def test_a_missing_bwrap_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"needs bubblewrap .* apt-get install bubblewrap"):
        Sandbox(bwrap="no-such-bwrap-here").check(tmp_path)


def test_namespaces_that_cannot_be_made_are_one_clear_error(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(
        ConfigError, match=r"No permissions to creating new namespace.*user namespaces"
    ):
        Sandbox(bwrap=str(fake)).check(tmp_path)


async def test_open_runtime_refuses_a_sandbox_it_cannot_make(workspace: Path) -> None:
    with pytest.raises(ConfigError, match="needs bubblewrap"):
        async with open_runtime(
            scenario={"agents": {"main": {"turns": [{"text": "hi"}]}}},
            workspace=workspace,
            trace=False,
            sandbox=Sandbox(bwrap="no-such-bwrap-here"),
        ):
            pass


def test_the_cli_without_bwrap_exits_2_with_one_line(tmp_path: Path) -> None:
    scenario = tmp_path / "s.json"
    scenario.write_text('{"agents": {"main": {"turns": [{"text": "hi"}]}}}')
    env = {**os.environ, "PATH": str(tmp_path)}  # no bwrap on it
    proc = subprocess.run(
        [sys.executable, "-m", "runtime", "run", "go", "--scenario", str(scenario), "--sandbox"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert "needs bubblewrap" in lines[0]


@needs_bwrap
def test_a_real_run_with_sandbox(tmp_path: Path) -> None:
    calls = [
        {"name": "bash", "input": {"command": "echo hi > made.txt; touch /etc/trio-x 2>&1"}},
    ]
    scenario = tmp_path / "s.json"
    import json

    scenario.write_text(
        json.dumps({"agents": {"main": {"turns": [{"tool_calls": calls}, {"text": "ok"}]}}})
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "runtime",
            "run",
            "go",
            "--scenario",
            str(scenario),
            "--sandbox",
            "--permission-mode",
            "allow-all",
            "--json",
            "--no-trace",
        ],
        cwd=tmp_path,
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "made.txt").read_text() == "hi\n"
    assert not Path("/etc/trio-x").exists()
    assert b"Read-only file system" in proc.stdout
    assert b'"sandbox":{"network":false}' in proc.stdout
