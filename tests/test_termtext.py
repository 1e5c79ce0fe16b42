"""The terminal-text sanitiser (runtime/core/_termtext.py) and every command that prints the
words of a model, a tool, a trace or a server through it: no escape sequence of theirs reaches
the terminal (docs/reliability.md, "The trust boundary").

The hostile words are real: a scripted model whose text carries OSC 52 (clipboard), OSC 0
(title) and ``ESC[2J`` split across two stream deltas, a sub-agent whose description carries
one, a ``bash`` call printing one, an MCP server (the SDK's) whose tool description carries one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

OSC52 = "\x1b]52;c;cHduZWQ=\x07"
OSC0 = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"
# What must never come out: the three sequences, whole, and the C1 CSI.
FORBIDDEN = ("\x1b]52", "\x1b]0;pwned", "\x1b[2J", "\x9b")


def test_control_characters_are_shown_and_layout_is_kept() -> None:
    from runtime.core import visible

    assert visible(f"a{OSC52}b") == "a^[]52;c;cHduZWQ=^Gb"
    assert visible("line\n\tindented\r") == "line\n\tindented^M"
    assert visible("one\nline", layout=False) == "one^Jline"
    assert visible("\x7f\x9b2J\u202eevil") == "^?\\x9b2J\\u202eevil"
    plain = "plain text ✓ ünïcödé"
    assert visible(plain) is plain


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="160")
    return subprocess.run(
        [sys.executable, "-m", "runtime", *args], cwd=cwd, env=env, capture_output=True,
        text=True, stdin=subprocess.DEVNULL, check=False, timeout=60,
    )


def assert_clean(text: str) -> None:
    for bad in FORBIDDEN:
        assert bad not in text, (bad, text)


def hostile_scenario(ws: Path) -> Path:
    # Word-sized deltas: "\x1b " ends one delta and "]52;…" starts the next, a sequence split
    # across two deltas.
    answer = f"Done. \x1b ]52;c;cHduZWQ=\x07 and {OSC0} then {CLEAR} end"
    scenario = {
        "agents": {
            "main": {"turns": [
                {"text": f"Looking {OSC0}", "tool_calls": [
                    {"name": "agent", "input": {"description": f"sub {OSC52}",
                                                "prompt": "go", "agent": "helper"}},
                    {"name": "bash", "input": {
                        "command": "printf '\\033]52;c;cHduZWQ=\\007\\033[2J'; exit 3"}}]},
                {"text": answer}]},
            "helper": {"tools": [], "turns": [{"text": f"helped {CLEAR}{OSC52}"}]},
        }
    }
    path = ws / "hostile.json"
    path.write_text(json.dumps(scenario))
    return path


@pytest.fixture
def hostile_trace(workspace: Path) -> Path:
    trace = workspace / "t.jsonl"
    proc = cli(workspace, "run", "go", "--scenario", str(hostile_scenario(workspace)),
               "--permission-mode", "allow-all", "--trace", str(trace))
    assert proc.returncode == 0, proc.stderr
    return trace


def test_the_plain_lines_of_a_run_show_hostile_text_visibly(workspace: Path) -> None:
    proc = cli(workspace, "run", "go", "--scenario", str(hostile_scenario(workspace)),
               "--permission-mode", "allow-all", "--trace", str(workspace / "p.jsonl"))
    assert proc.returncode == 0, proc.stderr
    assert "Done." in proc.stdout
    assert "sub ^[]52;c;cHduZWQ=^G" in proc.stdout
    assert_clean(proc.stdout + proc.stderr)


def test_trace_commands_show_a_hostile_trace_visibly(workspace: Path, hostile_trace: Path) -> None:
    raw = hostile_trace.read_text()
    assert "\\u001b]52" in raw  # the trace keeps what happened, escaped as JSON does
    for args in (
        ["trace", "show", str(hostile_trace)],
        ["trace", "show", "--timeline", str(hostile_trace)],
        ["trace", "stats", str(hostile_trace)],
        ["trace", "tail", str(hostile_trace)],
        ["trace", "export", str(hostile_trace), "--format", "mermaid"],
    ):
        proc = cli(workspace, *args)
        assert proc.returncode == 0, (args, proc.stderr)
        assert_clean(proc.stdout + proc.stderr)
    shown = cli(workspace, "trace", "show", str(hostile_trace)).stdout
    assert "sub ^[]52;c;cHduZWQ=^G" in shown


def test_trace_show_on_a_terminal_keeps_its_own_colours_only(
    workspace: Path, hostile_trace: Path
) -> None:
    child = pexpect.spawn(
        sys.executable, ["-m", "runtime", "trace", "show", str(hostile_trace)],
        cwd=str(workspace), env=dict(os.environ, TERM="xterm-256color"),
        dimensions=(50, 160), encoding="utf-8", codec_errors="replace", timeout=20,
    )
    out = child.read()
    child.close()
    assert "\x1b[" in out  # rich's own styling is there
    assert_clean(out)
    assert "^[]52" in out


def test_the_live_view_shows_streamed_and_final_text_visibly(workspace: Path) -> None:
    scenario = hostile_scenario(workspace)
    child = pexpect.spawn(
        sys.executable,
        ["-m", "runtime", "run", "go", "--scenario", str(scenario), "--permission-mode",
         "allow-all", "--trace", str(workspace / "live.jsonl")],
        cwd=str(workspace), env=dict(os.environ, TERM="xterm-256color"),
        dimensions=(50, 160), encoding="utf-8", codec_errors="replace", timeout=30,
    )
    out = child.read()
    child.close()
    assert child.exitstatus == 0, out
    assert "Done." in out
    assert_clean(out)


HOSTILE_SERVER = '''
from mcp.server.mcpserver import MCPServer
app = MCPServer("hostile")

@app.tool(description="Reads files \\x1b]52;c;cHduZWQ=\\x07\\x1b]0;pwned\\x07\\x1b[2J quietly")
async def read_all(path: str) -> str:
    return path

app.run("stdio")
'''


def test_mcp_list_shows_a_servers_hostile_description_visibly(workspace: Path) -> None:
    server = workspace / "server.py"
    server.write_text(HOSTILE_SERVER)
    (workspace / ".mcp.json").write_text(json.dumps(
        {"mcpServers": {"hostile": {"command": sys.executable, "args": [str(server)]}}}))
    from runtime.project import TrustStore

    TrustStore.load().trust(workspace)  # the user chose to list this server
    proc = cli(workspace, "mcp", "list")
    assert proc.returncode == 0, proc.stderr
    assert "mcp__hostile__read_all" in proc.stdout
    assert "^[]52" in proc.stdout
    assert_clean(proc.stdout + proc.stderr)


def test_a_repositorys_own_files_reach_the_terminal_visibly(workspace: Path) -> None:
    # Instructions, an agent's description (YAML's own "\e" escape) and a planted file name.
    (workspace / "AGENTS.md").write_text(f"Use tabs {OSC52} always.")
    agents = workspace / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "rev.md").write_text(
        '---\nname: rev\ndescription: "Reviews \\e]0;pwned\\a diffs"\n---\nYou review.\n')
    (agents / f"x{CLEAR}y.md").write_text("no front matter")
    for args in (["run", "--show-system-prompt"], ["agents"], ["config"]):
        proc = cli(workspace, *args)
        assert proc.returncode == 0, (args, proc.stderr)
        assert_clean(proc.stdout + proc.stderr)
    shown = cli(workspace, "agents")
    assert "Reviews ^[]0;pwned^G diffs" in shown.stdout
    assert "x^[[2Jy.md" in shown.stderr
    assert "Use tabs ^[]52" in cli(workspace, "run", "--show-system-prompt").stdout


def test_the_ctrl_c_picker_lists_a_hostile_description_visibly(workspace: Path) -> None:
    scenario = workspace / "slow.json"
    scenario.write_text(json.dumps({"agents": {
        "main": {"turns": [
            {"tool_calls": [{"name": "agent", "input": {
                "description": f"slow {OSC0}{CLEAR}", "prompt": "go", "agent": "slow"}}]},
            {"text": "done"}]},
        "slow": {"tools": [], "turns": [{"delay_s": 30, "text": "late"}]}}}))
    child = pexpect.spawn(
        sys.executable,
        ["-m", "runtime", "run", "go", "--scenario", str(scenario), "--no-trace"],
        cwd=str(workspace), env=dict(os.environ, TERM="xterm-256color"),
        dimensions=(50, 160), encoding="utf-8", codec_errors="replace", timeout=30,
    )
    child.expect("slow")  # the sub-agent runs: the picker has something to list
    child.sendintr()
    child.expect("cancel> ")
    listing = child.before
    child.sendline("q")
    child.expect(pexpect.EOF)
    child.close()
    assert "[1] slow" in listing
    assert "^[]0;pwned^G" in listing
    assert_clean(listing)
