"""The layers (docs/architecture.md, "Layers") hold, and the contract that keeps them bites."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=cwd, capture_output=True,
                          text=True, check=False, timeout=120)


def _copy_project(tmp_path: Path) -> Path:
    dest = tmp_path / "project"
    dest.mkdir()
    shutil.copy(ROOT / "pyproject.toml", dest)
    for package in ("runtime", "tools"):
        shutil.copytree(ROOT / package, dest / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_the_layer_contract_is_kept() -> None:
    out = _lint_imports(ROOT)
    assert out.returncode == 0, out.stdout[-3000:]


def test_a_wrong_way_import_breaks_the_contract(tmp_path: Path) -> None:
    project = _copy_project(tmp_path)
    bus = project / "runtime" / "core" / "_bus.py"
    # core reaching up into the command line: the kind of import the layers forbid.
    bus.write_text(bus.read_text() + "\n\ndef _view() -> None:\n    from runtime.cli import _live\n")
    out = _lint_imports(project)
    assert out.returncode == 1
    assert "runtime.core is not allowed to import runtime.cli" in out.stdout


def test_tools_reaching_into_a_private_core_module_breaks_the_contract(tmp_path: Path) -> None:
    project = _copy_project(tmp_path)
    bash = project / "tools" / "_bash.py"
    bash.write_text(bash.read_text() + "\n\nfrom runtime.core._bus import EventBus  # noqa\n")
    out = _lint_imports(project)
    assert out.returncode == 1
    assert "tools" in out.stdout
    assert "runtime.core._bus" in out.stdout


def test_no_module_imports_itself_through_a_cycle() -> None:
    # Imports inside functions count too; only imports a type checker alone sees do not.
    graph = grimp.build_graph("runtime", "tools", cache_dir=None,
                              exclude_type_checking_imports=True)
    modules = sorted(graph.modules)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) & set(modules) for m in modules}
    cycles: list[list[str]] = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    counter = 0
    # Tarjan's strongly connected components, iteratively (no recursion limit to meet).
    for start in modules:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    assert cycles == []


def test_every_module_appears_in_the_architecture_table() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text[text.index("## Modules"):]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    missing = []
    for path in sorted([*ROOT.glob("runtime/**/*.py"), *ROOT.glob("tools/*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if path.name == "__init__.py" and rel != "runtime/__init__.py":
            continue
        folder = rel.rsplit("/", 1)[0] + "/"
        if not any(rel in row or (folder in row and f"`{path.name}`" in row.replace(
                f"`{folder}", "`")) or (folder in row and f"{path.name}`" in row) for row in rows):
            missing.append(rel)
    assert missing == [], "docs/architecture.md, Modules: add these"
