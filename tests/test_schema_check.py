"""The fast input check (tools/_schema.py): it only ever says yes where jsonschema would."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.core._errors import ToolInputError
from runtime.core._schema import compile_check
from tools import builtin_tools, validate_input

NAMES = ["a", "b", "c"]

_numbers = st.one_of(st.integers(-5, 5), st.floats(-5, 5, allow_nan=False))


def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    string = st.fixed_dictionaries(
        {"type": st.just("string")},
        optional={"minLength": st.integers(0, 3), "maxLength": st.integers(0, 3)},
    )
    number = st.fixed_dictionaries(
        {"type": st.sampled_from(["number", "integer"])},
        optional={
            "minimum": _numbers,
            "maximum": _numbers,
            "exclusiveMinimum": _numbers,
            "exclusiveMaximum": _numbers,
        },
    )
    other = st.fixed_dictionaries(
        {"type": st.sampled_from(["boolean", "null", ["string", "null"], ["integer", "boolean"]])}
    )
    untyped = st.fixed_dictionaries(
        {}, optional={"minLength": st.integers(0, 2), "minimum": _numbers, "description": st.text()}
    )
    choice = st.fixed_dictionaries(
        {"enum": st.lists(st.text(max_size=2), min_size=1, max_size=3)},
        optional={"type": st.sampled_from(["string", "integer"]), "minLength": st.integers(0, 2)},
    )
    return st.one_of(string, number, other, untyped, choice)


def _schemas() -> st.SearchStrategy[Any]:
    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        obj = st.fixed_dictionaries(
            {"properties": st.dictionaries(st.sampled_from(NAMES), children, max_size=3)},
            optional={
                "type": st.just("object"),
                "required": st.lists(st.sampled_from(NAMES), max_size=2, unique=True),
                "additionalProperties": st.booleans(),
            },
        )
        arr = st.fixed_dictionaries(
            {"items": children},
            optional={
                "type": st.just("array"),
                "minItems": st.integers(0, 2),
                "maxItems": st.integers(0, 3),
            },
        )
        return st.one_of(obj, arr)

    return st.recursive(st.one_of(_leaf(), st.just(True), st.just({})), extend, max_leaves=6)


_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-6, 6),
        st.floats(-6, 6),
        st.sampled_from([0.0, 1.0, 2.0, -1.0]),
        st.text(max_size=4),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.sampled_from([*NAMES, "z"]), children, max_size=3),
    ),
    max_leaves=8,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=_schemas(), value=_values)
def test_the_fast_check_never_accepts_what_jsonschema_refuses(schema: Any, value: Any) -> None:
    check = compile_check(schema)
    assert check is not None, "every schema drawn here is in the covered subset"
    if check(value):
        validator = jsonschema.validators.validator_for(schema)(schema)
        assert validator.is_valid(value), (schema, value)


@settings(max_examples=200, deadline=None)
@given(value=_values)
def test_on_flat_schemas_it_agrees_with_jsonschema_except_integral_floats(value: Any) -> None:
    # Where it says no although the value is valid, jsonschema is asked anyway; on the tools'
    # kind of schema that happens only for a float like 2.0 given for an integer.
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string", "minLength": 1}, "b": {"type": "integer"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    check = compile_check(schema)
    assert check is not None
    valid = jsonschema.Draft202012Validator(schema).is_valid(value)
    integral_float = isinstance(value, dict) and isinstance(value.get("b"), float)
    assert check(value) == valid or integral_float


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "^a"},
        {"anyOf": [{"type": "string"}]},
        {"type": "string", "enum": ["a", 1]},
        {"enum": [None]},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"$ref": "#/definitions/x"},
        {"type": "date"},
        False,
        "not a schema",
    ],
)
def test_a_schema_outside_the_subset_gets_no_fast_check(schema: Any) -> None:
    assert compile_check(schema) is None


def test_every_builtin_tool_has_a_fast_check_that_accepts_typical_input() -> None:
    typical = {
        "bash": {"command": "ls", "timeout_s": 5},
        "read": {"path": "a.txt", "offset": 2, "limit": 10},
        "write": {"path": "a.txt", "content": ""},
        "edit": {"path": "a.txt", "old": "x", "new": "y", "replace_all": True},
        "glob": {"pattern": "**/*.py", "path": "src"},
        "grep": {"pattern": "def ", "include": "*.py"},
        "agent": {
            "description": "d",
            "prompt": "p",
            "agent": "general",
            "budget": {"tokens": 100, "seconds": 1.5, "tool_calls": 3},
            "run_in_background": True,
        },
        "send_message": {"to": "parent", "text": "halfway there"},
        "todo_write": {
            "todos": [{"content": "Run the tests", "status": "pending", "activeForm": "Running"}]
        },
    }
    for tool in builtin_tools():
        check = compile_check(tool.input_schema)
        assert check is not None, tool.name
        assert check(typical[tool.name]), tool.name
        validate_input(tool, typical[tool.name])


def test_errors_still_come_from_jsonschema_naming_the_field() -> None:
    (bash,) = [t for t in builtin_tools() if t.name == "bash"]
    with pytest.raises(ToolInputError, match=r"^input\.timeout_s: "):
        validate_input(bash, {"command": "ls", "timeout_s": 0})
    with pytest.raises(ToolInputError, match=r"^input\.command: required field missing"):
        validate_input(bash, {})
    with pytest.raises(ToolInputError, match=r"^input: Additional properties"):
        validate_input(bash, {"command": "ls", "shell": "zsh"})


def test_values_a_json_decoder_never_makes_are_left_to_jsonschema() -> None:
    # validate_input is public: a caller may pass a dict subclass, a str subclass, a Decimal.
    from collections import OrderedDict
    from decimal import Decimal

    class Text(str):
        pass

    cases: list[tuple[Any, Any]] = [
        ({"properties": {"a": {}}, "required": ["a"]}, OrderedDict()),
        ({"minLength": 3}, Text("a")),
        ({"minItems": 2}, type("Items", (list,), {})([1])),
        ({"minimum": 5}, Decimal(1)),
        ({"type": "object", "properties": {"n": {"minimum": 5}}}, {"n": Decimal(1)}),
    ]
    for schema, value in cases:
        check = compile_check(schema)
        assert check is not None
        assert not check(value), (schema, value)
        assert not jsonschema.validators.validator_for(schema)(schema).is_valid(value)


@pytest.mark.parametrize("schema", [{"type": None}, {"maxLength": None}, {"minItems": -1}])
def test_a_malformed_schema_gets_no_fast_check(schema: Any) -> None:
    assert compile_check(schema) is None


def test_an_enum_of_strings_gets_a_fast_check_that_takes_only_those_strings() -> None:
    check = compile_check({"enum": ["pending", "completed"]})
    assert check is not None
    assert check("pending")
    assert not check("doing")
    assert not check(1)
    assert not check(None)
