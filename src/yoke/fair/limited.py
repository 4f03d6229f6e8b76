"""The capped schedulers of `yoke.fair`: an asyncio face on the pure kernel.

A task that finds a free slot starts at once (`Kernel.offer`, no heap touched). Otherwise its
caller waits on a future that the kernel's item carries as payload; whoever frees a slot asks the
kernel for the next item and resolves its future. All kernel calls happen on the event loop
without an `await` between a decision and its bookkeeping, so no two callers can see the same
free slot.

Cancellation: a caller cancelled while queued removes its item from the kernel in its own
`except` clause, the first moment it runs again, so `queued` drops at once and `fn` is never
called. If the kernel had already chosen that item (its future resolved, or cancelled just before
the pick), the slot is handed on to the next item instead of being held.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import TypeVar

from yoke.fair.checks import bad_callable, bad_priority, check_concurrency, check_weight
from yoke.fair.protocol import SchedulerStats, TenantStats
from yoke.kernel import Item, ItemState, Kernel

T = TypeVar("T")


class KernelScheduler:
    """A scheduler whose queue order is the kernel's policy; see `create_fair_scheduler`."""

    __slots__ = ("_concurrency", "_ids", "_kernel", "_name", "_started")

    def __init__(
        self,
        concurrency: float,
        *,
        policy: str,
        priority_scope: str,
        credit: int = 0,
        weights: Mapping[Hashable, float] | None = None,
        name: str,
    ) -> None:
        self._concurrency = check_concurrency(concurrency)
        cap = None if self._concurrency == math.inf else int(self._concurrency)
        self._kernel = Kernel(
            policy=policy, priority_scope=priority_scope, global_cap=cap, credit=credit
        )
        for tenant, weight in (weights or {}).items():
            self._kernel.set_weight(tenant, check_weight(weight))
        self._ids = itertools.count()
        # Started counts live here, not in the kernel, so they survive a tenant going idle
        # (the kernel forgets idle lanes) and count only tasks whose fn was really called.
        self._started: dict[Hashable, int] = {}
        self._name = name

    async def schedule(
        self,
        fn: Callable[[], Awaitable[T]],
        *,
        priority: int = 0,
        tenant: Hashable = "default",
        weight: float | None = None,
    ) -> T:
        if priority.__class__ is not int:
            bad_priority(priority)
        if not callable(fn):
            bad_callable(fn)
        kernel = self._kernel
        if weight is not None and weight != kernel.weight(tenant):
            kernel.set_weight(tenant, check_weight(weight))
        item = kernel.offer(next(self._ids), tenant, priority=priority)
        if item.state is not ItemState.RUNNING:
            granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            item.payload = granted
            try:
                await granted
            except asyncio.CancelledError:
                self._abandon(item)
                raise
        started = self._started
        started[tenant] = started.get(tenant, 0) + 1
        try:
            return await fn()
        finally:
            self._release(item.id)

    def _abandon(self, item: Item) -> None:
        """The caller of a queued item was cancelled: its fn must never run."""
        if item.state is ItemState.QUEUED:
            self._kernel.cancel(item.id)
        elif item.state is ItemState.RUNNING:
            self._release(item.id)  # chosen, but never started: pass the slot on

    def _release(self, item_id: Hashable) -> None:
        kernel = self._kernel
        kernel.release(item_id)
        self._dispatch()

    def _dispatch(self) -> None:
        kernel = self._kernel
        while (item := kernel.pop_next()) is not None:
            granted = item.payload
            assert isinstance(granted, asyncio.Future)
            if granted.done():
                # Its caller was cancelled after the pick could see it; it will not run.
                kernel.release(item.id)
            else:
                granted.set_result(None)

    @property
    def concurrency(self) -> float:
        return self._concurrency

    @property
    def running(self) -> int:
        return self._kernel.running

    @property
    def queued(self) -> int:
        return self._kernel.queued

    def stats(self) -> SchedulerStats:
        kernel = self._kernel
        snapshot = kernel.stats()
        tenants: dict[Hashable, TenantStats] = {}
        for tenant in dict.fromkeys([*snapshot.lanes, *self._started]):
            lane = snapshot.lanes.get(tenant)
            tenants[tenant] = TenantStats(
                running=lane.running if lane else 0,
                queued=lane.queued if lane else 0,
                started=self._started.get(tenant, 0),
                weight=lane.weight if lane else kernel.weight(tenant),
            )
        return SchedulerStats(
            concurrency=self._concurrency,
            running=snapshot.running,
            queued=snapshot.queued,
            tenants=tenants,
        )

    def set_concurrency(self, concurrency: float) -> None:
        self._concurrency = check_concurrency(concurrency)
        cap = None if self._concurrency == math.inf else int(self._concurrency)
        self._kernel.set_global_cap(cap)
        self._dispatch()  # a raise frees slots now; a cut waits for running tasks to end

    def set_weight(self, tenant: Hashable, weight: float) -> None:
        self._kernel.set_weight(tenant, check_weight(weight))

    def __repr__(self) -> str:
        return (
            f"{self._name}(concurrency={self._concurrency:g}, running={self.running}, "
            f"queued={self.queued})"
        )
