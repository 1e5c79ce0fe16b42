"""Typed outputs: an agent that must end with a value of a type (docs/python-api.md, "Typed
outputs").

An agent type's ``output_type`` is a Python type (anything pydantic reads: a dataclass, a
``TypedDict``, a pydantic model, ``list[int]``, an attrs class as for function tools) or a JSON
Schema (a mapping, as agent files give it). The agent is told the schema in its system prompt;
its final text must be a JSON value matching it (surrounding white space and a Markdown code
fence are tolerated). A final text that does not match goes back to the model with the error,
up to ``output_retries`` times; then the agent fails with that error. The outcome's ``output``
is the value (an instance of the type, or the decoded JSON for a schema); its ``result``, what
a parent model reads and the trace keeps, is the JSON text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import attrs
import orjson

__all__ = ["OutputSpec", "output_spec"]

_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n(.*?)\n?```\s*$", re.S)
_MAX_ERROR_CHARS = 1_000


@attrs.frozen(eq=False)
class OutputSpec:
    """One output type, compiled once: its schema, the instructions an agent is given, and the
    check of a final text."""

    schema: dict[str, Any]
    label: str
    _validate: Any

    @property
    def instructions(self) -> str:
        return (
            "When you have finished, your final answer must be only a JSON value matching this "
            f"JSON Schema, with nothing before or after it:\n{orjson.dumps(self.schema).decode()}"
        )

    def check(self, text: str) -> tuple[Any, str | None]:
        """``(value, None)`` when *text* is a JSON value of the type, else ``(None, error)``."""
        body = text.strip()
        fenced = _FENCE.match(body)
        if fenced:
            body = fenced.group(1).strip()
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return None, f"the answer is not JSON ({exc})"[:_MAX_ERROR_CHARS]
        try:
            return self._validate(data), None
        except _Invalid as exc:
            return None, str(exc)[:_MAX_ERROR_CHARS]

    def retry_message(self, error: str) -> str:
        """What the model is told after a final answer that did not match."""
        return (
            f"Your final answer does not match the required output ({self.label}): {error}\n"
            "Answer again with only the JSON value."
        )


class _Invalid(Exception):
    pass


def output_spec(output_type: Any) -> OutputSpec:
    """The compiled :class:`OutputSpec` of *output_type* (a type, or a JSON Schema as a mapping
    or its JSON text), made once per type.

    Raises:
        ConfigError: the type has no JSON Schema, or the schema is not one.
    """
    if isinstance(output_type, Mapping):
        return _schema_spec(orjson.dumps(dict(output_type), option=orjson.OPT_SORT_KEYS).decode())
    if isinstance(output_type, str):
        return _schema_spec(output_type)
    return _type_spec(output_type)


@functools.lru_cache(maxsize=256)
def _schema_spec(text: str) -> OutputSpec:
    import jsonschema

    from ._errors import ConfigError

    try:
        schema = orjson.loads(text)
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
    except (orjson.JSONDecodeError, jsonschema.SchemaError, TypeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"output_type: not a JSON Schema ({first})") from None
    validator = cls(schema)

    def validate(data: Any) -> Any:
        error = jsonschema.exceptions.best_match(validator.iter_errors(data))
        if error is not None:
            where = "".join(f"[{p!r}]" for p in error.path) or "the value"
            raise _Invalid(f"{where}: {error.message}")
        return data

    return OutputSpec(schema=schema, label="the JSON Schema given", validate=validate)


@functools.lru_cache(maxsize=256)
def _type_spec(output_type: Any) -> OutputSpec:
    import pydantic

    from ._errors import ConfigError
    from ._function_tool import adapt_annotation, without_titles

    try:
        adapter = pydantic.TypeAdapter(adapt_annotation(output_type))
        schema = without_titles(adapter.json_schema())
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError) as exc:
        first = str(exc).splitlines()[0]
        raise ConfigError(f"output_type {output_type!r} has no JSON Schema: {first}") from None

    def validate(data: Any) -> Any:
        try:
            return adapter.validate_python(data)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = "".join(f"[{p!r}]" for p in first.get("loc", ())) or "the value"
            raise _Invalid(f"{where}: {first.get('msg', 'invalid')}") from None

    label = getattr(output_type, "__name__", None) or repr(output_type)
    return OutputSpec(schema=schema, label=label, validate=validate)
