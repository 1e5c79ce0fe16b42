"""Reading JSONL trace files: streaming, honest about broken lines, and fast.

A trace file is one event (docs/events.md) per line. Files come from killed processes and from newer
versions, so reading is tolerant in precise ways:

- a truncated last line (no newline, not valid JSON: the writer was killed) ends the file quietly;
  ``TraceLoader.truncated`` says it happened;
- any other bad line is reported, with its line number, to ``on_error`` and skipped;
- an event type this version does not know is skipped, reported once per type;
- an empty file, or one with no valid event in its first :data:`SNIFF_LINES` lines (not a trace at
  all), raises :class:`~runtime.core._errors.TraceError` with one clear line.

Two paths share these rules. :func:`read_events` yields :class:`~runtime.core._events.Event` objects
(full decoding through the cattrs converter). :func:`load_traces` builds the run trees directly
from the decoded JSON objects, which is several times faster: the tree checks the fields it uses,
and a line it rejects goes through the full decoder for a precise message. :func:`follow_lines`
polls a file that is still being written, for ``trace tail``.
"""

from __future__ import annotations

import gc
import os
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, BinaryIO, Final

import orjson

from runtime.core import EventDecodeError, TraceError, UnknownEventType

from ._tree import TraceSet, TraceTree

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    import trio

    from runtime.core import Event

READ_BUFFER: Final = 1 << 16
"""The read buffer for trace files: with the default (the file system's block size, often 4 KiB)
iterating the lines of a big file makes a read system call every few lines; 64 KiB cuts the
time to split a 230 MB file into lines by about a third."""
MAX_TAIL_LINE: Final = 64 << 20
"""The longest line ``trace tail`` keeps whole (an event is far smaller; a longer line is cut)."""
_CUT_LINE_KEEP: Final = 200
SNIFF_LINES: Final = 20
"""A file whose first this-many lines hold no valid event is not a trace."""
_SNIFF_BYTES: Final = 4096
# How encode_event starts the lines a report can do without (the type first, then seq); see
# TraceLoader._load_lines.
_TURN_PREFIX: Final = b'{"type":"turn_finished","seq":'
_REPORT_SKIPS: Final = (
    b'{"type":"text_delta","seq":',
    b'{"type":"thinking_delta","seq":',
    _TURN_PREFIX,
)

OnError = Callable[[EventDecodeError], None]
"""Called with each skipped line's error (its ``line`` attribute is the line number)."""


def _preview(line: bytes) -> str:
    text = line.strip().decode("utf-8", "replace")
    return repr(text if len(text) <= 40 else text[:40] + "…")


class TraceLoader:
    """Feeds trace lines into a :class:`~runtime.trace._tree.TraceSet`, applying the reading rules.

    Args:
        traces: where the events go.
        name: how messages name the file.
        on_error: called for every skipped line (default: collect them in ``errors``).
    """

    def __init__(
        self, traces: TraceSet, *, name: str = "trace", on_error: OnError | None = None
    ) -> None:
        self.traces = traces
        self.name = name
        self.errors: list[EventDecodeError] = []
        self._on_error = on_error if on_error is not None else self.errors.append
        self.unknown_types: dict[str, int] = {}
        """Event types skipped because this version does not know them, with their counts."""
        self.lines = 0
        """Lines read so far."""
        self.events = 0
        """Events applied so far (counted at the end of a batch load, and per line when fed)."""
        self.truncated = False
        """Whether the file ended in a partial line (a killed writer)."""
        self._bad = 0  # lines neither an event nor blank (unknown types are events, not bad)
        self._blank = 0
        # seq must grow within a run: lines where it went back, the first such line, and the
        # last seq of each run seen (a run's lines may interleave with another's).
        self.seq_backwards = 0
        self._first_backwards: int | None = None
        self._last_seq: dict[object, Any] = {}
        self._reported = False

    def load(self, f: BinaryIO) -> None:
        """Read every line of *f* (opened in binary mode) into the trees.

        Raises:
            TraceError: the file is empty or not a trace.
        """
        head = f.read(_SNIFF_BYTES)
        if b"\0" in head:  # a binary file; also spares us reading it as one huge "line"
            raise TraceError(f"{self.name}: not a trace file (binary data)")
        f.seek(0)
        # The nodes we build live as long as the trees, so the cycle collector's passes over
        # them buy nothing while loading; they dominate a million-event load if left on.
        enabled = gc.isenabled()
        gc.disable()
        try:
            self._load_lines(enumerate(f, 1))
            if not self.traces.keep_details and self._unfinished_agents():
                # Their usage is only in the turn_finished lines the first pass skipped.
                f.seek(0)
                self._load_turns(enumerate(f, 1))
        finally:
            if enabled:
                gc.enable()
        self.finish()

    def _unfinished_agents(self) -> bool:
        return any(
            agent.finished_ts is None
            for tree in self.traces.by_run.values()
            for agent in tree.agents.values()
        )

    def _load_turns(self, lines: Iterable[tuple[int, bytes]]) -> None:
        loads = orjson.loads
        traces = self.traces
        for lineno, line in lines:
            if not line.startswith(_TURN_PREFIX):
                continue
            try:
                fields = loads(line)
                traces.tree_for(fields["run_id"]).handlers["turn_finished"](fields)
            except Exception:
                if not self._slow(lineno, line):
                    break

    def _load_lines(self, lines: Iterable[tuple[int, bytes]]) -> None:
        # The hot loop: decode, pick the run's handler table, dispatch. Anything unusual (a bad
        # line, an unknown type) raises and is sorted out by the slow path.
        loads = orjson.loads
        traces = self.traces
        run_id: object = None
        handlers: dict[str, Callable[[Any], None]] = {}
        lineno = self.lines
        # A report (trees without details) needs nothing from a delta line, nor from a
        # turn_finished line of an agent that finishes (agent_finished has its totals): their
        # shape in the writer's layout is checked, not decoded. Most lines of a trace are
        # deltas, so this is where a report beats decoding every line; turns of agents that
        # never finished are read by a second pass, only when there are such agents.
        skip = () if traces.keep_details else _REPORT_SKIPS
        last_seq = self._last_seq
        seq: Any = 0
        for lineno, line in lines:
            if line.startswith(skip) and line.endswith(b"}\n"):
                continue
            try:
                fields = loads(line)
                if fields["run_id"] != run_id:
                    last_seq[run_id] = seq
                    handlers = traces.tree_for(fields["run_id"]).handlers
                    run_id = fields["run_id"]
                    seq = last_seq.get(run_id, 0)
                handlers[fields["type"]](fields)
                if fields["seq"] > seq:
                    seq = fields["seq"]
                else:
                    self._backwards(lineno)
            except Exception:
                if not self._slow(lineno, line):
                    break
        last_seq[run_id] = seq
        self.lines = lineno
        self.events = self.lines - self._bad - self._blank - sum(self.unknown_types.values())

    def feed(self, lineno: int, line: bytes) -> dict[str, Any] | None:
        """Apply one line; returns its event's JSON object, or None if it was skipped."""
        self.lines = lineno
        try:
            fields = orjson.loads(line)
            self.traces.apply_dict(fields)
            run_id = fields["run_id"]
            if fields["seq"] > self._last_seq.get(run_id, 0):
                self._last_seq[run_id] = fields["seq"]
            else:
                self._backwards(lineno)
        except Exception:
            ok = self._slow(lineno, line)
            return self._last if ok else None
        self.events += 1
        return fields  # type: ignore[no-any-return]

    _last: dict[str, Any] | None = None

    def _slow(self, lineno: int, line: bytes) -> bool:
        """Handle a line the fast path rejected; returns False to stop reading (truncated end)."""
        self._last = None
        try:
            fields = orjson.loads(line)
        except orjson.JSONDecodeError:
            if not line.strip():
                self._blank += 1
                return True
            if not line.endswith(b"\n"):
                # Only the last line of a file can lack its newline: a killed writer.
                self.truncated = True
                self._blank += 1
                return False
            self._report(EventDecodeError(f"not JSON: {_preview(line)}", line=lineno))
            return True
        tree = None
        try:
            if fields.__class__ is not dict:
                raise EventDecodeError(f"an event is a JSON object, not {type(fields).__name__}")
            run_id: Any = fields.get("run_id")
            tree = self.traces.tree_for(run_id)
            tree.apply_dict(fields)
        except UnknownEventType as exc:
            return self._unknown(exc.type_name, lineno, fields)
        except Exception as exc:
            # Let the full decoder name the faulty field; if it accepts the event after all,
            # the tree is stricter than the schema and reports its own reason.
            from runtime.core import event_from_dict

            try:
                event = event_from_dict(fields)
                if tree is None:
                    tree = self.traces.tree_for(event.run_id)
                tree.apply(event)
            except UnknownEventType as unknown:
                return self._unknown(unknown.type_name, lineno, fields)
            except EventDecodeError as precise:
                self._report(EventDecodeError(str(precise), line=lineno))
                return True
            except Exception:
                self._report(EventDecodeError(f"invalid event: {exc}", line=lineno))
                return True
        self._last = fields
        return True

    def _unknown(self, type_name: str, lineno: int, fields: dict[str, Any]) -> bool:
        if type_name not in self.unknown_types:
            self.unknown_types[type_name] = 0
            self._on_error(
                UnknownEventType(type_name, line=lineno)
                if "seq" in fields
                else EventDecodeError(f"not an event: unknown type {type_name!r}", line=lineno)
            )
        if "seq" in fields:
            self.unknown_types[type_name] += 1
        else:
            self._bad += 1
        self._check_is_trace(lineno)
        return True

    def _backwards(self, lineno: int) -> None:
        self.seq_backwards += 1
        if self._first_backwards is None:
            self._first_backwards = lineno

    def report_anomalies(self) -> None:
        """Report, once, lines whose ``seq`` went back: one report for them all, at the first.

        What the trees worked around (events naming a node twice, parent cycles) is told by
        :meth:`~runtime.trace._tree.TraceTree.anomalies`.
        """
        if self._reported:
            return
        self._reported = True
        if self.seq_backwards:
            self._on_error(
                EventDecodeError(
                    f"seq goes back on {self.seq_backwards} lines (two writers, or lines out "
                    "of order); the tree is built in file order",
                    line=self._first_backwards,
                )
            )

    def _report(self, error: EventDecodeError) -> None:
        self._bad += 1
        self._check_is_trace(error.line or 0)
        self._on_error(error)

    def _check_is_trace(self, lineno: int) -> None:
        if lineno >= SNIFF_LINES and self._bad + self._blank == lineno:
            raise TraceError(
                f"{self.name}: not a trace file (no event in {_lines(lineno, first=True)})"
            )

    def finish(self) -> None:
        """Check the whole file was a trace.

        Raises:
            TraceError: no line was an event (the file is empty or not a trace).
        """
        if self.lines - self._bad - self._blank > 0:
            self.report_anomalies()
            return
        if self._bad:
            raise TraceError(f"{self.name}: not a trace file (no event in {_lines(self.lines)})")
        if self.truncated:
            raise TraceError(f"{self.name}: no complete event (the only line is cut short)")
        raise TraceError(f"{self.name}: empty trace file")


def open_trace(path: str | os.PathLike[str]) -> BinaryIO:
    """Open a trace file for :meth:`TraceLoader.load`.

    Raises:
        TraceError: one line saying why it cannot be opened.
    """
    try:
        return open(path, "rb", buffering=READ_BUFFER)
    except FileNotFoundError:
        raise TraceError(f"{os.fspath(path)}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{os.fspath(path)}: is a directory, not a trace file") from None
    except OSError as exc:
        raise TraceError(f"{os.fspath(path)}: cannot read: {exc.strerror}") from exc


def load_traces(
    path: str | os.PathLike[str],
    *,
    on_error: OnError | None = None,
    live: bool = False,
    keep_details: bool = True,
) -> list[TraceTree]:
    """The tree of every run in the trace file at *path*, in the order runs first appear.

    Streams the file: memory grows with the number of nodes, not of events.

    Args:
        path: the JSONL trace.
        on_error: called for each skipped line (see the module docstring).
        live: the file is still being written (unfinished nodes stay ``running``).
        keep_details: keep the agents' streamed text and every tool input (see TraceTree).
            Without them, loading is faster: delta lines, and the turn_finished lines of agents
            that finish, are checked for shape only, not decoded.

    Raises:
        TraceError: the file is missing, empty or not a trace.
    """
    traces = TraceSet(keep_details=keep_details)
    with open_trace(path) as f:
        TraceLoader(traces, name=os.fspath(path), on_error=on_error).load(f)
    if not live:
        traces.end()
    return traces.trees


def read_events(
    path: str | os.PathLike[str], *, on_error: OnError | None = None
) -> Iterator[Event]:
    """Yield the events of the trace file at *path*, one line at a time.

    Follows the reading rules of the module docstring.

    Raises:
        TraceError: the file is missing, empty or not a trace.
    """
    from runtime.core import decode_event

    name = os.fspath(path)
    seen_types: set[str] = set()
    report: OnError = on_error if on_error is not None else (lambda _: None)
    good = bad = 0
    with open_trace(path) as f:
        if b"\0" in f.read(_SNIFF_BYTES):
            raise TraceError(f"{name}: not a trace file (binary data)")
        f.seek(0)
        lineno = 0
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                event = decode_event(line, lineno=lineno)
            except UnknownEventType as exc:
                good += 1
                if exc.type_name not in seen_types:
                    seen_types.add(exc.type_name)
                    report(exc)
                continue
            except EventDecodeError as exc:
                if not line.endswith(b"\n") and isinstance(exc.__cause__, orjson.JSONDecodeError):
                    break  # the truncated last line of a killed writer
                bad += 1
                if not good and lineno >= SNIFF_LINES:
                    raise TraceError(
                        f"{name}: not a trace file (no event in {_lines(lineno, first=True)})"
                    ) from None
                report(exc)
                continue
            good += 1
            yield event
    if not good:
        if bad:
            raise TraceError(f"{name}: not a trace file (no event in {_lines(lineno)})")
        raise TraceError(f"{name}: empty trace file")


def follow_lines(
    path: str | os.PathLike[str],
    *,
    poll_s: float = 0.1,
    chunk: int = 1 << 20,
    max_line: int = MAX_TAIL_LINE,
) -> AbstractAsyncContextManager[trio.abc.ReceiveChannel[list[tuple[int, bytes]]]]:
    """Receive the complete lines of a file still being written, in batches.

    Use as ``async with follow_lines(path) as batches: async for batch in batches:``; each
    batch is a list of ``(line number, line)`` for the lines that landed since the last one.
    Reads what is there, then polls for more every *poll_s* seconds, forever: the caller
    decides when to stop. A last line without its newline is held back until the newline
    arrives (a writer in the middle of a line). Of a line longer than *max_line* bytes only the
    start is kept (it then reads as a bad line): memory stays bounded.

    Cancellation: each batch is a checkpoint; leaving the ``async with`` closes the file.

    Raises:
        TraceError: the file does not exist or cannot be read (when entering).
    """
    import trio

    @trio.as_safe_channel
    async def batches() -> AsyncGenerator[list[tuple[int, bytes]], None]:
        # Plain reads, not trio's threaded file: reading what was appended to a local file is a
        # page-cache copy, and staying in the trio thread lets tests drive this with virtual time.
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            what = "no such file" if isinstance(exc, FileNotFoundError) else exc.strerror
            raise TraceError(f"{os.fspath(path)}: {what}") from None
        try:
            # The start of a line still without its newline, in pieces: joined once, when the
            # newline comes (joining on every read made a long line cost its length squared).
            pending: list[bytes] = []
            pending_len = 0
            lineno = 0
            while True:
                data = os.read(fd, chunk)
                if not data:
                    await trio.sleep(poll_s)
                    continue
                end = data.rfind(b"\n")
                if end == -1:
                    if pending_len < max_line:
                        pending.append(data)
                    pending_len += len(data)
                    await trio.lowlevel.checkpoint()
                    continue
                head = data[: end + 1]
                if pending_len:
                    first, _, head = head.partition(b"\n")
                    line = b"".join([*pending, first])
                    if pending_len + len(first) > max_line:
                        # Past the limit only its start was kept: the reader reports it.
                        line = line[:_CUT_LINE_KEEP] + b"...[line cut]"
                    head = line + b"\n" + head
                pending = [data[end + 1 :]] if end + 1 < len(data) else []
                pending_len = len(data) - end - 1
                batch = []
                for line in head.split(b"\n")[:-1]:
                    lineno += 1
                    batch.append((lineno, line + b"\n"))
                yield batch
        finally:
            os.close(fd)

    return batches()


def _lines(count: int, *, first: bool = False) -> str:
    """``its 1 lines`` reads wrong: ``its only line``, ``its 3 lines``, ``its first 3 lines``."""
    if count == 1:
        return "its first line" if first else "its only line"
    return f"its first {count} lines" if first else f"its {count} lines"
