"""Lock order of the instance rows (PostgreSQL): marking moves never deadlocks an append.

An append holds the instances it reaches FOR SHARE, in key order, while it copies their owner
into its queue rows; a takeover locks them in key order too. Marking moves must take them in
the same order: an UPDATE over a join with the moves' rows locks them in the join's order, so
a move listed b, a met an append that held a and then wanted b, and PostgreSQL aborted one of
them ("deadlock detected": an append of the fleet test failed so). Here an append's two steps
are played by hand on their own connection, around `mark_moves` of the same two instances.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import psycopg
import pytest

from yoke.app import open_store
from yoke.store.actor_records import InstanceRef
from yoke.store.postgres import PostgresStore

pytestmark = pytest.mark.postgres

REFS = [InstanceRef(tenant="t", actor="a", instance_id=i) for i in ("a", "b")]
LOCK = "SELECT 1 FROM actor_instances WHERE tenant = 't' AND actor = 'a' AND instance_id = %s"


@pytest.fixture
async def pg(pg_databases: Callable[[], str]) -> AsyncIterator[tuple[PostgresStore, str]]:
    url = pg_databases()
    store = open_store(url)
    assert isinstance(store, PostgresStore)
    await store.open()
    try:
        yield store, url
    finally:
        await store.close()


async def test_marking_moves_waits_for_an_append_instead_of_deadlocking(
    pg: tuple[PostgresStore, str],
) -> None:
    store, url = pg
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as c:
        for ref in REFS:
            await c.execute(
                "INSERT INTO actor_instances (tenant, actor, instance_id, worker_id, created_at)"
                " VALUES ('t', 'a', %s, 'w1', 0)",
                (ref.instance_id,),
            )
    async with await psycopg.AsyncConnection.connect(url) as append:
        await append.execute(LOCK + " FOR SHARE", ("a",))  # the append holds a ...
        moves = [(ref, "w1", "w2") for ref in reversed(REFS)]  # listed b, a
        marking = asyncio.ensure_future(store.actors.fleet.mark_moves(moves, now=1.0))
        await asyncio.sleep(0.3)  # mark_moves now waits for a (and, before the fix, holds b)
        await append.execute("SET lock_timeout = '3s'")
        await append.execute(LOCK + " FOR SHARE", ("b",))  # ... then wants b
        await append.commit()
    async with asyncio.timeout(10):
        assert await marking == 2
