"""A takeover racing the old owner's claim, step by step (gates between statements).

A takeover (`_hand_over`) is several statements in one transaction; the old owner's claims
touch queue rows only and take no instance lock, so on PostgreSQL a claim can commit between
two statements of the takeover. Whatever statement it lands before, the event must end up
claimable by the new owner (and the old owner's completion refused).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import pytest

from tests.actors.conftest import open_actor_store, truncate_actor_tables
from yoke.actors.protocol import ActorStore
from yoke.store.actor_records import Completion, InstanceRef, NewEvent, Target
from yoke.store.postgres import PostgresStore
from yoke.store.tx import Tx

REF = InstanceRef(tenant="t", actor="a", instance_id="x")


class _GatedTx:
    """A transaction that stops before the statement `name` until `go` is set."""

    def __init__(self, tx: Tx, name: str, reached: asyncio.Event, go: asyncio.Event) -> None:
        self._tx, self._name, self._reached, self._go = tx, name, reached, go

    async def _gate(self, query: str) -> None:
        if query == self._name:
            self._reached.set()
            await self._go.wait()

    async def run(self, query: str, params: Mapping[str, Any]) -> int:
        await self._gate(query)
        return await self._tx.run(query, params)

    async def all(self, query: str, params: Mapping[str, Any]) -> list[Any]:
        await self._gate(query)
        return await self._tx.all(query, params)

    async def one(self, query: str, params: Mapping[str, Any]) -> Any:
        await self._gate(query)
        return await self._tx.one(query, params)


def _gate_takeover(store: PostgresStore, name: str) -> tuple[asyncio.Event, asyncio.Event]:
    """The next write transaction of `store` stops before its statement `name`."""
    reached, go = asyncio.Event(), asyncio.Event()
    plain = store.write
    used = False

    @asynccontextmanager
    async def gated() -> AsyncIterator[Any]:
        nonlocal used
        async with plain() as tx:
            if used:
                yield tx
            else:
                used = True
                yield _GatedTx(tx, name, reached, go)

    store.write = gated  # type: ignore[method-assign]
    return reached, go


@pytest.fixture
async def pg_store(pg_url: str) -> AsyncIterator[PostgresStore]:
    truncate_actor_tables(pg_url)
    store = open_actor_store(pg_url)
    await store.open()
    assert isinstance(store, PostgresStore)
    try:
        yield store
    finally:
        await store.close()


@pytest.mark.postgres
@pytest.mark.parametrize("before", ["set_owner", "reown_queue_rows", "unclaim_dead"])
async def test_a_claim_between_the_statements_of_a_takeover_is_not_stranded(
    pg_store: PostgresStore, before: str
) -> None:
    # SQLite serialises writers (BEGIN IMMEDIATE): only PostgreSQL can interleave them.
    s = pg_store
    await s.actors.fleet.register_worker("w1", hostname="h", pid=1, now=1.0)
    await s.actors.fleet.register_worker("w2", hostname="h", pid=2, now=1.0)
    ev = NewEvent(
        tenant="t",
        stream="s",
        data=json.dumps({"k": "x"}),
        targets=(Target(actor="a", instance_id="x", group_id=""),),
    )
    await s.actors.append_events([ev], owner="w1", now=1.0)

    reached, go = _gate_takeover(s, before)
    # w2 takes w1's instances over (w1 looks stale to it) and stops before `before`...
    takeover = asyncio.create_task(s.actors.fleet.claim_orphans("w2", stale_before=100.0, now=2.0))
    await asyncio.wait_for(reached.wait(), 10)
    # ... while w1, which does not know yet, claims its row (it skips a row being moved).
    old = await asyncio.wait_for(s.actors.claim_next("w1", limit=10, now=2.0), 10)
    go.set()
    await asyncio.wait_for(takeover, 10)

    # w1's claim (if it got the row) is fenced, and the event is w2's to run.
    for c in old:
        assert await s.actors.complete("w1", [Completion(queue_id=c.queue_id, epoch=c.epoch)]) == []
    info = await s.actors.get_instance(REF)
    assert info is not None and info.worker_id == "w2"
    assert (info.pending, info.in_flight) == (1, 0), "the event is stranded in flight"
    (mine,) = await s.actors.claim_next("w2", limit=10, now=3.0)
    assert await s.actors.complete(
        "w2", [Completion(queue_id=mine.queue_id, epoch=mine.epoch)]
    ) == [mine.queue_id]


async def test_an_owner_with_no_worker_row_keeps_its_instances_until_it_goes_silent(
    actor_store: ActorStore,
) -> None:
    """An owner is set only by a registered worker (a runtime registers before it appends as
    owner, and a takeover names the worker taking), or by whoever uses the store directly to
    give instances to a worker that has not started yet. Worker rows are never deleted, so an
    owner with no row is one not registered yet: its instances wait for it, and are taken
    once it has registered and then stopped or gone silent."""
    ev = NewEvent(
        tenant="t",
        stream="s",
        data="{}",
        targets=(Target(actor="a", instance_id="x", group_id=""),),
    )
    await actor_store.append_events([ev], owner="later", now=1.0)  # "later" has no row yet
    await actor_store.fleet.register_worker("w1", hostname="h", pid=1, now=2.0)
    got = await actor_store.fleet.claim_orphans("w1", stale_before=1.5, now=2.0)
    info = await actor_store.get_instance(REF)
    assert got.instances == 0 and info is not None and info.worker_id == "later"
    await actor_store.fleet.register_worker("later", hostname="h", pid=2, now=3.0)
    got = await actor_store.fleet.claim_orphans("w1", stale_before=2.5, now=4.0)
    assert got.instances == 0, "a live owner keeps its instances"
    got = await actor_store.fleet.claim_orphans("w1", stale_before=3.5, now=10.0)
    info = await actor_store.get_instance(REF)
    assert got.instances == 1 and info is not None and info.worker_id == "w1"
