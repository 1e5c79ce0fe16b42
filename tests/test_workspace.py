"""Workspace confinement: every way out is refused, by the resolver and by each file tool."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
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


def test_symlink_loop_inside_is_not_an_escape_but_fails_when_used(layout: Path) -> None:
    (layout / "loop_a").symlink_to("loop_b")
    (layout / "loop_b").symlink_to("loop_a")
    resolved = resolve_in_workspace(layout, "loop_a")
    with pytest.raises(OSError, match=r"(?i)loop|too many"):
        resolved.read_text()


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
