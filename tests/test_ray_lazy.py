"""The ``ray`` placement costs nothing to a run that never places a subtree on Ray.

Apart from ``test_ray.py``, whose every test shares one running cluster: here none may exist.
A run whose agent types include one placed on ``ray`` but whose agents never start such a
sub-agent neither imports Ray (seconds on a busy machine) nor starts a cluster; the first
subtree placed there does both (``test_ray.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import sys, trio
from runtime import open_runtime

async def main():
    async with open_runtime(scenario=sys.argv[1], trace=False, workspace=sys.argv[2]) as rt:
        outcome = await rt.run("go")
    print(outcome.status, "ray" in sys.modules)

trio.run(main)
"""


def test_a_run_that_places_nothing_on_ray_neither_imports_ray_nor_starts_a_cluster(
    tmp_path: Path,
) -> None:
    pytest.importorskip("ray")
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({"agents": {
        "main": {"turns": [{"text": "nothing to place"}]},
        "far": {"placement": "ray", "turns": [{"text": "never asked"}]}}}))
    proc = subprocess.run([sys.executable, "-c", PROBE, str(scenario), str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["completed", "False"]
