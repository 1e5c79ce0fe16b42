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
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
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
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
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


def _python(code: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
    )


def test_structlog_is_imported_only_for_a_line_that_goes_out() -> None:
    # Below its level a line is dropped by the standard library's check alone: structlog (and
    # the asyncio and rich it imports) costs tens of milliseconds at every start.
    done = _python(
        """
        import sys
        from runtime.core import get_logger
        from runtime.core._lazylog import LazyLogger

        log = LazyLogger(get_logger("trio_agents.x"), run_id="r").bind(agent_id="a")
        log.debug("below"); log.info("below too")
        print("structlog" in sys.modules, "rich" in sys.modules, "asyncio" in sys.modules)
        log.warning("it goes out", detail=2)
        print("structlog" in sys.modules)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "False", "True"]
    assert "below" not in done.stderr
    out = next(line for line in done.stderr.splitlines() if "it goes out" in line)
    assert "detail=2" in out
    assert "agent_id=a" in out


def test_a_quiet_command_imports_no_structlog_and_logs_nothing(tmp_path: Path) -> None:
    scenario = tmp_path / "s.json"
    scenario.write_text('{"agents": {"main": {"turns": [{"text": "done"}]}}}')
    done = _python(
        """
        import sys
        sys.argv = ["trio-agents", "run", "go", "--scenario", sys.argv[1], "--no-trace",
                    "--workspace", sys.argv[2]]
        from runtime.cli._main import main
        code = main()
        print(code, "structlog" in sys.modules, "rich" in sys.modules, file=sys.stderr)
        """,
        str(scenario),
        str(tmp_path),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1].split() == ["0", "False", "False"], done.stderr
    assert "done" in done.stdout


def test_a_quiet_command_after_a_debug_one_in_one_process_logs_nothing() -> None:
    # structlog configured to print by the first: the second configures it to drop again.
    done = _python(
        """
        from runtime.cli._options import setup_logging
        from runtime.core import get_logger

        setup_logging(debug=True)
        get_logger("trio_agents.x").debug("debug on")
        setup_logging(debug=False)
        get_logger("trio_agents.x").error("quiet now")
        import structlog
        structlog.get_logger("other").error("quiet too")
        """
    )
    assert done.returncode == 0, done.stderr
    assert "debug on" in done.stderr
    assert "quiet" not in done.stderr + done.stdout


_HALF_IMPORTED = r'''
import importlib.abc, importlib.machinery, sys, threading, time

started, go = threading.Event(), threading.Event()

class Paused(importlib.abc.MetaPathFinder):
    """structlog's import stops halfway (in sys.modules, not yet run) until `go`."""
    def find_spec(self, name, path=None, target=None):
        if name != "structlog":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        real = spec.loader.exec_module
        def exec_module(module):
            started.set()
            go.wait(10)
            real(module)
        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, Paused())
from runtime._logs import get_logger

importer = threading.Thread(target=lambda: __import__("structlog"))
importer.start()
started.wait(10)
errors = []
def log():
    try:
        get_logger("trio_agents.test").warning("a line while structlog is half imported")
    except BaseException as exc:
        errors.append(repr(exc))
logger = threading.Thread(target=log)
logger.start()
time.sleep(0.3)
go.set()
importer.join(10)
logger.join(10)
print(errors)
'''


def test_a_line_logged_while_another_thread_imports_structlog_waits_for_it() -> None:
    """A Ray host's tool thread logged while the main thread was importing structlog: the
    logger read the half-made module from sys.modules and the tool failed ("partially
    initialized module 'structlog' has no attribute 'is_configured'")."""
    done = subprocess.run([sys.executable, "-c", _HALF_IMPORTED], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert "a line while structlog is half imported" in done.stderr
