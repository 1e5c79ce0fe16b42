"""Ctrl+C and the terminal's questions: the subtree picker and permission prompts (docs/cli.md).

SIGINT is received by :func:`serve_sigint` through :func:`trio.open_signal_receiver` (never as a
``KeyboardInterrupt``). Without a terminal (stdin not a tty, or ``--json``) it aborts the run.
On a terminal it is handed to :class:`TerminalPrompts`, the ONE task allowed to ask the terminal
anything, so a Ctrl+C and several permission questions arriving together queue up instead of
fighting over the screen and the keyboard:

* Ctrl+C with sub-agents running pauses the live view and lists them, one a line, as
  ``[N] <agent name> <tool_use_id> <description>``; then a line is read: a number (or a listed
  tool_use_id) cancels that subtree only, ``s`` then a number stops it gracefully (its tool
  calls under way finish, it takes no new model turn: docs/collaboration.md#stop), ``a``
  cancels every running subtree of the root's turn,
  ``q`` aborts the run, an empty line resumes. Ctrl+C again at that prompt aborts the run.
  With no sub-agent running, Ctrl+C aborts (what an abort is belongs to the session: ``run``
  ends the run, ``chat`` may cancel the turn).
* A ``permission_requested`` event pauses the view and asks ``y`` / ``n`` / ``a`` (always, for
  this run; one key, no Enter), naming the asking agent by its path in the tree (``main``,
  ``scanner``, ``triager``, joined by :data:`SEP`).
  A question answered elsewhere meanwhile (the control socket, a timeout, a cancel) is dropped.
  A Ctrl+C at a permission question denies it, then acts as a Ctrl+C.

The agents never wait for the terminal: the view is paused, not the run, and only the tool call
that asked waits for its answer.

Reading the keyboard without blocking trio: the terminal is opened a second time, by name
(``os.ttyname(0)``), and read through :class:`trio.lowlevel.FdStream`, which needs the fd
non-blocking. A fresh ``open`` gives a file description of our own, so the non-blocking flag never
leaks to fd 0 (which the shell shares after we exit); a thread blocked in ``read`` would instead
outlive a cancelled prompt and swallow the next line. The terminal stays in canonical mode
(line editing, echo and Ctrl+C work as usual); type-ahead is discarded before each question so a
stray line typed while agents worked does not answer it.

In ``chat`` the keyboard is already read by the chat's line editor (:mod:`runtime.cli._keyboard`),
which must see every key; there the questions are asked through it (the ``keyboard`` argument
of :class:`TerminalPrompts`) instead of a second reader, with the same answers and the same
Ctrl+C behaviour.
"""

from __future__ import annotations

import contextlib
import os
import sys
import termios
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import trio

from runtime.core import (
    ElicitationRequested,
    ElicitationResolved,
    Event,
    PermissionRequested,
    PermissionResolved,
    visible,
)

if TYPE_CHECKING:
    from runtime.trace import RunningSubtree, TraceTree

    from ._live import LiveView
    from ._options import Session

SEP = " \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} "
"""What joins the names of an agent path: a spaced right-pointing angle quote."""


async def serve_sigint(signals: AsyncIterator[int], session: Session) -> None:
    """Turn each SIGINT into the session's reaction: the picker on a terminal, else an abort.

    Args:
        signals: the receiver of :func:`trio.open_signal_receiver`, opened by the caller before
            the first agent ran (so no Ctrl+C is ever lost or raised as ``KeyboardInterrupt``).

    Cancellation: the way to stop it.
    """
    async for _ in signals:
        if session.prompts is not None:
            session.prompts.on_sigint()
        else:
            await session.abort("run aborted by SIGINT")


def agent_path(tree: TraceTree, agent_id: str | None) -> str:
    """An agent's path from its root, by names joined by :data:`SEP`."""
    if agent_id is None:
        return "?"
    node = tree.agents.get(agent_id)
    if node is None:
        return agent_id
    names = [node.name]
    names.extend(a.name for a in tree.ancestors(node) if a.kind == "agent")
    return SEP.join(reversed(names))


class LineAsker(Protocol):
    """Something that asks the terminal a question and reads one line (the chat's keyboard)."""

    async def ask(
        self, question: str, *, complete: Callable[[str], bool] | None = None
    ) -> str | None:
        """Ask *question*; the line, or None at end of input.

        Args:
            complete: whether what is typed so far is already the answer (no Enter needed).

        Cancellation: cuts the question short (the cursor ends on a fresh line).
        """
        ...


_PERMISSION_KEYS = frozenset("yna")


def _permission_key(typed: str) -> bool:
    """``y``, ``n`` or ``a`` answers a permission question at once, as a digit does the picker."""
    return typed.lower() in _PERMISSION_KEYS


MAX_FORM_FIELDS = 50
"""The most fields of a server's question the terminal asks (the rest are left out)."""
_ACTIONS: dict[str, Any] = {
    "y": "accept", "yes": "accept", "": "accept",
    "n": "decline", "no": "decline",
    "c": "cancel", "cancel": "cancel",
}


class _Prompt:
    """One question on the terminal: its read can be cut short from outside."""

    def __init__(self, kind: str, request_id: str | None = None) -> None:
        self.kind = kind
        self.request_id = request_id
        self.scope = trio.CancelScope()
        self.interrupted = False
        self.nothing_left = False
        self.resolved_elsewhere: PermissionResolved | None = None
        self.answered_elsewhere: ElicitationResolved | None = None


class TerminalPrompts:
    """The task that owns the terminal's keyboard: the Ctrl+C picker and permission questions.

    Feed it events with :meth:`tap` and SIGINTs with :meth:`on_sigint`; it works in
    :meth:`run`. Made by :meth:`open_for_stdin`; :meth:`close` releases the terminal.
    """

    def __init__(
        self,
        tree: TraceTree,
        view: LiveView,
        fd: int | None,
        *,
        keyboard: LineAsker | None = None,
    ) -> None:
        self.tree = tree
        self.view = view
        self.console = view.console
        self._fd = fd
        self._keyboard = keyboard
        self._stream: trio.lowlevel.FdStream | None = None
        self._pending = b""
        self._requests: deque[PermissionRequested] = deque()
        self._questions: deque[ElicitationRequested] = deque()
        self._interrupts = 0
        self._wake: trio.Event | None = None
        self._active: _Prompt | None = None
        self._closed = False

    @classmethod
    def open_for_stdin(cls, tree: TraceTree, view: LiveView) -> TerminalPrompts:
        """Open the terminal on stdin a second time, for reading without blocking trio."""
        try:
            fd = os.open(os.ttyname(sys.stdin.fileno()), os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:
            # No name for it (rare): share fd 0's description; FdStream restores its blocking
            # mode when closed.
            fd = os.dup(sys.stdin.fileno())
        return cls(tree, view, fd)

    def close(self) -> None:
        """Release the terminal fd if :meth:`run` never took it over (it closes it itself)."""
        if not self._closed and self._stream is None and self._fd is not None:
            os.close(self._fd)
        self._closed = True

    # -- inputs ----------------------------------------------------------------------------

    WATCHED: ClassVar[frozenset[type[Event]]] = frozenset(
        {PermissionRequested, PermissionResolved, ElicitationRequested, ElicitationResolved}
    )
    """The only events :meth:`tap` acts on (the session passes it no others)."""

    def tap(self, event: Event) -> None:
        """Watch the stream for permission questions and for answers given elsewhere."""
        if isinstance(event, PermissionRequested):
            self._requests.append(event)
            self._poke()
        elif isinstance(event, ElicitationRequested | ElicitationResolved):
            self._tap_question(event)
        elif isinstance(event, PermissionResolved):
            active = self._active
            if active is not None and active.request_id == event.request_id:
                active.resolved_elsewhere = event
                active.scope.cancel(reason="answered elsewhere")
            else:
                for queued in self._requests:
                    if queued.request_id == event.request_id:
                        self._requests.remove(queued)
                        break

    def _tap_question(self, event: ElicitationRequested | ElicitationResolved) -> None:
        if isinstance(event, ElicitationRequested):
            self._questions.append(event)
            self._poke()
            return
        active = self._active
        if active is not None and active.request_id == event.request_id:
            active.answered_elsewhere = event
            active.scope.cancel(reason="answered elsewhere")
        else:
            for queued in self._questions:
                if queued.request_id == event.request_id:
                    self._questions.remove(queued)
                    break

    def on_sigint(self) -> None:
        """A Ctrl+C: at the picker it aborts; at a question it denies it; else opens the picker."""
        active = self._active
        if active is not None:
            active.interrupted = True
            active.scope.cancel(reason="Ctrl+C at the prompt")
            if active.kind == "permission":
                self._interrupts += 1
            return
        self._interrupts += 1
        self._poke()

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # -- the task --------------------------------------------------------------------------

    async def run(
        self, session: Session, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Ask the terminal whatever comes up, one question at a time, until cancelled.

        Cancellation: the way to stop it; a question being asked is left unanswered (its tool
        call then waits for another answerer or its timeout, or is cancelled with the run).
        """
        self._wake = trio.Event()
        if self._fd is None:  # the questions go through the keyboard
            task_status.started()
            await self._serve(session)
            return
        # FdStream restores the fd's blocking mode and closes it when the block ends; its close
        # happens before its checkpoint, so a cancelled exit closes it too.
        async with trio.lowlevel.FdStream(self._fd) as self._stream:
            task_status.started()
            await self._serve(session)

    async def _serve(self, session: Session) -> None:
        while True:
            if not (self._interrupts or self._requests or self._questions):
                wake = self._wake = trio.Event()
                await wake.wait()
                continue
            if self._interrupts:
                self._interrupts = 0
                await self._picker(session)
            elif self._requests:
                await self._ask_permission(session, self._requests.popleft())
            elif self._questions:
                await self._ask_question(session, self._questions.popleft())

    async def _read_line(self, prompt: _Prompt, question: str) -> str | None:
        """Print *question* and read one line; None when cut short (Ctrl+C, answered elsewhere)
        or at end of input."""
        if self._keyboard is not None:
            return await self._ask_keyboard(self._keyboard, prompt, question)
        assert self._stream is not None
        assert self._fd is not None
        with contextlib.suppress(termios.error):
            termios.tcflush(self._fd, termios.TCIFLUSH)
        self.console.print(question, end="", markup=False, highlight=False)
        self._active = prompt
        answered = False
        try:
            with prompt.scope:
                while b"\n" not in self._pending:
                    data = await self._stream.receive_some(1024)
                    if not data:
                        return None
                    self._pending += data
                line, _, self._pending = self._pending.partition(b"\n")
                answered = True  # the terminal echoed the newline
                return line.decode(errors="replace").strip()
        finally:
            self._active = None
            if not answered:
                # Cut short (Ctrl+C, answered elsewhere, the run ended) or end of input: the
                # cursor still sits after the question.
                self._pending = b""
                self.console.print()
        return None

    async def _ask_keyboard(
        self,
        keyboard: LineAsker,
        prompt: _Prompt,
        question: str,
        complete: Callable[[str], bool] | None = None,
    ) -> str | None:
        # The keyboard has read whatever was typed before: type-ahead went to the chat line,
        # and the question starts empty, as after the tcflush above.
        self._active = prompt
        try:
            with prompt.scope:
                line = await keyboard.ask(question, complete=complete)
                return None if line is None else line.strip()
        finally:
            self._active = None
        return None

    async def _ask_picker_keyboard(self, prompt: _Prompt, picks: _PickList) -> str | None:
        """The picker's question through the chat's keyboard, with the list kept true above
        it (as :meth:`_read_choice` does on a terminal of our own)."""
        keyboard = self._keyboard
        assert keyboard is not None
        print_above = getattr(keyboard, "print_above", None)

        async def watch() -> None:
            while True:
                await trio.sleep(_PICKER_TICK_S)
                for line in picks.update(self.tree):
                    if print_above is not None:
                        print_above(line)
                if not picks.running():
                    prompt.nothing_left = True
                    prompt.scope.cancel(reason="nothing left to cancel")
                    return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            try:
                return await self._ask_keyboard(keyboard, prompt, "cancel> ", picks.complete)
            finally:
                nursery.cancel_scope.cancel(reason="the question is over")

    def _running_in_tree_order(self) -> list[RunningSubtree]:
        # The tree's own order (depth first), so a sub-agent's children follow it.
        subtrees = {s.tool_use_id: s for s in self.tree.running_subtrees()}
        if len(subtrees) < 2:
            return list(subtrees.values())
        return [subtrees[n.id] for n in self.tree.iter_nodes() if n.id in subtrees]

    async def _picker(self, session: Session) -> None:
        subtrees = self._running_in_tree_order()
        if not subtrees:
            await session.abort("run aborted with Ctrl+C")
            return
        picks = _PickList(subtrees)
        keys = self._keyboard is None  # our own terminal, read key by key; else the chat's
        with self.view.paused():
            self.console.print(
                "[bold]Paused[/] — agents keep running. Running sub-agents:", highlight=False
            )
            for entry in picks.lines():
                self.console.print(entry, markup=False, highlight=False)
            # One key answers, on a terminal of our own and through the chat's keyboard alike
            # (a number waits for the next key only when a longer one could follow).
            self.console.print(
                f"[dim]N: cancel that subtree · sN: stop it (calls under way finish) · "
                f"a: cancel all · q: abort "
                f"{session.abort_noun} · Enter: resume · Ctrl+C: abort[/]",
                highlight=False,
            )
            while True:
                prompt = _Prompt("picker")
                line: str | None
                if keys:
                    line = await self._read_choice(prompt, picks)
                else:
                    line = await self._ask_picker_keyboard(prompt, picks)
                if prompt.interrupted:
                    await self._say_abort(session, "run aborted with Ctrl+C")
                    return
                if prompt.nothing_left:
                    self.console.print(
                        "Every listed sub-agent has finished: nothing left to cancel. Resumed.",
                        highlight=False,
                    )
                    return
                if not line:
                    self.console.print("[dim]Resumed.[/]", highlight=False)
                    return
                if line.lower() in ("q", "quit"):
                    await self._say_abort(session, "run aborted by user (q at the Ctrl+C picker)")
                    return
                if line.lower() in ("a", "all"):
                    await self._cancel_all(session, picks.running())
                    return
                picks.update(self.tree)
                stop = _is_stop(line)
                chosen = picks.choose(line[1:] if stop else line)
                if chosen is None:
                    self.console.print(
                        f"Not a choice: {line!r}. Type a number from 1 to {len(picks.entries)}, "
                        "s and a number, a, q, or Enter.",
                        markup=False,
                        highlight=False,
                    )
                    continue
                if chosen.done is not None:
                    self.console.print(
                        visible(
                            f"{chosen.sub.agent_name} {chosen.sub.tool_use_id} has already "
                            f"finished ({chosen.done}); pick another."
                        ),
                        markup=False,
                        highlight=False,
                    )
                    continue
                if await (self._stop_one if stop else self._cancel_one)(session, chosen.sub):
                    return

    async def _read_choice(self, prompt: _Prompt, picks: _PickList) -> str | None:
        """Read the picker's answer key by key, keeping the list above it up to date.

        The terminal leaves canonical mode for the question (no line editing or echo by the
        kernel; Ctrl+C still signals): a number that cannot start a longer one, ``a`` or ``q``
        is an answer at once, anything else ends with Enter. Sub-agents that finish meanwhile
        are marked, new ones added with the next number. Whatever was typed and not taken is
        discarded when the question ends, so no key goes on to a later prompt or the shell.
        """
        assert self._stream is not None
        assert self._fd is not None
        fd = self._fd
        try:
            saved = termios.tcgetattr(fd)
        except termios.error:  # not a terminal after all: line by line
            return await self._read_line(prompt, "cancel> ")
        keys = list(saved)
        keys[3] &= ~(termios.ICANON | termios.ECHO)
        keys[6] = list(saved[6])
        keys[6][termios.VMIN] = 1
        keys[6][termios.VTIME] = 0
        typed = ""
        answered = False
        self._active = prompt
        try:
            termios.tcsetattr(fd, termios.TCSANOW, keys)
            termios.tcflush(fd, termios.TCIFLUSH)
            self._prompt_line(typed, fresh=True)
            with prompt.scope:
                while True:
                    changes = picks.update(self.tree)
                    if changes:
                        self._prompt_line(typed, above=changes)
                    if not picks.running():
                        prompt.nothing_left = True
                        break
                    data = None
                    with trio.move_on_after(_PICKER_TICK_S):
                        data = await self._stream.receive_some(1024)
                    if data is None:
                        continue
                    if not data:
                        return None
                    for char in data.decode(errors="replace"):
                        if char in "\r\n":
                            answered = True
                            self.console.file.write("\n")
                            return typed.strip()
                        if char in "\x7f\b":
                            typed = typed[:-1]
                        elif char.isprintable():
                            typed += char
                        self._prompt_line(typed)
                        if picks.complete(typed):
                            answered = True
                            self.console.file.write("\n")
                            return typed
        finally:
            self._active = None
            with contextlib.suppress(termios.error):
                termios.tcsetattr(fd, termios.TCSANOW, saved)
                termios.tcflush(fd, termios.TCIFLUSH)
            if not answered:
                self.console.file.write("\n")
                if not (prompt.interrupted or prompt.nothing_left):
                    # Cut short by the end of the run (the session is closing).
                    self.console.print(
                        "The run has ended: the picker is closed.",
                        highlight=False,
                    )
            self.console.file.flush()
        return None

    async def _read_key(self, prompt: _Prompt, question: str) -> str | None:
        """Ask a permission question answered by one key (``y``, ``n``, ``a``; anything else
        ends with Enter); None when cut short or at end of input.

        On a terminal of our own it leaves canonical mode for the question, as the picker
        does (:meth:`_read_choice`); through the chat's keyboard the keyboard does the same.
        """
        if self._keyboard is not None:
            return await self._ask_keyboard(self._keyboard, prompt, question, _permission_key)
        assert self._stream is not None
        assert self._fd is not None
        fd = self._fd
        try:
            saved = termios.tcgetattr(fd)
        except termios.error:  # not a terminal after all: line by line
            return await self._read_line(prompt, question)
        keys = list(saved)
        keys[3] &= ~(termios.ICANON | termios.ECHO)
        keys[6] = list(saved[6])
        keys[6][termios.VMIN] = 1
        keys[6][termios.VTIME] = 0
        out = self.console.file
        typed = ""
        self._active = prompt
        try:
            termios.tcsetattr(fd, termios.TCSANOW, keys)
            termios.tcflush(fd, termios.TCIFLUSH)  # type-ahead never answers a question
            out.write(question)
            out.flush()
            with prompt.scope:
                while True:
                    data = await self._stream.receive_some(1024)
                    if not data:
                        return None
                    for char in data.decode(errors="replace"):
                        if char in "\r\n":
                            return typed.strip()
                        if char in "\x7f\b":
                            typed = typed[:-1]
                        elif char.isprintable():
                            typed += char
                        out.write("\r\x1b[K" + question + typed)
                        out.flush()
                        if _permission_key(typed):
                            return typed
        finally:
            self._active = None
            with contextlib.suppress(termios.error):
                termios.tcsetattr(fd, termios.TCSANOW, saved)
                termios.tcflush(fd, termios.TCIFLUSH)
            out.write("\n")
            out.flush()
        return None

    def _prompt_line(self, typed: str, *, above: Sequence[str] = (), fresh: bool = False) -> None:
        out = self.console.file
        if not fresh:
            out.write("\r\x1b[K")  # back to the start of the prompt's line, cleared
        for line in above:  # a finished entry names its agent: the model's word, shown only
            out.write(visible(line, layout=False) + "\n")
        out.write("cancel> " + typed)
        out.flush()

    async def _cancel_one(self, session: Session, sub: RunningSubtree) -> bool:
        done = await session.rt.cancel(sub.target, "picked with Ctrl+C", by="user")
        if done:
            self.console.print(
                visible(f"Cancelling {sub.agent_name} {sub.tool_use_id} and everything under it."),
                markup=False,
                highlight=False,
            )
        else:
            self.console.print(
                visible(f"{sub.agent_name} {sub.tool_use_id} has just finished; pick another."),
                markup=False,
                highlight=False,
            )
        return done

    async def _stop_one(self, session: Session, sub: RunningSubtree) -> bool:
        done = await session.rt.stop(sub.target, "stopped with Ctrl+C", by="user")
        if done:
            self.console.print(
                visible(
                    f"Stopping {sub.agent_name} {sub.tool_use_id}: its tool calls under way "
                    "finish, then it ends with its partial work."
                ),
                markup=False,
                highlight=False,
            )
        else:
            self.console.print(
                visible(
                    f"{sub.agent_name} {sub.tool_use_id} cannot be stopped now (finished, "
                    "cancelled or stopping already); pick another."
                ),
                markup=False,
                highlight=False,
            )
        return done

    async def _cancel_all(self, session: Session, subtrees: list[RunningSubtree]) -> None:
        # "Of the turn": the sub-agents the root agent is waiting for; cancelling them takes
        # whatever runs below them too.
        roots = {a.id for a in self.tree.roots}
        top = [s for s in subtrees if s.caller_id in roots] or subtrees
        count = 0
        for sub in top:
            if await session.rt.cancel(sub.target, "Ctrl+C: all sub-agents"):
                count += 1
        self.console.print(f"Cancelling {count} running subtree(s).", highlight=False)

    async def _say_abort(self, session: Session, reason: str) -> None:
        self.console.print(f"[bold]Aborting {session.abort_noun}…[/]", highlight=False)
        await session.abort(reason)

    async def _ask_permission(self, session: Session, req: PermissionRequested) -> None:
        waiting = [p for p in session.rt.pending_permissions() if p.request_id == req.request_id]
        if not waiting:
            return  # answered, timed out or cancelled while it queued
        who = agent_path(self.tree, req.agent_id)
        with self.view.paused():
            self.console.print(
                f"[bold yellow]Permission[/] [bold]{_escape(visible(who))}[/]"
                f"[dim]{_escape(visible(self._which(req.agent_id)))}[/] wants to run "
                f"[bold]{_escape(visible(req.summary))}[/]; the whole input:",
                highlight=False,
            )
            # The whole input, wrapped, control characters visible: what is approved is what
            # was read (docs/cli.md, "Permission prompts").
            self.console.print(waiting[0].shown, markup=False, highlight=False)
            rule = visible(waiting[0].rule, layout=False)
            self.console.print(
                f"(always: allows {rule} for the rest of this run)", markup=False, highlight=False
            )
            while True:
                prompt = _Prompt("permission", req.request_id)
                line = await self._read_key(prompt, "Allow? [y]es / [n]o / [a]lways this run: ")
                done = prompt.resolved_elsewhere
                if done is not None:  # a control client, the timeout, or a cancel was first
                    verdict = "granted" if done.granted else "denied"
                    self.console.print(
                        f"({verdict} meanwhile: {done.reason})", markup=False, highlight=False
                    )
                    return
                if prompt.interrupted or line is None:
                    session.rt.resolve_permission(
                        req.request_id, False, reason="denied by user (Ctrl+C)"
                    )
                    self.console.print("Denied.", highlight=False)
                    return
                answer = line.lower()
                if answer in ("y", "yes"):
                    session.rt.resolve_permission(req.request_id, True)
                    self.console.print("Allowed.", highlight=False)
                    return
                if answer in ("n", "no"):
                    session.rt.resolve_permission(req.request_id, False)
                    self.console.print("Denied.", highlight=False)
                    return
                if answer in ("a", "always"):
                    # The rule is the exact target; the broker also answers the requests
                    # already waiting that it covers, and only those.
                    session.rt.resolve_permission(req.request_id, True, remember=True)
                    self.console.print(
                        f"Allowed for the rest of this run: {rule}",
                        markup=False,
                        highlight=False,
                    )
                    return
                self.console.print("Please answer y, n or a.", highlight=False)

    async def _ask_question(self, session: Session, req: ElicitationRequested) -> None:
        """An MCP server's question (docs/mcp.md, "Elicitation"): a link to open, or a form
        of one line per field of the requested schema, then whether to send it."""
        if not any(q.request_id == req.request_id for q in session.rt.pending_elicitations()):
            return  # answered, timed out or cancelled while it queued
        who = agent_path(self.tree, req.agent_id)
        with self.view.paused():
            self.console.print(
                f"[bold yellow]Question[/] from MCP server [bold]{_escape(visible(req.server))}"
                f"[/] (for {_escape(visible(who))}): {_escape(visible(req.message))}",
                highlight=False,
            )
            if req.mode == "url":
                self.console.print(f"Open: {visible(req.url or '')}", markup=False)
                await self._answer_url(session, req)
                return
            while True:
                content = await self._fill_form(session, req)
                if content is None:
                    return
                line = await self._line(session, req, "Send? [y]es / [n]o (decline) / [c]ancel: ")
                if line is None:
                    return
                action = _ACTIONS.get(line.lower(), "ask again")
                if action == "ask again":
                    continue
                try:
                    session.rt.resolve_elicitation(
                        req.request_id, action, content if action == "accept" else None,
                        reason=f"{action} at the terminal",
                    )  # fmt: skip
                except ValueError as exc:
                    self.console.print(f"Not sent: {exc}; once more.", markup=False)
                    continue
                said = {"accept": "Sent.", "decline": "Declined."}.get(action, "Cancelled.")
                self.console.print(said, highlight=False)
                return

    async def _answer_url(self, session: Session, req: ElicitationRequested) -> None:
        line = await self._line(session, req, "Opened it? [y]es / [n]o (decline) / [c]ancel: ")
        if line is not None:
            action = _ACTIONS.get(line.lower(), "decline")
            why = f"{action} at the terminal"
            session.rt.resolve_elicitation(req.request_id, action, reason=why)

    async def _fill_form(
        self, session: Session, req: ElicitationRequested
    ) -> dict[str, Any] | None:
        """One line per field (an empty line keeps the default, or leaves an optional field
        out); None when the question was cut short (Ctrl+C cancels it, an answer elsewhere)."""
        from ._control import _typed

        schema = req.requested_schema or {}
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = set(schema.get("required") or [])
        content: dict[str, Any] = {}
        for name, spec in list(properties.items())[:MAX_FORM_FIELDS]:
            spec = spec if isinstance(spec, dict) else {}
            kind = spec.get("type", "string")
            note = spec.get("description") or spec.get("title") or ""
            choices = spec.get("enum")
            hint = "/".join(map(str, choices[:10])) if isinstance(choices, list) else kind
            default = spec.get("default")
            extra = f", default {default}" if default is not None else ""
            extra += "" if name in required else ", optional"
            question = visible(f"  {name} ({hint}{extra}) {note}".rstrip(), layout=False) + ": "
            while True:
                line = await self._line(session, req, question)
                if line is None:
                    return None
                if not line:
                    if default is not None:
                        content[name] = default
                    if default is not None or name not in required:
                        break
                    self.console.print(f"  {name} is required.", markup=False)
                    continue
                try:
                    content[name] = _typed(name, line, kind)
                except ValueError as exc:
                    self.console.print(f"  {exc}", markup=False)
                    continue
                break
        return content

    async def _line(
        self, session: Session, req: ElicitationRequested, question: str
    ) -> str | None:
        """One line for *req*; None when cut short: Ctrl+C cancels the question, an answer
        given elsewhere (a control client) or its end is said."""
        prompt = _Prompt("question", req.request_id)
        line = await self._read_line(prompt, question)
        done = prompt.answered_elsewhere
        if done is not None:
            self.console.print(f"({done.action} meanwhile: {done.reason})", markup=False)
            return None
        if prompt.interrupted or line is None:
            why = "cancelled by user (Ctrl+C)"
            session.rt.resolve_elicitation(req.request_id, "cancel", reason=why)
            self.console.print("Cancelled.", highlight=False)
            return None
        return line.strip()

    def _which(self, agent_id: str | None) -> str:
        # Sibling agents of one type share a path: their task and id tell them apart.
        node = self.tree.agents.get(agent_id or "")
        if node is None:
            return ""
        call = node.parent
        desc = call.input.get("description") if call is not None else None
        return f" ({desc}, {node.id})" if isinstance(desc, str) and desc else f" ({node.id})"


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


_PICKER_TICK_S = 0.2
"""How often the open picker looks at the tree for sub-agents that finished or started."""


class _Entry:
    __slots__ = ("done", "sub")

    def __init__(self, sub: RunningSubtree) -> None:
        self.sub = sub
        self.done: str | None = None  # the final status once the subtree has finished


class _PickList:
    """The picker's numbered list, kept true while it is open: a subtree that finishes keeps
    its number, marked and no longer pickable; one that starts gets the next number."""

    def __init__(self, subtrees: list[RunningSubtree]) -> None:
        self.entries = [_Entry(sub) for sub in subtrees]

    @staticmethod
    def _line(number: int, sub: RunningSubtree) -> str:
        indent = "  " * max(0, sub.depth - 1)
        line = f"  {indent}[{number}] {sub.agent_name} {sub.tool_use_id} {sub.description}"
        if sub.background:
            line += f" (background, {sub.agent_id})"
        return visible(line, layout=False)  # the model's names and descriptions, shown only

    def lines(self) -> list[str]:
        return [self._line(i, e.sub) for i, e in enumerate(self.entries, 1)]

    def running(self) -> list[RunningSubtree]:
        return [e.sub for e in self.entries if e.done is None]

    def update(self, tree: TraceTree) -> list[str]:
        """Bring the list up to date with *tree*; the lines that say what changed."""
        running = {s.tool_use_id: s for s in tree.running_subtrees()}
        changes = []
        for number, entry in enumerate(self.entries, 1):
            if entry.done is None and entry.sub.tool_use_id not in running:
                call = tree.tools.get(entry.sub.tool_use_id)
                entry.done = call.status if call is not None else "finished"
                sub = entry.sub
                changes.append(
                    f"  [{number}] {sub.agent_name} {sub.tool_use_id} finished ({entry.done})"
                )
        known = {e.sub.tool_use_id for e in self.entries}
        for node in tree.iter_nodes():
            new = running.get(node.id)
            if new is not None and new.tool_use_id not in known:
                self.entries.append(_Entry(new))
                changes.append(self._line(len(self.entries), new) + "  (new)")
        return changes

    def choose(self, text: str) -> _Entry | None:
        text = text.strip().strip("[]")
        if text.isdigit() and 1 <= int(text) <= len(self.entries):
            return self.entries[int(text) - 1]
        for entry in self.entries:
            if text == entry.sub.tool_use_id:
                return entry
        return None

    def complete(self, typed: str) -> bool:
        """Whether *typed* is an answer without Enter: ``a``, ``q``, or a number (after ``s``
        or not) that no longer one on the list starts with."""
        if typed.lower() in ("a", "q"):
            return True
        if _is_stop(typed):
            typed = typed[1:]
        return typed.isdigit() and int(typed) * 10 > len(self.entries)


def _is_stop(typed: str) -> bool:
    """Whether the picker's answer *typed* is ``s`` and a number: stop that subtree."""
    return typed[:1] in ("s", "S") and typed[1:].strip().isdigit()
