"""Waiting holds no slot, at scale and across a restart. Both stores.

A thousand sleeping workflows under `max_running=2` all finish, and while hundreds of them sleep
the ledger never counts more than two running (were a sleep to hold its slot, at most two could
ever be WAITING). A server stopped while executions sleep and wait: the next server wakes them
at their recorded times (the wake-ups are rows, not tasks of the server that recorded them)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from yoke.executions import Context, ExecutionStatus, Limits

from .helpers import make_app, wait_until

N = 1000


@pytest.mark.slow  # 2,000 runs through two slots: 15-25 s on SQLite, 50-60 s on PostgreSQL
@pytest.mark.timeout(180)
async def test_a_thousand_sleepers_under_two_slots_all_finish_holding_none(
    database_url: str,
) -> None:
    app = make_app(database_url, limits=Limits(max_running=2))

    @app.workflow()
    async def sleeper(ctx: Context, input: Any) -> Any:
        await ctx.sleep(2.0)
        return input

    async with app.running():
        ex = app.executions
        assert app.store is not None
        t0 = time.monotonic()
        starts = [ex.start(sleeper, i, session=f"s{i % 7}") for i in range(N)]
        await asyncio.gather(*starts)
        peak_waiting = samples = 0
        while True:
            waiting = len((await ex.list(status="WAITING", limit=1000)).items)
            ledger = await app.store.ledger()
            assert ledger.get("global", 0) <= 2, ledger
            assert ex.kernel.running <= 2
            peak_waiting = max(peak_waiting, waiting)
            samples += 1
            done = len((await ex.list(status="SUCCEEDED", limit=1000)).items)
            if done == N:
                break
            assert time.monotonic() < t0 + 150, (done, waiting)
            await asyncio.sleep(0.05)
    # Hundreds slept at once under two slots: none held one while it slept.
    assert peak_waiting >= 100, peak_waiting
    assert samples > 1


async def test_sleeps_and_waits_survive_a_restart_of_their_server(database_url: str) -> None:
    def build() -> Any:
        app = make_app(database_url)

        @app.workflow()
        async def nap(ctx: Context, input: Any) -> Any:
            await ctx.sleep_until(input)
            return time.time()

        @app.workflow()
        async def approval(ctx: Context, input: Any) -> Any:
            got = await ctx.wait_for("approve", timeout=input)
            return [got, time.time()]

        @app.workflow()
        async def deadline(ctx: Context, input: Any) -> Any:
            try:
                await ctx.wait_for("never", timeout=input)
            except TimeoutError:
                return time.time()
            return None

        return app

    first = build()
    t0 = time.time()
    async with first.running():
        ex = first.executions
        naps = [await ex.start("nap", t0 + 1.5 + i * 0.1) for i in range(3)]
        waiter = await ex.start("approval", 30)
        timer = await ex.start("deadline", 1.5)
        ids = [s.execution_id for s in (*naps, waiter, timer)]
        assert all(ids)
        for execution_id in ids:
            assert execution_id is not None
            while (await ex.get_execution(execution_id)).status is not ExecutionStatus.WAITING:
                assert time.time() < t0 + 10
    # The first server is gone: a second one on the same database wakes them.
    second = build()
    async with second.running():
        ex = second.executions
        assert waiter.execution_id is not None and timer.execution_id is not None
        await ex.signal(waiter.execution_id, "approve", "yes")
        ends = []
        for s in naps:
            assert s.execution_id is not None
            ends.append(await ex.wait(s.execution_id, timeout=20))
        signalled = await ex.wait(waiter.execution_id, timeout=20)
        timed_out = await ex.wait(timer.execution_id, timeout=20)
    for i, done in enumerate(ends):
        due = t0 + 1.5 + i * 0.1
        assert done.status is ExecutionStatus.SUCCEEDED
        assert due - 0.002 <= done.output < due + 5, (i, done.output - due)
    assert signalled.output[0] == "yes"
    assert timed_out.status is ExecutionStatus.SUCCEEDED
    assert t0 + 1.5 - 0.002 <= timed_out.output < t0 + 1.5 + 5


async def test_a_wake_up_fired_but_not_admitted_at_shutdown_runs_on_the_next_server(
    database_url: str,
) -> None:
    gate = asyncio.Event()  # never set: the blocker holds the one slot until shutdown

    def build() -> Any:
        app = make_app(database_url, limits=Limits(max_running=1), execution_shutdown_timeout=0.3)

        @app.workflow()
        async def nap(ctx: Context, input: Any) -> Any:
            await ctx.sleep(0.2)
            return "woke"

        @app.workflow()
        async def blocker(ctx: Context, input: Any) -> Any:
            await gate.wait()

        return app

    first = build()
    async with first.running():
        ex = first.executions
        napper = await ex.start("nap")
        assert napper.execution_id is not None
        napping = napper.execution_id

        async def waiting() -> bool:
            return bool((await ex.get_execution(napping)).status is ExecutionStatus.WAITING)

        async def queued() -> bool:  # fired, and queued behind the blocker
            return bool(ex.kernel.queued >= 1)

        await wait_until(waiting)
        await ex.start("blocker")  # takes the slot the wake-up will need
        await wait_until(queued)
    # Stopped with the wake-up QUEUED on it: not refused, taken over by the next server.
    second = build()
    async with second.running():
        done = await second.executions.wait(napper.execution_id, timeout=20)
    assert done.status is ExecutionStatus.SUCCEEDED and done.output == "woke"
