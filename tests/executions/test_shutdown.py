"""Shutdown: nothing new, queued refused, running get their timeout and are then aborted."""

from __future__ import annotations

import asyncio

import pytest

from yoke.errors import ShuttingDown
from yoke.executions import ExecutionStatus, Limits, StartStatus

from .helpers import Gates, make_app, wait_until


async def test_shutdown_refuses_queued_and_lets_running_finish(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1))
    async with app.running():
        ex = app.executions
        a = await ex.start("hold", {"gate": "a"})
        b = await ex.start("hold", {"gate": "b"})
        stopping = asyncio.create_task(app.shutdown(timeout=10))

        async def b_refused() -> bool:
            return (await ex.get(b.start_id)).status is StartStatus.REFUSED

        await wait_until(b_refused)
        assert (await ex.wait_granted(b.start_id, 1)).reason == "shutting down"
        with pytest.raises(ShuttingDown):
            await ex.start("hold", {"gate": "c"})
        assert not stopping.done()
        gates.open("a")
        await asyncio.wait_for(stopping, 10)
        assert a.execution_id is not None
        assert (await ex.get_execution(a.execution_id)).status is ExecutionStatus.SUCCEEDED


async def test_running_executions_past_the_timeout_are_aborted(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, execution_shutdown_timeout=0.1)
    async with app.running():
        a = await app.executions.start("hold", {"gate": "never"})
        b = await app.executions.start("hold", {"gate": "never"}, session="s2")
        await gates.started_one("never")
    # Leaving `running()` shut down with the configured timeout.
    async with app.running():
        for s in (a, b):
            assert s.execution_id is not None
            e = await app.executions.get_execution(s.execution_id)
            assert e.status is ExecutionStatus.ABORTED and e.error is not None
            assert (e.error.type, e.error.message) == ("Aborted", "aborted at shutdown")
        assert app.store is not None and await app.store.ledger() == {}


async def test_an_execution_cancelled_before_its_first_step_is_recorded(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, execution_shutdown_timeout=0)
    async with app.running():
        a = await app.executions.start("hold", {"gate": "x"})
        # Shut down at once: the task may not have begun; it must still be recorded.
        await app.shutdown(timeout=0)
        assert a.execution_id is not None
        e = await app.executions.get_execution(a.execution_id)
        assert e.status is ExecutionStatus.ABORTED
        assert app.store is not None and await app.store.ledger() == {}
