"""A small terminal for tests: what a stream of text and escape codes leaves on the screen.

It knows what the live view and rich write: printable characters, ``\\r``, ``\\n`` (the pty's
``onlcr``: back to the first column), cursor up (``ESC[nA``), erase in line (``ESC[K``,
``ESC[2K``), erase below (``ESC[J``), colours (``ESC[…m``, kept per cell) and the cursor's
visibility (``ESC[?25l``/``h``). Anything else fails the test, so a new escape is noticed. The
screen is wide enough that nothing wraps, and grows at the bottom (scrolling).
"""

from __future__ import annotations

import re

_CSI = re.compile(r"\x1b\[([?0-9;]*)([A-Za-z])")

Cell = tuple[str, str]
"""A character and the colour parameters it was written with ('' for none)."""


def styled_cells(text: str) -> list[Cell]:
    """The cells of one line of *text* with its colour escapes (a wide character's second
    cell is ``("", style)``)."""
    from rich.cells import cell_len

    cells: list[Cell] = []
    style = ""
    pos = 0
    while pos < len(text):
        match = _CSI.match(text, pos)
        if match is not None:
            params, command = match.groups()
            assert command == "m", repr(match.group())
            style = "" if params in ("", "0") else params
            pos = match.end()
            continue
        char = text[pos]
        cells.append((char, style))
        if cell_len(char) == 2:
            cells.append(("", style))
        pos += 1
    return cells


class Screen:
    """The screen a stream of output leaves (feed it with :meth:`feed`)."""

    def __init__(self) -> None:
        self.rows: list[list[Cell]] = [[]]
        self.row = 0
        self.col = 0
        self.cursor_visible = True
        self.style = ""

    def feed(self, data: str) -> None:
        pos = 0
        while pos < len(data):
            char = data[pos]
            if char == "\x1b":
                match = _CSI.match(data, pos)
                assert match is not None, repr(data[pos : pos + 10])
                self._escape(*match.groups())
                pos = match.end()
                continue
            if char == "\r":
                self.col = 0
            elif char == "\n":
                self.row += 1
                self.col = 0
                while len(self.rows) <= self.row:
                    self.rows.append([])
            else:
                line = self.rows[self.row]
                while len(line) < self.col:
                    line.append((" ", ""))
                if self.col < len(line):
                    line[self.col] = (char, self.style)
                else:
                    line.append((char, self.style))
                self.col += 1
            pos += 1

    def _escape(self, params: str, command: str) -> None:
        line = self.rows[self.row]
        if command == "m":
            self.style = "" if params in ("", "0") else params
        elif command == "A":
            self.row -= int(params or 1)
            assert self.row >= 0, "the cursor went above the screen's first line"
        elif command == "K":
            if params == "2":
                line.clear()
            else:
                assert params in ("", "0"), params
                del line[self.col :]
        elif command == "J":
            assert params in ("", "0"), params
            del line[self.col :]
            for below in self.rows[self.row + 1 :]:
                below.clear()
        elif command in "lh" and params == "?25":
            self.cursor_visible = command == "h"
        else:
            raise AssertionError(f"unexpected escape: ESC[{params}{command}")

    def lines(self) -> list[str]:
        """The screen's text, one string a row, trailing blanks and empty rows dropped."""
        out = ["".join(char for char, _ in row).rstrip() for row in self.rows]
        while out and not out[-1]:
            out.pop()
        return out
