"""Starts: grants, bad input, idempotency, reject and max_queued, failures, cancel, reading."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

import yoke
from yoke.errors import (
    BadType,
    BadValue,
    Conflict,
    IdempotencyConflict,
    LimitExceeded,
    NotFound,
    NotRunning,
)
from yoke.executions import Context, ExecutionStatus, Limits, StartStatus

from .helpers import Gates, count_rows, make_app, wait_until


async def test_start_without_limits_is_granted_and_runs(database_url: str) -> None:
    app = make_app(database_url)

    @app.workflow()
    async def double(ctx: Context, input: Any) -> Any:
        assert ctx.session == "default" and ctx.execution_id
        return {"out": input["n"] * 2}

    async with app.running():
        start = await app.executions.start(double, {"n": 21})
        assert start.status is StartStatus.GRANTED and start.execution_id
        ex = await app.executions.wait(start.execution_id, timeout=10)
        assert ex.status is ExecutionStatus.SUCCEEDED and ex.output == {"out": 42}
        assert ex.input == {"n": 21} and ex.start_id == start.start_id
        assert (await app.executions.get(start.start_id)).execution_id == ex.execution_id
        assert app.store is not None and await app.store.ledger() == {}


async def test_calls_before_running_raise_not_running(database_url: str) -> None:
    app = make_app(database_url)
    with pytest.raises(NotRunning):
        await app.executions.get("x")


async def test_bad_input_raises_a_named_error_and_changes_nothing(database_url: str) -> None:
    app = make_app(database_url)

    @app.workflow("wf")
    async def wf(ctx: Context, input: Any) -> Any:
        return input

    async def not_registered(ctx: Context, input: Any) -> Any:
        return None

    async with app.running():
        ex = app.executions
        with pytest.raises(BadValue, match="input must be JSON"):
            await ex.start(wf, {"when": object()})
        with pytest.raises(BadValue):
            await ex.start(wf, math.nan)
        with pytest.raises(NotFound):
            await ex.start("nope", {})
        with pytest.raises(NotFound):
            await ex.start(not_registered, {})
        with pytest.raises(BadType):
            await ex.start(wf, {}, priority="1")  # type: ignore[arg-type]
        with pytest.raises(BadType):
            await ex.start(wf, {}, session=3)  # type: ignore[arg-type]
        with pytest.raises(BadType):
            await ex.start(wf, {}, idempotency_key="")
        admin = yoke.Principal("root", ["ADMIN"])
        with pytest.raises(BadType):
            await ex.set_limits({"max_running": 1}, principal=admin)  # type: ignore[arg-type]
        with pytest.raises(NotFound):
            await ex.get("missing")
        with pytest.raises(NotFound):
            await ex.restart("missing")
        assert (await ex.list()).items == ()
        assert await ex.audit() == []
    assert count_rows(database_url, "yoke_starts") == 0
    assert count_rows(database_url, "yoke_executions") == 0


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_running": -1}, BadValue),
        ({"max_running": "2"}, BadType),
        ({"max_running": True}, BadType),
        ({"max_running_per_session": 1.5}, BadType),
        ({"max_running_per_workflow": {"x": -1}}, BadValue),
        ({"max_running_per_workflow": {1: 1}}, BadType),
        ({"max_queued": -3}, BadValue),
        ({"on_limit": "drop"}, BadValue),
    ],
)
def test_limits_are_validated(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        Limits(**kwargs)


def test_limits_round_trip_json() -> None:
    lim = Limits(max_running=3, max_running_per_workflow={"a": 1}, on_limit="reject")
    assert Limits.from_json(lim.to_json()) == lim
    assert lim.workflow_cap("a") == 1 and lim.workflow_cap("b") is None
    with pytest.raises(BadValue, match="unknown limit"):
        Limits.from_json({"max_runing": 1})


async def test_100_concurrent_starts_with_one_key_make_one_start(database_url: str) -> None:
    app = make_app(database_url)

    @app.workflow()
    async def once(ctx: Context, input: Any) -> Any:
        return input

    async with app.running():
        starts = await asyncio.gather(
            *[app.executions.start(once, {"a": 1}, idempotency_key="k-1") for _ in range(100)]
        )
        assert len({s.start_id for s in starts}) == 1
        assert {s.status for s in starts} == {StartStatus.GRANTED}
        assert len({s.execution_id for s in starts}) == 1
        with pytest.raises(IdempotencyConflict):
            await app.executions.start(once, {"a": 2}, idempotency_key="k-1")
        # Another principal has its own key space.
        other = await app.executions.start(
            once, {"a": 1}, idempotency_key="k-1", principal=yoke.Principal("bob", tenant="t")
        )
        assert other.start_id != starts[0].start_id and other.session == "t"
    assert count_rows(database_url, "yoke_starts") == 2
    assert count_rows(database_url, "yoke_executions") == 2


async def test_reject_raises_limit_exceeded_with_a_retry_after(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1, on_limit="reject"))

    @app.workflow()
    async def quick(ctx: Context, input: Any) -> Any:
        return None

    async with app.running():
        ex = app.executions
        # Some history of freed slots, for the estimate.
        for _ in range(5):
            s = await ex.start(quick)
            assert s.execution_id is not None
            await ex.wait(s.execution_id, timeout=10)
        held = await ex.start("hold", {"gate": "h"})
        assert held.status is StartStatus.GRANTED
        with pytest.raises(LimitExceeded) as info:
            await ex.start(quick, idempotency_key="retry-me")
        assert info.value.retry_after is not None and 0 < info.value.retry_after < 3600
        gates.open("h")
        assert held.execution_id is not None
        await ex.wait(held.execution_id, timeout=10)
        # The refusal gave the key back: the retry starts afresh.
        again = await ex.start(quick, idempotency_key="retry-me")
        assert again.status is StartStatus.GRANTED
    assert count_rows(database_url, "yoke_starts", "status = 'REFUSED'") == 1


async def test_max_queued_refuses_past_the_queue_bound(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1, max_queued=1))
    async with app.running():
        ex = app.executions
        a = await ex.start("hold", {"gate": "a"})
        b = await ex.start("hold", {"gate": "b"})
        assert (a.status, b.status) == (StartStatus.GRANTED, StartStatus.QUEUED)
        assert b.position == 1
        with pytest.raises(LimitExceeded):
            await ex.start("hold", {"gate": "c"})
        gates.open("a")
        gates.open("b")
        b2 = await ex.wait_granted(b.start_id, timeout=10)
        assert b2.status is StartStatus.GRANTED


async def test_a_failing_workflow_frees_its_slot(database_url: str) -> None:
    app = make_app(database_url, limits=Limits(max_running=1))

    @app.workflow()
    async def boom(ctx: Context, input: Any) -> Any:
        raise RuntimeError("kaput")

    @app.workflow()
    async def not_json(ctx: Context, input: Any) -> Any:
        return {1, 2}

    async with app.running():
        s = await app.executions.start(boom)
        assert s.execution_id is not None
        e = await app.executions.wait(s.execution_id, timeout=10)
        assert e.status is ExecutionStatus.FAILED and e.error is not None
        assert (e.error.type, e.error.message) == ("RuntimeError", "kaput")
        s2 = await app.executions.start(not_json)
        assert s2.status is StartStatus.GRANTED and s2.execution_id is not None
        e2 = await app.executions.wait(s2.execution_id, timeout=10)
        assert e2.status is ExecutionStatus.FAILED and "JSON" in str(e2.error)
        assert app.store is not None and await app.store.ledger() == {}


async def test_cancel_a_queued_start_and_a_running_execution(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1))
    async with app.running():
        ex = app.executions
        a = await ex.start("hold", {"gate": "a"})
        b = await ex.start("hold", {"gate": "b"})
        c = await ex.start("hold", {"gate": "c"})
        cancelled = await ex.cancel_start(b.start_id)
        assert cancelled.status is StartStatus.CANCELLED
        with pytest.raises(Conflict):
            await ex.cancel_start(b.start_id)
        with pytest.raises(Conflict):
            await ex.cancel_start(a.start_id)
        await gates.started_one("a")
        assert a.execution_id is not None
        stopped = await ex.cancel(a.execution_id)
        assert stopped.status is ExecutionStatus.CANCELLED
        with pytest.raises(Conflict):
            await ex.cancel(a.execution_id)
        c2 = await ex.wait_granted(c.start_id, timeout=10)
        assert c2.status is StartStatus.GRANTED
        await gates.started_one("c")
        assert gates.started == ["a", "c"]
        gates.open("c")


async def test_wait_granted_times_out_as_queued_and_list_pages(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1))

    @app.workflow()
    async def noop(ctx: Context, input: Any) -> Any:
        return input

    async with app.running():
        ex = app.executions
        held = await ex.start("hold", {"gate": "h"})
        queued = await ex.start(noop, 1, session="s2")
        still = await ex.wait_granted(queued.start_id, timeout=0.05)
        assert still.status is StartStatus.QUEUED and still.position == 1
        gates.open("h")
        granted = await ex.wait_granted(queued.start_id, 10)
        assert granted.status is StartStatus.GRANTED and granted.execution_id is not None
        await ex.wait(granted.execution_id, 10)  # its slot frees only when it has ended
        for i in range(3):
            s = await ex.start(noop, i, session="s3")
            assert s.execution_id is not None
            await ex.wait(s.execution_id, 10)
        assert held.execution_id is not None
        await ex.wait(held.execution_id, 10)
        page = await ex.list(limit=2)
        assert len(page.items) == 2 and page.next_cursor is not None
        rest = await ex.list(limit=10, cursor=page.next_cursor)
        assert len(rest.items) == 3 and rest.next_cursor is None
        assert len((await ex.list(session="s3")).items) == 3
        assert len((await ex.list(workflow="hold", status="succeeded")).items) == 1
        with pytest.raises(BadValue):
            await ex.list(status="sleeping")
        with pytest.raises(BadValue):
            await ex.list(cursor="x")


async def test_a_start_whose_caller_is_cancelled_is_still_decided(database_url: str) -> None:
    app = make_app(database_url, limits=Limits(max_running=2))

    @app.workflow()
    async def quick(ctx: Context, input: Any) -> Any:
        return input

    async with app.running():
        tasks = [asyncio.create_task(app.executions.start(quick, i)) for i in range(30)]
        for i, task in enumerate(tasks):
            for _ in range(i % 7):
                await asyncio.sleep(0)
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

        async def settled() -> bool:
            st = app.executions.stats()
            return (st.in_flight, st.queued, st.executions, st.running) == (0, 0, 0, 0)

        await wait_until(settled)
        assert app.store is not None and await app.store.ledger() == {}
    logged = count_rows(database_url, "yoke_starts")
    assert logged == count_rows(database_url, "yoke_starts", "status = 'GRANTED'")
    assert logged == count_rows(database_url, "yoke_executions", "status = 'SUCCEEDED'")


async def test_concurrent_grants_and_finishes_share_store_transactions(database_url: str) -> None:
    """64 starts at once reach the ledger in a few batches (group commit), not one by one,
    and their finishes too; every slot is still counted exactly."""
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running_per_session=40))
    async with app.running():
        store = app.store
        assert store is not None
        calls: dict[str, list[int]] = {"grant": [], "finish": []}
        grant_starts, finish_executions = store.grant_starts, store.finish_executions

        async def counted_grants(requests: Any, *, now: float) -> Any:
            calls["grant"].append(len(requests))
            return await grant_starts(requests, now=now)

        async def counted_finishes(finishes: Any, *, now: float) -> Any:
            calls["finish"].append(len(finishes))
            return await finish_executions(finishes, now=now)

        store.grant_starts = counted_grants  # type: ignore[method-assign]
        store.finish_executions = counted_finishes  # type: ignore[method-assign]
        starts = await asyncio.gather(
            *(app.executions.start("hold", {"gate": "g"}, session=f"s{i % 2}") for i in range(64))
        )
        granted = [s for s in starts if s.status is StartStatus.GRANTED]
        assert len(granted) == 64  # 32 per session, under the cap of 40
        assert sum(calls["grant"]) == 64 and len(calls["grant"]) < 16, calls["grant"]
        assert await store.ledger() == {
            "global": 64,
            "session:s0": 32,
            "session:s1": 32,
            "tenant:s0": 32,
            "tenant:s1": 32,
            "workflow:hold": 64,
        }
        gates.open("g")
        await wait_until(lambda: _all_finished(app, granted))
        assert sum(calls["finish"]) == 64 and len(calls["finish"]) < 16, calls["finish"]
        assert await store.ledger() == {}


async def _all_finished(app: yoke.App, starts: list[Any]) -> bool:
    for s in starts:
        ex = await app.executions.get_execution(s.execution_id)
        if not ex.status.finished:
            return False
    return True


async def test_grant_listeners_hear_each_grant_once_even_when_one_fails(
    database_url: str,
) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1))
    heard: list[Any] = []

    def broken(start: Any) -> None:
        raise RuntimeError("a listener's bug")

    app.executions.add_grant_listener(broken)
    forget = app.executions.add_grant_listener(heard.append)
    async with app.running():
        first = await app.executions.start("hold", {"gate": "a"})
        queued = await app.executions.start("hold", {"gate": "b"})
        assert queued.status is StartStatus.QUEUED
        gates.open("a")
        granted = await app.executions.wait_granted(queued.start_id, timeout=10)
        assert granted.status is StartStatus.GRANTED
        assert [s.start_id for s in heard] == [first.start_id, queued.start_id]
        assert all(s.status is StartStatus.GRANTED and s.decided_at for s in heard)
        forget()
        gates.open("b")
        await gates.started_one("b")
        third = await app.executions.start("hold", {"gate": "c"})
        await app.executions.wait_granted(third.start_id, timeout=10)
        assert len(heard) == 2  # removed: it heard nothing more
        gates.open("c")


async def test_a_start_that_fits_is_one_transaction_and_one_that_queues_is_logged_first(
    database_url: str,
) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1))
    async with app.running():
        store = app.store
        assert store is not None
        calls: list[str] = []
        for name in ("log_starts", "grant_starts"):
            real = getattr(store, name)

            async def spy(*args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
                calls.append(_name)
                return await _real(*args, **kw)

            setattr(store, name, spy)  # the real store still does the work; this only counts
        ex = app.executions
        held = await ex.start("hold", {"gate": "h"})
        assert held.status is StartStatus.GRANTED
        assert calls == ["grant_starts"]  # logged by the granting transaction
        queued = await ex.start("hold", {"gate": "q"})
        assert queued.status is StartStatus.QUEUED
        assert calls == ["grant_starts", "log_starts"]  # durable before it waits
        # The same key again, while its start is queued: the first answer, nothing new.
        again = await ex.start("hold", {"gate": "q"}, idempotency_key="k")
        assert again.status is StartStatus.QUEUED
        assert (await ex.start("hold", {"gate": "q"}, idempotency_key="k")) == again
        gates.open("h")
        assert held.execution_id is not None
        await ex.wait(held.execution_id, timeout=10)
        gates.open("q")

        async def all_done() -> bool:
            return count_rows(database_url, "yoke_executions", "status = 'SUCCEEDED'") == 3

        await wait_until(all_done)
    assert count_rows(database_url, "yoke_starts") == 3
    assert calls.count("log_starts") == 3  # the second retry was logged (and found its key)


async def test_a_key_taken_while_its_start_fits_replays_the_first_answer(database_url: str) -> None:
    app = make_app(database_url)

    @app.workflow()
    async def echo(ctx: Context, input: Any) -> Any:
        return input

    async with app.running():
        first = await app.executions.start(echo, 1, idempotency_key="once")
        assert first.status is StartStatus.GRANTED
        # Nothing queued, no cap: the retry is admitted at once, and its batch finds the key.
        again = await app.executions.start(echo, 1, idempotency_key="once")
        assert again == first
        with pytest.raises(IdempotencyConflict):
            await app.executions.start(echo, 2, idempotency_key="once")
        assert app.executions.kernel.running <= 1  # the retries released their kernel slots
    assert count_rows(database_url, "yoke_starts") == 1
    assert count_rows(database_url, "yoke_executions") == 1


async def test_a_retried_key_takes_no_slot_in_the_ledger(database_url: str) -> None:
    app = make_app(database_url)

    @app.workflow()
    async def echo(ctx: Context, input: Any) -> Any:
        return input

    async with app.running():
        store = app.store
        assert store is not None
        first = await app.executions.start(echo, 1, idempotency_key="once")
        assert first.execution_id is not None
        await app.executions.wait(first.execution_id, timeout=10)
        assert await store.ledger() == {}
        # No cap, nothing queued: each retry is logged and granted in one batch (on
        # PostgreSQL one statement), which finds the key taken and must count no slot for it.
        for _ in range(3):
            assert await app.executions.start(echo, 1, idempotency_key="once") == first
        assert await store.ledger() == {}  # nothing runs: no slot is held
        second = await app.executions.start(echo, 2)
        assert second.execution_id is not None
        await app.executions.wait(second.execution_id, timeout=10)
        assert await store.ledger() == {}
    assert count_rows(database_url, "yoke_executions") == 2
