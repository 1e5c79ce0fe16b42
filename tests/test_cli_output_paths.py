"""Every output path a user gives (issue 21, item 1): one line naming it and why, exit 2.

Checked before anything runs or is read. The tests run as root on CI, where permission bits do
not stop a write, so the unwritable paths are ones that no user can write: a folder where a file
is wanted, a path under a regular file, a file under a missing folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_cli_run import main_code

SCENARIOS = Path(__file__).parent / "scenarios"


def bad_paths(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """name -> (path, what the error line says about it)."""
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    return {
        "a folder": (str(tmp_path), "is a folder"),
        "under a file": (str(plain / "x"), "is not a folder"),
    }


def one_error_line(capsys: pytest.CaptureFixture[str], *words: str) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, lines
    for word in words:
        assert word in lines[0], lines[0]
    assert "Traceback" not in captured.err
    assert "internal error" not in captured.err
    return lines[0]


@pytest.mark.parametrize("which", ["a folder", "under a file"])
@pytest.mark.parametrize("command", ["run", "demo", "chat"])
def test_an_unwritable_trace_path_is_one_line_and_exit_2(
    command: str,
    which: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    path, why = bad_paths(tmp_path)[which]
    args = {"run": ["run", "hi"], "demo": ["demo"], "chat": ["chat"]}[command]
    scenario = str(SCENARIOS / "simple.json")
    assert main_code([*args, "--scenario", scenario, "--trace", path]) == 2
    one_error_line(capsys, f"--trace {path}", why)
    assert not (tmp_path / ".trio-agents").exists()  # nothing ran


@pytest.mark.parametrize("which", ["under a file", "missing folder"])
def test_an_unusable_control_path_is_one_line_and_exit_2(
    which: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    paths = bad_paths(tmp_path)
    path, why = paths.get(which) or (str(tmp_path / "nowhere" / "s.sock"), "no such folder")
    scenario = str(SCENARIOS / "simple.json")
    assert main_code(["run", "hi", "--scenario", scenario, "--control", path]) == 2
    one_error_line(capsys, f"--control {path}", why)


@pytest.mark.parametrize("which", ["a file", "under a file"])
def test_an_unusable_sessions_dir_is_one_line_and_exit_2(
    which: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    path, why = {
        "a file": (str(plain), "not a folder"),
        "under a file": (str(plain / "sessions"), "is not a folder"),
    }[which]
    scenario = str(SCENARIOS / "simple.json")
    assert main_code(["chat", "--scenario", scenario, "--sessions-dir", path]) == 2
    one_error_line(capsys, f"--sessions-dir {path}", why)
    assert not (tmp_path / ".trio-agents").exists()


@pytest.mark.parametrize("which", ["a folder", "under a file", "missing folder"])
def test_export_to_an_unwritable_path_is_one_line_and_exit_2(
    which: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.trace_factory import run_events, small_run, write_trace

    trace = tmp_path / "run.jsonl"
    write_trace(trace, run_events(small_run(), order="time"))
    paths = bad_paths(tmp_path)
    path, why = paths.get(which) or (str(tmp_path / "nowhere" / "x.mmd"), "no such folder")
    assert main_code(["trace", "export", str(trace), "--format", "mermaid", "-o", path]) == 2
    one_error_line(capsys, f"-o {path}", why)


def test_export_reports_a_write_that_fails_midway(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.trace_factory import run_events, small_run, write_trace

    trace = tmp_path / "run.jsonl"
    write_trace(trace, run_events(small_run(), order="time"))
    # /dev/full takes the open and fails every write (ENOSPC), as a full disk does.
    args = ["trace", "export", str(trace), "--format", "otlp-json", "-o", "/dev/full"]
    assert main_code(args) == 2
    one_error_line(capsys, "-o /dev/full", "No space left")
