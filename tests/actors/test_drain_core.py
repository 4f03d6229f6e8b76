"""`DrainCore` against a plain model (`drain_model.py`): a hypothesis state machine.

The machine plays the store and the shell: it appends rows, claims them within the quotas the
core's windows give (or loses a claim's answer, and puts its rows back before the next claim),
reads the states the core asks for, ends calls (a success, a throw retried after its backoff or
dead-lettered, a fenced call), moves time on, takes instances over (their claimed rows pending
again under a newer epoch), pauses and settles moves, changes weights and caps, and stops. After
each step the model checks every start the core made and what the core holds against the
store: FIFO per group, the group cap, the worker's slots, the tenants' caps, the claim windows,
no row held or run twice, nothing left claimed that the drain does not hold.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, cast

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.actors.drain_model import CLAIMED, GONE, PENDING, DrainModel, MRow
from yoke.actors.ctx import InstanceStateCell
from yoke.actors.definitions import ActorDef, Backoff, Queue
from yoke.actors.drain_core import DrainCore, LoadStates, PutBack
from yoke.actors.drain_parts import Job
from yoke.kernel import ItemState
from yoke.store.actor_records import ClaimedEvent, InstanceRef

TENANTS = ("t0", "t1", "t2")
# instance name -> (tenant, actor); actor "one" has queue concurrency 1, "two" 2
INSTANCES = {f"{t}.{n}": (t, actor) for t in TENANTS for n, actor in (("i0", "one"), ("i1", "two"))}
CAPS = {"one": 1, "two": 2}
GROUPS = ("g0", "g1")
CONCURRENCY = 3
BUDGET = 12
MAX_ATTEMPTS = 3
BACKOFF = Backoff(initial=0.1, factor=2.0, max_attempts=MAX_ATTEMPTS)


async def _noop(ctx: Any, event: Any) -> None:
    return None


ACTORS = {
    name: ActorDef(
        name=name,
        subscribe=("s",),
        key="k",
        queue=Queue(concurrency=cap),
        backoff=BACKOFF,
        process=_noop,
    )
    for name, cap in CAPS.items()
}


def ref_of(instance: str) -> InstanceRef:
    tenant, actor = INSTANCES[instance]
    return InstanceRef(tenant=tenant, actor=actor, instance_id=instance)


def cell_for(ref: InstanceRef, epoch: int) -> InstanceStateCell:
    return InstanceStateCell(cast(Any, None), ref, worker_id="w", epoch=epoch)


class DrainMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.core = DrainCore(
            actors=ACTORS, cell_for=cell_for, concurrency=CONCURRENCY, budget=BUDGET
        )
        self.model = DrainModel(
            budget=BUDGET,
            concurrency=CONCURRENCY,
            group_caps={i: CAPS[a] for i, (_, a) in INSTANCES.items()},
            epochs=dict.fromkeys(INSTANCES, 1),
        )
        self.running: dict[int, Job] = {}  # the calls under way, by row
        self.retrying: dict[int, Job] = {}
        self.next_qid = 1
        self.claim_id = 0
        self.unsure: int | None = None  # a claim whose answer was lost
        self.now = 0.0
        self.paused: dict[str, int] = {}  # instance -> its epoch when the move began
        self.moved: set[str] = set()  # paused instances whose move has finished

    # -- the shell's part: perform the core's actions ---------------------------------------
    def perform(self, actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, Job):
                self.start(action)
            elif isinstance(action, LoadStates):
                for inst in action.instances:
                    inst.cell.loaded = True
                self.core.loaded(action.instances)
            else:
                assert not isinstance(action, PutBack), "every actor is defined here"

    def start(self, job: Job) -> None:
        qid, epoch = job.row.queue_id, job.row.epoch
        why = self.model.may_start(qid, epoch)
        assert why is None, why
        assert job.inst.ref.instance_id not in self.paused, "a paused instance started a call"
        self.model.start(qid, epoch)
        self.running[qid] = job

    def pump(self) -> None:
        self.perform(self.core.pump())

    # -- the store's part -----------------------------------------------------------------------
    @rule(
        instance=st.sampled_from(sorted(INSTANCES)),
        group=st.sampled_from(GROUPS),
        n=st.integers(1, 3),
    )
    def append(self, instance: str, group: str, n: int) -> None:
        for _ in range(n):
            tenant = INSTANCES[instance][0]
            self.model.rows[self.next_qid] = MRow(self.next_qid, tenant, instance, group)
            self.next_qid += 1

    @precondition(lambda self: not self.model.stopped)
    @rule(lose=st.booleans())
    def claim(self, lose: bool) -> None:
        """One claim (`claim_next` with the windows' quotas): each tenant's oldest pending rows."""
        model, core = self.model, self.core
        if self.unsure is not None:  # the claimer puts a lost claim's rows back first
            for row in model.rows.values():
                if row.status == CLAIMED and row.claim == self.unsure:
                    row.status = PENDING
            self.unsure = None
        held = core.held_by_tenant()
        self.claim_id += 1
        got: list[MRow] = []
        asked: dict[str, int] = {}
        for tenant in TENANTS:
            waiting = [r for r in model.rows.values() if r.tenant == tenant and r.status == PENDING]
            if not waiting:
                continue
            quota = core.windows.quota(tenant)
            assert quota == model.quota(tenant, dict(held)), (tenant, quota, held, model.backlog)
            asked[tenant] = quota
            for row in sorted(waiting, key=lambda r: r.qid)[:quota]:
                row.status, row.claim = CLAIMED, self.claim_id
                row.epoch = model.epochs[row.instance]
                got.append(row)
        if lose:  # committed, but the answer was lost with the connection
            self.unsure = self.claim_id
            return
        core.windows.claimed(r.tenant for r in got)
        for tenant, quota in asked.items():
            if sum(1 for r in got if r.tenant == tenant) >= quota:
                model.backlog.add(tenant)
            else:
                model.backlog.discard(tenant)
        self.perform(core.claimed([self.claimed_event(r) for r in got]))
        for r in got:  # claimed anew while its call runs or waits: its slot is the new epoch's
            call = model.calls.get(r.qid)
            if call and call.state in ("running", "retrying") and r.instance not in self.paused:
                call.key = (r.instance, r.epoch, r.group)
        self.pump()

    def claimed_event(self, row: MRow) -> ClaimedEvent:
        tenant, actor = INSTANCES[row.instance]
        return ClaimedEvent(
            queue_id=row.qid,
            event_id=row.qid,
            tenant=tenant,
            actor=actor,
            instance_id=row.instance,
            group_id=row.group,
            stream="s",
            data="{}",
            attempts=row.attempts,
            appended_at=0.0,
            epoch=row.epoch,
        )

    @rule()
    def pump_rule(self) -> None:
        self.pump()

    # -- calls that end ---------------------------------------------------------------------------
    def written(self, job: Job) -> bool:
        """A write of the row under the job's epoch: the store takes it, or it is fenced."""
        row = self.model.rows[job.row.queue_id]
        return row.status == CLAIMED and row.epoch == job.row.epoch

    @precondition(lambda self: self.running)
    @rule(data=st.data(), outcome=st.sampled_from(["ok", "throw", "fenced"]))
    def end(self, data: st.DataObject, outcome: str) -> None:
        self.end_call(data.draw(st.sampled_from(sorted(self.running))), outcome)

    def end_call(self, qid: int, outcome: str) -> None:
        job = self.running.pop(qid)
        row, core = self.model.rows[qid], self.core
        # Its state cell writes under the epoch the instance had when the row was held: after
        # a takeover its call is fenced (or, if it writes nothing, ends well; its completion
        # then goes under the epoch its row was claimed with last).
        stale = job.inst.cell.epoch < self.model.epochs[row.instance]
        if outcome == "fenced" and not stale:
            outcome = "ok"
        call = self.model.calls[qid]
        if outcome == "fenced":  # Outcomes.at_once: the verdict FENCED
            call.state = "ended"  # if claimed here anew, held afresh: first of its group
            self.perform(core.fenced(job))
        elif outcome == "ok":  # the completion joins a batch; the slot is free at once
            call.state = "ended"
            ok = self.written(job)
            self.perform(core.ended(job))
            if ok:
                row.status = GONE
            else:  # refused: the instance is another worker's now
                self.perform(core.lost(job.inst))
        else:
            row.attempts += 1
            failures = job.row.attempts + job.failures + 1
            job.failures += 1
            if BACKOFF.exhausted(failures):  # a dead letter, then both slots free
                if self.written(job):
                    row.status = GONE
                call.state = "ended"
                self.perform(core.ended(job))
            elif self.written(job):  # requeued: it waits for its backoff, group slot kept
                call.state = "retrying"
                self.retrying[qid] = job
                self.perform(core.retry(job, BACKOFF.delay(failures), now=self.now))
            else:
                call.state = "ended"
                self.perform(core.lost(job.inst))
                self.perform(core.ended(job))
        self.pump()

    def stale(self) -> list[int]:
        """Calls under way whose instance was taken over since their row was held."""
        return [
            qid
            for qid, job in self.running.items()
            if job.inst.cell.epoch < self.model.epochs[self.model.rows[qid].instance]
        ]

    @precondition(lambda self: self.stale())
    @rule(data=st.data())
    def fenced(self, data: st.DataObject) -> None:
        """A call whose instance was taken over writes its state: fenced (its row may have
        been claimed here anew meanwhile, and is then held afresh)."""
        qid = data.draw(st.sampled_from(self.stale()))
        self.end_call(qid, "fenced")

    @rule(dt=st.sampled_from([0.05, 0.1, 0.5]))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        self.perform(self.core.due(self.now))
        for qid, job in list(self.retrying.items()):
            if self.core.jobs.get(qid) is not job:  # let go: its instance was lost
                del self.retrying[qid]
                self.model.calls[qid].state = "ended"
            elif self.core.worker.get(qid) is not None:  # due: waits for a worker slot
                del self.retrying[qid]
        self.pump()

    # -- instances taken over, moved ------------------------------------------------------------
    @precondition(lambda self: self.running or self.retrying)
    @rule(data=st.data())
    def taken_over(self, data: st.DataObject) -> None:
        """Another worker took over an instance with a call under way here, and this one took
        it back: a newer epoch, the claimed rows pending again (the takeover's doing). The core
        learns of it from a fenced call or from a claim under the newer epoch."""
        jobs = [*self.running.values(), *self.retrying.values()]
        instances = sorted({job.inst.ref.instance_id for job in jobs})
        self.take(data.draw(st.sampled_from(instances)))
        if data.draw(st.booleans()) and not self.model.stopped:
            self.claim(lose=False)  # at once: its rows are claimed under the newer epoch

    def take(self, instance: str) -> None:
        self.model.epochs[instance] += 1
        for row in self.model.rows.values():
            if row.instance == instance and row.status == CLAIMED:
                row.status = PENDING

    @precondition(lambda self: not self.model.stopped)
    @rule(instance=st.sampled_from(sorted(INSTANCES)))
    def pause(self, instance: str) -> None:
        if instance in self.paused:
            return
        self.paused[instance] = self.model.epochs[instance]
        self.perform(self.core.pause(ref_of(instance)))
        for qid, job in list(self.retrying.items()):
            if job.inst.ref.instance_id == instance:
                del self.retrying[qid]
                self.model.calls[qid].state = "ended"

    @precondition(lambda self: any(i not in self.moved for i in self.paused))
    @rule(data=st.data())
    def finish_move(self, data: st.DataObject) -> None:
        """`settle` saw nothing of it running; the move is cancelled and the instance kept
        under a newer epoch (`finish_move`: claimed rows pending again, as in a takeover)."""
        instance = data.draw(st.sampled_from(sorted(set(self.paused) - self.moved)))
        if self.core.busy(ref_of(instance)):
            return
        self.take(instance)
        self.moved.add(instance)
        if data.draw(st.booleans()) and not self.model.stopped:
            self.claim(lose=False)  # rows claimed under the newer epoch before `resume`

    @precondition(lambda self: self.moved)
    @rule(data=st.data())
    def resume(self, data: st.DataObject) -> None:
        instance = data.draw(st.sampled_from(sorted(self.moved)))
        epoch = self.paused.pop(instance)
        self.moved.discard(instance)
        self.perform(self.core.resume(ref_of(instance), epoch))
        self.pump()

    # -- settings, stop ---------------------------------------------------------------
    @rule(
        weights=st.dictionaries(st.sampled_from(TENANTS), st.sampled_from([0.5, 2.0, 3.0])),
        caps=st.dictionaries(st.sampled_from(TENANTS), st.sampled_from([1, 1, 2])),
    )
    def settings_changed(self, weights: dict[str, float], caps: dict[str, int]) -> None:
        self.perform(self.core.set_weights(weights))
        self.perform(self.core.set_caps(caps))
        self.model.weights, self.model.caps = dict(weights), dict(caps)
        self.pump()

    @precondition(lambda self: not self.model.stopped)
    @rule()
    def stop(self) -> None:
        self.model.stopped = True
        self.perform(self.core.stop())

    # -- what the core holds, against the store ----------------------------------------------
    @invariant()
    def slots_counted(self) -> None:
        assert self.core.running == self.model.running() == len(self.running)

    @invariant()
    def group_slots_counted(self) -> None:
        """Each group's slots in its instance's kernel are its calls that run or wait for
        their retry, and its events given to the worker kernel that wait for a worker slot;
        each tenant's running calls are the worker kernel's."""
        waiting: Counter[tuple[str, int, str]] = Counter()
        for lane in self.core.worker.stats().lanes:
            for item in self.core.worker.pending(lane):
                job = cast(Job, item.payload)
                call = self.model.calls.get(job.row.queue_id)
                if call is None or call.state != "retrying":  # a due retry is counted as one
                    ref, row = job.inst.ref, job.row
                    waiting[ref.instance_id, job.inst.cell.epoch, row.group_id] += 1
        for inst in self.core.instances.values():
            if inst.lost:
                continue
            lanes = inst.kernel.stats().lanes
            instance, epoch = inst.ref.instance_id, inst.cell.epoch
            for group in GROUPS:
                lane = lanes.get(group)
                key = (instance, epoch, group)
                running = 0 if lane is None else lane.running
                assert running == self.model.slots(key) + waiting[key], key
        lanes = self.core.worker.stats().lanes
        for tenant in TENANTS:
            lane = lanes.get(tenant)
            assert (0 if lane is None else lane.running) == self.model.running(tenant), tenant

    @invariant()
    def windows_count_what_is_held(self) -> None:
        held = self.core.held_by_tenant()
        for tenant in TENANTS:
            assert self.core.windows.holding(tenant) == held[tenant], tenant

    @invariant()
    def nothing_left_claimed(self) -> None:
        """Every row the store says is claimed here under its instance's epoch is held by the
        drain, or waits for a move's end, or is a lost claim's (put back before the next)."""
        if self.model.stopped:
            return  # stop_worker puts every claim back
        skipped = {r.queue_id for rows in self.core.skipped.values() for r in rows}
        for row in self.model.rows.values():
            if row.status != CLAIMED or row.claim == self.unsure:
                continue
            if row.epoch != self.model.epochs[row.instance]:
                continue
            job = self.core.jobs.get(row.qid)
            # held for an instance that may run it, or by a call under way that, fenced, holds
            # the row afresh (`again`)
            held = (
                job is not None
                and job.row.epoch == row.epoch
                and (not job.inst.lost or row.qid in self.running or row.qid in self.retrying)
            )
            paused = row.instance in self.paused
            assert held or row.qid in skipped or paused, f"row {row.qid} is claimed, not held"

    @invariant()
    def nothing_held_is_stranded(self) -> None:
        """Every row the core holds can still run: its call runs or waits for its retry, it
        waits for a worker slot, or it waits in its group's lane of an instance that may run
        it (a row held by a lost instance's kernel would hold its window's share for good)."""
        for qid, job in self.core.jobs.items():
            if self.core.worker.get(qid) is not None or qid in self.retrying:
                continue
            it = job.inst.kernel.get(qid)
            queued = it is not None and it.state is ItemState.QUEUED
            assert queued and not job.inst.lost, f"row {qid} is held and can never run"

    @invariant()
    def nothing_gone_is_held(self) -> None:
        for qid in self.core.jobs:
            assert self.model.rows[qid].status != GONE or qid in self.running, qid

    def teardown(self) -> None:
        """Stop: the calls under way end, and nothing more starts."""
        if not self.model.stopped:
            self.stop()
        while self.running:
            qid = min(self.running)
            job = self.running.pop(qid)
            self.model.calls[qid].state = "ended"
            self.perform(self.core.ended(job))
            self.pump()
        assert self.core.running == 0
        self.perform(self.core.due(self.now + 1_000.0))
        self.pump()
        assert self.core.running == 0 and not self.running


class DrainMachineWithoutTakeovers(DrainMachine):
    """The machine without takeovers (nor, so, fenced calls): every invariant above, and none
    of the gap below."""

    def taken_over(self, data: st.DataObject) -> None:  # not a rule here
        raise AssertionError("no takeovers in this machine")

    def fenced(self, data: st.DataObject) -> None:  # not a rule here
        raise AssertionError("no fenced calls in this machine")


TestDrainCore = DrainMachineWithoutTakeovers.TestCase
TestDrainCore.settings = settings(
    max_examples=250,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# With takeovers: a call of an instance taken over and claimed back here under a newer epoch
# keeps its group slot in the new epoch's instance (`Job.heir`), so nothing of its group
# overtakes it, and runs again there if it ends fenced. Before `DrainCore._adopt` this machine
# found FIFO broken across such a re-claim (`row 3 overtook 2 of its group`).
TestDrainCoreTakeovers = DrainMachine.TestCase
TestDrainCoreTakeovers.settings = settings(
    max_examples=250,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
