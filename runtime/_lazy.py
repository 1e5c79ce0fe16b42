"""Public names imported on first use (PEP 562), for every package's ``__init__``.

A package lists its public names and the private module each lives in; ``import runtime.trace``
then costs nothing until a name is used, so the command line's start-up and a module that needs
one name stay cheap, while type checkers read the ordinary imports the package keeps under
``TYPE_CHECKING`` (docs/architecture.md, "Layers").
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of *package*, whose public *names* map to
    the module each is defined in (``"._events"``, relative to *package*, or absolute)."""
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(names)

    return __getattr__, __dir__
