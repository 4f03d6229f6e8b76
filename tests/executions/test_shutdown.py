"""Shutdown: nothing new, queued refused, running get their timeout and are then aborted."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from yoke.errors import ShuttingDown
from yoke.executions import ExecutionStatus, Limits, StartStatus

from .helpers import Gates, count_rows, make_app, wait_until


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


async def test_a_start_that_would_fit_is_refused_once_shutdown_began(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1))
    async with app.running():
        ex, store = app.executions, app.store
        assert store is not None
        a = await ex.start("hold", {"gate": "a"})
        assert a.status is StartStatus.GRANTED and a.execution_id is not None
        real, in_log, let_go = store.log_starts, asyncio.Event(), asyncio.Event()

        async def held_log(starts: Any) -> Any:
            in_log.set()
            await let_go.wait()  # a slow round trip: shutdown begins meanwhile
            return await real(starts)

        store.log_starts = held_log  # type: ignore[method-assign]
        # The slot is taken: b is logged first; by the time its log answers, the slot is free.
        b = asyncio.create_task(ex.start("hold", {"gate": "b"}))
        await asyncio.wait_for(in_log.wait(), 10)
        gates.open("a")
        await ex.wait(a.execution_id, timeout=10)
        stopping = asyncio.create_task(app.shutdown(timeout=10))
        await wait_until(lambda: _closing(ex))
        # A start that arrives now would fit at once: it is refused and nothing is written.
        with pytest.raises(ShuttingDown):
            await asyncio.wait_for(ex.start("hold", {"gate": "c"}), 10)
        let_go.set()
        with pytest.raises(ShuttingDown):
            await b  # fits now, but shutdown began while it was logged: refused
        await asyncio.wait_for(stopping, 10)
        assert gates.started == ["a"]
    assert count_rows(database_url, "yoke_executions") == 1
    assert count_rows(database_url, "yoke_starts", "status = 'GRANTED'") == 1  # a alone
    assert count_rows(database_url, "yoke_starts", "status = 'REFUSED'") == 1  # b, logged


async def _closing(ex: Any) -> bool:
    return bool(ex.closing)
