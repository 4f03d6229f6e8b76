"""`RuntimeLifecycleService` (alias `TenantSchedulerService`): starts and stops the tenants'
executor processes on this worker, from ingress signals and periodic sweeps.

Every loop ends in the same call: observe, `decide()`, carry the actions out on the
`ExecutorPool`. What differs is what each observes (the variables and defaults of the actors
specification, docs/decisions.md):

| loop | period | what it looks at |
| --- | --- | --- |
| wake | a signal (*) | tenants with pending events here (a page, rotating), the live ones |
| hot reconcile | `YOKE_HOT_RECONCILE_INTERVAL_SECS` = 5 | live executors: idle ones stop |
| cold reconcile | `YOKE_COLD_RECONCILE_INTERVAL_SECS` = 30 | pending tenants with no executor |
| schedule wake poll | `YOKE_SCHEDULE_WAKE_POLL_SECS` = 10 | timers due within a poll: pre-warm |
| NOTIFY backup poll | `YOKE_NOTIFY_POLL_BACKUP_SECS` = 15 | as the wake, for a missed NOTIFY |

(*) an append here, a NOTIFY, a portal's append, a fired timer, a takeover, an executor's exit.

A signal for a tenant whose executor is READY costs nothing here (its events are claimed by
the drain at once); only a tenant that is not running needs a look at the store. Pending
means rows in the store for this worker's instances, or rows the drain holds; a tenant with
either, or with a call running, is busy, and `busy_at` (kept by the pool) is when it last was.
A store that cannot be read makes no decision at all (running executors stay up and idle: the
actors specification's "scheduler blocks"). This module must never touch a process or a row
itself; it reads time only through its `Clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from yoke.actors.executor.pool import ExecutorPool
from yoke.actors.executor.process import ExecutorState
from yoke.actors.lifecycle.decide import (
    Action,
    Kind,
    Observation,
    Phase,
    Policy,
    TenantObservation,
    decide,
)
from yoke.actors.protocol import ActorStore
from yoke.clock import Clock
from yoke.errors import YokeError
from yoke.retry import Backoff, RetryPolicy, severity

log = logging.getLogger("yoke.lifecycle")

DISCOVER_PAGE = 500  # tenants with pending events looked at per observation, at most
_PHASE = {
    ExecutorState.STARTING: Phase.STARTING,
    ExecutorState.READY: Phase.READY,
    ExecutorState.DRAINING: Phase.DRAINING,
    ExecutorState.DYING: Phase.DRAINING,  # going: nothing to decide until it has ended
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Periods:
    hot: float = 5.0
    cold: float = 30.0
    timers: float = 10.0
    backup: float = 15.0


@dataclass(frozen=True, kw_only=True, slots=True)
class LifecycleStats:
    observations: int
    starts: int
    stops: int
    kills: int
    failed_observations: int


class RuntimeLifecycleService:
    def __init__(
        self,
        *,
        store: ActorStore,
        pool: ExecutorPool,
        held: Callable[[], Counter[str]],
        worker_id: str,
        clock: Clock,
        policy: Policy,
        periods: Periods | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._store = store
        self._pool = pool
        self._held = held  # what the drain holds, per tenant
        self._worker_id = worker_id
        self._clock = clock
        self.policy = policy
        self._periods = periods or Periods()
        self._retry = retry or RetryPolicy()
        self._poke = asyncio.Event()
        self._cursor = ""
        self._timers: dict[str, float] = {}  # tenant -> when its next timer is due (monotonic)
        self._counts = dict.fromkeys(("observations", "starts", "stops", "kills", "failed"), 0)

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"RuntimeLifecycleService(worker={self._worker_id!r}, observations={s.observations}, "
            f"starts={s.starts}, stops={s.stops}, kills={s.kills})"
        )

    def stats(self) -> LifecycleStats:
        c = self._counts
        return LifecycleStats(
            observations=c["observations"],
            starts=c["starts"],
            stops=c["stops"],
            kills=c["kills"],
            failed_observations=c["failed"],
        )

    def wake(self, tenant: str | None = None) -> None:
        """Events may be waiting (for `tenant`, or for some tenant): look soon, unless that
        tenant's executor is READY already (the drain claims its events then)."""
        if tenant is not None and self._pool.ready(tenant):
            self._pool.mark_busy(tenant)
            return
        self._poke.set()

    async def run(self) -> None:
        p = self._periods
        periods = {"hot": p.hot, "cold": p.cold, "timers": p.timers, "backup": p.backup}
        now = self._clock.monotonic()
        due_at = {"hot": now + p.hot, "cold": now + p.cold, "timers": now, "backup": now + p.backup}
        self._poke.set()  # at boot: whatever is waiting already
        backoff = Backoff(self._retry)
        retry_at: float | None = None
        while True:
            wake_at = min([*due_at.values(), *([retry_at] if retry_at is not None else [])])
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, wake_at - self._clock.monotonic())):
                    await self._poke.wait()
            now = self._clock.monotonic()
            due = {name for name, at in due_at.items() if at <= now}
            poked = self._poke.is_set()
            self._poke.clear()
            try:
                obs = await self._observe(
                    discover=poked or bool(due & {"cold", "backup"}) or retry_at is not None,
                    timers="timers" in due,
                )
            except YokeError as exc:
                self._counts["failed"] += 1
                pause = backoff.failed(exc)
                log.log(
                    severity(exc),
                    "observing the tenants failed (retrying in %.1fs): %s",
                    pause,
                    exc,
                )
                await asyncio.sleep(pause)
                self._poke.set()
                continue
            backoff.ok()
            now = self._clock.monotonic()
            for action in decide(obs, now, self.policy):
                self._apply(action)
            for name in due:
                due_at[name] = now + periods[name]
            waiting = [t.backoff_until for t in obs.tenants if t.phase is Phase.NONE and t.pending]
            retry_at = min((at for at in waiting if at > now), default=None)

    async def _observe(self, *, discover: bool, timers: bool) -> Observation:
        self._counts["observations"] += 1
        pool, store, me = self._pool, self._store, self._worker_id
        live = [name for name in pool.tenants() if (ex := pool.executor(name)) and ex.live]
        pending: set[str] = set()
        if timers:
            # Timers before pending: a timer that fires between the two reads is then seen as
            # its pending event; read the other way round it could be seen as neither, and its
            # warm executor stopped for idleness just before its event arrives.
            await self._read_timers()
        if discover:
            found = await store.executors.pending_tenants(
                me, after=self._cursor, limit=DISCOVER_PAGE
            )
            if len(found) < DISCOVER_PAGE and self._cursor:
                found += await store.executors.pending_tenants(me, limit=DISCOVER_PAGE - len(found))
            self._cursor = found[-1] if len(found) >= DISCOVER_PAGE else ""
            pending.update(found)
        check = [name for name in live if name not in pending]
        if check:
            pending.update(await store.executors.tenants_with_pending(me, check))
        held = self._held()
        now = self._clock.monotonic()
        names = pending | set(live) | {t for t, n in held.items() if n} | set(self._timers)
        out = []
        for name in sorted(names):
            ex = pool.executor(name)
            phase = Phase.NONE if ex is None or not ex.live else _PHASE[ex.state]
            active = 0 if ex is None else ex.active
            # A timer due soon counts as work for the idle clock: once it fired, its executor
            # waits `idle_secs` from the last sight of it, not from its boot.
            busy = name in pending or held[name] > 0 or active > 0 or name in self._timers
            if busy:
                pool.mark_busy(name)
            out.append(
                TenantObservation(
                    tenant=name,
                    phase=phase,
                    pending=name in pending or held[name] > 0,
                    active=active,
                    busy_at=now if busy else pool.busy_at(name),
                    # A boot's deadline runs from its spawn: the wait for a boot slot is
                    # the fair queue's, not the boot's.
                    since=now if ex is None or ex.spawned is None else ex.spawned,
                    backoff_until=pool.backoff_until(name),
                    timer_due=self._timers.get(name),
                )
            )
        return Observation(tenants=tuple(out))

    async def _read_timers(self) -> None:
        """Tenants whose timers fall due before the next poll and a boot (pre-warm)."""
        wall, mono = self._clock.wall(), self._clock.monotonic()
        horizon = self.policy.prewarm
        due = await self._store.executors.timer_tenants(
            self._worker_id, before_ms=int((wall + horizon) * 1000), limit=DISCOVER_PAGE
        )
        self._timers = {tenant: mono + (ms / 1000 - wall) for tenant, ms in due}

    def _apply(self, action: Action) -> None:
        pool, tenant = self._pool, action.tenant
        if action.kind is Kind.START:
            if pool.start(tenant):
                self._counts["starts"] += 1
                log.info("starting the executor of tenant %r (%s)", tenant, action.reason)
        elif action.kind is Kind.STOP:
            # The drain's count now, not the observation's: nothing may have come in since.
            if pool.stop(tenant, action.reason, held=self._held()[tenant]):
                self._counts["stops"] += 1
                log.info("stopping the executor of tenant %r (%s)", tenant, action.reason)
        else:
            self._counts["kills"] += 1
            log.warning("killing the executor of tenant %r (%s)", tenant, action.reason)
            pool.kill(tenant, action.reason)


TenantSchedulerService = RuntimeLifecycleService  # the specification's legacy name
