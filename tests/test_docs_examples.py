"""Every Python example of the API pages runs, and prints what its comments say.

An example is a fenced ``python`` block that calls ``trio.run`` (one whose first line is
``# needs: …`` wants a model service and is left out); each ``print(...)  # text`` line in it
promises that output, in order.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["docs/python-api.md"]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_PROMISE = re.compile(r"^\s*print\(.*\)\s+#\s*(.+?)\s*$", re.M)


def _examples() -> list[tuple[str, int, str]]:
    found = []
    for page in PAGES:
        text = (ROOT / page).read_text()
        for n, match in enumerate(_BLOCK.finditer(text), 1):
            # A program that needs a model service says so on its first line; it is not run.
            if "trio.run(" in match.group(1) and not match.group(1).startswith("# needs:"):
                found.append((page, n, match.group(1)))
    return found


def test_the_pages_have_examples() -> None:
    assert len(_examples()) >= 4


@pytest.mark.parametrize(("page", "number", "code"), _examples(),
                         ids=[f"{p}#{n}" for p, n, _ in _examples()])
def test_an_example_prints_what_it_promises(page: str, number: int, code: str,
                                           tmp_path: Path) -> None:
    promised = _PROMISE.findall(code)
    assert promised, f"{page} example {number} promises no output"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == promised
