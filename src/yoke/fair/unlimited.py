"""The unlimited scheduler: `concurrency=math.inf`, the zero-overhead path the fair-scheduler
specification asks for.

There is no gate, no queue, no counts and no per-tenant state: `schedule` is a plain method that
checks its arguments and hands back `fn()` for the caller to await, so its cost is one Python
call over `await fn()`. It must never allocate per task or per tenant; that is its whole point.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from typing import Any, TypeVar, overload

from yoke.errors import BadValue
from yoke.fair.checks import bad_callable, bad_priority, check_concurrency, check_weight
from yoke.fair.protocol import SchedulerStats

T = TypeVar("T")


class UnlimitedScheduler:
    __slots__ = ("_weights",)

    def __init__(self, weights: dict[Hashable, float] | None = None) -> None:
        # Weights are configuration, kept only so that stats() and set_weight() behave alike on
        # every scheduler; nothing reads them on the task path.
        self._weights = dict(weights or {})

    @overload
    def schedule(
        self,
        fn: Callable[[], Coroutine[Any, Any, T]],
        *,
        priority: int = 0,
        tenant: Hashable = "default",
        weight: float | None = None,
    ) -> Coroutine[Any, Any, T]: ...

    @overload
    def schedule(
        self,
        fn: Callable[[], Awaitable[T]],
        *,
        priority: int = 0,
        tenant: Hashable = "default",
        weight: float | None = None,
    ) -> Awaitable[T]: ...

    def schedule(
        self,
        fn: Callable[[], Awaitable[T]],
        *,
        priority: int = 0,
        tenant: Hashable = "default",
        weight: float | None = None,
    ) -> Awaitable[T]:
        if priority.__class__ is not int:
            bad_priority(priority)
        if weight is not None:
            check_weight(weight)
        try:
            return fn()
        except TypeError:
            if not callable(fn):
                bad_callable(fn)
            raise

    @property
    def concurrency(self) -> float:
        return math.inf

    @property
    def running(self) -> int:
        return 0

    @property
    def queued(self) -> int:
        return 0

    def stats(self) -> SchedulerStats:
        return SchedulerStats(concurrency=math.inf, running=0, queued=0, tenants={})

    def set_concurrency(self, concurrency: float) -> None:
        if check_concurrency(concurrency) != math.inf:
            # The unlimited path keeps no counts, so a cap set now could not hold against the
            # tasks already running; refuse rather than pretend.
            raise BadValue(
                "this scheduler was created unlimited and keeps no counts, so it cannot take a "
                "cap later; create it with a finite concurrency to change the cap while running"
            )

    def set_weight(self, tenant: Hashable, weight: float) -> None:
        self._weights[tenant] = check_weight(weight)

    def __repr__(self) -> str:
        return "UnlimitedScheduler(concurrency=inf)"
