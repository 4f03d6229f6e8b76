"""`QueueDrainScheduler`: claim the `actor_queues` rows of owned instances and run `process()`.

Two kernels decide, the store only records:

* one kernel per instance (docs/kernel.md, policies): `policy="fifo"`, lane = `group_id`, lane cap =
  `queue.concurrency`. Its `pop_next` yields the oldest event of a group with a free slot, so
  FIFO per group and the per-group cap hold by construction. In custom mode the actor's
  `select` chooses instead, among a group's pending events in the store and those held here:
  that pick is `custom_pick.py`'s; this module runs it in a runner, one at a time per instance.
* one worker kernel, `policy="sfq"`, lane = tenant, global cap `YOKE_WORKER_CONCURRENCY`: among
  events their groups let start, it picks which run now, so one tenant's flood shares the
  worker's slots with the others instead of starving them.

Durability: rows are claimed in batches (`claim_next`, `FOR UPDATE SKIP LOCKED` on PostgreSQL)
up to a local prefetch window, and completions are written in batches by one flusher that
takes whatever finished while its previous statement ran (group commit). A completion is
therefore durable a moment after its slot is reused: a crash in between re-runs that event
(at-least-once, like every queue that acknowledges after the work). The states of the
instances a claim meets for the first time are read in one query too, before their events
start. A throw requeues the event in the store with its backoff (attempts and `available_at`,
so a takeover honours them) while it keeps its group slot, so a retried event keeps its place
and nothing of its group overtakes it; after `max_attempts` it becomes a dead letter. Those
writes, like completions, are retried until the store takes them (`retry.until_done`), the
group slot held meanwhile: a write given up would leave its row claimed, an event stuck in flight
that later events of its group overtake. Only a stopping drain gives them up, and then its
`stop_worker` (or a peer's takeover, or its restart) puts the rows back to pending.

Kernel state changes happen between awaits, never across one. The drain is event-driven: new
rows (`wake()`: an append here, a NOTIFY, boot), a freed slot, a due retry; the backup poll
only covers a missed NOTIFY.

This module must never name a store backend and reads time only through its `Clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
import logging
from collections import Counter, OrderedDict

from yoke.actors.claims import ClaimWindows
from yoke.actors.completions import CompletionWriter
from yoke.actors.ctx import CtxHost, Fenced, InstanceStateCell
from yoke.actors.custom_pick import CustomPicker, pickable
from yoke.actors.definitions import ActorRegistry
from yoke.actors.drain_parts import (
    Chore,
    DrainConfig,
    DrainStats,
    HeldInstance,
    Job,
    event_of,
    forget_one,
    items_of,
    next_attempt,
    queued_items,
    waiting_by_tenant,
)
from yoke.actors.failure_log import FailureLog
from yoke.actors.fairness import FairnessView, TenantTelemetry
from yoke.actors.metrics import ActorMetrics
from yoke.actors.protocol import ActorStore
from yoke.actors.releases import Releases
from yoke.actors.runner import ExecutorLost, InlineRunner, Runner, describe
from yoke.actors.tenant_rules import TenantRules
from yoke.clock import Clock
from yoke.errors import YokeError
from yoke.kernel import ItemState, Kernel
from yoke.retry import Backoff, until_done
from yoke.store.actor_records import ClaimedEvent, Completion, InstanceRef

log = logging.getLogger("yoke.actors.drain")


class QueueDrainScheduler:
    """Drains the instances this worker owns. Run `run()` as a task; `wake()` on new rows."""

    def __init__(
        self,
        *,
        store: ActorStore,
        registry: ActorRegistry,
        host: CtxHost,
        worker_id: str,
        clock: Clock,
        config: DrainConfig | None = None,
        metrics: ActorMetrics | None = None,
        runner: Runner | None = None,
    ) -> None:
        self._store = store
        self._registry = registry
        self._host = host
        self._calls: Runner = runner or InlineRunner(host)
        self._sends = self._calls.sends
        self._worker_id = worker_id
        self._clock = clock
        self._failure_log = FailureLog()
        self._cfg = config or DrainConfig()
        self._metrics = metrics or ActorMetrics(None)
        self._wk = Kernel(policy="sfq", global_cap=self._cfg.concurrency)
        self._instances: dict[InstanceRef, HeldInstance] = {}
        self._resting: OrderedDict[InstanceRef, None] = OrderedDict()
        self._jobs: dict[int, Job] = {}
        self._dirty: dict[HeldInstance, None] = {}
        self._ready: asyncio.Queue[Job | Chore] = asyncio.Queue()
        self._retries: list[tuple[float, int, Job]] = []
        self._retry_wake = asyncio.Event()
        self._wake = asyncio.Event()
        self._completions: CompletionWriter[HeldInstance] = CompletionWriter(
            store,
            worker_id,
            batch_size=self._cfg.batch_size,
            retry=self._cfg.retry,
            on_fenced=self._refused,
            gather=self._cfg.complete_gather,
            linger=self._cfg.complete_linger,
            busy=lambda: bool(self._jobs),  # more will end: rows are held here
        )
        self._releases = Releases(  # rows whose executor is not running go back (releases.py)
            store,
            worker_id,
            clock=clock,
            batch_size=self._cfg.batch_size,
            retry=self._cfg.retry,
            crash_attempts=self._cfg.crash_attempts,
            stopping=self._stopping,
            on_free=lambda tenant: self._wake.set(),  # claimable again, if its executor runs
        )
        self._idle = asyncio.Event()
        # Instances being handed over (`yoke.actors.fleet`): nothing more of theirs starts or
        # is held here; `_ended` is set when a call of one of them ends, for `settle`.
        self._paused: set[InstanceRef] = set()
        self._ended = asyncio.Event()
        self._more = False
        self._tenant_cursor = ""  # claims serve tenants in name order from here (wrapping)
        self._fair = self._cfg.claim == "fair"
        self._claiming = False  # a claim statement is in flight
        self._windows = ClaimWindows(budget=self._cfg.concurrency * (1 + self._cfg.claim_depth))
        self._rules = TenantRules(  # the tenants' stored weights and caps (tenant_rules.py)
            store=store,
            worker_id=worker_id,
            clock=clock,
            kernel=self._wk,
            windows=self._windows,
            poll=self._cfg.settings_poll,
            stale_after=self._cfg.stale_after,
            retry=self._cfg.retry,
            stopping=self._stopping,
            changed=self._rules_changed,
        )
        self._telemetry = TenantTelemetry()
        self._metrics.track_fairness(self.fairness)
        self._pump_soon = False
        self._closing = False
        self._running = 0
        self._counts = {"processed": 0, "errors": 0, "dead": 0, "fenced": 0, "given_up": 0}
        self._tie = itertools.count()
        self._picker: CustomPicker[HeldInstance, Job] = CustomPicker(
            store=store,
            worker_id=worker_id,
            clock=clock,
            window=self._cfg.select_window,
            retry=self._cfg.retry,
            stopping=self._stopping,
            hold=self._hold_here,
            start=self._start,
            decode=next_attempt,
        )

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"QueueDrainScheduler(worker={self._worker_id!r}, held={s.held}, "
            f"running={s.running}, retrying={s.retrying}, processed={s.processed}, "
            f"errors={s.errors}, completing={s.completing})"
        )

    def stats(self) -> DrainStats:
        r = self._releases.totals()
        return DrainStats(
            held=len(self._jobs),
            running=self._running,
            retrying=len(self._retries),
            completing=len(self._completions),
            instances=len(self._instances),
            **{k: n + r.get(k, 0) for k, n in self._counts.items() if k != "given_up"},
            given_up=self._counts["given_up"] + self._completions.given_up + r["given_up"],
            released=r["released"],
            crashed=r["crashed"],
        )

    def held_by_tenant(self) -> Counter[str]:
        """Claimed rows held here per tenant (queued, running or waiting for a retry)."""
        return Counter(job.row.tenant for job in self._jobs.values())

    def fairness(self, *, top: int = 10, visible: str | None = None) -> FairnessView:
        """Per-tenant fairness figures of this worker (`fairness.py`): the `top` tenants by
        backlog and `_other`, or `visible` alone."""
        backlog, oldest = waiting_by_tenant(self._jobs, self._wk, self._clock.wall())
        return self._telemetry.view(
            backlog=backlog,
            oldest=oldest,
            weights=self._rules.weights,
            top=top,
            visible=visible,
        )

    def releasing(self, tenant: str) -> bool:
        """Whether rows of `tenant` are being put back to pending right now."""
        return self._releases.busy(tenant)

    def in_flight(self, ref: InstanceRef) -> int:
        inst = self._instances.get(ref)
        return 0 if inst is None else inst.kernel.running

    # -- hand-over hooks (`yoke.actors.fleet`) ---------------------------------------------
    def pause(self, ref: InstanceRef) -> None:
        """Start nothing more of `ref`: what is held here and not running is dropped (its rows
        stay claimed until the hand-over puts them back), rows claimed from now on are not
        held, and a retry waiting for its backoff is dropped (its attempt is written)."""
        self._paused.add(ref)
        inst = self._instances.get(ref)
        if inst is not None:
            self._drop_queued(inst)
        kept = [r for r in self._retries if r[2].inst.ref != ref]
        if len(kept) != len(self._retries):
            for _, _, job in self._retries:
                if job.inst.ref == ref:
                    self._release_group(job)
            heapq.heapify(kept)
            self._retries = kept

    def resume(self, ref: InstanceRef) -> None:
        """The hand-over of `ref` is over (moved, or cancelled and kept under a new epoch)."""
        self._paused.discard(ref)
        self._wake.set()

    def busy(self, ref: InstanceRef) -> bool:
        """Whether a call of `ref` still runs here (or a custom-mode pick is under way)."""
        inst = self._instances.get(ref)
        if inst is not None and inst.picking:
            return True
        return any(job.inst.ref == ref for job in self._jobs.values())

    async def settle(self, ref: InstanceRef, timeout: float) -> bool:
        """Wait until nothing of `ref` runs here, at most `timeout` seconds; then write every
        completion made so far. False if calls still ran at the deadline."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while self.busy(ref):
                    self._ended.clear()
                    await self._ended.wait()
        idle = not self.busy(ref)
        await self.flush()
        return idle

    # -- services --------------------------------------------------------------------------
    def wake(self) -> None:
        """New rows may be waiting for this worker (an append, a NOTIFY, a takeover)."""
        self._wake.set()

    async def run(self) -> None:
        """Run until cancelled: fetcher, completion flusher, retry timer and the runners."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._fetch_loop(), name="yoke-drain-fetch")
            tg.create_task(self._completions.run(), name="yoke-drain-complete")
            tg.create_task(self._releases.writer.run(), name="yoke-drain-release")
            tg.create_task(self._retry_loop(), name="yoke-drain-retry")
            tg.create_task(self._rules.run(), name="yoke-drain-tenant-settings")
            for i in range(self._cfg.concurrency):
                tg.create_task(self._runner(), name=f"yoke-drain-runner-{i}")

    async def shutdown(self, grace: float) -> None:
        """Stop claiming, let running calls finish (up to `grace` seconds), write completions."""
        self._closing = True
        self._completions.stop()
        self._releases.writer.stop()
        for inst in list(self._instances.values()):
            self._drop_queued(inst)
        if self._running:
            self._idle.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    while self._running:
                        await self._idle.wait()
                        self._idle.clear()
        await self.flush()

    async def flush(self) -> None:
        """Write every completion (and release) made so far, including a batch being retried
        right now (used at shutdown and by tests)."""
        await self._completions.flush()
        await self._releases.writer.flush()

    def _stopping(self) -> bool:
        return self._closing

    def _refused(self, owners: list[HeldInstance]) -> None:
        """The store refused these completions: their instances belong to another worker
        now. What this worker holds of them and has not started is dropped (the new owner runs
        it); left alone it would run here too, its effects (emit, schedule) made twice."""
        self._counts["fenced"] += len(owners)
        for inst in dict.fromkeys(owners):
            if not inst.lost:
                log.warning(
                    "lost instance %s/%s: its completions were refused",
                    inst.ref.actor,
                    inst.ref.instance_id,
                )
                self._drop_queued(inst)
        self._after_stop()

    # -- claiming --------------------------------------------------------------------------
    def _room(self) -> int:
        if self._fair:  # each tenant's window bounds its own rows (`ClaimWindows.quota`)
            return self._cfg.batch_size
        return self._cfg.prefetch + self._cfg.concurrency - len(self._jobs)

    def refresh_settings(self) -> None:
        """Read the tenants' settings now (they were just changed here)."""
        self._rules.refresh()

    def _rules_changed(self) -> None:
        self._wake.set()  # the windows changed: claim
        self._after_stop()  # a raised cap may let queued events start

    async def _fetch_loop(self) -> None:
        backoff = Backoff(self._cfg.retry)
        await self._rules.ready.wait()  # no event of a capped tenant starts uncounted
        self._wake.set()  # boot: whatever is already waiting
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._cfg.poll_interval):
                    await self._wake.wait()
            self._wake.clear()
            try:
                while not self._closing and (room := self._room()) > 0:
                    limit = min(room, self._cfg.batch_size)
                    tenants = self._claimable()
                    if tenants is not None and not tenants:
                        self._more = False  # no tenant can run now: a READY executor wakes us
                        break
                    self._claiming = True
                    try:
                        rows = await self._store.claim_next(
                            self._worker_id,
                            limit=limit,
                            now=self._clock.wall(),
                            after_tenant=self._tenant_cursor,
                            tenants=tenants,
                            quota=self._windows.quota if self._fair else None,
                        )
                    finally:
                        self._claiming = False
                    if self._fair:
                        # Each tenant took what its window has room for. A tenant that filled
                        # it is claimed again when a quarter is free (`_unhold`, or here if
                        # that happened during this claim); otherwise claim until a claim is
                        # empty, so a wake ends asleep (a claim racing an append may have
                        # missed its rows).
                        met = self._windows.claimed(r.tenant for r in rows)
                        self._more = (bool(rows) and not self._windows.filled) or (
                            self._windows.hungry()
                        )
                        if len(met) >= limit:  # more tenants wait: the next claim goes on
                            self._tenant_cursor = met[-1]
                    else:
                        # A claim shares its rows between tenants, so a short one does not
                        # mean the queue is empty: only an empty claim does.
                        self._more = bool(rows)
                    if rows:
                        if not self._fair:
                            cursor = self._tenant_cursor
                            self._tenant_cursor = max(
                                (r.tenant for r in rows if r.tenant > cursor), default=""
                            )
                        fresh = self._accept(rows)
                        if fresh:
                            await self._load_states(fresh)
                        self._pump()
                    if not self._more:
                        break
                backoff.ok()
            except YokeError as exc:
                pause = backoff.failed()
                log.warning("claiming actor events failed (retrying in %.2fs): %s", pause, exc)
                await asyncio.sleep(pause)
                self._wake.set()

    def _claimable(self) -> list[str] | None:
        """Tenants a claim may take now (None: all): runnable, none of their rows going back."""
        ready = self._calls.claimable()
        if ready is None:
            return None
        return [t for t in ready if not self._releases.busy(t)]

    def _accept(self, rows: list[ClaimedEvent]) -> list[HeldInstance]:
        """Hold the claimed rows here. Returns the instances new here: their events wait (not
        dirty yet) until `_load_states` has read their states."""
        fresh: dict[HeldInstance, None] = {}
        for row in rows:
            if row.ref in self._paused:
                continue  # being handed over: the hand-over puts the row back to pending
            # A row held here already is claimed again under a newer epoch (we lost the
            # instance and took it back): the instance of the old epoch is lost, and what it
            # held but had not started is dropped (`_instance_for`), so the row is held afresh.
            inst = self._instance_for(row)
            held = self._jobs.get(row.queue_id)
            if held is not None:
                # Its old run is under way or waits for its retry: a success completes it under
                # the new epoch; if it is fenced instead, `_again` holds the row afresh.
                held.row = row
                continue
            if inst is None:
                continue
            self._hold_here(inst, row)
            if inst.cell.loaded:
                self._dirty[inst] = None
            else:
                fresh[inst] = None
        return list(fresh)

    def _hold_here(self, inst: HeldInstance, row: ClaimedEvent) -> Job:
        """A claimed row joins its group in the instance's kernel (queued there)."""
        job = Job(row, inst, next_attempt(row))
        self._jobs[row.queue_id] = job
        self._windows.held(row.tenant)
        k, g = inst.kernel, row.group_id
        n = inst.groups.get(g, 0)
        if not n:
            k.set_lane_cap(g, inst.cap)
        inst.groups[g] = n + 1
        k.push(row.queue_id, g, seq=row.queue_id, payload=job)
        return job

    async def _load_states(self, fresh: list[HeldInstance]) -> None:
        """One read for the states of the instances a claim met first, instead of one per
        instance from the runners: a burst of new instances would otherwise queue that many
        reads in the store's pool ahead of everything else (the timer loop's firings too)."""
        try:
            states = await self._store.get_states([inst.ref for inst in fresh])
        except YokeError as exc:  # each runner loads (and retries) its own instance instead
            log.warning("loading the states of %d instances failed: %s", len(fresh), exc)
            states = {}
        for inst in fresh:
            row = states.get(inst.ref)
            if row is not None:
                inst.cell.prime(row)
            if not inst.lost:
                self._dirty[inst] = None

    def _instance_for(self, row: ClaimedEvent) -> HeldInstance | None:
        ref = row.ref
        inst = self._instances.get(ref)
        if inst is not None and not inst.lost and inst.cell.epoch == row.epoch:
            self._resting.pop(ref, None)
            return inst
        actor = self._registry.get(row.actor)
        if actor is None:
            log.warning(
                "no actor %r is defined in this worker; its event %d waits", row.actor, row.queue_id
            )
            self._spawn_requeue(row, "actor not defined in this worker")
            return None
        if inst is not None:
            self._drop_queued(inst)  # an older epoch: what it still holds is fenced
        cell = InstanceStateCell(self._store, ref, worker_id=self._worker_id, epoch=row.epoch)
        inst = HeldInstance(actor, cell)
        self._instances[ref] = inst
        return inst

    def _spawn_requeue(self, row: ClaimedEvent, why: str) -> None:
        at = self._clock.wall() + self._cfg.poll_interval
        comp = Completion(queue_id=row.queue_id, epoch=row.epoch)

        async def put_back() -> None:
            # The row stays claimed either way (a requeue keeps its place); what is written is
            # its attempt and `available_at`, which a worker taking the instance over honours.
            await until_done(
                lambda: self._store.requeue(self._worker_id, comp, available_at=at, error=why),
                what=f"putting back event {row.queue_id}",
                policy=self._cfg.retry,
                stopping=self._stopping,
                log=log,
            )

        self._ready.put_nowait(Chore(put_back))

    # -- the pick ----------------------------------------------------------------------------
    def _pump(self) -> None:
        """Hand every event its group lets start to the worker kernel; start its picks."""
        self._pump_soon = False
        dirty, wk = self._dirty, self._wk
        while dirty:
            inst = next(iter(dirty))
            del dirty[inst]
            if inst.lost:
                continue
            if inst.custom:
                self._want_pick(inst)
            else:
                k = inst.kernel
                while (it := k.pop_next()) is not None:
                    held: Job = it.payload  # type: ignore[assignment]
                    wk.push(held.row.queue_id, held.row.tenant, seq=held.row.queue_id, payload=held)
        if self._closing:
            return
        sends = self._sends
        while (it := wk.pop_next()) is not None:
            self._running += 1
            job: Job = it.payload  # type: ignore[assignment]
            if not (sends and self._send(job)):
                self._ready.put_nowait(job)

    # -- custom mode ---------------------------------------------------------------------------
    def _want_pick(self, inst: HeldInstance) -> None:
        """A custom-mode instance may start more: pick in a runner, as the pick reads the store."""
        if inst.picking:
            inst.repick = True
        elif not (self._closing or inst.lost) and self._may_run(inst.ref.tenant) and pickable(inst):
            inst.picking = True
            self._ready.put_nowait(Chore(functools.partial(self._pick, inst)))

    async def _pick(self, inst: HeldInstance) -> None:
        """One pick, in a runner; a failed pick returns its pause and the timer is set here."""
        try:
            pause = await self._picker.pick(inst)
        finally:
            inst.picking = False
            if inst.ref in self._paused:
                self._ended.set()
        if pause is not None:  # the store is down: look again after a pause
            asyncio.get_running_loop().call_later(pause, self._look_again, inst)

    def _look_again(self, inst: HeldInstance) -> None:
        if not inst.lost:
            self._dirty[inst] = None
            self._pump()

    def _start(self, job: Job) -> None:
        """A picked job, claimed in its instance's kernel, waits for a worker slot."""
        self._wk.push(job.row.queue_id, job.row.tenant, seq=job.row.queue_id, payload=job)
        self._pump()

    # -- running -----------------------------------------------------------------------------
    async def _runner(self) -> None:
        while True:
            job = await self._ready.get()
            if isinstance(job, Chore):
                await job.fn()
                continue
            await self.dispatch_process(job)

    def _may_run(self, tenant: str) -> bool:
        return not self._releases.busy(tenant) and self._calls.ready(tenant)

    async def dispatch_process(self, job: Job) -> None:
        """The actors specification's `dispatch_process`: run `process(ctx, event)` for one
        claimed event."""
        inst = job.inst
        cell = inst.cell
        if not self._may_run(job.row.tenant):
            self._release(job)
            return
        if not cell.loaded:
            try:
                await cell.load()
            except Fenced as exc:
                self._lost(inst, exc)
                self._end(job)
                self._again(job)
                return
            except YokeError as exc:  # the store is down: not the event's fault, no attempt
                log.warning("loading the state of %s failed; retrying: %s", inst.ref, exc)
                self._hold(job, self._cfg.retry.first)
                return
        tenant = job.row.tenant
        capped = tenant in self._rules.caps
        if capped and not await self._rules.take(tenant):
            self._hold(job, self._cfg.cap_retry)  # keeps its group slot: FIFO holds
            return
        if not job.failures and not job.row.attempts:  # its first start: the wait it had
            self._telemetry.started(tenant, self._clock.wall() - job.row.appended_at)
        try:
            try:
                await self._calls.run(inst.actor, cell, job.event)
            finally:
                if capped:
                    await self._rules.free(tenant)
        except asyncio.CancelledError:
            self._running -= 1
            raise
        except Exception as exc:
            await self._ended_with(job, exc)
            return
        self._succeeded(job)

    def _send(self, job: Job) -> bool:
        """A runner that `sends` (executor processes) takes a call that can start at once from
        here, without a runner task: `_sent` is told how it ended, for all the results of an
        executor's frame in one pass. What needs an await first (a state to load, a capped
        tenant's fleet-wide count, rows of the tenant going back) goes to a runner instead."""
        inst, tenant = job.inst, job.row.tenant
        if not inst.cell.loaded or tenant in self._rules.caps or self._releases.busy(tenant):
            return False
        done = functools.partial(self._sent, job)
        if not self._calls.send(inst.actor, inst.cell, job.event, done):
            return False
        if not job.failures and not job.row.attempts:  # its first start: the wait it had
            self._telemetry.started(tenant, self._clock.wall() - job.row.appended_at)
        return True

    def _sent(self, job: Job, error: BaseException | None) -> None:
        if error is None:
            self._succeeded(job)
        elif not self._ended_at_once(job, error):  # a write to the store first: in a runner
            self._ready.put_nowait(Chore(functools.partial(self._ended_with, job, error)))

    def _succeeded(self, job: Job) -> None:
        inst = job.inst
        self._counts["processed"] += 1
        self._metrics.processed(inst.actor.name)
        self._telemetry.processed(job.row.tenant)
        self._completions.add(job.completion, inst)
        self._end(job)

    def _ended_at_once(self, job: Job, error: BaseException) -> bool:
        """The call of `job` raised `error`: True if what follows needs no await (fenced, or
        its executor lost without a charge: the row goes back at no cost), done here."""
        if isinstance(error, Fenced):
            self._lost(job.inst, error)
            self._end(job)
            self._again(job)
            return True
        if isinstance(error, ExecutorLost) and not error.charge:
            self._release(job)
            return True
        return False

    async def _ended_with(self, job: Job, error: BaseException) -> None:
        """The call of `job` raised `error`: fenced, its executor lost, or process() failed."""
        if self._ended_at_once(job, error):
            return
        if isinstance(error, ExecutorLost):  # charged: it ran alone, or past its deadline
            await self._crashed(job, error.reason)
        else:
            await self._failed(job, error)

    async def _failed(self, job: Job, error: BaseException) -> None:
        inst = job.inst
        self._counts["errors"] += 1
        self._metrics.failed(inst.actor.name)
        job.failures += 1
        failures = job.row.attempts + job.failures
        text = describe(error)
        backoff = inst.actor.backoff
        delay = None if backoff.exhausted(failures) else backoff.delay(failures)
        self._failure_log.failed(
            inst.ref, failures, error, retry_in=delay, now=self._clock.monotonic()
        )
        if delay is None:
            # Its group slot stays held until the store takes the dead letter: FIFO holds.
            stored = await until_done(
                lambda: self._store.dead_letter(
                    self._worker_id, job.completion, error=text, now=self._clock.wall()
                ),
                what=f"recording dead letter {job.row.queue_id}",
                policy=self._cfg.retry,
                stopping=self._stopping,
                log=log,
            )
            if stored is None:
                self._counts["given_up"] += 1
            elif stored[0]:
                self._counts["dead"] += 1
            elif stored[1] == 1:  # refused at once: fenced (on a retry, maybe our own write)
                self._counts["fenced"] += 1
            self._end(job)
            return
        # Written before the retry runs, so that a takeover meanwhile honours the attempt and
        # the backoff; the group slot stays held until then (nothing of its group overtakes).
        stored = await until_done(
            lambda: self._store.requeue(
                self._worker_id, job.completion, available_at=self._clock.wall() + delay, error=text
            ),
            what=f"recording the retry of event {job.row.queue_id}",
            policy=self._cfg.retry,
            stopping=self._stopping,
            log=log,
        )
        if stored is None:  # stopping: stop_worker puts the row back to pending
            self._counts["given_up"] += 1
            self._end(job)
            return
        # A retried requeue whose first attempt was written is taken again (the row stays
        # claimed): it counts one attempt more, never a refusal.
        if not stored[0]:
            self._lost(inst, Fenced("requeue refused"))
            self._end(job)
            return
        job.event = event_of(job.row, attempt=failures + 1)
        self._hold(job, delay)

    def _release(self, job: Job) -> None:
        """No running executor: the row goes back to pending at no cost, then the rest of its
        group in turn (the tenant is busy meanwhile), in order, before any is claimed again."""
        self._releases.release(job.completion, job.row.tenant)
        self._end(job)

    async def _crashed(self, job: Job, reason: str) -> None:
        """Its executor died running it alone (or past its deadline): a crash attempt counts."""
        what = f"actor {job.inst.actor.name!r} event {job.row.queue_id}"
        await self._releases.charge(job.completion, job.row.tenant, reason, what=what)
        self._end(job)

    def _hold(self, job: Job, delay: float) -> None:
        """Run `job` again after `delay`: it keeps its group slot (its place, so nothing of its
        group overtakes it) and gives the worker slot back meanwhile."""
        self._running -= 1
        self._wk.release(job.row.queue_id)
        heapq.heappush(self._retries, (self._clock.monotonic() + delay, next(self._tie), job))
        self._retry_wake.set()
        self._after_stop()

    def _end(self, job: Job) -> None:
        """The job is over here (done, dead or fenced): free both of its slots."""
        self._running -= 1
        qid = job.row.queue_id
        self._unhold(qid)
        if self._paused and job.inst.ref in self._paused:
            self._ended.set()  # `settle` looks again (only then: its look scans what is held)
        if self._wk.get(qid) is not None:
            self._wk.release(qid)
        inst = job.inst
        k = inst.kernel
        it = k.get(qid)
        if it is not None and it.state is ItemState.RUNNING:
            k.release(qid)
            forget_one(inst, job.row.group_id)
        if not inst.lost:
            self._dirty[inst] = None
            if not inst.groups:
                self._rest(inst)
        elif k.running == 0 and self._instances.get(inst.ref) is inst:
            del self._instances[inst.ref]
        self._after_stop()

    def _unhold(self, qid: int) -> None:
        """The row is no longer held here; its tenant's window may want a claim now."""
        job = self._jobs.pop(qid, None)
        if not self._jobs:
            self._completions.nudge()  # nothing more will end soon: write what ended
        if job is None or not self._windows.released(job.row.tenant) or not self._fair:
            return
        # During a claim, the claim itself looks again when it ends (`hungry`): a wake per
        # release meanwhile would make the next claims as small as what ran during this one.
        if not self._claiming:
            self._wake.set()

    def _again(self, job: Job) -> None:
        """A job ended fenced, but its row was claimed here again under a newer epoch while it
        was held (`_accept`): hold the row afresh, for the instance of that epoch. Left alone,
        it would stay claimed by this worker, which claims pending rows only: in flight for
        good (until the worker stops)."""
        row = job.row
        if row.epoch == job.inst.cell.epoch or row.queue_id in self._jobs or self._closing:
            return
        for inst in self._accept([row]):
            self._dirty[inst] = None  # not loaded yet: its runner loads the state
        self._after_stop()

    def _rest(self, inst: HeldInstance) -> None:
        """An instance that holds nothing here keeps its cached state for a while; the
        least recently used ones beyond `idle_instances` are forgotten (memory stays bounded)."""
        resting = self._resting
        resting[inst.ref] = None
        resting.move_to_end(inst.ref)
        while len(resting) > self._cfg.idle_instances:
            ref, _ = resting.popitem(last=False)
            old = self._instances.get(ref)
            if old is not None and not old.groups:
                del self._instances[ref]

    def _after_stop(self) -> None:
        if not self._running:
            self._idle.set()
        if not self._pump_soon:
            # One pump for every slot freed in this turn of the event loop.
            self._pump_soon = True
            asyncio.get_running_loop().call_soon(self._pump)
        if self._more and self._room() >= self._cfg.batch_size // 2:
            self._more = False
            self._wake.set()

    async def _retry_loop(self) -> None:
        while True:
            timeout = None
            if self._retries:
                timeout = max(0.0, self._retries[0][0] - self._clock.monotonic())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._retry_wake.wait()
            self._retry_wake.clear()
            now = self._clock.monotonic()
            while self._retries and self._retries[0][0] <= now:
                _, _, job = heapq.heappop(self._retries)
                if job.inst.lost:
                    self._release_group(job)
                    self._again(job)
                    continue
                self._wk.push(job.row.queue_id, job.row.tenant, seq=job.row.queue_id, payload=job)
            self._pump()

    def _release_group(self, job: Job) -> None:
        qid = job.row.queue_id
        self._unhold(qid)
        k = job.inst.kernel
        it = k.get(qid)
        if it is not None and it.state is ItemState.RUNNING:
            k.release(qid)
            forget_one(job.inst, job.row.group_id)

    # -- ownership lost --------------------------------------------------------------------
    def _lost(self, inst: HeldInstance, exc: BaseException) -> None:
        if not inst.lost:
            log.warning("lost instance %s/%s: %s", inst.ref.actor, inst.ref.instance_id, exc)
            self._counts["fenced"] += 1
        self._drop_queued(inst)

    def _drop_queued(self, inst: HeldInstance) -> None:
        """Forget what an instance holds here but has not started: its new owner runs it."""
        inst.lost = True
        self._dirty.pop(inst, None)
        for it in queued_items(inst.kernel):
            inst.kernel.cancel(it.id)
            self._unhold(it.id)  # type: ignore[arg-type]
            forget_one(inst, it.lane)  # type: ignore[arg-type]
        for it in list(items_of(self._wk, inst)):
            if it.state is ItemState.QUEUED:
                self._wk.cancel(it.id)
                self._unhold(it.id)  # type: ignore[arg-type]
                k = inst.kernel
                if k.get(it.id) is not None:
                    k.release(it.id)
                    forget_one(inst, it.payload.row.group_id)  # type: ignore[attr-defined]
