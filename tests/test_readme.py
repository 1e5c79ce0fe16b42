"""The README as a newcomer follows it: every command line it prints is a real shell command,
and the ones that can run offline run as printed and succeed.

The set-up lines leave the virtual environment active, so the later commands say
``trio-agents`` bare; here they run with this interpreter's ``bin`` folder first on ``PATH``,
as ``. .venv/bin/activate`` leaves a shell, in a fresh workspace holding the scenario the README
points to (the first example of docs/scenarios.md). Real subprocesses through ``bash``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"

ID_GRAMMAR = {
    # The scripted provider's call ids: the K-th call of agent-A (docs/cli.md).
    "tu": re.compile(r"tu-\d+\.\d+"),
    # Agent ids: numbered as they are made; a Ray host's carry its name (docs/cluster.md).
    "agent": re.compile(r"(?:h\d+\.\d+\.)?agent-\d+"),
}


def _blocks(text: str, lang: str = "sh") -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def _section(text: str, heading: str) -> str:
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _command_lines(block: str) -> list[str]:
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def test_the_set_up_lines_leave_the_venv_active_for_every_later_command() -> None:
    setup = _blocks(_section(_readme(), "Set-up"))
    assert len(setup) == 2
    for block in setup:
        [line] = _command_lines(block)
        steps = [step.strip() for step in line.split("&&")]
        assert steps[:2] == ["python3 -m venv .venv", ". .venv/bin/activate"], line
        assert not any(".venv/bin/" in step for step in steps[2:]), "activated: bare names"
    assert _command_lines(setup[0])[0].endswith("&& trio-agents demo")
    # CI runs exactly the README's test command.
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert _command_lines(setup[1])[0] in ci


def _segments(line: str) -> list[list[str]]:
    """The simple commands of *line*: split where the shell splits (``|``, ``&&``, ``&``,
    ``;``), comments and redirections left out."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;<>")
    lexer.commenters = "#"
    lexer.whitespace_split = True
    segments: list[list[str]] = [[]]
    redirect = False
    for token in lexer:
        if token in ("|", "&&", "&", ";", "||"):
            segments.append([])
        elif token in (">", "<", ">>"):
            redirect = True
        elif redirect:
            redirect = False
        else:
            segments[-1].append(token)
    return [s for s in segments if s]


COMMANDS = {"trio-agents", "printf", "git", "python3", "pip", "ruff", "mypy", "lint-imports",
            "pytest", "."}


@pytest.mark.parametrize("lang", ["sh"])
def test_every_readme_command_line_is_a_shell_command_not_a_list_of_alternatives(
    lang: str,
) -> None:
    """``trace show FILE --json | --subtree ID`` reads as a pipe into a command ``--subtree``:
    each piece the shell runs must start with a real command."""
    for block in _blocks(_readme(), lang):
        for line in _command_lines(block):
            for segment in _segments(line):
                assert segment[0] in COMMANDS, f"{segment[0]!r} is not a command, in: {line}"
                assert not any("|" in word for word in segment if word.startswith("-")), line


def test_every_id_in_the_docs_is_one_the_runtime_makes() -> None:
    files = [README, *sorted((ROOT / "docs").glob("*.md"))]
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"\brp-\d", text), f"{path.name}: replay keeps the recorded ids"
        for kind, grammar in ID_GRAMMAR.items():
            for match in re.finditer(rf"[\w.]*\b{kind}-[\w.]*\d", text):
                word = match.group(0)
                assert grammar.fullmatch(word), f"{path.name}: {word!r} is not a {kind} id"


def _env() -> dict[str, str]:
    """A shell after ``. .venv/bin/activate``: this interpreter's commands first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "TRIO_AGENTS"))}
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = str(Path(bindir).parent)
    return env


def _sh(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=120, check=False)


def _wait_for(check: object, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _pending(sock: Path, cwd: Path, env: dict[str, str]) -> list[object]:
    proc = _sh(f"trio-agents pending --control {sock} --json", cwd, env)
    return json.loads(proc.stdout) if proc.returncode == 0 else []  # type: ignore[no-any-return]


@pytest.mark.slow
def test_the_readme_command_lines_run_as_printed(tmp_path: Path) -> None:
    """Each line of the README's command-line block that needs no key and no network runs in
    a fresh workspace and exits 0; the background run is answered, then cancelled, by the
    lines after it."""
    scenario = _blocks((ROOT / "docs" / "scenarios.md").read_text(encoding="utf-8"), "json")[0]
    work = tmp_path / "project"
    work.mkdir()
    (work / "my-scenario.json").write_text(scenario)
    config = tmp_path / "config"
    config.mkdir()
    env = _env()
    env["XDG_CONFIG_HOME"] = str(config)  # the session key and trust live here, not in ~
    sock = tmp_path / "agents.sock"
    background: subprocess.Popen[str] | None = None
    ran = []
    block = _blocks(_section(_readme(), "Command line"))[0]
    for line in _command_lines(block):
        if "--provider anthropic" in line or "--provider openai" in line:
            continue  # needs a key and the network
        if "--sandbox" in line and shutil.which("bwrap") is None:
            continue
        line = line.replace("/tmp/agents.sock", str(sock))
        ran.append(line)
        if line.rstrip().endswith("&"):
            background = subprocess.Popen(["bash", "-c", line.rstrip().rstrip("&")], cwd=work,
                                          env=env, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True)
            _wait_for(sock.exists, "the control socket")
            continue
        if line.startswith("trio-agents pending"):
            _wait_for(lambda: _pending(sock, work, env), "a pending permission request")
        if line.startswith("trio-agents cancel"):
            _wait_for(lambda: b'"bash: sleep 30"' in _trace_bytes(work), "the sleep to start")
        proc = _sh(line, work, env)
        assert proc.returncode == 0, f"{line}\n{proc.stdout}\n{proc.stderr}"
        if line.startswith("trio-agents run") and "--trace run.jsonl" in line:
            # docs/cli.md's example of a plain line is this run's own.
            assert "[main \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} worker] tool started: glob: **/* (tu-3.1)" in proc.stdout
        if line.startswith("trio-agents cancel"):
            assert background is not None
            out, err = background.communicate(timeout=60)
            assert background.returncode == 0, err
            assert "[main \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} sleeper] tool cancelled: bash" in out, out
    assert background is not None, "the --control example ran"
    assert len(ran) >= 18, ran


def _trace_bytes(work: Path) -> bytes:
    traces = sorted((work / ".trio-agents" / "traces").glob("*.jsonl"), key=os.path.getmtime)
    return traces[-1].read_bytes() if traces else b""


def test_the_closing_hint_names_a_command_that_runs_from_where_the_user_is(
    tmp_path: Path,
) -> None:
    """Started as ``.venv/bin/trio-agents`` from a shell where the venv is not active, the
    closing ``Inspect it: …`` line names that path; with the venv active, the bare name."""
    script = Path(sys.executable).parent / "trio-agents"
    if not script.exists():
        pytest.skip("no trio-agents script next to this interpreter")
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({"agents": {"main": {"turns": [{"text": "hi"}]}}}))
    plain = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    plain["PATH"] = "/usr/bin:/bin"
    for env, expect in ((plain, str(script)), (_env(), "trio-agents")):
        proc = subprocess.run([str(script), "run", "hi", "--scenario", str(scenario)],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=60, check=True)
        [hint] = [line for line in proc.stderr.splitlines() if line.startswith("Inspect it: ")]
        command = hint.removeprefix("Inspect it: ")
        assert shlex.split(command)[0] == expect
        shown = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=60, check=False)
        assert shown.returncode == 0, shown.stderr
