"""No function in runtime/ or tools/ runs over 150 lines (house style: one that does not fit a
screen is usually two; 150 is the hard ceiling)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 150
# Being split by the settings-schema work (one schema for every setting; open_runtime's set-up
# split into a plan and the opening of its parts): they leave this list with it.
EXEMPT = {"runtime/wiring/_open.py", "runtime/cli/_options.py"}


def long_functions(
    root: Path, max_lines: int, *, base: Path = ROOT
) -> list[tuple[str, int, str, int]]:
    """``(path from base, line, name, length)`` of each function under *root* longer than
    *max_lines*, its length being ``end_lineno - lineno`` (decorators not counted)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(base).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), rel)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno
                if length > max_lines:
                    found.append((rel, node.lineno, node.name, length))
    return found


def test_no_function_is_over_150_lines() -> None:
    found = [
        f"{path}:{line} {name}: {length} lines"
        for package in ("runtime", "tools")
        for path, line, name, length in long_functions(ROOT / package, MAX_LINES)
        if path not in EXEMPT
    ]
    assert not found, "\n".join(found)


def test_the_count_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "long.py").write_text(f"def long():\n{body}\n\n\ndef short():\n    pass\n")
    longest = [("long.py", 1, "long", MAX_LINES)]
    assert long_functions(tmp_path, MAX_LINES - 1, base=tmp_path) == longest
    assert long_functions(tmp_path, MAX_LINES, base=tmp_path) == []
