"""The command line: ``trio-agents`` and ``python -m runtime`` (docs/cli.md).

``_main`` parses the command and dispatches; ``_options`` holds the options shared by
``run``/``demo``/``chat``, logging, exit codes and the session around a run; ``_demo``,
``_chat`` (with ``_keyboard``, the line editor, and ``_sessions``, saved conversations) and
``_trace_cmd`` are the commands; ``_live`` is the live tree view (``_frame`` writes its frames),
``_picker`` the Ctrl+C picker, ``_control`` the control socket. It is the top layer: nothing
imports it.
"""
