"""The ``trio-agents`` command line (docs/cli.md).

Commands: ``run PROMPT``, ``demo``, ``chat`` (its own module), ``trace …`` (its own module),
``replay TRACE`` (its own module), ``cancel --control SOCK ID``, ``stop --control SOCK ID``,
and ``agents`` / ``config``
(:mod:`runtime.cli._project`, which also puts the settings files under the flags of ``run`` and
``chat``). Exit codes: 0 the root
agent completed; 1 it ended otherwise; 2 bad usage or a bad input file; 130 aborted by the user.

Start-up stays fast: this module and :mod:`runtime.cli._options` import only the standard library
at the top; trio, rich and the runtime's internals are imported inside the commands.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._mcp_cmd import add_parser as add_mcp_parser
from ._options import (
    EXIT_ABORTED,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    GLOBAL_FLAGS,
    PROG,
    CliParser,
    HelpFormatter,
    RunOptions,
    UsageError,
    add_common_options,
    error_line,
    options_from_args,
    run_prompt,
)

_DESCRIPTION = (
    "An actor-model multi-agent runtime on trio: sub-agent trees you can watch and cancel."
)
_EPILOG = """\
exit codes: 0 the root agent completed, 1 it ended otherwise (failed, max turns, budget),
            2 bad usage or a bad input file, 130 aborted by the user (Ctrl+C)

Ctrl+C while sub-agents run (on a terminal) lists them: type a number to cancel that
subtree only, a to cancel them all, q to abort the run, Enter to resume.

bash is not confined: it runs as you, with your rights, unless --sandbox (bubblewrap) is given.
Rules such as --deny 'bash(rm *)' match the command's text: a convenience, not a boundary."""
_CHAT_DESCRIPTION = """\
An interactive session with the main agent: each message runs a turn, with the live tree on a
terminal, and with the conversation so far. Type while the agent works: the line reaches it at
its next step. Slash commands: /help, /tree, /cancel ID, /agents, /trace, /save, /clear, /exit.
The conversation is saved after every turn (in .trio-agents/sessions/) and continued with
--resume. Without a terminal: one message per line of stdin, plain output."""
_CHAT_EPILOG = """\
keys: Enter sends (during a turn: queued for the agent's next step); Ctrl+C picks running
      sub-agents to cancel, or cancels the turn (at the prompt: clears the line);
      Ctrl+D at the prompt leaves; Up/Down recall earlier lines; Tab completes /commands.

exit codes: 0 the chat ended (Ctrl+D, /exit, end of stdin); 1 without a terminal, when a
            turn did not complete; 2 bad usage or a bad session file; 130 aborted (SIGINT
            without a terminal)"""


def build_parser() -> CliParser:
    """The whole command line (``trace`` is parsed by its own module)."""
    parser = CliParser(
        prog=PROG,
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument(
        "--debug", action="store_true", help="debug logs and tracebacks (before or after COMMAND)"
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="warnings on stderr too (before or after COMMAND)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CliParser)
    _add_running_commands(sub)
    sub.add_parser(
        "trace",
        help="inspect a trace: show, stats, tail, export (see trio-agents trace --help)",
        add_help=False,
    )
    add_mcp_parser(sub)
    _add_project_commands(sub)
    _add_control_commands(sub)
    return parser


def _add_running_commands(sub: Any) -> None:
    """``run``, ``demo``, ``chat`` and ``replay``: the commands that run agents, with the
    options of the settings table (``runtime/core/_config.py``)."""
    run = sub.add_parser(
        "run",
        help="run the main agent on PROMPT (live tree on a terminal, plain lines otherwise)",
        description="Run the main agent on PROMPT. On a terminal: a live tree of agents and "
        "tool calls, Ctrl+C to cancel one subtree. Otherwise: one plain line per event.",
        epilog=_EPILOG,
        formatter_class=HelpFormatter,
    )
    run.add_argument(
        "prompt", metavar="PROMPT", nargs="?", help="the task for the main agent ('-': stdin)"
    )
    run.add_argument(
        "--show-system-prompt",
        nargs="?",
        const="main",
        metavar="TYPE",
        help="print the system prompt the main agent (or an agent of TYPE) would get, and exit",
    )
    add_common_options(run)

    demo = sub.add_parser(
        "demo",
        help="a built-in scripted run: parallel sub-agents doing real work (no key, no network)",
        description="Run the built-in demo: a main agent splits a small code review over "
        "parallel sub-agents that grep, read and run commands in a temporary project. Needs no "
        "key and no network. Try Ctrl+C while the slow sub-agent works.",
        epilog=_EPILOG,
        formatter_class=HelpFormatter,
    )
    add_common_options(demo, demo=True)

    chat = sub.add_parser(
        "chat",
        help="an interactive session: one turn per message, sessions saved and resumed",
        description=_CHAT_DESCRIPTION,
        epilog=_CHAT_EPILOG,
        formatter_class=HelpFormatter,
    )
    add_common_options(chat)
    g = chat.add_argument_group("sessions")
    which = g.add_mutually_exclusive_group()
    which.add_argument(
        "--resume",
        nargs="?",
        const="",
        metavar="ID",
        help="continue session ID, or the latest one without ID",
    )
    which.add_argument(
        "--list", action="store_true", help="list the sessions (date, turns, first prompt)"
    )
    g.add_argument(
        "--sessions-dir",
        metavar="DIR",
        help="where sessions are kept (default: .trio-agents/sessions in this folder)",
    )

    replay = sub.add_parser(
        "replay",
        help="run a recorded trace again: its model turns played back, its tools run or mocked",
        description="Run the recorded run in TRACE again: each agent's model turns are played "
        "back from the trace (agents matched by their place in the tree), tools run for real "
        "in --workspace (no fresh copy is made) or, with --mock-tools, return their recorded "
        "outputs. A difference from the recording is reported as a divergence; --strict ends "
        "the run failed at the first one. --until with --continue-provider forks: replay up to "
        "a tool call or turn, then go on live. See docs/replay.md.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    replay.add_argument("trace_file", metavar="TRACE", help="the JSONL trace to replay")
    add_common_options(replay)
    from ._replay import add_replay_options

    add_replay_options(replay)

    resume = sub.add_parser(
        "resume",
        help="go on with a run whose process was killed, from its trace",
        description="Go on with the run recorded in TRACE, whose process died: every agent is "
        "rebuilt from the trace (finished model turns are not asked again, finished tool calls "
        "not run again), and those that were running go on. An interrupted tool call runs "
        "again only if its tool is read-only or idempotent. The trace itself is continued "
        "(--trace NEW: the whole run is written there instead). A workspace changed since the "
        "recorded calls read or wrote it is refused unless --force. See docs/resume.md.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    resume.add_argument("trace_file", metavar="TRACE", help="the JSONL trace of the killed run")
    add_common_options(resume)


def _add_project_commands(sub: Any) -> None:
    """``agents`` and ``config``: what a run here would get, without running anything."""
    agents = sub.add_parser(
        "agents",
        help="list the known agent types and where each came from",
        description="List the agent types a run here would know: the built-in ones, those of "
        ".claude/agents/*.md, .trio-agents/agents/*.md and the user's config folder, and those "
        "of --scenario and --agents, with the file each came from.",
    )
    agents.add_argument("--workspace", metavar="DIR", help="the project (default: this folder)")
    agents.add_argument("--agents", metavar="FILE", help="agent types to add (TOML)")
    agents.add_argument("--scenario", metavar="FILE", help="a scripted-provider scenario")
    agents.add_argument("--json", action="store_true", help="print JSON")

    config = sub.add_parser(
        "config",
        help="print the effective settings and where each value came from",
        description="Print the settings a run with these options would use: each key, its "
        "value and its source (a flag, the workspace's or the user's "
        ".trio-agents/settings.toml, or the default). Takes the options of run; --json "
        "prints JSON.",
    )
    add_common_options(config)
    from ._trust_cmd import add_trust_parser

    add_trust_parser(sub)
    from ._hooks_cmd import add_hooks_parser

    add_hooks_parser(sub)
    from ._worktrees_cmd import add_worktrees_parser

    add_worktrees_parser(sub)


def _add_control_commands(sub: Any) -> None:
    """``cancel``, ``permit``, ``pending`` and ``elicit``: talk to a run's control socket."""
    cancel = sub.add_parser(
        "cancel",
        help="cancel a subtree of a run started with --control SOCK",
        description="Cancel the subtree under ID (an agent id or a tool_use_id) in a running "
        "run started with --control SOCK. Exit 0 when cancelled, 1 when the run refused (the "
        "reason is printed), 2 when nothing listens at SOCK.",
    )
    cancel.add_argument("--control", metavar="SOCK", required=True, help="the run's socket")
    cancel.add_argument("id", metavar="ID", help="the agent id or tool_use_id to cancel")
    cancel.add_argument("--reason", help="why (recorded in the trace)")
    # Accepted as everywhere (before or after the command); cancel has nothing more to say.
    cancel.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    cancel.add_argument("-v", "--verbose", action="store_true", help=argparse.SUPPRESS)

    stop = sub.add_parser(
        "stop",
        help="stop a subtree of a run started with --control SOCK gracefully",
        description="Stop the subtree under ID (an agent id or a tool_use_id) in a running run "
        "started with --control SOCK: its tool calls under way finish, it takes no new model "
        "turn, and its agents end stopped, their partial work going to the parent. Exit 0 when "
        "stopping, 1 when the run refused (the reason is printed), 2 when nothing listens at "
        "SOCK.",
    )
    stop.add_argument("--control", metavar="SOCK", required=True, help="the run's socket")
    stop.add_argument("id", metavar="ID", help="the agent id or tool_use_id to stop")
    stop.add_argument("--reason", help="why (recorded in the trace)")
    stop.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    stop.add_argument("-v", "--verbose", action="store_true", help=argparse.SUPPRESS)

    permit = sub.add_parser(
        "permit",
        help="answer a permission request of a run started with --control SOCK",
        description="Answer the permission request REQUEST_ID (see trio-agents pending) of a "
        "run started with --control SOCK in ask mode. Exit 0 when answered, 1 when the run "
        "refused (no such request is waiting), 2 when nothing listens at SOCK.",
    )
    permit.add_argument("--control", metavar="SOCK", required=True, help="the run's socket")
    permit.add_argument("request_id", metavar="REQUEST_ID", help="e.g. perm-1")
    permit.add_argument("answer", choices=["yes", "no"], help="grant or deny the call")
    permit.add_argument(
        "--always",
        action="store_true",
        help="with yes: also allow calls like this one for the rest of the run",
    )

    pending = sub.add_parser(
        "pending",
        help="list the permission requests waiting in a run started with --control SOCK",
        description="List the permission requests waiting for an answer, one a line: "
        "REQUEST_ID, what the call does, the agent and the tool call.",
    )
    pending.add_argument("--control", metavar="SOCK", required=True, help="the run's socket")
    pending.add_argument("--json", action="store_true", help="as one JSON array")

    elicit = sub.add_parser(
        "elicit",
        help="list or answer the questions MCP servers ask in a run started with --control SOCK",
        description="Without REQUEST_ID: list the questions MCP servers asked that wait for an "
        "answer. With it: answer one (docs/mcp.md, \"Elicitation\"): accept (with the content "
        "as NAME=VALUE words, typed by the question's schema, or --content JSON), decline or "
        "cancel. Exit 0 when answered, 1 when the run refused (no such question, content not "
        "matching the schema), 2 when nothing listens at SOCK.",
    )
    elicit.add_argument("--control", metavar="SOCK", required=True, help="the run's socket")
    elicit.add_argument("request_id", metavar="REQUEST_ID", nargs="?", help="e.g. elicit-1")
    elicit.add_argument(
        "action", nargs="?", choices=["accept", "decline", "cancel"], help="the answer"
    )
    elicit.add_argument("fields", metavar="NAME=VALUE", nargs="*", help="the content (accept)")
    elicit.add_argument("--content", metavar="JSON", help="the content as one JSON object")
    elicit.add_argument("--json", action="store_true", help="list as one JSON array")


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code.

    Called without *argv* (the ``trio-agents`` process itself), it first seals the process's
    environment: secrets leave ``os.environ`` and ``/proc/<pid>/environ`` (kept privately for
    the providers), so the commands the agents run cannot read them from this process.

    A reader that closed stdout (``trio-agents config | head -1``) ends the command quietly
    with exit 0, as ``cat`` ends: the reader had what it wanted.
    """
    try:
        code = _main(argv)
        sys.stdout.flush()  # here, not at exit, where a closed pipe could only complain
    except BrokenPipeError:
        from ._options import silence_stdout

        silence_stdout()
        return EXIT_OK
    return code


def _main(argv: list[str] | None) -> int:
    if argv is None:
        from runtime.core import seal_process_environ

        # Ray reads its cluster's authentication from the environment when it connects (and
        # again when it reconnects); without them a run cannot join a token-protected cluster.
        # They stay out of every child's environment all the same (filter_env).
        seal_process_environ(keep=("RAY_AUTH_MODE", "RAY_AUTH_TOKEN"))
    lead, args = _leading_globals(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "trace":
        from ._trace_cmd import main as trace_main  # lazy on purpose

        # After the trace command's own words: `trace show F --debug`.
        return int(trace_main([*args[1:], *lead]))
    parser = build_parser()
    ns = parser.parse_args(_after_command(parser, lead, args))
    if ns.version:
        from runtime.core import VERSION as __version__

        print(f"{PROG} {__version__}")
        return EXIT_OK
    if ns.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        if ns.command == "cancel":
            return cmd_cancel(ns.control, ns.id, ns.reason)
        if ns.command == "stop":
            return cmd_cancel(ns.control, ns.id, ns.reason, op="stop")
        if ns.command == "mcp":
            from ._mcp_cmd import main as mcp_main

            return mcp_main(ns, parser)
        if ns.command == "agents":
            from ._project import cmd_agents, load_workspace_project

            project = load_workspace_project(ns.workspace)
            opts = RunOptions(
                workspace=ns.workspace, agents=ns.agents, scenario=ns.scenario, project=project
            )
            return cmd_agents(opts, as_json=ns.json)
        if ns.command in ("permit", "pending"):
            from ._control import cmd_pending, cmd_permit

            if ns.command == "permit":
                return cmd_permit(ns.control, ns.request_id, ns.answer, always=ns.always)
            return cmd_pending(ns.control, as_json=ns.json)
        if ns.command == "elicit":
            from ._control import cmd_elicit

            return cmd_elicit(ns)
        if ns.command == "trust":
            from ._trust_cmd import cmd_trust

            return cmd_trust(ns)
        if ns.command == "hooks":
            from ._hooks_cmd import cmd_hooks

            return cmd_hooks(ns)
        if ns.command == "worktrees":
            from ._worktrees_cmd import cmd_worktrees

            return cmd_worktrees(ns)
        if ns.command == "config":
            from ._project import cmd_config

            return cmd_config(ns, as_json=ns.json)
        if ns.command in ("run", "chat"):
            from ._project import apply_project

            opts = apply_project(ns)  # the settings files under the flags
        else:
            opts = options_from_args(ns)  # demo, replay and resume read no settings file
        if ns.command == "run":
            if ns.show_system_prompt is not None:
                from ._project import show_system_prompt

                return show_system_prompt(opts, ns.show_system_prompt)
            if ns.prompt is None:
                parser.error("run: the following arguments are required: PROMPT")
            return cmd_run(opts, _read_prompt(ns.prompt))
        if ns.command == "replay":
            from ._replay import cmd_replay

            return cmd_replay(ns, opts)
        if ns.command == "resume":
            from ._resume import cmd_resume

            return cmd_resume(ns, opts)
        if ns.command == "demo":
            from ._demo import run_demo

            return run_demo(opts)
        if ns.command == "chat":
            from ._chat import cmd_chat

            return cmd_chat(opts, resume=ns.resume, list_only=ns.list, sessions_dir=ns.sessions_dir)
    except UsageError as exc:
        error_line(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        # Only outside a run (start-up, `cancel` waiting on its socket): inside one, SIGINT is
        # a message to the session, never an exception.
        return EXIT_ABORTED
    parser.error(f"unknown command {ns.command!r}")


def _leading_globals(args: list[str]) -> tuple[list[str], list[str]]:
    """The global options given before the command (``--debug demo``), and the rest."""
    rest = list(args)
    lead = []
    while rest and rest[0] in GLOBAL_FLAGS:
        lead.append(rest.pop(0))
    if not rest or rest[0].startswith("-"):
        return [], list(args)  # no command after them: the top level parses them as they are
    return lead, rest


def _after_command(parser: argparse.ArgumentParser, lead: list[str], args: list[str]) -> list[str]:
    """*args* with the leading global options moved after the command's name, where its own
    parser takes them (a command's defaults would otherwise undo the top level's values); one
    a command does not know has nothing to act on there, and is dropped."""
    if not lead:
        return args
    commands: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            commands = action.choices
    command = commands.get(args[0])
    if command is None:
        return [*lead, *args]  # an unknown command: the parser says so
    known = [flag for flag in lead if flag in command._option_string_actions]
    return [args[0], *known, *args[1:]]


def _read_prompt(text: str) -> str:
    if text == "-":
        text = sys.stdin.read()
    if not text.strip():
        raise UsageError("the prompt is empty")
    return text


def cmd_run(opts: RunOptions, prompt: str) -> int:
    """``trio-agents run PROMPT``: run the main agent to its end; returns the exit code."""
    from ._options import check_output_paths, existing_file, run_command, setup_logging

    existing_file(opts.scenario, "--scenario")
    existing_file(opts.agents, "--agents")
    check_output_paths(opts)
    setup_logging(opts.debug, opts.verbose)
    return run_command(lambda: run_prompt(opts, prompt), debug=opts.debug)


def cmd_cancel(path: str, target: str, reason: str | None, *, op: str = "cancel") -> int:
    """``trio-agents cancel --control SOCK ID`` (and ``stop``, with *op*): 0 done, 1 refused,
    2 no run there."""
    from ._control import ControlConnectError, control_request

    request: dict[str, Any] = {"op": op, "target": target}
    if reason:
        request["reason"] = reason
    try:
        answer = control_request(path, request)
    except ControlConnectError as exc:
        error_line(
            f"cannot connect to {path}: {exc.strerror} (is a run started with --control there?)"
        )
        return EXIT_USAGE
    except (OSError, ValueError) as exc:
        error_line(f"control socket {path}: {exc}")
        return EXIT_FAILED
    if isinstance(answer, dict) and answer.get("ok") is True:
        return EXIT_OK
    detail = answer.get("error") if isinstance(answer, dict) else None
    error_line(str(detail or f"unexpected answer: {answer!r}"))
    return EXIT_FAILED
