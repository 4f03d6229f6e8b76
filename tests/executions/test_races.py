"""Races between a grant in the store and what happens meanwhile: a cancel, a shutdown, bad
input beside good. Another store on the same database plays "another process" holding the only
slot, so every grant the dispatcher tries comes back FULL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

import yoke
from tests.store.test_conformance import new_execution, new_start
from yoke.app import open_store
from yoke.errors import BadType, BadValue, ShuttingDown, StoreUnavailable
from yoke.executions import Limits, StartStatus
from yoke.store import ExecutionStatus, GrantOutcome, GrantRequest, Slot, Store

from .helpers import Gates, echo_app, make_app, wait_until


@asynccontextmanager
async def slot_held_elsewhere(url: str) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """Another instance takes the only global slot; yields a function that frees it."""
    other = open_store(url)
    await other.open()
    now = time.time()
    await other.executions.register_instance("elsewhere", now=now)
    [(row, _)] = await other.executions.log_starts(
        [new_start(workflow="hold", session="elsewhere", instance_id="elsewhere", created_at=now)]
    )
    execution = new_execution(
        row.start_id, workflow="hold", session="elsewhere", instance_id="elsewhere"
    )
    execution_id = execution.execution_id
    [res] = await other.executions.grant_starts(
        [
            GrantRequest(
                start_id=row.start_id, execution=execution, slots=(Slot(key="global", cap=1),)
            )
        ],
        now=now,
    )
    assert res.outcome is GrantOutcome.GRANTED

    async def free() -> None:
        await other.executions.finish_execution(
            execution_id, ExecutionStatus.SUCCEEDED, output=None, error=None, now=time.time()
        )

    try:
        yield free
    finally:
        await other.close()


def slow_grants(store: Store, in_store: asyncio.Event, delay: float) -> None:
    """Observe the real `grant_starts` and hold each batch a little, so the test can act while
    a grant is in the store."""
    real = store.grant_starts

    async def grant_starts(requests: Any, *, now: float) -> Any:
        in_store.set()
        try:
            await asyncio.sleep(delay)
            return await real(requests, now=now)
        finally:
            in_store.clear()

    store.grant_starts = grant_starts  # type: ignore[method-assign]


async def test_cancelling_a_start_while_the_dispatcher_grants_it(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1), slot_poll_interval=0.005)
    async with slot_held_elsewhere(database_url) as free_the_slot, app.running():
        assert app.store is not None
        in_store = asyncio.Event()
        slow_grants(app.store, in_store, 0.02)
        for _ in range(15):
            st = await app.executions.start("hold", {"gate": "g"})
            assert st.status is StartStatus.QUEUED
            await asyncio.wait_for(in_store.wait(), 10)  # the dispatcher is granting it
            cancelled = await app.executions.cancel_start(st.start_id)
            assert cancelled.status is StartStatus.CANCELLED
            await asyncio.sleep(0.03)  # its grant comes back FULL
        k = app.executions.kernel
        await wait_until(lambda: _true(k.queued == 0 and k.running == 0))
        # The app still grants: free the slot, and a new start runs.
        await free_the_slot()
        st = await app.executions.start("hold", {"gate": "after"})
        assert st.status is StartStatus.GRANTED
        gates.open("after")
        await gates.started_one("after")


async def test_a_start_answered_full_once_shutdown_began_is_refused(database_url: str) -> None:
    app = make_app(database_url, Gates(), limits=Limits(max_running=1))
    async with slot_held_elsewhere(database_url), app.running():
        assert app.store is not None
        st = await app.executions.start("hold", {"gate": "g"})
        assert st.status is StartStatus.QUEUED
        in_store = asyncio.Event()
        slow_grants(app.store, in_store, 0.2)
        app.executions.wake()
        await asyncio.wait_for(in_store.wait(), 10)
        waiter = asyncio.create_task(app.executions.wait_granted(st.start_id, timeout=10))
        await app.shutdown()  # the grant in the store comes back FULL after the queue drained
        after = await waiter
        assert after.status is StartStatus.REFUSED
        assert app.executions.kernel.queued == 0
        assert (await app.executions.get(st.start_id)).status is StartStatus.REFUSED
        with pytest.raises(ShuttingDown):
            await app.executions.start("hold", {"gate": "late"})


async def test_bad_text_or_priority_is_refused_before_it_reaches_the_store(
    database_url: str,
) -> None:
    """One bad start must not fail the batch it would travel in with good ones."""
    app = make_app(database_url)

    @app.workflow()
    async def noop(ctx: Any, input: Any) -> None:
        return None

    bad: list[dict[str, Any]] = [
        {"session": "a\x00b"},
        {"session": "\ud800"},
        {"idempotency_key": "k\x00"},
        {"priority": 2**63},
        {"priority": -(2**64)},
    ]
    async with app.running():
        outcomes = await asyncio.gather(
            *(app.executions.start("noop", None, **kw) for kw in bad),
            *(app.executions.start("noop", {"i": i}, session=f"s{i}") for i in range(20)),
            return_exceptions=True,
        )
        assert all(isinstance(o, BadValue) for o in outcomes[: len(bad)]), outcomes[: len(bad)]
        good = outcomes[len(bad) :]
        assert all(getattr(o, "status", None) is StartStatus.GRANTED for o in good), good
        with pytest.raises(BadType):
            await app.executions.start("noop", None, priority=1.5)  # type: ignore[arg-type]
        operator = yoke.Principal("op", roles=["OPERATOR"])
        with pytest.raises(BadValue):
            await app.executions.set_priority("any-start", 2**63, principal=operator)


async def _true(value: bool) -> bool:
    return value


async def test_a_grant_that_lands_after_a_service_failed_frees_its_slot(
    database_url: str,
) -> None:
    """A service fails while a grant is in the store: the app stops, and the granted
    execution, which can no longer be spawned, is recorded ABORTED with its slot freed."""
    app = make_app(database_url, Gates())
    crash = asyncio.Event()

    async def service() -> None:
        await crash.wait()
        raise RuntimeError("a user service failed")

    app.add_service("failing", service)

    async def run_until_the_service_fails() -> None:
        async with app.running():
            assert app.store is not None
            real = app.store.grant_starts

            async def grant_starts(requests: Any, *, now: float) -> Any:
                crash.set()  # the service fails while this batch is in the store
                await asyncio.sleep(0.2)
                return await real(requests, now=now)

            app.store.grant_starts = grant_starts  # type: ignore[method-assign]
            starter = asyncio.create_task(app.executions.start("hold", {"gate": "g"}))
            starter.add_done_callback(lambda t: t.cancelled() or t.exception())
            await asyncio.sleep(5)

    with pytest.raises(BaseExceptionGroup) as stopped:
        await run_until_the_service_fails()
    assert [type(e) for e in stopped.value.exceptions] == [RuntimeError]
    check = open_store(database_url)
    await check.open()
    try:
        executions = await check.executions.list_executions()
        assert [e.status for e in executions] == [ExecutionStatus.ABORTED]
        assert await check.executions.ledger() == {}
    finally:
        await check.close()


async def test_a_service_that_loses_a_cancel_still_lets_the_app_stop(database_url: str) -> None:
    """On Python 3.11 a library's `wait_for` can eat a cancel; the app asks again."""
    app = make_app(database_url)
    cancels = 0

    async def loses_the_first_cancel() -> None:
        nonlocal cancels
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancels += 1
                if cancels > 1:
                    raise

    app.add_service("stubborn", loses_the_first_cancel)

    async def run_briefly() -> None:
        async with app.running():
            await asyncio.sleep(0.05)

    await asyncio.wait_for(run_briefly(), 10)
    assert cancels == 2


def after_grants(store: Store, act: Callable[[Any], Awaitable[None]]) -> None:
    """Run `act(requests)` once, right after the real `grant_starts` of the next batch has
    committed and before its caller sees the answers: an operator who was quick."""
    real = store.grant_starts

    async def grant_starts(requests: Any, *, now: float) -> Any:
        answers = await real(requests, now=now)
        store.grant_starts = real  # type: ignore[method-assign]
        await act(requests)
        return answers

    store.grant_starts = grant_starts  # type: ignore[method-assign]


OPERATOR = yoke.Principal("op", roles=["OPERATOR"])


async def test_a_start_found_full_keeps_a_priority_set_just_after_it_was_logged(
    database_url: str,
) -> None:
    app = make_app(database_url, Gates(), limits=Limits(max_running=1))
    async with app.running(), slot_held_elsewhere(database_url):
        ex = app.executions
        assert app.store is not None

        async def reprioritize(requests: Any) -> None:
            await ex.set_priority(requests[0].start_id, 7, principal=OPERATOR)

        after_grants(app.store, reprioritize)
        start = await ex.start("hold", {"gate": "x"})  # fits here, FULL in the ledger
        assert start.status is StartStatus.QUEUED and start.priority == 7
        assert (await ex.get(start.start_id)).priority == 7
        item = ex.kernel.get(start.start_id)
        assert item is not None and item.priority == 7  # its place in line follows


async def test_a_start_found_full_and_cancelled_just_after_it_was_logged_says_cancelled(
    database_url: str,
) -> None:
    app = make_app(database_url, Gates(), limits=Limits(max_running=1))
    async with app.running(), slot_held_elsewhere(database_url):
        ex = app.executions
        assert app.store is not None

        async def cancel(requests: Any) -> None:
            await ex.cancel_start(requests[0].start_id)

        after_grants(app.store, cancel)
        start = await ex.start("hold", {"gate": "x"})
        assert start.status is StartStatus.CANCELLED
        assert ex.kernel.running == 0 and ex.kernel.queued == 0


async def test_a_start_being_logged_is_not_overtaken_by_one_that_fits_later(
    database_url: str,
) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1))
    async with app.running():
        ex = app.executions
        store = app.store
        assert store is not None
        first = await ex.start("hold", {"gate": "a"})
        assert first.status is StartStatus.GRANTED and first.execution_id is not None
        real = store.log_starts

        async def slow_log(starts: Any) -> Any:
            await asyncio.sleep(0.2)  # a slow round trip, or a batch queued behind another
            return await real(starts)

        store.log_starts = slow_log  # type: ignore[method-assign]
        # The slot is taken: the urgent start is logged first, and reaches the kernel after.
        urgent = asyncio.create_task(ex.start("hold", {"gate": "b"}, priority=10))
        await asyncio.sleep(0.05)
        gates.open("a")
        await ex.wait(first.execution_id, timeout=10)
        # The slot is free and the kernel's queue empty, but the urgent start is still being
        # logged: a later start must not take the slot at once.
        later = await ex.start("hold", {"gate": "c"}, priority=0)
        assert (await urgent).status is StartStatus.GRANTED
        assert later.status is StartStatus.QUEUED
        gates.open("b")
        gates.open("c")


async def test_a_start_held_back_by_another_process_is_retried_on_the_poll_not_in_a_loop(
    database_url: str,
) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1), slot_poll_interval=0.1)
    async with app.running(), slot_held_elsewhere(database_url) as free:
        ex = app.executions
        assert app.store is not None
        start = await ex.start("hold", {"gate": "x"})
        assert start.status is StartStatus.QUEUED  # fits here; the ledger says FULL
        tries = 0
        real = app.store.grant_starts

        async def counted(requests: Any, *, now: float) -> Any:
            nonlocal tries
            tries += 1
            return await real(requests, now=now)

        app.store.grant_starts = counted  # type: ignore[method-assign]
        await asyncio.sleep(1.0)
        # One try per backup poll (10 in a second), not one per turn of the loop.
        assert 3 <= tries <= 15
        await free()
        granted = await ex.wait_granted(start.start_id, timeout=10)
        assert granted.status is StartStatus.GRANTED
        gates.open("x")


async def test_a_grant_whose_answer_is_lost_after_its_commit_runs_and_frees_its_slot(
    database_url: str,
) -> None:
    app = echo_app(database_url, limits=Limits(max_running=1))
    async with app.running():
        store = app.store
        assert store is not None
        real = store.grant_starts

        async def answer_lost(requests: Any, *, now: float) -> Any:
            store.grant_starts = real  # type: ignore[method-assign]
            await real(requests, now=now)  # committed
            raise StoreUnavailable("the connection closed while committing")

        store.grant_starts = answer_lost  # type: ignore[method-assign]
        start = await app.executions.start("echo", 5)
        assert start.status is StartStatus.GRANTED and start.execution_id is not None
        done = await app.executions.wait(start.execution_id, timeout=10)
        assert done.status is ExecutionStatus.SUCCEEDED and done.output == 5
        # Its slot was given back: the next start fits (max_running=1).
        again = await app.executions.start("echo", 6)
        assert again.status is StartStatus.GRANTED
        assert again.execution_id is not None
        await app.executions.wait(again.execution_id, timeout=10)
        assert await store.ledger() == {}


async def test_a_grant_batch_that_failed_before_its_commit_still_fails(
    database_url: str,
) -> None:
    app = echo_app(database_url)
    async with app.running():
        store = app.store
        assert store is not None
        real = store.grant_starts

        async def fails(requests: Any, *, now: float) -> Any:
            store.grant_starts = real  # type: ignore[method-assign]
            raise StoreUnavailable("the database is down")

        store.grant_starts = fails  # type: ignore[method-assign]
        with pytest.raises(StoreUnavailable):
            await app.executions.start("echo", 5)
        assert app.executions.kernel.running == 0
        assert await store.ledger() == {}
        assert await store.list_executions() == []


async def test_an_end_recorded_while_the_store_is_down_is_recorded_when_it_returns(
    database_url: str,
) -> None:
    app = echo_app(database_url, limits=Limits(max_running=1))
    async with app.running():
        store = app.store
        assert store is not None
        real = store.finish_executions
        down_until = asyncio.get_running_loop().time() + 1.5  # longer than a few retries

        async def down_for_a_while(finishes: Any, *, now: float) -> Any:
            if asyncio.get_running_loop().time() < down_until:
                raise StoreUnavailable("the database is down")
            return await real(finishes, now=now)

        store.finish_executions = down_for_a_while  # type: ignore[method-assign]
        start = await app.executions.start("echo", 5)
        assert start.execution_id is not None
        done = await app.executions.wait(start.execution_id, timeout=10)
        assert done.status is ExecutionStatus.SUCCEEDED and done.output == 5
        assert await store.ledger() == {}
