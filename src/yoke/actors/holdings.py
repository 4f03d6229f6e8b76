"""`Holdings`: what one worker's drain holds, and the bookkeeping that keeps it consistent.

It owns the instances known here (each with its FIFO kernel and its groups), the claimed rows
held here (`jobs`, queued, running or waiting for a retry), the instances to look at again
(`dirty`), those being handed over (`paused`) and those resting with a cached state (an LRU
bounded by `idle_instances`). Every change is a plain synchronous method with no `await`
inside, so the drain (`drain.py`) can call it between awaits; the drain decides when, this
module only keeps the counts right. It must never do I/O: an instance's state is read by its
cell, later, and a row of an actor not defined here is handed to `undefined`.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Callable

from yoke.actors.claims import ClaimWindows
from yoke.actors.ctx import InstanceStateCell
from yoke.actors.definitions import ActorRegistry
from yoke.actors.drain_parts import (
    HeldInstance,
    Job,
    forget_one,
    items_of,
    next_attempt,
    queued_items,
    waiting_by_tenant,
)
from yoke.actors.protocol import ActorStore
from yoke.kernel import ItemState, Kernel
from yoke.store.actor_records import ClaimedEvent, InstanceRef

log = logging.getLogger("yoke.actors.drain")


class Holdings:
    def __init__(
        self,
        *,
        store: ActorStore,
        registry: ActorRegistry,
        worker_id: str,
        kernel: Kernel,
        windows: ClaimWindows,
        idle_instances: int,
        undefined: Callable[[ClaimedEvent], None],
        unheld: Callable[[Job | None], None],
    ) -> None:
        self._store = store
        self._registry = registry
        self._worker_id = worker_id
        self._wk = kernel  # the worker kernel: which held events run now, tenants shared fairly
        self._windows = windows
        self._idle_instances = idle_instances
        self._undefined = undefined  # a row of an actor this worker does not define
        self._unheld = unheld  # a row is no longer held here (None: it was not)
        self.instances: dict[InstanceRef, HeldInstance] = {}
        self.resting: OrderedDict[InstanceRef, None] = OrderedDict()
        self.jobs: dict[int, Job] = {}
        self.dirty: dict[HeldInstance, None] = {}
        # Instances being handed over (`yoke.actors.fleet`): nothing more of theirs starts or
        # is held here; the rows of theirs a claim brought meanwhile wait for `resume`.
        self.paused: set[InstanceRef] = set()
        self.skipped: dict[InstanceRef, list[ClaimedEvent]] = {}

    def __repr__(self) -> str:
        return (
            f"Holdings(instances={len(self.instances)}, jobs={len(self.jobs)}, "
            f"dirty={len(self.dirty)}, paused={len(self.paused)}, skipped={len(self.skipped)}, "
            f"resting={len(self.resting)})"
        )

    def busy(self, ref: InstanceRef) -> bool:
        """Whether a call of `ref` still runs here (or a custom-mode pick is under way)."""
        inst = self.instances.get(ref)
        if inst is not None and inst.picking:
            return True
        return any(job.inst.ref == ref for job in self.jobs.values())

    def waiting_by_tenant(self, now: float) -> tuple[Counter[str], dict[str, float]]:
        """Per tenant, the rows held here that are not running, and the age of its oldest."""
        return waiting_by_tenant(self.jobs, self._wk, now)

    def accept(self, rows: list[ClaimedEvent]) -> list[HeldInstance]:
        """Hold the claimed rows here. Returns the instances new here: their events wait (not
        dirty yet) until their states have been read."""
        fresh: dict[HeldInstance, None] = {}
        for row in rows:
            if row.ref in self.paused:  # being handed over: decided when it ends (`resume`)
                self.skipped.setdefault(row.ref, []).append(row)
                continue
            # A row held here already is claimed again under a newer epoch (we lost the
            # instance and took it back): the instance of the old epoch is lost, and what it
            # held but had not started is dropped (`instance_for`), so the row is held afresh.
            inst = self.instance_for(row)
            held = self.jobs.get(row.queue_id)
            if held is not None:
                # Its old run is under way or waits for its retry: a success completes it under
                # the new epoch; if it is fenced instead, `again` holds the row afresh.
                held.row = row
                continue
            if inst is None:
                continue
            self.hold_here(inst, row)
            if inst.cell.loaded:
                self.dirty[inst] = None
            else:
                fresh[inst] = None
        return list(fresh)

    def resume(self, ref: InstanceRef, epoch: int, *, hold: bool = True) -> bool:
        """The hand-over of `ref`, owned here under `epoch`, is over. A row claimed under that
        epoch while it paused went back to pending with the move; one claimed under a newer
        epoch was claimed after the move was cancelled (the instance kept here): it is held now
        (True if any), or it would stay this worker's claim that nothing holds, for good.
        Not with `hold=False` (a stopping worker: its stop puts its claims back)."""
        self.paused.discard(ref)
        skipped = self.skipped.pop(ref, ())
        rows = [row for row in skipped if row.epoch > epoch] if hold else []
        for inst in self.accept(rows):
            self.dirty[inst] = None  # not loaded yet: its runner loads the state
        return bool(rows)

    def hold_here(self, inst: HeldInstance, row: ClaimedEvent) -> Job:
        """A claimed row joins its group in the instance's kernel (queued there)."""
        job = Job(row, inst, next_attempt(row))
        self.jobs[row.queue_id] = job
        self._windows.held(row.tenant)
        k, g = inst.kernel, row.group_id
        n = inst.groups.get(g, 0)
        if not n:
            k.set_lane_cap(g, inst.cap)
        inst.groups[g] = n + 1
        k.push(row.queue_id, g, seq=row.queue_id, payload=job)
        return job

    def instance_for(self, row: ClaimedEvent) -> HeldInstance | None:
        ref = row.ref
        inst = self.instances.get(ref)
        if inst is not None and not inst.lost and inst.cell.epoch == row.epoch:
            self.resting.pop(ref, None)
            return inst
        actor = self._registry.get(row.actor)
        if actor is None:
            log.warning(
                "no actor %r is defined in this worker; its event %d waits", row.actor, row.queue_id
            )
            self._undefined(row)
            return None
        if inst is not None:
            self.drop_queued(inst)  # an older epoch: what it still holds is fenced
        cell = InstanceStateCell(self._store, ref, worker_id=self._worker_id, epoch=row.epoch)
        inst = HeldInstance(actor, cell)
        self.instances[ref] = inst
        return inst

    def free(self, job: Job) -> None:
        """The job is over here (done, dead or fenced): free both of its slots."""
        qid = job.row.queue_id
        self.unhold(qid)
        if self._wk.get(qid) is not None:
            self._wk.release(qid)
        inst = job.inst
        k = inst.kernel
        it = k.get(qid)
        if it is not None and it.state is ItemState.RUNNING:
            k.release(qid)
            forget_one(inst, job.row.group_id)
        if not inst.lost:
            self.dirty[inst] = None
            if not inst.groups:
                self.rest(inst)
        elif k.running == 0 and self.instances.get(inst.ref) is inst:
            del self.instances[inst.ref]

    def again(self, job: Job) -> bool:
        """A job ended fenced, but its row was claimed here again under a newer epoch while it
        was held (`accept`): hold the row afresh, for the instance of that epoch (True). Left
        alone, it would stay claimed by this worker, which claims pending rows only: in flight
        for good (until the worker stops)."""
        row = job.row
        if row.epoch == job.inst.cell.epoch or row.queue_id in self.jobs:
            return False
        for inst in self.accept([row]):
            self.dirty[inst] = None  # not loaded yet: its runner loads the state
        return True

    def release_group(self, job: Job) -> None:
        """The row is no longer held here: its group slot is freed (it held no worker slot)."""
        qid = job.row.queue_id
        self.unhold(qid)
        k = job.inst.kernel
        it = k.get(qid)
        if it is not None and it.state is ItemState.RUNNING:
            k.release(qid)
            forget_one(job.inst, job.row.group_id)

    def unhold(self, qid: int) -> None:
        self._unheld(self.jobs.pop(qid, None))

    def rest(self, inst: HeldInstance) -> None:
        """An instance that holds nothing here keeps its cached state for a while; the
        least recently used ones beyond `idle_instances` are forgotten (memory stays bounded)."""
        resting = self.resting
        resting[inst.ref] = None
        resting.move_to_end(inst.ref)
        while len(resting) > self._idle_instances:
            ref, _ = resting.popitem(last=False)
            old = self.instances.get(ref)
            if old is not None and not old.groups:
                del self.instances[ref]

    def drop_queued(self, inst: HeldInstance) -> None:
        """Forget what an instance holds here but has not started: its new owner runs it."""
        inst.lost = True
        self.dirty.pop(inst, None)
        for it in queued_items(inst.kernel):
            inst.kernel.cancel(it.id)
            self.unhold(it.id)  # type: ignore[arg-type]
            forget_one(inst, it.lane)  # type: ignore[arg-type]
        for it in list(items_of(self._wk, inst)):
            if it.state is ItemState.QUEUED:
                self._wk.cancel(it.id)
                self.unhold(it.id)  # type: ignore[arg-type]
                k = inst.kernel
                if k.get(it.id) is not None:
                    k.release(it.id)
                    forget_one(inst, it.payload.row.group_id)  # type: ignore[attr-defined]
