"""The built-in tools package, found by where it lies, not by its name on ``sys.path``.

The runtime's tools live in the top-level package ``tools`` beside ``runtime``. The name is
the most common one in agent projects: a user's own ``tools.py`` (or ``tools/``) beside their
script comes first on ``sys.path`` and would be what ``import tools`` gives the runtime
(docs/python-api.md, "Your own tools module"). So the runtime never imports it by name: the
names it needs are attributes of this module, taken from the package found next to
``runtime``. When the name ``tools`` is free, or already ours, that is the ordinary import;
when a user's module holds it, ours is loaded beside it, under the name only while it loads,
and the user's keeps the name. The user's module is never imported by this.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tools import SkillSource as SkillSource
    from tools import SkillTool as SkillTool
    from tools import builtin_tools as builtin_tools

__all__ = ["SkillSource", "SkillTool", "builtin_tools", "package"]

_FOLDER = Path(__file__).resolve().parent.parent / "tools"
_package: ModuleType | None = None


def package() -> ModuleType:
    """The runtime's own ``tools`` package (loaded on first use)."""
    global _package
    if _package is None:
        _package = _find()
    return _package


def _ours(origin: str | None) -> bool:
    return origin is not None and Path(origin).resolve() == _FOLDER / "__init__.py"


def _find() -> ModuleType:
    held = sys.modules.get("tools")
    if held is not None:
        if _ours(getattr(held, "__file__", None)):
            return held
        return _load_beside(held)
    spec = importlib.util.find_spec("tools")  # finds, does not run, whatever holds the name
    if spec is not None and _ours(spec.origin):
        return importlib.import_module("tools")
    return _load_beside(None)


def _load_beside(held: ModuleType | None) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "tools", _FOLDER / "__init__.py", submodule_search_locations=[str(_FOLDER)]
    )
    if spec is None or spec.loader is None:  # pragma: no cover - the package ships with runtime
        raise ImportError(f"the runtime's tools package is missing from {_FOLDER}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["tools"] = module
    try:
        spec.loader.exec_module(module)
        # Every submodule now, while the name is ours: one imported later (a lazy import in a
        # function) would look for its parent under the name, and find the user's module.
        for info in pkgutil.iter_modules([str(_FOLDER)]):
            importlib.import_module(f"tools.{info.name}")
    finally:
        if held is None:
            sys.modules.pop("tools", None)
        else:
            sys.modules["tools"] = held
    return module


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(package(), name)
    raise AttributeError(f"module 'runtime._tools' has no attribute {name!r}")
