"""`RetryTimer`: the drain's failed events waiting out their backoff, earliest first.

It owns one heap and one task: when the earliest is due, `due` is told of each event whose
time has come, then `after` once (one pump for all of them). A waiting event keeps its group
slot in its instance's kernel (nothing of its group overtakes it); that is the drain's
bookkeeping (`drain.py`), not this module's, which only keeps time, through the `Clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import Callable

from yoke.actors.drain_parts import Job
from yoke.clock import Clock
from yoke.store.actor_records import InstanceRef


class RetryTimer:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, Job]] = []
        self._tie = itertools.count()
        self._wake = asyncio.Event()

    def __len__(self) -> int:
        return len(self._heap)

    def __repr__(self) -> str:
        return f"RetryTimer(waiting={len(self._heap)})"

    def add(self, job: Job, delay: float) -> None:
        heapq.heappush(self._heap, (self._clock.monotonic() + delay, next(self._tie), job))
        self._wake.set()

    def drop(self, ref: InstanceRef) -> list[Job]:
        """Forget the events of `ref` waiting here; returns them."""
        kept = [r for r in self._heap if r[2].inst.ref != ref]
        if len(kept) == len(self._heap):
            return []
        dropped = [job for _, _, job in self._heap if job.inst.ref == ref]
        heapq.heapify(kept)
        self._heap = kept
        return dropped

    async def run(self, due: Callable[[Job], None], after: Callable[[], None]) -> None:
        """Until cancelled: at each due time, `due(job)` for each event due, then `after()`."""
        while True:
            heap = self._heap  # `drop` replaces the list: read it afresh each time
            timeout = None
            if heap:
                timeout = max(0.0, heap[0][0] - self._clock.monotonic())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            self._wake.clear()
            now = self._clock.monotonic()
            heap = self._heap
            while heap and heap[0][0] <= now:
                _, _, job = heapq.heappop(heap)
                due(job)
            after()
