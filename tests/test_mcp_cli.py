"""MCP on the command line: mcp list (text, --json, exit codes), --mcp-config, --no-mcp,
warnings as one line, and SIGINT leaving no server process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import psutil
import trio

from runtime import decode_event
from tests.harness import agent_call
from tests.invariants import check_invariants
from tests.mcp_fixtures import http_url, stdio_server, time_server
from tests.test_cli_pty import spawn
from tests.test_cli_run import Lines, child_env, cli, run_cli

__all__ = ["http_url", "spawn"]  # fixtures


def mcp_json(path: Path, servers: dict[str, Any]) -> Path:
    """Write an MCP config; a workspace's own ``.mcp.json`` is the test user's: trusted as
    written (docs/configuration.md, "Trust"; test_trust.py covers an untrusted one)."""
    from runtime.project._trust import TrustStore

    path.write_text(json.dumps({"mcpServers": servers}))
    if path.name == ".mcp.json":
        TrustStore.load().trust(path.parent)
    return path


def scenario(path: Path, *tool_calls: tuple[str, dict[str, Any]]) -> Path:
    turns: list[dict[str, Any]] = [{"tool_calls": [{"name": n, "input": i}]} for n, i in tool_calls]
    path.write_text(json.dumps({"agents": {"main": {"turns": [*turns, {"text": "done"}]}}}))
    return path


async def test_mcp_list_shows_each_server_and_its_tools_and_exits_1_if_one_failed(
    tmp_path: Path,
) -> None:
    mcp_json(
        tmp_path / ".mcp.json", {"time": time_server(), "gone": {"command": "no-such-command-xyz"}}
    )
    proc = await run_cli(cli("mcp", "list"), tmp_path)
    assert proc.returncode == 1
    out = proc.stdout.decode().splitlines()
    assert out == [
        "time  ok  stdio  2 tools",
        "  mcp__time__get_current_time  Get current time in a specific timezone",
        "  mcp__time__convert_time  Convert time between timezones",
        "gone  failed  stdio  command 'no-such-command-xyz' not found",
    ]
    assert proc.stderr == b""


async def test_mcp_list_json_for_scripts_and_exit_0_when_all_started(tmp_path: Path) -> None:
    extra = mcp_json(tmp_path / "more.json", {"t": stdio_server()})
    proc = await run_cli(cli("mcp", "list", "--json", "--mcp-config", str(extra)), tmp_path)
    assert proc.returncode == 0, proc.stderr
    (server,) = json.loads(proc.stdout)["servers"]
    assert (server["name"], server["status"], server["transport"], server["error"]) == (
        "t",
        "ok",
        "stdio",
        None,
    )
    echo = next(t for t in server["tools"] if t["name"] == "mcp__t__echo")
    assert echo == {"name": "mcp__t__echo", "description": "Return the text.", "read_only": True}
    # The tool whose name no model accepts is not listed; the warning is one line.
    assert proc.stderr.decode().splitlines() == [
        "trio-agents: warning: mcp server 't': tool 'bad.name' skipped: 'mcp__t__bad.name' is not "
        "a valid tool name (letters, digits, '_' and '-', at most 64 characters)"
    ]


async def test_a_malformed_mcp_config_is_exit_2_naming_the_file_and_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"mcpServers": {"x": {"command": "srv", "args": "--flag"}}}))
    scen = scenario(tmp_path / "s.json")
    proc = await run_cli(
        cli("run", "go", "--scenario", str(scen), "--no-trace", "--mcp-config", str(bad)), tmp_path
    )
    assert proc.returncode == 2
    assert proc.stderr.decode().splitlines() == [
        f"trio-agents: error: {bad}: mcpServers.x.args: expected a list of strings"
    ]
    broken = tmp_path / ".mcp.json"
    broken.write_text("{not json")
    proc = await run_cli(cli("mcp", "list"), tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.decode().startswith(
        f"trio-agents: error: {Path('.mcp.json')}: not valid JSON: "
    )


async def test_run_uses_the_workspace_servers_and_warns_once_per_failed_server(
    tmp_path: Path,
) -> None:
    mcp_json(
        tmp_path / ".mcp.json", {"time": time_server(), "gone": {"command": "no-such-command-xyz"}}
    )
    scen = scenario(tmp_path / "s.json", ("mcp__time__get_current_time", {"timezone": "UTC"}))
    proc = await run_cli(
        cli("run", "go", "--scenario", str(scen), "--no-trace", "--json"), tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    events = [decode_event(line) for line in proc.stdout.splitlines()]
    check_invariants(events)
    (end,) = [e for e in events if e.type == "tool_finished"]
    assert end.status == "ok"  # type: ignore[attr-defined]
    assert '"timezone": "UTC"' in end.output  # type: ignore[attr-defined]
    err = proc.stderr.decode().splitlines()
    assert err[0] == (
        "trio-agents: warning: mcp server 'gone' did not start: command 'no-such-command-xyz' not found"
    )
    assert len(err) == 2
    assert err[1].startswith("run completed in ")  # the one-line outcome, on stderr with --json


async def test_no_mcp_ignores_every_config(tmp_path: Path) -> None:
    mcp_json(tmp_path / ".mcp.json", {"gone": {"command": "no-such-command-xyz"}})
    extra = mcp_json(tmp_path / "more.json", {"gone2": {"command": "no-such-command-xyz"}})
    scen = scenario(tmp_path / "s.json")
    proc = await run_cli(
        cli(
            "run",
            "go",
            "--scenario",
            str(scen),
            "--no-trace",
            "--no-mcp",
            "--mcp-config",
            str(extra),
        ),
        tmp_path,
    )
    assert proc.returncode == 0
    [outcome] = proc.stderr.decode().splitlines()  # no warning: only the outcome
    assert outcome.startswith("run completed in ")


async def test_sigint_during_an_mcp_call_exits_130_and_leaves_no_server_process(
    tmp_path: Path,
) -> None:
    marker = f"mcp-sigint-marker-{os.getpid()}"
    mcp_json(tmp_path / ".mcp.json", {"t": stdio_server(f"MARKER = {marker!r}")})
    scen = scenario(tmp_path / "s.json", ("mcp__t__block", {}))
    proc = await trio.lowlevel.open_process(
        cli(
            "run",
            "go",
            "--json",
            "--permission-mode",
            "allow-all",
            "--no-trace",
            "--scenario",
            str(scen),
        ),
        cwd=tmp_path,
        env=child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    lines = Lines(proc.stdout)
    try:
        with trio.fail_after(30):
            await lines.until(lambda line: b'"type":"tool_progress"' in line)
            assert _processes_with(marker)
            proc.send_signal(signal.SIGINT)
            await lines.drain()
            code = await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
    assert code == 130
    events = [decode_event(line) for line in lines.seen]
    check_invariants(events)
    (end,) = [e for e in events if e.type == "tool_finished"]
    assert end.status == "cancelled"  # type: ignore[attr-defined]
    assert _processes_with(marker) == []


def _processes_with(text: str) -> list[int]:
    out = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and text in " ".join(
                proc.info["cmdline"] or ()
            ):
                out.append(proc.pid)
        except psutil.Error:
            pass
    return out


def test_ctrl_c_on_one_sub_agent_cancels_its_mcp_call_at_the_server(
    tmp_path: Path, http_url: str, spawn: Any
) -> None:
    from tests.test_cli_pty import finish, read_trace, statuses_by_name

    mcp_json(tmp_path / ".mcp.json", {"h": {"type": "http", "url": http_url}})
    scen = tmp_path / "s.json"
    scen.write_text(
        json.dumps(
            {
                "agents": {
                    "main": {
                        "turns": [
                            {
                                "tool_calls": [
                                    agent_call("long server call", agent="waiter"),
                                    agent_call("slow thinking", agent="thinker"),
                                ]
                            },
                            {"tool_calls": [{"name": "mcp__h__cancellations", "input": {}}]},
                            {"text": "Carried on without it."},
                        ]
                    },
                    "waiter": {
                        "turns": [
                            {"tool_calls": [{"name": "mcp__h__block", "input": {"label": "long"}}]},
                            {"text": "never"},
                        ]
                    },
                    "thinker": {"turns": [{"text": "thought", "delay_s": 4}]},
                }
            }
        )
    )
    trace = tmp_path / "t.jsonl"
    child = spawn(
        "run",
        "go",
        "--permission-mode",
        "allow-all",
        "--trace",
        str(trace),
        "--scenario",
        str(scen),
    )
    child.expect("1/10 blocking long")  # the live tree shows the call's latest progress
    child.sendintr()
    child.expect(r"\[(\d+)\] waiter (tu-[\d.]+) long server call")
    number, tool_use_id = child.match.group(1), child.match.group(2)
    child.expect("cancel> ")
    child.sendline(number)
    child.expect("Carried on without it.")
    assert finish(child) == 0
    events = read_trace(trace)
    check_invariants(events)
    ends = {e.name: e for e in events if e.type == "tool_finished"}  # type: ignore[attr-defined]
    assert ends["mcp__h__block"].status == "cancelled"  # type: ignore[attr-defined]
    assert len(json.loads(ends["mcp__h__cancellations"].output)) >= 1  # type: ignore[attr-defined]
    assert statuses_by_name(events) == {
        "main": ["completed"],
        "waiter": ["cancelled"],
        "thinker": ["completed"],
    }
    assert [(e.target, e.by) for e in events if e.type == "cancel_requested"] == [
        (tool_use_id, "user")
    ]  # type: ignore[attr-defined]


async def test_show_system_prompt_lists_the_mcp_tools_a_run_would_have(tmp_path: Path) -> None:
    # The servers start (as a run starts them) and close again; a type with a tool list gets
    # the MCP tools it names or matches, as in a run; a server that fails is one warning line.
    mcp_json(tmp_path / ".mcp.json", {"time": time_server(),
                                     "gone": {"command": "no-such-command-xyz"}})
    agents = tmp_path / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "clock.md").write_text(
        "---\nname: clock\ndescription: Tells the time\ntools: read, mcp__time__get_*\n---\n"
        "You tell the time.\n")
    proc = await run_cli(cli("run", "--show-system-prompt"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    [tools] = [line for line in proc.stdout.decode().splitlines() if line.startswith("Tools: ")]
    assert tools.endswith(", mcp__time__get_current_time, mcp__time__convert_time")
    assert proc.stderr.decode().splitlines() == [
        "trio-agents: warning: mcp server 'gone' did not start: command 'no-such-command-xyz' "
        "not found"]
    proc = await run_cli(cli("run", "--show-system-prompt", "clock"), tmp_path)
    assert "Tools: read, mcp__time__get_current_time\n" in proc.stdout.decode()
    proc = await run_cli(cli("run", "--show-system-prompt", "--no-mcp"), tmp_path)
    assert "mcp__" not in proc.stdout.decode()
    assert proc.stderr == b""


def test_mcp_list_with_no_servers_answers_at_once_without_the_sdk_or_an_event_loop(
    tmp_path: Path,
) -> None:
    """Nothing to start: no MCP SDK, no trio, no structlog loaded (most of a second)."""
    import sys

    probe = (
        "import sys\n"
        "from runtime.cli._main import main\n"
        "code = main(['mcp', 'list', *sys.argv[1:]])\n"
        "print(code, sorted(m for m in ('mcp', 'trio', 'structlog') if m in sys.modules))\n"
    )
    for extra, shown in (([], "no MCP servers configured"), (["--json"], '{"servers": []}')):
        proc = subprocess.run([sys.executable, "-c", probe, *extra], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60, check=True)
        out = proc.stdout.splitlines()
        assert out[0].startswith(shown)
        assert out[-1] == "0 []"
        assert proc.stderr == ""
