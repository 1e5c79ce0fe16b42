"""Public names that look public: ``runtime.ConfigError``, not ``runtime.core._errors.ConfigError``.

The code lives in private modules and the packages re-export it (trio and httpx do the same and
fix up ``__module__`` the same way). Changing a class's ``__module__`` would make
:func:`typing.get_type_hints` look its string annotations up in the wrong module, so those are
resolved first, in the module that wrote them, for the class and its bases; a class whose
annotations name things only a type checker imports keeps them as strings.
"""

from __future__ import annotations

import contextlib
import inspect
import typing
from collections.abc import Iterable
from typing import Any

__all__ = ["publish_names"]


def publish_names(values: Iterable[Any], module: str) -> None:
    """Give each class and function in *values* defined in this project *module* as its
    ``__module__``."""
    mine = [
        v
        for v in values
        if (isinstance(v, type) or inspect.isfunction(v))
        and v.__module__.startswith(("runtime.", "tools."))
    ]
    for value in mine:
        if isinstance(value, type):
            for cls in value.__mro__:
                _resolve_annotations(cls)
    for value in mine:
        value.__module__ = module


def _resolve_annotations(cls: type) -> None:
    own = inspect.get_annotations(cls)
    if not own or not any(isinstance(a, str) for a in own.values()):
        return
    if not cls.__module__.startswith(("runtime.", "tools.")):
        return
    with contextlib.suppress(Exception):  # e.g. a name only a type checker imports
        hints = typing.get_type_hints(cls, include_extras=True)
        cls.__annotations__ = {name: hints.get(name, a) for name, a in own.items()}
        if hasattr(cls, "__attrs_attrs__"):
            import attrs

            attrs.resolve_types(cls)
