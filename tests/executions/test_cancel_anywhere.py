"""Cancel from any server: `app.executions.cancel` on a process that does not run the execution
writes a durable request its owner hears (NOTIFY on PostgreSQL, its poll on SQLite); the owner
stops it within a second, its children with it, records it CANCELLED and frees its slot. Two
apps on one database stand for two servers; both stores."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from yoke.errors import Conflict
from yoke.executions import Context, ExecutionStatus, Limits, StartStatus
from yoke.store import ExecutionStatus as Status

from .helpers import count_rows, make_app, wait_until


def _pair(database_url: str, started: asyncio.Event, children: list[str]) -> tuple[Any, Any]:
    apps = []
    for _ in range(2):
        app = make_app(database_url, limits=Limits(max_running=1), request_poll_secs=0.2)

        @app.workflow()
        async def child(ctx: Context, input: Any) -> Any:
            children.append(ctx.execution_id)
            started.set()
            await asyncio.sleep(60)

        @app.workflow()
        async def parent(ctx: Context, input: Any) -> Any:
            await ctx.step("before", lambda: 1)
            return await ctx.child("child")  # by name: each app has its own function

        @app.workflow()
        async def quick(ctx: Context, input: Any) -> Any:
            return input

        apps.append(app)
    return apps[0], apps[1]


async def test_cancel_through_another_server_stops_it_within_a_second(database_url: str) -> None:
    started = asyncio.Event()
    children: list[str] = []
    a, b = _pair(database_url, started, children)
    async with a.running(), b.running():
        s = await a.executions.start("parent")
        assert s.execution_id is not None
        await asyncio.wait_for(started.wait(), 10)
        queued = await b.executions.start("quick", 7)  # behind the one slot
        assert queued.status is StartStatus.QUEUED
        t0 = time.monotonic()
        cancelled = await b.executions.cancel(s.execution_id)
        took = time.monotonic() - t0
        assert cancelled.status is ExecutionStatus.CANCELLED, cancelled
        assert cancelled.error is not None and cancelled.error.type == "Cancelled"
        assert cancelled.error.step == "child:child"
        [child_id] = children
        assert (await b.executions.get_execution(child_id)).status is ExecutionStatus.CANCELLED
        # The slot it held is free: the start queued on the other server is granted.
        granted = await b.executions.wait_granted(queued.start_id, 10)
        assert granted.status is StartStatus.GRANTED and granted.execution_id is not None
        assert (await b.executions.wait(granted.execution_id, 10)).output == 7
        await wait_until(lambda: _handled(database_url))
    assert took < 1.0, took


async def _handled(database_url: str) -> bool:
    return count_rows(database_url, "yoke_requests", "handled_at IS NULL") == 0


async def test_cancel_here_stops_at_once_and_a_finished_one_or_a_child_is_refused(
    database_url: str,
) -> None:
    started = asyncio.Event()
    children: list[str] = []
    a, _ = _pair(database_url, started, children)
    async with a.running():
        s = await a.executions.start("parent")
        assert s.execution_id is not None
        await asyncio.wait_for(started.wait(), 10)
        with pytest.raises(Conflict, match="child"):
            await a.executions.cancel(children[0])
        done = await a.executions.cancel(s.execution_id)
        assert done.status is ExecutionStatus.CANCELLED
        with pytest.raises(Conflict, match="already CANCELLED"):
            await a.executions.cancel(s.execution_id)
    assert count_rows(database_url, "yoke_requests") == 0  # stopped here: no request needed


async def test_a_cancel_asked_of_a_dead_server_ends_cancelled_and_is_not_recovered(
    database_url: str,
) -> None:
    from yoke.app import open_store
    from yoke.store import NewStart, Resume, Slot, StartKind

    backend = open_store(database_url)
    await backend.open()
    store = backend.executions
    try:
        await store.register_instance("dead", now=0)
        start = NewStart(
            start_id="s1",
            kind=StartKind.START,
            workflow="wf",
            session="s",
            tenant="s",
            priority=0,
            input="{}",
            fingerprint="",
            principal=None,
            idempotency_key=None,
            source_execution_id=None,
            from_step=None,
            instance_id="dead",
            created_at=1,
        )
        from tests.store.grants import grant_request

        [res] = await store.grant_starts(
            [grant_request(start, [Slot(key="global", cap=None)], log=True)], now=1
        )
        assert res.execution is not None
        eid = res.execution.execution_id
        after, asked = await store.requests.request_cancel(eid, principal="ops", now=2)
        assert asked and after is not None and after.status is Status.RUNNING
        found = await store.recover_dead(
            stale_before=50, now=100, exclude="me", resume=Resume(max_recoveries=3, new_id=str)
        )
        assert found.cancelled == (eid,) and found.recovered == () and found.adopted == ()
        ended = await store.get_execution(eid)
        assert ended is not None and ended.status is Status.CANCELLED
        assert await store.requests.pending_requests("dead", limit=10) == []
        assert await store.ledger() == {}
    finally:
        await backend.close()
