"""A structlog logger bound on first use: :class:`LazyLogger`.

The runtime binds a logger per run, per agent and per tool call (``agent_id``, ``tool_use_id``,
…), and almost never logs with most of them: a quiet run logs nothing at all. Binding a structlog
logger builds a logger object and its context dict each time (a few microseconds, and objects the
garbage collector tracks), so the runtime keeps the context and binds only when a line is logged.
"""

from __future__ import annotations

from typing import Any


class LazyLogger:
    """Stands for ``base.bind(**context)``, made when a method other than :meth:`bind` is used.

    :meth:`bind` returns another :class:`LazyLogger` with the context extended, as a bound
    structlog logger's would; every other attribute (``debug``, ``info``, ``exception``, …) is
    the bound logger's own.
    """

    __slots__ = ("_base", "_bound", "_context")

    def __init__(self, base: Any, **context: Any) -> None:
        self._base = base
        self._context = context
        self._bound: Any = None

    def bind(self, **context: Any) -> LazyLogger:
        return LazyLogger(self._base, **{**self._context, **context})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # copy/pickle probes, and a half-made instance: not the logger's
            raise AttributeError(name)
        bound = self._bound
        if bound is None:
            bound = self._bound = self._base.bind(**self._context)
        return getattr(bound, name)

    def __repr__(self) -> str:
        return f"<LazyLogger {self._context!r}>"
