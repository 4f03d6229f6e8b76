"""The fence of a high-availability pair (PostgreSQL): a write that decides for the queue commits
only under the term it was made in, and no write of an old term commits after a takeover.

The takeover here is the one `Elector` does (`gate_lease` then `acquire_lease` in one
transaction); inside it, before its commit, it counts what the old leader had committed: what a
new leader's recovery would see. Writers of the old term race it; afterwards the count must
not have grown (a check-then-write fence lets a few grants that checked before the bump commit
after it; the shared advisory lock the fence holds orders them before it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import psycopg
import pytest

from tests.store.grants import grant_request, new_start
from yoke.app import Backend, open_store
from yoke.errors import NotLeader
from yoke.store import NewControl, Slot, StartStatus
from yoke.store.leaseverbs import Fence
from yoke.store.sqlfiles import queries

pytestmark = pytest.mark.postgres

NAME = "admission"
CAPPED = [Slot(key="global", cap=10**9), Slot(key="session:s", cap=None)]


@pytest.fixture
async def pair(pg_databases: Callable[[], str]) -> AsyncIterator[tuple[Backend, Backend, str]]:
    url = pg_databases()
    old, new = open_store(url), open_store(url)
    await old.open()
    await new.open()
    try:
        yield old, new, url
    finally:
        await old.close()
        await new.close()


async def _count(url: str, table: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(f"SELECT count(*) FROM {table}".encode())
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def _rows(url: str, sql: str) -> list[tuple[object, ...]]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(sql.encode())
        return list(await cur.fetchall())


async def test_every_deciding_write_of_an_ended_term_is_refused_and_changes_nothing(
    pair: tuple[Backend, Backend, str],
) -> None:
    old, new, url = pair
    lease = await old.actors.leases.acquire_lease(NAME, holder="old", ttl=30)
    assert lease is not None
    store = old.executions
    store.set_fence(Fence(name=NAME, epoch=lease.epoch))
    queued = new_start(instance="old")
    [(row, created)] = await store.log_starts([queued])
    assert created and row.status is StartStatus.QUEUED
    [ok] = await store.grant_starts(
        [grant_request(new_start(instance="old"), CAPPED, log=True)], now=1
    )
    assert ok.start is not None and ok.start.status is StartStatus.GRANTED
    [(epoch,)] = await _rows(url, "SELECT DISTINCT leader_epoch FROM yoke_executions")
    assert epoch == lease.epoch  # each grant records the term it was made under

    taken = await new.actors.leases.acquire_lease(NAME, holder="new", ttl=30, force=True)
    assert taken is not None and taken.epoch == lease.epoch + 1
    before = {t: await _count(url, t) for t in ("yoke_starts", "yoke_executions")}
    before_ledger = await store.ledger()
    audit = NewControl(
        kind="limits",
        principal="ops",
        tenant=None,
        roles=("ADMIN",),
        subject=None,
        before="{}",
        after="{}",
        at=2,
    )
    writes = {
        "log": store.log_starts([new_start(instance="old")]),
        "grant": store.grant_starts([grant_request(queued, CAPPED)], now=2),
        "grant+log": store.grant_starts(
            [grant_request(new_start(instance="old"), CAPPED, log=True)], now=2
        ),
        "grant+log uncapped": store.grant_starts(
            [grant_request(new_start(instance="old"), [Slot(key="global", cap=None)], log=True)],
            now=2,
        ),
        "refuse": store.decide_start(queued.start_id, StartStatus.REFUSED, reason="no", now=2),
        "priority": store.set_start_priority(queued.start_id, 5, audit=audit),
        "control": store.append_control(audit),
        "adopt": store.adopt_queued_starts("old", requeue=True, reason="r", now=2),
    }
    for what, write in writes.items():
        with pytest.raises(NotLeader):
            await write
        assert {t: await _count(url, t) for t in before} == before, what
    assert await store.ledger() == before_ledger
    still = await store.get_start(queued.start_id)
    assert still is not None and still.status is StartStatus.QUEUED and still.priority == 0

    # The new term writes; the fence of epoch 0 (a standby's) lets nothing through.
    new.executions.set_fence(Fence(name=NAME, epoch=taken.epoch))
    adopted = await new.executions.adopt_queued_starts("new", requeue=True, reason="r", now=3)
    assert [r.start_id for r in adopted] == [queued.start_id]
    assert adopted[0].instance_id == "new"
    new.executions.set_fence(Fence(name=NAME, epoch=0))
    with pytest.raises(NotLeader):
        await new.executions.log_starts([new_start(instance="new")])


async def test_a_term_that_expired_writes_nothing_even_with_no_successor(
    pair: tuple[Backend, Backend, str],
) -> None:
    old, _, url = pair
    lease = await old.actors.leases.acquire_lease(NAME, holder="old", ttl=0.3)
    assert lease is not None
    old.executions.set_fence(Fence(name=NAME, epoch=lease.epoch))
    await old.executions.log_starts([new_start(instance="old")])
    await asyncio.sleep(0.5)  # past the lease's expiry on the database's clock
    with pytest.raises(NotLeader):
        await old.executions.log_starts([new_start(instance="old")])
    assert await _count(url, "yoke_starts") == 1


async def _takeover_counting(url: str) -> tuple[int, int]:
    """The takeover's transaction, as the elector runs it, counting the old term's
    executions after the epoch is bumped and before the commit. Returns (epoch, count)."""
    q = queries("postgres")
    params = {"name": NAME, "holder": "new", "ttl": 30.0, "force": True}
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    async with conn, conn.transaction():
        await conn.execute(q["gate_lease"], params)
        cur = await conn.execute(q["acquire_lease"], params)
        taken = await cur.fetchone()
        assert taken is not None
        cur = await conn.execute("SELECT count(*) FROM yoke_executions")
        counted = await cur.fetchone()
        assert counted is not None
    return int(taken[2]), int(counted[0])


@pytest.mark.parametrize(
    "slots",
    [CAPPED, [Slot(key="global", cap=None)]],
    ids=["transaction", "one statement"],  # the general path, and the uncapped one
)
async def test_no_grant_of_the_old_term_commits_after_the_takeover(
    pair: tuple[Backend, Backend, str], slots: list[Slot]
) -> None:
    old, _, url = pair
    lease = await old.actors.leases.acquire_lease(NAME, holder="old", ttl=30)
    assert lease is not None
    store = old.executions
    store.set_fence(Fence(name=NAME, epoch=lease.epoch))
    granted = 0
    refused = 0
    busy = asyncio.Event()

    async def writer() -> None:
        nonlocal granted, refused
        while True:
            if granted >= 400:  # the writers are busy: several are inside a transaction
                busy.set()
            batch = [grant_request(new_start(instance="old"), slots, log=True) for _ in range(4)]
            try:
                results = await store.grant_starts(batch, now=1)
            except NotLeader:
                refused += 1
                return
            granted += len(results)

    writers = [asyncio.create_task(writer()) for _ in range(8)]
    await asyncio.wait_for(busy.wait(), timeout=30)
    epoch, at_takeover = await _takeover_counting(url)
    assert epoch == lease.epoch + 1
    await asyncio.wait_for(asyncio.gather(*writers), timeout=30)
    after = await _count(url, "yoke_executions")
    assert refused == 8
    assert after == at_takeover, f"{after - at_takeover} grants of epoch {lease.epoch} committed"
    assert (await store.ledger())["global"] == after
    epochs = await _rows(url, "SELECT DISTINCT leader_epoch FROM yoke_executions")
    assert epochs == [(lease.epoch,)]
