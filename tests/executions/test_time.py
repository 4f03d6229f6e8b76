"""Time in workflows: delayed starts (SCHEDULED, admitted at their time, cancellable), durable
sleeps and signal waits that hold no slot (WAITING), and `yoke.WaitTimeout`. Both stores."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import yoke
from yoke.errors import BadType, BadValue, Conflict, NotFound, QuotaExceeded
from yoke.executions import Context, ExecutionStatus, Limits, StartStatus, signals

from .helpers import make_app, wait_until


async def test_a_delayed_start_is_scheduled_then_admitted_at_its_time(database_url: str) -> None:
    app = make_app(database_url)

    @app.workflow()
    async def stamp(ctx: Context, input: Any) -> Any:
        return time.time()

    async with app.running():
        ex = app.executions
        asked = time.time()
        s = await ex.start(stamp, delay=0.5)
        assert s.status is StartStatus.SCHEDULED and s.execution_id is None
        assert s.due_at is not None and abs(s.due_at - (asked + 0.5)) < 0.2
        granted = await ex.wait_granted(s.start_id, timeout=10)
        assert granted.status is StartStatus.GRANTED and granted.execution_id is not None
        done = await ex.wait(granted.execution_id, timeout=10)
    assert done.status is ExecutionStatus.SUCCEEDED
    assert done.output >= s.due_at - 0.002  # never before its time


async def test_a_delayed_start_cancelled_while_scheduled_never_runs(database_url: str) -> None:
    app = make_app(database_url)
    ran: list[str] = []

    @app.workflow()
    async def note(ctx: Context, input: Any) -> Any:
        ran.append(ctx.execution_id)

    async with app.running():
        ex = app.executions
        s = await ex.start(note, at=time.time() + 0.4)
        cancelled = await ex.cancel_start(s.start_id)
        assert cancelled.status is StartStatus.CANCELLED
        with pytest.raises(Conflict):
            await ex.cancel_start(s.start_id)
        other = await ex.start(note, delay=0.6)  # a later timer: fired after the first's time
        granted = await ex.wait_granted(other.start_id, timeout=10)
        assert granted.execution_id is not None
        await ex.wait(granted.execution_id, timeout=10)
        assert (await ex.get(s.start_id)).status is StartStatus.CANCELLED
    assert ran == [granted.execution_id]


async def test_bad_times_are_refused_and_nothing_is_written(database_url: str) -> None:
    app = make_app(database_url)

    @app.workflow()
    async def wf(ctx: Context, input: Any) -> Any:
        return None

    async with app.running():
        ex = app.executions
        for bad, error in (
            ({"delay": -1}, BadValue),
            ({"delay": float("nan")}, BadValue),
            ({"delay": "1"}, BadType),
            ({"at": True}, BadType),
            ({"at": 1.0, "delay": 1.0}, BadValue),
            ({"delay": 1e12}, BadValue),
        ):
            with pytest.raises(error):
                await ex.start(wf, **bad)
        assert (await ex.list()).items == ()


async def test_a_delayed_start_with_an_idempotency_key_is_scheduled_once(
    database_url: str,
) -> None:
    app = make_app(database_url)

    @app.workflow()
    async def wf(ctx: Context, input: Any) -> Any:
        return None

    async with app.running():
        ex = app.executions
        a = await ex.start(wf, 1, delay=30, idempotency_key="k")
        b = await ex.start(wf, 1, delay=30, idempotency_key="k")
        assert a.start_id == b.start_id and b.status is StartStatus.SCHEDULED
        with pytest.raises(yoke.IdempotencyConflict):
            await ex.start(wf, 2, delay=30, idempotency_key="k")


async def test_a_sleep_holds_no_slot_and_ends_at_its_time(database_url: str) -> None:
    app = make_app(database_url, limits=Limits(max_running=1))

    @app.workflow()
    async def nap(ctx: Context, input: Any) -> Any:
        before = await ctx.step("before", time.time)
        await ctx.sleep(0.6)
        return [before, time.time()]

    @app.workflow()
    async def quick(ctx: Context, input: Any) -> Any:
        return "ran"

    async with app.running():
        ex = app.executions
        s = await ex.start(nap)
        assert s.execution_id is not None
        await wait_until(lambda: _status_is(app, s.execution_id, ExecutionStatus.WAITING))
        # The one slot is free while it sleeps: another start is granted at once.
        other = await ex.start(quick)
        assert other.status is StartStatus.GRANTED and other.execution_id is not None
        assert (await ex.wait(other.execution_id, 10)).output == "ran"
        done = await ex.wait(s.execution_id, timeout=10)
    assert done.status is ExecutionStatus.SUCCEEDED
    before, after = done.output
    assert after - before >= 0.6 - 0.002


async def test_a_signal_sent_before_the_wait_is_kept_in_order(database_url: str) -> None:
    app = make_app(database_url)

    @app.workflow()
    async def approve(ctx: Context, input: Any) -> Any:
        await ctx.step("hold", asyncio.sleep, 0.3)
        first = await ctx.wait_for("vote")
        second = await ctx.wait_for("vote", timeout=10)
        return [first, second]

    async with app.running():
        ex = app.executions
        s = await ex.start(approve)
        assert s.execution_id is not None
        await ex.signal(s.execution_id, "vote", {"n": 1})
        await ex.signal(s.execution_id, "vote", {"n": 2})
        done = await ex.wait(s.execution_id, timeout=10)
    assert done.status is ExecutionStatus.SUCCEEDED
    assert done.output == [{"n": 1}, {"n": 2}]


async def test_a_wait_is_woken_by_its_signal_and_holds_no_slot(database_url: str) -> None:
    app = make_app(database_url, limits=Limits(max_running=1))

    @app.workflow()
    async def waiter(ctx: Context, input: Any) -> Any:
        return await ctx.wait_for("go")

    async with app.running():
        ex = app.executions
        s = await ex.start(waiter)
        assert s.execution_id is not None
        await wait_until(lambda: _status_is(app, s.execution_id, ExecutionStatus.WAITING))
        waiting = await ex.get_execution(s.execution_id)
        assert waiting.waiting_for == "go"
        assert app.store is not None and await app.store.ledger() == {}
        await ex.signal(s.execution_id, "go", "payload")
        done = await ex.wait(s.execution_id, timeout=10)
    assert done.status is ExecutionStatus.SUCCEEDED and done.output == "payload"


async def test_a_wait_past_its_timeout_raises_wait_timeout(database_url: str) -> None:
    app = make_app(database_url)

    @app.workflow()
    async def waiter(ctx: Context, input: Any) -> Any:
        try:
            await ctx.wait_for("never", timeout=0.4)
        except yoke.WaitTimeout:
            return "timed out"
        return "signalled"

    async with app.running():
        ex = app.executions
        t0 = time.monotonic()
        s = await ex.start(waiter)
        assert s.execution_id is not None
        done = await ex.wait(s.execution_id, timeout=10)
        took = time.monotonic() - t0
        # A signal now is too late: it is refused, the execution has ended.
        with pytest.raises(Conflict):
            await ex.signal(s.execution_id, "never", 1)
    assert done.output == "timed out" and 0.4 <= took < 5


async def test_signals_are_refused_for_unknown_executions_and_bad_payloads(
    database_url: str,
) -> None:
    app = make_app(database_url)

    @app.workflow()
    async def waiter(ctx: Context, input: Any) -> Any:
        return await ctx.wait_for("go", timeout=30)

    async with app.running():
        ex = app.executions
        with pytest.raises(NotFound):
            await ex.signal("nope", "go", 1)
        s = await ex.start(waiter)
        assert s.execution_id is not None
        with pytest.raises(BadValue):
            await ex.signal(s.execution_id, "go", {1, 2})
        with pytest.raises(BadValue):
            await ex.signal(s.execution_id, "x" * 201, 1)
        with pytest.raises(NotFound):  # another tenant's: not there for it
            await ex.signal(s.execution_id, "go", 1, principal=yoke.Principal("e", tenant="evil"))
        await ex.signal(s.execution_id, "go", 7, principal=yoke.Principal("o", tenant="default"))
        assert (await ex.wait(s.execution_id, timeout=10)).output == 7


async def test_an_execution_keeps_a_bounded_number_of_signals(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tenant's signals to its own execution are bounded in number as in size: past the
    bound the next is refused (QuotaExceeded, nothing kept), and the kept ones are taken in
    order."""
    monkeypatch.setattr(signals, "MAX_KEPT_SIGNALS", 3)
    app = make_app(database_url)
    go = asyncio.Event()

    @app.workflow()
    async def waiter(ctx: Context, input: Any) -> Any:
        await ctx.step("hold", go.wait)
        return await ctx.wait_for("vote", timeout=30)

    async with app.running():
        ex = app.executions
        s = await ex.start(waiter)
        assert s.execution_id is not None
        for n in range(3):
            await ex.signal(s.execution_id, "vote", n)
        with pytest.raises(QuotaExceeded):
            await ex.signal(s.execution_id, "vote", 3)
        go.set()
        assert (await ex.wait(s.execution_id, timeout=10)).output == 0  # the oldest


async def _status_is(app: Any, execution_id: str | None, status: ExecutionStatus) -> bool:
    assert execution_id is not None
    ex = await app.executions.get_execution(execution_id)
    return bool(ex.status is status)


async def test_a_waiting_execution_is_cancelled_at_once_and_never_wakes(
    database_url: str,
) -> None:
    app = make_app(database_url)

    @app.workflow()
    async def nap(ctx: Context, input: Any) -> Any:
        await ctx.sleep(0.5)
        return "woke"

    async with app.running():
        ex = app.executions
        s = await ex.start(nap)
        assert s.execution_id is not None
        await wait_until(lambda: _status_is(app, s.execution_id, ExecutionStatus.WAITING))
        cancelled = await ex.cancel(s.execution_id)
        assert cancelled.status is ExecutionStatus.CANCELLED
        assert cancelled.error is not None and cancelled.error.type == "Cancelled"
        await asyncio.sleep(0.8)  # past its wake time: nothing runs it again
        assert (await ex.get_execution(s.execution_id)).status is ExecutionStatus.CANCELLED
        assert app.store is not None and await app.store.time.wake_of(s.execution_id) is None


async def test_two_servers_racing_the_same_timers_fire_each_once(database_url: str) -> None:
    first, second = make_app(database_url), make_app(database_url)
    ran: list[int] = []
    for app in (first, second):

        @app.workflow(name="count")
        async def count(ctx: Context, input: Any) -> Any:
            ran.append(input)

    async with first.running(), second.running():
        due = time.time() + 1.0
        starts = [await first.executions.start("count", i, at=due) for i in range(100)]
        starts += [await second.executions.start("count", i, at=due) for i in range(100, 200)]
        for s in starts:
            granted = await first.executions.wait_granted(s.start_id, timeout=20)
            assert granted.status is StartStatus.GRANTED, granted
            assert granted.execution_id is not None
            await first.executions.wait(granted.execution_id, timeout=20)
        fired = first.executions.timers.fired + second.executions.timers.fired
    assert sorted(ran) == list(range(200)) and fired == 200


async def test_signals_racing_their_waits_are_never_missed(database_url: str) -> None:
    # A signal sent while its wait is being recorded: the wait either takes it at once or is
    # woken by it (both lock the execution's row first). A missed one would wait for ever.
    app = make_app(database_url)

    @app.workflow()
    async def waiter(ctx: Context, input: Any) -> Any:
        return await ctx.wait_for("go")  # no timeout: only the signal ends it

    async with app.running():
        ex = app.executions
        starts = await asyncio.gather(*(ex.start(waiter, i) for i in range(60)))
        ids = [s.execution_id for s in starts]
        assert all(ids)
        await asyncio.gather(*(ex.signal(i, "go", n) for n, i in enumerate(ids) if i))
        done = [await ex.wait(i, timeout=20) for i in ids if i]
    assert [d.output for d in done] == list(range(60))
