"""The chat's keyboard: a small line editor on the terminal, read by a trio task.

Why not a library: prompt_toolkit (the well-kept choice) runs only on asyncio, wants to own the
screen that the live tree draws on, and would be a new dependency; readline blocks a thread in
``read`` that cannot be cancelled and owns the terminal while it waits. Here ONE trio task
(:meth:`Keyboard.run`) reads the terminal through :class:`trio.lowlevel.FdStream` on a second
file description of the tty (so the non-blocking flag never leaks to fd 0, as in
:mod:`runtime.cli._picker`), and every key goes to exactly one line:

* the chat line, drawn at the prompt when idle (:meth:`Keyboard.show_prompt`) or as the last
  lines of the live view while the agent works (:meth:`Keyboard.show_in_view`,
  :meth:`Keyboard.footer`); Enter sends it to :attr:`Keyboard.lines`;
* a question (:meth:`Keyboard.ask`: the Ctrl+C picker, a permission prompt), which takes the
  keys while it is open and leaves the half-typed chat line as it was.

The terminal is put in cbreak mode (no canonical lines, no echo) but keeps ``ISIG``: Ctrl+C is
still the kernel's SIGINT to the foreground group, received by
:func:`~runtime.cli._picker.serve_sigint` like in ``run``. Ctrl+D on an empty line is end of
input. The old mode is restored when :meth:`Keyboard.run` ends, however it ends.

Editing (Emacs/readline keys): arrows, Home/End, Ctrl+A/E/B/F, Alt+B/F and Ctrl+arrows by word,
Backspace/Delete, Ctrl+U/K/W/Y, Up/Down (or Ctrl+P/N) through the input history, Tab to complete
a slash command, Ctrl+L to redraw. A bracketed paste keeps its newlines (shown as ``⏎``) in one
message. Long lines scroll sideways; nothing wraps, so redrawing is one ``\\r`` away.

:class:`KeyDecoder` and :class:`LineEditor` do no I/O and are tested on their own.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import sys
import termios
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Literal, NamedTuple, TextIO

import trio

if TYPE_CHECKING:
    from rich.text import Text

PROMPT_MARK = "\N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK}"
"""What starts the chat line: the prompt is ``PROMPT_MARK + " "``."""
MAX_QUEUED_LINES = 64
"""Lines sent with Enter and not yet taken by the chat (more waits in the editor: a beep)."""

_PASTE_ON = "\x1b[?2004h"
_PASTE_OFF = "\x1b[?2004l"


class Key(NamedTuple):
    """One key press: *name* is ``text`` for characters to insert (in *text*), else the key."""

    name: str
    text: str = ""


_CONTROL = {
    "\r": "enter",
    "\n": "enter",
    "\t": "tab",
    "\x7f": "backspace",
    "\x08": "backspace",
    "\x01": "ctrl-a",
    "\x02": "ctrl-b",
    "\x04": "ctrl-d",
    "\x05": "ctrl-e",
    "\x06": "ctrl-f",
    "\x0b": "ctrl-k",
    "\x0c": "ctrl-l",
    "\x0e": "ctrl-n",
    "\x10": "ctrl-p",
    "\x15": "ctrl-u",
    "\x17": "ctrl-w",
    "\x19": "ctrl-y",
}
_CSI = {
    "A": "up",
    "B": "down",
    "C": "right",
    "D": "left",
    "H": "home",
    "F": "end",
    "1~": "home",
    "7~": "home",
    "4~": "end",
    "8~": "end",
    "3~": "delete",
    "1;5C": "word-right",
    "1;5D": "word-left",
    "1;3C": "word-right",
    "1;3D": "word-left",
    "5C": "word-right",
    "5D": "word-left",
    "200~": "paste-start",
    "201~": "paste-end",
}
_SS3 = {"A": "up", "B": "down", "C": "right", "D": "left", "H": "home", "F": "end"}
_META = {"b": "word-left", "f": "word-right", "d": "kill-word", "\x7f": "kill-word-back"}


class KeyDecoder:
    """Turns the terminal's bytes into :class:`Key` presses, across reads.

    UTF-8 is decoded incrementally and an escape sequence cut between two reads waits for the
    rest. Between the bracketed-paste markers every character is text (newlines included).
    """

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self.pasting = False

    def feed(self, data: bytes) -> list[Key]:
        """The keys in *data* (plus what an earlier read left unfinished)."""
        text = self._pending + self._utf8.decode(data)
        self._pending = ""
        keys: list[Key] = []
        run: list[str] = []

        def flush() -> None:
            if run:
                keys.append(Key("text", "".join(run)))
                run.clear()

        i, n = 0, len(text)
        while i < n:
            c = text[i]
            if c == "\x1b":
                key, used = self._escape(text, i)
                if used == 0:  # unfinished: wait for the next read
                    self._pending = text[i:]
                    break
                if key is not None:
                    if key == "paste-start":
                        self.pasting = True
                    elif key == "paste-end":
                        self.pasting = False
                    else:
                        flush()
                        keys.append(Key(key))
                i += used
                continue
            if self.pasting:
                if c in "\r\n":
                    # A pasted CRLF is one line break.
                    if c == "\n" and run and run[-1] == "\n" and i and text[i - 1] == "\r":
                        i += 1
                        continue
                    run.append("\n")
                elif c == "\t" or c >= " ":
                    run.append(c)
                i += 1
                continue
            if c < " " or c == "\x7f":
                flush()
                name = _CONTROL.get(c)
                if name is not None:
                    keys.append(Key(name))
            else:
                run.append(c)
            i += 1
        flush()
        return keys

    @staticmethod
    def _escape(text: str, i: int) -> tuple[str | None, int]:
        """The key of the escape sequence at *i* and its length; length 0 when unfinished."""
        if i + 1 >= len(text):
            # A lone ESC at the end of a read is the Escape key (terminals write a sequence in
            # one go); it does nothing here.
            return "escape", 1
        nxt = text[i + 1]
        if nxt == "[":
            j = i + 2
            while j < len(text) and not "@" <= text[j] <= "~":
                j += 1
            if j >= len(text):
                return None, 0
            return _CSI.get(text[i + 2 : j + 1]), j + 1 - i
        if nxt == "O":
            if i + 2 >= len(text):
                return None, 0
            return _SS3.get(text[i + 2]), 3
        if nxt == "\x1b":
            return "escape", 1
        return _META.get(nxt), 2


Result = Literal["submit", "eof"]


def _is_word(c: str) -> bool:
    return c.isalnum() or c == "_"


def _shown(c: str) -> str:
    if c == "\n":
        return "\N{RETURN SYMBOL}"
    if c == "\t" or c < " ":
        return " "
    return c


def _cells(text: str) -> int:
    from rich.cells import cell_len

    return cell_len(text)


class LineEditor:
    """One editable line with a cursor, a kill buffer and an input history (no I/O).

    Args:
        history: the lines entered so far, oldest first; :meth:`accept` appends to it.
        completions: words Tab completes (the slash commands).
    """

    def __init__(self, history: list[str] | None = None, completions: Sequence[str] = ()) -> None:
        self.text = ""
        self.pos = 0
        self.history = history if history is not None else []
        self.completions = tuple(completions)
        self._browsing: int | None = None
        self._draft = ""
        self._killed = ""
        self._scroll = 0

    def set_text(self, text: str) -> None:
        """Replace the line, cursor at the end."""
        self.text = text
        self.pos = len(text)
        self._browsing = None

    def clear(self) -> None:
        self.set_text("")

    def accept(self) -> str:
        """Take the line (for Enter): add it to the history and start an empty one."""
        text = self.text
        if text.strip() and (not self.history or self.history[-1] != text):
            self.history.append(text)
        self.clear()
        return text

    def handle(self, key: Key) -> Result | None:
        """Apply one key; ``submit`` for Enter, ``eof`` for Ctrl+D on an empty line."""
        name = key.name
        if name == "text":
            self._insert(key.text)
        elif name == "enter":
            return "submit"
        elif name == "ctrl-d":
            if not self.text:
                return "eof"
            self._delete(self.pos, self.pos + 1)
        elif name == "backspace":
            self._delete(self.pos - 1, self.pos)
        elif name == "delete":
            self._delete(self.pos, self.pos + 1)
        elif name in ("left", "ctrl-b"):
            self.pos = max(0, self.pos - 1)
        elif name in ("right", "ctrl-f"):
            self.pos = min(len(self.text), self.pos + 1)
        elif name in ("home", "ctrl-a"):
            self.pos = 0
        elif name in ("end", "ctrl-e"):
            self.pos = len(self.text)
        elif name == "word-left":
            self.pos = self._word_start(self.pos)
        elif name == "word-right":
            self.pos = self._word_end(self.pos)
        elif name == "ctrl-u":
            self._kill(0, self.pos)
        elif name == "ctrl-k":
            self._kill(self.pos, len(self.text))
        elif name == "ctrl-w":
            start = self.pos
            while start and self.text[start - 1].isspace():
                start -= 1
            while start and not self.text[start - 1].isspace():
                start -= 1
            self._kill(start, self.pos)
        elif name == "kill-word-back":
            self._kill(self._word_start(self.pos), self.pos)
        elif name == "kill-word":
            self._kill(self.pos, self._word_end(self.pos))
        elif name == "ctrl-y":
            self._insert(self._killed)
        elif name in ("up", "ctrl-p"):
            self._history_step(-1)
        elif name in ("down", "ctrl-n"):
            self._history_step(1)
        elif name == "tab":
            self._complete()
        return None

    # -- editing ----------------------------------------------------------------------------

    def _insert(self, text: str) -> None:
        self.text = self.text[: self.pos] + text + self.text[self.pos :]
        self.pos += len(text)

    def _delete(self, start: int, end: int) -> None:
        start, end = max(0, start), min(len(self.text), end)
        if start < end:
            self.text = self.text[:start] + self.text[end:]
            self.pos = start

    def _kill(self, start: int, end: int) -> None:
        if start < end:
            self._killed = self.text[start:end]
            self._delete(start, end)

    def _word_start(self, pos: int) -> int:
        while pos and not _is_word(self.text[pos - 1]):
            pos -= 1
        while pos and _is_word(self.text[pos - 1]):
            pos -= 1
        return pos

    def _word_end(self, pos: int) -> int:
        n = len(self.text)
        while pos < n and not _is_word(self.text[pos]):
            pos += 1
        while pos < n and _is_word(self.text[pos]):
            pos += 1
        return pos

    def _history_step(self, step: int) -> None:
        if not self.history:
            return
        if self._browsing is None:
            if step > 0:
                return
            self._draft = self.text
            index = len(self.history) - 1
        else:
            index = self._browsing + step
        if index < 0:
            return
        if index >= len(self.history):
            self.text, self._browsing = self._draft, None
        else:
            self.text, self._browsing = self.history[index], index
        self.pos = len(self.text)

    def _complete(self) -> None:
        if not self.text.startswith("/") or " " in self.text or self.pos != len(self.text):
            return
        matches = [c for c in self.completions if c.startswith(self.text)]
        if not matches:
            return
        common = min(matches)
        for other in matches:
            while not other.startswith(common):
                common = common[:-1]
        self.set_text(common + (" " if len(matches) == 1 else ""))

    def complete_word(self, values: Sequence[str]) -> None:
        """Replace the line's last word with what all of *values* (its completions) start
        with; a single value is taken whole, with a space after it."""
        if not values:
            return
        common = min(values)
        for other in values:
            while not other.startswith(common):
                common = common[:-1]
        head, sep, last = self.text.rpartition(" ")
        if len(common) < len(last) and len(values) > 1:
            return  # the values do not extend what is typed (a server matching otherwise)
        self.set_text(head + sep + common + (" " if len(values) == 1 else ""))

    # -- drawing ----------------------------------------------------------------------------

    def view(self, width: int) -> tuple[str, str, str]:
        """The part of the line that fits *width* cells: before the cursor, under it, after.

        The window scrolls sideways to keep the cursor in sight (and stays put while it is).
        """
        shown = [_shown(c) for c in self.text]
        width = max(2, width)
        pos = self.pos
        self._scroll = min(self._scroll, pos)
        # Room for the cursor cell itself.
        while self._scroll < pos and _cells("".join(shown[self._scroll : pos])) + 1 > width:
            self._scroll += 1
        start = self._scroll
        used = _cells("".join(shown[start:pos]))
        end = pos
        while end < len(shown) and used + _cells(shown[end]) <= width - (end == pos):
            used += _cells(shown[end])
            end += 1
        before = "".join(shown[start:pos])
        at = shown[pos] if pos < len(shown) and end > pos else ""
        after = "".join(shown[pos + 1 : end]) if at else ""
        return before, at, after

    def shown(self) -> str:
        """The whole line as drawn (newlines as ``⏎``)."""
        return "".join(_shown(c) for c in self.text)


class _Question:
    def __init__(self, question: str, complete: Callable[[str], bool] | None = None) -> None:
        self.question = question
        self.complete = complete
        self.editor = LineEditor()
        self.done = trio.Event()
        self.answer: str | None = None
        self.answered = False


Mode = Literal["hidden", "prompt", "view"]


def open_tty_fd() -> int:
    """Open the terminal on stdin a second time (a file description of our own).

    Raises:
        OSError: stdin is not a terminal.
    """
    try:
        return os.open(os.ttyname(sys.stdin.fileno()), os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        if not os.isatty(sys.stdin.fileno()):
            raise
        # No name for it (rare): share fd 0's description; FdStream restores its blocking mode
        # when closed.
        return os.dup(sys.stdin.fileno())


class Keyboard:
    """The terminal's keys for a chat: the chat line and the questions asked meanwhile.

    Args:
        fd: the terminal, opened for this keyboard (see :func:`open_tty_fd`); closed by
            :meth:`run` (or :meth:`close` if it never ran).
        out: where the prompt is drawn (the terminal's stdout).
        history: the input history (oldest first), shared: it grows as lines are entered.
        completions: what Tab completes (slash commands).
        complete_args: what Tab after a slash command's first word completes with: the
            values the line's last word may become (an MCP prompt's arguments, from the
            server: docs/mcp.md); asked in a task of the keyboard's, given up at the next key.
    """

    def __init__(
        self,
        fd: int,
        out: TextIO,
        *,
        history: list[str] | None = None,
        completions: Sequence[str] = (),
        complete_args: Callable[[str], Awaitable[list[str]]] | None = None,
    ) -> None:
        self._fd = fd
        self._out = out
        self.editor = LineEditor(history, completions)
        self._send, self.lines = trio.open_memory_channel[str | None](MAX_QUEUED_LINES)
        """Lines entered with Enter, in order; ``None`` is end of input (Ctrl+D)."""
        self._mode: Mode = "hidden"
        self._prompt = ""
        self._question: _Question | None = None
        self._running = False
        self._closed = False
        self.on_change: Callable[[], None] | None = None
        """Called when the chat line changes while the live view draws it (a redraw poke)."""
        self._key_answered = False
        """The last key answered a question by itself: an Enter right after it is dropped."""
        self.complete_args = complete_args
        self._tasks: trio.Nursery | None = None
        self._completing: trio.CancelScope | None = None

    @property
    def history(self) -> list[str]:
        return self.editor.history

    def close(self) -> None:
        """Release the terminal fd if :meth:`run` never took it over."""
        if not self._closed and not self._running:
            os.close(self._fd)
        self._closed = True

    # -- what the chat line looks like now --------------------------------------------------

    def show_prompt(self, prompt: str) -> None:
        """Draw the chat line at the cursor, after *prompt* (the chat is idle)."""
        self._mode = "prompt"
        self._prompt = prompt
        self._draw()

    def show_in_view(self) -> None:
        """The live view draws the chat line from now on (see :meth:`footer`)."""
        self._mode = "view"
        self._draw()

    def hide(self) -> None:
        """Draw the chat line nowhere (keys still go into it)."""
        self._mode = "hidden"

    def set_text(self, text: str) -> None:
        """Put *text* in the chat line (lines the agent never took, given back)."""
        self.editor.set_text(text)
        self._draw()

    def interrupt(self) -> None:
        """Ctrl+C at the prompt: drop the line, and start a fresh one below it."""
        self.editor.clear()
        if self._mode == "prompt" and self._question is None:
            self._write("^C\r\n")
        self._draw()

    def footer(self, width: int) -> Text:
        """The chat line for the live view: the text with a visible cursor (the live region
        hides the terminal's)."""
        from rich.text import Text

        line = Text()
        line.append(f"{PROMPT_MARK} ", style="bold")
        if not self.editor.text:
            line.append(" ", style="reverse")
            line.append(
                " type to add to the conversation (delivered at the agent's next step)",
                style="dim",
            )
            return line
        before, at, after = self.editor.view(width - 3)
        line.append(before)
        line.append(at or " ", style="reverse")
        line.append(after)
        return line

    # -- questions --------------------------------------------------------------------------

    async def ask(
        self, question: str, *, complete: Callable[[str], bool] | None = None
    ) -> str | None:
        """Ask *question* at the cursor and read one line with the editor.

        Args:
            complete: whether the text typed so far is already the answer: the question ends
                without Enter (the picker's number, a permission's ``y``: docs/cli.md).

        Returns:
            The line, or None at end of input (Ctrl+D) or when the keyboard is closed.

        Cancellation: the way to cut a question short (a Ctrl+C, an answer from elsewhere):
        the line is left on screen as typed and the cursor moves below it.
        """
        if self._closed or not self._running:
            return None
        q = _Question(question, complete)
        self._question = q
        self._draw()
        try:
            await q.done.wait()
        finally:
            self._question = None
            if not q.answered:
                self._commit(q.question, q.editor)
            self._draw()
        return q.answer

    # -- the task ---------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read keys until cancelled or the terminal closes; the terminal is in cbreak mode
        meanwhile.

        Cancellation: the way to stop it; the terminal's mode is restored and the fd closed.
        """
        decoder = KeyDecoder()
        self._running = True
        try:
            saved = termios.tcgetattr(self._fd)
        except termios.error:
            saved = None
        try:
            async with trio.open_nursery() as tasks, trio.lowlevel.FdStream(self._fd) as stream:
                self._tasks = tasks
                try:
                    if saved is not None:
                        mode = termios.tcgetattr(self._fd)
                        mode[3] &= ~(termios.ICANON | termios.ECHO | termios.IEXTEN)
                        mode[6][termios.VMIN] = 1
                        mode[6][termios.VTIME] = 0
                        # TCSANOW: keys typed before this moment stay in the queue.
                        termios.tcsetattr(self._fd, termios.TCSANOW, mode)
                        self._write(_PASTE_ON)
                    task_status.started()
                    while True:
                        data = await stream.receive_some(4096)
                        if not data:  # the terminal went away: end of input
                            self._send_line(None)
                            return
                        for key in decoder.feed(data):
                            self._on_key(key)
                        # An Enter typed with a one-key answer ("2⏎", read at once) is the
                        # answer's, not an empty line for what comes next.
                        self._key_answered = False
                finally:
                    self._tasks = None
                    tasks.cancel_scope.cancel(reason="the keyboard is closing")
                    if saved is not None:
                        self._write(_PASTE_OFF)
                        with contextlib.suppress(termios.error):
                            termios.tcsetattr(self._fd, termios.TCSANOW, saved)
        finally:
            self._closed = True
            self._running = False
            self._send.close()  # the chat sees the end of input
            question = self._question
            if question is not None:
                question.done.set()

    def _on_key(self, key: Key) -> None:
        if key.name == "ctrl-l" and (self._question is not None or self._mode == "prompt"):
            self._write("\x1b[H\x1b[2J")
        if self._key_answered and key.name == "enter":
            self._key_answered = False
            return
        self._key_answered = False
        if self._completing is not None:
            self._completing.cancel(reason="a key came before the completions")
            self._completing = None
        question = self._question
        if question is not None and question.answered:
            question = None  # answered by this same read: the rest is the chat line's
        if question is not None:
            result = question.editor.handle(key)
            complete = question.complete
            if result is None and complete is not None and complete(question.editor.text):
                result = "submit"
                self._key_answered = True
            if result is not None:
                question.answer = question.editor.text if result == "submit" else None
                question.answered = True
                self._commit(question.question, question.editor)
                question.done.set()
                return
            self._draw()
            return
        if key.name == "tab" and self._wants_args(self.editor):
            assert self._tasks is not None
            self._tasks.start_soon(self._complete_args, self.editor.text)
            return
        result = self.editor.handle(key)
        if result == "submit":
            text = self.editor.text
            if not self._send_line(text):
                self._write("\a")  # the chat is far behind: keep the line, say so
                return
            if self._mode == "prompt":
                self._commit(self._prompt, self.editor)
                self._mode = "hidden"
            self.editor.accept()
        elif result == "eof":
            if self._mode != "prompt":
                return  # only the idle prompt ends the chat; the agent may be mid-turn
            self._commit(self._prompt, self.editor)
            self._mode = "hidden"
            self._send_line(None)
        self._draw()

    def _wants_args(self, editor: LineEditor) -> bool:
        text = editor.text
        return (
            self.complete_args is not None
            and self._tasks is not None
            and self._mode == "prompt"  # a prompt command waits for the turn to end
            and text.startswith("/")
            and " " in text
            and editor.pos == len(text)
        )

    async def _complete_args(self, text: str) -> None:
        """Tab on a command's arguments: ask for the last word's completions, and use them
        if the line is still as it was (any key meanwhile cancels this)."""
        complete = self.complete_args
        assert complete is not None
        with trio.CancelScope() as scope:
            self._completing = scope
            try:
                values = await complete(text)
            finally:
                if self._completing is scope:
                    self._completing = None
        if scope.cancelled_caught or self.editor.text != text or self._mode != "prompt":
            return  # a key, or a turn, came first: the line is no longer the one asked about
        if not values:
            self._write("\a")
            return
        if len(values) > 1:
            shown = "  ".join(v.rpartition("=")[2] if "=" in v else v for v in values)
            width = self._width() - 1
            self.print_above(shown if len(shown) <= width else shown[: width - 1] + "…")
        self.editor.complete_word(values)
        self._draw()

    def _send_line(self, line: str | None) -> bool:
        try:
            self._send.send_nowait(line)
        except trio.WouldBlock:
            return False
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # nobody listens any more: the chat is ending
        return True

    # -- drawing ----------------------------------------------------------------------------

    def _width(self) -> int:
        try:
            return os.get_terminal_size(self._fd).columns
        except OSError:
            return 80

    def _draw(self) -> None:
        question = self._question
        if question is not None:
            self._draw_line(question.question, question.editor)
        elif self._mode == "prompt":
            self._draw_line(self._prompt, self.editor)
        elif self._mode == "view" and self.on_change is not None:
            self.on_change()

    def _draw_line(self, prompt: str, editor: LineEditor) -> None:
        width = self._width()
        room = max(8, width - _cells(prompt) - 1)
        before, at, after = editor.view(room)
        column = _cells(prompt) + _cells(before)
        back = f"\r\x1b[{column}C" if column else "\r"
        self._write(f"\r{prompt}{before}{at}{after}\x1b[K{back}")

    def print_above(self, line: str) -> None:
        """Print *line* above the line being edited (a question's or the prompt's), which is
        then drawn again below it, as typed so far."""
        self._write(f"\r{line}\x1b[K\r\n")
        self._draw()

    def _commit(self, prompt: str, editor: LineEditor) -> None:
        # The whole line stays on screen as entered (the terminal wraps a long one).
        self._write(f"\r{prompt}{editor.shown()}\x1b[K\r\n")

    def _write(self, text: str) -> None:
        try:
            self._out.write(text)
            self._out.flush()
        except (OSError, ValueError):
            pass  # the terminal is gone; the run goes on
