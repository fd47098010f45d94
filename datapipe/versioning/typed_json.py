"""Typed JSON records: frozen dataclasses whose values say what they must be, read in plain Python.

Each JSON value of a record is annotated with a :class:`Value`: what it must be (a kind and its
limits), from which both the check on reading and its JSON Schema follow, and the words an error
uses for it. Reading a record checks every value, turns JSON lists into the record's tuples,
leaves every value as JSON gave it (``1`` stays ``1`` where a number may be ``0.5``) and reports the
first bad field by its path (``shards[0].samples``). Reading needs no pydantic: opening a dataset
stays cheap. Only the JSON Schema is made by pydantic, from the same annotations.
"""

from __future__ import annotations

import functools
import json
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from typing import Any, TypeVar

T = TypeVar("T")

# The pydantic config of a record (its ``__pydantic_config__``), for its JSON Schema: an unknown key
# is an error ("extra": "ignore" lets a record read a part of an object), and the string under a
# field documents it.
RECORD: dict[str, Any] = {"extra": "forbid", "use_attribute_docstrings": True}

_JSON_TYPES = {int: "int_schema", float: "float_schema", str: "str_schema"}


@dataclass(frozen=True, eq=False)
class Value:
    """What one JSON value must be: a ``kind`` (int, float or str; exactly, never a bool) within
    limits (``ge``, ``gt``, ``le``; a str's ``pattern`` and ``min_length``; one of ``choices``), a
    rule beyond those (``check``), JSON Schema keywords beside the ones the limits give
    (``schema``), and what an error says was expected."""

    expected: str
    kind: type
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    pattern: str | None = None
    min_length: int | None = None
    choices: tuple[str, ...] | None = None
    check: Callable[[Any], bool] | None = None
    schema: Mapping[str, Any] = field(default_factory=dict)
    # a wrong string is shown as itself (a name, a hash) and anything else as "expected a string"
    quoted: bool = False

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` (parsed JSON) is one of these values."""
        numbers = (int, float) if self.kind is float else (self.kind,)
        if isinstance(value, bool) or not isinstance(value, numbers):
            return False
        if self.choices is not None and value not in self.choices:
            return False
        limits_met = (
            (self.ge is None or value >= self.ge)
            and (self.gt is None or value > self.gt)
            and (self.le is None or value <= self.le)
            and (self.min_length is None or len(value) >= self.min_length)
            and (self.pattern is None or _compiled(self.pattern).search(value) is not None)
        )
        return limits_met and (self.check is None or self.check(value))

    def problem(self, value: Any) -> str:
        """What is wrong with ``value``, for an error message."""
        if self.quoted and isinstance(value, str):
            return f"expected {self.expected}, got {value[:80]!r}"
        return f"expected {'a string' if self.quoted else self.expected}, got {describe(value)}"

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema as cs

        if self.choices is not None:
            return cs.literal_schema(list(self.choices))
        limits = {"ge": self.ge, "gt": self.gt, "le": self.le}
        limits.update(pattern=self.pattern, min_length=self.min_length)
        given = {k: v for k, v in limits.items() if v is not None}
        return getattr(cs, _JSON_TYPES[self.kind])(strict=True, **given)

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        return {**handler(schema), **self.schema}


@functools.cache
def _compiled(pattern: str) -> re.Pattern[str]:
    # JSON Schema's '$' is the end of the text; Python's also matches before a final newline
    return re.compile(pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern)


class Malformed(Exception):
    """A field of a record with the wrong type or value, named by its path
    (``shards[0].samples``)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"field {field!r}: {problem}")


class _Refused(Exception):
    """A value refused at ``loc``: ``problem`` says why, ``owner`` is the record of an unknown
    key."""

    def __init__(self, loc: tuple[str | int, ...], problem: str, owner: type | None = None):
        super().__init__(problem)
        self.loc, self.problem, self.owner = loc, problem, owner


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
    try:
        return _reader(record)(raw)
    except _Refused as e:
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.loc).lstrip(".")
        if e.owner is None:
            raise Malformed(path, e.problem) from None
        known = [f.name for f in fields(e.owner)] + list(also if e.owner is record else ())
        raise Malformed(path, f"not a {names[e.owner]} field (known: {', '.join(known)})") from None


def record_json_schema(record: type) -> dict[str, Any]:
    """The JSON Schema of ``record``, as reading checks it."""
    from pydantic import TypeAdapter

    return TypeAdapter(record).json_schema()


@functools.cache
def _reader(kind: Any) -> Callable[[Any], Any]:
    """The function that reads a JSON value as ``kind`` (a record, a Value, X | None, a tuple, a
    dict or Any), made once per kind: a manifest reads thousands of shards with it."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is typing.Annotated:
        return _value_reader(next(a for a in args[1:] if isinstance(a, Value)))
    if origin in (typing.Union, types.UnionType):  # X | None
        present = _reader(next(a for a in args if a is not type(None)))
        return lambda value: None if value is None else present(value)
    if kind is Any:
        return lambda value: value
    if is_dataclass(kind):
        return _record_reader(kind)
    if origin is tuple:
        return _tuple_reader(args)
    if origin is dict:
        return _dict_reader(_reader(args[1]))
    raise TypeError(f"typed_json cannot read {kind!r}")  # a model this module does not know


def _value_reader(rule: Value) -> Callable[[Any], Any]:
    def read(value: Any) -> Any:
        if not rule.accepts(value):
            raise _Refused((), rule.problem(value))
        return value

    return read


def _dict_reader(read_item: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def read(value: Any) -> dict:
        if not isinstance(value, dict):
            raise _Refused((), f"expected an object, got {describe(value)}")
        return {k: _at(k, read_item, v) for k, v in value.items()}

    return read


def _tuple_reader(args: tuple[Any, ...]) -> Callable[[Any], Any]:
    """A JSON list as a tuple: of any length (``tuple[X, ...]``) or of ``len(args)`` items."""
    readers = [_reader(a) for a in args if a is not Ellipsis]
    any_length = len(args) == 2 and args[1] is Ellipsis

    def read(value: Any) -> tuple:
        if not isinstance(value, (list, tuple)):
            raise _Refused((), f"expected a list, got {describe(value)}")
        if any_length:
            return tuple(_at(i, readers[0], item) for i, item in enumerate(value))
        if len(value) > len(readers):
            raise _Refused((), f"expected at most {len(readers)} items, got {describe(value)}")
        # the items given are read first, as pydantic does, then the first one left out
        items = tuple(
            _at(i, r, item) for i, (r, item) in enumerate(zip(readers, value, strict=False))
        )
        if len(items) < len(readers):
            raise _Refused((len(items),), "missing")
        return items

    return read


def _record_reader(record: type) -> Callable[[Any], Any]:
    """A JSON object as ``record``: each field read in the record's order, then unknown keys."""
    hints = typing.get_type_hints(record, include_extras=True)
    plan = [
        (f.name, _reader(hints[f.name]), f.default is MISSING and f.default_factory is MISSING)
        for f in fields(record)
    ]
    forbid = record.__pydantic_config__.get("extra") == "forbid"

    def read(value: Any) -> Any:
        if not isinstance(value, dict):
            raise _Refused((), f"expected an object, got {describe(value)}")
        given = {}
        for name, read_field, required in plan:
            if name in value:
                given[name] = _at(name, read_field, value[name])
            elif required:
                raise _Refused((name,), "missing")
        if forbid and len(given) != len(value):
            unknown = next(key for key in value if key not in given)
            raise _Refused((unknown,), "unknown", owner=record)
        return record(**given)

    return read


def _at(key: str | int, read: Callable[[Any], Any], value: Any) -> Any:
    """``read(value)``, an error's path starting with ``key``."""
    try:
        return read(value)
    except _Refused as e:
        e.loc = (key, *e.loc)
        raise
