"""A start whose grant another task's pump is trying waits for that try's answer (`Local.tried`).

A queued start's caller runs a pump of its own (`_decide`). That pump may pick another start
and wait for its batch; meanwhile a slot frees and the dispatcher's pump picks the caller's
start and sends it in the next batch. When the caller's pump returns, its start is neither
queued nor decided: its grant is in the store. The caller must wait for that grant's answer and
return it (GRANTED, or QUEUED with its place back), without trying the ledger again itself.

The interleaving is built, not raced: another store on the same database holds session slots in
the ledger (so a grant the kernel allows comes back FULL), the dispatcher's backup poll is an
hour (so only a freed slot wakes it), and each grant batch waits in the store until the test
lets it go.
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

from .helpers import Gates, make_app, wait_until

Free = Callable[[], Awaitable[None]]


@asynccontextmanager
async def sessions_held_elsewhere(url: str) -> AsyncIterator[Callable[[str], Awaitable[Free]]]:
    """Another instance on the same database; yields `take(session)`, which makes it hold that
    session's only slot in the ledger and returns the function that frees it."""
    other = open_store(url)
    await other.open()
    await other.register_instance("elsewhere", now=time.time())

    async def take(session: str) -> Free:
        now = time.time()
        [(row, _)] = await other.log_starts(
            [new_start(workflow="hold", session=session, instance_id="elsewhere", created_at=now)]
        )
        execution = new_execution(
            row.start_id, workflow="hold", session=session, instance_id="elsewhere"
        )
        [res] = await other.grant_starts(
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
            await other.finish_execution(
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


async def _true(value: bool) -> bool:
    return value


@pytest.mark.parametrize("answer", [GrantOutcome.GRANTED, GrantOutcome.FULL])
async def test_a_start_whose_grant_another_pump_is_trying_returns_that_grants_answer(
    database_url: str, answer: GrantOutcome
) -> None:
    gates = Gates()
    app = make_app(
        database_url, gates, limits=Limits(max_running_per_session=1), slot_poll_interval=3600
    )
    async with sessions_held_elsewhere(database_url) as take, app.running():
        ex = app.executions
        assert app.store is not None
        free_p = await take("p")
        # Z holds session a's slot. P fits here but not in the ledger: it is back in line,
        # eligible, and (the poll being an hour) nobody tries it again yet.
        z = await ex.start("hold", {"gate": "z"}, session="a")
        assert z.status is StartStatus.GRANTED and z.execution_id is not None
        p = await ex.start("hold", {"gate": "p"}, session="p")
        assert p.status is StartStatus.QUEUED
        assert (ex.kernel.queued, ex.kernel.running) == (1, 1)

        held = HeldGrants(app.store, held=2)
        try:
            # A queues behind Z in session a; its caller's pump picks P and waits for batch 1.
            a_task = asyncio.create_task(ex.start("hold", {"gate": "a"}, session="a"))
            await asyncio.wait_for(held.arrived[0].wait(), 10)
            assert held.batches == [[p.start_id]]
            await free_p()  # batch 1 will grant P: nothing is left in line for a pump
            # Z ends: its slot frees, and the dispatcher's pump picks A, for batch 2.
            gates.open("z")
            await ex.wait(z.execution_id, timeout=10)
            await wait_until(lambda: _true(ex.kernel.queued == 0))
            assert not a_task.done()

            held.release[0].set()  # P is granted, and A's caller's pump returns
            await asyncio.wait_for(held.arrived[1].wait(), 10)
            [[a_id]] = held.batches[1:]
            await gates.started_one("p")
            # A's grant is still in the store: its caller must not have an answer yet.
            done, _ = await asyncio.wait([a_task], timeout=0.5)
            assert not done, f"answered before its grant was: {a_task.result()}"

            if answer is GrantOutcome.FULL:
                await take("a")  # another process takes session a's slot meanwhile
            held.release[1].set()
            a = await asyncio.wait_for(a_task, 10)
            assert a.start_id == a_id
            if answer is GrantOutcome.GRANTED:
                assert a.status is StartStatus.GRANTED and a.execution_id is not None
                assert held.tries_of(a_id) == 1  # the dispatcher's try was the only one
                item = ex.kernel.get(a_id)
                assert item is not None and item.state is ItemState.RUNNING  # it holds its slot
                await gates.started_one("a")
            else:
                # Back in line, first. (No count of tries here: from now on the dispatcher
                # may try it again at any time.)
                assert (a.status, a.position, a.execution_id) == (StartStatus.QUEUED, 1, None)
        finally:
            held.let_all_go()
            for name in ("z", "p", "a"):
                gates.open(name)
