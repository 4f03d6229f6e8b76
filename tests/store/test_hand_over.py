"""A slot handed over from ends to the grants that take it (`Store.finish_and_grant`), on both
stores. On PostgreSQL the common case is one statement (`hand_over`): written only if every
grant fits on the locked counts, and a ledger row is written only by the batch's net change;
what it cannot take (a cap lowered, a start gone) goes the general way with the same answers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import psycopg
import pytest

from tests.store.grants import grant_request, new_start, run_granted
from yoke.app import open_store
from yoke.store import (
    ExecutionRow,
    ExecutionStatus,
    Finish,
    GrantOutcome,
    GrantRequest,
    Slot,
    StartStatus,
    Store,
)

CAP = [Slot(key="global", cap=2), Slot(key="session:s", cap=None)]


def ends(executions: list[ExecutionRow]) -> list[Finish]:
    return [
        Finish(execution_id=e.execution_id, status=ExecutionStatus.SUCCEEDED, output="1",
               error=None)
        for e in executions
    ]  # fmt: skip


async def queued(store: Store, n: int, slots: list[Slot]) -> list[GrantRequest]:
    starts = [new_start(instance="i") for _ in range(n)]
    assert all(created for _, created in await store.log_starts(starts))
    return [grant_request(s, slots) for s in starts]


async def test_a_cohort_handed_over_whole_runs_in_its_place(store: Store) -> None:
    running = [await run_granted(store, instance="i", slots=CAP) for _ in range(2)]
    requests = await queued(store, 2, CAP)
    done, res = await store.finish_and_grant(ends(running), requests, now=5.0)
    assert done == [True, True]
    assert [r.outcome for r in res] == [GrantOutcome.GRANTED] * 2
    for req, r in zip(requests, res, strict=True):
        assert r.start is not None and r.start.start_id == req.start_id
        assert r.start.status is StartStatus.GRANTED
        assert r.execution is not None and r.start.execution_id == r.execution.execution_id
        stored = await store.get_execution(r.execution.execution_id)
        assert stored is not None and stored.status is ExecutionStatus.RUNNING
        assert stored.seq == r.execution.seq and stored.slot_keys == ("global", "session:s")
    for e in running:
        ended = await store.get_execution(e.execution_id)
        assert ended is not None and ended.status is ExecutionStatus.SUCCEEDED
    assert await store.ledger() == {"global": 2, "session:s": 2}


async def test_a_grant_over_a_lowered_cap_is_full_and_its_end_still_written(
    store: Store,
) -> None:
    """Two run under a cap of 2, now lowered to 1: one end frees one slot, which leaves 1
    running, the new cap: its grant is FULL, the end is written, the start stays QUEUED."""
    running = [await run_granted(store, instance="i", slots=CAP) for _ in range(2)]
    lowered = [Slot(key="global", cap=1), Slot(key="session:s", cap=None)]
    [request] = await queued(store, 1, lowered)
    done, res = await store.finish_and_grant(ends(running[:1]), [request], now=5.0)
    assert done == [True] and [r.outcome for r in res] == [GrantOutcome.FULL]
    assert await store.ledger() == {"global": 1, "session:s": 1}
    left = await store.get_start(request.start_id)
    assert left is not None and left.status is StartStatus.QUEUED


async def test_a_start_cancelled_before_its_hand_over_is_gone_and_frees_its_slot(
    store: Store,
) -> None:
    running = [await run_granted(store, instance="i", slots=CAP) for _ in range(2)]
    requests = await queued(store, 2, CAP)
    await store.decide_start(requests[1].start_id, StartStatus.CANCELLED, reason="x", now=4.0)
    done, res = await store.finish_and_grant(ends(running), requests, now=5.0)
    assert done == [True, True]
    assert [r.outcome for r in res] == [GrantOutcome.GRANTED, GrantOutcome.GONE]
    gone = res[1].start
    assert gone is not None and gone.status is StartStatus.CANCELLED
    assert await store.ledger() == {"global": 1, "session:s": 1}
    assert len(await store.list_executions(status=ExecutionStatus.RUNNING)) == 1


# -- PostgreSQL: one statement, no ledger write for a slot that only changed hands -----------


async def _ledger_versions(url: str) -> dict[str, str]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute("SELECT key, xmin::text FROM yoke_ledger")
        return {str(k): str(x) for k, x in await cur.fetchall()}


@pytest.mark.postgres
async def test_a_slot_that_only_changes_hands_writes_no_ledger_row(
    pg_executions: tuple[Store, str],
) -> None:
    """Ends and grants of the same keys leave every count as it was: the ledger rows are
    neither written nor locked (the row version stays), so hand-overs of one cap by several
    processes do not queue on its row."""
    store, url = pg_executions
    running = [await run_granted(store, instance="i", slots=CAP) for _ in range(2)]
    before = await _ledger_versions(url)
    requests = await queued(store, 2, CAP)
    done, res = await store.finish_and_grant(ends(running), requests, now=5.0)
    assert done == [True, True] and [r.outcome for r in res] == [GrantOutcome.GRANTED] * 2
    assert await _ledger_versions(url) == before
    # One end with no grant frees its slot on balance: those rows are written.
    later = [r.execution for r in res if r.execution is not None]
    more = await queued(store, 1, CAP)
    done, res = await store.finish_and_grant(ends(later), more, now=6.0)
    assert done == [True, True] and [r.outcome for r in res] == [GrantOutcome.GRANTED]
    assert await store.ledger() == {"global": 1, "session:s": 1}
    after = await _ledger_versions(url)
    assert after["global"] != before["global"]


@pytest.mark.postgres
async def test_hand_overs_racing_grants_on_one_cap_never_pass_it(
    pg_databases: Callable[[], str],
) -> None:
    """Four connections hand their slots of a full cap over, round after round, while a fifth
    keeps asking for a slot of the same cap: every hand-over grants, every other grant is
    FULL (one would be a ninth execution under a cap of 8), and the count stays exact."""
    url = pg_databases()
    stores = [open_store(url) for _ in range(5)]
    for s in stores:
        await s.open()
    try:
        verbs = [s.executions for s in stores]
        cap = [Slot(key="global", cap=8), Slot(key="session:s", cap=None)]
        held = [[await run_granted(verbs[i], instance="i", slots=cap) for _ in range(2)]
                for i in range(4)]  # fmt: skip
        outsiders = await queued(verbs[4], 30, cap)

        async def hand_over(i: int) -> int:
            handed = 0
            for _ in range(10):
                requests = await queued(verbs[i], 2, cap)
                done, res = await verbs[i].finish_and_grant(ends(held[i]), requests, now=5.0)
                assert done == [True, True]
                assert [r.outcome for r in res] == [GrantOutcome.GRANTED] * 2, res
                held[i] = [r.execution for r in res if r.execution is not None]
                handed += 2
            return handed

        async def intrude() -> list[GrantOutcome]:
            outcomes = []
            for req in outsiders:
                [r] = await verbs[4].grant_starts([req], now=5.0)
                outcomes.append(r.outcome)
            return outcomes

        *handed, intruded = await asyncio.wait_for(
            asyncio.gather(*(hand_over(i) for i in range(4)), intrude()), 60
        )
        assert handed == [20] * 4
        assert intruded == [GrantOutcome.FULL] * len(outsiders)
        assert await verbs[0].ledger() == {"global": 8, "session:s": 8}
        assert len(await verbs[0].list_executions(status=ExecutionStatus.RUNNING)) == 8
    finally:
        for s in stores:
            await s.close()


@pytest.mark.postgres
async def test_a_hand_over_writes_its_ends_before_the_executions_that_take_their_slots(
    pg_executions: tuple[Store, str],
) -> None:
    """Whatever reads the rows' order at commit (here the chaos suite's slot log, a deferred
    trigger that fires in the order the rows were written) sees each end before the start
    that takes its slot: read the other way, every hand-over at the cap is one over it."""
    from tests.ha.records import SLOT_LOG

    store, url = pg_executions
    running = [await run_granted(store, instance="i", slots=CAP) for _ in range(2)]
    requests = await queued(store, 2, CAP)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(SLOT_LOG.encode())
        done, res = await store.finish_and_grant(ends(running), requests, now=5.0)
        assert done == [True, True] and [r.outcome for r in res] == [GrantOutcome.GRANTED] * 2
        cur = await conn.execute("SELECT delta FROM chaos_slot_log ORDER BY at")
        assert [d for (d,) in await cur.fetchall()] == [-1, -1, 1, 1]
