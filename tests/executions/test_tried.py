"""A start's caller is answered with what happened to it, no sooner and no later.

A start that is picked as it arrives (queued behind another, but just as eligible) goes to the
ledger in a batch: its caller waits for that grant's answer (GRANTED, or QUEUED with its place
back) and the ledger is tried once. A start that stays in line is answered QUEUED at once,
without waiting for the grants of the starts picked as it arrived.

The interleavings are built, not raced: another store on the same database holds session slots in
the ledger (so a grant the kernel allows comes back FULL), the dispatcher's backup poll is an
hour (so only a freed slot wakes it), and a grant batch waits in the store until the test lets
it go.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from tests.store.test_conformance import new_execution, new_start
from yoke.app import open_store
from yoke.executions import ExecutionStatus, Limits, StartStatus
from yoke.kernel import ItemState
from yoke.store import GrantOutcome, GrantRequest, Slot, Store

from .helpers import Gates, make_app

Free = Callable[[], Awaitable[None]]


@asynccontextmanager
async def sessions_held_elsewhere(url: str) -> AsyncIterator[Callable[[str], Awaitable[Free]]]:
    """Another instance on the same database; yields `take(session)`, which makes it hold that
    session's only slot in the ledger and returns the function that frees it."""
    other = open_store(url)
    await other.open()
    await other.executions.register_instance("elsewhere", now=time.time())

    async def take(session: str) -> Free:
        now = time.time()
        [(row, _)] = await other.executions.log_starts(
            [new_start(workflow="hold", session=session, instance_id="elsewhere", created_at=now)]
        )
        execution = new_execution(
            row.start_id, workflow="hold", session=session, instance_id="elsewhere"
        )
        [res] = await other.executions.grant_starts(
            [
                GrantRequest(
                    start_id=row.start_id,
                    execution=execution,
                    slots=(Slot(key=f"session:{session}", cap=1),),
                )
            ],
            now=now,
        )
        assert res.outcome is GrantOutcome.GRANTED

        async def free() -> None:
            await other.executions.finish_execution(
                execution.execution_id,
                ExecutionStatus.SUCCEEDED,
                output=None,
                error=None,
                now=time.time(),
            )

        return free

    try:
        yield take
    finally:
        await other.close()


class HeldGrants:
    """Wraps the store's `grant_starts`: the first `held` batches each wait in the store until
    the test releases them; `batches` lists the start ids of every batch, in order."""

    def __init__(self, store: Store, held: int) -> None:
        self.batches: list[list[str]] = []
        self.arrived = [asyncio.Event() for _ in range(held)]
        self.release = [asyncio.Event() for _ in range(held)]
        real = store.grant_starts

        async def grant_starts(requests: Any, *, now: float) -> Any:
            n = len(self.batches)
            self.batches.append([r.start_id for r in requests])
            if n < held:
                self.arrived[n].set()
                await self.release[n].wait()
            return await real(requests, now=now)

        store.grant_starts = grant_starts  # type: ignore[method-assign]

    def let_all_go(self) -> None:
        """Release every held batch: a failing test must not leave shutdown waiting on one."""
        for event in self.release:
            event.set()

    def tries_of(self, start_id: str) -> int:
        return sum(batch.count(start_id) for batch in self.batches)


@pytest.mark.parametrize("answer", [GrantOutcome.GRANTED, GrantOutcome.FULL])
async def test_a_start_picked_on_arrival_answers_with_its_grant(
    database_url: str, answer: GrantOutcome
) -> None:
    """A start that queues behind another (P, back in line after the ledger said FULL) and is
    picked in the same breath goes to the ledger in P's batch; its caller gets that grant's
    answer (GRANTED, or QUEUED with its place back), never an earlier guess."""
    gates = Gates()
    app = make_app(
        database_url, gates, limits=Limits(max_running_per_session=1), slot_poll_interval=3600
    )
    async with sessions_held_elsewhere(database_url) as take, app.running():
        ex = app.executions
        assert app.store is not None
        free_p = await take("p")
        p = await ex.start("hold", {"gate": "p"}, session="p")
        assert p.status is StartStatus.QUEUED  # fits here, not in the ledger: back in line
        assert (ex.kernel.queued, ex.kernel.running) == (1, 0)

        held = HeldGrants(app.store, held=1)
        try:
            a_task = asyncio.create_task(ex.start("hold", {"gate": "a"}, session="a"))
            await asyncio.wait_for(held.arrived[0].wait(), 10)
            [[p_id, a_id]] = held.batches
            assert p_id == p.start_id
            done, _ = await asyncio.wait([a_task], timeout=0.5)
            assert not done, f"answered before its grant was: {a_task.result()}"
            if answer is GrantOutcome.GRANTED:
                await free_p()
            else:
                await take("a")  # another process takes session a's slot meanwhile
            held.release[0].set()
            a = await asyncio.wait_for(a_task, 10)
            assert a.start_id == a_id
            assert held.tries_of(a_id) == 1
            if answer is GrantOutcome.GRANTED:
                assert a.status is StartStatus.GRANTED and a.execution_id is not None
                item = ex.kernel.get(a_id)
                assert item is not None and item.state is ItemState.RUNNING  # it holds its slot
                await gates.started_one("a")
            else:
                # Back in line, behind P (older, and just as eligible).
                assert (a.status, a.position, a.execution_id) == (StartStatus.QUEUED, 2, None)
        finally:
            held.let_all_go()
            for name in ("p", "a"):
                gates.open(name)


async def test_a_queued_start_is_answered_without_waiting_for_other_starts_grants(
    database_url: str,
) -> None:
    """A start that queues (its session is full here) is answered QUEUED at once, while the
    grant of another start, picked as it arrived, is still in the store."""
    gates = Gates()
    app = make_app(
        database_url, gates, limits=Limits(max_running_per_session=1), slot_poll_interval=3600
    )
    async with sessions_held_elsewhere(database_url) as take, app.running():
        ex = app.executions
        assert app.store is not None
        await take("p")
        z = await ex.start("hold", {"gate": "z"}, session="a")
        assert z.status is StartStatus.GRANTED
        p = await ex.start("hold", {"gate": "p"}, session="p")
        assert p.status is StartStatus.QUEUED
        held = HeldGrants(app.store, held=1)
        try:
            a_task = asyncio.create_task(ex.start("hold", {"gate": "a"}, session="a"))
            await asyncio.wait_for(held.arrived[0].wait(), 10)
            assert held.batches == [[p.start_id]]
            a = await asyncio.wait_for(a_task, 10)  # batch 1 is still held
            assert (a.status, a.position) == (StartStatus.QUEUED, 1)
            assert held.tries_of(a.start_id) == 0
        finally:
            held.let_all_go()
            for name in ("z", "p", "a"):
                gates.open(name)
