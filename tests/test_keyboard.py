"""The chat's line editor: key decoding, editing, history, and the keyboard task on a real pty."""

from __future__ import annotations

import fcntl
import io
import os
import struct
import termios
from collections.abc import Callable, Iterator

import pytest
import trio
import trio.testing

from runtime.cli._keyboard import Key, Keyboard, KeyDecoder, LineEditor


def keys(data: bytes) -> list[Key]:
    return KeyDecoder().feed(data)


def test_text_control_keys_and_escape_sequences_decode() -> None:
    assert keys(b"ab\x1b[Dc\r") == [Key("text", "ab"), Key("left"), Key("text", "c"), Key("enter")]
    assert keys(b"\x1b[A\x1b[B\x1bOH\x1b[4~\x1b[3~\x1b[1;5D\x1bb\x1b\x7f") == [
        Key("up"),
        Key("down"),
        Key("home"),
        Key("end"),
        Key("delete"),
        Key("word-left"),
        Key("word-left"),
        Key("kill-word-back"),
    ]
    assert keys(b"\x01\x05\x15\x0b\x17\x04\x7f\t") == [
        Key(n)
        for n in ("ctrl-a", "ctrl-e", "ctrl-u", "ctrl-k", "ctrl-w", "ctrl-d", "backspace", "tab")
    ]
    assert keys(b"\x1b[99~x") == [Key("text", "x")]  # unknown sequences are dropped whole


def test_sequences_and_utf8_split_across_reads_wait_for_the_rest() -> None:
    decoder = KeyDecoder()
    assert decoder.feed(b"\x1b[") == []
    assert decoder.feed(b"1;5") == []
    assert decoder.feed(b"Cz") == [Key("word-right"), Key("text", "z")]
    euro = "€".encode()
    assert decoder.feed(euro[:1]) == []
    assert decoder.feed(euro[1:]) == [Key("text", "€")]


def test_a_bracketed_paste_keeps_its_newlines_as_text() -> None:
    assert keys(b"\x1b[200~line one\r\nline two\x1b[201~\r") == [
        Key("text", "line one\nline two"),
        Key("enter"),
    ]


def type_into(editor: LineEditor, data: bytes) -> list[str]:
    results: list[str] = []
    for key in KeyDecoder().feed(data):
        result = editor.handle(key)
        if result is not None:
            results.append(result)
    return results


def test_editing_keys_move_delete_and_kill() -> None:
    ed = LineEditor()
    type_into(ed, b"hello world")
    type_into(ed, b"\x1b[D\x1b[D\x1b[D\x1b[D\x1b[D\x7f")  # five left, backspace
    assert (ed.text, ed.pos) == ("helloworld", 5)
    type_into(ed, b"_\x01X\x05!")  # insert, Home, insert, End, insert
    assert ed.text == "Xhello_world!"
    type_into(ed, b"\x17")  # Ctrl+W: the word before the cursor
    assert ed.text == ""
    type_into(ed, b"\x19")  # Ctrl+Y yanks it back
    assert ed.text == "Xhello_world!"
    type_into(ed, b"\x01\x1b[1;5C\x0b")  # Home, word right, Ctrl+K
    assert ed.text == "Xhello_world"
    type_into(ed, b"\x01\x1b[3~\x04")  # Home, Delete, Ctrl+D on a non-empty line deletes
    assert ed.text == "ello_world"
    type_into(ed, b"\x05\x15")  # End, Ctrl+U
    assert (ed.text, ed.pos) == ("", 0)


def test_enter_submits_and_ctrl_d_ends_input_only_on_an_empty_line() -> None:
    ed = LineEditor()
    assert type_into(ed, b"x\r") == ["submit"]
    assert ed.accept() == "x"
    assert type_into(ed, b"\x04") == ["eof"]


def test_history_goes_up_and_down_and_keeps_the_draft() -> None:
    ed = LineEditor(["first", "second"])
    type_into(ed, b"draft")
    type_into(ed, b"\x1b[A")
    assert ed.text == "second"
    type_into(ed, b"\x1b[A\x1b[A")  # past the oldest: stays
    assert ed.text == "first"
    type_into(ed, b"\x1b[B\x1b[B")
    assert ed.text == "draft"
    ed.accept()
    ed.set_text("second")
    ed.accept()  # the same line twice in a row is kept once
    assert ed.history == ["first", "second", "draft", "second"]
    ed.set_text("  ")
    ed.accept()
    assert ed.history[-1] == "second"


def test_tab_completes_a_slash_command() -> None:
    ed = LineEditor(completions=["/help", "/tree", "/trace", "/exit"])
    type_into(ed, b"/tr\t")
    assert ed.text == "/tr"  # ambiguous: /tree and /trace share only "/tr"
    type_into(ed, b"e\t")
    assert ed.text == "/tree "
    ed.set_text("/h")
    type_into(ed, b"\t")
    assert ed.text == "/help "


def test_a_long_line_scrolls_to_keep_the_cursor_in_sight() -> None:
    ed = LineEditor()
    ed.set_text("abcdefghijklmnopqrstuvwxyz")
    before, at, after = ed.view(10)
    assert (before, at, after) == ("rstuvwxyz", "", "")
    ed.pos = 0
    before, at, after = ed.view(10)
    assert (before, at, after) == ("", "a", "bcdefghij")
    ed.set_text("a\nb")
    assert ed.view(10) == ("a\N{RETURN SYMBOL}b", "", "")


@pytest.fixture
def pty_pair() -> Iterator[tuple[int, int]]:
    master, slave = os.openpty()
    yield master, slave
    os.close(master)


async def test_the_keyboard_task_reads_a_real_terminal_and_restores_its_mode(
    pty_pair: tuple[int, int],
) -> None:
    master, slave = pty_pair
    before = termios.tcgetattr(slave)
    out = io.StringIO()
    kb = Keyboard(os.dup(slave), out, completions=["/help"])
    async with trio.open_nursery() as nursery:
        await nursery.start(kb.run)
        mode = termios.tcgetattr(slave)
        assert not mode[3] & termios.ICANON
        assert not mode[3] & termios.ECHO
        assert mode[3] & termios.ISIG  # Ctrl+C stays the kernel's SIGINT
        kb.show_prompt("> ")
        os.write(master, b"hello\x1b[D\x1b[DX\r")
        with trio.fail_after(5):
            assert await kb.lines.receive() == "helXlo"
        assert "> helXlo\x1b[K\r\n" in out.getvalue()

        # A question takes the keys while it is open; the chat line keeps its text.
        kb.show_in_view()
        os.write(master, b"half")
        with trio.fail_after(5):
            while kb.editor.text != "half":  # in the view, each change pokes the view
                changed = trio.Event()
                kb.on_change = changed.set
                await changed.wait()
            async with trio.open_nursery() as inner:
                answers: list[str | None] = []

                async def ask() -> None:
                    answers.append(await kb.ask("cancel> "))

                inner.start_soon(ask)
                await trio.testing.wait_all_tasks_blocked()
                os.write(master, b"2\r")
        assert answers == ["2"]
        assert kb.editor.text == "half"
        assert "cancel> 2\x1b[K\r\n" in out.getvalue()

        # A question cut short (a Ctrl+C) leaves the line and moves on.
        async with trio.open_nursery() as inner:
            inner.start_soon(kb.ask, "Allow? ")
            await trio.testing.wait_all_tasks_blocked()  # the question is open
            inner.cancel_scope.cancel(reason="a Ctrl+C")
        assert out.getvalue().endswith("Allow? \x1b[K\r\n")

        # Ctrl+D at the prompt, on an empty line, is the end of input.
        kb.editor.clear()
        kb.show_prompt("> ")
        os.write(master, b"\x04")
        with trio.fail_after(5):
            assert await kb.lines.receive() is None
        nursery.cancel_scope.cancel()
    after = termios.tcgetattr(slave)
    assert after[3] == before[3]
    assert await kb.ask("closed? ") is None
    assert kb.history == ["helXlo"]


def test_a_completion_replaces_the_last_word_with_what_its_values_share() -> None:
    ed = LineEditor()
    ed.set_text("/mcp__e__p S")
    ed.complete_word(["Sales", "Support"])
    assert ed.text == "/mcp__e__p S"  # they share only "S"
    ed.complete_word(["Sales"])
    assert ed.text == "/mcp__e__p Sales "
    ed.set_text("/mcp__e__p Sales name=")
    ed.complete_word(["name=Dave", "name=David"])
    assert ed.text == "/mcp__e__p Sales name=Dav"
    ed.complete_word([])
    assert ed.text == "/mcp__e__p Sales name=Dav"


async def test_tab_on_arguments_asks_in_a_task_and_a_key_meanwhile_cancels_it(
    pty_pair: tuple[int, int],
) -> None:
    master, slave = pty_pair
    asked: list[str] = []
    cancelled: list[str] = []
    release = trio.Event()

    async def complete_args(line: str) -> list[str]:
        asked.append(line)
        try:
            if line.endswith("slow"):
                await trio.sleep_forever()
            await release.wait()
        except trio.Cancelled:
            cancelled.append(line)
            raise
        return {"/p ": ["Sales", "Support", "Marketing"], "/p S": ["Sales", "Support"]}.get(
            line, ["Sales"]
        )

    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    out = io.StringIO()
    kb = Keyboard(os.dup(slave), out, completions=["/p"], complete_args=complete_args)

    async def until(cond: Callable[[], bool]) -> None:
        # The keys go through a real pty to the keyboard's task: nothing to wait on but it.
        with trio.fail_after(5):
            while not cond():  # noqa: ASYNC110
                await trio.sleep(0.01)

    async def settle(text: str) -> None:
        await until(lambda: kb.editor.text == text)

    async with trio.open_nursery() as nursery:
        await nursery.start(kb.run)
        kb.show_prompt("> ")
        os.write(master, b"/p\t")  # the command's name: completed at once, as before
        await settle("/p ")
        assert asked == []
        os.write(master, b"\t")
        await until(lambda: asked)
        release.set()
        await trio.sleep(0.05)
        assert kb.editor.text == "/p "  # nothing shared by all three: the line stays
        assert "Sales  Support  Marketing\x1b[K\r\n" in out.getvalue()  # shown above it
        os.write(master, b"S\t")
        await until(lambda: not ("Sales  Support\x1b[K\r\n" not in out.getvalue()))
        os.write(master, b"a\t")
        await settle("/p Sales ")
        # A key typed while the server is asked cancels the request; the line is the user's.
        os.write(master, b"slow\t")
        await until(lambda: asked[-1].endswith("slow"))
        os.write(master, b"x")
        await until(lambda: cancelled)
        assert cancelled == ["/p Sales slow"]
        await settle("/p Sales slowx")
        # A question's Tab and the live view's are not the server's.
        asked.clear()
        kb.show_in_view()
        os.write(master, b"\t")
        await trio.sleep(0.05)
        assert asked == []
        nursery.cancel_scope.cancel()
