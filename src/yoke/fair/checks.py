"""Argument checks shared by the schedulers of `yoke.fair`.

Each check raises at the call with a message that names the argument and what it got, so a
mistake is found where it is made and never inside a task that runs later.
"""

from __future__ import annotations

import inspect
import math
from numbers import Real
from typing import NoReturn

from yoke.errors import BadType, BadValue


def check_concurrency(concurrency: object) -> float:
    if isinstance(concurrency, bool) or not isinstance(concurrency, Real):
        raise BadType(f"concurrency must be a positive int or math.inf, got {concurrency!r}")
    value = float(concurrency)
    if math.isnan(value) or value <= 0:
        raise BadValue(f"concurrency must be > 0, got {concurrency!r}")
    if value != math.inf and value != int(value):
        raise BadValue(f"concurrency must be a whole number or math.inf, got {concurrency!r}")
    return value


def check_weight(weight: object) -> float:
    if isinstance(weight, bool) or not isinstance(weight, Real):
        raise BadType(f"weight must be a positive number, got {weight!r}")
    value = float(weight)
    if not math.isfinite(value) or value <= 0:
        raise BadValue(f"weight must be a finite number > 0, got {weight!r}")
    return value


def bad_priority(priority: object) -> NoReturn:
    raise BadType(f"priority must be an int, got {type(priority).__name__} {priority!r}")


def bad_callable(fn: object) -> NoReturn:
    if inspect.iscoroutine(fn):
        fn.close()  # it will never run; closing it avoids a "never awaited" warning later
        raise BadType(
            "schedule() takes a zero-argument callable that returns an awaitable, "
            "not a coroutine object: pass `lambda: work(x)` or `functools.partial(work, x)`"
        )
    raise BadType(
        f"schedule() takes a zero-argument callable that returns an awaitable, got {fn!r}"
    )
