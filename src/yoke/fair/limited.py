"""The capped schedulers of `yoke.fair`: an asyncio face on the pure kernel.

The scheduler owns the slot count; the kernel is the waiting room that decides who goes next.
A task that finds a free slot and nobody waiting starts at once, touching only two counters (it
is the common case, and it has to cost about what `asyncio.Semaphore` costs). Otherwise its
caller waits on a future carried as the kernel item's payload; whoever frees a slot asks the
kernel for the next item and resolves its future. Every decision and its bookkeeping happen on
the event loop with no `await` in between, so no two callers can see the same free slot.

The kernel sees running counts only when its policy orders by them (`least_running`): then
every start, fast or not, is a kernel item until it ends. For the other policies an item's kernel
life ends at its pick, since their keys do not depend on what is running.

Cancellation: a caller cancelled while queued removes its item from the kernel in its own
`except` clause, the first moment it runs again, so `queued` drops at once and `fn` is never
called. If the item had already been picked (its future resolved, or cancelled just before the
pick), the slot is handed on instead of being held.
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


class _Tenant:
    """Per-tenant counts kept by the scheduler: they outlive the kernel's idle lanes."""

    __slots__ = ("running", "started")

    def __init__(self) -> None:
        self.running = 0
        self.started = 0


class KernelScheduler:
    """A scheduler whose queue order is the kernel's policy; see `create_fair_scheduler`."""

    __slots__ = ("_busy", "_ids", "_kernel", "_limit", "_name", "_tenants", "_track")

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
        self._limit = check_concurrency(concurrency)
        self._kernel = Kernel(policy=policy, priority_scope=priority_scope, credit=credit)
        for tenant, weight in (weights or {}).items():
            self._kernel.set_weight(tenant, check_weight(weight))
        self._track = self._kernel.policy == "least_running"
        self._busy = 0  # slots taken: running tasks plus picked callers about to start
        self._ids = itertools.count()
        self._tenants: dict[Hashable, _Tenant] = {}
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
        item_id = None
        if self._busy < self._limit and not kernel.queued:
            self._busy += 1
            if self._track:
                item_id = kernel.offer(next(self._ids), tenant, priority=priority).id
        else:
            item = kernel.push(next(self._ids), tenant, priority=priority)
            granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            item.payload = granted
            try:
                await granted
            except asyncio.CancelledError:
                self._abandon(item, granted)
                raise
            item_id = item.id if self._track else None
        counts = self._tenants.get(tenant)
        if counts is None:
            counts = self._tenants[tenant] = _Tenant()
        counts.running += 1
        counts.started += 1
        try:
            return await fn()
        finally:
            counts.running -= 1
            self._busy -= 1
            if item_id is not None:
                kernel.release(item_id)
            if kernel.queued:
                self._dispatch()

    def _abandon(self, item: Item, granted: asyncio.Future[None]) -> None:
        """The caller of a queued item was cancelled: its fn must never run."""
        if item.state is ItemState.QUEUED:
            self._kernel.cancel(item.id)
        elif not granted.cancelled():
            # Picked and granted a slot, but never started: hand the slot on.
            self._busy -= 1
            if self._track:
                self._kernel.release(item.id)
            self._dispatch()

    def _dispatch(self) -> None:
        kernel = self._kernel
        while self._busy < self._limit:
            item = kernel.pop_next()
            if item is None:
                return
            if not self._track:
                kernel.release(item.id)  # the pick is all the kernel decides here
            granted = item.payload
            assert isinstance(granted, asyncio.Future)
            if granted.done():
                # Its caller was cancelled before the pick could see it; it will not run.
                if self._track:
                    kernel.release(item.id)
                continue
            self._busy += 1
            granted.set_result(None)

    @property
    def concurrency(self) -> float:
        return self._limit

    @property
    def running(self) -> int:
        return self._busy

    @property
    def queued(self) -> int:
        return self._kernel.queued

    def stats(self) -> SchedulerStats:
        kernel = self._kernel
        lanes = kernel.stats().lanes
        tenants: dict[Hashable, TenantStats] = {}
        for tenant in dict.fromkeys([*self._tenants, *lanes]):
            counts = self._tenants.get(tenant)
            lane = lanes.get(tenant)
            tenants[tenant] = TenantStats(
                running=counts.running if counts else 0,
                queued=lane.queued if lane else 0,
                started=counts.started if counts else 0,
                weight=kernel.weight(tenant),
            )
        return SchedulerStats(
            concurrency=self._limit, running=self._busy, queued=kernel.queued, tenants=tenants
        )

    def set_concurrency(self, concurrency: float) -> None:
        self._limit = check_concurrency(concurrency)
        self._dispatch()  # a raise frees slots now; a cut waits for running tasks to end

    def set_weight(self, tenant: Hashable, weight: float) -> None:
        self._kernel.set_weight(tenant, check_weight(weight))

    def __repr__(self) -> str:
        limit = "inf" if self._limit == math.inf else int(self._limit)
        return f"{self._name}(concurrency={limit}, running={self._busy}, queued={self.queued})"
