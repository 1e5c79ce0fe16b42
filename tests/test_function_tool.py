"""Function tools (``@runtime.tool``): the schema from the signature and docstring, arguments
checked and converted before the call, the context injected, the return value as the result."""

from __future__ import annotations

import dataclasses
import enum
import json
import threading
from typing import Any, Literal, TypedDict

import attrs
import jsonschema
import pydantic
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import runtime
from runtime import (
    ConfigError,
    FunctionProvider,
    FunctionTool,
    ModelRequest,
    ToolCall,
    ToolContext,
    ToolError,
    open_runtime,
    tool,
)
from runtime.core._tool import validate_input


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


@attrs.define
class Box:
    label: str
    corner: Point
    tags: list[str] = attrs.Factory(list)


class Options(TypedDict, total=False):
    deep: bool
    depth: int


class Opaque:
    """A class pydantic has no schema for."""


class Query(pydantic.BaseModel):
    text: str
    limit: int = 10


@tool
def count_words(text: str) -> int:
    """Count the words in a text.

    Args:
        text: the text to count,
            words split on white space.
    """
    return len(text.split())


@tool(name="shapes", read_only=True)
def describe(
    box: Box,
    color: Color = Color.RED,
    mode: Literal["short", "long"] = "short",
    points: list[Point] | None = None,
    options: Options | None = None,
    query: Query | None = None,
    weights: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Describe shapes."""
    return {
        "box": box,
        "color": color,
        "mode": mode,
        "points": points,
        "options": options,
        "query": query,
        "weights": weights,
    }


def _ctx(tmp_path: Any) -> ToolContext:
    import structlog

    return ToolContext(
        workspace=tmp_path, agent_id="agent-1", tool_use_id="tu-1.1", depth=0, env={},
        limits=runtime.ToolLimits(), log=structlog.get_logger(),
    )


def test_the_schema_and_description_come_from_the_signature_and_docstring() -> None:
    assert isinstance(count_words, FunctionTool)
    assert count_words.name == "count_words"
    assert count_words.description == "Count the words in a text."
    assert count_words.input_schema == {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "text": {"type": "string", "description": "the text to count, words split on white space."}
        },
        "required": ["text"],
    }
    # A function tool is the user's own code: it asks no permission unless told to.
    assert count_words.needs_permission is False
    assert count_words.read_only is False
    assert count_words(text="a b") == 2  # still callable as the function


def test_rich_types_make_a_schema_jsonschema_accepts() -> None:
    schema = describe.input_schema
    jsonschema.Draft202012Validator.check_schema(schema)
    assert describe.name == "shapes"
    assert describe.read_only
    assert describe.concurrency_safe
    assert schema["required"] == ["box"]
    assert set(schema["$defs"]) >= {"Box", "Point", "Color", "Options", "Query"}
    assert schema["$defs"]["Color"]["enum"] == ["red", "blue"]
    assert schema["properties"]["mode"]["enum"] == ["short", "long"]
    assert "title" not in json.dumps(schema)


async def test_arguments_are_converted_to_the_annotated_types(tmp_path: Any) -> None:
    out = await describe.call(
        {
            "box": {"label": "b", "corner": {"x": 1}, "tags": ["t"]},
            "color": "blue",
            "points": [{"x": 2, "y": 3}],
            "options": {"deep": True},
            "query": {"text": "q"},
            "weights": {"a": 1},
        },
        _ctx(tmp_path),
    )
    assert json.loads(out) == {
        "box": {"label": "b", "corner": {"x": 1, "y": 0}, "tags": ["t"]},
        "color": "blue",
        "mode": "short",
        "points": [{"x": 2, "y": 3}],
        "options": {"deep": True},
        "query": {"text": "q", "limit": 10},
        "weights": {"a": 1.0},
    }


async def test_scalar_parameters_arrive_as_their_annotated_types(tmp_path: Any) -> None:
    seen: list[Any] = []

    @tool
    def scalars(ratio: float, n: int, flag: bool, name: str | None = None,
                level: Literal["a", "b"] = "a") -> Any:
        """Scalars only: the arguments pass as the schema check left them."""
        seen.extend([ratio, n, flag, name, level])
        return None

    assert type(scalars)._plain == ("ratio",)
    assert await scalars.call({"ratio": 2, "n": 3, "flag": False}, _ctx(tmp_path)) == "null"
    assert seen == [2.0, 3, False, None, "a"]
    assert type(seen[0]) is float


async def test_the_function_receives_real_instances(tmp_path: Any) -> None:
    seen: dict[str, Any] = {}

    @tool
    def inspect_types(box: Box, color: Color, points: list[Point], query: Query) -> str:
        """See."""
        seen.update(box=box, color=color, points=points, query=query)
        return "ok"

    args = {"box": {"label": "b", "corner": {"x": 1}}, "color": "red",
            "points": [{"x": 1}], "query": {"text": "t"}}
    validate_input(inspect_types, args)
    assert await inspect_types.call(args, _ctx(tmp_path)) == "ok"
    assert seen["box"] == Box(label="b", corner=Point(1, 0))
    assert seen["color"] is Color.RED
    assert seen["points"] == [Point(1, 0)]
    assert seen["query"] == Query(text="t")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "input.text: required field missing"),
        ({"text": 3}, "input.text: 3 is not of type 'string'"),
        ({"text": "a", "extra": 1}, "input: Additional properties are not allowed"),
    ],
)
def test_a_bad_argument_is_an_error_naming_the_field(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        validate_input(count_words, args)


def test_a_signature_that_cannot_be_a_tool_is_one_clear_error() -> None:
    def star(*items: str) -> str:
        return ""

    def untyped(x) -> str:  # type: ignore[no-untyped-def]
        return ""

    def opaque(x: Opaque) -> str:
        return ""

    with pytest.raises(ConfigError, match=r"\*items cannot be a tool parameter"):
        tool(star)
    with pytest.raises(ConfigError, match="'x' needs a type annotation"):
        tool(untyped)
    with pytest.raises(ConfigError, match="has no JSON Schema"):
        tool(opaque)
    with pytest.raises(ConfigError, match="tool name 'a b'"):
        tool(name="a b")(count_words.function)


async def test_the_context_parameter_is_injected_not_asked_for(tmp_path: Any) -> None:
    @tool
    async def where(ctx: ToolContext, name: str) -> str:
        """Where a call runs."""
        await trio.lowlevel.checkpoint()
        return f"{name} in {ctx.tool_use_id}"

    assert list(where.input_schema["properties"]) == ["name"]
    assert await where.call({"name": "n"}, _ctx(tmp_path)) == "n in tu-1.1"


class _Log:
    def __init__(self) -> None:
        self.warnings: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **kw: Any) -> None:
        self.warnings.append((event, kw))


async def test_a_sync_function_runs_on_the_loop_unless_told_to_use_a_thread(tmp_path: Any) -> None:
    loop_thread = threading.get_ident()

    def which() -> str:
        """The thread."""
        return "loop" if threading.get_ident() == loop_thread else "worker"

    assert await tool(which).call({}, _ctx(tmp_path)) == "loop"
    assert await tool(thread=True)(which).call({}, _ctx(tmp_path)) == "worker"
    with pytest.raises(ConfigError, match="thread=True is for sync functions"):
        tool(thread=True)(count_words_async)


async def count_words_async(text: str) -> int:
    """Count."""
    return len(text.split())


async def test_a_sync_function_that_holds_the_loop_is_warned_about_once(tmp_path: Any) -> None:
    import time

    @tool
    def slow() -> str:
        """Sleeps without letting the loop run."""
        time.sleep(0.12)
        return "done"

    log = _Log()
    ctx = attrs.evolve(_ctx(tmp_path), log=log)
    for _ in range(2):
        assert await slow.call({}, ctx) == "done"
    assert [w[0] for w in log.warnings] == ["tool.blocked_loop"]
    assert "@tool(thread=True)" in log.warnings[0][1]["hint"]


async def test_a_value_that_is_not_json_is_an_error_result(tmp_path: Any) -> None:
    @tool
    def bad() -> object:
        """Bad."""
        return object()

    with pytest.raises(ToolError, match="not JSON"):
        await bad.call({}, _ctx(tmp_path))


async def test_a_run_with_function_tools_and_a_model_function(tmp_path: Any) -> None:
    # The map-reduce of docs/testing.md: the main agent fans out one sub-agent per text, each
    # counts with the function tool, the main agent adds the counts it read.
    texts = ["one two", "three four five", "six"]

    def model(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if request.agent_type == "main":
            if len(request.messages) == 1:
                return [ToolCall(name="agent", input={"description": f"count {i}", "prompt": t,
                                                       "agent": "counter"})
                        for i, t in enumerate(texts)]
            results = [b.content for b in last.content if hasattr(b, "tool_use_id")]
            return f"total {sum(int(r) for r in results)}"
        if len(request.messages) == 1:
            prompt = last.content[0].text  # type: ignore[union-attr]
            return ToolCall(name="count_words", input={"text": prompt})
        return str(last.content[0].content)  # type: ignore[union-attr]

    counter = runtime.AgentType(name="counter", description="counts", tools=("count_words",))
    async with open_runtime(FunctionProvider(model), workspace=tmp_path, trace=False,
                            extra_tools=[count_words], agent_types=[counter]) as rt:
        outcome = await rt.run("count them")
    assert outcome.status == "completed", outcome.error
    assert outcome.result == "total 6"


@st.composite
def _values(draw: st.DrawFn) -> Any:
    leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 5),
                     st.floats(allow_nan=False, allow_infinity=False, width=32),
                     st.sampled_from(["red", "blue", "short", "long", "x", ""]))
    return draw(st.recursive(leaf, lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["label", "corner", "x", "y", "tags", "text", "deep"]),
                        inner, max_size=3)), max_leaves=8))


def _or_any(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    # Mostly values of the right shape, sometimes anything: both sides of the schema are drawn.
    return st.one_of(valid, valid, valid, _values())


_POINT = st.fixed_dictionaries({"x": _or_any(st.integers())}, optional={"y": _or_any(st.integers())})
_BOX = st.fixed_dictionaries(
    {"label": _or_any(st.text(max_size=3)), "corner": _or_any(_POINT)},
    optional={"tags": _or_any(st.lists(st.text(max_size=2), max_size=2))},
)
_ARGS = st.fixed_dictionaries(
    {"box": _or_any(_BOX)},
    optional={
        "color": _or_any(st.sampled_from(["red", "blue"])),
        "mode": _or_any(st.sampled_from(["short", "long"])),
        "points": _or_any(st.none() | st.lists(_POINT, max_size=2)),
        "options": _or_any(st.fixed_dictionaries({}, optional={"deep": st.booleans(),
                                                               "depth": st.integers()})),
        "weights": _or_any(st.dictionaries(st.text(max_size=2), st.floats(allow_nan=False,
                                                                          allow_infinity=False))),
    },
)
_SEEN: dict[bool, int] = {True: 0, False: 0}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ARGS)
def test_whatever_the_schema_admits_converts_and_whatever_it_refuses_is_refused(
    args: dict[str, Any],
) -> None:
    validator = jsonschema.Draft202012Validator(describe.input_schema)
    admitted = validator.is_valid(args)
    try:
        validate_input(describe, args)
        refused = False
    except ToolError:
        refused = True
    assert refused is not admitted
    _SEEN[admitted] += 1
    if admitted:
        # The conversion the call makes must take every value the schema lets through.
        from runtime.core._function_tool import _convert

        _convert(type(describe), args)


def test_the_property_above_saw_both_kinds_of_value() -> None:
    # Runs after it (file order): a property that only ever saw refusals would prove nothing.
    if _SEEN[True] + _SEEN[False] == 0:
        pytest.skip("run together with the property test")
    assert min(_SEEN.values()) >= 10, _SEEN
