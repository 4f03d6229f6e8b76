"""`Dispatch`: how the drain starts one `process()` call of a claimed event.

It owns the steps between a worker slot and the call: the tenant must be runnable (its
executor READY, none of its rows going back), the instance's state loaded, a capped tenant's
fleet-wide count taken (`tenant_rules.py`), the wait the event had counted at its first
start; then the call, in a runner task (`process`), or sent from the pump with no task at all
when nothing needs an await first (`send`, executor processes). A suspect (a row claimed by a
worker that died) runs alone on this worker, its row marked `solo` first (`solo.py`), so that
if it kills this worker too, the recovery charges it. How the call ended is `Outcomes`'
(`outcomes.py`); `process` returns its verdict (`CallEnded`: a call that never began has one
too) and `send` hands it to the `settle` it is given; the slots are the drain's core's, which
applies it. This module must never name a store backend.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from yoke.actors.ctx import Fenced
from yoke.actors.drain_parts import CallEnded, DrainConfig, Job, Verdict
from yoke.actors.fairness import TenantTelemetry
from yoke.actors.outcomes import Outcomes
from yoke.actors.releases import Releases
from yoke.actors.runner import Runner
from yoke.actors.solo import Solo
from yoke.actors.tenant_rules import TenantRules
from yoke.clock import Clock
from yoke.errors import TRANSIENT, StoreUnavailable, YokeError
from yoke.store.actor_records import Completion

log = logging.getLogger("yoke.actors.drain")


class Dispatch:
    def __init__(
        self,
        *,
        calls: Runner,
        mark_solo: Callable[[Completion], Awaitable[bool]],
        clock: Clock,
        config: DrainConfig,
        rules: TenantRules,
        releases: Releases,
        telemetry: TenantTelemetry,
        outcomes: Outcomes,
    ) -> None:
        self._calls = calls
        self._mark_solo = mark_solo
        self._solo = Solo()
        self._clock = clock
        self._cfg = config
        self._rules = rules
        self._releases = releases
        self._telemetry = telemetry
        self._outcomes = outcomes

    def __repr__(self) -> str:
        return f"Dispatch(calls={self._calls!r})"

    def may_run(self, tenant: str) -> bool:
        return not self._releases.busy(tenant) and self._calls.ready(tenant)

    async def process(self, job: Job) -> CallEnded:
        """Run `process(ctx, event)` for one claimed event, in a runner task; its verdict."""
        inst = job.inst
        cell = inst.cell
        if not self.may_run(job.row.tenant):
            return self._outcomes.release(job)
        if not cell.loaded:
            try:
                await cell.load()
            except Fenced as exc:
                return self._outcomes.fenced(job, exc)
            except TRANSIENT as exc:  # the store is down: not the event's fault, no attempt
                log.warning("loading the state of %s failed; retrying: %s", inst.ref, exc)
                return CallEnded(job, Verdict.RETRY, self._cfg.retry.first)
            except YokeError as exc:  # refused for good: the event cannot run
                return await self._outcomes.unloadable(job, exc)
        tenant = job.row.tenant
        capped = self._rules.capped(tenant)
        if capped and not await self._rules.take(tenant):
            # it keeps its group slot meanwhile: FIFO holds
            return CallEnded(job, Verdict.RETRY, self._cfg.cap_retry)
        if not job.failures and not job.row.attempts:  # its first start: the wait it had
            self._telemetry.started(tenant, self._clock.wall() - job.row.appended_at)
        try:
            try:
                if job.row.suspect:
                    async with self._solo.alone():
                        refused = await self._marked(job)
                        if refused is not None:
                            return refused
                        await self._calls.run(inst.actor, cell, job.event)
                else:
                    await self._solo.turn()
                    self._solo.started()
                    try:
                        await self._calls.run(inst.actor, cell, job.event)
                    finally:
                        self._solo.ended()
            finally:
                if capped:
                    await self._rules.free(tenant)
        except Exception as exc:
            return await self._outcomes.ended_with(job, exc)
        return self._outcomes.succeeded(job)

    async def _marked(self, job: Job) -> CallEnded | None:
        """Mark a suspect's row `solo` before it runs alone; the verdict if it must not run now
        (its instance is another worker's, or the store is out: it is held and tried again)."""
        try:
            if await self._mark_solo(job.completion):
                return None
        except StoreUnavailable as exc:
            log.warning(
                "marking suspect %d to run alone failed; retrying: %s", job.row.queue_id, exc
            )
            return CallEnded(job, Verdict.RETRY, self._cfg.retry.first)
        return self._outcomes.fenced(job, Fenced("its claim is another worker's"))

    def send(self, job: Job, settle: Callable[[CallEnded], None]) -> bool:
        """A runner that `sends` (executor processes) takes a call that can start at once from
        here, without a runner task: `Outcomes.sent` is told how it ended, for all the results
        of an executor's frame in one pass. What needs an await first (a state to load, a
        capped tenant's fleet-wide count, rows of the tenant going back) goes to a runner
        instead. `settle` is told the verdict."""
        inst, tenant = job.inst, job.row.tenant
        if not inst.cell.loaded or self._rules.capped(tenant) or self._releases.busy(tenant):
            return False
        if job.row.suspect or self._solo.holding:
            return False
        solo, sent = self._solo, self._outcomes.sent

        def done(error: BaseException | None) -> None:
            solo.ended()
            ended = sent(job, error)
            if ended is not None:  # else a runner writes first, and its chore returns it
                settle(ended)

        if not self._calls.send(inst.actor, inst.cell, job.event, done):
            return False
        solo.started()
        if not job.failures and not job.row.attempts:  # its first start: the wait it had
            self._telemetry.started(tenant, self._clock.wall() - job.row.appended_at)
        return True
