"""`ExecutorPool`: the executor processes of one worker, one per tenant, and the `Runner` that
sends a tenant's `process()` calls to its own.

The pool realises what the lifecycle decides (`start`, `stop`) and reports what it sees: per
tenant, the current executor, when the tenant was last busy, how often its executors failed
and until when a restart waits (backoff: `YOKE_EXECUTOR_BACKOFF_SECS`, doubling to 60 s, back
to the start after a call succeeds). Boots go through a fair scheduler with one lane per
tenant and `YOKE_EXECUTOR_BOOT_CONCURRENCY` slots, so a burst of wakes or a tenant that cannot
boot never holds the others' boots back. With `YOKE_EXECUTOR_WARM_SPARES` (N), N executors are
kept booted ahead of need, bound to no tenant: a tenant that needs one gets a spare, bound at
once (no boot slot: nothing is spawned), and a new spare boots in the spares' own boot lane. A
spare that dies unbound is replaced after a backoff of the spares' own; no tenant is charged.
A READY executor wakes the drain: its tenant's events
may be claimed from then on (`claimable`). Its exit is reported to the lifecycle (`on_exit`):
a tenant with events left is started again once its backoff passes.

Every task of every executor runs in the pool's TaskGroup, guarded: whatever one executor
does, the pool and the worker go on. The latest state of each executor is written to the
store (`runtime_executors`) on every change of state and at each `record_every`, for
`GET /v1/executors`. This module must never decide when an executor should run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine
from dataclasses import dataclass
from typing import Any

from yoke.actors.ctx import CtxHost, InstanceStateCell
from yoke.actors.definitions import ActorDef, Event
from yoke.actors.executor.boot import BootFailed, Launch
from yoke.actors.executor.process import LIVE, ExecutorProcess, ExecutorState
from yoke.actors.metrics import ActorMetrics
from yoke.actors.protocol import ActorStore
from yoke.actors.runner import Done, ExecutorLost
from yoke.clock import Clock
from yoke.errors import YokeError
from yoke.fair import create_fair_scheduler
from yoke.retry import RetryPolicy, severity
from yoke.store.actor_records import ExecutorRow, SpareRow

log = logging.getLogger("yoke.executor")

MAX_BACKOFF = 60.0
SPARE_LANE = ("spare",)  # the boot lane of warm spares (a key no tenant's name can be)
MAX_SUSPECTS = 1024  # per tenant (a crash makes at most as many as calls were in flight)
_RECORD_GAP = 0.2  # seconds between two writes of executor rows, at least


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutorView:
    """One executor as `GET /v1/executors` shows it (this worker's, from memory)."""

    tenant: str
    worker_id: str
    pid: int | None
    state: ExecutorState
    started_at: float
    boot_ms: float | None
    dispatches: int
    active_dispatch: int
    crashes: int
    isolation: str
    stop_reason: str | None


class _Tenant:
    __slots__ = (
        "alone",
        "backoff_until",
        "busy_at",
        "changed",
        "crashes",
        "current",
        "failures",
        "first_done",
        "solo",
        "suspects",
    )

    def __init__(self, now: float) -> None:
        self.current: ExecutorProcess | None = None
        self.failures = 0  # consecutive failed lives (boot or crash); reset by a success
        self.crashes = 0  # failed lives in all
        self.backoff_until = 0.0  # monotonic: no restart before
        self.busy_at = now  # monotonic: last seen with work (pending, held or running)
        self.first_done = False  # the current life's first call ended (its first_dispatch)
        # Events that were in flight together when an executor of this tenant ended by its
        # own doing (an exit, a fault, a bad frame, an OOM kill): one of them may have done
        # it. Each runs alone until it ends, so that if it is the one, it is alone when it
        # does it again, and is charged (see `run`). A kill from outside (SIGKILL) makes no
        # suspect: its calls go back at no cost and run as before.
        self.suspects: set[int] = set()
        self.solo = asyncio.Lock()  # one suspect at a time
        self.alone = False  # a suspect runs: nothing else of the tenant is sent meanwhile
        self.changed = asyncio.Event()  # a call ended, or a suspect's turn did


class ExecutorPool:
    sends = True  # the Runner's hot path (`send`)

    def __init__(
        self,
        *,
        launch: Launch,
        host: CtxHost,
        store: ActorStore,
        worker_id: str,
        clock: Clock,
        boot_concurrency: int,
        backoff: float,
        metrics: ActorMetrics | None = None,
        record_every: float = 5.0,
        spares: int = 0,
    ) -> None:
        self._launch = launch
        self._host = host
        self._store = store
        self.worker_id = worker_id
        self._clock = clock
        # A crashed executor's restart waits `backoff`, doubling per crash in a row up to
        # MAX_BACKOFF, drawn with jitter so that tenants that crashed together come back apart.
        self._restarts = RetryPolicy(first=backoff, most=max(MAX_BACKOFF, backoff))
        self._metrics = metrics or ActorMetrics(None)
        self._record_every = record_every
        self._boots = create_fair_scheduler(boot_concurrency)
        self._tenants: dict[str, _Tenant] = {}
        # Warm spares: booted ahead of need, bound to no tenant (`warm_spares`); each one taken
        # is replaced in the background, and one that dies unbound is replaced after a backoff
        # of its own, charged to no tenant.
        self._spare_target = spares
        self._spares: list[ExecutorProcess] = []  # unbound, warming or warm
        self._slots: dict[ExecutorProcess, int] = {}  # its row in `GET /v1/executors`
        self._dirty_spares: dict[int, SpareRow] = {}
        self._spare_failures = 0
        self._spare_backoff_until = 0.0
        self._spare_retry: asyncio.TimerHandle | None = None
        self._ready: set[str] = set()
        self._dirty: dict[str, None] = {}
        self._record = asyncio.Event()
        self._tg: asyncio.TaskGroup | None = None
        self._closing = False
        self.isolation = launch.isolation.describe()
        self.on_ready: Callable[[str], None] = lambda tenant: None
        self.on_exit: Callable[[str], None] = lambda tenant: None

    def __repr__(self) -> str:
        counts = self.counts()
        shown = ", ".join(f"{s.value.lower()}={n}" for s, n in counts.items() if n)
        return f"ExecutorPool(worker={self.worker_id!r}, {shown or 'empty'})"

    # -- what the lifecycle and the API read ---------------------------------------------------
    def counts(self) -> dict[ExecutorState, int]:
        out = dict.fromkeys(ExecutorState, 0)
        for t in self._tenants.values():
            if t.current is not None:
                out[t.current.state] += 1
        out[ExecutorState.SPARE] += len(self._spares)
        return out

    def spares(self) -> list[ExecutorProcess]:
        """The unbound executors: warming, or warm (`spare_ms` set) and waiting for a tenant."""
        return list(self._spares)

    def executor(self, tenant: str) -> ExecutorProcess | None:
        t = self._tenants.get(tenant)
        return None if t is None else t.current

    def tenants(self) -> list[str]:
        return list(self._tenants)

    def busy_at(self, tenant: str) -> float:
        t = self._tenants.get(tenant)
        return 0.0 if t is None else t.busy_at

    def backoff_until(self, tenant: str) -> float:
        t = self._tenants.get(tenant)
        return 0.0 if t is None else t.backoff_until

    def mark_busy(self, tenant: str) -> None:
        t = self._tenants.get(tenant)
        if t is not None:
            t.busy_at = self._clock.monotonic()

    def views(self) -> list[ExecutorView]:
        return [self._view(name, t) for name, t in sorted(self._tenants.items()) if t.current]

    def _view(self, name: str, t: _Tenant) -> ExecutorView:
        ex = t.current
        assert ex is not None
        return ExecutorView(
            tenant=name,
            worker_id=self.worker_id,
            pid=ex.pid,
            state=ex.state,
            started_at=ex.started_at,
            boot_ms=ex.boot_ms,
            dispatches=ex.dispatches,
            active_dispatch=ex.active,
            crashes=t.crashes,
            isolation=self.isolation,
            stop_reason=ex.stop_reason,
        )

    # -- the Runner: how the drain runs a tenant's call ----------------------------------------
    def claimable(self) -> Collection[str]:
        return self._ready

    def ready(self, tenant: str) -> bool:
        return tenant in self._ready

    def run(self, actor: ActorDef, cell: InstanceStateCell, event: Event) -> Awaitable[None]:
        t = self._tenants.get(cell.ref.tenant)
        ex = None if t is None else t.current
        if ex is None or t is None:
            raise ExecutorLost(f"tenant {cell.ref.tenant!r} has no executor")
        if t.suspects and event.id in t.suspects:
            return self._run_alone(t, ex, actor, cell, event)
        if t.alone:
            return self._after_alone(t, ex, actor, cell, event)
        return ex.dispatch(actor.name, cell, event)

    def send(self, actor: ActorDef, cell: InstanceStateCell, event: Event, done: Done) -> bool:
        """The hot path: send the call now if nothing holds it back (its executor READY, no
        suspect running alone, not a suspect itself); `done` is told how it ended, from the
        executor's reader. False: nothing was sent, `run` it instead."""
        t = self._tenants.get(cell.ref.tenant)
        ex = None if t is None else t.current
        if t is None or ex is None or t.alone or not ex.sendable:
            return False
        if t.suspects and event.id in t.suspects:
            return False
        ex.send(actor.name, cell, event, done)
        return True

    async def _after_alone(
        self,
        t: _Tenant,
        ex: ExecutorProcess,
        actor: ActorDef,
        cell: InstanceStateCell,
        event: Event,
    ) -> None:
        while t.alone:  # a suspect's turn: it runs alone
            await _changed(t)
        await ex.dispatch(actor.name, cell, event)

    async def _run_alone(
        self,
        t: _Tenant,
        ex: ExecutorProcess,
        actor: ActorDef,
        cell: InstanceStateCell,
        event: Event,
    ) -> None:
        async with t.solo:
            t.alone = True
            try:
                while ex.active and ex.live:  # the calls already sent end first
                    await _changed(t)
                await ex.dispatch(actor.name, cell, event)
                t.suspects.discard(event.id)  # it ended: not the one
            except ExecutorLost:
                raise  # blamed (then it ran alone) or lost with its executor: still suspect
            except Exception:
                t.suspects.discard(event.id)  # process() raised: it ended all the same
                raise
            finally:
                t.alone = False
                t.changed.set()

    # -- starting and stopping ------------------------------------------------------------------
    def start(self, tenant: str) -> bool:
        """Start an executor for `tenant` unless one is live or its restart must wait."""
        if self._closing or self._tg is None:
            return False
        t = self._tenants.get(tenant)
        now = self._clock.monotonic()
        if t is None:
            t = self._tenants[tenant] = _Tenant(now)
        elif (t.current is not None and t.current.live) or now < t.backoff_until:
            return False
        spare = self._take_spare()
        if spare is not None:
            spare.assign(tenant)
        ex = spare or self._new_executor(tenant)
        t.current, t.first_done, t.busy_at = ex, False, now
        if spare is not None:
            self._spawn(self._bind(spare, now))
        else:
            self._spawn(self._boot(t, ex, now))
        self._changed(tenant)
        return True

    def _new_executor(self, tenant: str, *, spare: bool = False) -> ExecutorProcess:
        return ExecutorProcess(
            tenant=tenant,
            launch=self._launch,
            host=self._host,
            clock=self._clock,
            spawn=self._spawn,
            on_exit=self._exited,
            on_done=self._done,
            on_dying=self._dying,
            spare=spare,
        )

    def _take_spare(self) -> ExecutorProcess | None:
        for ex in self._spares:
            if ex.bindable:
                self._spares.remove(ex)
                self._spare_row(ex, self._slots.pop(ex), "STOPPED", "bound to a tenant")
                return ex
        return None

    def _fill_spares(self) -> None:
        """Start spares until there are `warm_spares` (after a spare's backoff, if one died)."""
        if self._closing or self._tg is None or self._spare_retry is not None:
            return
        now = self._clock.monotonic()
        if now < self._spare_backoff_until:
            loop = asyncio.get_running_loop()
            self._spare_retry = loop.call_later(self._spare_backoff_until - now, self._retry)
            return
        while len(self._spares) < self._spare_target:
            ex = self._new_executor("", spare=True)
            self._spares.append(ex)
            self._slots[ex] = min(set(range(self._spare_target)) - set(self._slots.values()))
            self._spare_row(ex, self._slots[ex])
            self._spawn(self._warm(ex, now))
        self._spares_changed()

    def _retry(self) -> None:
        self._spare_retry = None
        self._fill_spares()

    async def _warm(self, ex: ExecutorProcess, asked: float) -> None:
        async def warm() -> None:
            await ex.warm(queued=self._clock.monotonic() - asked)

        try:
            await self._boots.schedule(warm, tenant=SPARE_LANE)
        except BootFailed as exc:
            if not self._closing:
                log.warning("a warm spare failed to boot: %s", exc.reason)
            return  # _exited has counted it
        if ex.state is not ExecutorState.SPARE:
            return
        for phase in ("spawn", "interpreter", "sandbox", "runtime"):
            self._metrics.executor_phase(phase, ex.phases[phase])
        self._spare_failures = 0
        if ex in self._slots:
            self._spare_row(ex, self._slots[ex])
        self._spares_changed()

    async def _bind(self, ex: ExecutorProcess, asked: float) -> None:
        try:
            await ex.bind(queued=self._clock.monotonic() - asked)
        except BootFailed as exc:
            log.warning("executor of tenant %r failed to boot: %s", ex.tenant, exc.reason)
            return  # _exited has counted it
        finally:
            # The next spare boots once this one is bound, not during its bind: on a busy
            # machine the two would share the CPU, and the tenant waits for the bind.
            self._fill_spares()
        if not self._closing and ex.state is ExecutorState.READY:
            self._became_ready(ex)

    def _spare_lost(self, ex: ExecutorProcess) -> None:
        self._spares.remove(ex)
        self._spare_row(ex, self._slots.pop(ex), ex.state.value, ex.stop_reason)
        if ex.crashed and not self._closing:
            self._spare_failures += 1
            pause = self._restarts.pause(self._spare_failures)
            self._spare_backoff_until = self._clock.monotonic() + pause
        self._fill_spares()
        self._spares_changed()

    def _spares_changed(self) -> None:
        self._metrics.set_executors({s.value: n for s, n in self.counts().items()})
        self._record.set()

    def _spare_row(
        self, ex: ExecutorProcess, slot: int, state: str = "SPARE", reason: str | None = None
    ) -> None:
        self._dirty_spares[slot] = SpareRow(
            worker_id=self.worker_id,
            slot=slot,
            pid=ex.pid,
            state=state,
            started_at=ex.started_at,
            boot_ms=ex.spare_ms,
            isolation=self.isolation,
            stop_reason=reason,
            updated_at=self._clock.wall(),
        )

    def stop(self, tenant: str, reason: str, *, held: int) -> bool:
        """Stop `tenant`'s READY executor, if it has nothing to do: `held` is what the drain
        holds of it, checked here with the executor's own count, with no await in between, so
        no call can slip in (the drain sends nothing to an executor that is not READY)."""
        ex = self.executor(tenant)
        if ex is None or ex.state is not ExecutorState.READY or held or ex.active:
            return False
        stopping = ex.stop(grace=5.0, reason=reason)  # DRAINING from here: nothing is sent
        self._ready.discard(tenant)
        self._changed(tenant)
        self._spawn(stopping)
        return True

    def kill(self, tenant: str, reason: str) -> None:
        ex = self.executor(tenant)
        if ex is not None:
            ex.kill(reason)  # DYING at once, then FAILED (a no-op once its end is decided)

    async def _boot(self, t: _Tenant, ex: ExecutorProcess, asked: float) -> None:
        async def boot() -> None:
            await ex.boot(queued=self._clock.monotonic() - asked)

        try:
            await self._boots.schedule(boot, tenant=ex.tenant)
        except BootFailed as exc:
            log.warning("executor of tenant %r failed to boot: %s", ex.tenant, exc.reason)
            return  # _exited has counted it
        if not self._closing and ex.state is ExecutorState.READY:
            self._became_ready(ex)

    def _became_ready(self, ex: ExecutorProcess) -> None:
        for phase, seconds in ex.phases.items():
            self._metrics.executor_phase(phase, seconds)
        log.info(
            "executor of tenant %r READY in %.0f ms (pid %s, %s%s)",
            ex.tenant,
            ex.boot_ms or 0.0,
            ex.pid,
            self.isolation,
            "" if ex.spare_ms is None else f", a warm spare booted in {ex.spare_ms:.0f} ms",
        )
        self._ready.add(ex.tenant)
        self._changed(ex.tenant)
        self.on_ready(ex.tenant)

    def _done(self, ex: ExecutorProcess) -> None:
        t = self._tenants.get(ex.tenant)
        if t is None or t.current is not ex:
            return
        t.busy_at = self._clock.monotonic()
        t.failures = 0
        t.changed.set()
        if not t.first_done and ex.ready_at is not None:
            t.first_done = True
            self._metrics.executor_phase("first_dispatch", t.busy_at - ex.ready_at)

    def _dying(self, ex: ExecutorProcess) -> None:
        t = self._tenants.get(ex.tenant)
        if t is not None and t.current is ex:
            self._ready.discard(ex.tenant)

    def _exited(self, ex: ExecutorProcess) -> None:
        if ex in self._spares:
            self._spare_lost(ex)
            return
        t = self._tenants.get(ex.tenant)
        if t is None or t.current is not ex:
            return
        self._ready.discard(ex.tenant)
        t.changed.set()
        if ex.self_inflicted and ex.blamed is None and len(ex.lost) > 1:
            t.suspects.update(ex.lost)
            while len(t.suspects) > MAX_SUSPECTS:
                t.suspects.pop()
        if ex.crashed:
            t.crashes += 1
            t.failures += 1
            pause = self._restarts.pause(t.failures)
            t.backoff_until = self._clock.monotonic() + pause
            self._metrics.executor_crashed()
        self._changed(ex.tenant)
        self.on_exit(ex.tenant)

    # -- running ----------------------------------------------------------------------------------
    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        if self._tg is None:
            coro.close()
            return
        self._tg.create_task(_guarded(coro))

    async def run_pool(self) -> None:
        """Run until cancelled: the executors' tasks, and the recorder of their rows."""
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            try:
                self._fill_spares()
                await self._recorder()
            finally:
                self._tg = None
                if self._spare_retry is not None:
                    self._spare_retry.cancel()

    async def shutdown(self, grace: float) -> None:
        """Stop every executor (calls in flight get `grace`), and record them STOPPED."""
        self._closing = True
        self._ready.clear()
        live = [t.current for t in self._tenants.values() if t.current and t.current.live]
        for ex in live:
            self._changed(ex.tenant)
        live += [ex for ex in self._spares if ex.live]
        await asyncio.gather(*(ex.stop(grace=grace, reason="shutdown") for ex in live))
        await self._write_rows()

    def _changed(self, tenant: str) -> None:
        self._dirty[tenant] = None
        self._metrics.set_executors({s.value: n for s, n in self.counts().items()})
        self._record.set()

    async def _recorder(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._record_every):
                    await self._record.wait()
            if not self._record.is_set():  # the periodic write: counters of live executors
                for name, t in self._tenants.items():
                    if t.current is not None and t.current.live:
                        self._dirty[name] = None
            self._record.clear()
            await self._write_rows()
            await asyncio.sleep(_RECORD_GAP)  # changes in a burst make one write

    async def _write_rows(self) -> None:
        dirty, self._dirty = self._dirty, {}
        now = self._clock.wall()
        rows = []
        for name in dirty:
            t = self._tenants.get(name)
            if t is None or t.current is None:
                continue
            v = self._view(name, t)
            rows.append(
                ExecutorRow(
                    worker_id=v.worker_id,
                    tenant=v.tenant,
                    pid=v.pid,
                    state=v.state.value,
                    started_at=v.started_at,
                    boot_ms=v.boot_ms,
                    dispatches=v.dispatches,
                    active_dispatch=v.active_dispatch,
                    crashes=v.crashes,
                    isolation=v.isolation,
                    stop_reason=v.stop_reason,
                    updated_at=now,
                )
            )
        spares, self._dirty_spares = self._dirty_spares, {}
        try:
            await self._store.executors.record_executors(rows)
            await self._store.executors.record_spares(list(spares.values()))
        except YokeError as exc:
            log.log(
                severity(exc), "recording %d executors failed: %s", len(rows) + len(spares), exc
            )
            for name in dirty:
                self._dirty.setdefault(name, None)
            for slot, row in spares.items():
                self._dirty_spares.setdefault(slot, row)


async def _changed(t: _Tenant) -> None:
    t.changed.clear()
    await t.changed.wait()


async def _guarded(coro: Coroutine[Any, Any, None]) -> None:
    """An executor's task: what goes wrong in it is logged, never raised into the pool."""
    try:
        await coro
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("an executor task failed")


__all__ = ["LIVE", "ExecutorPool", "ExecutorView"]
