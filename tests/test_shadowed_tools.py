"""A user's own ``tools.py`` or ``tools/`` beside their script does not break the runtime, and
the runtime does not take the name from them (runtime/_tools.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

MAIN = textwrap.dedent(
    """
    import sys
    import trio
    from runtime import open_runtime
    IMPORTS = 0
    {early}

    SCENARIO = {{"agents": {{"main": {{"turns": [
        {{"tool_calls": [{{"name": "glob", "input": {{"pattern": "*.py"}}}}]}},
        {{"text": "listed"}}]}}}}}}

    async def main():
        before = IMPORTS
        async with open_runtime(scenario=SCENARIO, workspace=".", trace=False) as rt:
            outcome = await rt.run("list")
        after = IMPORTS
        import tools
        print(outcome.status, outcome.result, before, after, tools.helper(), IMPORTS)

    trio.run(main)
    """
)


@pytest.mark.parametrize("early", [True, False], ids=["imported-first", "imported-after"])
@pytest.mark.parametrize("shape", ["module", "package"])
def test_a_project_with_its_own_tools_module(tmp_path: Path, shape: str, early: bool) -> None:
    body = "import sys\nsys.modules['__main__'].IMPORTS += 1\ndef helper():\n    return 42\n"
    if shape == "module":
        (tmp_path / "tools.py").write_text(body)
    else:
        (tmp_path / "tools").mkdir()
        (tmp_path / "tools" / "__init__.py").write_text(body)
    (tmp_path / "main.py").write_text(MAIN.format(early="import tools" if early else ""))
    out = subprocess.run([sys.executable, "main.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, check=False,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    # The run used the built-in glob; the user's module was imported by the user alone, once.
    seen = "1" if early else "0"
    assert out.stdout.split() == ["completed", "listed", seen, seen, "42", "1"]
