"""The public surface: each package's ``__all__`` is exactly what it exports, sorted."""

from __future__ import annotations

import importlib
import inspect
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("name", "extra"),
    [("runtime", ["__version__"]),
     *((f"runtime.{p}", []) for p in ("core", "mcp", "providers", "project", "trace", "cluster",
                                        "wiring", "cli"))],
)
def test_lazy_package_exports_its_all_and_nothing_else(name: str, extra: list[str]) -> None:
    package = importlib.import_module(name)

    assert list(package.__all__) == sorted(package.__all__)
    for public in package.__all__:
        assert getattr(package, public) is not None
    assert sorted(dir(package)) == sorted([*package.__all__, *extra])
    source = (ROOT / name.replace(".", "/") / "__init__.py").read_text()
    typed = set(re.findall(r"^    from [\w.]+ import (\w+) as \1$", source, re.M))
    assert typed == set(package.__all__), "type checkers see the same names"
    with pytest.raises(AttributeError):
        _ = package.not_a_name


def test_importing_runtime_does_not_import_trio() -> None:
    code = "import runtime, sys; print('trio' in sys.modules, 'httpx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.split() == ["False", "False"]


def test_the_commands_help_imports_neither_trio_nor_structlog() -> None:
    # What `trio-agents --help` (and every error line) loads stays small: the masking of log
    # lines once pulled the actors layer, trio and structlog into it (60 -> 180 ms).
    code = textwrap.dedent(
        """
        import contextlib, io, sys
        sys.argv = ["trio-agents", "--help"]
        from runtime.cli._main import main
        import runtime.core._secrets
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                main()
            except SystemExit:
                pass
        print("trio" in sys.modules, "structlog" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("name", ["runtime.actors", "runtime.replay", "tools"])
def test_all_lists_exactly_the_public_names_sorted(name: str) -> None:
    module = importlib.import_module(name)
    public = {
        n for n, v in vars(module).items()
        if not n.startswith("_") and not isinstance(v, type(sys)) and n != "annotations"
    }
    assert list(module.__all__) == sorted(module.__all__)
    assert set(module.__all__) == public


def test_ci_runs_exactly_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```sh\n(.+?)\n```", readme)
    assert "trio-agents demo" in commands[0]
    assert "pytest" in commands[1]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert commands[1] in ci


def test_python_m_runtime_is_the_cli() -> None:
    out = subprocess.run([sys.executable, "-m", "runtime", "--help"], capture_output=True,
                         text=True, check=False, timeout=60)
    assert out.returncode == 0
    assert "trio-agents" in out.stdout


def test_the_readme_python_example_runs(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    code = re.search(r"```python\n(.+?)\n```", readme, re.S)
    assert code is not None
    script = tmp_path / "example.py"
    script.write_text(code.group(1))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         cwd=tmp_path, check=False, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("completed Both parts are done.")
    assert (tmp_path / "run.jsonl").exists()


@pytest.mark.parametrize("name", ["runtime", "tools"])
def test_public_names_report_their_public_module(name: str) -> None:
    package = importlib.import_module(name)
    for public in package.__all__:
        value = getattr(package, public)
        if isinstance(value, type) or inspect.isfunction(value):
            # The tool interface tools re-exports (tools.Tool) is runtime's: runtime.Tool.
            home = "runtime" if hasattr(importlib.import_module("runtime"), public) else name
            assert value.__module__ == home, public


def test_a_public_error_prints_and_pickles_under_its_public_name() -> None:
    import pickle
    import traceback

    from runtime import ConfigError, TextDelta

    try:
        raise ConfigError("bad settings")
    except ConfigError as exc:
        text = "".join(traceback.format_exception_only(exc))
    assert text.startswith("runtime.ConfigError: bad settings")
    again = pickle.loads(pickle.dumps(ConfigError("x")))
    assert type(again) is ConfigError
    event = TextDelta(seq=1, ts=0.0, run_id="r", agent_id="a", parent_tool_use_id=None, text="t")
    assert pickle.loads(pickle.dumps(event)) == event


def test_runtime_and_agent_handle_are_final() -> None:
    from runtime import AgentHandle, Runtime

    assert getattr(Runtime, "__final__", False)
    assert getattr(AgentHandle, "__final__", False)


def test_type_hints_of_public_classes_still_resolve() -> None:
    import typing

    import runtime

    for public in runtime.__all__:
        value = getattr(runtime, public)
        if isinstance(value, type) and hasattr(value, "__attrs_attrs__"):
            assert typing.get_type_hints(value), public


def test_every_name_imported_from_a_package_is_one_it_exports() -> None:
    """A lazy package answers any attribute to a type checker (its ``__getattr__``), so this
    test is what catches ``from runtime.trace import not_exported`` before a user does."""
    import ast

    missing = []
    for path in sorted([*(ROOT / "runtime").rglob("*.py"), *(ROOT / "tools").rglob("*.py")]):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            if not node.module.startswith(("runtime", "tools")) or "._" in node.module:
                continue
            package = importlib.import_module(node.module)
            if not hasattr(package, "__path__"):
                continue  # a module, not a package
            exported = set(getattr(package, "__all__", ()))
            missing += [f"{path.relative_to(ROOT)}:{node.lineno}: {node.module}.{a.name}"
                        for a in node.names if a.name not in exported and a.name != "*"]
    assert missing == []


def test_a_run_whose_output_is_not_a_terminal_imports_neither_rich_nor_the_converter(
    tmp_path: Path,
) -> None:
    # structlog imports rich for tracebacks the command line never draws, the run's summary
    # line once came from the renderer, and the events' converter was built at import: ~70 ms
    # of CPU at every start (bench/README.md, "Resume").
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({"agents": {"main": {"turns": [{"text": "done"}]}}}))
    code = textwrap.dedent(
        f"""
        import sys
        sys.argv = ["trio-agents", "run", "go", "--scenario", {str(scenario)!r},
                    "--workspace", {str(tmp_path)!r}, "--trace", {str(tmp_path / "t.jsonl")!r}]
        from runtime.cli._main import main
        code = main()
        import runtime.core._events as events
        print(code, "rich" in sys.modules, bool(events._CONVERTER), file=sys.stderr)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60, cwd=tmp_path)
    assert out.stderr.splitlines()[-1].split() == ["0", "False", "False"], out.stderr
    assert "done" in out.stdout
