"""Schema patterns matched with a deadline: a ``pattern`` cannot freeze the event loop.

jsonschema matches ``pattern``, ``patternProperties`` (and the ``additionalProperties`` that
depend on them) with :func:`re.search`, which holds the GIL and cannot be stopped: an MCP
server's schema with ``"pattern": "^(a+)+$"`` and a model's input of thirty ``a`` and a ``!``
froze the runtime, Ctrl+C included. :func:`bounded_validator` gives a validator class whose
three keywords match with the ``regex`` module instead (``re``-compatible ``VERSION0``, as the
``grep`` tool does) under one budget per validation, :data:`PATTERN_BUDGET_S`: past it, the
input is refused as not checkable in time, and the loop goes on (docs/mcp.md, "Tools").
"""

from __future__ import annotations

import contextvars
import functools
import re
import time
from collections.abc import Iterator
from typing import Any, Final

__all__ = ["PATTERN_BUDGET_S", "bounded_validator", "pattern_deadline", "reset_deadline"]

PATTERN_BUDGET_S: Final = 0.25
"""The most time the schema patterns of one tool input may take to match, in all."""
_MAX_PATTERN_CHARS: Final = 4096
_BIG_REPEAT: Final = re.compile(r"\{\s*(\d{4,})")  # a counted repeat of 1000 or more

_deadline: contextvars.ContextVar[float] = contextvars.ContextVar("pattern_deadline", default=0.0)


class _TooSlow(Exception):
    def __init__(self, pattern: str) -> None:
        super().__init__(pattern)
        self.pattern = pattern


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> Any:
    import regex

    if len(pattern) > _MAX_PATTERN_CHARS or _BIG_REPEAT.search(pattern):
        return None  # compiling it could take the memory of the process (tools/_grep.py)
    try:
        return regex.compile(pattern, flags=regex.VERSION0)
    except (regex.error, RecursionError, OverflowError, ValueError):
        return None


def _search(pattern: str, text: str) -> bool:
    compiled = _compiled(pattern)
    if compiled is None:
        raise _TooSlow(pattern)
    left = _deadline.get() - time.monotonic()
    if left <= 0:
        raise _TooSlow(pattern)
    try:
        return compiled.search(text, timeout=left) is not None
    except TimeoutError:
        raise _TooSlow(pattern) from None


def pattern_deadline() -> contextvars.Token[float]:
    """Start the budget of one validation (reset the returned token after it)."""
    return _deadline.set(time.monotonic() + PATTERN_BUDGET_S)


def reset_deadline(token: contextvars.Token[float]) -> None:
    """End the budget started by :func:`pattern_deadline`."""
    _deadline.reset(token)


def _too_slow(exc: _TooSlow) -> Any:
    from jsonschema.exceptions import ValidationError

    return ValidationError(
        f"could not be checked against the pattern {exc.pattern[:80]!r} within "
        f"{PATTERN_BUDGET_S:g} s (a pattern that backtracks badly, or too big); refused"
    )


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "string"):
        return
    try:
        matched = _search(patrn, instance)
    except _TooSlow as exc:
        yield _too_slow(exc)
        return
    if not matched:
        yield ValidationError(f"{instance[:200]!r} does not match {patrn!r}")


def _pattern_properties(validator: Any, props: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in props.items():
        for key, value in instance.items():
            try:
                matched = _search(patrn, key)
            except _TooSlow as exc:
                yield _too_slow(exc)
                return
            if matched:
                yield from validator.descend(value, subschema, path=key, schema_path=patrn)


def _additional_properties(validator: Any, ap: Any, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras: list[str] = []
    for key in instance:
        if key in properties:
            continue
        try:
            if any(_search(p, key) for p in patterns):
                continue
        except _TooSlow as exc:
            yield _too_slow(exc)
            return
        extras.append(key)
    if validator.is_type(ap, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], ap, path=extra)
    elif not ap and extras:
        names = ", ".join(repr(e) for e in sorted(extras))
        yield ValidationError(f"Additional properties are not allowed ({names} unexpected)")


@functools.lru_cache(maxsize=16)
def bounded_validator(cls: Any) -> Any:
    """*cls* (a jsonschema validator class) with its regex keywords matched under the budget;
    validate inside :func:`pattern_deadline` / :func:`reset_deadline`."""
    import jsonschema

    return jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        cls,
        {
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties,
        },
    )
