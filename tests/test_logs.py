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


_UNIT = textwrap.dedent(
    """
    import logging, sys
    from structlog.testing import capture_logs
    from runtime.core._secrets import log_secrets
    from runtime.core import get_logger

    log = get_logger("trio_agents.test").bind(run_id="r1")
    with log_secrets(["SECRET"]):
        try:
            raise RuntimeError("401 Unauthorized for token SECRET")
        except RuntimeError:
            log.exception("tool raised", tool="api")
        # A test suite's capture leaves structlog configured with its defaults: still ours.
        with capture_logs() as captured:
            log.info("captured", k=1)
        print("captured:", [c["event"] for c in captured])
        log.debug("a debug line")
        log.warning("a warning after the capture")
        # The binding methods of a structlog logger, at any level.
        logging.disable(logging.CRITICAL)
        quiet = log.new(a=1).bind(b=2).unbind("b").try_unbind("nothing")
        quiet.info("not shown")
        logging.disable(logging.NOTSET)
        quiet.warning("rebound", c=3)
    """
).replace("SECRET", _SECRET)


def test_exceptions_captures_and_binding_methods_on_the_logging_path(tmp_path: Path) -> None:
    script = tmp_path / "unit.py"
    script.write_text(_UNIT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "captured: ['captured']\n", "nothing of the runtime's on stdout"
    # The traceback once, masked (the stdlib's exception() would append it again, unmasked).
    assert _SECRET not in done.stderr
    assert done.stderr.count("Traceback") == 1
    assert "401 Unauthorized for token ***" in done.stderr
    assert "a debug line" not in done.stderr  # below the default level
    assert "a warning after the capture" in done.stderr
    rebound = next(line for line in done.stderr.splitlines() if "rebound" in line)
    assert "a=1" in rebound
    assert "c=3" in rebound
    assert "b=" not in rebound
    assert "run_id" not in rebound  # new() started from nothing
