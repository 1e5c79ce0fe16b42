"""What the live view writes to the terminal: styled lines as escapes, and the region it redraws.

rich draws the tree's lines well but slowly for a view redrawn a dozen times a second while
a hundred agents stream: about 8 ms a frame of 50 lines, most of it building ``Text`` objects
and cutting segments. Here a frame is written straight from the tree's
:class:`~runtime.trace._render.StyledLine` pieces: each style's escape codes are asked of rich
once (so colours, ``NO_COLOR`` and the terminal's colour system are rich's), a line is cut to
the screen as rich cuts it (the description first, then ``…`` at the end, by cells), and the
region is redrawn in place, rewriting only the lines that changed. The result on screen is
rich's, cell for cell (``tests/test_frame.py`` holds it to that).

:class:`LiveRegion` is the part of the screen the live view owns, below everything printed:
it hides the cursor while shown, and anything printed on the console meanwhile (by the view, a
prompt, or a stray ``print``, which it redirects as rich's ``Live`` does) goes above it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, TextIO

from rich.cells import cell_len, set_cell_size
from rich.console import COLOR_SYSTEMS, RenderHook
from rich.segment import ControlType, Segment

if TYPE_CHECKING:
    from rich.console import (
        Console,
        ConsoleOptions,
        ConsoleRenderable,
        RenderableType,
        RenderResult,
    )
    from rich.file_proxy import FileProxy

    from runtime.trace import StyledLine

Line = tuple[str, int]
"""One terminal line: its text with escape codes, and its width in cells."""

_MIN_DESC: Final = 12  # as runtime.trace._render._MIN_DESC (a test keeps them equal)
_RESET: Final = "\x1b[0m"
_CONTROL: Final = dict.fromkeys((*range(32), *range(0x7F, 0xA0)))
"""Control characters: dropped from labels (a model's text must not drive the terminal)."""


def _narrow_set() -> frozenset[str]:
    candidates = [chr(c) for c in range(0x20, 0x7F)]
    candidates += list("│├└─…✓✗⊘⏱⚠●⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏→Σ⟲\N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK}")
    return frozenset(c for c in candidates if cell_len(c) == 1)


_NARROW: Final = _narrow_set()
"""Characters known to be one cell wide: a line of only these is measured by its length."""


def cells(text: str) -> int:
    """The width of *text* in terminal cells (as rich measures it)."""
    return len(text) if _NARROW.issuperset(text) else cell_len(text)


class AnsiLines:
    """Turns styled lines into terminal lines for one console.

    Args:
        console: whose colour system and ``NO_COLOR`` setting decide the escape codes.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        name = console.color_system
        self._system = COLOR_SYSTEMS.get(name) if name is not None else None
        self._no_color = console.no_color
        self._codes: dict[tuple[str, str], str] = {}

    def sgr(self, base: str, style: str) -> str:
        """The escape that starts *style* over *base* ('' for none); ``\\x1b[0m`` ends it."""
        key = (base, style)
        code = self._codes.get(key)
        if code is None:
            code = self._codes[key] = self._make(base, style)
        return code

    def _make(self, base: str, style: str) -> str:
        from rich.style import Style

        if self._system is None:
            return ""
        get = self.console.get_style
        combined = get(base, default=Style.null()) + get(style, default=Style.null())
        if self._no_color:
            combined = combined.without_color
        if not combined:
            return ""
        return combined.render("\0", color_system=self._system).partition("\0")[0]

    def line(self, line: StyledLine, width: int) -> list[Line]:
        """*line* as it fits *width*: one terminal line (cut), or more when it wraps."""
        parts = line.parts
        plain = "".join([text for text, _ in parts])
        if not plain.isprintable():
            parts = [(text.translate(_CONTROL), style) for text, style in parts]
            plain = "".join([text for text, _ in parts])
        if line.desc is not None:
            parts, plain = _shrink_desc(parts, plain, line.desc, line.essential, width)
        size = cells(plain)
        if size > width:
            if line.wrap:
                return self.renderable(line.to_text(), width)
            parts, size = _cut(parts, plain, width)
        return [(self._paint(parts, line.base), size)]

    def text(self, text: str, width: int, style: str = "") -> Line:
        """One line of plain *text* in *style*, cut to *width* with ``…``."""
        if not text.isprintable():
            text = text.translate(_CONTROL)
        parts = [(text, style)]
        size = cells(text)
        if size > width:
            parts, size = _cut(parts, text, width)
        return self._paint(parts, ""), size

    def _paint(self, parts: Iterable[tuple[str, str]], base: str) -> str:
        out: list[str] = []
        current = ""
        for text, style in parts:
            if not text:
                continue
            code = self.sgr(base, style)
            if code != current:
                if current:
                    out.append(_RESET)
                if code:
                    out.append(code)
                current = code
            out.append(text)
        if current:
            out.append(_RESET)
        return "".join(out)

    def renderable(self, renderable: RenderableType, width: int) -> list[Line]:
        """Any rich renderable as terminal lines of at most *width* cells (rich renders it:
        for the few lines that are not tree lines, such as the chat's input line)."""
        console = self.console
        options = console.options.update(width=width, height=None)
        out: list[Line] = []
        for segments in console.render_lines(renderable, options, pad=False):
            if self._no_color:
                segments = list(Segment.remove_color(segments))
            pieces: list[str] = []
            size = 0
            for text, style, control in segments:
                if control:
                    continue
                size += cells(text)
                if style and self._system is not None:
                    pieces.append(style.render(text, color_system=self._system))
                else:
                    pieces.append(text)
            out.append(("".join(pieces), size))
        return out


def _shrink_desc(
    parts: list[tuple[str, str]],
    plain: str,
    desc: tuple[int, int],
    essential: int | None,
    width: int,
) -> tuple[list[tuple[str, str]], str]:
    """As :meth:`runtime.trace._render.FitText.fitted_to`: the description gives way first."""
    needed = len(plain) if essential is None else essential
    if needed < len(plain):
        needed += 1
    if needed <= width:
        return parts, plain
    start, end = desc
    keep = max(_MIN_DESC, (end - start) - (needed - width) - 1)
    if keep >= end - start:
        return parts, plain
    out = _slice(parts, 0, start)
    out += _slice(parts, start, start + keep)
    out.append(("…", ""))
    out += _slice(parts, end, len(plain))
    return out, plain[: start + keep] + "…" + plain[end:]


def _slice(parts: list[tuple[str, str]], start: int, end: int) -> list[tuple[str, str]]:
    """The pieces of characters *start* to *end* (character offsets in the line)."""
    out: list[tuple[str, str]] = []
    pos = 0
    for text, style in parts:
        nxt = pos + len(text)
        if nxt > start and pos < end:
            out.append((text[max(0, start - pos) : end - pos], style))
        pos = nxt
        if pos >= end:
            break
    return out


def _cut(parts: list[tuple[str, str]], plain: str, width: int) -> tuple[list[tuple[str, str]], int]:
    """As rich's ``Text.truncate(overflow="ellipsis")``: the first *width* - 1 cells and ``…``.

    The ``…`` takes the style of the character it replaces, as in rich.
    """
    kept = set_cell_size(plain, width - 1)
    n = len(kept)
    out: list[tuple[str, str]] = []
    pos = 0
    ellipsis_style = ""
    for text, style in parts:
        nxt = pos + len(text)
        if pos < n:
            out.append((kept[pos : min(nxt, n)], style))
        if pos <= n < nxt:
            ellipsis_style = style
            break
        pos = nxt
    out.append(("…", ellipsis_style))
    return out, cells(kept) + 1


class _Escapes:
    """Escape codes printed among rich renderables, taking no room on the line."""

    _AS_CONTROL: Final = ((ControlType.HOME,),)  # any control code: rich then counts no width

    def __init__(self, text: str) -> None:
        self.text = text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.text:
            yield Segment(self.text, None, self._AS_CONTROL)


class LiveRegion(RenderHook):
    """The lines at the bottom of the terminal that the live view redraws in place.

    While shown, the cursor is hidden, and whatever is printed on the console (or on
    ``sys.stdout`` / ``sys.stderr``, redirected as rich's ``Live`` does) goes above the region,
    which is drawn again below it.

    Args:
        console: the terminal console.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        self.shown = False
        self._lines: list[Line] = []  # what is on screen, top to bottom
        self._width = 0
        self._restore: list[tuple[str, TextIO]] = []
        self.bytes_written = 0

    def show(self) -> None:
        """Take the bottom of the terminal (nothing is drawn until :meth:`draw`)."""
        from rich.file_proxy import FileProxy

        if self.shown:
            return
        self.shown = True
        self._lines = []
        console = self.console
        console.show_cursor(False)
        console.push_render_hook(self)
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if not isinstance(stream, FileProxy):
                self._restore.append((name, stream))
                proxy: FileProxy = FileProxy(console, stream)
                setattr(sys, name, proxy)

    def hide(self) -> None:
        """Clear the region and give the terminal back: the cursor is where the region began."""
        if not self.shown:
            return
        self.shown = False
        console = self.console
        for name, stream in self._restore:
            setattr(sys, name, stream)
        self._restore.clear()
        console.pop_render_hook()
        self.write(self._clear())
        self._lines = []
        console.show_cursor(True)

    def draw(self, lines: Sequence[Line], width: int) -> None:
        """Show *lines* (each at most *width* cells), rewriting only those that changed."""
        if not self.shown:
            return
        old = self._lines
        if width != self._width or not lines:  # a new width: the old lines may have wrapped
            self.write(self._clear())
            old = self._lines = []
            self._width = width
        if not lines:
            return
        out: list[str] = []
        if old:
            out.append("\r")
            if len(old) > 1:
                out.append(f"\x1b[{len(old) - 1}A")
        for i, (text, size) in enumerate(lines):
            if i:
                out.append("\n")
            if i < len(old) and old[i] == (text, size):
                continue
            out.append("\r")
            out.append(text)
            if size < width:
                out.append("\x1b[K")  # the rest of the old line
        if len(old) > len(lines):  # the region shrank: blank what is below, come back up
            out.append("\n\r\x1b[J\x1b[1A")
        self._lines = list(lines)
        self.write("".join(out))

    def _clear(self) -> str:
        """Codes that blank the region and leave the cursor at its first line's start."""
        count = len(self._lines)
        if not count:
            return ""
        up = f"\x1b[{count - 1}A" if count > 1 else ""
        return f"\r{up}\x1b[J"

    def _redraw(self) -> str:
        return "\n".join(text for text, _ in self._lines)

    def process_renderables(
        self, renderables: list[ConsoleRenderable]
    ) -> list[ConsoleRenderable]:
        """rich's hook for a print while the region is shown: clear it, print, draw it below."""
        clear = self._clear()
        redraw = self._redraw()
        return [_Escapes(clear), *renderables, _Escapes(redraw)]

    def write(self, data: str) -> None:
        """Write *data* to the terminal now (escape codes included)."""
        if not data:
            return
        out: Any = self.console.file
        try:
            out.write(data)
            out.flush()
        except (BrokenPipeError, ValueError):
            return  # the terminal went away: the run goes on without an audience
        self.bytes_written += len(data)
