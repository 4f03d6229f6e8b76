"""Worker identity, heartbeat and instance ownership (`runtime_workers`, `actor_instances`).

A worker registers at boot, then heartbeats every `heartbeat_interval`. At boot and on every
heartbeat it takes over the instances that have no owner and those whose owner is stopped,
unknown or silent for `stale_after`, for the owner the placement rule names
(`yoke.actors.fleet`; the actors specification claims only ownerless ones at boot, yoke goes
further, docs/decisions.md). A takeover bumps each instance's owner epoch, which fences the
old owner: its later completions, requeues and state writes are refused, and the rows it had
claimed are pending again for the new owner. A stopping worker hands its instances over by the
same rule. Each heartbeat also forgets the workers stopped or silent for `forget_after` that own
nothing any more (their rows, executors and counters), so a fleet whose workers come and go
(each incarnation a new id) keeps a bounded table. `tick(now)` is one round, so tests drive it
with a fake clock.

This module must never name a store backend and reads time only through its `Clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

from yoke.actors.metrics import DEPTH_LIMIT, ActorMetrics
from yoke.actors.protocol import ActorStore
from yoke.clock import Clock
from yoke.errors import YokeError
from yoke.retry import Backoff, RetryPolicy, severity
from yoke.store.actor_records import Takeover

if TYPE_CHECKING:
    from yoke.actors.fleet import Placer

log = logging.getLogger("yoke.actors.workers")
_POKE_GAP = 0.05


class WorkerHeartbeat:
    def __init__(
        self,
        *,
        store: ActorStore,
        worker_id: str,
        clock: Clock,
        heartbeat_interval: float,
        stale_after: float,
        on_takeover: Callable[[], None],
        forget_after: float = 3600.0,
        metrics: ActorMetrics | None = None,
        depth_limit: int = DEPTH_LIMIT,
        retry: RetryPolicy | None = None,
        placer: Placer | None = None,
    ) -> None:
        self._store = store
        # Where orphans go and where this worker's instances go when it stops; None: the
        # specification's rule (this worker takes orphans, a stopping one leaves them unowned).
        self._placer = placer
        self.worker_id = worker_id
        self._clock = clock
        self._interval = heartbeat_interval
        self._stale_after = stale_after
        self._forget_after = forget_after
        self._on_takeover = on_takeover
        self._metrics = metrics or ActorMetrics(None)
        self._depth_limit = depth_limit
        self._retry = retry or RetryPolicy()
        self.taken = 0
        self._poke = asyncio.Event()

    def __repr__(self) -> str:
        return f"WorkerHeartbeat(worker_id={self.worker_id!r}, taken={self.taken})"

    async def boot(self) -> Takeover:
        now = self._clock.wall()
        await self._store.fleet.register_worker(
            self.worker_id, hostname=socket.gethostname(), pid=os.getpid(), now=now
        )
        return await self._claim(now)

    async def _claim(self, now: float) -> Takeover:
        to = None if self._placer is None else await self._placer.rule()
        got = await self._store.fleet.claim_orphans(
            self.worker_id, stale_before=now - self._stale_after, now=now, to=to
        )
        if got.instances:
            self.taken += got.instances
            self._metrics.moved("takeover", got.instances)
            log.info(
                "worker %s took over %d instances (%d events back to pending)",
                self.worker_id,
                got.instances,
                got.requeued,
            )
            self._on_takeover()
        return got

    async def tick(self) -> Takeover:
        """One heartbeat: refresh our row, take orphans over, forget long-gone workers, refresh
        the gauges."""
        now = self._clock.wall()
        if not await self._store.fleet.worker_heartbeat(self.worker_id, now=now):
            log.warning("worker %s was stopped or forgotten; registering again", self.worker_id)
            await self._store.fleet.register_worker(
                self.worker_id, hostname=socket.gethostname(), pid=os.getpid(), now=now
            )
        got = await self._claim(now)
        forgotten = await self._store.fleet.forget_workers(before=now - self._forget_after)
        if forgotten:
            log.info("forgot %d workers gone for %.0fs", forgotten, self._forget_after)
        await self._metrics.refresh(
            self._store, now=now, stale_after=self._stale_after, depth_limit=self._depth_limit
        )
        return got

    def poke(self) -> None:
        """Rows were appended somewhere: look for ownerless instances before the next beat
        (an append from a process that runs no worker creates them without an owner)."""
        self._poke.set()

    async def run(self) -> None:
        backoff = Backoff(self._retry)
        next_beat = self._clock.monotonic()
        down_since: float | None = None  # when the store stopped answering our heartbeat
        while True:
            delay = self._interval
            try:
                if self._clock.monotonic() >= next_beat:
                    await self.tick()
                    next_beat = self._clock.monotonic() + self._interval
                else:
                    await self._claim(self._clock.wall())
                delay = max(0.0, next_beat - self._clock.monotonic())
                backoff.ok()
                if down_since is not None:
                    log.warning(
                        "worker %s: the store answers again after %.1fs",
                        self.worker_id,
                        self._clock.monotonic() - down_since,
                    )
                    down_since = None
            except YokeError as exc:
                if down_since is None:
                    down_since = self._clock.monotonic()
                delay = min(backoff.failed(exc), self._interval)
                log.log(severity(exc), "heartbeat failed (retrying in %.2fs): %s", delay, exc)
            self._poke.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._poke.wait()
                await asyncio.sleep(_POKE_GAP)  # many appends, one look

    async def stop(self) -> None:
        """Give every owned instance up: to the live workers by the placement rule (or
        unowned, for the first worker to take), so that they drain them at once."""
        to = None
        if self._placer is not None:
            try:
                to = await self._placer.rule(without=self.worker_id, fresh=True)
            except YokeError as exc:
                log.warning("reading the live workers failed; instances left unowned: %s", exc)
        released = await self._store.fleet.stop_worker(
            self.worker_id, now=self._clock.wall(), to=to
        )
        self._metrics.moved("stop", released)
        log.info("worker %s stopped; handed over %d instances", self.worker_id, released)
