"""The `Scheduler` protocol that every in-process scheduler of `yoke.fair` satisfies, and the
frozen values `stats()` returns.

One protocol so that `create_scheduler` and `create_fair_scheduler` drop in for each other, as
the fair-scheduler specification asks (docs/decisions.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, overload

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantStats:
    running: int
    queued: int
    started: int
    weight: float


@dataclass(frozen=True, kw_only=True, slots=True)
class SchedulerStats:
    concurrency: float
    running: int
    queued: int
    tenants: Mapping[Hashable, TenantStats]


class Scheduler(Protocol):
    """Runs zero-argument async callables, at most `concurrency` at a time."""

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
        """Run `fn()` once a slot is free; the awaitable gives its result or raises its error."""
        ...

    @property
    def concurrency(self) -> float: ...

    @property
    def running(self) -> int: ...

    @property
    def queued(self) -> int: ...

    def stats(self) -> SchedulerStats: ...

    def set_concurrency(self, concurrency: float) -> None: ...

    def set_weight(self, tenant: Hashable, weight: float) -> None: ...
