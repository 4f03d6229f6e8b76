"""Argument checks of the kernel's public methods, raising `yoke.errors.BadType`/`BadValue`.

Kept apart so the hot paths in `core` read as the algorithm. Checks never mutate anything: a
rejected call leaves the kernel exactly as it was.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from typing import TypeVar

from yoke.errors import BadType, BadValue
from yoke.kernel.types import Policy, PriorityScope

MIN_WEIGHT = 0.001

E = TypeVar("E", Policy, PriorityScope)


def enum_arg(cls: type[E], value: object, what: str) -> E:
    if isinstance(value, cls):
        return value
    if not isinstance(value, str):
        raise BadType(f"{what} must be a str, got {type(value).__name__}")
    try:
        return cls(value)
    except ValueError:
        allowed = ", ".join(m.value for m in cls)
        raise BadValue(f"unknown {what} {value!r}; expected one of: {allowed}") from None


def int_arg(value: object, what: str) -> int:
    # bool is an int subclass, but True as a priority or cap is almost always a bug.
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadType(f"{what} must be an int, got {type(value).__name__}")
    return int(value)


def cap_arg(value: object, what: str) -> int | None:
    if value is None:
        return None
    cap = int_arg(value, what)
    if cap < 0:
        raise BadValue(f"{what} must be >= 0 or None, got {cap}")
    return cap


def weight_arg(value: object, what: str = "weight") -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadType(f"{what} must be a real number, got {type(value).__name__}")
    w = float(value)
    if not math.isfinite(w) or w < MIN_WEIGHT:
        raise BadValue(f"{what} must be a finite number >= {MIN_WEIGHT}, got {value!r}")
    return w


def credit_arg(value: object) -> int:
    credit = int_arg(value, "credit")
    if credit < 0:
        raise BadValue(f"credit must be >= 0, got {credit}")
    return credit


def keys_arg(lane: Hashable, keys: Iterable[Hashable]) -> tuple[Hashable, ...]:
    """Dedupe in first-seen order (no set, so no hash order); the own lane key is implicit."""
    if type(keys) is tuple and len(keys) == 1:  # the common case: one key, checked at once
        k = keys[0]
        try:
            hash(k)
        except TypeError:
            raise BadType(f"cap key {k!r} is not hashable") from None
        if not (isinstance(k, tuple) and len(k) == 2 and k[0] == "lane"):
            return keys
    if isinstance(keys, (str, bytes)):  # a tuple, not `str | bytes`: no union built per call
        raise BadType("keys must be an iterable of cap keys, not a single str")
    out: list[Hashable] = []
    for k in keys:
        try:
            hash(k)
        except TypeError:
            raise BadType(f"cap key {k!r} is not hashable") from None
        if isinstance(k, tuple) and len(k) == 2 and k[0] == "lane":
            if k[1] == lane:
                continue
            raise BadValue(f"cap key {k!r} names another lane's cap; lane keys are implicit")
        if k not in out:
            out.append(k)
    return tuple(out)
