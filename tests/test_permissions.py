"""The permission policy: rule syntax, rule matching, decision order, modes, remember."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.core._errors import ConfigError
from runtime.core._permissions import Decision, PermissionPolicy, Rule, parse_rule
from runtime.core._tool import Tool, ToolContext
from tools._bash import BashTool
from tools._edit import EditTool
from tools._glob import GlobTool
from tools._grep import GrepTool
from tools._read import ReadTool
from tools._write import WriteTool


class DeployTool(Tool):
    """A user tool whose target is plain text (no ``permission_target_kind``)."""

    name: ClassVar[str] = "deploy"
    description: ClassVar[str] = "deploy somewhere"
    input_schema: ClassVar[dict[str, Any]] = {"type": "object"}

    def permission_target(self, args: Mapping[str, Any]) -> str:
        return str(args["env"])

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        return "deployed"


class PingTool(Tool):
    """Needs no permission, yet is not read-only."""

    name: ClassVar[str] = "ping"
    description: ClassVar[str] = "ping"
    input_schema: ClassVar[dict[str, Any]] = {"type": "object"}
    needs_permission: ClassVar[bool] = False

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        return "pong"


class BrokenTargetTool(Tool):
    name: ClassVar[str] = "broken"
    description: ClassVar[str] = "its permission_target raises"
    input_schema: ClassVar[dict[str, Any]] = {"type": "object"}

    def permission_target(self, args: Mapping[str, Any]) -> str:
        raise KeyError("boom")

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        return ""


BASH, READ, WRITE, EDIT = BashTool(), ReadTool(), WriteTool(), EditTool()
GLOB, GREP, DEPLOY, PING = GlobTool(), GrepTool(), DeployTool(), PingTool()


def sh(command: str) -> tuple[Tool, dict[str, Any]]:
    return BASH, {"command": command}


def wr(path: str) -> tuple[Tool, dict[str, Any]]:
    return WRITE, {"path": path, "content": ""}


def ed(path: str) -> tuple[Tool, dict[str, Any]]:
    return EDIT, {"path": path, "old": "a", "new": "b"}


def rd(path: str) -> tuple[Tool, dict[str, Any]]:
    return READ, {"path": path}


# --- parse_rule -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("read", Rule("read", None)),
        ("bash(git status*)", Rule("bash", "git status*")),
        ("write(docs/**)", Rule("write", "docs/**")),
        ("  edit(*.py)  ", Rule("edit", "*.py")),
        ("bash(echo (hi))", Rule("bash", "echo (hi)")),
        ("bash(a)b)", Rule("bash", "a)b")),
        ("bash()", Rule("bash", "")),
        ("bash(printf 'a\nb')", Rule("bash", "printf 'a\nb'")),
        ("mcp__files__read(x)", Rule("mcp__files__read", "x")),
        ("my-tool.v2", Rule("my-tool.v2", None)),
    ],
)
def test_parse_rule(text: str, rule: Rule) -> None:
    assert parse_rule(text) == rule


@pytest.mark.parametrize(
    "text", ["", "   ", "(x)", "bash(", "bash(x", "bash x", "bash)(", "1bash", "bash(x)y", "*"]
)
def test_parse_rule_refuses_bad_syntax(text: str) -> None:
    with pytest.raises(ConfigError, match="bad permission rule"):
        parse_rule(text)


@pytest.mark.parametrize("text", ["read", "bash(git status*)", "write(./a b.md)", "bash()"])
def test_rule_text_round_trips(text: str) -> None:
    assert str(parse_rule(text)) == text


def test_policy_parses_rules_and_refuses_bad_ones() -> None:
    policy = PermissionPolicy("ask", allow=("bash(ls)",), deny=[Rule("write", None)])
    assert policy.allow == (Rule("bash", "ls"),)
    assert policy.deny == (Rule("write", None),)
    with pytest.raises(ConfigError, match=r"bad permission rule 'bash\('"):
        PermissionPolicy("ask", allow=("bash(",))
    with pytest.raises(ConfigError, match="a list of rules, not the string"):
        PermissionPolicy("ask", deny="bash")


@pytest.mark.parametrize("mode", ["", "ASK", "auto_edit", "yolo"])
def test_unknown_mode_is_refused(mode: str) -> None:
    with pytest.raises(ConfigError, match="unknown permission mode"):
        PermissionPolicy(mode)


def test_decision_is_frozen() -> None:
    decision = Decision(action="allow", reason="x")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        decision.action = "deny"  # type: ignore[misc]


# --- decide: modes and order ------------------------------------------------------------------

MODE_TABLE = [
    # mode, call, action, reason
    ("ask", sh("ls"), "ask", "mode ask"),
    ("ask", wr("a.txt"), "ask", "mode ask"),
    ("ask", rd("a.txt"), "allow", "read-only tool"),
    ("ask", (GLOB, {"pattern": "*"}), "allow", "read-only tool"),
    ("ask", (GREP, {"pattern": "x"}), "allow", "read-only tool"),
    ("ask", (PING, {}), "allow", "tool needs no permission"),
    ("auto-edit", wr("a.txt"), "allow", "mode auto-edit allows file edits"),
    ("auto-edit", ed("a.txt"), "allow", "mode auto-edit allows file edits"),
    ("auto-edit", sh("ls"), "ask", "mode auto-edit asks for this tool"),
    ("auto-edit", (DEPLOY, {"env": "prod"}), "ask", "mode auto-edit asks for this tool"),
    ("auto-edit", rd("a.txt"), "allow", "read-only tool"),
    ("allow-all", sh("rm -rf build"), "allow", "mode allow-all"),
    ("allow-all", wr("a.txt"), "allow", "mode allow-all"),
    ("deny", sh("ls"), "deny", "mode deny"),
    ("deny", wr("a.txt"), "deny", "mode deny"),
    ("deny", (DEPLOY, {"env": "prod"}), "deny", "mode deny"),
    ("deny", rd("a.txt"), "allow", "read-only tool"),
    ("deny", (PING, {}), "allow", "tool needs no permission"),
]


@pytest.mark.parametrize(("mode", "tool_args", "action", "reason"), MODE_TABLE)
def test_modes(mode: str, tool_args: tuple[Tool, dict[str, Any]], action: str, reason: str) -> None:
    tool, args = tool_args
    assert PermissionPolicy(mode).decide(tool, args) == Decision(action=action, reason=reason)  # type: ignore[arg-type]


ORDER_TABLE = [
    # mode, allow, deny, call, action, reason
    ("allow-all", (), ("bash(rm *)",), sh("rm -rf x"), "deny", "denied by rule bash(rm *)"),
    ("ask", ("bash",), ("bash(rm *)",), sh("rm x"), "deny", "denied by rule bash(rm *)"),
    ("ask", ("bash",), ("bash(rm *)",), sh("ls"), "allow", "allowed by rule bash"),
    ("deny", ("bash(ls)",), (), sh("ls"), "allow", "allowed by rule bash(ls)"),
    ("ask", (), ("read(secrets/**)",), rd("secrets/k"), "deny", "denied by rule read(secrets/**)"),
    ("ask", (), ("read",), rd("a.txt"), "deny", "denied by rule read"),
    ("ask", (), ("grep(vendor/**)",), (GREP, {"pattern": "x", "path": "vendor/lib"}), "deny",
     "denied by rule grep(vendor/**)"),
    ("ask", (), ("ping",), (PING, {}), "deny", "denied by rule ping"),
    ("ask", ("write(docs/**)", "write"), (), wr("docs/a"), "allow", "allowed by rule write(docs/**)"),
    ("ask", ("frobnicate", "frobnicate(*)"), (), sh("ls"), "ask", "mode ask"),
    ("ask", ("bash(ls)",), (), wr("ls"), "ask", "mode ask"),
    ("ask", ("deploy(prod*)",), (), (DEPLOY, {"env": "prod-eu"}), "allow",
     "allowed by rule deploy(prod*)"),
    ("ask", ("deploy(prod*)",), (), (DEPLOY, {"env": "staging"}), "ask", "mode ask"),
    ("ask", ("deploy(a/*)",), (), (DEPLOY, {"env": "a/b/c"}), "allow", "allowed by rule deploy(a/*)"),
]


@pytest.mark.parametrize(("mode", "allow", "deny", "tool_args", "action", "reason"), ORDER_TABLE)
def test_deny_rules_then_allow_rules_then_read_only_then_mode(
    mode: str,
    allow: tuple[str, ...],
    deny: tuple[str, ...],
    tool_args: tuple[Tool, dict[str, Any]],
    action: str,
    reason: str,
) -> None:
    policy = PermissionPolicy(mode, allow=allow, deny=deny)
    tool, args = tool_args
    assert policy.decide(tool, args) == Decision(action=action, reason=reason)  # type: ignore[arg-type]


def test_a_tool_whose_target_fails_is_still_decided() -> None:
    policy = PermissionPolicy("ask", deny=("broken(x*)",))
    assert policy.decide(BrokenTargetTool(), {}).action == "ask"


class _Named(Tool):
    description = "a tool of some server"
    input_schema: ClassVar[dict[str, Any]] = {"type": "object"}

    def __init__(self) -> None:
        pass

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        return ""


def _named(name: str) -> Tool:
    return type("NamedTool", (_Named,), {"name": name})()


def test_a_rule_may_name_tools_by_glob() -> None:
    policy = PermissionPolicy(
        "deny", allow=("mcp__git__*",), deny=("mcp__git__git_res?t", "mcp__*__drop*")
    )
    assert policy.decide(_named("mcp__git__git_status"), {}).action == "allow"
    assert policy.decide(_named("mcp__git__git_reset"), {}).reason == (
        "denied by rule mcp__git__git_res?t"
    )
    assert policy.decide(_named("mcp__db__drop_table"), {}).action == "deny"
    assert policy.decide(_named("mcp__gitx__status"), {}).reason == "mode deny"
    assert parse_rule("mcp__git__*(*main*)") == Rule("mcp__git__*", "*main*")


# --- bash rules -------------------------------------------------------------------------------

BASH_ALLOW_TABLE = [
    ("git status*", "git status", True),
    ("git status*", "git status --short", True),
    ("git status*", "  git status  ", True),  # the target is stripped
    ("git status*", "git statusx", True),
    ("git status*", "git log", False),
    ("git status*", "git status; rm -rf ~", False),
    ("git status*", "git status && rm -rf ~", False),
    ("git status*", "git status || rm -rf ~", False),
    ("git status*", "git status | sh", False),
    ("git status*", "git status & rm -rf ~", False),
    ("git status*", "git status\nrm -rf ~", False),
    ("git status*", "git status $(rm -rf ~)", False),
    ("git status*", "git status `rm -rf ~`", False),
    ("git status*", "git status > ~/.bashrc", False),
    ("git status*", "git status < /etc/passwd", False),
    ("npm run ?est", "npm run test", True),
    ("npm run ?est", "npm run ;est", False),
    ("make && make test", "make && make test", True),  # operators written in the rule itself
    ("ls", "ls", True),
    ("ls", "ls -la", False),
    ("cat */x", "cat a/b/x", True),  # for commands, "/" is an ordinary character
]


@pytest.mark.parametrize(("pattern", "command", "allowed"), BASH_ALLOW_TABLE)
def test_bash_allow_rule_wildcards_never_cover_shell_operators(
    pattern: str, command: str, allowed: bool
) -> None:
    policy = PermissionPolicy("ask", allow=(f"bash({pattern})",))
    assert (policy.decide(*sh(command)).action == "allow") is allowed


BASH_DENY_TABLE = [
    ("rm *", "rm -rf build", True),
    ("rm *", "ls && rm -rf build", True),
    ("rm *", "ls; rm -rf build", True),
    ("rm *", "ls | rm x", True),
    ("rm *", "echo $(rm x)", True),
    ("rm *", "(rm x)", True),
    ("rm *", "`rm x`", True),
    ("rm *", "ls\nrm x", True),
    ("rm *", "  rm x", True),
    ("rm *", "echo rm x", False),
    ("rm *", "rmdir x", False),
    ("*--force*", "git push --force origin", True),
    ("git push*", "cd x && git push", True),
]


@pytest.mark.parametrize(("pattern", "command", "denied"), BASH_DENY_TABLE)
def test_bash_deny_rules_also_match_each_part_of_a_chained_command(
    pattern: str, command: str, denied: bool
) -> None:
    policy = PermissionPolicy("allow-all", deny=(f"bash({pattern})",))
    assert (policy.decide(*sh(command)).action == "deny") is denied


# --- path rules -------------------------------------------------------------------------------

PATH_TABLE = [
    ("docs/**", "docs/a.md", True),
    ("docs/**", "docs/x/y/z.md", True),
    ("docs/**", "./docs/a.md", True),
    ("docs/**", "docs//a.md", True),
    ("docs/**", "docs", False),
    ("docs/**", "src/docs/a.md", False),
    ("docs/**", "docsx/a.md", False),
    ("docs/**", "docs/../src/a.py", False),
    ("docs/*", "docs/a.md", True),
    ("docs/*", "docs/x/a.md", False),
    ("*.py", "a.py", True),
    ("*.py", "src/deep/a.py", True),  # no "/" in the pattern: any depth, like .gitignore
    ("*.py", "a.pyc", False),
    ("./setup.py", "setup.py", True),
    ("./setup.py", "sub/setup.py", False),
    ("src/*.py", "src/a.py", True),
    ("src/*.py", "src/x/a.py", False),
    ("**/*.py", "a.py", True),
    ("**/test_*.py", "tests/unit/test_a.py", True),
    ("src/**/*.{ts,tsx}", "src/ui/a.tsx", True),
    ("README.md", "docs/README.md", True),
    ("[!.]*", ".env", False),
    ("**", "anything/at/all", True),
]


@pytest.mark.parametrize(("pattern", "path", "matches"), PATH_TABLE)
def test_path_rules(pattern: str, path: str, matches: bool) -> None:
    allow = PermissionPolicy("ask", allow=(f"write({pattern})",))
    deny = PermissionPolicy("allow-all", deny=(f"write({pattern})",))
    assert (allow.decide(*wr(path)).action == "allow") is matches
    assert (deny.decide(*wr(path)).action == "deny") is matches


@pytest.fixture
def ws(workspace: Path) -> Path:
    (workspace / "docs").mkdir()
    (workspace / "src").mkdir()
    (workspace / "src" / "main.py").write_text("")
    (workspace / "docs" / "sneaky.md").symlink_to("../src/main.py")
    return Path(os.path.realpath(workspace))


def test_absolute_paths_in_the_workspace_match_relative_rules(ws: Path) -> None:
    policy = PermissionPolicy("ask", allow=("write(docs/**)",), workspace=ws)
    assert policy.decide(*wr(f"{ws}/docs/new.md")).action == "allow"
    assert policy.decide(*wr(f"{ws}/src/new.md")).action == "ask"


def test_without_the_workspace_deny_rules_still_catch_absolute_paths(ws: Path) -> None:
    policy = PermissionPolicy("allow-all", deny=("write(src/**)",))
    assert policy.decide(*wr(f"{ws}/src/main.py")).action == "deny"
    assert PermissionPolicy("ask", allow=("write(src/**)",)).decide(
        *wr(f"{ws}/src/main.py")
    ).action == "ask"  # an allow rule is never stretched that way


def test_allow_rule_must_cover_the_real_path_behind_a_symlink(ws: Path) -> None:
    policy = PermissionPolicy("ask", allow=("write(docs/**)",), workspace=ws)
    assert policy.decide(*wr("docs/sneaky.md")).action == "ask"
    assert policy.decide(*wr("docs/plain.md")).action == "allow"


def test_deny_rule_catches_the_real_path_behind_a_symlink(ws: Path) -> None:
    policy = PermissionPolicy("allow-all", deny=("edit(src/**)",), workspace=ws)
    assert policy.decide(*ed("docs/sneaky.md")) == Decision(
        action="deny", reason="denied by rule edit(src/**)"
    )


def test_unresolvable_paths_are_decided_on_the_path_as_given(ws: Path) -> None:
    policy = PermissionPolicy("ask", allow=("write(docs/**)",), workspace=ws)
    assert policy.decide(*wr("docs/a\0b")).action == "allow"  # the tool refuses it later
    assert policy.decide(*wr("../outside")).action == "ask"


# --- remember ---------------------------------------------------------------------------------


def test_remember_bash_covers_exactly_that_command() -> None:
    policy = PermissionPolicy("ask")
    assert policy.remember(*sh("ls *.py")) == "bash(ls [*].py)"
    assert policy.decide(*sh("ls *.py")) == Decision(
        action="allow", reason="allowed by rule bash(ls [*].py)"
    )
    assert policy.decide(*sh("ls a.py")).action == "ask"
    assert policy.decide(*sh("ls *.py; rm -rf ~")).action == "ask"


def test_remember_compound_command() -> None:
    policy = PermissionPolicy("ask")
    rule = policy.remember(*sh("make && make test"))
    assert rule == "bash(make && make test)"
    assert policy.decide(*sh("make && make test")).action == "allow"


def test_remember_top_level_file_is_anchored() -> None:
    policy = PermissionPolicy("ask")
    assert policy.remember(*wr("./notes.md")) == "write(./notes.md)"
    assert policy.decide(*wr("notes.md")).action == "allow"
    assert policy.decide(*wr("sub/notes.md")).action == "ask"
    assert policy.decide(*ed("notes.md")).action == "ask"  # only that tool


def test_remember_escapes_glob_characters_in_paths() -> None:
    policy = PermissionPolicy("ask")
    assert policy.remember(*wr("docs/a[1]{x}.md")) == "write(docs/a[[]1][{]x}.md)"
    assert policy.decide(*wr("docs/a[1]{x}.md")).action == "allow"
    assert policy.decide(*wr("docs/a1x.md")).action == "ask"


def test_remember_absolute_path_inside_the_workspace_is_relative(ws: Path) -> None:
    policy = PermissionPolicy("ask", workspace=ws)
    assert policy.remember(*wr(f"{ws}/docs/a.md")) == "write(docs/a.md)"
    assert policy.decide(*wr("docs/a.md")).action == "allow"


def test_remember_does_not_add_a_rule_twice() -> None:
    policy = PermissionPolicy("ask", allow=("bash(ls)",))
    assert policy.remember(*sh("ls")) == "bash(ls)"
    assert policy.allow == (Rule("bash", "ls"),)


def test_remembered_rules_lose_to_deny_rules() -> None:
    policy = PermissionPolicy("ask", deny=("bash(rm *)",))
    policy.remember(*sh("rm -rf build"))
    assert policy.decide(*sh("rm -rf build")).action == "deny"


_COMMANDS = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=40
).filter(lambda s: s.strip() != "")


@given(command=_COMMANDS, other=_COMMANDS)
def test_remembered_command_allows_exactly_itself(command: str, other: str) -> None:
    policy = PermissionPolicy("ask")
    rule = policy.remember(*sh(command))
    assert parse_rule(rule) == policy.allow[0]
    assert policy.decide(*sh(command)).action == "allow"
    if other.strip() != command.strip():
        assert policy.decide(*sh(other)).action == "ask"


_NAMES = st.text(alphabet="ab.*?[]{}!-_ é", min_size=1, max_size=6).filter(
    lambda s: s not in (".", "..")
)


@given(parts=st.lists(_NAMES, min_size=1, max_size=3), other=st.lists(_NAMES, min_size=1, max_size=3))
def test_remembered_path_allows_exactly_itself(parts: list[str], other: list[str]) -> None:
    policy = PermissionPolicy("ask")
    path = "/".join(parts)
    rule = policy.remember(*wr(path))
    assert parse_rule(rule) == policy.allow[0]
    assert policy.decide(*wr(path)).action == "allow"
    if other != parts:
        assert policy.decide(*wr("/".join(other))).action == "ask"


# --- attacks (issue 15): every spelling of a path is judged by where it really leads -----------


@pytest.fixture
def linked(ws: Path) -> Path:
    (ws / ".env").write_text("KEY=1\n")
    (ws / "envlink").symlink_to(".env")
    (ws / "x.md").symlink_to(".env")
    (ws / "secrets").mkdir()
    (ws / "secrets" / "key").write_text("k\n")
    (ws / "s").symlink_to("secrets")
    return ws


def _spellings(ws: Path, rel: str) -> list[str]:
    return [rel, f"{ws}/{rel}", f"/proc/self/root{ws}/{rel}", f"/proc/self/cwd/{rel}"]


@pytest.mark.parametrize("spelling", range(4), ids=["relative", "absolute", "root", "cwd"])
def test_deny_rule_holds_through_proc_self_and_a_symlink(
    linked: Path, spelling: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(linked)
    policy = PermissionPolicy("allow-all", deny=("write(.env)",), workspace=linked)
    path = _spellings(linked, "envlink")[spelling]
    assert policy.decide(*wr(path)).action == "deny", path


@pytest.mark.parametrize("spelling", range(4), ids=["relative", "absolute", "root", "cwd"])
def test_allow_rule_must_match_the_real_path_whatever_the_spelling(
    linked: Path, spelling: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(linked)
    policy = PermissionPolicy("deny", allow=("write(*.md)",), workspace=linked)
    path = _spellings(linked, "x.md")[spelling]
    assert policy.decide(*wr(path)).action == "deny", path
    plain = _spellings(linked, "notes.md")[spelling]
    assert policy.decide(*wr(plain)).action == "allow", plain


@pytest.mark.parametrize("spelling", range(4), ids=["relative", "absolute", "root", "cwd"])
def test_deny_rule_on_a_folder_holds_through_a_folder_symlink(
    linked: Path, spelling: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(linked)
    policy = PermissionPolicy("allow-all", deny=("write(secrets/**)",), workspace=linked)
    path = _spellings(linked, "s/key")[spelling]
    assert policy.decide(*wr(path)).action == "deny", path


@pytest.mark.parametrize("mode", ["ask", "auto-edit", "allow-all", "deny"])
@pytest.mark.parametrize(
    "path", [".trio-agents/traces/run.jsonl", ".trio-agents/sessions/s.json", "t/x", "sub/.trio-agents/a"]
)
def test_the_runtimes_own_files_are_never_written_whatever_the_mode_and_rules(
    ws: Path, mode: str, path: str
) -> None:
    (ws / ".trio-agents" / "traces").mkdir(parents=True)
    (ws / "t").symlink_to(".trio-agents/traces")
    policy = PermissionPolicy(mode, allow=("write", "write(**)", "edit"), workspace=ws)  # type: ignore[arg-type]
    for tool_args in (wr(path), ed(path), wr(f"{ws}/{path}")):
        decision = policy.decide(*tool_args)
        assert decision.action == "deny", (mode, tool_args)
        assert ".trio-agents" in decision.reason


@pytest.mark.parametrize("mode", ["allow-all", "auto-edit", "ask", "deny"])
def test_protected_files_are_never_changed_but_may_be_read(ws: Path, mode: str) -> None:
    # .mcp.json's commands run at the next start; a trace outside .trio-agents is the audit.
    (ws / "audit").mkdir()
    (ws / "link").symlink_to(".mcp.json")
    protected = (str(ws / ".mcp.json"), str(ws / "audit" / "run.jsonl"))
    policy = PermissionPolicy(mode, allow=("write", "write(**)", "edit"),  # type: ignore[arg-type]
                              workspace=ws, protected=protected)
    for tool_args in (wr(".mcp.json"), ed(".mcp.json"), wr(f"{ws}/.mcp.json"), wr("link"),
                      wr("audit/run.jsonl"), wr(f"/proc/self/root{ws}/audit/run.jsonl")):
        decision = policy.decide(*tool_args)
        assert decision.action == "deny", (mode, tool_args)
        assert "runtime's own files" in decision.reason
    assert policy.decide(*rd(".mcp.json")).action == "allow"
    assert policy.decide(*wr("audit/other.txt")).action in ("allow", "ask", "deny")
    assert "runtime's own" not in policy.decide(*wr("audit/other.txt")).reason


async def test_a_run_keeps_its_trace_and_mcp_json_from_the_model(
    ws: Path, tmp_path: Path
) -> None:
    from runtime import open_runtime

    trace = ws / "audit" / "run.jsonl"
    trace.parent.mkdir()
    scenario = {"agents": {"main": {"turns": [
        {"tool_calls": [{"name": "write", "input": {"path": "audit/run.jsonl", "content": "x"}},
                        {"name": "write", "input": {"path": ".mcp.json", "content": "{}"}}]},
        {"text": "done"}]}}}
    async with open_runtime(scenario=scenario, workspace=ws, trace=trace,
                            permission_mode="allow-all") as rt:
        outcome = await rt.run("go")
    assert outcome.status == "completed"
    assert not (ws / ".mcp.json").exists()
    assert trace.read_text().startswith('{"type":"run_started"')
