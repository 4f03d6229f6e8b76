"""Timers never wait on a locked row (PostgreSQL): firing skips a timer another session holds.

Workers fire due timers concurrently; a timer row locked by another session is being fired (or
otherwise held) there. Waiting for it would stall this worker's whole batch behind a lock it
does not need, for as long as the other transaction lasts, and fire it twice if that session
put it back. So a fire skips locked rows, fires the others at once, and a later fire takes the
skipped one once it is free. The lock is held here on a connection of its own, as another
worker's transaction would hold it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

import psycopg
import pytest

from tests.actors.conftest import open_actor_store
from yoke.actors.protocol import ActorStore
from yoke.store.actor_records import InstanceRef, NewEvent, NewTimer, Target

pytestmark = pytest.mark.postgres


@pytest.fixture
async def pg(pg_databases: Callable[[], str]) -> AsyncIterator[tuple[ActorStore, str]]:
    url = pg_databases()
    store = open_actor_store(url)
    await store.open()
    try:
        yield store.actors, url
    finally:
        await store.close()


def _event(key: str) -> NewEvent:
    target = Target(actor="tick", instance_id=key, group_id="")
    return NewEvent(tenant="t", stream="ticks", data=json.dumps({"k": key}), targets=(target,))


async def _pending(store: ActorStore, key: str) -> int:
    info = await store.get_instance(InstanceRef(tenant="t", actor="tick", instance_id=key))
    return 0 if info is None else info.pending


async def test_firing_skips_a_locked_timer_at_once_and_fires_it_once_free(
    pg: tuple[ActorStore, str],
) -> None:
    store, url = pg
    held_id, free_id = await store.schedule(
        [
            NewTimer(tenant="t", stream="ticks", data='{"k":"held"}', fire_at_ms=1000),
            NewTimer(tenant="t", stream="ticks", data='{"k":"free"}', fire_at_ms=1000),
        ],
        now=0.5,
    )
    batch = [(held_id, _event("held")), (free_id, _event("free"))]

    holder = await psycopg.AsyncConnection.connect(url)
    try:
        await holder.execute(
            "SELECT timer_id FROM scheduled_events WHERE timer_id = %s FOR UPDATE", (held_id,)
        )
        try:
            # Generous: a fire that waits for the lock would wait until the holder ends.
            fired = await asyncio.wait_for(store.fire_timers(batch, owner="w1", now=2.0), 10)
        except TimeoutError:
            pytest.fail("firing waited for a timer row locked by another session")
        assert fired == [free_id]
        assert (await _pending(store, "held"), await _pending(store, "free")) == (0, 1)
        (left,) = await store.upcoming_timers(limit=10)
        assert left.timer_id == held_id
    finally:
        await holder.rollback()  # the other session lets the timer go, unfired
        await holder.close()

    assert await store.fire_timers(batch, owner="w1", now=3.0) == [held_id]
    assert await store.fire_timers(batch, owner="w1", now=4.0) == []  # each fired once
    assert (await _pending(store, "held"), await _pending(store, "free")) == (1, 1)
    assert await store.upcoming_timers(limit=10) == []
