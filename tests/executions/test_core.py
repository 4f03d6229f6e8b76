"""The admission core against its brute-force model (`admission_model.py`), on random histories.

A hypothesis state machine drives `AdmissionCore` and the model side by side through starts
arriving, log and grant batches answering (GRANTED, FULL when another process holds the slot,
GONE when cancelled meanwhile, or failing), executions ending, cancels, priority and limit
changes, and shutdown, with a small simulated store between them. After every step the kernel's
picks so far, what each caller was told, and every start's phase must be the model's; the
grants carry the caps in force; a caller is told once, and only what the core settled. No event
loop, no database: the core
is synchronous, so its interleavings are exactly the steps.
"""

from __future__ import annotations

import itertools
import uuid
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from yoke.errors import Conflict, NotFound, ShuttingDown, StoreUnavailable
from yoke.executions import Limits
from yoke.executions.core import AdmissionCore
from yoke.executions.state import Ids
from yoke.executions.tickets import Action, Answer, Grant, Launch, Log, Phase, Refuse, Ticket
from yoke.store import (
    ExecutionRow,
    ExecutionStatus,
    GrantOutcome,
    GrantResult,
    NewStart,
    StartKind,
    StartRow,
    StartStatus,
)

from .admission_model import AdmissionModel, MStart

SESSIONS = ("a", "a/x", "b")  # tenants a (two sessions) and b
WORKFLOWS = ("w1", "w2")
_PHASE_OF = {
    "logging": {Phase.LOGGING},
    "queued": {Phase.QUEUED},
    "granting": {Phase.GRANTING},
    "running": {Phase.GRANTED, Phase.RUNNING},
    "finishing": {Phase.FINISHING},
    "ended": {Phase.ENDED},
}
limits_st = st.builds(
    Limits,
    max_running=st.sampled_from([None, 1, 2, 3]),
    max_running_per_session=st.sampled_from([None, 1, 2]),
    max_running_per_workflow=st.sampled_from([None, 1, {"w1": 1}]),
    max_queued=st.sampled_from([None, 1, 3]),
    on_limit=st.sampled_from(["queue", "queue", "reject"]),
)


def _new(i: int, session: str, workflow: str, prio: int) -> NewStart:
    return NewStart(
        start_id=f"s{i}",
        kind=StartKind.START,
        workflow=workflow,
        session=session,
        tenant=session.split("/")[0],
        priority=prio,
        input="null",
        fingerprint="",
        principal=None,
        idempotency_key=None,
        source_execution_id=None,
        from_step=None,
        instance_id="here",
        created_at=0.0,
    )


class Store:
    """Rows and the ledger, as the SQL stores keep them; another process may hold slots."""

    def __init__(self) -> None:
        self.rows: dict[str, StartRow] = {}
        self.ledger: Counter[str] = Counter()  # this process's grants, by key
        self.elsewhere: Counter[str] = Counter()
        self.slots_of: dict[str, tuple[str, ...]] = {}
        self.seq = itertools.count(1)

    def log(self, new: NewStart) -> StartRow:
        row = new.logged(seq=next(self.seq))
        self.rows[new.start_id] = row
        return row

    def set(self, start_id: str, **changes: Any) -> StartRow:
        old = self.rows[start_id]
        fields = {f: getattr(old, f) for f in old.__slots__} | changes
        self.rows[start_id] = row = StartRow(**fields)
        return row

    def grant(self, g: Grant) -> GrantResult:
        req = g.request
        if req.log is not None:
            self.log(req.log)
        row = self.rows[req.start_id]
        if row.status is not StartStatus.QUEUED:
            return GrantResult(outcome=GrantOutcome.GONE, start=row)
        for slot in req.slots:
            if (
                slot.cap is not None
                and self.ledger[slot.key] + self.elsewhere[slot.key] >= slot.cap
            ):
                return GrantResult(outcome=GrantOutcome.FULL, start=row, full_key=slot.key)
        keys = tuple(s.key for s in req.slots)
        self.ledger.update(keys)
        self.slots_of[req.start_id] = keys
        ex_id = req.execution.execution_id
        row = self.set(req.start_id, status=StartStatus.GRANTED, execution_id=ex_id)
        execution = ExecutionRow(
            seq=1,
            execution_id=ex_id,
            start_id=row.start_id,
            workflow=row.workflow,
            session=row.session,
            tenant=row.tenant,
            input=row.input,
            status=ExecutionStatus.RUNNING,
            output=None,
            error=None,
            parent_id=None,
            restarted_from=None,
            resumed_from=None,
            slot_keys=keys,
            instance_id="here",
            created_at=0.0,
            finished_at=None,
        )
        return GrantResult(outcome=GrantOutcome.GRANTED, start=row, execution=execution)

    def finish(self, start_id: str) -> None:
        self.ledger.subtract(self.slots_of.pop(start_id))


class AdmissionMachine(RuleBasedStateMachine):
    @initialize(limits=limits_st)
    def init(self, limits: Limits) -> None:
        ids = (f"e{i}" for i in itertools.count())
        self.core = AdmissionCore(limits, instance_id="here", new_id=lambda: next(ids))
        self.model = AdmissionModel(limits)
        self.store = Store()
        self.n = 0
        self.tickets: dict[str, Ticket] = {}
        self.logs: list[Log] = []
        self.grants: list[Grant] = []
        self.ending: list[Ticket] = []  # FINISHING: their ends not recorded yet
        self.riders: list[Grant] = []  # the grants that go in the transaction of those ends
        self.picked: list[str] = []  # every id sent to the ledger, in order: the core's
        self.expected: list[str] = []  # and the model's
        self.told: dict[str, str] = {}
        self.now = 0.0

    # -- performing the core's actions as the shell would -------------------------------------
    def _take(self, actions: list[Action], *, riding: bool = False) -> None:
        for a in actions:
            t = a.ticket
            if isinstance(a, Grant):
                (self.riders if riding else self.grants).append(a)
                self.picked.append(t.start_id)
                # The ledger checks the caps the grant carries: they must be today's.
                lim, row = self.core.limits, t.row
                caps = {
                    "global": lim.max_running,
                    f"session:{row.session}": lim.max_running_per_session,
                    f"workflow:{row.workflow}": lim.workflow_cap(row.workflow),
                    f"tenant:{row.tenant}": None,  # this machine sets no tenant settings
                }
                assert {s.key: s.cap for s in a.request.slots} == caps
            elif isinstance(a, Log):
                self.logs.append(a)
            elif isinstance(a, Launch):
                self._tell(t, "granted")
            elif isinstance(a, Refuse):
                self._tell(
                    t, "refused: limit" if a.reason.startswith("limit") else f"refused: {a.reason}"
                )
                stored = self.store.rows.get(t.start_id)
                if stored is not None and stored.status is StartStatus.QUEUED:
                    self.store.set(t.start_id, status=StartStatus.REFUSED)
            else:
                assert isinstance(a, Answer)
                if t.settled:
                    self._tell(t, "queued" if t.phase is Phase.QUEUED else "ended")

    def _tell(self, t: Ticket, what: str) -> None:
        assert t.settled, f"{t} answered before the core settled it"
        self.told.setdefault(t.start_id, what)

    def _tick(self) -> float:
        self.now += 1.0
        return self.now

    # -- rules ------------------------------------------------------------------------------------
    @rule(
        session=st.sampled_from(SESSIONS),
        workflow=st.sampled_from(WORKFLOWS),
        prio=st.integers(0, 1),
    )
    def arrive(self, session: str, workflow: str, prio: int) -> None:
        self.n += 1
        new = _new(self.n, session, workflow, prio)
        if self.model.closing:
            try:
                self.core.arrive(new, None, now=self._tick())
            except ShuttingDown:
                return
            raise AssertionError("a start arrived after shutdown")
        t, action = self.core.arrive(new, None, now=self._tick())
        self.tickets[t.start_id] = t
        s = MStart(new.start_id, session, workflow, prio)
        kind = self.model.arrive(s)
        assert isinstance(action, Grant if kind == "grant" else Log), (kind, action)
        if kind == "grant":
            self.expected.append(s.id)
        self._take([action])

    @precondition(lambda self: self.logs)
    @rule()
    def logs_answer(self) -> None:
        batch, self.logs = self.logs, []
        for a in batch:
            row = self.store.log(a.start)
            self.expected += self.model.logged(self.model.starts[a.ticket.start_id])
            self._take(self.core.logged(a.ticket, row, True, now=self._tick()))

    @precondition(lambda self: self.grants)
    @rule(fail=st.booleans())
    def grants_answer(self, fail: bool) -> None:
        batch, self.grants = self.grants, []
        if fail:
            for g in batch:
                self.expected += self.model.failed(self.model.starts[g.ticket.start_id])
            self._take(self.core.grants_failed(batch, StoreUnavailable("down"), now=self._tick()))
            return
        results = [self.store.grant(g) for g in batch]
        for g, res in zip(batch, results, strict=True):
            s = self.model.starts[g.ticket.start_id]
            self.expected += self.model.granted(s, res.outcome.value)
        self._take(self.core.granted(batch, results, now=self._tick()))

    @precondition(lambda self: any(t.phase is Phase.GRANTED for t in self.tickets.values()))
    @rule(data=st.data())
    def execution_ends(self, data: st.DataObject) -> None:
        """Its run ends: its slot is handed over, the picks for it ride with its end."""
        running = sorted(i for i, t in self.tickets.items() if t.phase is Phase.GRANTED)
        start_id = data.draw(st.sampled_from(running))
        t = self.tickets[start_id]
        assert self.core.begin(t)
        self.expected += self.model.finishing(self.model.starts[start_id])
        self._take(self.core.finishing(t, now=self._tick()), riding=True)
        self.ending.append(t)

    @precondition(lambda self: self.ending)
    @rule(fail=st.booleans())
    def ends_answer(self, fail: bool) -> None:
        """The batch of ends and their riding grants answers, one transaction: the ends are
        written first (their slots freed), then the grants; or nothing is (the ends are
        retried, the grants fail)."""
        riders, self.riders = self.riders, []
        if fail:
            for g in riders:
                self.expected += self.model.failed(self.model.starts[g.ticket.start_id])
            self._take(self.core.grants_failed(riders, StoreUnavailable("down"), now=self._tick()))
            return
        ending, self.ending = self.ending, []
        for t in ending:
            self.store.finish(t.start_id)
        results = [self.store.grant(g) for g in riders]
        for g, res in zip(riders, results, strict=True):
            s = self.model.starts[g.ticket.start_id]
            self.expected += self.model.granted(s, res.outcome.value)
        self._take(self.core.granted(riders, results, now=self._tick()))
        for t in ending:
            self.core.finished(t, now=self._tick())
            self.model.finished(self.model.starts[t.start_id])
        self._dispatch()

    @rule(key=st.sampled_from(["global", "session:a", "workflow:w1"]), take=st.booleans())
    def another_process(self, key: str, take: bool) -> None:
        if take:
            self.store.elsewhere[key] += 1
        elif self.store.elsewhere[key]:
            self.store.elsewhere[key] -= 1
            self._dispatch()

    @precondition(
        lambda self: any(r.status is StartStatus.QUEUED for r in self.store.rows.values())
    )
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        queued = sorted(i for i, r in self.store.rows.items() if r.status is StartStatus.QUEUED)
        start_id = data.draw(st.sampled_from(queued))
        row = self.store.set(start_id, status=StartStatus.CANCELLED)
        self.model.cancel(self.model.starts[start_id])
        self._take(self.core.cancelled(start_id, row))

    @precondition(
        lambda self: any(r.status is StartStatus.QUEUED for r in self.store.rows.values())
    )
    @rule(data=st.data(), prio=st.integers(0, 2))
    def reprioritize(self, data: st.DataObject, prio: int) -> None:
        queued = sorted(i for i, r in self.store.rows.items() if r.status is StartStatus.QUEUED)
        start_id = data.draw(st.sampled_from(queued))
        self.core.reprioritized(start_id, self.store.set(start_id, priority=prio))
        self.model.starts[start_id].prio = prio
        self._dispatch()

    @rule(limits=limits_st)
    def set_limits(self, limits: Limits) -> None:
        self.core.apply_limits(limits)
        self.model.limits = limits
        self._dispatch()

    @rule()
    def dispatch(self) -> None:
        self._dispatch()

    @precondition(lambda self: not self.model.closing)
    @rule()
    def shutdown(self) -> None:
        self.model.shutdown()
        self._take(self.core.shutdown())

    def _dispatch(self) -> None:
        self.expected += self.model.pump()
        self._take(self.core.next_grants(now=self._tick()))

    # -- invariants -------------------------------------------------------------------------------
    @invariant()
    def same_picks_and_answers(self) -> None:
        assert self.picked == self.expected
        told = {s.id: s.told for s in self.model.starts.values() if s.told is not None}
        assert self.told == told

    @invariant()
    def same_phases(self) -> None:
        for start_id, s in self.model.starts.items():
            t = self.tickets[start_id]
            assert t.phase in _PHASE_OF[s.state], (t, s)
            assert (start_id in self.core.tickets) == (s.state != "ended"), (t, s)
        k = self.core.kernel
        # A start whose end is being recorded has handed its slot over already.
        holding = sum(s.state in ("granting", "running") for s in self.model.starts.values())
        queued = sum(s.state == "queued" for s in self.model.starts.values())
        assert (k.running, k.queued) == (holding, queued)
        assert len(self.core.order) == queued


TestAdmissionCore = AdmissionMachine.TestCase
TestAdmissionCore.settings = settings(
    max_examples=300,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_a_priority_changed_while_its_grant_is_out_counts_when_it_comes_back_full() -> None:
    ids = (f"e{i}" for i in itertools.count())
    core = AdmissionCore(Limits(max_running=1), instance_id="here", new_id=lambda: next(ids))
    store = Store()
    store.elsewhere["global"] = 1  # another process holds the one slot
    t1, g1 = core.arrive(_new(1, "a", "w1", 1), None, now=1.0)
    assert isinstance(g1, Grant)
    [full] = [store.grant(g1)]
    assert full.outcome is GrantOutcome.FULL
    core.granted([g1], [full], now=2.0)
    assert t1.phase is Phase.QUEUED
    t2, log2 = core.arrive(_new(2, "b", "w1", 1), None, now=3.0)
    assert isinstance(log2, Log)
    picked = [
        a for a in core.logged(t2, store.log(log2.start), True, now=4.0) if isinstance(a, Grant)
    ]
    assert [g.ticket for g in picked] == [t1]  # the older of two equals
    core.reprioritized(t1.start_id, store.set(t1.start_id, priority=0))
    core.granted(picked, [store.grant(picked[0])], now=5.0)  # FULL again: back in line
    [next_pick] = core.next_grants(now=6.0)
    assert isinstance(next_pick, Grant) and next_pick.ticket is t2  # t1 now ranks lower


def test_ids_from_the_buffered_source_are_distinct_uuid4s() -> None:
    ids = Ids()
    seen = [ids() for _ in range(3000)]  # past several refills of the buffer
    assert len(set(seen)) == len(seen)
    for text in seen[::97]:
        u = uuid.UUID(text)
        assert (u.version, u.variant, str(u)) == (4, uuid.RFC_4122, text)


def test_a_tenant_spreading_its_starts_over_sessions_waits_its_turn_with_the_others() -> None:
    """Tenant a runs one start in session a/x and queues one in session a; tenant b queues
    one later. When a slot frees, b goes first: a already runs one (its session a runs none,
    which alone would have put it first as the older start)."""
    ids = (f"e{i}" for i in itertools.count())
    core = AdmissionCore(Limits(max_running=2), instance_id="here", new_id=lambda: next(ids))
    store = Store()
    running: list[Ticket] = []
    for i, session in enumerate(("a/x", "c")):
        t, g = core.arrive(_new(i, session, "w1", 0), None, now=float(i))
        assert isinstance(g, Grant)
        [launch] = core.granted([g], [store.grant(g)], now=float(i))
        assert isinstance(launch, Launch)
        running.append(t)
    queued = []
    for i, session in ((2, "a"), (3, "b")):
        t, log_ = core.arrive(_new(i, session, "w1", 0), None, now=float(i))
        assert isinstance(log_, Log)
        assert not [a for a in core.logged(t, store.log(log_.start), True, now=float(i))
                    if isinstance(a, Grant)]  # fmt: skip
        queued.append(t)
    c = running[1]
    assert core.begin(c)
    [pick] = core.finishing(c, now=5.0)  # its slot is handed over at once
    assert isinstance(pick, Grant) and pick.ticket is queued[1]  # b's start, not a's older one


def test_the_core_decides_which_starts_may_be_cancelled_or_reprioritised() -> None:
    """Only a QUEUED start changes: the core says so of the stored row before the write
    (`may_change`) and of the store's answer after it (`cancelled`, `reprioritized`); the
    shell asks it and decides nothing of its own."""
    ids = (f"e{i}" for i in itertools.count())
    core = AdmissionCore(Limits(max_running=1), instance_id="here", new_id=lambda: next(ids))
    store = Store()
    t1, g1 = core.arrive(_new(1, "a", "w1", 1), None, now=1.0)
    assert isinstance(g1, Grant)
    core.granted([g1], [store.grant(g1)], now=2.0)
    t2, log2 = core.arrive(_new(2, "b", "w1", 1), None, now=3.0)
    assert isinstance(log2, Log)
    core.logged(t2, store.log(log2.start), True, now=4.0)
    assert t2.phase is Phase.QUEUED
    with pytest.raises(NotFound):
        core.may_change("nope", None)
    with pytest.raises(Conflict, match="GRANTED, not QUEUED"):
        core.may_change(t1.start_id, store.rows[t1.start_id])
    assert core.may_change(t2.start_id, store.rows[t2.start_id]) is store.rows[t2.start_id]
    with pytest.raises(Conflict):  # granted meanwhile: the store's answer is not CANCELLED
        core.cancelled(t1.start_id, store.rows[t1.start_id])
    with pytest.raises(Conflict):  # gone meanwhile
        core.reprioritized(t2.start_id, None)
    assert core.kernel.stats().queued == 1  # the refused changes changed nothing
    core.cancelled(t2.start_id, store.set(t2.start_id, status=StartStatus.CANCELLED))
    assert core.kernel.stats().queued == 0
    assert t2.phase.name == "ENDED"
