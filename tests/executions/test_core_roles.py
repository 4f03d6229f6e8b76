"""The admission core's roles in a high-availability pair, driven synchronously (no loop, no
store): a standby admits nothing and names the leader; stepping down empties the queue without
a single write (the next leader adopts the starts from the store); a new leader takes adopted
starts in priority-then-arrival order, also while slots are free."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from yoke.errors import NotLeader
from yoke.executions import Limits
from yoke.executions.core import AdmissionCore, Role
from yoke.executions.tickets import Action, Answer, Grant, Log, Phase, Refuse
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

_ids = itertools.count()


def _core(max_running: int | None = 1) -> AdmissionCore:
    return AdmissionCore(
        Limits(max_running=max_running), instance_id="here", new_id=lambda: f"e{next(_ids)}"
    )


def _new(start_id: str, priority: int = 0, session: str = "s") -> NewStart:
    return NewStart(
        start_id=start_id,
        kind=StartKind.START,
        workflow="w",
        session=session,
        tenant=session,
        priority=priority,
        input="null",
        fingerprint="",
        principal=None,
        idempotency_key=None,
        source_execution_id=None,
        from_step=None,
        instance_id="here",
        created_at=0.0,
    )


def _granted(core: AdmissionCore, grant: Grant) -> list[Action]:
    row = grant.ticket.row
    start = dataclasses.replace(row, status=StartStatus.GRANTED)
    ex = grant.request.execution
    execution = ExecutionRow(
        seq=1,
        execution_id=ex.execution_id,
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
        slot_keys=(),
        instance_id="here",
        created_at=0.0,
        finished_at=None,
    )
    result = GrantResult(outcome=GrantOutcome.GRANTED, start=start, execution=execution)
    return core.granted([grant], [result], now=0.0)


def _queued_row(seq: int, start_id: str, priority: int) -> StartRow:
    return _new(start_id, priority).logged(seq=seq)


def test_a_standby_admits_nothing_and_names_the_leader() -> None:
    core = _core()
    assert core.step_down("leader-1") == []
    assert core.role is Role.STANDBY
    with pytest.raises(NotLeader) as refused:
        core.arrive(_new("a"), None, now=0.0)
    assert refused.value.leader == "leader-1" and "leader-1" in str(refused.value)
    assert core.tickets == {} and core.kernel.queued == 0
    assert core.next_grants(now=0.0) == []


def test_stepping_down_empties_the_queue_without_a_write() -> None:
    core = _core(max_running=1)
    core.lead()
    t0, first = core.arrive(_new("run"), None, now=0.0)
    assert isinstance(first, Grant)
    _granted(core, first)  # runs, holding the only slot
    waiting = []
    for name in ("q1", "q2", "q3"):
        t, action = core.arrive(_new(name), None, now=0.0)
        assert isinstance(action, Log)
        out = core.logged(t, _new(name).logged(seq=1), True, now=0.0)
        assert [type(a) for a in out] == [Answer] and t.phase is Phase.QUEUED
        waiting.append(t)
    actions = core.step_down(None)
    assert not any(isinstance(a, Refuse | Grant | Log) for a in actions)  # nothing written
    assert {a.ticket.start_id for a in actions if isinstance(a, Answer)} == {"q1", "q2", "q3"}
    for t in waiting:
        assert isinstance(t.error, NotLeader) and t.phase is Phase.ENDED
    assert core.kernel.queued == 0 and core.kernel.running == 1 and t0.phase is Phase.GRANTED


def test_a_grant_that_comes_back_full_after_stepping_down_leaves_unwritten() -> None:
    core = _core(max_running=1)
    core.lead()
    t, grant = core.arrive(_new("a"), None, now=0.0)
    assert isinstance(grant, Grant)
    core.step_down(None)
    full = GrantResult(outcome=GrantOutcome.FULL, start=None, execution=None)
    actions = core.granted([grant], [full], now=0.0)
    assert not any(isinstance(a, Refuse) for a in actions)
    assert isinstance(t.error, NotLeader) and core.kernel.queued == 0


@pytest.mark.parametrize("free", [0, 1, 2])
def test_a_new_leader_takes_adopted_starts_by_priority_then_arrival(free: int) -> None:
    core = _core(max_running=free + 1 if free else 1)
    core.lead()
    if not free:  # the only slot is taken: everything adopted waits
        _, grant = core.arrive(_new("busy"), None, now=0.0)
        assert isinstance(grant, Grant)
        _granted(core, grant)
    rows = [
        _queued_row(1, "a0", 0),
        _queued_row(2, "b5", 5),
        _queued_row(3, "c0", 0),
        _queued_row(4, "d5", 5),
    ]
    actions = core.adopt([(r, None) for r in rows], now=0.0)
    picked = [a.ticket.start_id for a in actions if isinstance(a, Grant)]
    order = ["b5", "d5", "a0", "c0"]
    assert picked == order[: free + 1 if free else 0]
    # then one by one, as slots free
    while len(picked) < 4:
        running = [t for t in core.tickets.values() if t.phase is Phase.GRANTING]
        for t in running:
            [g] = [a for a in actions if isinstance(a, Grant) and a.ticket is t]
            _granted(core, g)
            core.finished(t, now=0.0)
        busy = [t for t in core.tickets.values() if t.start_id == "busy"]
        for t in busy:
            core.finished(t, now=0.0)
        actions = core.next_grants(now=0.0)
        picked += [a.ticket.start_id for a in actions if isinstance(a, Grant)]
    assert picked == order
    assert all(t.settled for t in core.tickets.values())  # nobody waits on them here
