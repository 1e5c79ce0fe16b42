"""Workspace confinement: every way out is refused, by the resolver and by each file tool."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from _toolkit import call, make_ctx

from runtime.core._errors import ToolError
from runtime.core._tool import Tool
from runtime.core._workspace import normalise_target, resolve_in_workspace
from tools._edit import EditTool
from tools._glob import GlobTool
from tools._grep import GrepTool
from tools._read import ReadTool
from tools._write import WriteTool


@pytest.fixture
def layout(workspace: Path) -> Path:
    """A workspace with symlinks leading out of it in every way we can think of.

    ``workspace/../outside`` holds ``secret.txt``, the file every attempt tries to reach.
    """
    outside = workspace.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET\n")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "ok.txt").write_text("fine\n")
    (workspace / "link_out").symlink_to(outside)  # a symlinked folder, absolute target
    (workspace / "file_link").symlink_to(outside / "secret.txt")  # a symlinked file
    (workspace / "dangling").symlink_to(outside / "new.txt")  # a link to a file not yet there
    (workspace / "sub" / "up_link").symlink_to("../../outside")  # relative target
    (workspace / "root_link").symlink_to("/")
    (workspace / "parent_link").symlink_to("..")
    (workspace / "chain1").symlink_to("chain2")  # a chain: inside, then out
    (workspace / "chain2").symlink_to(outside)
    (workspace / "inner").symlink_to("sub")  # inside, then through sub/up_link out
    return workspace


def _escapes(ws: Path) -> list[str]:
    outside = ws.parent / "outside"
    return [
        "../outside/secret.txt",
        "..",
        "sub/../../outside/secret.txt",
        "sub/..",  # lands inside, refused anyway: no '..' at all
        "sub//..//../outside",
        f"{ws}/../outside/secret.txt",
        "/etc/passwd",
        str(outside / "secret.txt"),
        "/",
        "/proc/self/root/etc/passwd",
        "~/.bashrc",
        "~root/.ssh/id_rsa",
        "link_out/secret.txt",
        "./link_out/secret.txt",
        "link_out",
        "link_out/newdir/new.txt",
        "file_link",
        "dangling",
        "sub/up_link/secret.txt",
        "root_link/etc/passwd",
        "parent_link/outside/secret.txt",
        "chain1/secret.txt",
        "inner/up_link/secret.txt",
        f"{ws}/link_out/secret.txt",
        "sub/ok.txt\0/../../outside",
    ]


ESCAPE_IDS = [
    "dotdot-relative",
    "dotdot-alone",
    "dotdot-after-folder",
    "dotdot-landing-inside",
    "dotdot-with-double-slashes",
    "dotdot-in-absolute-path",
    "absolute-etc-passwd",
    "absolute-outside-file",
    "filesystem-root",
    "proc-self-root",
    "tilde-home",
    "tilde-user",
    "symlinked-folder-absolute-target",
    "symlinked-folder-dot-slash",
    "symlinked-folder-itself",
    "symlinked-folder-new-subpath",
    "symlinked-file",
    "dangling-symlink",
    "relative-symlink-up",
    "symlink-to-root",
    "symlink-to-parent",
    "symlink-chain",
    "inside-symlink-then-outside-symlink",
    "absolute-path-through-symlink",
    "nul-byte",
]


def _cases() -> list[Any]:
    return [pytest.param(i, id=name) for i, name in enumerate(ESCAPE_IDS)]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"<dir>"
        for p in folder.rglob("*")
    }


def test_there_are_at_least_fifteen_distinct_escapes(workspace: Path) -> None:
    escapes = _escapes(workspace)
    assert len(set(escapes)) == len(escapes) == len(ESCAPE_IDS) >= 15


@pytest.mark.parametrize("case", _cases())
def test_resolver_refuses_escape(layout: Path, case: int) -> None:
    path = _escapes(layout)[case]
    with pytest.raises(ToolError, match=r"refused|NUL") as info:
        resolve_in_workspace(layout, path)
    assert repr(path) in str(info.value)  # the message names the path it refused


def _args_for(tool: Tool, path: str) -> dict[str, Any]:
    if isinstance(tool, ReadTool):
        return {"path": path}
    if isinstance(tool, WriteTool):
        return {"path": path, "content": "pwned\n"}
    if isinstance(tool, EditTool):
        return {"path": path, "old": "TOP SECRET", "new": "pwned"}
    if isinstance(tool, GlobTool):
        return {"pattern": "**", "path": path}
    return {"pattern": "SECRET", "path": path}


TOOLS = [ReadTool(), WriteTool(), EditTool(), GlobTool(), GrepTool()]


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
@pytest.mark.parametrize("case", _cases())
async def test_file_tool_refuses_escape_and_changes_nothing_outside(
    layout: Path, tool: Tool, case: int
) -> None:
    outside = layout.parent / "outside"
    before = _snapshot(outside)
    path = _escapes(layout)[case]
    with pytest.raises(ToolError, match=r"refused|NUL"):
        await call(tool, _args_for(tool, path), make_ctx(layout))
    assert _snapshot(outside) == before


def test_refusal_messages_say_why(layout: Path) -> None:
    with pytest.raises(ToolError, match=r"'\.\.' is not allowed"):
        resolve_in_workspace(layout, "../x")
    with pytest.raises(ToolError, match="outside the workspace"):
        resolve_in_workspace(layout, "/etc/passwd")
    with pytest.raises(ToolError, match="a symlink leads out of the workspace"):
        resolve_in_workspace(layout, "link_out/secret.txt")
    with pytest.raises(ToolError, match="'~' is not expanded"):
        resolve_in_workspace(layout, "~/x")
    with pytest.raises(ToolError, match="path is empty"):
        resolve_in_workspace(layout, "")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("sub/ok.txt", "sub/ok.txt"),
        ("./sub//ok.txt", "sub/ok.txt"),
        ("inner/ok.txt", "sub/ok.txt"),  # a symlink that stays inside is followed
        ("sub/new/deeper.txt", "sub/new/deeper.txt"),  # need not exist yet
        (".", "."),
        ("new.txt", "new.txt"),
    ],
)
def test_paths_inside_are_accepted(layout: Path, path: str, expected: str) -> None:
    root = Path(os.path.realpath(layout))
    resolved = resolve_in_workspace(layout, path)
    assert resolved == (root / expected if expected != "." else root)


def test_absolute_path_inside_is_accepted(layout: Path) -> None:
    assert resolve_in_workspace(layout, str(layout / "sub" / "ok.txt")) == (
        Path(os.path.realpath(layout)) / "sub" / "ok.txt"
    )


def test_workspace_reached_through_a_symlink_still_confines(layout: Path) -> None:
    alias = layout.parent / "alias"
    alias.symlink_to(layout)
    assert resolve_in_workspace(alias, "sub/ok.txt") == Path(os.path.realpath(layout)) / "sub/ok.txt"
    with pytest.raises(ToolError):
        resolve_in_workspace(alias, "link_out/secret.txt")


async def test_a_symlink_loop_inside_is_a_clear_error_for_every_file_tool(layout: Path) -> None:
    (layout / "loop_a").symlink_to("loop_b")
    (layout / "loop_b").symlink_to("loop_a")
    with pytest.raises(ToolError, match=r"too many levels of symlinks \(a loop\?\)"):
        resolve_in_workspace(layout, "loop_a")
    for tool in TOOLS:
        with pytest.raises(ToolError, match="too many levels of symlinks"):
            await call(tool, _args_for(tool, "loop_a"), make_ctx(layout))


@pytest.mark.parametrize(
    ("given", "workspace", "expected"),
    [
        ("a/b.txt", None, "a/b.txt"),
        ("./a//b.txt", None, "a/b.txt"),
        ("a/./b/", None, "a/b"),
        ("", None, "."),
        (".", None, "."),
        ("/ws/a/b.txt", "/ws", "a/b.txt"),
        ("/ws", "/ws", "."),
        ("/elsewhere/x", "/ws", "/elsewhere/x"),
        ("//etc/x", None, "/etc/x"),
        ("/wsx/y", "/ws", "/wsx/y"),
    ],
)
def test_normalise_target(given: str, workspace: str | None, expected: str) -> None:
    assert normalise_target(given, Path(workspace) if workspace else None) == expected


# --- attacks (issue 15) -----------------------------------------------------------------------


_SWAPPER = """
import os, sys
real, d, outside = sys.argv[1:]
while True:
    for step in (lambda: os.rename(real, d), lambda: os.rename(d, real),
                 lambda: os.symlink(outside, d), lambda: os.unlink(d)):
        try:
            step()
        except OSError:
            pass
"""


@pytest.fixture
def swapping(workspace: Path) -> Iterator[Path]:
    """A workspace whose ``d`` is, by turns, a folder inside and a symlink to a folder outside.

    Another process (as ``bash`` would be) swaps them as fast as it can while the test runs;
    ``outside/f.txt`` is the file no tool call may read or write.
    """
    outside = workspace.parent / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("OUTSIDE\n")
    real = workspace / "real"
    real.mkdir()
    (real / "f.txt").write_text("inside\n")
    swapper = subprocess.Popen(
        [sys.executable, "-c", _SWAPPER, str(real), str(workspace / "d"), str(outside)]
    )
    try:
        yield workspace
    finally:
        swapper.kill()
        swapper.wait()


async def test_a_folder_swapped_for_a_symlink_never_lets_a_call_out(swapping: Path) -> None:
    ctx = make_ctx(swapping)
    outside = swapping.parent / "outside"
    escapes: list[str] = []
    for i in range(200):
        with contextlib.suppress(ToolError):
            out = await call(ReadTool(), {"path": "d/f.txt"}, ctx)
            if "OUTSIDE" in out:
                escapes.append(f"read {i}")
        with contextlib.suppress(ToolError):
            out = await call(GrepTool(), {"pattern": "OUTSID[E]", "path": "d"}, ctx)
            if "OUTSIDE" in out:
                escapes.append(f"grep {i}")
        with contextlib.suppress(ToolError):
            await call(WriteTool(), {"path": "d/w.txt", "content": "x"}, ctx)
        with contextlib.suppress(ToolError):
            await call(EditTool(), {"path": "d/f.txt", "old": "\n", "new": " \n"}, ctx)
        if (outside / "w.txt").exists():
            escapes.append(f"write {i}")
            (outside / "w.txt").unlink()
        if (outside / "f.txt").read_text() != "OUTSIDE\n":
            escapes.append(f"edit {i}")
            (outside / "f.txt").write_text("OUTSIDE\n")
    assert escapes == []


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        (ReadTool(), {"path": "d/f.txt"}),
        (GrepTool(), {"pattern": "OUTSID[E]", "path": "d"}),
        (WriteTool(), {"path": "d/f.txt", "content": "written\n"}),
        (EditTool(), {"path": "d/f.txt", "old": "\n", "new": " edited\n"}),
    ],
    ids=lambda x: getattr(x, "name", ""),
)
async def test_a_swap_right_after_the_check_never_lets_a_call_out(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, tool: Tool, args: dict[str, Any]
) -> None:
    # The race made certain: the moment the path is first looked at (a realpath, or a stat
    # of "d"), "d" becomes a symlink to a folder outside whose f.txt holds the same text.
    outside = workspace.parent / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("OUTSIDE\n")
    (workspace / "d").mkdir()
    (workspace / "d" / "f.txt").write_text("OUTSIDE\n")
    swapped = False
    real_stat, real_realpath = os.stat, os.path.realpath

    def swap() -> None:
        nonlocal swapped
        if not swapped:
            swapped = True
            (workspace / "d").rename(workspace / "was_d")
            (workspace / "d").symlink_to(outside)

    def stat(path: Any, *a: Any, **kw: Any) -> os.stat_result:
        result = real_stat(path, *a, **kw)
        if os.fspath(path).endswith("d"):
            swap()
        return result

    def realpath(path: Any, *a: Any, **kw: Any) -> str:
        result = real_realpath(path, *a, **kw)
        if "/d" in os.fspath(path):
            swap()
        return result

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os.path, "realpath", realpath)
    with contextlib.suppress(ToolError):
        out = await call(tool, args, make_ctx(workspace))
        assert "OUTSIDE" not in out
    monkeypatch.undo()
    assert swapped
    assert (outside / "f.txt").read_text() == "OUTSIDE\n"


@pytest.mark.parametrize(
    "path",
    ["x" * 300, "sub/" + "x" * 300 + "/f.txt", "sub/" + "y/" * 3000 + "f.txt", "a\ud800b"],
)
@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
async def test_system_errors_on_a_path_are_clear_tool_errors(
    layout: Path, tool: Tool, path: str
) -> None:
    with pytest.raises(ToolError, match=r"too long|too deep|not a valid file name"):
        await call(tool, _args_for(tool, path), make_ctx(layout))


@pytest.mark.parametrize(
    "path",
    [".trio-agents/traces/run.jsonl", "t/run.jsonl", f"{'sub'}/.trio-agents/sessions/s.json"],
)
@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
async def test_the_runtimes_own_files_are_off_limits_to_every_file_tool(
    layout: Path, tool: Tool, path: str
) -> None:
    traces = layout / ".trio-agents" / "traces"
    traces.mkdir(parents=True)
    (traces / "run.jsonl").write_text('{"SECRET": 1}\n')
    (layout / "sub" / ".trio-agents" / "sessions").mkdir(parents=True)
    (layout / "sub" / ".trio-agents" / "sessions" / "s.json").write_text("SECRET\n")
    (layout / "t").symlink_to(".trio-agents/traces")
    with pytest.raises(ToolError, match=r"\.trio-agents/ holds the runtime's own files"):
        await call(tool, _args_for(tool, path), make_ctx(layout))
    assert (traces / "run.jsonl").read_text() == '{"SECRET": 1}\n'


async def test_searches_of_the_workspace_leave_the_runtimes_own_files_out(layout: Path) -> None:
    (layout / ".trio-agents" / "traces").mkdir(parents=True)
    (layout / ".trio-agents" / "traces" / "run.jsonl").write_text("SECRET\n")
    ctx = make_ctx(layout)
    assert ".trio-agents" not in await call(GlobTool(), {"pattern": "**"}, ctx)
    assert "run.jsonl" not in await call(GlobTool(), {"pattern": ".trio-agents/**"}, ctx)
    assert await call(GrepTool(), {"pattern": "SECRET", "path": "sub"}, ctx) == (
        "no matches for 'SECRET'"
    )
    assert ".trio-agents" not in await call(GrepTool(), {"pattern": "SECRET"}, ctx)


async def test_a_proc_self_root_spelling_is_written_where_it_leads(layout: Path) -> None:
    ctx = make_ctx(layout)
    real = ctx.workspace  # resolved
    await call(WriteTool(), {"path": f"/proc/self/root{real}/sub/p.txt", "content": "p\n"}, ctx)
    assert (layout / "sub" / "p.txt").read_text() == "p\n"
    with pytest.raises(ToolError, match="outside the workspace"):
        await call(ReadTool(), {"path": "/proc/self/root/etc/passwd"}, ctx)


# --- what held (issue 15, "Keep") -------------------------------------------------------------


async def test_a_write_breaks_a_hard_link_and_never_changes_the_outside_file(
    layout: Path,
) -> None:
    outside = layout.parent / "outside" / "secret.txt"
    os.link(outside, layout / "hard.txt")
    ctx = make_ctx(layout)
    await call(WriteTool(), {"path": "hard.txt", "content": "overwritten\n"}, ctx)
    assert outside.read_text() == "TOP SECRET\n"
    assert (layout / "hard.txt").read_text() == "overwritten\n"
    assert os.stat(layout / "hard.txt").st_nlink == 1
    os.link(outside, layout / "hard2.txt")
    await call(EditTool(), {"path": "hard2.txt", "old": "TOP", "new": "NOT"}, ctx)
    assert outside.read_text() == "TOP SECRET\n"


async def test_reading_through_a_hard_link_is_the_documented_limit(layout: Path) -> None:
    # A hard link is the same file under a second name: no path check can tell it from any
    # other file. Documented in docs/reliability.md (tools refusing st_nlink > 1 would break
    # uv and pnpm trees, and git's hard-linked clones); the sandbox closes it for bash.
    outside = layout.parent / "outside" / "secret.txt"
    os.link(outside, layout / "hard.txt")
    out = await call(ReadTool(), {"path": "hard.txt"}, make_ctx(layout))
    assert "TOP SECRET" in out


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
async def test_a_fifo_never_blocks_a_file_tool(layout: Path, tool: Tool) -> None:
    os.mkfifo(layout / "pipe")
    with trio.fail_after(5), contextlib.suppress(ToolError):
        await call(tool, _args_for(tool, "pipe"), make_ctx(layout))


async def test_a_write_too_deep_makes_no_folder_on_the_way(layout: Path) -> None:
    before = sorted(os.listdir(layout))
    with pytest.raises(ToolError, match="too deep"):
        await call(WriteTool(), {"path": "deep/" + "y/" * 3000 + "f.txt", "content": "x"},
                   make_ctx(layout))
    assert sorted(os.listdir(layout)) == before
