"""The Python API of a tree (issue 21, item 17): it renders itself as ``trace show`` does, rich
can print it, a cancelled sub-agent's node says why, and ``open_runtime`` documents itself."""

from __future__ import annotations

import io
import pydoc
import sys
from pathlib import Path

import trio
from rich.console import Console

from runtime import Event, decode_event, open_runtime
from runtime.trace._tree import TraceTree

SCENARIO = {"agents": {
    "main": {"turns": [
        {"tool_calls": [
            {"name": "agent", "input": {"description": "slow", "prompt": "s", "agent": "slow"}},
            {"name": "agent", "input": {"description": "ok", "prompt": "o", "agent": "ok"}}]},
        {"text": "done"}]},
    "slow": {"tools": ["bash"], "turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": "sleep 30"}}]}, {"text": "never"}]},
    "ok": {"turns": [{"text": "fine"}]},
}}


async def _run(tmp_path: Path) -> Path:
    trace = tmp_path / "t.jsonl"
    started = trio.Event()

    def tap(event: Event) -> None:
        if event.type == "tool_started" and getattr(event, "name", "") == "bash":
            started.set()

    async with open_runtime(scenario=SCENARIO, workspace=tmp_path, trace=trace,
                            permission_mode="allow-all", on_event=tap) as rt:
        handle = await rt.start("go")
        with trio.fail_after(10):
            await started.wait()
        await rt.cancel("tu-1.1", "not needed", by="user")
        await handle.wait()
    return trace


async def test_a_tree_renders_as_trace_show_and_rich_prints_it(tmp_path: Path) -> None:
    trace = await _run(tmp_path)
    tree = TraceTree.from_events(decode_event(line) for line in trace.read_bytes().splitlines())
    with trio.fail_after(60):
        proc = await trio.run_process(
            [sys.executable, "-m", "runtime", "trace", "show", str(trace)], capture_stdout=True
        )
    shown = proc.stdout.decode()
    assert str(tree) == tree.render() == shown.rstrip("\n")
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(tree)
    assert [line.rstrip() for line in out.getvalue().splitlines()] == shown.splitlines()
    [root] = tree.roots
    call = root.children[0]
    assert str(call).splitlines()[0].startswith("⊘ agent: slow: slow tu-1.1 cancelled")
    assert "slow agent-2 cancelled" in str(call)
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(call)
    assert "slow agent-2" in out.getvalue()


async def test_a_cancelled_sub_agent_carries_the_reason_of_its_call(tmp_path: Path) -> None:
    trace = await _run(tmp_path)
    tree = TraceTree.from_events(decode_event(line) for line in trace.read_bytes().splitlines())
    slow = tree.agents["agent-2"]
    assert slow.status == "cancelled"
    assert slow.cancel is not None
    assert (slow.cancel.reason, slow.cancel.by) == ("not needed", "user")


def test_open_runtime_reads_as_an_async_context_manager_and_documents_its_arguments() -> None:
    import inspect

    text = pydoc.render_doc(open_runtime, renderer=pydoc.plaintext)
    assert "async with open_runtime(" in text
    documented = inspect.getdoc(open_runtime) or ""
    for name in inspect.signature(open_runtime).parameters:
        if name in ("extra_tools", "allow", "deny", "allow_env"):  # told with their pair
            assert f"*{name}*" in documented, name
        else:
            assert f"{name}:" in documented, name
