"""The live export against a real backend: Arize Phoenix, started here on loopback.

Phoenix is heavy (about 850 MB installed, a minute to start on a small machine), so it is not a
dev dependency: these tests skip, saying why, unless a ``phoenix`` command is on the PATH or
``TRIO_AGENTS_PHOENIX`` names one (``pip install arize-phoenix`` in any virtualenv).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from test_otel import SCENARIO, run_env

from runtime import open_runtime
from runtime.trace._spans import span_id, trace_id

PHOENIX = os.environ.get("TRIO_AGENTS_PHOENIX") or shutil.which("phoenix")

pytestmark = [
    pytest.mark.phoenix,
    pytest.mark.slow,  # Phoenix takes up to a minute to start
    pytest.mark.skipif(
        PHOENIX is None,
        reason="Arize Phoenix is not installed (pip install arize-phoenix, or "
        "TRIO_AGENTS_PHOENIX=/path/to/phoenix)",
    ),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Phoenix server on loopback, with its own empty database; its base URL."""
    assert PHOENIX is not None
    folder = tmp_path_factory.mktemp("phoenix")
    port = free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(folder),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = (folder / "phoenix.log").open("wb")
    proc = subprocess.Popen([PHOENIX, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (folder / "phoenix.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "Phoenix did not start in 3 minutes"
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def phoenix_spans(url: str, trace: str, want: int) -> list[dict[str, Any]]:
    """The spans of one trace as Phoenix's REST API gives them back (it ingests asynchronously)."""
    deadline = time.monotonic() + 30
    while True:
        reply = httpx.get(f"{url}/v1/projects/default/spans", params={"limit": 1000}, timeout=10)
        reply.raise_for_status()
        spans = [s for s in reply.json()["data"] if s["context"]["trace_id"] == trace]
        if len(spans) >= want or time.monotonic() > deadline:
            return spans
        time.sleep(0.5)


async def test_phoenix_shows_the_runs_spans_as_its_tree(
    phoenix: str, workspace: Path, tmp_path: Path
) -> None:
    path = tmp_path / "run.jsonl"
    async with open_runtime(
        scenario=SCENARIO, workspace=workspace, trace=path, permission_mode="allow-all",
        env=run_env(), otlp=f"{phoenix}/v1/traces",
    ) as rt:  # fmt: skip
        outcome = await rt.run("go")
    assert outcome.status == "completed"
    events = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    run_id = events[0]["run_id"]
    agents = {e["agent_id"]: e for e in events if e["type"] == "agent_started"}
    tools = {e["tool_use_id"]: e for e in events if e["type"] == "tool_started"}
    turns = [e for e in events if e["type"] == "turn_finished"]
    spans = phoenix_spans(phoenix, trace_id(run_id), len(agents) + len(tools) + len(turns))
    assert len(spans) == len(agents) + len(tools) + len(turns)
    by_id = {s["context"]["span_id"]: s for s in spans}
    # Phoenix reads the GenAI conventions: agents, tools and model calls by their kind.
    kinds = {s["name"].split()[0]: s["span_kind"] for s in spans}
    assert kinds == {"invoke_agent": "AGENT", "execute_tool": "TOOL", "chat": "LLM"}
    for agent_id, started in agents.items():
        span = by_id[span_id(run_id, agent_id)]
        assert span["name"] == f"invoke_agent {started['name']}"
        parent = started["parent_tool_use_id"]
        assert span["parent_id"] == (span_id(run_id, parent) if parent else None)
    for tool_use_id, started in tools.items():
        span = by_id[span_id(run_id, tool_use_id)]
        assert span["parent_id"] == span_id(run_id, started["agent_id"])
        assert span["attributes"]["gen_ai.tool.call.id"] == tool_use_id
    chats = [s for s in spans if s["span_kind"] == "LLM"]
    assert sum(s["attributes"]["llm.token_count.prompt"] for s in chats) == sum(
        t["input_tokens"] for t in turns
    )
    body = orjson.dumps(spans)
    assert b"sk-live-0123456789abcdef" not in body
