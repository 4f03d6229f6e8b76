"""Renewals never wait for a connection behind the store's other work (PostgreSQL).

Takes, renewals and releases of leases run on a pool of their own. Here every connection of
the store's main pool is held (as grant batches and claims hold them on a starved machine)
for three lease TTLs; the holder must keep its one term throughout. On the shared pool its
renewal waited for a connection past the term's deadline: the leader stepped down and took a
new term once the pool was free again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from yoke.app import upgrade
from yoke.clock import SystemClock
from yoke.leases import Elector
from yoke.store.leaseverbs import Lease
from yoke.store.postgres import PostgresStore

pytestmark = pytest.mark.postgres
TTL = 1.5
POOL = 3


async def test_a_term_is_renewed_while_every_pooled_connection_is_busy(
    pg_databases: Callable[[], str],
) -> None:
    url = pg_databases()
    await upgrade(url)
    store = PostgresStore(url, max_size=POOL, connect_timeout=10)
    await store.open()
    elector = Elector(store.actors.leases, name="p", holder="h", ttl=TTL, clock=SystemClock())
    leading = asyncio.Event()

    async def body(lease: Lease) -> None:
        leading.set()
        await asyncio.Event().wait()

    run = asyncio.create_task(elector.run(body))
    free = asyncio.Event()
    all_held = asyncio.Event()
    holding = 0

    async def hold() -> None:
        nonlocal holding
        async with store.read():
            holding += 1
            if holding == POOL:
                all_held.set()
            await free.wait()

    try:
        await asyncio.wait_for(leading.wait(), 10)
        assert elector.lease is not None
        first = elector.lease
        holders = [asyncio.create_task(hold()) for _ in range(POOL)]
        await asyncio.wait_for(all_held.wait(), 10)
        await asyncio.sleep(3 * TTL)
        held = elector.lease
        trusted = elector.trusted()
        free.set()
        await asyncio.gather(*holders)
        assert (elector.terms, trusted) == (1, True), elector
        assert held is not None and held.epoch == first.epoch
        assert held.expires_at > first.expires_at + 2 * TTL, (first, held)  # renewed meanwhile
    finally:
        free.set()
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        await store.close()
