"""Lock order of the ledger rows (PostgreSQL): grants and releases racing never deadlock.

A grant takes the ledger rows of its keys under lock, in key order; a release (a finish, a
grant undone, a recovery) must take them in the same order. Two transactions taking two rows
in opposite orders wait for each other: PostgreSQL then aborts one of them ("deadlock
detected"), so a grant or a finish fails for no reason of its own. The race below runs many
grants and finishes, each over many keys, on concurrent connections; it must end with no error
and exact counts. The keys are chosen so that their sorted order is not the order in which a
JSON object (jsonb: shorter keys first) or a hash would list them.

Bounded: a deadlock is detected by PostgreSQL within a second and fails a verb; a hang of any
other kind fails the test at its deadline, named, rather than hanging the suite.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from tests.store.grants import grant_request, new_start, run_granted
from yoke.app import open_store
from yoke.store import ExecutionStatus, Finish, GrantOutcome, Slot, Store

pytestmark = pytest.mark.postgres

N_KEYS = 20
# Sorted: k:a... < k:b... < ...; lengths decreasing, so jsonb lists them in reverse.
KEYS = [f"k:{chr(ord('a') + i)}{'~' * (N_KEYS - i)}" for i in range(N_KEYS)]
SLOTS = [Slot(key=k, cap=None) for k in KEYS[1:]] + [Slot(key=KEYS[0], cap=10_000)]
ROUNDS = 60
DEADLINE = 60.0  # below pytest-timeout (90 s), so a hang is named here


@pytest.fixture
async def pg(pg_databases: Callable[[], str]) -> AsyncIterator[Store]:
    store = open_store(pg_databases())
    await store.open()
    try:
        yield store.executions
    finally:
        await store.close()


async def _race(*verbs: asyncio.Future[object]) -> list[object]:
    try:
        async with asyncio.timeout(DEADLINE):
            return await asyncio.gather(*verbs, return_exceptions=True)
    except TimeoutError:
        pytest.fail(f"grants and releases did not finish in {DEADLINE:.0f} s: a hang")


def _failures(results: list[object]) -> list[BaseException]:
    failed = [r for r in results if isinstance(r, BaseException)]
    deadlocks = [r for r in failed if "deadlock" in str(r)]
    assert not deadlocks, f"{len(deadlocks)} verbs lost to a deadlock: {deadlocks[0]}"
    return failed


async def test_finishes_racing_grants_over_many_keys_never_deadlock(pg: Store) -> None:
    store = pg
    running = [await run_granted(store, instance="i", slots=SLOTS) for _ in range(ROUNDS)]
    queued = [new_start(instance="i") for _ in range(ROUNDS)]
    assert all(created for _, created in await store.log_starts(queued))
    requests = [grant_request(s, SLOTS) for s in queued]

    async def finish(execution_id: str) -> object:
        return await store.finish_execution(
            execution_id, ExecutionStatus.SUCCEEDED, output="1", error=None, now=2.0
        )

    async def grant(i: int) -> object:
        return await store.grant_starts([requests[i]], now=2.0)

    verbs = []
    for i in range(ROUNDS):  # interleaved, so that finishes and grants overlap throughout
        verbs.append(asyncio.ensure_future(finish(running[i].execution_id)))
        verbs.append(asyncio.ensure_future(grant(i)))
    results = await _race(*verbs)
    assert _failures(results) == []

    finished, granted = results[0::2], results[1::2]
    assert finished == [True] * ROUNDS
    assert all(
        isinstance(g, list) and [r.outcome for r in g] == [GrantOutcome.GRANTED] for g in granted
    )
    assert await store.ledger() == dict.fromkeys(KEYS, ROUNDS)


async def test_batched_finishes_racing_batched_grants_never_deadlock(pg: Store) -> None:
    """The same over batches (several executions per transaction), as the executions layer
    sends them: each ledger row is taken once per batch, by the batch's count."""
    store = pg
    running = [await run_granted(store, instance="i", slots=SLOTS) for _ in range(ROUNDS)]
    queued = [new_start(instance="i") for _ in range(ROUNDS)]
    assert all(created for _, created in await store.log_starts(queued))
    requests = [grant_request(s, SLOTS) for s in queued]
    size = 2

    async def finish(ids: list[str]) -> object:
        batch = [
            Finish(execution_id=e, status=ExecutionStatus.SUCCEEDED, output="1", error=None)
            for e in ids
        ]
        return await store.finish_executions(batch, now=2.0)

    verbs = []
    for i in range(0, ROUNDS, size):
        ids = [r.execution_id for r in running[i : i + size]]
        verbs.append(asyncio.ensure_future(finish(ids)))
        verbs.append(asyncio.ensure_future(store.grant_starts(requests[i : i + size], now=2.0)))
    results = await _race(*verbs)
    assert _failures(results) == []
    assert all(r == [True] * size for r in results[0::2])
    assert await store.ledger() == dict.fromkeys(KEYS, ROUNDS)


async def test_finishes_carrying_grants_racing_grants_and_finishes_never_deadlock(
    pg: Store,
) -> None:
    """Ends that carry the grants of the slots they free (`finish_and_grant`: start and
    execution rows, then the ends, then the ledger rows), racing plain grants and plain
    finishes over the same keys."""
    store = pg
    running = [await run_granted(store, instance="i", slots=SLOTS) for _ in range(ROUNDS)]
    queued = [new_start(instance="i") for _ in range(ROUNDS)]
    assert all(created for _, created in await store.log_starts(queued))
    requests = [grant_request(s, SLOTS) for s in queued]

    def ends(i: int) -> list[Finish]:
        return [
            Finish(execution_id=e.execution_id, status=ExecutionStatus.SUCCEEDED, output="1",
                   error=None)
            for e in running[i : i + 2]
        ]  # fmt: skip

    verbs: list[asyncio.Future[object]] = []
    for i in range(0, ROUNDS, 6):  # per six: one of each kind, two rows each
        verbs.append(
            asyncio.ensure_future(store.finish_and_grant(ends(i), requests[i : i + 2], now=2))
        )
        verbs.append(asyncio.ensure_future(store.finish_executions(ends(i + 2), now=2.0)))
        verbs.append(asyncio.ensure_future(store.grant_starts(requests[i + 2 : i + 6], now=2.0)))
        verbs.append(asyncio.ensure_future(store.finish_executions(ends(i + 4), now=2.0)))
    results = await _race(*verbs)
    assert _failures(results) == []
    carried = [r for r in results[0::4] if isinstance(r, tuple)]
    assert [done for done, _ in carried] == [[True, True]] * (ROUNDS // 6)
    granted = [g for _, grants in carried for g in grants]
    granted += [g for r in results[2::4] if isinstance(r, list) for g in r]
    assert [g.outcome for g in granted] == [GrantOutcome.GRANTED] * ROUNDS
    assert await store.ledger() == dict.fromkeys(KEYS, ROUNDS)


async def test_recovery_racing_grants_over_many_keys_never_deadlocks(pg: Store) -> None:
    """A recovery frees a dead instance's slots while live instances keep granting."""
    store = pg
    await store.register_instance("dead", now=1.0)
    await store.register_instance("live", now=1.0)
    for _ in range(ROUNDS):
        await run_granted(store, instance="dead", slots=SLOTS)
    queued = [new_start(instance="live") for _ in range(ROUNDS)]
    assert all(created for _, created in await store.log_starts(queued))
    requests = [grant_request(s, SLOTS) for s in queued]

    verbs: list[asyncio.Future[object]] = []
    for i, request in enumerate(requests):
        if i in (ROUNDS // 4, ROUNDS // 2):  # two recoverers, while grants keep coming
            verbs.append(asyncio.ensure_future(_recover(store)))
        verbs.append(asyncio.ensure_future(store.grant_starts([request], now=2.0)))
    results = await _race(*verbs)
    assert _failures(results) == []
    recovered = [r for r in results if isinstance(r, int)]
    assert sorted(recovered) == [0, ROUNDS]  # one recoverer freed them all, the other none
    assert await store.ledger() == dict.fromkeys(KEYS, ROUNDS)


async def _recover(store: Store) -> int:
    got = await store.recover_dead(stale_before=5.0, now=10.0, exclude="live")
    return len(got.executions)
