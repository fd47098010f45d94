"""Typed JSON records: frozen dataclasses whose values say what they must be, read with pydantic.

Each JSON value of a record is annotated with a :class:`Value`: the pydantic core schema it must
match (from which its JSON Schema follows) and the words an error uses for it. Reading a record
checks every value, turns JSON lists into the record's tuples, leaves every value as JSON gave it
(``1`` stays ``1`` where a number may be ``0.5``) and reports the first bad field by its path
(``shards[0].samples``). pydantic loads on the first read: code that only builds, writes or
unpickles records (a DataLoader worker) never imports it.
"""

from __future__ import annotations

import functools
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, TypeVar

T = TypeVar("T")

# The pydantic config of a record (its ``__pydantic_config__``): an unknown key is an error, and the
# string under a field documents it in the JSON Schema.
RECORD: dict[str, Any] = {"extra": "forbid", "use_attribute_docstrings": True}

_SHAPES = {
    "dict_type": "an object",
    "dataclass_type": "an object",
    "tuple_type": "a list",
    "list_type": "a list",
}


@dataclass(frozen=True, eq=False)
class Value:
    """What one JSON value must be: its pydantic core schema (built by ``core`` from the
    ``pydantic_core.core_schema`` module), a rule the core schema cannot say (``check``), JSON
    Schema keywords beside the ones the core schema gives (``schema``), and what an error says was
    expected."""

    expected: str
    core: Callable[[Any], Any]
    check: Callable[[Any], bool] | None = None
    schema: Mapping[str, Any] = field(default_factory=dict)
    # a wrong string is shown as itself (a name, a hash) and anything else as "expected a string"
    quoted: bool = False

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_wrap_validator_function(self._validate, self.core(core_schema))

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        return {**handler(schema), **self.schema}

    def _validate(self, value: Any, handler: Callable[[Any], Any]) -> Any:
        from pydantic_core import PydanticCustomError, ValidationError

        try:
            handler(value)
            ok = self.check is None or self.check(value)
        except ValidationError:
            ok = False
        if not ok:
            raise PydanticCustomError("json_value", "{problem}", {"problem": self.problem(value)})
        return value

    def problem(self, value: Any) -> str:
        """What is wrong with ``value``, for an error message."""
        if self.quoted and isinstance(value, str):
            return f"expected {self.expected}, got {value[:80]!r}"
        return f"expected {'a string' if self.quoted else self.expected}, got {describe(value)}"


class Malformed(Exception):
    """A field of a record with the wrong type or value, named by its path
    (``shards[0].samples``)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"field {field!r}: {problem}")


def describe(value: Any) -> str:
    """A JSON value for an error message: its type and the start of its JSON."""
    text = json.dumps(value, ensure_ascii=False)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def read_record(
    record: type[T], raw: Any, names: Mapping[type, str], also: Sequence[str] = ()
) -> T:
    """``raw`` (parsed JSON) as a ``record``, every value checked; Malformed naming the first bad
    field. ``names``: what an error calls each record; ``also``: keys the caller reads beside the
    record's fields (listed as known when a key is unknown)."""
    from pydantic import ValidationError

    try:
        return _adapter(record).validate_python(raw)
    except ValidationError as e:
        error = e.errors(include_url=False)[0]
        loc = error["loc"]
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
        if error["type"] == "unexpected_keyword_argument":
            owner = _record_at(record, loc[:-1])
            known = [f.name for f in fields(owner)] + list(also if owner is record else ())
            raise Malformed(
                path, f"not a {names[owner]} field (known: {', '.join(known)})"
            ) from None
        raise Malformed(path, _problem(error)) from None


def record_json_schema(record: type) -> dict[str, Any]:
    """The JSON Schema of ``record``, as reading checks it."""
    return _adapter(record).json_schema()


@functools.cache
def _adapter(record: type) -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(record)


def _problem(error: Mapping[str, Any]) -> str:
    """What is wrong, in the words of the Value that refused it or of the record's shape."""
    if error["type"] == "json_value":
        return error["ctx"]["problem"]
    if error["type"] == "missing":
        return "missing"
    if error["type"] in _SHAPES:
        return f"expected {_SHAPES[error['type']]}, got {describe(error['input'])}"
    if error["type"] == "too_long":
        return (
            f"expected at most {error['ctx']['max_length']} items, got {describe(error['input'])}"
        )
    message = error["msg"]  # pydantic's words for anything else
    return f"{message[:1].lower()}{message[1:]}, got {describe(error['input'])}"


def _record_at(record: type, loc: Sequence[str | int]) -> type:
    """The record at ``loc`` below ``record``: through its fields and the items of its tuples."""
    kind: Any = record
    for part in loc:
        if isinstance(part, str) and is_dataclass(kind):
            kind = typing.get_type_hints(kind)[part]
        else:
            kind = typing.get_args(kind)[0]
        if typing.get_origin(kind) in (typing.Union, types.UnionType):  # X | None: X
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
    return kind
