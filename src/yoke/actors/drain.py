"""`QueueDrainScheduler`: claim the `actor_queues` rows of owned instances and run `process()`.

Two kernels decide, the store only records:

* one kernel per instance (docs/kernel.md, policies): `policy="fifo"`, lane = `group_id`, lane cap =
  `queue.concurrency`. Its `pop_next` yields the oldest event of a group with a free slot, so
  FIFO per group and the per-group cap hold by construction. In custom mode the actor's
  `select` chooses instead, among a group's pending events in the store and those held here:
  that pick is `custom_pick.py`'s, run by `picks.py` in a runner, one at a time per instance.
* one worker kernel, `policy="sfq"`, lane = tenant, global cap `YOKE_WORKER_CONCURRENCY`: among
  events their groups let start, it picks which run now, so one tenant's flood shares the
  worker's slots with the others instead of starving them.

Its parts are held by reference, each module saying what it owns: `claimer.py` claims rows in
batches (`FOR UPDATE SKIP LOCKED` on PostgreSQL) within each tenant's window and reads the
states of the instances a claim meets first; `holdings.py` keeps what is held here;
`dispatch.py` starts a call; `outcomes.py` acts on how it ended: completions are written in
batches by one flusher (group commit), so a completion is durable a moment after its slot is
reused and a crash in between re-runs that event (at-least-once); a throw is requeued in the
store with its backoff, or becomes a dead letter; `retry_timer.py` waits out the backoffs.
This module keeps the two kinds of slot: a retried event keeps its group slot while it waits
(nothing of its group overtakes it) and gives its worker slot back; and it runs the services,
the stats and the hand-over hooks.

Kernel state changes happen between awaits, never across one. The drain is event-driven: new
rows (`wake()`: an append here, a NOTIFY, boot), a freed slot, a due retry; the backup poll
only covers a missed NOTIFY.

This module must never name a store backend and reads time only through its `Clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any

from yoke.actors.claimer import Claimer
from yoke.actors.claims import ClaimWindows
from yoke.actors.completions import CompletionWriter
from yoke.actors.ctx import CtxHost
from yoke.actors.definitions import ActorRegistry
from yoke.actors.dispatch import Dispatch
from yoke.actors.drain_parts import Chore, DrainConfig, DrainStats, HeldInstance, Job
from yoke.actors.fairness import FairnessView, TenantTelemetry
from yoke.actors.holdings import Holdings
from yoke.actors.metrics import ActorMetrics
from yoke.actors.outcomes import Outcomes
from yoke.actors.picks import Picks
from yoke.actors.protocol import ActorStore
from yoke.actors.releases import Releases
from yoke.actors.retry_timer import RetryTimer
from yoke.actors.runner import InlineRunner, Runner
from yoke.actors.tenant_rules import TenantRules
from yoke.clock import Clock
from yoke.kernel import Kernel
from yoke.store.actor_records import InstanceRef


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
        self._calls: Runner = runner or InlineRunner(host)
        self._sends = self._calls.sends
        self._worker_id = worker_id
        self._clock = clock
        self._cfg = config or DrainConfig()
        self._metrics = metrics or ActorMetrics(None)
        self._wk = Kernel(policy="sfq", global_cap=self._cfg.concurrency)
        self._ready: asyncio.Queue[Job | Chore] = asyncio.Queue()
        self._retries = RetryTimer(clock)  # failed events waiting out their backoff
        self._completions: CompletionWriter[HeldInstance] = CompletionWriter(
            store,
            worker_id,
            clock=clock,
            batch_size=self._cfg.batch_size,
            retry=self._cfg.retry,
            on_fenced=self._refused,
            gather=self._cfg.complete_gather,
            linger=self._cfg.complete_linger,
            busy=lambda: bool(self._held.jobs),  # more will end: rows are held here
        )
        self._releases = Releases(  # rows whose executor is not running go back (releases.py)
            store,
            worker_id,
            clock=clock,
            batch_size=self._cfg.batch_size,
            retry=self._cfg.retry,
            crash_attempts=self._cfg.crash_attempts,
            stopping=self._stopping,
            on_free=lambda tenant: self._claimer.wake(),  # claimable again, if its executor runs
        )
        self._idle = asyncio.Event()
        # Set when a call of an instance being handed over ends, for `settle`.
        self._ended = asyncio.Event()
        self._windows = ClaimWindows(budget=self._cfg.concurrency * (1 + self._cfg.claim_depth))
        self._held = Holdings(  # what this worker holds (holdings.py)
            store=store,
            registry=registry,
            worker_id=worker_id,
            kernel=self._wk,
            windows=self._windows,
            idle_instances=self._cfg.idle_instances,
            undefined=lambda row: self._outcomes.undefined(row),
            unheld=self._unheld,
        )
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
        self._claimer = Claimer(  # the fetch loop (claimer.py)
            store=store,
            worker_id=worker_id,
            clock=clock,
            config=self._cfg,
            windows=self._windows,
            held=self._held,
            rules_ready=self._rules.ready,
            calls=self._calls,
            releases=self._releases,
            stopping=self._stopping,
            pump=self._pump,
        )
        self._telemetry = TenantTelemetry()
        self._metrics.track_fairness(self.fairness)
        self._pump_soon = False
        self._closing = False
        self._running = 0
        self._outcomes = Outcomes(  # what follows a call that ended (outcomes.py)
            store=store,
            worker_id=worker_id,
            clock=clock,
            config=self._cfg,
            stopping=self._stopping,
            held=self._held,
            completions=self._completions,
            releases=self._releases,
            metrics=self._metrics,
            telemetry=self._telemetry,
            chore=self._chore,
            end=self._end,
            hold=self._hold,
            again=self._again,
        )
        self._dispatch = Dispatch(  # how a call starts (dispatch.py)
            calls=self._calls,
            mark_solo=functools.partial(store.mark_solo, worker_id),
            clock=clock,
            config=self._cfg,
            rules=self._rules,
            releases=self._releases,
            telemetry=self._telemetry,
            outcomes=self._outcomes,
            hold=self._hold,
            end=self._end,
            again=self._again,
            cancelled=self._cancelled,
        )
        self._picks = Picks(  # custom mode's picks, one at a time per instance (picks.py)
            store=store,
            worker_id=worker_id,
            clock=clock,
            config=self._cfg,
            held=self._held,
            stopping=self._stopping,
            may_run=self._dispatch.may_run,
            chore=self._chore,
            start=self._start,
            pump=self._pump,
            ended=self._ended,
        )

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"QueueDrainScheduler(worker={self._worker_id!r}, held={s.held}, "
            f"running={s.running}, retrying={s.retrying}, processed={s.processed}, "
            f"errors={s.errors}, completing={s.completing})"
        )

    def stats(self) -> DrainStats:
        r, counts = self._releases.totals(), self._outcomes.counts
        return DrainStats(
            held=len(self._held.jobs),
            running=self._running,
            retrying=len(self._retries),
            completing=len(self._completions),
            instances=len(self._held.instances),
            **{k: n + r.get(k, 0) for k, n in counts.items() if k != "given_up"},
            given_up=counts["given_up"] + self._completions.given_up + r["given_up"],
            released=r["released"],
            crashed=r["crashed"],
        )

    def held_by_tenant(self) -> Counter[str]:
        """Claimed rows held here per tenant (queued, running or waiting for a retry)."""
        return Counter(job.row.tenant for job in self._held.jobs.values())

    def fairness(self, *, top: int = 10, visible: str | None = None) -> FairnessView:
        """Per-tenant fairness figures of this worker (`fairness.py`): the `top` tenants by
        backlog and `_other`, or `visible` alone."""
        backlog, oldest = self._held.waiting_by_tenant(self._clock.wall())
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
        inst = self._held.instances.get(ref)
        return 0 if inst is None else inst.kernel.running

    # -- hand-over hooks (`yoke.actors.fleet`) ---------------------------------------------
    def pause(self, ref: InstanceRef) -> None:
        """Start nothing more of `ref`: what is held here and not running is dropped (its rows
        stay claimed until the hand-over puts them back), rows claimed from now on are not
        held until `resume`, and a retry waiting for its backoff is dropped (its attempt is
        written)."""
        self._held.paused.add(ref)
        inst = self._held.instances.get(ref)
        if inst is not None:
            self._held.drop_queued(inst)
        for job in self._retries.drop(ref):
            self._held.release_group(job)

    def resume(self, ref: InstanceRef, epoch: int) -> None:
        """The hand-over of `ref`, owned here under `epoch` when it began, is over (moved,
        or cancelled and kept under a new epoch): rows claimed meanwhile under the new one are
        held now (`Holdings.resume`)."""
        if self._held.resume(ref, epoch, hold=not self._closing):
            self._after_stop()
        self._claimer.wake()

    def busy(self, ref: InstanceRef) -> bool:
        """Whether a call of `ref` still runs here (or a custom-mode pick is under way)."""
        return self._held.busy(ref)

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
        self._claimer.wake()

    async def run(self) -> None:
        """Run until cancelled: fetcher, completion flusher, retry timer and the runners."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._claimer.run(), name="yoke-drain-fetch")
            tg.create_task(self._completions.run(), name="yoke-drain-complete")
            tg.create_task(self._releases.writer.run(), name="yoke-drain-release")
            tg.create_task(self._retries.run(self._due, self._pump), name="yoke-drain-retry")
            tg.create_task(self._rules.run(), name="yoke-drain-tenant-settings")
            for i in range(self._cfg.concurrency):
                tg.create_task(self._runner(), name=f"yoke-drain-runner-{i}")

    async def shutdown(self, grace: float) -> None:
        """Stop claiming, let running calls finish (up to `grace` seconds), write completions."""
        self._closing = True
        self._completions.stop()
        self._releases.writer.stop()
        for inst in list(self._held.instances.values()):
            self._held.drop_queued(inst)
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
        self._outcomes.refused(owners)
        self._after_stop()

    # -- claiming --------------------------------------------------------------------------
    def refresh_settings(self) -> None:
        """Read the tenants' settings now (they were just changed here)."""
        self._rules.refresh()

    def _rules_changed(self) -> None:
        self._claimer.wake()  # the windows changed: claim
        self._after_stop()  # a raised cap may let queued events start

    # -- the pick ----------------------------------------------------------------------------
    def _pump(self) -> None:
        """Hand every event its group lets start to the worker kernel; start its picks."""
        self._pump_soon = False
        dirty, wk = self._held.dirty, self._wk
        while dirty:
            inst = next(iter(dirty))
            del dirty[inst]
            if inst.lost:
                continue
            if inst.custom:
                self._picks.want(inst)
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
            if not (sends and self._dispatch.send(job)):
                self._ready.put_nowait(job)

    def _chore(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """A store chore of one of the drain's parts, awaited by a runner in the TaskGroup."""
        self._ready.put_nowait(Chore(fn))

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

    async def dispatch_process(self, job: Job) -> None:
        """The actors specification's `dispatch_process`: run `process(ctx, event)` for one
        claimed event (`dispatch.py`)."""
        await self._dispatch.process(job)

    def _cancelled(self) -> None:
        self._running -= 1

    def _hold(self, job: Job, delay: float) -> None:
        """Run `job` again after `delay`: it keeps its group slot (its place, so nothing of its
        group overtakes it) and gives the worker slot back meanwhile."""
        self._running -= 1
        self._wk.release(job.row.queue_id)
        self._retries.add(job, delay)
        self._after_stop()

    def _end(self, job: Job) -> None:
        """The job is over here (done, dead or fenced): free both of its slots."""
        self._running -= 1
        if self._held.paused and job.inst.ref in self._held.paused:
            self._ended.set()  # `settle` looks again (only then: its look scans what is held)
        self._held.free(job)
        self._after_stop()

    def _unheld(self, job: Job | None) -> None:
        """A row is no longer held here; its tenant's window may want a claim now."""
        if not self._held.jobs:
            self._completions.nudge()  # nothing more will end soon: write what ended
        if job is not None:
            self._claimer.released(job.row.tenant)

    def _again(self, job: Job) -> None:
        """A job ended fenced: if its row was claimed here anew meanwhile, hold it afresh
        (`Holdings.again`)."""
        if not self._closing and self._held.again(job):
            self._after_stop()

    def _after_stop(self) -> None:
        if not self._running:
            self._idle.set()
        if not self._pump_soon:
            # One pump for every slot freed in this turn of the event loop.
            self._pump_soon = True
            asyncio.get_running_loop().call_soon(self._pump)
        self._claimer.freed()

    def _due(self, job: Job) -> None:
        """A retry's backoff is over: it waits for a worker slot again (its group slot was
        kept); a lost instance's is let go instead (held afresh if claimed here anew)."""
        if job.inst.lost:
            self._held.release_group(job)
            self._again(job)
            return
        self._wk.push(job.row.queue_id, job.row.tenant, seq=job.row.queue_id, payload=job)
