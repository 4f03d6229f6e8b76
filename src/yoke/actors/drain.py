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

What the drain holds and every decision about it is `DrainCore`'s (`drain_core.py`: both
kernels, the claimed rows per instance and group, the claim windows, the retries' due times, the
slots, the instances paused by a move, the tenants' local caps): a synchronous core whose
methods are the drain's events and return actions. This module is its async shell: it feeds the
core the events and performs the actions (`_perform`), and runs the services, the stats and the
hand-over hooks. The I/O is done by parts held by reference: `claimer.py` claims rows in batches
(`FOR UPDATE SKIP LOCKED` on PostgreSQL) within each tenant's window and reads the states of the
instances a claim meets first; `dispatch.py` starts a call; `outcomes.py` acts on how it ended
and returns the call's verdict (`CallEnded`), which this shell hands to the core (`_settle`: no
other part touches a slot): completions are written in batches by one flusher (group commit), so
a completion is durable a moment after its slot is reused and a crash in between re-runs that
event (at-least-once); a throw is requeued in the store with its backoff, or becomes a dead
letter, and the retry waits in the core (its group slot kept, its worker slot given back).

Core state changes happen between awaits, never across one. The drain is event-driven: new
rows (`wake()`: an append here, a NOTIFY, boot), a freed slot, a due retry; the backup poll
only covers a missed NOTIFY.

This module must never name a store backend and reads time only through its `Clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import Counter

from yoke.actors.claimer import Claimer
from yoke.actors.completions import CompletionWriter
from yoke.actors.ctx import CtxHost, InstanceStateCell
from yoke.actors.definitions import ActorRegistry
from yoke.actors.dispatch import Dispatch
from yoke.actors.drain_core import Action, DrainCore, LoadStates, Pick, PutBack, Signal
from yoke.actors.drain_parts import (
    CallEnded,
    Chore,
    ChoreFn,
    DrainConfig,
    DrainStats,
    HeldInstance,
    Job,
    Verdict,
)
from yoke.actors.fairness import FairnessView, TenantTelemetry
from yoke.actors.metrics import ActorMetrics
from yoke.actors.outcomes import Outcomes
from yoke.actors.picks import Picks
from yoke.actors.protocol import ActorStore
from yoke.actors.releases import Releases
from yoke.actors.runner import InlineRunner, Runner
from yoke.actors.tenant_rules import TenantRules
from yoke.clock import Clock
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
        self._core = DrainCore(  # what this worker holds, and every decision about it
            actors=registry,
            cell_for=lambda ref, epoch: InstanceStateCell(
                store, ref, worker_id=worker_id, epoch=epoch
            ),
            concurrency=self._cfg.concurrency,
            budget=self._cfg.concurrency * (1 + self._cfg.claim_depth),
            idle_instances=self._cfg.idle_instances,
        )
        self._ready: asyncio.Queue[Job | Chore] = asyncio.Queue()
        self._retry_wake = asyncio.Event()  # a retry was added: its timer looks again
        self._completions: CompletionWriter[HeldInstance] = CompletionWriter(
            store,
            worker_id,
            clock=clock,
            batch_size=self._cfg.batch_size,
            retry=self._cfg.retry,
            on_fenced=self._refused,
            gather=self._cfg.complete_gather,
            linger=self._cfg.complete_linger,
            busy=lambda: bool(self._core.jobs),  # more will end: rows are held here
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
        self._rules = TenantRules(  # the tenants' stored weights and caps (tenant_rules.py)
            store=store,
            worker_id=worker_id,
            clock=clock,
            poll=self._cfg.settings_poll,
            stale_after=self._cfg.stale_after,
            retry=self._cfg.retry,
            stopping=self._stopping,
            changed=self._settings_changed,
        )
        self._claimer = Claimer(  # the fetch loop (claimer.py)
            store=store,
            worker_id=worker_id,
            clock=clock,
            config=self._cfg,
            core=self._core,
            rules_ready=self._rules.ready,
            calls=self._calls,
            releases=self._releases,
            stopping=self._stopping,
            perform=self._perform,
            pump=self._pump,
        )
        self._telemetry = TenantTelemetry()
        self._metrics.track_fairness(self.fairness)
        self._pump_soon = False
        self._outcomes = Outcomes(  # what follows a call that ended (outcomes.py)
            store=store,
            worker_id=worker_id,
            clock=clock,
            config=self._cfg,
            stopping=self._stopping,
            completions=self._completions,
            releases=self._releases,
            metrics=self._metrics,
            telemetry=self._telemetry,
            chore=self._chore,
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
        )
        self._picks = Picks(  # custom mode's picks, one at a time per instance (picks.py)
            store=store,
            worker_id=worker_id,
            clock=clock,
            config=self._cfg,
            core=self._core,
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
        r, counts, core = self._releases.totals(), self._outcomes.counts, self._core
        return DrainStats(
            held=len(core.jobs),
            running=core.running,
            retrying=core.retrying,
            completing=len(self._completions),
            instances=len(core.instances),
            **{k: n + r.get(k, 0) for k, n in counts.items() if k != "given_up"},
            given_up=counts["given_up"] + self._completions.given_up + r["given_up"],
            released=r["released"],
            crashed=r["crashed"],
        )

    def held_by_tenant(self) -> Counter[str]:
        """Claimed rows held here per tenant (queued, running or waiting for a retry)."""
        return self._core.held_by_tenant()

    def fairness(self, *, top: int = 10, visible: str | None = None) -> FairnessView:
        """Per-tenant fairness figures of this worker (`fairness.py`): the `top` tenants by
        backlog and `_other`, or `visible` alone."""
        backlog, oldest = self._core.waiting_by_tenant(self._clock.wall())
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
        return self._core.in_flight(ref)

    # -- hand-over hooks (`yoke.actors.fleet`) ---------------------------------------------
    def pause(self, ref: InstanceRef) -> None:
        """Start nothing more of `ref`: what is held here and not running is dropped (its rows
        stay claimed until the hand-over puts them back), rows claimed from now on are not
        held until `resume`, and a retry waiting for its backoff is dropped (its attempt is
        written)."""
        self._perform(self._core.pause(ref))

    def resume(self, ref: InstanceRef, epoch: int) -> None:
        """The hand-over of `ref`, owned here under `epoch` when it began, is over (moved,
        or cancelled and kept under a new epoch): rows claimed meanwhile under the new one are
        held now (`DrainCore.resume`)."""
        self._perform(self._core.resume(ref, epoch))

    def busy(self, ref: InstanceRef) -> bool:
        """Whether a call of `ref` still runs here (or a custom-mode pick is under way)."""
        return self._core.busy(ref)

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
            tg.create_task(self._retry_timer(), name="yoke-drain-retry")
            tg.create_task(self._rules.run(), name="yoke-drain-tenant-settings")
            for i in range(self._cfg.concurrency):
                tg.create_task(self._runner(), name=f"yoke-drain-runner-{i}")

    async def shutdown(self, grace: float) -> None:
        """Stop claiming, let running calls finish (up to `grace` seconds), write completions."""
        self._completions.stop()
        self._releases.writer.stop()
        self._perform(self._core.stop())
        if self._core.running:
            self._idle.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    while self._core.running:
                        await self._idle.wait()
                        self._idle.clear()
        await self.flush()

    async def flush(self) -> None:
        """Write every completion (and release) made so far, including a batch being retried
        right now (used at shutdown and by tests)."""
        await self._completions.flush()
        await self._releases.writer.flush()

    def _stopping(self) -> bool:
        return self._core.closing

    def _refused(self, owners: list[HeldInstance]) -> None:
        for inst in self._outcomes.refused(owners):
            self._perform(self._core.lost(inst))
        self._after_stop()

    # -- claiming --------------------------------------------------------------------------
    def refresh_settings(self) -> None:
        """Read the tenants' settings now (they were just changed here)."""
        self._rules.refresh()

    def _settings_changed(self, weights: dict[str, float], caps: dict[str, int]) -> None:
        self._perform(self._core.set_weights(weights))
        self._perform(self._core.set_caps(caps))

    # -- the core's actions ------------------------------------------------------------------
    def _perform(self, actions: list[Action]) -> None:
        """Do what the core asked for, in its order."""
        for action in actions:
            if action.__class__ is Job:
                self._run(action)
            elif action is Signal.FREED:
                self._after_stop()
            elif action is Signal.REFILL:
                self._claimer.refill()
            elif action is Signal.NUDGE:
                self._completions.nudge()  # nothing more will end soon: write what ended
            elif action is Signal.WAKE:
                self._claimer.wake()
            elif action is Signal.SETTLED:
                self._ended.set()  # `settle` looks again
            elif isinstance(action, Pick):
                self._picks.want(action.inst)
            elif isinstance(action, PutBack):
                self._outcomes.undefined(action.row)
            elif isinstance(action, LoadStates):  # only from `claimed`, which the claimer does
                raise AssertionError("LoadStates is the claimer's to perform")

    def _run(self, job: Job) -> None:
        """The worker kernel started `job` (its slot counted): send it, or hand it a runner."""
        if not (self._sends and self._dispatch.send(job, self._settle)):
            self._ready.put_nowait(job)

    # -- the pick ----------------------------------------------------------------------------
    def _pump(self) -> None:
        """Hand every event its group lets start to the worker kernel; start its picks."""
        self._pump_soon = False
        self._perform(self._core.pump())

    def _chore(self, fn: ChoreFn) -> None:
        """A store chore of one of the drain's parts, awaited by a runner in the TaskGroup."""
        self._ready.put_nowait(Chore(fn))

    def _start(self, job: Job) -> None:
        """A picked job, claimed in its instance's kernel, waits for a worker slot."""
        self._core.start(job)
        self._pump()

    # -- running -----------------------------------------------------------------------------
    async def _runner(self) -> None:
        while True:
            job = await self._ready.get()
            if isinstance(job, Chore):
                ended = await job.fn()
                if ended is not None:
                    self._settle(ended)
                continue
            await self.dispatch_process(job)

    async def dispatch_process(self, job: Job) -> None:
        """The actors specification's `dispatch_process`: run `process(ctx, event)` for one
        claimed event (`dispatch.py`), and hand its verdict to the core."""
        try:
            ended = await self._dispatch.process(job)
        except asyncio.CancelledError:  # the drain is ending: its worker slot is given back
            self._core.cancelled()
            raise
        self._settle(ended)

    def _settle(self, ended: CallEnded) -> None:
        """A call's verdict (`Outcomes`, `Dispatch`): the core frees or keeps its slots."""
        verdict, core = ended.verdict, self._core
        if verdict is Verdict.DONE:
            self._perform(core.ended(ended.job))
        elif verdict is Verdict.RETRY:
            self._perform(core.retry(ended.job, ended.delay, now=self._clock.monotonic()))
            self._retry_wake.set()  # its timer looks again
        else:
            self._perform(core.fenced(ended.job))

    def _after_stop(self) -> None:
        if not self._core.running:
            self._idle.set()
        if not self._pump_soon:
            # One pump for every slot freed in this turn of the event loop.
            self._pump_soon = True
            asyncio.get_running_loop().call_soon(self._pump)
        self._claimer.freed()

    async def _retry_timer(self) -> None:
        """Until cancelled: when the earliest retry is due, hand the due ones back to the core
        (they wait for a worker slot again), then pump once for all of them."""
        clock, core = self._clock, self._core
        while True:
            due = core.next_due()
            timeout = None if due is None else max(0.0, due - clock.monotonic())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._retry_wake.wait()
            self._retry_wake.clear()
            self._perform(core.due(clock.monotonic()))
            self._pump()
