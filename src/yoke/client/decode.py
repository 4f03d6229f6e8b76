"""JSON answers into yoke's frozen dataclasses, by their fields' types.

`decode(Start, data)` builds the dataclass from the fields it declares (a field the server
sends and the class does not know is left out, so an older client reads a newer server), and
turns each value into its field's type: an enum from its value, a nested dataclass, a tuple of
them, an optional. A class with a `from_json` classmethod (`Limits`) builds itself.

This module must never know a particular answer: it only follows the types.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, TypeVar

from yoke.errors import BadValue

T = TypeVar("T")


def decode(cls: type[T], data: Any) -> T:
    """`data` (parsed JSON) as a `cls`; `BadValue` if it does not have the shape."""
    value: T = _convert(cls, data)
    return value


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _convert(tp: Any, value: Any) -> Any:
    if tp is Any or tp is object:
        return value
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return _union(tp, value)
    if origin is typing.Literal:
        return value
    if origin is tuple:
        item = typing.get_args(tp)[0]
        return tuple(_convert(item, v) for v in _sequence(value, tp))
    if origin is list:
        item = typing.get_args(tp)[0]
        return [_convert(item, v) for v in _sequence(value, tp)]
    if origin in (dict, Mapping):
        _, item = typing.get_args(tp)
        return {str(k): _convert(item, v) for k, v in _mapping(value, tp).items()}
    if isinstance(tp, type):
        from_json = getattr(tp, "from_json", None)
        if from_json is not None:
            return from_json(value)
        if dataclasses.is_dataclass(tp):
            return _dataclass(tp, _mapping(value, tp))
        if issubclass(tp, enum.Enum):
            return tp(value)
    return value


def _union(tp: Any, value: Any) -> Any:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if value is None:
        return None
    if len(args) == 1:
        return _convert(args[0], value)
    return value  # a choice of plain JSON shapes (`int | dict[str, int]`): kept as sent


def flat(cls: type[T], data: Any, name: str, inner: type[Any]) -> T:
    """A `cls` whose field `name` is an `inner` read from the same JSON object as the other
    fields (an answer that adds fields to a value, as the steps route adds to an execution)."""
    value: T = _dataclass(cls, _mapping(data, cls), {name: decode(inner, data)})
    return value


def _dataclass(cls: type, data: Mapping[str, Any], given: Mapping[str, Any] | None = None) -> Any:
    hints = _hints(cls)
    kwargs = {
        f.name: _convert(hints[f.name], data[f.name])
        for f in dataclasses.fields(cls)
        if f.init and f.name in data and not (given and f.name in given)
    }
    kwargs.update(given or {})
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise BadValue(f"the answer is not a {cls.__name__}: {exc}") from None


def _sequence(value: Any, tp: Any) -> list[Any]:
    if not isinstance(value, list):
        raise BadValue(f"the answer holds {type(value).__name__} where {tp} was expected")
    return value


def _mapping(value: Any, tp: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise BadValue(f"the answer holds {type(value).__name__} where {tp} was expected")
    return value
