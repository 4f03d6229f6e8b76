"""The one conformance suite of the `Store` protocol, run on every backend (`store` fixture:
SQLite on a temporary file, PostgreSQL on the session's test database)."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

import pytest

from tests.store.grants import done_step, grant_request, run_granted
from yoke.app import open_store
from yoke.errors import Conflict, StoreUnavailable
from yoke.store import (
    ExecutionStatus,
    Finish,
    GrantOutcome,
    GrantRequest,
    NewControl,
    NewExecution,
    NewStart,
    Slot,
    StartKind,
    StartStatus,
    StepCopy,
    Store,
)

INSTANCE = "instance-a"


def new_start(**over: object) -> NewStart:
    base = NewStart(
        start_id=str(uuid.uuid4()),
        kind=StartKind.START,
        workflow="wf",
        session="s1",
        tenant="s1",
        priority=0,
        input='{"n":1}',
        fingerprint="fp",
        principal=None,
        idempotency_key=None,
        source_execution_id=None,
        from_step=None,
        instance_id=INSTANCE,
        created_at=10.0,
    )
    return replace(base, **over)  # type: ignore[arg-type]


def new_execution(start_id: str | None, **over: object) -> NewExecution:
    base = NewExecution(
        execution_id=str(uuid.uuid4()),
        start_id=start_id,
        workflow="wf",
        session="s1",
        tenant="s1",
        input='{"n":1}',
        parent_id=None,
        restarted_from=None,
        resumed_from=None,
        instance_id=INSTANCE,
        created_at=11.0,
    )
    return replace(base, **over)  # type: ignore[arg-type]


SLOTS = [
    Slot(key="session:s1", cap=None),
    Slot(key="global", cap=1),
    Slot(key="workflow:wf", cap=None),
]


async def grant(
    store: Store, start_id: str, slots: list[Slot] = SLOTS, copy: StepCopy | None = None
) -> tuple[GrantOutcome, str | None]:
    res = await store.grant_start(
        start_id, execution=new_execution(start_id), slots=slots, copy_steps=copy, now=12.0
    )
    return res.outcome, None if res.execution is None else res.execution.execution_id


async def test_log_start_is_queued_and_idempotent_per_principal(store: Store) -> None:
    first, created = await store.log_start(new_start(idempotency_key="k", principal="alice"))
    assert created and first.status is StartStatus.QUEUED and first.execution_id is None
    again, created2 = await store.log_start(
        new_start(idempotency_key="k", principal="alice", fingerprint="other")
    )
    assert not created2 and again.start_id == first.start_id and again.fingerprint == "fp"
    bob, created3 = await store.log_start(new_start(idempotency_key="k", principal="bob"))
    assert created3 and bob.start_id != first.start_id
    assert await store.get_start(first.start_id) == first
    assert await store.get_start("nope") is None


async def test_log_starts_answers_each_start_of_a_batch(store: Store) -> None:
    first, _ = await store.log_start(new_start(idempotency_key="old", principal="alice"))
    batch = [
        new_start(idempotency_key="new", principal="alice"),
        new_start(idempotency_key="old", principal="alice", fingerprint="other"),
        new_start(),
        new_start(idempotency_key="new", principal="alice", fingerprint="second"),
        new_start(idempotency_key="new", principal="bob", priority=3),
    ]
    out = await store.log_starts(batch)
    assert [created for _, created in out] == [True, False, True, False, True]
    assert out[1][0].start_id == first.start_id  # the key's first start, not this one
    assert out[3][0].start_id == batch[0].start_id  # taken by the same batch
    assert out[4][0].priority == 3 and out[4][0].principal == "bob"
    for (row, created), new in zip(out, batch, strict=True):
        if created:
            assert row.start_id == new.start_id and row.status is StartStatus.QUEUED
            assert await store.get_start(new.start_id) == row
    assert await store.get_start(batch[3].start_id) is None


async def test_grant_creates_execution_and_takes_every_slot(store: Store) -> None:
    row, _ = await store.log_start(new_start())
    outcome, eid = await grant(store, row.start_id)
    assert outcome is GrantOutcome.GRANTED and eid is not None
    start = await store.get_start(row.start_id)
    assert start is not None and start.status is StartStatus.GRANTED
    assert start.execution_id == eid and start.decided_at == 12.0
    ex = await store.get_execution(eid)
    assert ex is not None and ex.status is ExecutionStatus.RUNNING
    assert ex.slot_keys == ("global", "session:s1", "workflow:wf")
    assert await store.ledger() == {"global": 1, "session:s1": 1, "workflow:wf": 1}


async def test_grant_over_a_cap_changes_nothing(store: Store) -> None:
    a, _ = await store.log_start(new_start())
    b, _ = await store.log_start(new_start())
    assert (await grant(store, a.start_id))[0] is GrantOutcome.GRANTED
    res = await store.grant_start(
        b.start_id, execution=new_execution(b.start_id), slots=SLOTS, copy_steps=None, now=13.0
    )
    assert res.outcome is GrantOutcome.FULL and res.full_key == "global"
    assert await store.ledger() == {"global": 1, "session:s1": 1, "workflow:wf": 1}
    after = await store.get_start(b.start_id)
    assert after is not None and after.status is StartStatus.QUEUED
    assert len(await store.list_executions()) == 1


async def test_cap_zero_holds_everything(store: Store) -> None:
    a, _ = await store.log_start(new_start())
    outcome, _ = await grant(store, a.start_id, [Slot(key="workflow:wf", cap=0)])
    assert outcome is GrantOutcome.FULL
    assert await store.ledger() == {}


async def test_grant_of_a_decided_start_is_gone(store: Store) -> None:
    a, _ = await store.log_start(new_start())
    cancelled = await store.decide_start(a.start_id, StartStatus.CANCELLED, reason="x", now=5)
    assert cancelled is not None and cancelled.status is StartStatus.CANCELLED
    res = await store.grant_start(
        a.start_id, execution=new_execution(a.start_id), slots=SLOTS, copy_steps=None, now=6
    )
    assert res.outcome is GrantOutcome.GONE
    assert res.start is not None and res.start.status is StartStatus.CANCELLED
    assert await store.ledger() == {}


async def test_decide_start_only_moves_a_queued_start(store: Store) -> None:
    a, _ = await store.log_start(new_start(idempotency_key="k"))
    await grant(store, a.start_id)
    row = await store.decide_start(a.start_id, StartStatus.REFUSED, reason="late", now=9)
    assert row is not None and row.status is StartStatus.GRANTED
    assert await store.decide_start("missing", StartStatus.REFUSED, reason=None, now=9) is None
    with pytest.raises(ValueError, match="cannot set"):
        await store.decide_start(a.start_id, StartStatus.GRANTED, reason=None, now=9)


async def test_a_refusal_can_give_the_idempotency_key_back(store: Store) -> None:
    a, _ = await store.log_start(new_start(idempotency_key="k"))
    refused = await store.decide_start(
        a.start_id, StartStatus.REFUSED, reason="429", now=9, forget_key=True
    )
    assert refused is not None and refused.idempotency_key is None
    b, created = await store.log_start(new_start(idempotency_key="k"))
    assert created and b.start_id != a.start_id


def priority_entry(subject: str, after: int) -> NewControl:
    return NewControl(
        kind="priority",
        principal="op",
        tenant=None,
        roles=("OPERATOR",),
        subject=subject,
        before=None,
        after=str(after),
        at=5.0,
    )


async def test_priority_changes_only_while_queued_with_its_audit_entry(store: Store) -> None:
    a, _ = await store.log_start(new_start())
    row = await store.set_start_priority(a.start_id, 7, audit=priority_entry(a.start_id, 7))
    assert row is not None and row.priority == 7
    await grant(store, a.start_id)
    row = await store.set_start_priority(a.start_id, 9, audit=priority_entry(a.start_id, 9))
    assert row is not None and row.priority == 7 and row.status is StartStatus.GRANTED
    assert await store.set_start_priority("missing", 1, audit=priority_entry("missing", 1)) is None
    # Only the change that happened is logged, with what it was given.
    [entry] = await store.control_log()
    assert (entry.kind, entry.subject, entry.after, entry.roles) == (
        "priority",
        a.start_id,
        "7",
        ("OPERATOR",),
    )


async def test_finish_frees_the_slots_exactly_once(store: Store) -> None:
    a, _ = await store.log_start(new_start())
    _, eid = await grant(store, a.start_id)
    assert eid is not None
    assert await store.finish_execution(
        eid, ExecutionStatus.SUCCEEDED, output="3", error=None, now=20
    )
    assert not await store.finish_execution(
        eid, ExecutionStatus.FAILED, output=None, error="x", now=21
    )
    assert await store.ledger() == {}
    ex = await store.get_execution(eid)
    assert ex is not None and ex.status is ExecutionStatus.SUCCEEDED and ex.output == "3"
    assert ex.finished_at == 20  # slot_keys stay as history; the ledger says they are free
    with pytest.raises(ValueError, match="final status"):
        await store.finish_execution(eid, ExecutionStatus.RUNNING, output=None, error=None, now=1)


def request(start_id: str, session: str, *, session_cap: int | None = 2) -> GrantRequest:
    return GrantRequest(
        start_id=start_id,
        execution=new_execution(start_id, session=session),
        slots=(
            Slot(key="global", cap=None),
            Slot(key=f"session:{session}", cap=session_cap),
        ),
    )


async def test_grant_starts_decides_a_batch_in_order(store: Store) -> None:
    s1 = [(await store.log_start(new_start(session="s1")))[0].start_id for _ in range(3)]
    s2 = (await store.log_start(new_start(session="s2")))[0].start_id
    gone = (await store.log_start(new_start(session="s1")))[0].start_id
    await store.decide_start(gone, StartStatus.CANCELLED, reason="x", now=5)
    batch = [
        request(s1[0], "s1"),
        request(gone, "s1"),
        request(s1[1], "s1"),
        request(s1[2], "s1"),  # the third of session s1, whose cap is 2
        request(s2, "s2"),
        request("no-such-start", "s2"),
    ]
    res = await store.grant_starts(batch, now=12.0)
    assert [r.outcome for r in res] == [
        GrantOutcome.GRANTED,
        GrantOutcome.GONE,
        GrantOutcome.GRANTED,
        GrantOutcome.FULL,
        GrantOutcome.GRANTED,
        GrantOutcome.GONE,
    ]
    assert res[3].full_key == "session:s1" and res[5].start is None
    assert res[1].start is not None and res[1].start.status is StartStatus.CANCELLED
    assert await store.ledger() == {"global": 3, "session:s1": 2, "session:s2": 1}
    third = await store.get_start(s1[2])
    assert third is not None and third.status is StartStatus.QUEUED and third.execution_id is None
    granted = {r.execution.execution_id for r in res if r.execution is not None}
    assert {e.execution_id for e in await store.list_executions()} == granted
    # A batch that cannot fit at all writes nothing.
    again = await store.grant_starts([request(s1[2], "s1")], now=13.0)
    assert again[0].outcome is GrantOutcome.FULL
    assert await store.ledger() == {"global": 3, "session:s1": 2, "session:s2": 1}


async def test_a_start_asked_twice_in_one_batch_is_granted_once(store: Store) -> None:
    st, _ = await store.log_start(new_start())
    res = await store.grant_starts([request(st.start_id, "s1"), request(st.start_id, "s1")], now=1)
    assert [r.outcome for r in res] == [GrantOutcome.GRANTED, GrantOutcome.GONE]
    assert res[1].start is not None and res[1].start.status is StartStatus.GRANTED
    assert await store.ledger() == {"global": 1, "session:s1": 1}
    assert len(await store.list_executions()) == 1


async def test_a_start_that_fits_is_logged_and_granted_in_one_batch(store: Store) -> None:
    held, _ = await store.log_start(new_start(session="s1", idempotency_key="taken"))
    fresh = [new_start(session="s1") for _ in range(3)]
    retry = new_start(session="s1", idempotency_key="taken")  # the key is held: no new start
    batch = [replace(request(n.start_id, "s1"), log=n) for n in [*fresh, retry]]
    res = await store.grant_starts(batch, now=12.0)
    assert [r.outcome for r in res] == [
        GrantOutcome.GRANTED,
        GrantOutcome.GRANTED,
        GrantOutcome.FULL,  # the session's cap is 2: logged, and left QUEUED
        GrantOutcome.GONE,
    ]
    assert res[0].start is not None and res[0].start.status is StartStatus.GRANTED
    # The rows a grant answers with are the rows the store keeps (not read back: built).
    for r in res[:2]:
        assert r.start is not None and r.execution is not None
        assert await store.get_start(r.start.start_id) == r.start
        assert await store.get_execution(r.execution.execution_id) == r.execution
    queued = res[2].start
    assert queued is not None and queued.status is StartStatus.QUEUED and queued.seq > 0
    assert await store.get_start(fresh[2].start_id) == queued
    assert res[3].start == held  # the start that holds the key, untouched
    assert await store.get_start(retry.start_id) is None
    assert await store.ledger() == {"global": 2, "session:s1": 2}
    assert len(await store.list_executions()) == 2
    with pytest.raises(ValueError, match="log must be the start"):
        await store.grant_starts([replace(request("other", "s1"), log=new_start())], now=13.0)


async def test_finish_executions_frees_each_key_by_its_count(store: Store) -> None:
    starts = [(await store.log_start(new_start(session=s)))[0] for s in ("s1", "s1", "s2")]
    res = await store.grant_starts(
        [request(st.start_id, st.session, session_cap=None) for st in starts], now=12.0
    )
    eids = [r.execution.execution_id for r in res if r.execution is not None]
    assert len(eids) == 3
    assert await store.ledger() == {"global": 3, "session:s1": 2, "session:s2": 1}
    done = await store.finish_executions(
        [
            Finish(execution_id=eids[0], status=ExecutionStatus.SUCCEEDED, output="1", error=None),
            Finish(execution_id="unknown", status=ExecutionStatus.FAILED, output=None, error="x"),
            Finish(execution_id=eids[2], status=ExecutionStatus.FAILED, output=None, error="e"),
        ],
        now=20.0,
    )
    assert done == [True, False, True]
    assert await store.ledger() == {"global": 1, "session:s1": 1}
    again = await store.finish_executions(
        [Finish(execution_id=eids[0], status=ExecutionStatus.FAILED, output=None, error="x")],
        now=21.0,
    )
    assert again == [False]
    assert await store.ledger() == {"global": 1, "session:s1": 1}


async def test_children_run_on_their_parents_slot(store: Store) -> None:
    a, _ = await store.log_start(new_start())
    _, parent = await grant(store, a.start_id)
    child = await store.create_child(new_execution(None, parent_id=parent))
    assert child.parent_id == parent and child.slot_keys == ()
    assert await store.get_execution(child.execution_id) == child
    assert await store.ledger() == {"global": 1, "session:s1": 1, "workflow:wf": 1}
    assert await store.finish_execution(
        child.execution_id, ExecutionStatus.SUCCEEDED, output="1", error=None, now=30
    )
    assert await store.ledger() == {"global": 1, "session:s1": 1, "workflow:wf": 1}


async def test_steps_are_recorded_and_copied_at_grant(store: Store) -> None:
    a, _ = await store.log_start(new_start())
    _, old = await grant(store, a.start_id)
    assert old is not None
    for pos, name in enumerate(["one", "two", "three"]):
        await store.record_steps([done_step(old, pos, name, f'"{name}"')], now=pos)
    with pytest.raises(Conflict):  # a step that succeeded is never recorded again
        await store.record_steps([done_step(old, 1, "two", "1")], now=5)
    # The same record again (a retry of a write whose answer was lost) changes nothing.
    await store.record_steps([done_step(old, 1, "two", '"two"')], now=5)
    await store.finish_execution(old, ExecutionStatus.FAILED, output=None, error="x", now=6)
    b, _ = await store.log_start(new_start(kind=StartKind.RESTART, source_execution_id=old))
    outcome, new = await grant(
        store, b.start_id, copy=StepCopy(from_execution_id=old, before_position=2)
    )
    assert outcome is GrantOutcome.GRANTED and new is not None
    assert [s.name for s in await store.steps_of(new)] == ["one", "two"]
    c, _ = await store.log_start(new_start(kind=StartKind.RESUME, source_execution_id=old))
    await store.finish_execution(new, ExecutionStatus.FAILED, output=None, error="x", now=7)
    _, newest = await grant(
        store, c.start_id, copy=StepCopy(from_execution_id=old, before_position=None)
    )
    assert newest is not None
    steps = await store.steps_of(newest)
    assert [(s.position, s.name, s.result) for s in steps] == [
        (0, "one", '"one"'),
        (1, "two", '"two"'),
        (2, "three", '"three"'),
    ]


async def test_list_filters_and_pages_newest_first(store: Store) -> None:
    ids: list[str] = []
    for i in range(5):
        a, _ = await store.log_start(new_start(session=f"s{i % 2}"))
        res = await store.grant_start(
            a.start_id,
            execution=new_execution(a.start_id, session=f"s{i % 2}"),
            slots=[Slot(key="global", cap=None)],
            copy_steps=None,
            now=12.0,
        )
        assert res.execution is not None
        ids.append(res.execution.execution_id)
    page1 = await store.list_executions(limit=2)
    assert [e.execution_id for e in page1] == ids[::-1][:2]
    page2 = await store.list_executions(limit=2, before_seq=page1[-1].seq)
    assert [e.execution_id for e in page2] == ids[::-1][2:4]
    s0 = await store.list_executions(session="s0")
    assert [e.execution_id for e in s0] == [ids[4], ids[2], ids[0]]
    assert await store.list_executions(status=ExecutionStatus.SUCCEEDED) == []
    assert len(await store.list_executions(status=ExecutionStatus.RUNNING, workflow="wf")) == 5
    assert await store.list_executions(workflow="other") == []


async def test_control_log_keeps_order_and_the_newest_limits(store: Store) -> None:
    assert await store.latest_limits() is None
    for n in (1, 2):
        await store.append_control(
            NewControl(
                kind="limits",
                principal="root",
                tenant=None,
                roles=("ADMIN",),
                subject=None,
                before=None,
                after=f'{{"max_running":{n}}}',
                at=float(n),
            )
        )
    await store.append_control(
        NewControl(
            kind="priority",
            principal="op",
            tenant="t",
            roles=("OPERATOR",),
            subject="start-1",
            before='{"priority":0}',
            after='{"priority":5}',
            at=3.0,
        )
    )
    assert await store.latest_limits() == '{"max_running":2}'
    log = await store.control_log()
    assert [(e.seq, e.kind, e.principal) for e in log] == [
        (1, "limits", "root"),
        (2, "limits", "root"),
        (3, "priority", "op"),
    ]
    assert log[2].roles == ("OPERATOR",) and log[2].tenant == "t" and log[2].at == 3.0
    assert [e.seq for e in await store.control_log(limit=1, offset=1)] == [2]
    assert [e.seq for e in await store.recent_controls()] == [3, 2, 1]
    assert [e.seq for e in await store.recent_controls(kind="limits", limit=1)] == [2]
    assert [e.seq for e in await store.recent_controls(before_seq=3, limit=5)] == [2, 1]
    assert await store.recent_controls(kind="limits", before_seq=1) == []


async def test_recover_dead_aborts_and_frees_only_dead_instances(store: Store) -> None:
    await store.register_instance("dead", now=0)
    await store.register_instance("alive", now=0)
    await store.heartbeat("alive", now=100)
    dead_start, _ = await store.log_start(new_start(instance_id="dead"))
    res = await store.grant_start(
        dead_start.start_id,
        slots=SLOTS,
        copy_steps=None,
        now=1,
        execution=new_execution(dead_start.start_id, instance_id="dead"),
    )
    assert res.execution is not None
    dead_queued, _ = await store.log_start(new_start(instance_id="dead"))
    alive_queued, _ = await store.log_start(new_start(instance_id="alive"))
    got = await store.recover_dead(stale_before=50, now=101, exclude="me")
    assert got.instances == ("dead",)
    assert got.executions == (res.execution.execution_id,)
    assert got.starts == (dead_queued.start_id,)
    ex = await store.get_execution(res.execution.execution_id)
    assert ex is not None and ex.status is ExecutionStatus.ABORTED and ex.finished_at == 101
    q = await store.get_start(dead_queued.start_id)
    assert q is not None and q.status is StartStatus.ABORTED
    q2 = await store.get_start(alive_queued.start_id)
    assert q2 is not None and q2.status is StartStatus.QUEUED
    assert await store.ledger() == {}
    again = await store.recover_dead(stale_before=50, now=102, exclude="me")
    assert again.instances == () and again.executions == ()
    assert not await store.heartbeat("dead", now=103)
    assert await store.heartbeat("alive", now=103)


async def test_a_stopped_instance_counts_as_dead_at_once(store: Store) -> None:
    await store.register_instance("gone", now=0)
    await store.stop_instance("gone", now=1)
    got = await store.recover_dead(stale_before=-1, now=2, exclude="me")
    assert got.instances == ("gone",)
    assert (await store.recover_dead(stale_before=-1, now=2, exclude="gone")).instances == ()


async def test_racing_grants_on_one_slot_grant_exactly_one(database_url: str) -> None:
    # Several stores = several connections (and, on SQLite, several threads) racing.
    stores = [open_store(database_url) for _ in range(4)]
    for s in stores:
        await s.open()
    try:
        starts = [(await stores[0].executions.log_start(new_start()))[0] for _ in range(40)]
        outcomes = await asyncio.gather(
            *[grant(stores[i % 4].executions, st.start_id) for i, st in enumerate(starts)]
        )
        assert sum(o is GrantOutcome.GRANTED for o, _ in outcomes) == 1
        assert await stores[0].executions.ledger() == {
            "global": 1,
            "session:s1": 1,
            "workflow:wf": 1,
        }
        assert len(await stores[0].executions.list_executions()) == 1
    finally:
        for s in stores:
            await s.close()


async def test_schema_is_migrated_on_open(database_url: str) -> None:
    from yoke.store import sqlfiles

    backend = open_store(database_url)
    await backend.open()
    try:
        dialect = "sqlite" if database_url.startswith("sqlite") else "postgres"
        assert await backend.schema_version() == sqlfiles.latest(dialect)
    finally:
        await backend.close()


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:////proc/yoke-cannot-exist/yoke.db",
        pytest.param(
            "postgresql://postgres@127.0.0.1:1/nope?connect_timeout=1", marks=pytest.mark.postgres
        ),
    ],
)
async def test_an_unreachable_database_is_store_unavailable(url: str) -> None:
    from yoke.config import Settings

    s = open_store(url, Settings(pg_connect_timeout=1.0))
    with pytest.raises(StoreUnavailable):
        await s.open()
    await s.close()


async def test_verbs_of_a_closed_store_are_store_unavailable(database_url: str) -> None:
    s = open_store(database_url)
    with pytest.raises(StoreUnavailable):
        await s.executions.get_start("x")


async def test_finish_and_grant_hands_the_slots_it_frees_to_its_grants(store: Store) -> None:
    """The ends are written first, then the grants, in one transaction: a grant takes the slot
    an end of the same call frees; one that still finds its key at the cap is FULL; a grant
    of a start gone meanwhile is GONE; the ledger counts stay exact."""
    cap = [Slot(key="global", cap=2)]
    ending = [await run_granted(store, instance=INSTANCE, slots=cap) for _ in range(2)]
    queued = [new_start() for _ in range(4)]
    assert all(created for _, created in await store.log_starts(queued))
    await store.decide_start(queued[3].start_id, StartStatus.CANCELLED, reason="x", now=5)
    requests = [grant_request(s, cap) for s in queued]
    # Without the ends, the cap is full.
    [full] = await store.grant_starts(requests[:1], now=6.0)
    assert full.outcome is GrantOutcome.FULL and await store.ledger() == {"global": 2}
    finish = [Finish(execution_id=ending[0].execution_id, status=ExecutionStatus.SUCCEEDED,
                     output="1", error=None)]  # fmt: skip
    done, res = await store.finish_and_grant(finish, requests, now=7.0)
    assert done == [True]
    outcomes = [GrantOutcome.GRANTED, GrantOutcome.FULL, GrantOutcome.FULL, GrantOutcome.GONE]
    assert [r.outcome for r in res] == outcomes
    assert await store.ledger() == {"global": 2}
    ended = await store.get_execution(ending[0].execution_id)
    assert ended is not None and ended.status is ExecutionStatus.SUCCEEDED
    left = await store.get_start(queued[1].start_id)
    assert left is not None and left.status is StartStatus.QUEUED and left.execution_id is None
    # An end already written frees nothing twice: its grant is FULL.
    done, res = await store.finish_and_grant(finish, requests[1:2], now=8.0)
    assert done == [False] and [r.outcome for r in res] == [GrantOutcome.FULL]
    assert await store.ledger() == {"global": 2}
    assert len(await store.list_executions(status=ExecutionStatus.RUNNING)) == 2
