"""The ticker: start each schedule's ticks, exactly once across every server.

Two steps, kept apart so that a shared timer machinery can drive the second: `Ticker.next_due()`
says when the next tick (or the deadline of ticks another server claimed) is due, and
`Ticker.fire_due()` fires what is due now. `TickLoop` puts the ticker on the one timer loop
(`yoke.timers.TimerDispatch`, which fires actor timers and the executions' wake-ups too) as
one more timer source: its one pending timer is `next_due`; firing it is `fire_due`, which the
claim makes a no-op in every process but one. It sleeps until then, at most `poll` seconds,
and is woken early by a schedule's change (NOTIFY yoke_schedules on PostgreSQL; in-process, by
`Schedules`, on SQLite).

Firing a schedule is three writes. (1) The claim: of the servers that read the schedule due,
one moves its `next_at` on by a compare-and-set and records the ticks it decided to start
(`cadence.plan`: late ticks each, missed ones by `catch_up`). (2) Each tick is started through
`executions.start`, so it is admitted like any start (the tenant's caps, queue and rate), as the
schedule's tenant, with the idempotency key `yoke-schedule:<schedule id>:<tick ms>`. (3) The
claim is finished, with the last start's outcome. A server that dies between (1) and (3) leaves
the ticks claimed; at `firing_until` another server claims them again and starts them, and the
idempotency keys make those the same starts: no tick starts twice, none is lost. A tick whose
start is refused (a full cap with `on_limit="reject"`, a rate, an unknown workflow) is over:
its outcome says why. The store being unavailable or admission closing leaves the ticks claimed.

This module must never name a store backend, and reads time only through its `Clock`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from yoke.clock import Clock
from yoke.errors import (
    IdempotencyConflict,
    InvalidArgument,
    LimitExceeded,
    NotFound,
    ShuttingDown,
    StoreUnavailable,
)
from yoke.executions.cadence import CatchUp, plan, tick_ms
from yoke.executions.model import Start
from yoke.executions.schedules import cadence_of
from yoke.retry import RetryPolicy
from yoke.store.scheduleverbs import Fired, ScheduleRow
from yoke.timers import TimerDispatch

log = logging.getLogger("yoke.executions.ticker")

CLAIM_SECS = 10.0  # claimed ticks not finished by then are claimed again by another server
BROKEN_RETRY = 3600.0  # a schedule whose cadence this server cannot read is looked at again


class TickStore(Protocol):
    async def due(self, *, now: float, limit: int) -> list[ScheduleRow]: ...

    async def next_due(self) -> float | None: ...

    async def claim(
        self,
        row: ScheduleRow,
        *,
        next_at: float,
        firing: tuple[float, ...],
        until: float,
        missed: int,
    ) -> int | None: ...

    async def finish(self, tenant: str, name: str, *, seq: int, fired: Fired) -> bool: ...


class StartTick(Protocol):
    async def __call__(
        self, workflow: str, input: Any, *, session: str, tenant: str, idempotency_key: str
    ) -> Start: ...


class TickListener(Protocol):
    """What the ticker reports, for metrics: a tick started (and how late), refused, or missed
    or skipped while no server ran."""

    def started(self, tenant: str, lateness: float) -> None: ...

    def refused(self, tenant: str) -> None: ...

    def missed(self, tenant: str, missed: int, skipped: int) -> None: ...


class TickListeners:
    """Every listener in a list hears each report (the list may grow while running)."""

    def __init__(self, listeners: Sequence[TickListener] = ()) -> None:
        self._listeners = listeners

    def started(self, tenant: str, lateness: float) -> None:
        for listener in self._listeners:
            listener.started(tenant, lateness)

    def refused(self, tenant: str) -> None:
        for listener in self._listeners:
            listener.refused(tenant)

    def missed(self, tenant: str, missed: int, skipped: int) -> None:
        for listener in self._listeners:
            listener.missed(tenant, missed, skipped)


def tick_key(schedule_id: str, tick: float) -> str:
    return f"yoke-schedule:{schedule_id}:{tick_ms(tick)}"


@dataclass(frozen=True, kw_only=True, slots=True)
class TickerStats:
    fired: int  # ticks this server started (a takeover's replays of another's count here too)
    refused: int  # ticks whose start admission refused
    claims_lost: int  # due schedules another server (or a change) claimed first


class Ticker:
    def __init__(
        self,
        *,
        store: Callable[[], TickStore],
        start: StartTick,
        clock: Clock,
        grace: float,
        listener: TickListener | None = None,
        active: Callable[[], bool] = lambda: True,
        batch: int = 100,
    ) -> None:
        self._store = store
        self._start = start
        self._clock = clock
        self._grace = grace
        self._listener: TickListener = listener or TickListeners()
        self._active = active  # an HA standby admits nothing: it leaves the ticks to the leader
        self._batch = batch
        self.fired = 0
        self.refused = 0
        self.claims_lost = 0

    def __repr__(self) -> str:
        return f"Ticker(fired={self.fired}, refused={self.refused}, grace={self._grace})"

    def stats(self) -> TickerStats:
        return TickerStats(fired=self.fired, refused=self.refused, claims_lost=self.claims_lost)

    async def next_due(self) -> float | None:
        """When the next tick is due (epoch seconds), or None: no schedule."""
        return await self._store().next_due()

    @property
    def active(self) -> bool:
        return self._active()

    async def fire_due(self) -> None:
        """Claim and start every tick due now (one page of due schedules, concurrently)."""
        if not self._active():
            return
        now = self._clock.wall()
        rows = await self._store().due(now=now, limit=self._batch)
        results = await asyncio.gather(*(self._fire(r, now) for r in rows), return_exceptions=True)
        errors = [e for e in results if isinstance(e, BaseException)]
        for e in errors:
            if not isinstance(e, StoreUnavailable | ShuttingDown):
                raise e
        if errors:
            raise errors[0]

    async def _fire(self, row: ScheduleRow, now: float) -> None:
        store = self._store()
        if row.firing is not None:  # claimed by a server that did not finish: start them again
            ticks: Sequence[float] = row.firing
            seq = await store.claim(
                row, next_at=row.next_at, firing=row.firing, until=now + CLAIM_SECS, missed=0
            )
        else:
            catch_up: CatchUp = "skip" if row.catch_up == "skip" else "one"
            try:
                cadence = cadence_of(row)
            except InvalidArgument as exc:  # a zone this server's tz database lacks, say
                log.error("schedule %s/%s cannot tick here: %s", row.tenant, row.name, exc)
                await store.claim(
                    row, next_at=now + BROKEN_RETRY, firing=(), until=now, missed=0
                )  # looked at again later, not in a loop: the row stays as it is otherwise
                return
            p = plan(cadence, row.next_at, now, grace=self._grace, catch_up=catch_up)
            ticks = p.starts
            seq = await store.claim(
                row,
                next_at=p.next_at,
                firing=p.starts,
                until=now + CLAIM_SECS,
                missed=p.missed + p.skipped,
            )
            if seq is not None and (p.missed or p.skipped):
                self._listener.missed(row.tenant, p.missed, p.skipped)
        if seq is None:
            self.claims_lost += 1
            return
        if not ticks:
            return
        start_id: str | None = None
        outcome = ""
        for tick in ticks:
            try:
                started = await self._start(
                    row.workflow,
                    json.loads(row.input),
                    session=row.session,
                    tenant=row.tenant,
                    idempotency_key=tick_key(row.schedule_id, tick),
                )
            except (LimitExceeded, IdempotencyConflict, NotFound, InvalidArgument) as exc:
                # Refused for good (the ticks after it are not held back by it).
                self.refused += 1
                self._listener.refused(row.tenant)
                start_id, outcome = None, f"refused: {exc}"[:500]
                continue
            self.fired += 1
            self._listener.started(row.tenant, max(0.0, self._clock.wall() - tick))
            start_id, outcome = started.start_id, started.status.value
        done = Fired(
            last_tick_at=ticks[-1],
            last_start_id=start_id,
            last_outcome=outcome,
            fired=len(ticks),
            now=self._clock.wall(),
        )
        await store.finish(row.tenant, row.name, seq=seq, fired=done)


@dataclass(frozen=True, slots=True)
class _NextTick:
    """The ticker's next due time as one timer of the shared loop: every firing reads the
    schedules due again, so one timer stands for all of them."""

    fire_at_ms: int
    timer_id: int = 0


class _TickSource:
    """The ticker as a `TimerSource` of the one timer loop (`yoke.timers`)."""

    def __init__(self, loop: TickLoop) -> None:
        self._loop = loop

    async def upcoming(self, *, limit: int, after: tuple[int, int] | None) -> list[_NextTick]:
        if after is not None:  # the one timer has no next page
            return []
        self._loop.looks += 1
        ticker = self._loop.ticker
        due = await ticker.next_due() if ticker.active else None
        return [] if due is None else [_NextTick(fire_at_ms=int(due * 1000))]

    async def fire(self, due: Sequence[_NextTick], *, now: float) -> int:
        try:
            await self._loop.ticker.fire_due()
        except ShuttingDown:  # admission is closing: the ticks stay claimed for another server
            return 0
        return len(due)


class TickLoop:
    """Drives a `Ticker` on the one timer loop (`yoke.timers.TimerDispatch`, as actor timers
    and the executions' wake-ups): fire what is due, sleep until the next tick (at most
    `poll`), woken early by a schedule's change."""

    def __init__(
        self, ticker: Ticker, *, clock: Clock, poll: float, retry: RetryPolicy | None = None
    ) -> None:
        self.ticker = ticker
        self.looks = 0  # reads of the next tick: a wake or the poll makes one
        self._dispatch: TimerDispatch[_NextTick] = TimerDispatch(
            source=_TickSource(self),
            clock=clock,
            on_fired=lambda: None,
            poll_interval=poll,
            batch_size=1,
            retry=retry,
        )

    def __repr__(self) -> str:
        return f"TickLoop({self.ticker!r}, {self._dispatch!r}, looks={self.looks})"

    @property
    def idle(self) -> bool:
        """Asleep with no wake pending: nothing fires until the next tick, poll or wake."""
        return self._dispatch.idle

    def wake(self) -> None:
        """A schedule changed (here or, through NOTIFY, elsewhere): look again now."""
        self._dispatch.wake()

    async def run(self) -> None:
        await self._dispatch.run()
