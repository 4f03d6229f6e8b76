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

The slots themselves are the drain's core's (`drain_core.py`): this module decides a call's
verdict and returns it (`CallEnded`: DONE, both slots freed; RETRY after a delay, the group slot
kept; FENCED, its instance lost), and the drain hands it to the core; it never touches a slot.
It must never name a store backend and reads time only through its `Clock`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from yoke.actors.completions import CompletionWriter
from yoke.actors.ctx import Fenced
from yoke.actors.drain_parts import (
    CallEnded,
    ChoreFn,
    DrainConfig,
    HeldInstance,
    Job,
    Verdict,
    event_of,
)
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
        completions: CompletionWriter[HeldInstance],
        releases: Releases,
        metrics: ActorMetrics,
        telemetry: TenantTelemetry,
        chore: Callable[[ChoreFn], None],
    ) -> None:
        self._store = store
        self._worker_id = worker_id
        self._clock = clock
        self._retry = config.retry
        self._poll_interval = config.poll_interval
        self._stopping = stopping
        self._completions = completions
        self._releases = releases
        self._metrics = metrics
        self._telemetry = telemetry
        self._chore = chore  # run in a runner, inside the drain's TaskGroup
        self._failure_log = FailureLog()
        self.counts = {"processed": 0, "errors": 0, "dead": 0, "fenced": 0, "given_up": 0}

    def __repr__(self) -> str:
        return f"Outcomes({', '.join(f'{k}={n}' for k, n in self.counts.items())})"

    def sent(self, job: Job, error: BaseException | None) -> CallEnded | None:
        """How a call sent without a runner task ended (`Runner.send`): its verdict, or None if
        a write to the store comes first (in a runner, whose chore returns the verdict)."""
        if error is None:
            return self.succeeded(job)
        ended = self.at_once(job, error)
        if ended is None:
            self._chore(functools.partial(self.ended_with, job, error))
        return ended

    def succeeded(self, job: Job) -> CallEnded:
        inst = job.inst
        self.counts["processed"] += 1
        self._metrics.processed(inst.actor.name)
        self._telemetry.processed(job.row.tenant)
        self._completions.add(job.completion, inst)
        return CallEnded(job, Verdict.DONE)

    def at_once(self, job: Job, error: BaseException) -> CallEnded | None:
        """The call of `job` raised `error`: its verdict if it needs no await (fenced, or its
        executor lost without a charge: the row goes back at no cost), else None."""
        if isinstance(error, Fenced):
            return self.fenced(job, error)
        if isinstance(error, ExecutorLost) and not error.charge:
            return self.release(job)
        return None

    async def ended_with(self, job: Job, error: BaseException) -> CallEnded:
        """The call of `job` raised `error`: fenced, its executor lost, or process() failed."""
        ended = self.at_once(job, error)
        if ended is not None:
            return ended
        if isinstance(error, ExecutorLost):  # charged: it ran alone, or past its deadline
            return await self._crashed(job, error.reason)
        return await self._failed(job, error)

    async def _failed(self, job: Job, error: BaseException) -> CallEnded:
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
            return CallEnded(job, Verdict.DONE)
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
            return CallEnded(job, Verdict.DONE)
        if stored is None:  # stopping: stop_worker puts the row back to pending
            self.counts["given_up"] += 1
            return CallEnded(job, Verdict.DONE)
        # A retried requeue whose first attempt was written is taken again (the row stays
        # claimed): it counts one attempt more, never a refusal.
        if not stored[0]:
            return self.fenced(job, Fenced("requeue refused"))
        job.event = event_of(job.row, attempt=failures + 1)
        return CallEnded(job, Verdict.RETRY, delay)

    async def unloadable(self, job: Job, refusal: YokeError) -> CallEnded:
        """The store refused for good to read the state of the instance of `job`: the event
        becomes a dead letter of the refusal and frees its slots, rather than waiting forever."""
        buried = await self._bury(job.completion, refusal, "loading its instance's state")
        self.counts["dead" if buried else "given_up"] += 1
        return CallEnded(job, Verdict.DONE)

    def release(self, job: Job) -> CallEnded:
        """No running executor: the row goes back to pending at no cost, then the rest of its
        group in turn (the tenant is busy meanwhile), in order, before any is claimed again."""
        self._releases.release(job.completion, job.row.tenant)
        return CallEnded(job, Verdict.DONE)

    async def _crashed(self, job: Job, reason: str) -> CallEnded:
        """Its executor died running it alone (or past its deadline): a crash attempt counts."""
        what = f"actor {job.inst.actor.name!r} event {job.row.queue_id}"
        await self._releases.charge(job.completion, job.row.tenant, reason, what=what)
        return CallEnded(job, Verdict.DONE)

    def fenced(self, job: Job, exc: BaseException) -> CallEnded:
        """The instance of `job` belongs to another worker now (or did, and is this worker's
        again under a newer epoch): the core drops what it holds here and has not started
        (its new owner runs it)."""
        inst = job.inst
        if not inst.lost:
            log.warning("lost instance %s/%s: %s", inst.ref.actor, inst.ref.instance_id, exc)
            self.counts["fenced"] += 1
        return CallEnded(job, Verdict.FENCED)

    def refused(self, owners: list[HeldInstance]) -> list[HeldInstance]:
        """The store refused these completions: their instances belong to another worker
        now. Returned: those whose holdings the core must drop (the new owner runs them);
        left alone they would run here too, their effects (emit, schedule) made twice."""
        self.counts["fenced"] += len(owners)
        lost = [inst for inst in dict.fromkeys(owners) if not inst.lost]
        for inst in lost:
            log.warning(
                "lost instance %s/%s: its completions were refused",
                inst.ref.actor,
                inst.ref.instance_id,
            )
        return lost

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
