"""Help that tells the truth (issue 21, items 8 and 10): defaults shown and equal to the real
ones, valid values listed, positional arguments explained, options a command refuses not
offered, and the global options accepted before or after the command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runtime.cli._options import DEFAULT_MAX_DEPTH, DEFAULT_MAX_PARALLEL, DEFAULT_MAX_TURNS
from runtime.core._limits import Limits
from tests.test_cli_run import main_code

SCENARIOS = Path(__file__).parent / "scenarios"


def test_the_defaults_in_help_are_the_real_ones(capsys: pytest.CaptureFixture[str]) -> None:
    limits = Limits()
    assert (
        limits.max_turns, limits.max_depth, limits.max_parallel) == (DEFAULT_MAX_TURNS, DEFAULT_MAX_DEPTH, DEFAULT_MAX_PARALLEL)
    assert main_code(["run", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"--max-turns N model turns per agent (default: {limits.max_turns})" in out
    assert f"(default: {limits.max_depth})" in out
    assert f"(default: {limits.max_parallel}, from the open-files limit" in out
    assert "root is 0" not in out  # --max-depth 0 is refused: the help no longer suggests it


def test_max_depth_0_is_refused_as_the_help_says(capsys: pytest.CaptureFixture[str]) -> None:
    assert main_code(["run", "x", "--max-depth", "0"]) == 2
    assert "--max-depth: expected a whole number >= 1" in capsys.readouterr().err


def test_trace_show_lists_the_statuses_and_explains_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from runtime.cli._trace_cmd import STATUSES

    assert main_code(["trace", "show", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "S is one of: " + ", ".join(STATUSES) in out
    assert "FILE a trace (JSONL) written by run, demo or chat" in out
    for command in ("stats", "tail", "export"):
        assert main_code(["trace", command, "--help"]) == 0
        assert "FILE a trace (JSONL)" in " ".join(capsys.readouterr().out.split())


def test_descriptions_are_wrapped_to_the_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    assert main_code(["run", "--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("Run the main agent"))
    paragraph = lines[first : lines.index("", first)]
    assert len(paragraph) > 1
    assert all(len(line) <= 60 for line in paragraph)


@pytest.mark.parametrize("option", ["--provider", "--model"])
def test_the_demo_does_not_take_a_provider_or_model(
    option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main_code(["demo", option, "openai"]) == 2
    assert f"unrecognized arguments: {option}" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--debug", "-v"])
@pytest.mark.parametrize("where", ["before", "after"])
def test_global_options_work_before_and_after_the_command(
    flag: str, where: str, tmp_path: Path
) -> None:
    from tests.trace_factory import run_events, small_run, write_trace

    trace = tmp_path / "run.jsonl"
    write_trace(trace, run_events(small_run(), order="time"))
    scenario = str(SCENARIOS / "simple.json")
    commands = [
        ["run", "go", "--no-trace", "--scenario", scenario],
        ["demo", "--no-trace", "--json"],
        ["trace", "show", str(trace)],
        ["trace", "stats", str(trace)],
    ]
    for command in commands:
        args = [flag, *command] if where == "before" else [*command, flag]
        proc = subprocess.run(
            [sys.executable, "-m", "runtime", *args], cwd=tmp_path, capture_output=True,
            text=True, stdin=subprocess.DEVNULL, timeout=60, check=False,
        )
        assert proc.returncode == 0, (args, proc.stderr)
        assert "unrecognized" not in proc.stderr
