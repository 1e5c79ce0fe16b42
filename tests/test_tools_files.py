"""The file tools: read, write, edit, glob, grep — happy paths and failure modes."""

from __future__ import annotations

import os
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from _toolkit import call, make_ctx

from runtime.core._errors import ConfigError, ToolError, ToolInputError
from runtime.core._globs import compile_glob
from runtime.core._tool import Tool
from tests.harness import loop_ticks
from tools._bash import BashTool
from tools._builtins import file_and_shell_tools
from tools._edit import EditTool
from tools._glob import GlobTool, run_in_thread_with_stop
from tools._grep import GrepTool
from tools._read import ReadTool
from tools._write import WriteTool

# --- read -------------------------------------------------------------------------------------


async def test_read_numbers_lines_like_cat_n(workspace: Path) -> None:
    (workspace / "a.txt").write_text("first\nsecond\n")
    out = await call(ReadTool(), {"path": "a.txt"}, make_ctx(workspace))
    assert out == "     1\tfirst\n     2\tsecond"


async def test_read_last_line_without_newline_is_a_line(workspace: Path) -> None:
    (workspace / "a.txt").write_text("one\ntwo")
    assert await call(ReadTool(), {"path": "a.txt"}, make_ctx(workspace)) == "     1\tone\n     2\ttwo"


async def test_read_offset_and_limit_with_a_note_when_more_remain(workspace: Path) -> None:
    (workspace / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = await call(ReadTool(), {"path": "a.txt", "offset": 3, "limit": 2}, make_ctx(workspace))
    assert out == (
        "     3\tline 3\n     4\tline 4\n[6 more lines: 5-10 of 10; continue with offset=5]"
    )


async def test_read_default_limit_comes_from_the_limits(workspace: Path) -> None:
    (workspace / "a.txt").write_text("a\nb\nc\nd\n")
    out = await call(ReadTool(), {"path": "a.txt"}, make_ctx(workspace, read_default_lines=3))
    assert out.splitlines()[-1] == "[1 more lines: 4-4 of 4; continue with offset=4]"


async def test_read_to_the_end_has_no_note(workspace: Path) -> None:
    (workspace / "a.txt").write_text("a\nb\nc\n")
    out = await call(ReadTool(), {"path": "a.txt", "offset": 2}, make_ctx(workspace))
    assert out == "     2\tb\n     3\tc"


async def test_read_offset_past_the_end_is_an_error(workspace: Path) -> None:
    (workspace / "a.txt").write_text("a\nb\n")
    with pytest.raises(ToolError, match=r"input\.offset: 5 is past the end of a\.txt \(2 lines\)"):
        await call(ReadTool(), {"path": "a.txt", "offset": 5}, make_ctx(workspace))


async def test_read_stops_at_the_output_limit_on_a_line_boundary(workspace: Path) -> None:
    (workspace / "a.txt").write_text("x" * 40 + "\n" + "y" * 40 + "\n" + "z\n")
    out = await call(ReadTool(), {"path": "a.txt"}, make_ctx(workspace, max_output_chars=60))
    assert out.splitlines() == [
        "     1\t" + "x" * 40,
        "[2 more lines: 2-3 of 3; continue with offset=2]",
    ]


async def test_read_cuts_very_long_lines(workspace: Path) -> None:
    (workspace / "a.txt").write_text("q" * 5000 + "\n")
    out = await call(ReadTool(), {"path": "a.txt"}, make_ctx(workspace))
    assert out.endswith("q… [line cut: 5000 chars]")


async def test_read_shows_crlf_lines_without_the_cr(workspace: Path) -> None:
    (workspace / "a.txt").write_bytes(b"one\r\ntwo\r\n")
    assert await call(ReadTool(), {"path": "a.txt"}, make_ctx(workspace)) == "     1\tone\n     2\ttwo"


async def test_read_replaces_undecodable_bytes(workspace: Path) -> None:
    (workspace / "a.txt").write_bytes(b"caf\xe9\n")
    assert await call(ReadTool(), {"path": "a.txt"}, make_ctx(workspace)) == "     1\tcaf\ufffd"


async def test_read_empty_file_says_so(workspace: Path) -> None:
    (workspace / "e.txt").write_text("")
    assert await call(ReadTool(), {"path": "e.txt"}, make_ctx(workspace)) == "(e.txt is empty)"


async def test_read_missing_file(workspace: Path) -> None:
    with pytest.raises(ToolError, match=r"^no such file: nope/missing\.txt$"):
        await call(ReadTool(), {"path": "nope/missing.txt"}, make_ctx(workspace))


async def test_read_folder_is_an_error(workspace: Path) -> None:
    (workspace / "d").mkdir()
    with pytest.raises(ToolError, match=r"^d is a folder"):
        await call(ReadTool(), {"path": "d"}, make_ctx(workspace))


async def test_read_refuses_binary_files(workspace: Path) -> None:
    (workspace / "b.bin").write_bytes(b"PNG\x00\x01\x02" + b"x" * 100)
    with pytest.raises(ToolError, match=r"b\.bin looks like a binary file"):
        await call(ReadTool(), {"path": "b.bin"}, make_ctx(workspace))


async def test_read_nul_after_the_first_8kb_is_still_text(workspace: Path) -> None:
    (workspace / "late.txt").write_bytes(b"a" * 9000 + b"\x00\n")
    out = await call(ReadTool(), {"path": "late.txt"}, make_ctx(workspace))
    assert out.startswith("     1\taaa")


async def test_read_refuses_files_over_the_size_limit(workspace: Path) -> None:
    (workspace / "big.txt").write_text("x" * 100)
    with pytest.raises(ToolError, match=r"big\.txt is too big to read: 100 bytes \(limit 10\)"):
        await call(ReadTool(), {"path": "big.txt"}, make_ctx(workspace, read_max_bytes=10))


async def test_read_refuses_a_fifo_without_blocking(workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    with trio.fail_after(2), pytest.raises(ToolError, match="not a regular file"):
        await call(ReadTool(), {"path": "pipe"}, make_ctx(workspace))


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({}, "input.path"),
        ({"path": ""}, "input.path"),
        ({"path": "a", "offset": 0}, "input.offset"),
        ({"path": "a", "limit": 0}, "input.limit"),
        ({"path": "a", "limit": 1.5}, "input.limit"),
        ({"path": "a", "lines": 3}, "lines"),
    ],
)
async def test_read_bad_input_names_the_field(
    workspace: Path, args: dict[str, Any], field: str
) -> None:
    with pytest.raises(ToolInputError, match=field.replace(".", r"\.")):
        await call(ReadTool(), args, make_ctx(workspace))


# --- write ------------------------------------------------------------------------------------


async def test_write_creates_folders_and_reports_bytes_and_lines(workspace: Path) -> None:
    out = await call(
        WriteTool(), {"path": "new/deep/f.txt", "content": "héllo\nworld"}, make_ctx(workspace)
    )
    assert out == "created new/deep/f.txt: 12 bytes, 2 lines"
    assert (workspace / "new/deep/f.txt").read_text() == "héllo\nworld"


async def test_write_overwrites_and_keeps_the_permission_bits(workspace: Path) -> None:
    target = workspace / "run.sh"
    target.write_text("old\n")
    target.chmod(0o750)
    out = await call(WriteTool(), {"path": "./run.sh", "content": "new\n"}, make_ctx(workspace))
    assert out == "overwrote run.sh: 4 bytes, 1 lines"
    assert target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o750


async def test_write_new_file_gets_umask_permissions(workspace: Path) -> None:
    await call(WriteTool(), {"path": "f.txt", "content": ""}, make_ctx(workspace))
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((workspace / "f.txt").stat().st_mode) == 0o666 & ~umask


async def test_write_leaves_no_temporary_file(workspace: Path) -> None:
    await call(WriteTool(), {"path": "f.txt", "content": "x"}, make_ctx(workspace))
    assert os.listdir(workspace) == ["f.txt"]


async def test_write_failure_keeps_the_old_file_and_removes_the_temporary(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = workspace / "f.txt"
    target.write_text("old\n")

    def broken_replace(src: str, dst: str, **dir_fds: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(ToolError, match=r"cannot write f\.txt: No space left on device"):
        await call(WriteTool(), {"path": "f.txt", "content": "new\n"}, make_ctx(workspace))
    assert target.read_text() == "old\n"
    assert os.listdir(workspace) == ["f.txt"]


async def test_a_failed_write_to_a_deep_path_removes_the_folders_it_made(
    workspace: Path,
) -> None:
    """The name is too long for the file system: the write fails after making a/b/c, and
    takes them away again; a folder that was there before (a) stays, with what it holds."""
    (workspace / "a").mkdir()
    (workspace / "a" / "keep.txt").write_text("mine\n")
    with pytest.raises(ToolError, match="a name in it is too long"):
        await call(WriteTool(), {"path": "a/b/c/d/" + "n" * 300, "content": "x"},
                   make_ctx(workspace))
    assert sorted(os.listdir(workspace)) == ["a"]
    assert sorted(os.listdir(workspace / "a")) == ["keep.txt"]


async def test_a_failed_write_leaves_a_folder_someone_filled_meanwhile(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_replace(src: str, dst: str, **dir_fds: int) -> None:
        (workspace / "x" / "y" / "theirs.txt").write_text("another writer's\n")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(ToolError, match="No space left on device"):
        await call(WriteTool(), {"path": "x/y/z/f.txt", "content": "new\n"},
                   make_ctx(workspace))
    assert not (workspace / "x" / "y" / "z").exists()  # ours, empty: removed
    assert (workspace / "x" / "y" / "theirs.txt").exists()  # not empty: kept, with x


async def test_write_through_an_inside_symlink_writes_the_target_and_keeps_the_link(
    workspace: Path,
) -> None:
    (workspace / "real.txt").write_text("old")
    (workspace / "alias.txt").symlink_to("real.txt")
    await call(WriteTool(), {"path": "alias.txt", "content": "new"}, make_ctx(workspace))
    assert (workspace / "alias.txt").is_symlink()
    assert (workspace / "real.txt").read_text() == "new"


async def test_write_to_a_folder_is_an_error(workspace: Path) -> None:
    (workspace / "d").mkdir()
    with pytest.raises(ToolError, match=r"^d is a folder"):
        await call(WriteTool(), {"path": "d", "content": "x"}, make_ctx(workspace))


async def test_write_under_a_file_is_an_error(workspace: Path) -> None:
    (workspace / "f").write_text("x")
    with pytest.raises(ToolError, match=r"cannot create the folders for f/g\.txt"):
        await call(WriteTool(), {"path": "f/g.txt", "content": "x"}, make_ctx(workspace))


async def test_write_refuses_unencodable_text(workspace: Path) -> None:
    with pytest.raises(ToolError, match=r"^input\.content: not valid Unicode"):
        await call(WriteTool(), {"path": "f.txt", "content": "bad \ud800"}, make_ctx(workspace))
    assert not (workspace / "f.txt").exists()


async def test_write_absolute_path_inside_is_reported_relative(workspace: Path) -> None:
    ctx = make_ctx(workspace)
    out = await call(WriteTool(), {"path": f"{ctx.workspace}/a/b.txt", "content": ""}, ctx)
    assert out == "created a/b.txt: 0 bytes, 0 lines"


async def test_cancelled_write_still_completes_atomically(workspace: Path) -> None:
    with trio.CancelScope() as scope:
        scope.cancel(reason="test")
        await call(WriteTool(), {"path": "f.txt", "content": "all of it"}, make_ctx(workspace))
    # Either the write never started or it finished whole: never a partial file.
    target = workspace / "f.txt"
    assert not target.exists() or target.read_text() == "all of it"


# --- edit -------------------------------------------------------------------------------------


async def test_edit_replaces_a_unique_string(workspace: Path) -> None:
    (workspace / "m.py").write_text("x = 1\ny = 2\n")
    out = await call(
        EditTool(), {"path": "m.py", "old": "y = 2", "new": "y = 3"}, make_ctx(workspace)
    )
    assert out == "edited m.py: replaced 1 occurrence"
    assert (workspace / "m.py").read_text() == "x = 1\ny = 3\n"


async def test_edit_refuses_a_string_that_is_not_unique(workspace: Path) -> None:
    (workspace / "m.py").write_text("a\na\na\n")
    with pytest.raises(ToolError, match=r"old text occurs 3 times in m\.py.*replace_all"):
        await call(EditTool(), {"path": "m.py", "old": "a", "new": "b"}, make_ctx(workspace))
    assert (workspace / "m.py").read_text() == "a\na\na\n"


async def test_edit_replace_all_reports_the_count(workspace: Path) -> None:
    (workspace / "m.py").write_text("a\na\na\n")
    out = await call(
        EditTool(),
        {"path": "m.py", "old": "a", "new": "b", "replace_all": True},
        make_ctx(workspace),
    )
    assert out == "edited m.py: replaced 3 occurrences"
    assert (workspace / "m.py").read_text() == "b\nb\nb\n"


async def test_edit_missing_string_is_an_error(workspace: Path) -> None:
    (workspace / "m.py").write_text("abc\n")
    with pytest.raises(ToolError, match=r"^old text not found in m\.py"):
        await call(EditTool(), {"path": "m.py", "old": "xyz", "new": "q"}, make_ctx(workspace))


async def test_edit_old_equal_to_new_is_an_error(workspace: Path) -> None:
    (workspace / "m.py").write_text("abc\n")
    with pytest.raises(ToolError, match=r"^input\.new: same as old"):
        await call(EditTool(), {"path": "m.py", "old": "abc", "new": "abc"}, make_ctx(workspace))


async def test_edit_missing_file(workspace: Path) -> None:
    with pytest.raises(ToolError, match=r"^no such file: m\.py$"):
        await call(EditTool(), {"path": "m.py", "old": "a", "new": "b"}, make_ctx(workspace))


async def test_edit_refuses_binary_and_non_utf8_files_and_leaves_them(workspace: Path) -> None:
    (workspace / "b.bin").write_bytes(b"a\x00b")
    (workspace / "l1.txt").write_bytes(b"caf\xe9 a\n")
    with pytest.raises(ToolError, match="binary"):
        await call(EditTool(), {"path": "b.bin", "old": "a", "new": "c"}, make_ctx(workspace))
    with pytest.raises(ToolError, match=r"l1\.txt is not UTF-8 text"):
        await call(EditTool(), {"path": "l1.txt", "old": "a", "new": "c"}, make_ctx(workspace))
    assert (workspace / "l1.txt").read_bytes() == b"caf\xe9 a\n"


async def test_edit_matches_lines_of_a_crlf_file_given_with_lf(workspace: Path) -> None:
    (workspace / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    out = await call(
        EditTool(), {"path": "w.txt", "old": "one\ntwo", "new": "1\n2"}, make_ctx(workspace)
    )
    assert out == "edited w.txt: replaced 1 occurrence"
    assert (workspace / "w.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"


async def test_edit_keeps_the_permission_bits(workspace: Path) -> None:
    target = workspace / "run.sh"
    target.write_text("echo a\n")
    target.chmod(0o755)
    await call(EditTool(), {"path": "run.sh", "old": "a", "new": "b"}, make_ctx(workspace))
    assert stat.S_IMODE(target.stat().st_mode) == 0o755


# --- glob -------------------------------------------------------------------------------------


@pytest.fixture
def tree(workspace: Path) -> Path:
    for rel in [
        "setup.py",
        "README.md",
        ".env",
        "src/app/__init__.py",
        "src/app/main.py",
        "src/app/view.ts",
        "src/app/view.tsx",
        "tests/test_main.py",
        ".git/config",
        ".git/hooks/pre-commit.py",
        "docs/guide.md",
    ]:
        path = workspace / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {rel}\nneedle in {rel}\n")
    (workspace / "data.bin").write_bytes(b"needle\x00binary")
    outside = workspace.parent / "outside"
    outside.mkdir()
    (outside / "leak.py").write_text("needle outside\n")
    (workspace / "out_file.py").symlink_to(outside / "leak.py")
    (workspace / "out_dir").symlink_to(outside)
    (workspace / "in_link.py").symlink_to("setup.py")
    (workspace / "src_alias").symlink_to("src")
    return workspace


async def test_glob_recursive_pattern_is_sorted_and_relative_to_the_workspace(tree: Path) -> None:
    out = await call(GlobTool(), {"pattern": "**/*.py"}, make_ctx(tree))
    assert out.splitlines() == [
        "in_link.py",
        "setup.py",
        "src/app/__init__.py",
        "src/app/main.py",
        "tests/test_main.py",
    ]


async def test_glob_star_stays_in_one_folder_and_matches_dot_files(tree: Path) -> None:
    out = await call(GlobTool(), {"pattern": "*"}, make_ctx(tree))
    assert out.splitlines() == [".env", "README.md", "data.bin", "in_link.py", "setup.py"]


async def test_glob_in_a_folder_still_prints_workspace_relative_paths(tree: Path) -> None:
    out = await call(GlobTool(), {"pattern": "*.py", "path": "src/app"}, make_ctx(tree))
    assert out.splitlines() == ["src/app/__init__.py", "src/app/main.py"]


async def test_glob_braces(tree: Path) -> None:
    out = await call(GlobTool(), {"pattern": "src/**/*.{ts,tsx}"}, make_ctx(tree))
    assert out.splitlines() == ["src/app/view.ts", "src/app/view.tsx"]


async def test_glob_skips_git_unless_the_pattern_names_it(tree: Path) -> None:
    assert ".git" not in await call(GlobTool(), {"pattern": "**"}, make_ctx(tree))
    out = await call(GlobTool(), {"pattern": ".git/**"}, make_ctx(tree))
    assert out.splitlines() == [".git/config", ".git/hooks/pre-commit.py"]


async def test_glob_caps_results_with_a_note(tree: Path) -> None:
    out = await call(GlobTool(), {"pattern": "**/*.py"}, make_ctx(tree, glob_max_results=2))
    assert out.splitlines() == [
        "in_link.py",
        "setup.py",
        "[showing the first 2 of 5 matches; narrow the pattern or the path]",
    ]


async def test_glob_never_lists_symlinks_leading_out_nor_enters_symlinked_folders(
    tree: Path,
) -> None:
    out = await call(GlobTool(), {"pattern": "**"}, make_ctx(tree))
    assert "out_file.py" not in out
    assert "out_dir" not in out
    assert "src_alias" not in out
    assert "in_link.py" in out


async def test_glob_no_match_is_an_ok_result(tree: Path) -> None:
    assert await call(GlobTool(), {"pattern": "*.rs"}, make_ctx(tree)) == "no files match '*.rs'"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"pattern": "*", "path": "nope"}, r"^no such folder: nope$"),
        ({"pattern": "*", "path": "setup.py"}, r"^not a folder: setup\.py$"),
        ({"pattern": "/etc/*"}, r"^input\.pattern: must be relative"),
        ({"pattern": "../*"}, r"^input\.pattern: '\.\.' is not allowed"),
        ({"pattern": "*", "path": "out_dir"}, "refused"),
    ],
)
async def test_glob_errors(tree: Path, args: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolError, match=message):
        await call(GlobTool(), args, make_ctx(tree))


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("*.py", "a.py", True),
        ("*.py", "src/a.py", False),
        ("**/*.py", "a.py", True),
        ("**/*.py", "src/deep/a.py", True),
        ("src/**", "src/a/b", True),
        ("src/**", "src", False),
        ("src/**", "srcx/a", False),
        ("src/**/test_*.py", "src/test_a.py", True),
        ("src/**/test_*.py", "src/x/y/test_a.py", True),
        ("a?c", "abc", True),
        ("a?c", "a/c", False),
        ("[ab].txt", "b.txt", True),
        ("[!ab].txt", "c.txt", True),
        ("[!ab].txt", "a.txt", False),
        ("[].txt", "[].txt", True),
        ("x[", "x[", True),
        ("a**b", "axxb", True),
        ("a**b", "a/b", False),
        ("*.{md,rst}", "x.rst", True),
        ("*.{md,rst}", "x.txt", False),
        ("{a", "{a", True),
        ("a.b", "aXb", False),
    ],
)
def test_glob_pattern_semantics(pattern: str, path: str, matches: bool) -> None:
    assert compile_glob(pattern).fullmatch(path) is matches


async def test_cancelled_walk_returns_at_once_and_tells_the_thread_to_stop() -> None:
    started = threading.Event()
    stopped = threading.Event()

    def work(stop: threading.Event) -> None:
        started.set()
        if stop.wait(10):
            stopped.set()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_in_thread_with_stop, work)
            await trio.to_thread.run_sync(started.wait)
            nursery.cancel_scope.cancel(reason="test")
        assert await trio.to_thread.run_sync(stopped.wait, 5)


# --- grep -------------------------------------------------------------------------------------


async def test_grep_prints_path_line_and_text(tree: Path) -> None:
    out = await call(GrepTool(), {"pattern": r"needle in [\w/]+\.md"}, make_ctx(tree))
    assert out.splitlines() == [
        "README.md:2:needle in README.md",
        "docs/guide.md:2:needle in docs/guide.md",
    ]


async def test_grep_include_filters_file_names(tree: Path) -> None:
    out = await call(GrepTool(), {"pattern": "needle", "include": "*.py"}, make_ctx(tree))
    assert out.splitlines() == [
        "in_link.py:2:needle in setup.py",
        "setup.py:2:needle in setup.py",
        "src/app/__init__.py:2:needle in src/app/__init__.py",
        "src/app/main.py:2:needle in src/app/main.py",
        "tests/test_main.py:2:needle in tests/test_main.py",
    ]


async def test_grep_include_with_braces_and_a_path(tree: Path) -> None:
    out = await call(
        GrepTool(), {"pattern": "needle", "path": "src", "include": "*.{ts,tsx}"}, make_ctx(tree)
    )
    assert [line.split(":")[0] for line in out.splitlines()] == [
        "src/app/view.ts",
        "src/app/view.tsx",
    ]


async def test_grep_a_single_file(tree: Path) -> None:
    out = await call(GrepTool(), {"pattern": "^#", "path": "setup.py"}, make_ctx(tree))
    assert out == "setup.py:1:# setup.py"


async def test_grep_skips_binary_git_and_outside_files(tree: Path) -> None:
    out = await call(GrepTool(), {"pattern": "needle"}, make_ctx(tree))
    assert "data.bin" not in out
    assert ".git" not in out
    assert "outside" not in out
    assert "out_file" not in out


async def test_grep_caps_matches_with_a_note(tree: Path) -> None:
    out = await call(GrepTool(), {"pattern": "needle"}, make_ctx(tree, grep_max_matches=2))
    lines = out.splitlines()
    assert len(lines) == 3
    assert lines[-1] == "[stopped after 2 matches; narrow the pattern, path or include]"


async def test_grep_caps_output_characters_with_a_note(tree: Path) -> None:
    out = await call(GrepTool(), {"pattern": "needle"}, make_ctx(tree, max_output_chars=60))
    *matches, note = out.splitlines()
    assert len("\n".join(matches)) <= 60
    assert note == (
        f"[stopped after {len(matches)} matches: output limit of 60 characters;"
        " narrow the pattern, path or include]"
    )


async def test_grep_bad_regex_names_it(tree: Path) -> None:
    with pytest.raises(ToolError, match=r"^input\.pattern: invalid regex '\(unclosed'"):
        await call(GrepTool(), {"pattern": "(unclosed"}, make_ctx(tree))


async def test_grep_no_match_is_an_ok_result(tree: Path) -> None:
    out = await call(GrepTool(), {"pattern": "zzz+"}, make_ctx(tree))
    assert out == "no matches for 'zzz+'"


async def test_grep_a_single_binary_file_is_an_error(tree: Path) -> None:
    with pytest.raises(ToolError, match=r"^data\.bin looks like a binary file"):
        await call(GrepTool(), {"pattern": "needle", "path": "data.bin"}, make_ctx(tree))


async def test_grep_missing_path(tree: Path) -> None:
    with pytest.raises(ToolError, match=r"^no such file or folder: nope$"):
        await call(GrepTool(), {"pattern": "x", "path": "nope"}, make_ctx(tree))


async def test_grep_does_not_block_on_a_fifo(tree: Path) -> None:
    os.mkfifo(tree / "pipe")
    with trio.fail_after(5):
        out = await call(GrepTool(), {"pattern": "needle", "include": "*.md"}, make_ctx(tree))
    assert "pipe" not in out


async def test_grep_cuts_long_matching_lines(workspace: Path) -> None:
    (workspace / "min.js").write_text("x" * 2000 + "needle\n")
    out = await call(GrepTool(), {"pattern": "needle"}, make_ctx(workspace))
    assert out == "min.js:1:" + "x" * 500 + "…"


# --- all tools --------------------------------------------------------------------------------


def test_builtins_are_one_of_each_in_order() -> None:
    tools = file_and_shell_tools()
    assert [t.name for t in tools] == ["bash", "read", "write", "edit", "glob", "grep"]
    assert [type(t) for t in tools] == [
        BashTool,
        ReadTool,
        WriteTool,
        EditTool,
        GlobTool,
        GrepTool,
    ]


@pytest.mark.parametrize(
    ("tool", "read_only", "concurrency_safe", "needs_permission", "edits_files"),
    [
        (BashTool(), False, False, True, False),
        (ReadTool(), True, True, False, False),
        (WriteTool(), False, False, True, True),
        (EditTool(), False, False, True, True),
        (GlobTool(), True, True, False, False),
        (GrepTool(), True, True, False, False),
    ],
    ids=lambda v: v.name if isinstance(v, Tool) else None,
)
def test_flags(
    tool: Tool, read_only: bool, concurrency_safe: bool, needs_permission: bool, edits_files: bool
) -> None:
    assert (tool.read_only, tool.concurrency_safe, tool.needs_permission, tool.edits_files) == (
        read_only,
        concurrency_safe,
        needs_permission,
        edits_files,
    )


@pytest.mark.parametrize(
    ("tool", "args", "summary", "target"),
    [
        (ReadTool(), {"path": "./src//a.py"}, "read: ./src//a.py", "src/a.py"),
        (WriteTool(), {"path": "docs/x.md", "content": "…"}, "write: docs/x.md", "docs/x.md"),
        (EditTool(), {"path": "a.py", "old": "x", "new": "y"}, "edit: a.py", "a.py"),
        (GlobTool(), {"pattern": "**/*.py"}, "glob: **/*.py", "."),
        (GlobTool(), {"pattern": "*", "path": "src/"}, "glob: *", "src"),
        (GrepTool(), {"pattern": "def \\w+", "path": "lib"}, "grep: def \\w+", "lib"),
    ],
)
def test_summary_and_permission_target(
    tool: Tool, args: dict[str, Any], summary: str, target: str
) -> None:
    assert tool.summary(args) == summary
    assert tool.permission_target(args) == target


def test_schemas_refuse_unknown_fields() -> None:
    for tool in file_and_shell_tools():
        assert tool.input_schema["additionalProperties"] is False
        assert tool.input_schema["type"] == "object"


# A pattern that backtracks without end on this line (every split of the a's into a and aa is
# tried before the '!' fails the match): with re, one search holds the GIL for hours.
_BACKTRACKING = {"pattern": "(a|aa)+$"}


async def test_grep_stops_a_pattern_that_backtracks_at_its_time_limit(workspace: Path) -> None:
    (workspace / "f.txt").write_text("a" * 60 + "!\n")
    with trio.fail_after(10), pytest.raises(ToolError, match="time limit"):
        await call(GrepTool(), _BACKTRACKING, make_ctx(workspace, grep_timeout_s=0.3))


async def test_a_backtracking_grep_is_cancelled_at_once(workspace: Path) -> None:
    # Cancelled while the search grinds (its own time limit is 3 s): the call ends at once,
    # well before that limit, and not on its own.
    (workspace / "f.txt").write_text("a" * 60 + "!\n")
    finished: list[str] = []

    async def search() -> None:
        finished.append(await call(GrepTool(), _BACKTRACKING,
                                   make_ctx(workspace, grep_timeout_s=3.0)))

    with trio.fail_after(2):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(search)
            await trio.testing.wait_all_tasks_blocked()  # the search runs in its thread
            nursery.cancel_scope.cancel(reason="test")
    assert finished == [], "the search ended on its own"


@pytest.mark.slow
async def test_a_backtracking_grep_leaves_the_event_loop_free(workspace: Path) -> None:
    # The other agents (here: a task ticking) run on while the search grinds, and cancelling it
    # works at once: the match runs without the GIL. Real time: the ticks are the measure.
    (workspace / "f.txt").write_text("a" * 60 + "!\n")
    async with loop_ticks() as ticks:
        with trio.fail_after(5), trio.move_on_after(0.5) as scope:
            await call(GrepTool(), _BACKTRACKING, make_ctx(workspace, grep_timeout_s=3.0))
    assert scope.cancelled_caught, "the search ended on its own"
    assert ticks.count >= 10, f"the event loop stalled ({ticks.count} ticks in 0.5 s)"


async def test_a_cancelled_burst_of_slow_greps_does_not_starve_other_threads(
    workspace: Path,
) -> None:
    # An abandoned thread keeps its limiter slot until its match ends (at the deadline here);
    # the file tools have a limiter of their own, so trio's default one stays free.
    (workspace / "f.txt").write_text("a" * 60 + "!\n")
    ctx = make_ctx(workspace, grep_timeout_s=1.0)
    async with trio.open_nursery() as nursery:
        for _ in range(45):
            nursery.start_soon(call, GrepTool(), _BACKTRACKING, ctx)
        await trio.testing.wait_all_tasks_blocked()  # every search running or queued
        nursery.cancel_scope.cancel(reason="test")
    # The abandoned searches still run (until their deadline), on the file tools' own slots.
    assert trio.to_thread.current_default_thread_limiter().borrowed_tokens == 0
    with trio.fail_after(0.5):
        assert await trio.to_thread.run_sync(lambda: 42) == 42


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("(a{1000}){1000}", "too big once its counted repeats"),
        ("x{30000}", "too big once its counted repeats"),
        (r"\p{L}+", "invalid regex"),  # regex syntax that re does not have
        ("(unclosed", "invalid regex"),
    ],
)
async def test_grep_refuses_patterns_re_refuses_or_too_big_to_compile(
    workspace: Path, pattern: str, reason: str
) -> None:
    (workspace / "f.txt").write_text("x\n")
    with pytest.raises(ToolError, match=reason):
        await call(GrepTool(), {"pattern": pattern}, make_ctx(workspace))


_CORPUS = [
    "def main(argv):",
    "    return run(argv)  # TODO: tidy",
    "class Foo(Base):",
    "import os, sys",
    "from re import compile",
    "x = 'def' + 'ine'",
    "DEF UPPER",
    "café au lait",
    "tab\tseparated\tline",
    "",
    "trailing spaces   ",
    "todo: lower",
]


@pytest.mark.parametrize(
    "pattern",
    [
        r"def \w+\(",
        r"^class \w+",
        r"(?i)todo",
        r"import (os|sys)",
        r"os|sys",
        r"\bre\b",
        r"(?<=x = )'def'",
        r"def(?!ine)",
        r"\s+$",
        r"^$",
        r"caf\u00e9",
        r"[A-Z]{3} UPPER",
        r"t\w+\tline",
        r"(\w+)\(\1\)",
        r"run\(argv\)",
    ],
)
async def test_grep_finds_exactly_the_lines_re_finds(workspace: Path, pattern: str) -> None:
    # The prefilter (a literal every match contains) and the regex engine together must give
    # what re.search line by line gives.
    import re

    (workspace / "src.py").write_text("\n".join(_CORPUS) + "\n")
    expected = [f"src.py:{i}:{line}" for i, line in enumerate(_CORPUS, 1) if re.search(pattern, line)]
    out = await call(GrepTool(), {"pattern": pattern}, make_ctx(workspace))
    assert out == ("\n".join(expected) if expected else f"no matches for {pattern!r}")


async def test_grep_reads_posix_classes_as_grep_users_mean_them(workspace: Path) -> None:
    # re would read [[:digit:]] as a set of characters followed by "]" (and warn); the model
    # means digits, as in grep, and that is what the regex engine does.
    (workspace / "f.txt").write_text("abc\nv123\n")
    out = await call(GrepTool(), {"pattern": "[[:digit:]]+"}, make_ctx(workspace))
    assert out == "f.txt:2:v123"


# --- attacks (issue 15) -----------------------------------------------------------------------

# Eight stars: re, given the glob as a regex, tries every way to place them (O(n^8)) holding
# the GIL; on a 200-character name that is years, on 40 characters about two seconds.
_CATASTROPHIC_GLOB = "*a*a*a*a*a*a*a*a*b"


async def test_glob_with_a_backtracking_pattern_answers(workspace: Path) -> None:
    (workspace / ("a" * 200)).write_text("")
    with trio.fail_after(10):  # a guard against years, not a speed: timed in the slow test
        out = await call(GlobTool(), {"pattern": _CATASTROPHIC_GLOB}, make_ctx(workspace))
    assert out == f"no files match {_CATASTROPHIC_GLOB!r}"


async def test_grep_include_with_a_backtracking_pattern_answers(workspace: Path) -> None:
    (workspace / ("a" * 200)).write_text("needle\n")
    with trio.fail_after(10):  # a guard against years, not a speed: timed in the slow test
        out = await call(
            GrepTool(), {"pattern": "needle", "include": _CATASTROPHIC_GLOB}, make_ctx(workspace)
        )
    assert out == "no matches for 'needle'"


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["glob", "grep"])
async def test_a_backtracking_glob_pattern_answers_within_a_second(
    workspace: Path, tool: str
) -> None:
    (workspace / ("a" * 200)).write_text("needle\n")
    called, args = (
        (GlobTool(), {"pattern": _CATASTROPHIC_GLOB})
        if tool == "glob"
        else (GrepTool(), {"pattern": "needle", "include": _CATASTROPHIC_GLOB})
    )
    start = time.monotonic()
    await call(called, args, make_ctx(workspace))
    assert time.monotonic() - start < 1.0


@pytest.mark.slow
async def test_the_event_loop_ticks_while_globs_match_long_names(workspace: Path) -> None:
    for i in range(3):
        (workspace / (f"{i}" + "a" * 40)).write_text("")
    async with loop_ticks() as ticks:
        start = trio.current_time()
        for tool, args in [
            (GlobTool(), {"pattern": _CATASTROPHIC_GLOB}),
            (GrepTool(), {"pattern": "x", "include": _CATASTROPHIC_GLOB}),
        ]:
            await call(tool, args, make_ctx(workspace))
        await trio.sleep(0.2)
        elapsed = trio.current_time() - start
    assert elapsed < 1.0, f"the globs held the event loop for {elapsed:.1f} s"
    assert ticks.count >= 10, f"the event loop stalled ({ticks.count} ticks)"


def test_glob_braces_expanding_too_far_are_refused() -> None:
    with pytest.raises(ConfigError, match="more than 256 patterns"):
        compile_glob("{a,b}" * 9)


async def test_grep_searches_a_long_line_in_its_first_part_and_says_so(workspace: Path) -> None:
    (workspace / "f.txt").write_text("x" * 50 + "needle" + "y" * 1000 + "needle\nneedle\n")
    out = await call(GrepTool(), {"pattern": "needle"}, make_ctx(workspace, grep_max_line_bytes=100))
    lines = out.splitlines()
    assert lines[0].startswith("f.txt:1:" + "x" * 50 + "needle")
    assert lines[1] == "f.txt:2:needle"
    assert lines[2] == (
        "[1 lines longer than 100 bytes were searched in their first part only; "
        "search them with bash]"
    )


async def test_grep_searches_a_big_file_in_its_first_part_and_says_so(workspace: Path) -> None:
    (workspace / "f.txt").write_text("needle\n" * 1000)
    out = await call(GrepTool(), {"pattern": "needle"}, make_ctx(workspace, grep_max_file_bytes=70))
    assert out.splitlines()[-1] == (
        "[1 files bigger than 70 bytes were searched in their first part only: f.txt]"
    )
    assert len(out.splitlines()) == 11


_GREP_MEMORY = """
import resource, sys, trio
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from _toolkit import call, make_ctx
from runtime.core import ToolError
from tools import GrepTool
ws = Path(sys.argv[1])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
async def main():
    try:
        await call(GrepTool(), {"pattern": "(a|aa)+$"}, make_ctx(ws, grep_timeout_s=2.0))
    except ToolError:
        pass
trio.run(main)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


async def test_a_backtracking_grep_on_a_5_mb_line_stays_within_bounded_memory(
    workspace: Path,
) -> None:
    (workspace / "f.txt").write_text("a" * 5_000_000 + "!\n")
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-c", _GREP_MEMORY, str(workspace), str(Path(__file__).parent)],
            capture_stdout=True,
        )
    grown_mb = int(done.stdout.decode().split()[-1])
    assert grown_mb < 100, f"grep took {grown_mb} MB more"
