"""Tools written as plain functions: ``@tool`` (docs/python-api.md, "Writing tools").

The JSON Schema comes from the function's signature and its Google-style docstring (the
summary is the description, ``Args:`` describes each parameter), generated and enforced by
pydantic's ``TypeAdapter`` machinery — the field's standard for schemas from type hints: it
covers ``str``/``int``/``float``/``bool``, ``Literal``, ``Enum``, lists, dicts, ``Optional`` and
unions, ``TypedDict``, dataclasses and pydantic models. attrs classes, which pydantic does not
know, are read through their ``attrs.fields`` into an equivalent pydantic model and built from
the validated values, so they nest anywhere a dataclass may.

The runtime checks the model's arguments against the schema before the call (as for every
tool); the function tool then converts them (a dict into the dataclass a parameter asks for)
and calls the function. A parameter annotated :class:`~runtime.ToolContext` receives the call's
context instead of an argument. The return value is the result: a ``str`` as it is, anything
else as JSON.

pydantic is imported when the first function tool is made, never by ``import runtime`` or
``trio-agents --help``.
"""

from __future__ import annotations

import functools
import inspect
import re
import time
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar, overload

import attrs

from ._errors import ConfigError, ToolError, ToolInputError
from ._tool import Tool, ToolContext, one_line

__all__ = ["FunctionTool", "tool"]

F = TypeVar("F", bound=Callable[..., Any])

_SECTIONS = re.compile(
    r"^(Args|Arguments|Parameters|Returns|Return|Yields|Raises|Examples?|Notes?|Attributes)"
    r":\s*$"
)
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


class FunctionTool(Tool):
    """A :class:`~runtime.Tool` made from a function by :func:`tool`.

    Each function tool is its own subclass (its name, description, schema and flags are class
    attributes, as for hand-written tools); the instance :func:`tool` returns is what
    ``open_runtime(extra_tools=[...])`` takes. Calling the instance directly calls the function.
    """

    function: ClassVar[Callable[..., Any]]
    _model: ClassVar[Any]
    _fields: ClassVar[tuple[str, ...]]
    _context_param: ClassVar[str | None]
    _is_async: ClassVar[bool]
    _in_thread: ClassVar[bool]
    # The float parameters, when every parameter is a JSON scalar (str, int, float, bool, a
    # Literal of those, or one of them or None): such arguments pass as the schema check left
    # them. None when some parameter needs pydantic's conversion.
    _plain: ClassVar[tuple[str, ...] | None]
    _warned_blocking: ClassVar[bool] = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return type(self).function(*args, **kwargs)

    def summary(self, args: Mapping[str, Any]) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
        return one_line(f"{self.name}: {shown}")

    def permission_target(self, args: Mapping[str, Any]) -> str:
        # Rules such as `count_words(*hello*)` match the arguments as the summary shows them.
        return ", ".join(f"{k}={v!r}" for k, v in args.items())

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        """Convert *args*, call the function, and turn its return value into the result.

        Cancellation: an async function is cancelled where it awaits. A sync function runs on
        the event loop (a quick function costs no thread hop) and cannot be interrupted; with
        ``thread=True`` it runs in a worker thread, which Python cannot stop either: the call
        ends ``cancelled`` at once and the thread's eventual result is dropped
        (docs/python-api.md).
        """
        kwargs = _convert(type(self), args)
        if self._context_param is not None:
            kwargs[self._context_param] = ctx
        fn = type(self).function
        if self._is_async:
            value = await fn(**kwargs)
        elif self._in_thread:
            import trio

            value = await trio.to_thread.run_sync(
                functools.partial(fn, **kwargs), abandon_on_cancel=True
            )
        else:
            started = time.perf_counter()
            value = fn(**kwargs)
            _warn_if_it_blocked(type(self), time.perf_counter() - started, ctx)
        return result_text(value)


# A sync tool that holds the loop this long froze every other agent and the live view: say so,
# once per tool, with the fix (docs/python-api.md, "Function tools").
BLOCKING_WARN_S = 0.1


def _warn_if_it_blocked(cls: type[FunctionTool], seconds: float, ctx: ToolContext) -> None:
    if seconds < BLOCKING_WARN_S or cls._warned_blocking:
        return
    cls._warned_blocking = True
    ctx.log.warning(
        "tool.blocked_loop",
        tool=cls.name,
        seconds=round(seconds, 3),
        hint="a sync @tool runs on the event loop: make it async, or @tool(thread=True)",
    )


def _convert(cls: type[FunctionTool], args: Mapping[str, Any]) -> dict[str, Any]:
    plain = cls._plain
    if plain is not None:
        # Every parameter is a JSON scalar type the schema check has already enforced: only an
        # integer given for a float needs converting (docs/python-api.md).
        kwargs = dict(args)
        for name in plain:
            value = kwargs.get(name)
            if type(value) is int:
                kwargs[name] = float(value)
        return kwargs
    from pydantic import ValidationError

    try:
        model = cls._model.model_validate(dict(args))
    except ValidationError as exc:
        error = exc.errors()[0]
        where = "input" + "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.get("loc", ())
        )
        raise ToolInputError(f"{where}: {error.get('msg', 'invalid')}") from None
    return {name: getattr(model, name) for name in cls._fields}


def result_text(value: Any) -> str:
    """What the model reads for a tool's return value: a str as is, anything else as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) is int:
        return str(value)
    import pydantic_core

    try:
        return pydantic_core.to_json(value, fallback=_json_fallback).decode()
    except pydantic_core.PydanticSerializationError as exc:
        raise ToolError(f"the tool returned a value that is not JSON: {exc}") from None


def _json_fallback(value: Any) -> Any:
    if attrs.has(type(value)):
        return attrs.asdict(value, recurse=False)
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


@overload
def tool(fn: F, /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    needs_permission: bool = False,
    read_only: bool = False,
    concurrency_safe: bool | None = None,
    thread: bool = False,
    idempotent: bool = False,
) -> Callable[[F], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    needs_permission: bool = False,
    read_only: bool = False,
    concurrency_safe: bool | None = None,
    thread: bool = False,
    idempotent: bool = False,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a tool of a sync or async function: ``@tool`` or ``@tool(name=…, …)``.

    Args:
        fn: the function (when used as ``@tool`` without arguments).
        name: the tool's name for the model (default: the function's name).
        description: what the model reads (default: the docstring's summary).
        needs_permission: asks before each call in ``ask`` mode; a function tool is the
            user's own code, so by default it does not.
        read_only: the tool changes nothing (it may then run beside other calls of a turn).
        concurrency_safe: may run at the same time as the turn's other concurrency-safe calls
            (default: *read_only*).
        thread: run a sync function in a worker thread, for one that blocks (network, disk,
            heavy work); by default it runs on the event loop, which is cheapest for a quick
            function, and a call that holds the loop over 0.1 s is warned about once.
        idempotent: calling it twice with the same input is as calling it once: a call a
            crash interrupted is run again on resume (docs/resume.md); else the model reads
            that it was interrupted.

    Returns:
        The :class:`FunctionTool` (calling it calls the function).

    Raises:
        ConfigError: the signature cannot be a tool (``*args``, a parameter without a type
            the schema can express, a name that is not a valid tool name).
    """

    def make(function: Callable[..., Any]) -> FunctionTool:
        return _make_tool(
            function,
            name=name,
            description=description,
            needs_permission=needs_permission,
            read_only=read_only,
            concurrency_safe=read_only if concurrency_safe is None else concurrency_safe,
            thread=thread,
            idempotent=idempotent,
        )

    return make if fn is None else make(fn)


_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _make_tool(
    function: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    needs_permission: bool,
    read_only: bool,
    concurrency_safe: bool,
    thread: bool,
    idempotent: bool = False,
) -> FunctionTool:
    tool_name: str = name or str(getattr(function, "__name__", ""))
    if not _TOOL_NAME.match(tool_name):
        raise ConfigError(
            f"tool name {tool_name!r}: use 1-64 letters, digits, '_' or '-' (what model APIs take)"
        )
    if thread and inspect.iscoroutinefunction(function):
        raise ConfigError(f"tool {tool_name}: thread=True is for sync functions; this one is async")
    summary, arg_docs = parse_docstring(inspect.getdoc(function) or "")
    model, fields, context_param = _input_model(function, tool_name, arg_docs)
    schema = without_titles(model.model_json_schema())
    schema.setdefault("properties", {})
    cls = types.new_class(
        f"{tool_name}_tool",
        (FunctionTool,),
        exec_body=lambda ns: ns.update(
            {
                "name": tool_name,
                "description": description or summary or f"The {tool_name} function.",
                "input_schema": schema,
                "read_only": read_only,
                "idempotent": idempotent,
                "concurrency_safe": concurrency_safe,
                "needs_permission": needs_permission,
                "function": staticmethod(function),
                "_model": model,
                "_fields": fields,
                "_context_param": context_param,
                "_is_async": inspect.iscoroutinefunction(function),
                "_in_thread": thread,
                "_plain": _plain_fields(model),
                "__doc__": inspect.getdoc(function),
            }
        ),
    )
    made = typing.cast("FunctionTool", cls())
    functools.update_wrapper(
        made, function, assigned=("__module__", "__qualname__", "__doc__"), updated=()
    )
    return made


_SUBSCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "patternProperties")


def without_titles(schema: Any) -> Any:
    """*schema* without pydantic's generated ``title`` keys (``"title": "Pts"`` for ``pts``):
    words the model is sent on every request that say nothing the property name does not."""
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if k != "title"}
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [without_titles(s) for s in out[key]]
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: without_titles(s) for name, s in out[key].items()}
    for key in ("items", "additionalProperties", "not"):
        if isinstance(out.get(key), dict):
            out[key] = without_titles(out[key])
    return out


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """A Google-style docstring's summary (the text before its first section) and its
    ``Args:`` entries, continuation lines (indented deeper than the entries) joined."""
    summary: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    entry_indent: int | None = None
    current: str | None = None
    for line in doc.splitlines():
        indent = len(line) - len(line.lstrip())
        header = _SECTIONS.match(line.strip()) if indent == 0 else None
        if header:
            section, entry_indent, current = header.group(1), None, None
        elif section is None:
            summary.append(line)
        elif section in {"Args", "Arguments", "Parameters"} and line.strip():
            if entry_indent is None:
                entry_indent = indent
            entry = _ARG_LINE.match(line.strip()) if indent <= entry_indent else None
            if entry:
                current = entry.group(1).lstrip("*")
                args[current] = entry.group(2).strip()
            elif current is not None:
                args[current] = f"{args[current]} {line.strip()}"
    return " ".join(" ".join(summary).split()), args


def _input_model(
    function: Callable[..., Any], tool_name: str, arg_docs: Mapping[str, str]
) -> tuple[Any, tuple[str, ...], str | None]:
    import pydantic

    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception as exc:
        raise ConfigError(f"tool {tool_name}: cannot read its type hints ({exc})") from None
    fields: dict[str, Any] = {}
    context_param: str | None = None
    for param in inspect.signature(function).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigError(f"tool {tool_name}: *{param.name} cannot be a tool parameter")
        if param.kind is param.POSITIONAL_ONLY:
            raise ConfigError(
                f"tool {tool_name}: {param.name} is positional-only; the model passes names"
            )
        annotation = hints.get(param.name, Any)
        if annotation is ToolContext:
            context_param = param.name
            continue
        if param.name not in hints:
            raise ConfigError(
                f"tool {tool_name}: parameter {param.name!r} needs a type annotation "
                "(the model is told the type)"
            )
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (
            adapt_annotation(annotation),
            pydantic.Field(default, description=arg_docs.get(param.name) or None),
        )
    try:
        model = pydantic.create_model(
            f"{tool_name}_input",
            __config__=pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=False),
            **fields,
        )
        model.model_json_schema()
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError) as exc:
        first = str(exc).splitlines()[0]
        raise ConfigError(
            f"tool {tool_name}: a parameter's type has no JSON Schema: {first}"
        ) from None
    return model, tuple(fields), context_param


_SCALARS = (str, int, float, bool, type(None))


def _plain_fields(model: Any) -> tuple[str, ...] | None:
    floats = []
    for name, field in model.model_fields.items():
        kinds = _scalar_kinds(field.annotation)
        if kinds is None:
            return None
        if float in kinds:
            floats.append(name)
    return tuple(floats)


def _scalar_kinds(annotation: Any) -> set[type] | None:
    if annotation in _SCALARS:
        return {annotation}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        if all(type(a) in (str, int, bool) for a in args):
            return set()
        return None
    if origin in (types.UnionType, typing.Union):
        kinds: set[type] = set()
        for arg in args:
            inner = _scalar_kinds(arg)
            if inner is None:
                return None
            kinds |= inner
        # int | float would be ambiguous for the int-to-float rule; leave it to pydantic.
        return None if {int, float} <= kinds else kinds
    return None


def adapt_annotation(annotation: Any) -> Any:
    """*annotation* with every attrs class in it replaced by a pydantic-readable stand-in."""
    if isinstance(annotation, type) and attrs.has(annotation):
        return _attrs_stand_in(annotation)
    if typing.is_typeddict(annotation):
        return _typeddict_stand_in(annotation)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is None or not args:
        return annotation
    if origin is typing.Annotated:
        return typing.Annotated[adapt_annotation(args[0]), *args[1:]]
    if origin is typing.Literal:
        return annotation
    adapted = tuple(adapt_annotation(a) for a in args)
    if adapted == args:
        return annotation
    if origin in (types.UnionType, typing.Union):
        return functools.reduce(lambda a, b: a | b, adapted)
    return origin[adapted if len(adapted) > 1 else adapted[0]]


@functools.cache
def _attrs_stand_in(cls: type) -> Any:
    """``Annotated[cls, …]`` validated as the pydantic model of *cls*'s fields, then built."""
    import pydantic

    hints = typing.get_type_hints(cls, include_extras=True)
    fields: dict[str, Any] = {}
    for field in attrs.fields(cls):
        if not field.init:
            continue
        if field.default is attrs.NOTHING:
            default: Any = ...
        elif isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            default = pydantic.Field(default_factory=field.default.factory)
        else:
            default = field.default
        fields[field.alias or field.name] = (adapt_annotation(hints.get(field.name, Any)), default)
    model = pydantic.create_model(
        cls.__name__, __config__=pydantic.ConfigDict(extra="forbid"), __doc__=cls.__doc__, **fields
    )

    def build(value: Any) -> Any:
        return cls(**{k: getattr(value, k) for k in fields})

    return typing.Annotated[
        cls,
        pydantic.GetPydanticSchema(
            lambda _tp, handler: _after(handler(model), build),
        ),
    ]


@functools.cache
def _typeddict_stand_in(cls: Any) -> Any:
    """*cls* as a ``typing_extensions.TypedDict``: pydantic reads no other kind before Python
    3.12, and a ``typing.TypedDict`` is what users write."""
    import typing_extensions

    hints = typing.get_type_hints(cls, include_extras=True)
    required = getattr(cls, "__required_keys__", frozenset(hints))
    fields = {
        key: adapt_annotation(tp)
        if key in required
        else typing_extensions.NotRequired[adapt_annotation(tp)]
        for key, tp in hints.items()
    }
    made = typing_extensions.TypedDict(cls.__name__, fields)  # type: ignore[misc]
    made.__doc__ = cls.__doc__
    return made


def _after(schema: Any, build: Callable[[Any], Any]) -> Any:
    from pydantic_core import core_schema

    return core_schema.no_info_after_validator_function(build, schema)
