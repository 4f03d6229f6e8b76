"""`Outcomes`: what follows one `process()` call of the drain, once it has ended.

It owns the verdict and its writes: a success joins the completion batch; a throw is retried
after its actor's backoff (the attempt and `available_at` written first, so a takeover
honours them) or becomes a dead letter after `max_attempts`; a fenced call drops what its
instance holds here; a call whose executor was lost goes back to pending at no cost, or counts
a crash attempt when it is blamed. The writes are retried until the store takes them
(`retry.until_done`), the group slot held meanwhile, so nothing of its group overtakes it;
only a stopping drain gives them up. A write the store refuses for good makes the event a
dead letter of the refusal (`refusals.bury`) and frees the slot. The counts behind
`DrainStats` are kept here.

The slots themselves are the drain's core's (`drain_core.py`): this module tells the drain
through `end` (both slots freed), `hold` (run again after a delay, the group slot kept),
`again` (a fenced row claimed here anew) and `drop` (an instance lost: what it holds and has
not started goes). It must never name a store backend and reads time only through its `Clock`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from yoke.actors.completions import CompletionWriter
from yoke.actors.ctx import Fenced
from yoke.actors.drain_parts import DrainConfig, HeldInstance, Job, event_of
from yoke.actors.failure_log import FailureLog
from yoke.actors.fairness import TenantTelemetry
from yoke.actors.metrics import ActorMetrics
from yoke.actors.protocol import ActorStore
from yoke.actors.refusals import bury
from yoke.actors.releases import Releases
from yoke.actors.runner import ExecutorLost, describe
from yoke.clock import Clock
from yoke.errors import YokeError
from yoke.retry import until_done
from yoke.store.actor_records import ClaimedEvent, Completion

log = logging.getLogger("yoke.actors.drain")


class Outcomes:
    def __init__(
        self,
        *,
        store: ActorStore,
        worker_id: str,
        clock: Clock,
        config: DrainConfig,
        stopping: Callable[[], bool],
        drop: Callable[[HeldInstance], None],
        completions: CompletionWriter[HeldInstance],
        releases: Releases,
        metrics: ActorMetrics,
        telemetry: TenantTelemetry,
        chore: Callable[[Callable[[], Coroutine[Any, Any, None]]], None],
        end: Callable[[Job], None],
        hold: Callable[[Job, float], None],
        again: Callable[[Job], None],
    ) -> None:
        self._store = store
        self._worker_id = worker_id
        self._clock = clock
        self._retry = config.retry
        self._poll_interval = config.poll_interval
        self._stopping = stopping
        self._drop = drop
        self._completions = completions
        self._releases = releases
        self._metrics = metrics
        self._telemetry = telemetry
        self._chore = chore  # run in a runner, inside the drain's TaskGroup
        self._end = end
        self._hold = hold
        self._again = again
        self._failure_log = FailureLog()
        self.counts = {"processed": 0, "errors": 0, "dead": 0, "fenced": 0, "given_up": 0}

    def __repr__(self) -> str:
        return f"Outcomes({', '.join(f'{k}={n}' for k, n in self.counts.items())})"

    def sent(self, job: Job, error: BaseException | None) -> None:
        """How a call sent without a runner task ended (`Runner.send`)."""
        if error is None:
            self.succeeded(job)
        elif not self.at_once(job, error):  # a write to the store first: in a runner
            self._chore(functools.partial(self.ended_with, job, error))

    def succeeded(self, job: Job) -> None:
        inst = job.inst
        self.counts["processed"] += 1
        self._metrics.processed(inst.actor.name)
        self._telemetry.processed(job.row.tenant)
        self._completions.add(job.completion, inst)
        self._end(job)

    def at_once(self, job: Job, error: BaseException) -> bool:
        """The call of `job` raised `error`: True if what follows needs no await (fenced, or
        its executor lost without a charge: the row goes back at no cost), done here."""
        if isinstance(error, Fenced):
            self.lost(job.inst, error)
            self._end(job)
            self._again(job)
            return True
        if isinstance(error, ExecutorLost) and not error.charge:
            self.release(job)
            return True
        return False

    async def ended_with(self, job: Job, error: BaseException) -> None:
        """The call of `job` raised `error`: fenced, its executor lost, or process() failed."""
        if self.at_once(job, error):
            return
        if isinstance(error, ExecutorLost):  # charged: it ran alone, or past its deadline
            await self._crashed(job, error.reason)
        else:
            await self._failed(job, error)

    async def _failed(self, job: Job, error: BaseException) -> None:
        inst = job.inst
        self.counts["errors"] += 1
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
            try:
                stored = await until_done(
                    lambda: self._store.dead_letter(
                        self._worker_id, job.completion, error=text, now=self._clock.wall()
                    ),
                    what=f"recording dead letter {job.row.queue_id}",
                    policy=self._retry,
                    stopping=self._stopping,
                    log=log,
                )
            except YokeError as exc:  # refused for good: a dead letter of the refusal instead
                buried = await self._bury(job.completion, exc, "its dead letter")
                stored = (True, 1) if buried else None
            if stored is None:
                self.counts["given_up"] += 1
            elif stored[0]:
                self.counts["dead"] += 1
            elif stored[1] == 1:  # refused at once: fenced (on a retry, maybe our own write)
                self.counts["fenced"] += 1
            self._end(job)
            return
        # Written before the retry runs, so that a takeover meanwhile honours the attempt and
        # the backoff; the group slot stays held until then (nothing of its group overtakes).
        try:
            stored = await until_done(
                lambda: self._store.requeue(
                    self._worker_id,
                    job.completion,
                    available_at=self._clock.wall() + delay,
                    error=text,
                ),
                what=f"recording the retry of event {job.row.queue_id}",
                policy=self._retry,
                stopping=self._stopping,
                log=log,
            )
        except YokeError as exc:  # refused for good: retried, it would be refused forever
            buried = await self._bury(job.completion, exc, "its retry")
            self.counts["dead" if buried else "given_up"] += 1
            self._end(job)
            return
        if stored is None:  # stopping: stop_worker puts the row back to pending
            self.counts["given_up"] += 1
            self._end(job)
            return
        # A retried requeue whose first attempt was written is taken again (the row stays
        # claimed): it counts one attempt more, never a refusal.
        if not stored[0]:
            self.lost(inst, Fenced("requeue refused"))
            self._end(job)
            return
        job.event = event_of(job.row, attempt=failures + 1)
        self._hold(job, delay)

    def unloadable(self, job: Job, refusal: YokeError) -> None:
        """The store refused for good to read the state of the instance of `job`: the event
        becomes a dead letter of the refusal and frees its slots, rather than waiting forever."""

        async def bury_it() -> None:
            buried = await self._bury(job.completion, refusal, "loading its instance's state")
            self.counts["dead" if buried else "given_up"] += 1
            self._end(job)

        self._chore(bury_it)

    def release(self, job: Job) -> None:
        """No running executor: the row goes back to pending at no cost, then the rest of its
        group in turn (the tenant is busy meanwhile), in order, before any is claimed again."""
        self._releases.release(job.completion, job.row.tenant)
        self._end(job)

    async def _crashed(self, job: Job, reason: str) -> None:
        """Its executor died running it alone (or past its deadline): a crash attempt counts."""
        what = f"actor {job.inst.actor.name!r} event {job.row.queue_id}"
        await self._releases.charge(job.completion, job.row.tenant, reason, what=what)
        self._end(job)

    def lost(self, inst: HeldInstance, exc: BaseException) -> None:
        """The instance belongs to another worker now: what it holds here and has not started
        is dropped (its new owner runs it)."""
        if not inst.lost:
            log.warning("lost instance %s/%s: %s", inst.ref.actor, inst.ref.instance_id, exc)
            self.counts["fenced"] += 1
        self._drop(inst)

    def refused(self, owners: list[HeldInstance]) -> None:
        """The store refused these completions: their instances belong to another worker
        now. What this worker holds of them and has not started is dropped (the new owner runs
        it); left alone it would run here too, its effects (emit, schedule) made twice."""
        self.counts["fenced"] += len(owners)
        for inst in dict.fromkeys(owners):
            if not inst.lost:
                log.warning(
                    "lost instance %s/%s: its completions were refused",
                    inst.ref.actor,
                    inst.ref.instance_id,
                )
                self._drop(inst)

    def undefined(self, row: ClaimedEvent) -> None:
        """A row of an actor this worker does not define waits (`poll_interval`) for a worker
        that does."""
        self._put_back(row, "actor not defined in this worker")

    def _put_back(self, row: ClaimedEvent, why: str) -> None:
        at = self._clock.wall() + self._poll_interval
        comp = Completion(queue_id=row.queue_id, epoch=row.epoch)

        async def put_back() -> None:
            # The row stays claimed either way (a requeue keeps its place); what is written is
            # its attempt and `available_at`, which a worker taking the instance over honours.
            try:
                await until_done(
                    lambda: self._store.requeue(self._worker_id, comp, available_at=at, error=why),
                    what=f"putting back event {row.queue_id}",
                    policy=self._retry,
                    stopping=self._stopping,
                    log=log,
                )
            except YokeError as exc:
                await self._bury(comp, exc, "putting it back")

        self._chore(put_back)

    async def _bury(self, done: Completion, refusal: YokeError, what: str) -> bool:
        """A write of the row of `done` refused for good: a dead letter of the refusal."""
        return await bury(
            self._store,
            self._worker_id,
            done,
            refusal=refusal,
            what=what,
            now=self._clock.wall(),
            policy=self._retry,
            stopping=self._stopping,
        )
