"""Recovery racing a finish (PostgreSQL): a dead instance's execution is freed exactly once.

An instance declared dead may still be alive (a long pause) and finishing its own executions
while another instance recovers it. The recoverer must wait for a finish in progress and then
see its outcome: abort only what is still RUNNING and free only those slots. A recoverer that
read the RUNNING executions without waiting would abort a finished one too and free its slot a
second time, leaving the ledger below the truth (more starts than the cap would then run).

The finish in progress is held open on its own connection, exactly as another process's
transaction would be: its row lock is what the recoverer must respect.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from tests.store.grants import run_granted
from yoke.store import ExecutionStatus, Slot, Store

pytestmark = pytest.mark.postgres

SLOTS = [Slot(key="global", cap=3), Slot(key="session:s", cap=None), Slot(key="workflow:w", cap=3)]
KEYS = sorted(s.key for s in SLOTS)


async def _waits_on_a_lock(url: str, task: asyncio.Task[Any], seconds: float = 10.0) -> bool:
    """Whether `task` comes to wait for a row lock (some session of this database does) within
    `seconds`; False at once if it ends without waiting."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while loop.time() < deadline and not task.done():
            cur = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            row = await cur.fetchone()
            if row is not None and row[0] > 0:
                return True
            await asyncio.sleep(0.01)
    return False


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
async def test_recovery_waits_for_a_finish_in_progress_and_frees_each_slot_once(
    pg_executions: tuple[Store, str], outcome: str
) -> None:
    store, url = pg_executions
    await store.register_instance("dead", now=1.0)
    await store.register_instance("live", now=1.0)
    x = await run_granted(store, instance="dead", slots=SLOTS)
    y = await run_granted(store, instance="dead", slots=SLOTS)
    z = await run_granted(store, instance="live", slots=SLOTS)  # keeps the counts above zero
    assert await store.ledger() == dict.fromkeys(KEYS, 3)

    # The dead instance, still running, finishes x on its own connection: not committed yet.
    finisher = await psycopg.AsyncConnection.connect(url)
    try:
        await finisher.execute(
            "UPDATE yoke_executions SET status = 'SUCCEEDED', output = '1', finished_at = 2.0 "
            "WHERE execution_id = %s AND status = 'RUNNING'",
            (x.execution_id,),
        )
        await finisher.execute(
            "UPDATE yoke_ledger SET running = running - 1 WHERE key = ANY(%s)", (KEYS,)
        )
        recovery = asyncio.create_task(
            store.recover_dead(stale_before=5.0, now=10.0, exclude="live")
        )
        assert await _waits_on_a_lock(url, recovery), "recovery did not wait for the finish"
        assert not recovery.done()
        if outcome == "commit":
            await finisher.commit()
        else:
            await finisher.rollback()
        got = await asyncio.wait_for(recovery, 10)
    finally:
        await finisher.close()

    assert got.instances == ("dead",)
    x_row, y_row, z_row = [await store.get_execution(e.execution_id) for e in (x, y, z)]
    assert x_row is not None and y_row is not None and z_row is not None
    assert y_row.status is ExecutionStatus.ABORTED and z_row.status is ExecutionStatus.RUNNING
    if outcome == "commit":
        # x finished on its own: recovery aborts only y, and frees only y's slots.
        assert got.executions == (y.execution_id,)
        assert x_row.status is ExecutionStatus.SUCCEEDED and x_row.output == "1"
    else:
        # The finish never happened: x is still the dead instance's, aborted with y.
        assert sorted(got.executions) == sorted([x.execution_id, y.execution_id])
        assert x_row.status is ExecutionStatus.ABORTED
    assert await store.ledger() == dict.fromkeys(KEYS, 1), "only z holds its slots"
