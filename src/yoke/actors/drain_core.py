"""`DrainCore`: what one worker's drain holds, and every decision about it, as a synchronous
state machine.

What it is for. The core owns what the drain holds: the instances known here (each with its
FIFO kernel, lane = group, lane cap = `queue.concurrency`), the claimed rows held here (`jobs`:
queued, running or waiting for a retry), the worker kernel (`policy="sfq"`, lane = tenant,
global cap = the worker's slots, the tenants' weights and local caps), the claim windows
(`claims.ClaimWindows`), the retries waiting out their backoff (a heap of due times), the count
of calls running, the instances paused by a move (and the rows a claim brought for them), and
the resting instances whose state stays cached (an LRU bounded by `idle_instances`). A row
claimed here again under a newer epoch while its call runs keeps its group slot in the newer
epoch's instance (`Job.heir`, `_adopt`), so FIFO per group holds across a takeover and back.

Its methods are the events of the drain (rows claimed, their states loaded, a pump, a call
ended with its verdict: done, retried after a delay or fenced, a time due, an instance lost, a
move asked or settled, settings changed, stop); each changes the state at once and returns
what must follow as actions, which the async shell (`drain.QueueDrainScheduler`) performs:

* a `Job` (run this call: the `run` action), `Pick` (custom mode: pick in a runner),
* `LoadStates` (read these instances' states, then `loaded`), `PutBack` (a row of an actor
  not defined here goes back to wait for a worker that defines it),
* `Signal.REFILL` (a tenant's window wants a claim), `Signal.WAKE` (claim now),
  `Signal.NUDGE` (nothing more is held: write the completions now), `Signal.FREED` (slots were
  freed: pump soon, claim if the last claim left rows behind), `Signal.SETTLED` (a call of a
  paused instance ended: a move's `settle` looks again).

What it must never do: await, touch the store, read a clock. Times come in as `now` (monotonic
seconds); an instance's state cell is made by the injected `cell_for` and only read here
(`loaded`, `epoch`). tests/actors/test_drain_core.py drives it against a plain model.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import logging
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from yoke.actors.claims import ClaimWindows
from yoke.actors.ctx import InstanceStateCell
from yoke.actors.definitions import ActorDef
from yoke.actors.drain_parts import (
    HeldInstance,
    Job,
    forget_one,
    items_of,
    next_attempt,
    queued_items,
    waiting_by_tenant,
)
from yoke.kernel import ItemState, Kernel
from yoke.store.actor_records import ClaimedEvent, InstanceRef

log = logging.getLogger("yoke.actors.drain")


class Signal(enum.Enum):
    REFILL = "refill"  # a tenant's window has room and rows of it wait: claim (unless claiming)
    WAKE = "wake"  # claim now
    NUDGE = "nudge"  # nothing is held any more: write the completions now
    FREED = "freed"  # slots were freed: pump soon; claim if the last claim left rows behind
    SETTLED = "settled"  # a call of a paused instance ended: `settle` looks again


class Pick:
    """Custom mode: this instance may start more; its pick reads the store (`picks.py`)."""

    __slots__ = ("inst",)

    def __init__(self, inst: HeldInstance) -> None:
        self.inst = inst


class LoadStates:
    """Read the states of the instances a claim met first, then tell `DrainCore.loaded`."""

    __slots__ = ("instances",)

    def __init__(self, instances: list[HeldInstance]) -> None:
        self.instances = instances


class PutBack:
    """A row of an actor this worker does not define: put it back to wait for one that does."""

    __slots__ = ("row",)

    def __init__(self, row: ClaimedEvent) -> None:
        self.row = row


Action = Job | Pick | LoadStates | PutBack | Signal


class Actors(Protocol):
    def get(self, name: str) -> ActorDef | None: ...


class DrainCore:
    def __init__(
        self,
        *,
        actors: Actors,
        cell_for: Callable[[InstanceRef, int], InstanceStateCell],
        concurrency: int,
        budget: int,
        idle_instances: int = 10_000,
    ) -> None:
        self._actors = actors
        self._cell_for = cell_for  # an instance's state cell under an epoch (no I/O made)
        self._idle_instances = idle_instances
        # The worker kernel: which held events run now, tenants sharing the slots fairly.
        self.worker = Kernel(policy="sfq", global_cap=concurrency)
        self.windows = ClaimWindows(budget=budget)
        self.instances: dict[InstanceRef, HeldInstance] = {}
        self.resting: OrderedDict[InstanceRef, None] = OrderedDict()
        self.jobs: dict[int, Job] = {}
        self.dirty: dict[HeldInstance, None] = {}  # instances whose kernel may start more
        # Instances being handed over (`yoke.actors.fleet`): nothing more of theirs starts or
        # is held here; the rows of theirs a claim brought meanwhile wait for `resume`.
        self.paused: set[InstanceRef] = set()
        self.skipped: dict[InstanceRef, list[ClaimedEvent]] = {}
        self._retries: list[tuple[float, int, Job]] = []  # (due, tie, job), earliest first
        self._tie = itertools.count()
        self.running = 0  # calls holding a worker slot
        self.closing = False
        self.weights: dict[str, float] = {}  # weights other than 1
        self.caps: dict[str, int] = {}  # this worker's local view of the tenants' caps
        self._out: list[Action] = []

    def __repr__(self) -> str:
        return (
            f"DrainCore({'closing' if self.closing else 'open'}, instances="
            f"{len(self.instances)}, jobs={len(self.jobs)}, running={self.running}, "
            f"retrying={len(self._retries)}, dirty={len(self.dirty)}, paused={len(self.paused)}, "
            f"skipped={len(self.skipped)}, resting={len(self.resting)})"
        )

    def _take(self) -> list[Action]:
        out = self._out
        self._out = []
        return out

    # -- queries --------------------------------------------------------------------------
    @property
    def retrying(self) -> int:
        return len(self._retries)

    def next_due(self) -> float | None:
        """When the earliest retry is due (monotonic seconds), or None."""
        return self._retries[0][0] if self._retries else None

    def busy(self, ref: InstanceRef) -> bool:
        """Whether a call of `ref` still runs here (or a custom-mode pick is under way)."""
        inst = self.instances.get(ref)
        if inst is not None and inst.picking:
            return True
        return any(job.inst.ref == ref for job in self.jobs.values())

    def in_flight(self, ref: InstanceRef) -> int:
        inst = self.instances.get(ref)
        return 0 if inst is None else inst.kernel.running

    def held_by_tenant(self) -> Counter[str]:
        return Counter(job.row.tenant for job in self.jobs.values())

    def waiting_by_tenant(self, now: float) -> tuple[Counter[str], dict[str, float]]:
        """Per tenant, the rows held here that are not running, and the age of its oldest."""
        return waiting_by_tenant(self.jobs, self.worker, now)

    # -- rows claimed ---------------------------------------------------------------------
    def claimed(self, rows: list[ClaimedEvent]) -> list[Action]:
        """A claim brought these rows: hold them. The instances new here wait (not dirty) until
        their states are read (`LoadStates`, then `loaded`)."""
        fresh = self._accept(rows)
        if fresh:
            self._out.append(LoadStates(fresh))
        return self._take()

    def loaded(self, fresh: Iterable[HeldInstance]) -> None:
        """The states of these instances were read (or their runners will read them)."""
        for inst in fresh:
            if not inst.lost:
                self.dirty[inst] = None

    def hold(self, inst: HeldInstance, row: ClaimedEvent) -> Job:
        """A row claimed by a custom-mode pick joins its group (queued in the instance's
        kernel, which the pick then claims in it)."""
        return self._hold_here(inst, row)

    def start(self, job: Job) -> None:
        """A picked job, claimed in its instance's kernel, waits for a worker slot."""
        self.worker.push(job.row.queue_id, job.row.tenant, seq=job.row.queue_id, payload=job)

    def look_again(self, inst: HeldInstance) -> None:
        """A custom-mode pick that failed for want of the store tries again (then `pump`)."""
        if not inst.lost:
            self.dirty[inst] = None

    # -- the pick ---------------------------------------------------------------------------
    def pump(self) -> list[Action]:
        """Hand every event its group lets start to the worker kernel; return the calls the
        worker kernel starts now (each takes a worker slot) and the custom picks wanted."""
        out = self._out
        dirty, worker = self.dirty, self.worker
        while dirty:
            inst = next(iter(dirty))
            del dirty[inst]
            if inst.lost:
                continue
            if inst.custom:
                out.append(Pick(inst))
            else:
                k = inst.kernel
                while (it := k.pop_next()) is not None:
                    held: Job = it.payload  # type: ignore[assignment]
                    row = held.row
                    worker.push(row.queue_id, row.tenant, seq=row.queue_id, payload=held)
        if not self.closing:
            while (it := worker.pop_next()) is not None:
                self.running += 1
                out.append(it.payload)  # type: ignore[arg-type]
        return self._take()

    # -- calls that ended -------------------------------------------------------------------
    def ended(self, job: Job) -> list[Action]:
        """The call of `job` is over here (done, dead or released): both slots free."""
        self._ended(job)
        return self._take()

    def _ended(self, job: Job) -> None:
        self.running -= 1
        if self.paused and job.inst.ref in self.paused:
            self._out.append(Signal.SETTLED)  # only then: `settle` scans what is held
        self._free(job)
        self._out.append(Signal.FREED)

    def retry(self, job: Job, delay: float, *, now: float) -> list[Action]:
        """Run `job` again after `delay`: it keeps its group slot (its place: nothing of its
        group overtakes it) and gives the worker slot back meanwhile. A row claimed here again
        under a newer epoch while it ran runs again under that epoch's instance (its heir)."""
        self.running -= 1
        self.worker.release(job.row.queue_id)
        if job.heir is not None:
            self._give_slot(job.inst, job)
            job.inst, job.heir = job.heir, None
        heapq.heappush(self._retries, (now + delay, next(self._tie), job))
        self._out.append(Signal.FREED)
        return self._take()

    def cancelled(self) -> None:
        """A runner was cancelled with its call (the drain is ending): its slot is given back."""
        self.running -= 1

    def due(self, now: float) -> list[Action]:
        """The retries whose backoff is over wait for a worker slot again (their group slot was
        kept); a lost instance's is let go instead (held afresh if claimed here anew). `pump`
        follows."""
        heap, worker = self._retries, self.worker
        while heap and heap[0][0] <= now:
            _, _, job = heapq.heappop(heap)
            if job.inst.lost:
                self._release_group(job)
                self._again(job)
                continue
            row = job.row
            worker.push(row.queue_id, row.tenant, seq=row.queue_id, payload=job)
        return self._take()

    def fenced(self, job: Job) -> list[Action]:
        """The call of `job` was fenced: its instance was taken over. What that instance holds
        here and has not started is dropped, and the call's slots are freed. If the row was
        claimed here again meanwhile (`job.heir`, a newer epoch of the instance, held its group
        slot since), it is held afresh there in the same step: first of its group by its
        arrival, so nothing of its group has overtaken it or will."""
        self._drop_queued(job.inst)
        self._ended(job)
        self._again(job)
        return self._take()

    def _again(self, job: Job) -> None:
        """A fenced call's row, or a retry let go with its lost instance, claimed here anew:
        left alone, it would stay claimed by this worker, which claims pending rows only: in
        flight for good (until the worker stops)."""
        if self.closing:
            return
        row = job.row
        if row.epoch == job.inst.cell.epoch or row.queue_id in self.jobs:
            return
        for inst in self._accept([row]):
            self.dirty[inst] = None  # not loaded yet: its runner loads the state
        self._out.append(Signal.FREED)

    # -- instances lost or moved -----------------------------------------------------------
    def lost(self, inst: HeldInstance) -> list[Action]:
        """The instance belongs to another worker now: what it holds here and has not started
        is dropped (its new owner runs it)."""
        self._drop_queued(inst)
        return self._take()

    def pause(self, ref: InstanceRef) -> list[Action]:
        """A move of `ref` begins: start nothing more of it. What is held and not running is
        dropped (its rows stay claimed until the hand-over puts them back), rows claimed from
        now on wait for `resume`, a retry waiting for its backoff is dropped."""
        self.paused.add(ref)
        inst = self.instances.get(ref)
        if inst is not None:
            self._drop_queued(inst)
        if any(job.inst.ref == ref for _, _, job in self._retries):
            kept = [r for r in self._retries if r[2].inst.ref != ref]
            for _, _, job in self._retries:
                if job.inst.ref == ref:
                    self._release_group(job)
            heapq.heapify(kept)
            self._retries = kept
        return self._take()

    def resume(self, ref: InstanceRef, epoch: int) -> list[Action]:
        """The move of `ref`, owned here under `epoch` when it began, is over (moved, or
        cancelled and kept under a new epoch). A row claimed under that epoch while it paused
        went back to pending with the move; one claimed under a newer epoch was claimed after
        the move was cancelled: it is held now, or it would stay this worker's claim that
        nothing holds, for good (not when stopping: the stop puts its claims back)."""
        self.paused.discard(ref)
        skipped = self.skipped.pop(ref, ())
        rows = [row for row in skipped if row.epoch > epoch] if not self.closing else []
        for inst in self._accept(rows):
            self.dirty[inst] = None  # not loaded yet: its runner loads the state
        if rows:
            self._out.append(Signal.FREED)
        self._out.append(Signal.WAKE)
        return self._take()

    # -- settings and stop ------------------------------------------------------------------
    def set_weights(self, weights: Mapping[str, float]) -> list[Action]:
        """Tenant weights (a tenant not named has weight 1): the sfq kernel's shares of the
        slots and the claim windows' shares of the held rows follow them from now on."""
        if weights == self.weights:
            return []
        for tenant in set(self.weights) | set(weights):
            self.worker.set_weight(tenant, weights.get(tenant, 1.0))
        self.weights = dict(weights)
        self.windows.set_weights(weights)
        return [Signal.WAKE, Signal.FREED]  # the windows changed: claim; a pump

    def set_caps(self, caps: Mapping[str, int]) -> list[Action]:
        """The tenants' caps on concurrent calls, as lane caps of the worker kernel (this
        worker alone never starts more; the fleet-wide count is taken by the shell)."""
        if caps == self.caps:
            return []
        for tenant in set(self.caps) - set(caps):
            self.worker.set_lane_cap(tenant, None)
        for tenant, cap in caps.items():
            self.worker.set_lane_cap(tenant, cap)
        self.caps = dict(caps)
        return [Signal.WAKE, Signal.FREED]  # a raised cap may let queued events start

    def stop(self) -> list[Action]:
        """The drain stops: nothing more starts, and what is held and not running is dropped
        (the worker's stop puts its claims back)."""
        self.closing = True
        for inst in list(self.instances.values()):
            self._drop_queued(inst)
        return self._take()

    # -- bookkeeping ------------------------------------------------------------------------
    def _accept(self, rows: list[ClaimedEvent]) -> list[HeldInstance]:
        fresh: dict[HeldInstance, None] = {}
        for row in rows:
            if row.ref in self.paused:  # being handed over: decided when it ends (`resume`)
                self.skipped.setdefault(row.ref, []).append(row)
                continue
            # A row held here already is claimed again under a newer epoch (we lost the
            # instance and took it back): the instance of the old epoch is lost, and what it
            # held but had not started is dropped (`_instance_for`), so the row is held afresh.
            inst = self._instance_for(row)
            held = self.jobs.get(row.queue_id)
            if held is not None:
                # Its old run is under way or waits for its retry: a success completes it under
                # the new epoch; the new epoch's instance holds its group slot meanwhile.
                held.row = row
                if inst is not None:
                    self._adopt(held, inst)
                continue
            if inst is None:
                continue
            self._hold_here(inst, row)
            if inst.cell.loaded:
                self.dirty[inst] = None
            else:
                fresh[inst] = None
        return list(fresh)

    def _hold_here(self, inst: HeldInstance, row: ClaimedEvent) -> Job:
        job = Job(row, inst, next_attempt(row))
        self.jobs[row.queue_id] = job
        self.windows.held(row.tenant)
        k, g = inst.kernel, row.group_id
        n = inst.groups.get(g, 0)
        if not n:
            k.set_lane_cap(g, inst.cap)
        inst.groups[g] = n + 1
        k.push(row.queue_id, g, seq=row.queue_id, payload=job)
        return job

    def _adopt(self, job: Job, inst: HeldInstance) -> None:
        """The row of `job`, held here under an older epoch, was claimed here again under the
        epoch of `inst`. Its group slot moves to `inst` (taken at once: the row is the oldest
        of its group there), so the rows of its group that the new epoch holds wait behind it.
        A retry waiting out its backoff runs under `inst` from now on; a call under way keeps
        its instance's state cell, and `inst` becomes its heir (`fenced`)."""
        if inst is job.inst or inst is job.heir:
            return
        qid, group = job.row.queue_id, job.row.group_id
        k = inst.kernel
        n = inst.groups.get(group, 0)
        if not n:
            k.set_lane_cap(group, inst.cap)
        inst.groups[group] = n + 1
        k.push(qid, group, seq=qid, payload=job)
        if k.claim(qid) is None:  # cannot be: a slot of a group the new epoch has not started
            k.cancel(qid)
            forget_one(inst, group)
            log.error("event %d claimed anew found its group full under the new epoch", qid)
            return
        it = self.worker.get(qid)
        if it is not None and it.state is ItemState.RUNNING:
            if job.heir is not None:
                self._give_slot(job.heir, job)
            job.heir = inst
        else:
            self._give_slot(job.inst, job)
            job.inst = inst

    def _instance_for(self, row: ClaimedEvent) -> HeldInstance | None:
        ref = row.ref
        inst = self.instances.get(ref)
        if inst is not None and not inst.lost and inst.cell.epoch == row.epoch:
            self.resting.pop(ref, None)
            return inst
        actor = self._actors.get(row.actor)
        if actor is None:
            log.warning(
                "no actor %r is defined in this worker; its event %d waits", row.actor, row.queue_id
            )
            self._out.append(PutBack(row))
            return None
        if inst is not None:
            self._drop_queued(inst)  # an older epoch: what it still holds is fenced
        inst = HeldInstance(actor, self._cell_for(ref, row.epoch))
        self.instances[ref] = inst
        return inst

    def _free(self, job: Job) -> None:
        qid = job.row.queue_id
        self._unhold(qid)
        worker = self.worker
        if worker.get(qid) is not None:
            worker.release(qid)
        self._give_slot(job.inst, job)
        if job.heir is not None:
            self._give_slot(job.heir, job)
            job.heir = None

    def _give_slot(self, inst: HeldInstance, job: Job) -> None:
        """The group slot `job` holds in `inst` (if any) is free: the instance may start more,
        rests if it holds nothing, or is forgotten if lost and idle."""
        qid, k = job.row.queue_id, inst.kernel
        it = k.get(qid)
        if it is not None and it.state is ItemState.RUNNING:
            k.release(qid)
            forget_one(inst, job.row.group_id)
        if not inst.lost:
            self.dirty[inst] = None
            if not inst.groups:
                self._rest(inst)
        elif k.running == 0 and self.instances.get(inst.ref) is inst:
            del self.instances[inst.ref]

    def _release_group(self, job: Job) -> None:
        """The row is no longer held here: its group slot is freed (it held no worker slot)."""
        self._unhold(job.row.queue_id)
        for inst in (job.inst, job.heir):
            if inst is None:
                continue
            k, qid = inst.kernel, job.row.queue_id
            it = k.get(qid)
            if it is not None and it.state is ItemState.RUNNING:
                k.release(qid)
                forget_one(inst, job.row.group_id)
        job.heir = None

    def _unhold(self, qid: int) -> None:
        job = self.jobs.pop(qid, None)
        if not self.jobs:
            self._out.append(Signal.NUDGE)  # nothing more will end soon: write what ended
        if job is not None and self.windows.released(job.row.tenant):
            self._out.append(Signal.REFILL)

    def _rest(self, inst: HeldInstance) -> None:
        """An instance that holds nothing here keeps its cached state for a while; the least
        recently used ones beyond `idle_instances` are forgotten (memory stays bounded)."""
        resting = self.resting
        resting[inst.ref] = None
        resting.move_to_end(inst.ref)
        while len(resting) > self._idle_instances:
            ref, _ = resting.popitem(last=False)
            old = self.instances.get(ref)
            if old is not None and not old.groups:
                del self.instances[ref]

    def _drop_queued(self, inst: HeldInstance) -> None:
        """Forget what an instance holds here but has not started: its new owner runs it."""
        inst.lost = True
        self.dirty.pop(inst, None)
        for it in queued_items(inst.kernel):
            inst.kernel.cancel(it.id)
            self._unhold(it.id)  # type: ignore[arg-type]
            forget_one(inst, it.lane)  # type: ignore[arg-type]
        for it in list(items_of(self.worker, inst)):
            if it.state is ItemState.QUEUED:
                self.worker.cancel(it.id)
                self._unhold(it.id)  # type: ignore[arg-type]
                k = inst.kernel
                if k.get(it.id) is not None:
                    k.release(it.id)
                    forget_one(inst, it.payload.row.group_id)  # type: ignore[attr-defined]
