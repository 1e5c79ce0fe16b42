"""Today's command lines and settings files, through the code of the one settings table: what
users see stays as it was (docs/configuration.md#one-table-for-every-setting).

``tests/compat/settings_before_schema.json`` was written by the command line as it was before
the table (``python -m tests.test_cli_compat OUT`` with that tree first on ``PYTHONPATH``): the
``run_started.config`` of a run given every option as a flag and of a run under settings files,
``trio-agents config`` (text and ``--json``) for those files with and without flags, and the
errors of bad files. The README's and docs/cli.md's offline examples run as printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "tests" / "scenarios"
EXPECTED = REPO / "tests" / "compat" / "settings_before_schema.json"

# Every key of today's settings files, in the user's file and the workspace's.
WORKSPACE_SETTINGS = """\
provider = "anthropic"
model = "claude-sonnet-4-5"

[permissions]
mode = "auto-edit"
allow = ["bash(git status*)", "bash(make test)"]
deny = ["bash(rm *)", "write(.env)"]
allow_env = ["GH_TOKEN"]
timeout_s = 12

[limits]
max_turns = 30
max_depth = 3
max_parallel = 5
max_agents = 50
max_tool_output_chars = 1000
context_window = 7000
compact_threshold = "60%"

[mcp]
config = ["more.json"]
enabled = false

[sandbox]
enabled = false
network = false

[trace]
enabled = false
dir = "traces"

[view]
fps = 4
"""
USER_SETTINGS = 'model = "user-model"\n[permissions]\nallow = ["read"]\n[limits]\nmax_turns = 7\n'
EVERY_FLAG = [
    "--max-turns", "3", "--max-depth", "2", "--max-parallel", "4",
    "--permission-mode", "allow-all", "--allow", "bash(git status*)", "--deny", "bash(rm *)",
    "--allow-env", "GH_TOKEN", "--permission-timeout", "5", "--no-mcp", "--fps", "5",
    "--context-window", "9000", "--compact-threshold", "70",
]  # fmt: skip
BAD_FILES = ["[limits]\nmax_dept = 3\n", 'provider = "x"\n']


class Cli:
    """``python -m runtime`` in a fresh workspace with its own user config folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ws = root / "ws"
        self.ws.mkdir()
        self.user = root / "cfg" / "trio-agents"
        self.user.mkdir(parents=True)
        self.env = {**os.environ, "XDG_CONFIG_HOME": str(self.user.parent), "HOME": str(root),
                    "COLUMNS": "100"}
        self.env.pop("OPENAI_API_KEY", None)

    def __call__(self, *args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
        proc = subprocess.run(
            [sys.executable, "-m", "runtime", *args], cwd=self.ws, env=self.env, input=stdin,
            capture_output=True, timeout=120, check=False,
        )  # fmt: skip
        return proc.returncode, proc.stdout.decode(), proc.stderr.decode()

    def shown(self, text: str) -> str:
        return text.replace(str(self.root), "TMP").replace(str(REPO), "REPO")


def _started(cli: Cli, stdout: str) -> Any:
    config = json.loads(stdout.splitlines()[0])["config"]
    assert config.pop("workspace") == str(cli.ws.resolve())
    config.pop("trace", None)  # added since the recording (docs/events.md, run_started)
    return json.loads(cli.shown(json.dumps(config)))


# Settings added after the recording (each documented in docs/configuration.md).
_ADDED_SINCE = ("mcp.project_servers", "limits.max_usd", "prices", "rate_limits")


def observe(root: Path) -> dict[str, Any]:
    """What the command line does with today's options and files (see the module docstring)."""
    cli = Cli(root)
    out: dict[str, Any] = {}
    scenario = str(SCENARIOS / "simple.json")
    code, stdout, _ = cli("run", "go", "--scenario", scenario, *EVERY_FLAG,
                          "--trace", str(root / "t.jsonl"), "--json")
    out["run with every flag"] = [code, _started(cli, stdout)]
    (cli.ws / ".trio-agents").mkdir()
    (cli.ws / ".trio-agents" / "settings.toml").write_text(WORKSPACE_SETTINGS)
    (cli.user / "settings.toml").write_text(USER_SETTINGS)
    # Recorded when a workspace's file always applied: the user trusts it (docs/configuration.md,
    # "Trust"; tests/test_trust.py covers the untrusted case).
    from runtime.project._trust import TrustStore

    TrustStore.load(cli.env).trust(cli.ws)
    code, stdout, _ = cli("run", "go", "--scenario", scenario, "--json")
    out["run under the files"] = [code, _started(cli, stdout)]
    for name, flags in [("config", []), ("config with flags", [
            "--max-turns", "9", "--allow", "glob", "--no-mcp", "--sandbox-network"])]:
        code, stdout, stderr = cli("config", "--json", *flags)
        listed = json.loads(cli.shown(stdout))
        for key in _ADDED_SINCE:
            listed.pop(key, None)
        out[name] = [code, listed, stderr]
    code, stdout, stderr = cli("config")
    text = "".join(line for line in cli.shown(stdout).splitlines(keepends=True)
                   if line.split(" ", 1)[0] not in _ADDED_SINCE)
    out["config as text"] = [code, text, stderr]
    for bad in BAD_FILES:
        (cli.ws / ".trio-agents" / "settings.toml").write_text(bad)
        code, _, stderr = cli("run", "x", "--scenario", scenario)
        out[f"bad file {bad!r}"] = [code, cli.shown(stderr)]
    return out


def test_todays_options_and_settings_files_give_what_they_gave(tmp_path: Path) -> None:
    expected = json.loads(EXPECTED.read_text())
    got = observe(tmp_path)
    assert got.keys() == expected.keys()
    for key in expected:
        assert got[key] == expected[key], key


def test_a_table_given_a_value_names_what_it_got_in_one_line(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    (cli.ws / ".trio-agents").mkdir()
    for text, got in [("limits = 3\n", "got an integer, 3"),
                      ('sandbox = "on"\n', 'got a string, "on"'),
                      ("permissions = [1]\n", "got an array, [1]")]:
        (cli.ws / ".trio-agents" / "settings.toml").write_text(text)
        code, stdout, stderr = cli("config")
        assert (code, stdout) == (2, "")
        line = stderr.strip()
        assert "\n" not in line
        assert "did you mean" not in line
        section = text.split(" ", 1)[0]
        assert f"settings.toml:1: {section}: a table of settings, not a value: write [{section}]" \
            in line
        assert line.endswith(got)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    cli = Cli(tmp_path)
    (cli.ws / "s.json").write_text(json.dumps({"agents": {"main": {"turns": [
        {"text": "Looking.", "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]},
        {"text": "Hello."}, {"text": "Bye."}]}}}))
    return cli


def test_the_readme_s_offline_examples_run_as_printed(cli: Cli) -> None:
    # trio-agents run "…" --scenario my-scenario.json --json > events.jsonl
    code, stdout, _ = cli("run", "…", "--scenario", "s.json", "--json",
                          "--trace", "tests/review.jsonl")
    events = [json.loads(line) for line in stdout.splitlines()]
    assert code == 0
    assert (events[0]["type"], events[-1]["type"]) == ("run_started", "run_finished")
    assert set(events[0]["config"]) >= {"provider", "model", "workspace", "permission_mode",
                                        "limits", "agent_types", "sandbox", "permission_rules"}
    # trio-agents replay tests/review.jsonl --strict --mock-tools
    code, _, stderr = cli("replay", "tests/review.jsonl", "--strict", "--mock-tools", "--json")
    assert code == 0, stderr
    # printf 'hi\nthanks\n' | trio-agents chat --scenario s.json
    code, stdout, stderr = cli("chat", "--scenario", "s.json", "--no-trace",
                               stdin=b"hi\nthanks\n")
    assert code == 0, stderr
    assert "Bye." in stdout


@pytest.mark.parametrize(
    "args",
    [
        ["config", "--model", "x"],  # docs/configuration.md
        ["agents"],
        ["agents", "--json"],
        ["run", "--show-system-prompt"],
        ["config", "--json", "--allow-env", "GH_TOKEN", "--sandbox-network", "--no-trace"],
    ],
)
def test_the_docs_commands_that_show_what_a_run_would_get_work(cli: Cli, args: list[str]) -> None:
    code, stdout, stderr = cli(*args)
    assert (code, stderr) == (0, "")
    assert stdout


@pytest.mark.slow
def test_the_demo_runs_as_the_readme_and_cli_docs_print_it(cli: Cli) -> None:
    code, stdout, stderr = cli("demo", "--json", "--no-trace")  # `trio-agents demo --json`
    assert code == 0, stderr
    assert json.loads(stdout.splitlines()[0])["config"]["permission_mode"] == "allow-all"


if __name__ == "__main__":  # write the expectations from the tree first on PYTHONPATH
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        Path(sys.argv[1]).write_text(json.dumps(observe(Path(folder)), indent=1) + "\n")


def _replayed_config(cli: Cli, *args: str) -> Any:
    code, stdout, stderr = cli("replay", "rec.jsonl", "--mock-tools", "--no-trace", "--json", *args)
    assert code == 0, stderr
    config = json.loads(stdout.splitlines()[0])["config"]
    return (config["permission_mode"], config["permission_rules"],
            {k: config["limits"][k] for k in ("max_turns", "max_parallel", "mailbox_size")})


def test_replay_takes_what_the_user_left_out_from_the_recorded_run(cli: Cli) -> None:
    code, _, stderr = cli("run", "go", "--scenario", "s.json", "--trace", "rec.jsonl",
                          "--max-turns", "3", "--max-parallel", "4", "--permission-mode",
                          "allow-all", "--allow", "read", "--deny", "bash(rm *)")
    assert code == 0, stderr
    rules = {"allow": ["read"], "deny": ["bash(rm *)"]}
    limits = {"max_turns": 3, "max_parallel": 4, "mailbox_size": 16}
    assert _replayed_config(cli) == ("allow-all", rules, limits)
    # A flag wins over the recording; rules given on the command line replace the recorded ones.
    assert _replayed_config(cli, "--max-turns", "7", "--allow", "glob") == (
        "allow-all", {"allow": ["glob"], "deny": []}, {**limits, "max_turns": 7})
    # A key another version wrote is ignored; a value this version refuses is one line, exit 2.
    trace = cli.ws / "rec.jsonl"
    lines = trace.read_text().splitlines()
    first = json.loads(lines[0])
    first["config"]["limits"].update(future_limit=3, mailbox_size=8)
    trace.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    assert _replayed_config(cli) == ("allow-all", rules, {**limits, "mailbox_size": 8})
    first["config"]["limits"]["max_turns"] = -1
    trace.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    code, stdout, stderr = cli("replay", "rec.jsonl", "--mock-tools", "--no-trace")
    assert (code, stdout) == (2, "")
    assert stderr == ("trio-agents: error: rec.jsonl: run_started config limits.max_turns: "
                      "expected a whole number >= 1; got -1\n")
