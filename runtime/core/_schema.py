"""A fast yes for tool input that is valid, for the simple JSON Schemas tools use.

Validating every tool call with jsonschema cost 12-13 % of a wide fan-out (its validators walk the
schema keyword by keyword, in Python, for every call). Most tool schemas are flat objects of typed
fields, so :func:`compile_check` turns such a schema into a closure that answers "valid" with a
few type checks. It only ever says yes when jsonschema would: anything it does not fully
understand (a keyword it does not know, a float where an integer is expected, an ``enum`` of
anything but strings) makes it answer no, and :func:`~runtime.core.validate_input` then asks
jsonschema, which also words the error. A schema it cannot compile gets no fast check at all.

Understood: ``type`` (one name or a list of them), ``properties``, ``required``,
``additionalProperties`` (``false``, ``true`` or absent), ``items`` (one schema), ``minLength``,
``maxLength``, ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``,
``minItems``, ``maxItems``, ``enum`` (of strings: ``todo_write``'s ``status``), and the
annotations ``description``, ``title``, ``default``, ``examples``, ``format`` (jsonschema does
not assert formats unless asked to, and it is not).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

Check = Callable[[Any], bool]

_ANNOTATIONS: Final = frozenset({"description", "title", "default", "examples", "format"})
# The classes a JSON decoder makes. Anything else (a subclass, a Decimal, an enum) is left to
# jsonschema, which applies its keywords by isinstance and numbers.Number.
_PLAIN: Final = frozenset({str, int, float, bool, type(None), dict, list})
_NUMERIC: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "minimum": lambda v, bound: v >= bound,
    "maximum": lambda v, bound: v <= bound,
    "exclusiveMinimum": lambda v, bound: v > bound,
    "exclusiveMaximum": lambda v, bound: v < bound,
}
_KNOWN: Final = (
    _ANNOTATIONS
    | set(_NUMERIC)
    | {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "enum",
    }
)


class _Unsupported(Exception):
    """The schema uses something the fast check does not cover."""


def _is_type(name: str) -> Check:
    # bool is an int subclass, and JSON Schema keeps them apart; a float that is integral counts
    # as an integer for jsonschema, which the fast check leaves to it.
    if name == "string":
        return lambda v: v.__class__ is str
    if name == "integer":
        return lambda v: v.__class__ is int
    if name == "number":
        return lambda v: v.__class__ is int or v.__class__ is float
    if name == "boolean":
        return lambda v: v.__class__ is bool
    if name == "object":
        return lambda v: v.__class__ is dict
    if name == "array":
        return lambda v: v.__class__ is list
    if name == "null":
        return lambda v: v is None
    raise _Unsupported(f"type {name!r}")


def _bound(value: Any) -> int | float:
    if value.__class__ is not int and value.__class__ is not float:
        raise _Unsupported("a bound that is not a number")
    bound: int | float = value
    return bound


def _count(value: Any) -> int:
    if value.__class__ is not int or value < 0:
        raise _Unsupported("a length that is not a count")
    return int(value)


def _compile(schema: Any) -> Check:
    if schema is True or schema == {}:
        return lambda v: True
    if schema.__class__ is not dict or not set(schema) <= _KNOWN:
        raise _Unsupported("a keyword the fast check does not know")
    checks: list[Check] = []
    if "type" in schema:
        kind = schema["type"]
        names = kind if kind.__class__ is list else [kind]
        tests = [_is_type(name) for name in names]
        checks.append(tests[0] if len(tests) == 1 else lambda v: any(t(v) for t in tests))
    # Each keyword below applies only to values of its kind (JSON Schema ignores it otherwise).
    if "minLength" in schema or "maxLength" in schema:
        low = _count(schema.get("minLength", 0))
        top = _count(schema["maxLength"]) if "maxLength" in schema else None
        checks.append(
            lambda v: v.__class__ is not str or (low <= len(v) and (top is None or len(v) <= top))
        )
    for keyword, compare in _NUMERIC.items():
        if keyword in schema:
            checks.append(_numeric_check(compare, _bound(schema[keyword])))
    if "enum" in schema:
        checks.append(_enum_check(schema["enum"]))
    if "properties" in schema or "required" in schema or "additionalProperties" in schema:
        checks.append(_object_check(schema))
    if "items" in schema or "minItems" in schema or "maxItems" in schema:
        checks.append(_array_check(schema))
    if not checks:
        return lambda v: True  # annotations only: anything is valid, as for jsonschema
    if len(checks) == 1:
        (only,) = checks
        return lambda v: v.__class__ in _PLAIN and only(v)
    every = tuple(checks)

    def check_all(v: Any) -> bool:
        # A loop, not all(<generator>): this runs for every tool call, and the generator's
        # set-up was most of what checking a small input cost.
        if v.__class__ not in _PLAIN:
            return False
        for check in every:  # noqa: SIM110
            if not check(v):
                return False
        return True

    return check_all


def _enum_check(choices: Any) -> Check:
    # Strings only: a string equals a JSON value only if it is that string (no 1 == True).
    if choices.__class__ is not list or not all(c.__class__ is str for c in choices):
        raise _Unsupported("an enum of anything but strings")
    allowed = frozenset(choices)
    return lambda v: v.__class__ is str and v in allowed


def _numeric_check(compare: Callable[[Any, Any], bool], bound: int | float) -> Check:
    return lambda v: (v.__class__ is not int and v.__class__ is not float) or compare(v, bound)


def _object_check(schema: dict[str, Any]) -> Check:
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if properties.__class__ is not dict or required.__class__ is not list:
        raise _Unsupported("properties or required of a wrong shape")
    if extra is not True and extra is not False:
        raise _Unsupported("additionalProperties that is a schema")
    fields = {name: _compile(sub) for name, sub in properties.items()}
    needed = tuple(required)
    closed = extra is False

    def check(value: Any) -> bool:
        if value.__class__ is not dict:
            return True  # "type" decides about non-objects
        for name in needed:
            if name not in value:
                return False
        for name, item in value.items():
            field = fields.get(name)
            if field is None:
                if closed:
                    return False
            elif not field(item):
                return False
        return True

    return check


def _array_check(schema: dict[str, Any]) -> Check:
    items = _compile(schema.get("items", True))
    low = _count(schema.get("minItems", 0))
    top = _count(schema["maxItems"]) if "maxItems" in schema else None

    def check(value: Any) -> bool:
        if value.__class__ is not list:
            return True
        if len(value) < low or (top is not None and len(value) > top):
            return False
        return all(items(item) for item in value)

    return check


def compile_check(schema: Any) -> Check | None:
    """A function saying whether a value is certainly valid against *schema*, or None.

    None means the schema uses something the fast check does not cover: ask jsonschema. A False
    from the function means "not certainly valid", also a question for jsonschema.
    """
    try:
        return _compile(schema)
    except (_Unsupported, TypeError, AttributeError):
        return None
