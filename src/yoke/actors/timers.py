"""Timer dispatch (the actors specification's `timer_dispatch`): fire due `scheduled_events`
into their stream, through the one timer machinery of `yoke.timers`.

`ActorTimers` is the actors' `TimerSource`: its pending timers are the `scheduled_events`
rows, and firing a batch appends each timer's event (with its fan-out, routed before the due
time) and deletes the timer in one transaction, one statement on PostgreSQL, skipping timers
that another worker fired or is firing. So a timer fires exactly once however many workers run
the loop. `TimerDispatch` is the shared loop over that source (woken by `LISTEN
yoke_schedule_change` on PostgreSQL, in-process on SQLite).

This module must never name a store backend and reads time only through its `Clock`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from yoke.actors.definitions import ActorRegistry
from yoke.actors.protocol import ActorStore
from yoke.clock import Clock
from yoke.retry import RetryPolicy
from yoke.store.actor_records import DueTimer, NewEvent, Owner
from yoke.timers import TimerDispatch as Dispatch
from yoke.timers import TimerStats, next_sleep

__all__ = ["ActorTimers", "TimerDispatch", "TimerStats", "next_sleep"]


class ActorTimers:
    """The actors' timers (`scheduled_events`) as a `yoke.timers.TimerSource`."""

    def __init__(
        self, *, store: ActorStore, registry: ActorRegistry, owner: Callable[[], Owner]
    ) -> None:
        self._store = store
        self._registry = registry
        self._owner = owner

    def _route(self, t: DueTimer) -> NewEvent:
        return NewEvent(
            tenant=t.tenant,
            stream=t.stream,
            data=t.data,
            targets=self._registry.route(t.stream, json.loads(t.data)),
        )

    async def upcoming(self, *, limit: int, after: tuple[int, int] | None) -> list[DueTimer]:
        return await self._store.upcoming_timers(limit=limit, after=after)

    async def fire(self, due: Sequence[DueTimer], *, now: float) -> int:
        fired = await self._store.fire_timers(
            [(t.timer_id, self._route(t)) for t in due], owner=self._owner(), now=now
        )
        return len(fired)


class TimerDispatch(Dispatch[DueTimer]):
    """The shared timer loop over the actors' timers (only its construction is its own)."""

    def __init__(
        self,
        *,
        store: ActorStore,
        registry: ActorRegistry,
        clock: Clock,
        owner: Callable[[], Owner],
        on_fired: Callable[[], None],
        poll_interval: float = 10.0,
        batch_size: int = 500,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(
            source=ActorTimers(store=store, registry=registry, owner=owner),
            clock=clock,
            on_fired=on_fired,
            poll_interval=poll_interval,
            batch_size=batch_size,
            retry=retry,
        )
