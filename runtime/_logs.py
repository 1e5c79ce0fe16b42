"""The runtime's loggers: quiet in an application that did not ask for its lines.

Every module of the runtime logs through :func:`get_logger`. Which way a line goes is decided
when it is logged:

* the application configured structlog (``structlog.configure``; the command line does, see
  docs/cli.md): the line goes through that configuration, as any structlog logger's would;
* it did not: the line goes to the standard library's :mod:`logging`, under the logger's name
  (``trio_agents.bash`` …), rendered as one line with the run's secrets masked. An application
  that configures no logging at all therefore sees nothing below a warning, and warnings only on
  stderr (Python's last-resort handler); one that configures :mod:`logging` sees the runtime's
  lines with its own. structlog's own default would print every line, debug included, to the
  application's stdout.

It sits beside the layers (it imports nothing of the runtime), so every layer can use it; the
masking comes from the core layer, which adds it with :func:`add_mask` when it is imported.

structlog itself is imported only when a line is logged at a level that is on (or by whoever
configures it: the command line does with ``--debug`` or ``-v``). A line below its level (a
debug line, nearly always) is dropped by the standard library's level check alone, and a run
that logs nothing, every command without ``--debug``, never imports structlog, nor the asyncio
and rich it imports (tens of milliseconds at each start: bench/README.md, "Resume"). If the
application has not imported structlog it has not configured it either: its lines go the
standard library's way. The first line that does go out pays for the import, once.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

Processor = Callable[[Any, str, MutableMapping[str, Any]], Any]

_masks: list[Processor] = []


_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "msg": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
}
_chains: dict[int, list[Any]] = {}  # by the number of masks added


def _chain() -> list[Any]:
    """The processors of a line that goes to :mod:`logging` (made once per set of masks)."""
    chain = _chains.get(len(_masks))
    if chain is None:
        import structlog

        chain = _chains[len(_masks)] = [
            structlog.processors.format_exc_info,
            *_masks,
            structlog.dev.ConsoleRenderer(
                colors=False, exception_formatter=structlog.dev.plain_traceback
            ),
        ]
    return chain


def _configured_by_the_application(structlog: Any) -> bool:
    """Whether structlog has a configuration of the application's: configured, and not back to
    structlog's own defaults (``structlog.testing.capture_logs`` configures on the way out, and
    leaves the defaults, which print every line on stdout)."""
    if not structlog.is_configured():
        return False
    from structlog import _config as builtin  # its defaults are not public: looked up softly

    processors = getattr(builtin, "_BUILTIN_DEFAULT_PROCESSORS", None)
    factory = getattr(builtin, "_BUILTIN_DEFAULT_LOGGER_FACTORY", None)
    wrapper = getattr(builtin, "_BUILTIN_DEFAULT_WRAPPER_CLASS", None)
    if processors is None or factory is None or wrapper is None:
        return True
    config = structlog.get_config()
    return bool(
        config["processors"] != processors
        or config["logger_factory"] is not factory
        or config["wrapper_class"] is not wrapper
    )


_wrappers: list[Any] = []


def _stdlib_wrapper() -> Any:
    """structlog's stdlib logger, but ``exception`` logs as ``error``: the chain has already
    rendered (and masked) the traceback, and the stdlib's own ``exception`` would append it
    again, unmasked."""
    if not _wrappers:
        import structlog

        class _Wrapper(structlog.stdlib.BoundLogger):
            def exception(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
                kw.setdefault("exc_info", True)
                return self._proxy_to_logger("error", event, *args, **kw)

        _wrappers.append(_Wrapper)
    return _wrappers[0]


def _dropped(*_: Any, **__: Any) -> None:
    """A logging method below its logger's level."""


def add_mask(processor: Processor) -> None:
    """Run *processor* on every line logged through :mod:`logging` (before it is rendered)."""
    if processor not in _masks:
        _masks.append(processor)


def get_logger(name: str) -> Any:
    """The runtime's logger *name*: a structlog-style logger (``debug``, ``info``, ``warning``,
    ``error``, ``exception``, ``bind``) that picks its way per line (see the module doc)."""
    return _Logger(name, {})


class _Logger:
    __slots__ = ("_context", "_name")

    def __init__(self, name: str, context: dict[str, Any]) -> None:
        self._name = name
        self._context = context

    def bind(self, **context: Any) -> _Logger:
        return _Logger(self._name, {**self._context, **context})

    def new(self, **context: Any) -> _Logger:
        return _Logger(self._name, context)

    def unbind(self, *keys: str) -> _Logger:
        context = dict(self._context)
        for key in keys:
            del context[key]  # KeyError for a key not bound, as structlog's
        return _Logger(self._name, context)

    def try_unbind(self, *keys: str) -> _Logger:
        return _Logger(self._name, {k: v for k, v in self._context.items() if k not in keys})

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_"):  # copy/pickle probes: not the logger's
            raise AttributeError(method)
        imported: Any = None  # not imported: not configured either
        if "structlog" in sys.modules:
            # Imported, or being imported by another thread: the import statement waits for
            # that import to finish, where the module in sys.modules may be half made.
            import structlog as imported
        if imported is not None and _configured_by_the_application(imported):
            logger = imported.get_logger(self._name)
        else:
            std = logging.getLogger(self._name)
            level = _LEVELS.get(method)
            if level is not None and not std.isEnabledFor(level):
                return _dropped  # below the level (a debug line, nearly always): nothing built
            import structlog

            logger = structlog.wrap_logger(
                std, processors=_chain(), wrapper_class=_stdlib_wrapper()
            )
        if self._context:
            logger = logger.bind(**self._context)
        return getattr(logger, method)

    def __repr__(self) -> str:
        return f"<trio-agents logger {self._name} {self._context!r}>"
