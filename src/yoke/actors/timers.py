"""Timer dispatch (seed 000 `timer_dispatch`): fire due `scheduled_events` into their stream.

Each due row is appended (with its fan-out) and deleted in one store transaction, so it fires
exactly once however many workers run this loop. The loop sleeps until the next `fire_at_ms`,
woken early by a new schedule (`LISTEN yoke_schedule_change` on PostgreSQL, in-process on
SQLite) and at the latest after the backup poll. `next_sleep` is the whole timing decision, a
pure function of `now`, so it is tested with a fake clock.

This module must never name a store backend and reads time only through its `Clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable

from yoke.actors.definitions import ActorRegistry
from yoke.actors.protocol import ActorStore
from yoke.clock import Clock
from yoke.errors import YokeError
from yoke.store.actor_records import DueTimer, NewEvent

log = logging.getLogger("yoke.actors.timers")


def next_sleep(now: float, next_fire_at_ms: int | None, poll: float) -> float:
    """Seconds to sleep before looking again: until the next timer, at most `poll`."""
    if next_fire_at_ms is None:
        return poll
    return min(poll, max(0.0, next_fire_at_ms / 1000.0 - now))


class TimerDispatch:
    def __init__(
        self,
        *,
        store: ActorStore,
        registry: ActorRegistry,
        clock: Clock,
        owner: Callable[[], str | None],
        on_fired: Callable[[], None],
        poll_interval: float = 10.0,
        batch_size: int = 500,
    ) -> None:
        self._store = store
        self._registry = registry
        self._clock = clock
        self._owner = owner
        self._on_fired = on_fired
        self._poll = poll_interval
        self._batch = batch_size
        self._wake = asyncio.Event()
        self.fired = 0

    def __repr__(self) -> str:
        return f"TimerDispatch(fired={self.fired}, poll={self._poll})"

    def wake(self) -> None:
        """A timer was scheduled (here or, through NOTIFY, elsewhere): look again."""
        self._wake.set()

    def _route(self, t: DueTimer) -> NewEvent:
        return NewEvent(
            tenant=t.tenant,
            stream=t.stream,
            data=t.data,
            targets=self._registry.route(t.stream, json.loads(t.data)),
        )

    async def fire_due(self) -> float:
        """Fire every due timer; returns how long to sleep before the next look."""
        while True:
            now = self._clock.wall()
            n = await self._store.fire_due_timers(
                now_ms=int(now * 1000),
                limit=self._batch,
                route=self._route,
                owner=self._owner(),
                now=now,
            )
            if n:
                self.fired += n
                self._on_fired()
            if n < self._batch:
                break
        nxt = await self._store.next_fire_at_ms()
        return next_sleep(self._clock.wall(), nxt, self._poll)

    async def run(self) -> None:
        pause = 0.5
        while True:
            self._wake.clear()
            try:
                delay = await self.fire_due()
                pause = 0.5
            except YokeError as exc:
                log.warning("firing timers failed (retrying in %.1fs): %s", pause, exc)
                delay, pause = pause, min(pause * 2, 10.0)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()
