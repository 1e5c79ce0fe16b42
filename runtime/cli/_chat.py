"""``trio-agents chat``: a conversation with the main agent, one turn per message.

The command is described in docs/cli.md#chat.

One chat process is one run (one runtime, one trace file): each message starts a new root agent
with the conversation so far as its history, so the trace holds one root per turn. Around it,
the same CLI session as ``run`` (:func:`runtime.cli._options.open_session`): the live tree, the
Ctrl+C picker, permission questions and ``--control`` — except that an abort (Ctrl+C with no
sub-agent running, ``q`` or a second Ctrl+C at the picker) cancels the current turn and returns
to the prompt instead of ending the run.

On a terminal (stdin and stdout, not ``--json``) the keyboard belongs to one task, the line
editor of :mod:`runtime.cli._keyboard`. While a turn runs, a line typed and entered is sent to the
turn's root agent (:meth:`~runtime.Runtime.send_message`): the view shows it queued, and it is
delivered at the agent's next turn boundary as a ``user_message`` event. A line the agent never
took (it finished first) is not lost: it becomes the next message (after a cancelled turn it is
put back in the prompt instead, to edit or drop). At the idle prompt Ctrl+C clears the line and
Ctrl+D (or ``/exit``) leaves with exit code 0.

Without a terminal the chat reads stdin, one message per line, each run to its end before the
next line is read, and prints plain lines: scriptable. SIGINT then ends the chat (exit 130);
the exit code is otherwise 0, or 1 when some turn did not complete.

The conversation is a session (:mod:`runtime.cli._sessions`), written as its first turn starts
(when there is a trace to resume that turn from) and after every turn, resumed with
``--resume [ID]`` and listed with ``--list``.

The task tree, inside :func:`~runtime.cli._options.open_session`'s::

    Chat.main
    └── chat nursery
        ├── Keyboard.run            reads the terminal, edits the chat line, answers questions
        └── Chat._loop              prompt → turn → save, one after another
            └── turn nursery        (per turn)
                └── _forward_lines  lines entered during the turn → the root agent's mailbox
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import trio

from runtime.core import (
    ConfigError,
    ContextCompacted,
    Event,
    Message,
    SessionError,
    TextBlock,
    TurnFinished,
    UserMessage,
    one_line,
)

from ._exit import command_name
from ._keyboard import PROMPT_MARK, Keyboard, open_tty_fd
from ._live import LiveView, PlainView
from ._options import (
    EXIT_ABORTED,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    PROG,
    RunOptions,
    error_line,
    is_interactive,
)
from ._sessions import (
    DEFAULT_SESSIONS_DIR,
    MAX_INPUT_HISTORY,
    ChatSession,
    SessionStore,
    encode_session,
    new_session,
)

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.text import Text

    from runtime.core import AgentHandle, AgentOutcome
    from runtime.replay import ResumeState
    from runtime.wiring import RunConfig

    from ._options import Session

PROMPT = f"{PROMPT_MARK} "

COMMANDS: dict[str, str] = {
    "/help": "this list",
    "/tree": "the tree of the current or last turn",
    "/cancel ID": "cancel the subtree under ID (an agent id or tool_use_id from /tree)",
    "/agents": "the agent types this session knows",
    "/trace": "this session's trace file",
    "/save": "save the session now (it is saved after every turn anyway)",
    "/context": "how much of the model's context window the conversation fills",
    "/compact [focus]": "compact the conversation now: trim old tool output, summarise the rest",
    "/clear": "start a fresh conversation (a new session; this one stays resumable)",
    "/mcp__SERVER__PROMPT [args]": "send an MCP server's prompt (args by position or name=value)",
    "/exit": "leave the chat (Ctrl+D at the prompt too)",
}
_ALIASES = {"/quit": "/exit", "/q": "/exit", "/?": "/help"}
_KEYS_HELP = (
    "Keys: Enter sends; while the agent works, the line reaches it at its next step.",
    "  Ctrl+C: pick running sub-agents to cancel, or cancel the turn (at the prompt: clear it).",
    "  Up/Down: earlier lines · Tab: complete a command · Ctrl+D: leave · //text sends /text.",
)
MAX_QUEUED_SHOWN = 5
"""Queued lines the live view lists (the rest are counted)."""


def cmd_chat(
    opts: RunOptions,
    *,
    resume: str | None = None,
    list_only: bool = False,
    sessions_dir: str | None = None,
) -> int:
    """``trio-agents chat``: returns the exit code.

    Args:
        resume: a session id to continue; ``""`` for the latest one.
        list_only: list the sessions and exit (``--list``).
        sessions_dir: the sessions folder (default ``.trio-agents/sessions``).
    """
    from ._options import (
        check_output_paths,
        existing_file,
        run_command,
        setup_logging,
        writable_path,
    )

    store = SessionStore(sessions_dir or DEFAULT_SESSIONS_DIR)
    try:
        if list_only:
            return print_sessions(store, as_json=opts.json)
        existing_file(opts.scenario, "--scenario")
        existing_file(opts.agents, "--agents")
        check_output_paths(opts)
        writable_path(store.root, "--sessions-dir" if sessions_dir else "sessions", folder=True)
        # A session that cannot be used is refused before anything runs (no trace, no file
        # written): it stays exactly as it is.
        record = store.load(store.resolve(resume or None)) if resume is not None else None
        if record is not None:
            store.hold(record.id)  # one chat per session: a second one is refused here
            opts = resumed_options(opts, record)
    except SessionError as exc:
        error_line(str(exc))
        return EXIT_USAGE
    setup_logging(opts.debug, opts.verbose)
    chat = Chat(opts, store, record)
    if record is not None:
        from ._chat_resume import cut_turn

        chat.cut, note = cut_turn(record)
        if note is not None:
            error_line(f"warning: {note}")
    return run_command(chat.main, debug=opts.debug)


def resumed_options(opts: RunOptions, record: ChatSession) -> RunOptions:
    """*opts* for continuing *record*: its provider, model and scenario, unless flags say
    otherwise (a flag for any of the three wins, and the rest are not taken from the session).

    Raises:
        UsageError: the session ran on a scenario that is gone (or was not recorded): the
            message says what to pass.
    """
    import dataclasses

    from ._options import UsageError

    if opts.provider or opts.scenario or opts.model or record.provider is None:
        return opts
    if record.provider != "scripted":
        return dataclasses.replace(opts, provider=record.provider, model=record.model)
    scenario = record.scenario
    if scenario is None or not Path(scenario).is_file():
        where = f" ({scenario} is gone)" if scenario else ""
        raise UsageError(
            f"session {record.id} ran on the scripted provider{where}: pass --scenario FILE "
            "(or --provider NAME) to resume it"
        )
    return dataclasses.replace(opts, scenario=scenario)


def print_sessions(store: SessionStore, *, as_json: bool = False) -> int:
    """``chat --list``: one line per session, the latest first; unreadable files say why."""
    import orjson

    sessions = store.list_sessions()
    if as_json:
        for info in sessions:
            row = {
                "id": info.id,
                "path": str(info.path),
                "updated_ts": info.updated_ts,
                "turns": info.turns,
                "first_prompt": info.first_prompt,
                "first_turn": info.first_turn,
                "error": info.error,
            }
            sys.stdout.write(orjson.dumps(row).decode() + "\n")
        return EXIT_OK
    if not sessions:
        print(f"No sessions in {store.root}.")
        return EXIT_OK
    for info in sessions:
        date = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.updated_ts))
        if info.error is not None:
            print(f"{info.id}  {date}  (unreadable: {info.error})")
            continue
        turns = f"{info.turns} turn" + ("" if info.turns == 1 else "s")
        if info.first_turn is not None:
            turns = f"first turn {info.first_turn}"
        print(f"{info.id}  {date}  {turns:>9}  {one_line(info.first_prompt or '', 70)}")
    print(f"Resume one: {command_name()} chat --resume ID (or --resume alone for the latest)")
    return EXIT_OK


def _with_note(messages: list[Message], note: str) -> list[Message]:
    """*messages* with *note* told to the model as the user's (the turn had no answer)."""
    block = TextBlock(text=note)
    if messages and messages[-1].role == "user":
        last = messages[-1]
        return [*messages[:-1], Message(role="user", content=(*last.content, block))]
    return [*messages, Message(role="user", content=(block,))]


class Chat:
    """One ``chat`` process: the loop of prompts and turns around a CLI session.

    Args:
        opts: the common options.
        store: where sessions are saved.
        record: the session to continue, or None for a new one.
    """

    def __init__(self, opts: RunOptions, store: SessionStore, record: ChatSession | None) -> None:
        self.opts = opts
        self.store = store
        self.resumed = record is not None
        self.record = record if record is not None else new_session()
        self.interactive = is_interactive(opts)
        self.session: Session | None = None
        self.kb: Keyboard | None = None
        self.current: AgentHandle | None = None
        self.last_root: str | None = None
        self.sent: list[str] = []  # lines given to the current turn's agent, in order
        self.delivered = 0  # how many of them it has taken (user_message events)
        self.pending: list[str] = []  # lines for the next message
        self.aborted = False
        self.exit_requested = False
        self.incomplete_turns = 0
        self.saved = False
        self._turn_tokens = [0, 0]
        self._context: tuple[int, int | None] | None = None  # the main agent's (size, window)
        self._compact_scope: trio.CancelScope | None = None
        self._wait_scope: trio.CancelScope | None = None
        self._stdin = b""
        self._stdin_eof = False
        self.trace_path: Path | None = None
        self._moved_from: str | None = None
        self.cut: ResumeState | None = None
        """The trace of the session's last run, when it was killed mid-turn: that turn goes
        on first (runtime/cli/_chat_resume.py)."""

    # -- the whole chat ---------------------------------------------------------------------

    async def main(self) -> int:
        """Run the chat until end of input, ``/exit`` or an abort; return the exit code.

        Cancellation: ends the chat; a running turn ends ``cancelled`` with the run.
        """
        from ._options import open_session

        kb: Keyboard | None = None
        if self.interactive:
            kb = Keyboard(
                open_tty_fd(),
                sys.stdout,
                history=list(self.record.state.input_history),
                completions=[*(c.split()[0] for c in COMMANDS), *_ALIASES],
                complete_args=self._complete_args,
            )
        self.kb = kb
        try:
            opts = self._with_run_id(self.opts)
            async with open_session(
                opts,
                on_abort=self._on_abort,
                final_summary=False,
                keyboard=kb,
                view_held=True,
                config=self._resumed_config(opts),
            ) as session:
                self.session = session
                session.abort_noun = "the turn"
                session.rt.add_tap(self._tap)
                self._begin(session)
                mcp = session.rt.mcp_servers
                if kb is not None and mcp is not None:
                    kb.editor.completions += tuple(mcp.prompt_command_names())
                if mcp is not None:
                    mcp.subscriptions.on_change = self._notify
                async with trio.open_nursery() as nursery:
                    if kb is not None:
                        await nursery.start(kb.run)
                        if isinstance(session.view, LiveView):
                            session.view.footer = self._footer
                            kb.on_change = session.view.poke
                    self._greet()
                    if self.cut is not None:
                        await self._resume_cut(self.cut)
                    await self._loop()
                    if mcp is not None:
                        await mcp.subscriptions.close()
                    nursery.cancel_scope.cancel(reason="the chat is over")
                if self.saved or self.record.turns:
                    # The input history typed since the last turn goes with the session.
                    await self._save(quiet=True)
        finally:
            if kb is not None:
                kb.close()
        self._goodbye()
        if self.aborted:
            return EXIT_ABORTED
        if not self.interactive and self.incomplete_turns:
            return EXIT_FAILED
        return EXIT_OK

    def _with_run_id(self, opts: RunOptions) -> RunOptions:
        """*opts* with the run named after the session (its trace too, by default): the
        session's first run is the session id, the next ``ID.2``, and so on."""
        import dataclasses

        count = len(self.record.state.run_ids)
        run_id = self.record.id if count == 0 else f"{self.record.id}.{count + 1}"
        return dataclasses.replace(opts, run_id=run_id)

    def _resumed_config(self, opts: RunOptions) -> RunConfig | None:
        """The run's configuration when a turn was cut: the killed run goes on, in its own
        trace unless ``--trace`` names another (docs/resume.md, "Chat sessions")."""
        if self.cut is None:
            return None
        import attrs

        from ._options import run_config

        config = attrs.evolve(run_config(opts), resume=self.cut)
        return config if opts.trace.path is not None else attrs.evolve(config, trace=True)

    async def _resume_cut(self, state: ResumeState) -> None:
        """Go on with the turn the crash cut: its root starts again with the conversation as
        its history, and its recorded turns and finished work come from the trace."""
        from ._chat_resume import cut_root, recorded_tokens

        root = cut_root(state)
        self._say(f"Going on with the turn the crash cut: {one_line(root.prompt, 100)}")
        await self._turn(root.prompt, used=recorded_tokens(root))

    def _begin(self, session: Session) -> None:
        rt = session.rt
        rec = self.record
        if rec.workspace is not None and rec.workspace != str(rt.workspace):
            self._moved_from = rec.workspace
        rec.workspace = str(rt.workspace)
        rec.provider = self.opts.provider or ("scripted" if self.opts.scenario else "openai")
        rec.model = self.opts.model or rec.model
        rec.scenario = str(Path(self.opts.scenario).resolve()) if self.opts.scenario else None
        rec.agent_types = sorted(rt.agent_types)
        self.trace_path = rt.trace_path
        rec.trace_path = str(Path(rt.trace_path).resolve()) if rt.trace_path else None
        if rec.trace_path and rec.trace_path not in rec.traces:
            rec.traces.append(rec.trace_path)
        if not rec.state.run_ids or rec.state.run_ids[-1] != rt.run_id:  # a cut run goes on
            rec.state.run_ids.append(rt.run_id)

    async def _loop(self) -> None:
        while not (self.exit_requested or self.aborted):
            text = await self._next_input()
            if text is None:
                return
            stripped = text.strip()
            if not stripped:
                continue
            if stripped.startswith("/") and not stripped.startswith("//"):
                await self._command(stripped)
                continue
            if stripped.startswith("//"):
                text = stripped[1:]
            await self._turn(text)

    async def _next_input(self) -> str | None:
        """The next message or command: lines the agent never took first, then what is typed."""
        if self.pending:
            text = "\n".join(self.pending)
            self.pending.clear()
            self._say(f"{PROMPT}{text}")
            self._say("(typed while the agent worked; it finished before taking it: sent now)")
            # A message, never a command: one that starts with / goes on escaped.
            return f"/{text.lstrip()}" if text.lstrip().startswith("/") else text
        with trio.CancelScope() as self._wait_scope:
            try:
                if self.kb is not None:
                    return await self._typed_line(self.kb)
                line = await self._stdin_line()
                if line is not None and line.strip() and not self.opts.json:
                    self._say(f"{PROMPT}{line}")
                return line
            finally:
                self._wait_scope = None
        return None  # an abort while waiting (no terminal)

    async def _typed_line(self, kb: Keyboard) -> str | None:
        try:
            line = kb.lines.receive_nowait()
        except trio.WouldBlock:
            pass
        except trio.EndOfChannel:
            return None
        else:
            # Entered while nothing was showing it (between turns): show it now.
            if line is not None:
                self._say(f"{PROMPT}{line}")
            return line
        kb.show_prompt(PROMPT)
        try:
            return await kb.lines.receive()
        except trio.EndOfChannel:
            return None
        finally:
            kb.hide()

    async def _stdin_line(self) -> str | None:
        # A worker thread blocked in os.read: a pipe, a file or a terminal alike (a regular
        # file cannot be polled), and no Python-level lock is held if it is abandoned.
        while b"\n" not in self._stdin and not self._stdin_eof:
            data = await trio.to_thread.run_sync(os.read, 0, 65536, abandon_on_cancel=True)
            if not data:
                self._stdin_eof = True
            self._stdin += data
        if not self._stdin:
            return None
        line, _, self._stdin = self._stdin.partition(b"\n")
        return line.decode(errors="replace").rstrip("\r")

    # -- one turn ---------------------------------------------------------------------------

    async def _turn(self, text: str, *, used: tuple[int, int] | None = None) -> None:
        """One message's turn (*used*: a cut turn going on, with the tokens it had used)."""
        session = self._session()
        rt, view, kb = session.rt, session.view, self.kb
        rec = self.record
        if rec.first_prompt is None:
            rec.first_prompt = text
        self.sent = []
        self.delivered = 0
        self._turn_tokens = [0, 0] if used is None else list(used)
        mcp = rt.mcp_servers
        if mcp is not None and used is None and not text.startswith("/mcp__"):
            # Followed before they are read (docs/mcp.md, "Following a resource"), so no change
            # falls between; those that changed come again with this message.
            for note in await mcp.subscriptions.follow(text):
                self._say(note)
            text = mcp.subscriptions.take(text)
        handle = await rt.start(text, history=rec.messages)
        self.current = handle
        self.last_root = handle.agent_id
        if isinstance(view, LiveView):
            view.focus = handle.agent_id
            view.release()
        if kb is not None:
            kb.show_in_view()
        try:
            if rec.turns == 0 and not self.saved and rec.trace_path is not None:
                # The session's file is there from its first turn on: killed during it, the
                # chat resumes with `chat --resume` from the trace (docs/resume.md).
                await self._save(quiet=True)
            async with trio.open_nursery() as nursery:
                if kb is not None:
                    nursery.start_soon(self._forward_lines, kb, handle)
                outcome = await handle.wait()
                nursery.cancel_scope.cancel(reason="the turn is over")
        finally:
            self.current = None
            if kb is not None:
                kb.hide()
            if isinstance(view, LiveView):
                view.hold()
        if isinstance(view, LiveView | PlainView):
            view.finish_turn(handle.agent_id)
        self._record_turn(outcome)
        await self._save(quiet=True)
        # Lines the agent never took, in the order they were sent: the runtime hands them back.
        self.pending[:0] = list(outcome.undelivered)
        self.sent = []
        if outcome.status == "cancelled" and self.pending and kb is not None:
            # The turn was stopped on purpose: give the lines back rather than send them.
            kb.set_text(" ".join(" ".join(p.split()) for p in self.pending))
            self.pending.clear()
            self._say("(your message was not delivered; it is back in the prompt)")

    async def _forward_lines(self, kb: Keyboard, handle: AgentHandle) -> None:
        async for line in kb.lines:
            if line is None:
                continue
            stripped = line.strip()
            if not stripped:
                continue
            if stripped.startswith("/") and not stripped.startswith("//"):
                await self._command(stripped)
                continue
            text = stripped[1:] if stripped.startswith("//") else line
            if not handle.done and handle.send(text):
                self.sent.append(text)
            else:
                self.pending.append(text)  # it ended meanwhile: the next message
            self._poke()

    def _record_turn(self, outcome: AgentOutcome) -> None:
        rec = self.record
        messages = list(outcome.state.messages)
        if outcome.status != "completed":
            self.incomplete_turns += 1
            why = f": {outcome.error}" if outcome.error else ""
            # The model should know why its last request has no answer.
            messages = _with_note(
                messages,
                f"(The previous request ended ({outcome.status}) before it finished{why})",
            )
        rec.messages = messages
        rec.turns += 1
        rec.usage.input_tokens += self._turn_tokens[0]
        rec.usage.output_tokens += self._turn_tokens[1]
        rec.state.last_status = outcome.status
        rec.state.last_error = outcome.error
        rec.state.last_agent_id = outcome.agent_id

    async def _save(self, *, quiet: bool = False) -> Path | None:
        rec = self.record
        if self.kb is not None:
            rec.state.input_history = self.kb.history[-MAX_INPUT_HISTORY:]
        rec.updated_ts = time.time()
        try:
            # Encoded here: the record may change while the thread writes.
            data = encode_session(rec, key_file=self.store.key_file)
            path = await trio.to_thread.run_sync(self.store.write, rec.id, data)
        except SessionError as exc:
            self._say(f"trio-agents: warning: the session was not saved: {exc}", err=True)
            return None
        self.saved = True
        if not quiet:
            self._say(f"Saved session {rec.id} to {path}.")
        return path

    # -- events, Ctrl+C ---------------------------------------------------------------------

    def _tap(self, event: Event) -> None:
        # In the emitting agent's task: counting only.
        if isinstance(event, TurnFinished):
            self._turn_tokens[0] += event.input_tokens
            self._turn_tokens[1] += event.output_tokens
            if event.parent_tool_use_id is None and event.context_tokens is not None:
                self._context = (event.context_tokens, event.context_window)
        elif isinstance(event, ContextCompacted):
            # A summary is a model call of the conversation's: its tokens are the session's.
            self._turn_tokens[0] += event.input_tokens
            self._turn_tokens[1] += event.output_tokens
            if event.parent_tool_use_id is None:
                window = self._context[1] if self._context is not None else None
                self._context = (event.tokens_after, window)
                self.record.state.compactions += 1
        elif isinstance(event, UserMessage):
            current = self.current
            waiting = self.sent[self.delivered :]
            # The mailbox keeps our lines in order; a message from a --control client in
            # between is not one of them.
            mine = current is not None and event.agent_id == current.agent_id
            if mine and waiting and event.text == waiting[0]:
                self.delivered += 1

    async def _on_abort(self, session: Session, reason: str) -> None:
        current = self.current
        if self._compact_scope is not None:
            self._compact_scope.cancel(reason="compaction cancelled by user")
            if self.interactive:
                return
        if self.interactive:
            # Ctrl+C with no sub-agent to pick, or q / Ctrl+C at the picker: the turn ends,
            # the chat goes on; at the prompt, the line is cleared.
            if current is not None and not current.done:
                await session.rt.cancel(current.agent_id, "turn cancelled by user (Ctrl+C)")
            elif self.kb is not None:
                self.kb.interrupt()
            return
        # No terminal to ask: SIGINT ends the chat (docs/cli.md#ctrlc-and-the-picker).
        self.aborted = True
        session.aborted = True
        if current is not None and not current.done:
            await session.rt.cancel(current.agent_id, "chat aborted by SIGINT")
        elif self._wait_scope is not None:
            self._wait_scope.cancel(reason="chat aborted by SIGINT")

    # -- slash commands ---------------------------------------------------------------------

    async def _command(self, line: str) -> None:
        name, _, arg = line.partition(" ")
        name = _ALIASES.get(name.lower(), name.lower())
        arg = arg.strip()
        if name == "/help":
            self._help()
        elif name == "/tree":
            self._show_tree()
        elif name == "/cancel":
            await self._cancel(arg)
        elif name == "/agents":
            self._agents()
        elif name == "/trace":
            self._trace()
        elif name == "/save":
            await self._save()
        elif name == "/context":
            self._show_context()
        elif name == "/compact":
            await self._compact(arg)
        elif name == "/clear":
            self._clear()
        elif name.startswith("/mcp__"):
            await self._mcp_prompt(line)
        elif name == "/exit":
            self.exit_requested = True
            current = self.current
            if current is not None and not current.done:
                self._say("Cancelling the turn, then leaving.")
                await self._session().rt.cancel(current.agent_id, "the user left the chat")
        else:
            self._say(
                f"Unknown command {name}: type /help for the list "
                "(start with // to send a message that begins with /)."
            )

    def _notify(self, line: str) -> None:
        # A followed MCP resource changed (docs/mcp.md, "Following a resource"): one line,
        # above the chat line when it is waiting for input.
        kb = self.kb
        if kb is not None and self.current is None:
            kb.print_above(line)
        else:
            self._say(line)

    async def _complete_args(self, line: str) -> list[str]:
        # Tab on an MCP prompt's arguments: the server's completions (docs/mcp.md, "Prompts").
        mcp = self.session.rt.mcp_servers if self.session is not None else None
        if mcp is None or not line.startswith("/mcp__"):
            return []
        values: list[str] = await mcp.complete_line(line)
        return values

    async def _mcp_prompt(self, line: str) -> None:
        # An MCP server's prompt (docs/mcp.md, "Prompts"): sent as the next message, which the
        # runtime replaces with the prompt's text before the turn starts.
        current = self.current
        if current is not None and not current.done:
            self._say("A turn is running: wait for it (or Ctrl+C to cancel it), then send it.")
            return
        try:
            await self._turn(line)
        except ConfigError as exc:
            self._say(f"{exc}")

    def _help(self) -> None:
        width = max(len(c) for c in COMMANDS)
        for cmd, what in COMMANDS.items():
            self._say(f"  {cmd:<{width}}  {what}")
        for line in _KEYS_HELP:
            self._say(line)

    def _show_tree(self) -> None:
        current = self.current
        if current is not None and not current.done and self.view_is_live():
            # A copy printed now would stay in the scrollback, frozen mid-turn.
            self._say("The live tree below is this turn's; it is printed whole when it ends.")
            return
        root = current.agent_id if current is not None else self.last_root
        if root is None:
            self._say("No turn yet: the tree appears with the first message.")
            return
        from ._live import render_tree

        tree = self._session().tree
        self._print(render_tree(tree, time.time(), max_lines=None, subtree=root))

    def view_is_live(self) -> bool:
        """Whether the turn is drawn live on the terminal (not plain lines)."""
        from ._live import LiveView

        return self.session is not None and isinstance(self.session.view, LiveView)

    async def _cancel(self, target: str) -> None:
        if not target:
            self._say("Usage: /cancel ID (an agent id or a tool_use_id; /tree shows them)")
            return
        rt = self._session().rt
        if await rt.cancel(target, "cancelled with /cancel", by="user"):
            self._say(f"Cancelling {target} and everything under it.")
        else:
            self._say(f"Nothing running has the id {target}.")

    def _agents(self) -> None:
        rt = self._session().rt
        for name, atype in sorted(rt.agent_types.items()):
            tools = "all tools" if atype.tools is None else ", ".join(atype.tools) or "no tools"
            desc = one_line(atype.description, 70) or "(no description)"
            self._say(f"  {name}: {desc} [{tools}]")

    def _trace(self) -> None:
        rt = self._session().rt
        if rt.trace_path is None:
            self._say("No trace file for this run (--no-trace).")
        else:
            self._say(f"Trace: {rt.trace_path}")
            self._say(f"Inspect it: {command_name()} trace show {rt.trace_path}")
        current = self.record.trace_path
        earlier = [t for t in self.record.traces if t != current]
        if earlier:
            self._say("Earlier runs of this session: " + ", ".join(earlier))

    def _show_context(self) -> None:
        from runtime.core import DEFAULT_CHARS_PER_TOKEN, history_chars
        from runtime.trace import fmt_tokens

        rt = self._session().rt
        messages = self.record.messages
        window = rt.context_window("main")
        if self._context is not None:
            tokens, said = self._context
            window = said or window
            how = "after the last turn"
        else:
            tokens = round(history_chars(messages) / DEFAULT_CHARS_PER_TOKEN)
            how = "estimated from the saved conversation"
        threshold = rt.limits.compact_threshold
        share = tokens / window if window else 0.0
        count = f"{len(messages)} message" + ("" if len(messages) == 1 else "s")
        self._say(
            f"Context: about {fmt_tokens(tokens)} of {fmt_tokens(window)} tokens ({share:.0%}), "
            f"{count}, {how}."
        )
        compactions = self.record.state.compactions
        done = ""
        if compactions:
            done = f" It has been compacted {compactions} time{'s' * (compactions != 1)}."
        self._say(
            f"The agent compacts at {threshold:.0%} ({fmt_tokens(int(window * threshold))})."
            f"{done} /compact [focus] compacts now."
        )

    async def _compact(self, instructions: str) -> None:
        if self.current is not None:
            self._say("A turn is running: wait for it (or Ctrl+C to cancel it), then /compact.")
            return
        rec = self.record
        if not rec.messages:
            self._say("Nothing to compact yet.")
            return
        session = self._session()
        self._turn_tokens = [0, 0]
        outcome: AgentOutcome | None = None
        self._say("Compacting the conversation…")
        try:
            with trio.CancelScope() as self._compact_scope:  # Ctrl+C cancels it
                outcome = await session.rt.compact(rec.messages, instructions=instructions or None)
        finally:
            self._compact_scope = None
        view = session.view
        if outcome is None:
            self._say("Compaction cancelled; the conversation is as it was.")
            return
        if isinstance(view, LiveView | PlainView):
            view.finish_turn(outcome.agent_id)
        rec.usage.input_tokens += self._turn_tokens[0]
        rec.usage.output_tokens += self._turn_tokens[1]
        if outcome.status != "completed":
            self._say(f"Not compacted: {outcome.error or outcome.status}.")
            return
        if (outcome.result or "").startswith("compacted"):
            rec.messages = list(outcome.state.messages)
            await self._save(quiet=True)
        self._say(f"{(outcome.result or '').capitalize()}.")

    def _clear(self) -> None:
        if self.current is not None:
            self._say("A turn is running: wait for it (or Ctrl+C to cancel it), then /clear.")
            return
        old = self.record
        self._context = None
        self.record = new_session()
        self.record.state.input_history = old.state.input_history
        self._begin(self._session())
        self.last_root = None
        self.pending.clear()
        self.resumed = False
        if old.turns or self.saved:
            self._say(
                f"Fresh conversation: session {self.record.id}. The previous one stays: "
                f"{command_name()} chat --resume {old.id}"
            )
        else:
            self._say(f"Fresh conversation: session {self.record.id}.")
        self.saved = False

    # -- output -----------------------------------------------------------------------------

    def _session(self) -> Session:
        assert self.session is not None, "the chat has no session yet"
        return self.session

    def _poke(self) -> None:
        view = self.session.view if self.session is not None else None
        if isinstance(view, LiveView):
            view.poke()

    def _footer(self, width: int) -> list[Text]:
        from rich.text import Text

        lines: list[Text] = []
        queued = self.sent[self.delivered :]
        for text in queued[-MAX_QUEUED_SHOWN:]:
            line = Text(no_wrap=True, overflow="ellipsis")
            line.append("queued ", style="yellow")
            line.append(f"{PROMPT}{one_line(text, max(10, width - 10))}", style="dim")
            lines.append(line)
        if len(queued) > MAX_QUEUED_SHOWN:
            lines.insert(0, Text(f"… {len(queued) - MAX_QUEUED_SHOWN} more queued", style="dim"))
        if self.kb is not None:
            lines.append(self.kb.footer(width))
        return lines

    def _out(self) -> TextIO:
        # --json keeps stdout for events alone.
        return sys.stderr if self.opts.json else sys.stdout

    def _say(self, text: str, *, err: bool = False) -> None:
        view = self.session.view if self.session is not None else None
        if isinstance(view, LiveView) and not err:
            view.console.print(text, markup=False, highlight=False, soft_wrap=True)
            return
        if isinstance(view, PlainView):
            view.flush()  # the events so far come first
        out = sys.stderr if err else self._out()
        try:
            out.write(text + "\n")
            out.flush()
        except (BrokenPipeError, ValueError):
            pass

    def _print(self, renderable: RenderableType) -> None:
        from rich.console import Console

        view = self.session.view if self.session is not None else None
        if isinstance(view, LiveView):
            view.console.print(renderable)
            return
        if isinstance(view, PlainView):
            view.flush()
        Console(file=self._out(), color_system=None, width=120, soft_wrap=False).print(renderable)

    def _greet(self) -> None:
        rec = self.record
        if self.resumed:
            since = time.strftime("%Y-%m-%d %H:%M", time.localtime(rec.created_ts))
            turns = f"{rec.turns} turn" + ("" if rec.turns == 1 else "s")
            self._say(f"Resumed session {rec.id}: {turns} since {since}.")
            last_user, last_answer = _last_exchange(rec.messages)
            if last_user:
                self._say(f"  you: {one_line(last_user, 100)}")
            if last_answer:
                self._say(f"  agent: {one_line(last_answer, 100)}")
            if self._moved_from is not None:
                self._say(
                    f"Note: this session worked in {self._moved_from}; the tools now work in "
                    f"{rec.workspace}."
                )
        if self.interactive:
            self._say(
                f"{PROG} chat · session {rec.id} · /help for commands · Ctrl+D to leave",
            )

    def _goodbye(self) -> None:
        rec = self.record
        lines: list[str] = []
        if self.saved:
            lines.append(f"Session {rec.id} saved in {self.store.path_for(rec.id)}")
            lines.append(f"Resume it: {command_name()} chat --resume {rec.id}")
        undelivered = self.sent[self.delivered :] + self.pending
        if undelivered:
            lines.append("Not sent: " + " / ".join(one_line(t, 60) for t in undelivered))
        if self.trace_path is not None:
            lines.append(f"Trace: {self.trace_path}")
        if self.aborted:
            error_line("the chat was aborted")
        self.session = None  # the views are gone: plain lines from here
        for line in lines:
            self._say(line)


def _last_exchange(messages: list[Message]) -> tuple[str, str]:
    """The message that started the last turn, and the last text the agent answered.

    A line typed while the agent worked reaches it with a tool call's results (the same
    user message): it is not what the turn was asked, so the recap skips it.
    """
    from runtime.core import ToolResultBlock

    user = answer = ""
    for message in reversed(messages):
        text = message.text.strip()
        if not text:
            continue
        if message.role == "assistant" and not answer:
            answer = text
        elif (
            message.role == "user"
            and not user
            and not text.startswith("(The previous request")
            and not any(isinstance(block, ToolResultBlock) for block in message.content)
        ):
            user = text
        if user and answer:
            break
    return user, answer
