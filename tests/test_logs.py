"""The runtime's log lines in an application that uses it as a library (runtime/_logs.py).

Each case runs in a fresh interpreter: whether structlog was configured is process-wide.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

_SECRET = "sk-logs-0123456789abcdef"

_APP = textwrap.dedent(
    """
    import logging, sys, trio
    from runtime import open_runtime
    from runtime.core import get_logger

    SETUP

    async def main() -> None:
        scenario = {"agents": {"main": {"turns": [
            {"tool_calls": [{"name": "bash", "input": {"command": "echo hi"}}]},
            {"text": "done"}]}}}
        env = {"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": "SECRET"}
        async with open_runtime(scenario=scenario, workspace=sys.argv[1], trace=False,
                                permission_mode="allow-all", env=env) as rt:
            # What a failing provider or tool logs: a line with the key in it.
            get_logger("trio_agents.test").warning("it failed", detail="key SECRET was sent")
            outcome = await rt.run("go")
        print("RESULT", outcome.status, flush=True)

    trio.run(main)
    """
).replace("SECRET", _SECRET)


def _run(tmp_path: Path, setup: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "app.py"
    script.write_text(_APP.replace("SETUP", setup))
    return subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=60,
        check=False,
    )


def test_an_application_that_configures_no_logging_gets_nothing_on_stdout(tmp_path: Path) -> None:
    done = _run(tmp_path, "")
    assert done.returncode == 0, done.stderr
    # Before: structlog's own default printed the runtime's debug lines (bash.started, the
    # warden) on the application's stdout.
    assert done.stdout == "RESULT completed\n"
    # Warnings reach stderr (Python's last-resort handler), masked; nothing below a warning.
    assert "it failed" in done.stderr
    assert _SECRET not in done.stderr
    assert "key *** was sent" in done.stderr
    assert "bash.started" not in done.stderr


def test_an_application_that_configures_logging_gets_the_runtimes_lines_masked(
    tmp_path: Path,
) -> None:
    done = _run(tmp_path, "logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "RESULT completed\n"
    lines = done.stderr.splitlines()
    assert any("trio_agents.bash" in line or "bash.started" in line for line in lines), lines
    assert any("trio_agents.test" in line and "key *** was sent" in line for line in lines)
    assert _SECRET not in done.stderr


def test_an_application_that_configures_structlog_gets_the_lines_its_way(tmp_path: Path) -> None:
    setup = textwrap.dedent(
        """
        import structlog
        structlog.configure(
            processors=[structlog.processors.KeyValueRenderer(key_order=["event"])],
            logger_factory=structlog.PrintLoggerFactory(file=sys.stderr))
        """
    )
    done = _run(tmp_path, setup)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "RESULT completed\n"
    assert "event='bash.started'" in done.stderr
    assert "event='it failed'" in done.stderr
