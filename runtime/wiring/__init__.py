"""From strings to objects: :func:`~runtime.open_runtime` assembles a run.

It turns a provider name, a scenario, agent-type files, permission rules and limits into the
objects of :mod:`runtime.core`, picks the built-in :mod:`tools`, opens the trace sinks of
:mod:`runtime.trace` and the Ray placement of :mod:`runtime.cluster`, and builds the
:class:`~runtime.core._context.RunContext` the agents share. The command line stands on it.
"""
