"""The dashboard's change signal: one version number, raised when the scheduler's state moved.

A tick every `interval` seconds compares a cheap fingerprint of the state (queued and running
counts, grants seen, the limits in force, shutdown) with the last one, and raises the version
when it differs; `bump()` raises it at once for a change the dashboard itself made. So signals
are coalesced (at most one per tick whatever the churn) and the last change is never dropped:
the tick after it always sees the new fingerprint. Each tick also feeds the recorder's
once-a-second samples (refusals, Jain's index).

Subscribers (the SSE streams) wait for a version above the one they sent; `close()` wakes them
all for good, so open streams end at once on shutdown.

This module must never read the store: a tick is a few reads of memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable


class Hub:
    def __init__(
        self,
        fingerprint: Callable[[], Hashable],
        *,
        interval: float = 0.25,
        on_tick: Callable[[], None] | None = None,
        max_streams: int = 1000,
    ) -> None:
        self._fingerprint = fingerprint
        self.interval = interval
        self._on_tick = on_tick
        self.max_streams = max_streams
        self.version = 1
        self.streams = 0
        self.closed = False
        self._last: Hashable = None
        self._changed = asyncio.Event()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"Hub({state}, version={self.version}, streams={self.streams})"

    def bump(self) -> None:
        if self.closed:
            return
        self.version += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._changed.set()

    def tick(self) -> None:
        if self._on_tick is not None:
            self._on_tick()
        self.check()

    def check(self) -> int:
        """Raise the version now if the state moved since the last look (a page rendered
        right after a change must not wait for the next tick); returns the version."""
        now = self._fingerprint()
        if now != self._last:
            self._last = now
            self.bump()
        return self.version

    async def run(self) -> None:
        """Service: tick until closed."""
        while not self.closed:
            self.tick()
            await asyncio.sleep(self.interval)  # a period, not a synchronisation

    async def wait(self, after: int, timeout: float) -> int:
        """The version once it is above `after` (at once if it is), or as it is at `timeout`
        or when the hub closes."""
        if self.version > after or self.closed:
            return self.version
        try:
            async with asyncio.timeout(timeout):
                await self._changed.wait()
        except TimeoutError:
            pass
        return self.version
