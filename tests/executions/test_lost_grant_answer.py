"""A grant batch whose COMMIT answer is lost while the store stays down a little longer.

`readback.committed_outcomes` rebuilds what a batch did when its answer was lost; but when the
store is still down at that moment (the usual case: the answer was lost because the connection
dropped), it answers None and the batch is treated as failed. The batch did commit: its start
is GRANTED, its execution RUNNING under this instance and its slots are counted in the
ledger. Nobody runs that execution, and its slots stay taken until this instance dies.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from yoke.errors import StoreUnavailable
from yoke.executions import Limits, StartStatus
from yoke.store import ExecutionStatus, Store

from .helpers import Gates, echo_app, make_app, wait_until


def commit_then_go_down(store: Store, reads_down: int) -> None:
    """The next grant batch commits, then its answer is lost; the next `reads_down` reads of
    an execution (the read-back) fail as well, as the store is still down."""
    real_grant, real_get = store.grant_starts, store.get_execution
    left = [reads_down]

    async def answer_lost(requests: Any, *, now: float) -> Any:
        store.grant_starts = real_grant  # type: ignore[method-assign]
        await real_grant(requests, now=now)  # committed
        raise StoreUnavailable("the connection closed while committing")

    async def get_execution(execution_id: str) -> Any:
        if left[0] > 0:
            left[0] -= 1
            raise StoreUnavailable("the database is still down")
        return await real_get(execution_id)

    store.grant_starts = answer_lost  # type: ignore[method-assign]
    store.get_execution = get_execution  # type: ignore[method-assign]


async def test_a_committed_grant_whose_read_back_fails_still_runs_and_frees_its_slot(
    database_url: str,
) -> None:
    app = echo_app(database_url, limits=Limits(max_running=1))
    async with app.running():
        store = app.store
        assert store is not None
        commit_then_go_down(store, reads_down=1)
        # The batch committed: the start is GRANTED (whatever its caller heard), and its
        # execution must run here and give its slot back.
        with contextlib.suppress(StoreUnavailable):
            await app.executions.start("echo", 5)
        await wait_until(lambda: _ledger_empty(store), timeout=5)
        again = await app.executions.start("echo", 6)
        assert again.status is StartStatus.GRANTED


async def test_a_committed_pumped_grant_whose_read_back_fails_is_run_not_dropped(
    database_url: str,
) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1))
    async with app.running():
        store = app.store
        assert store is not None
        ex = app.executions
        first = await ex.start("hold", {"gate": "a"})
        assert first.status is StartStatus.GRANTED
        queued = await ex.start("hold", {"gate": "b"})
        assert queued.status is StartStatus.QUEUED
        commit_then_go_down(store, reads_down=1)
        gates.open("a")  # the slot frees: the dispatcher's pump grants "b" (answer lost)
        granted = await ex.wait_granted(queued.start_id, timeout=10)
        assert granted.execution_id is not None
        # "b" must really run, here, on the execution the store holds.
        await gates.started_one("b", timeout=5)
        gates.open("b")
        done = await ex.wait(granted.execution_id, timeout=10)
        assert done.status is ExecutionStatus.SUCCEEDED
        await wait_until(lambda: _ledger_empty(store), timeout=5)


async def _ledger_empty(store: Store) -> bool:
    await asyncio.sleep(0)
    return await store.ledger() == {}
