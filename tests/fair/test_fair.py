"""yoke.fair: the fair-scheduler specification's six tests, plus errors, cancellation races and
live changes."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
from collections.abc import Callable, Coroutine, Hashable
from typing import Any

import pytest

from yoke.errors import BadType, BadValue, YokeError
from yoke.fair import (
    KernelScheduler,
    Scheduler,
    UnlimitedScheduler,
    create_fair_scheduler,
    create_scheduler,
)


async def settle() -> None:
    """Let every ready task run until all of them are blocked again."""
    for _ in range(5):
        await asyncio.sleep(0)


class Gate:
    """Holds the scheduler's slots so that later tasks queue, and records the start order."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.release = asyncio.Event()

    def task(self, label: str, *, hold: bool = False) -> Callable[[], Coroutine[Any, Any, str]]:
        async def run() -> str:
            self.order.append(label)
            if hold:
                await self.release.wait()
            return label

        return run


# --- the specification's test 1: the unlimited path -----------------------------------------------


async def test_unlimited_path_runs_at_once_with_zero_counts() -> None:
    calls: list[int] = []

    async def work() -> int:
        calls.append(1)
        return 7

    for sched in (create_scheduler(), create_fair_scheduler(weights={"gold": 2})):
        assert isinstance(sched, UnlimitedScheduler)
        assert not hasattr(sched, "_kernel")
        calls.clear()

        awaitable = sched.schedule(work, tenant="acme", priority=3)
        # schedule() is a plain call that hands back fn()'s own coroutine: nothing in between.
        assert asyncio.iscoroutine(awaitable)
        assert await awaitable == 7
        assert calls == [1]
        assert (sched.running, sched.queued) == (0, 0)
        stats = sched.stats()
        assert (stats.running, stats.queued, dict(stats.tenants)) == (0, 0, {})
        assert stats.concurrency == math.inf


async def test_unlimited_scheduler_refuses_a_cap_it_could_not_hold() -> None:
    sched = create_fair_scheduler()
    sched.set_concurrency(math.inf)
    with pytest.raises(BadValue, match="keeps no counts"):
        sched.set_concurrency(4)


# --- the specification's test 2: B is served before A drains, not drain-A-then-B ------------------


@pytest.mark.parametrize("policy", ["sfq", "rotation"])
async def test_tenant_b_is_served_before_a_drains(policy: str) -> None:
    sched = create_fair_scheduler(1, policy=policy)
    gate = Gate()
    first = asyncio.create_task(sched.schedule(gate.task("A0", hold=True), tenant="A"))
    await settle()
    rest = [
        asyncio.create_task(sched.schedule(gate.task(f"A{i}"), tenant="A")) for i in range(1, 6)
    ]
    rest += [asyncio.create_task(sched.schedule(gate.task(f"B{i}"), tenant="B")) for i in range(5)]
    await settle()
    assert sched.queued == 10
    gate.release.set()
    await asyncio.gather(first, *rest)
    tenants = "".join(label[0] for label in gate.order)
    assert tenants != "A" * 6 + "B" * 5
    assert tenants.index("B") <= 2
    # While B is backlogged, A never gets two turns in a row (equal weights).
    last_b = tenants.rindex("B")
    assert "AA" not in tenants[1 : last_b + 1]


async def test_least_running_serves_the_tenant_with_fewest_running() -> None:
    # least_running equalises running counts, not turns (with instant tasks it is FIFO, as
    # KERNEL.md 2.9 says), so the test holds tasks open: the freed slot goes to B, whose older
    # rival A2 belongs to a tenant that still has a task running.
    sched = create_fair_scheduler(2, policy="least_running")
    order: list[str] = []
    events = {name: asyncio.Event() for name in ("A0", "A1", "A2", "A3", "B0")}

    def held(name: str) -> Callable[[], Coroutine[Any, Any, None]]:
        async def run() -> None:
            order.append(name)
            await events[name].wait()

        return run

    tasks = [
        asyncio.create_task(sched.schedule(held(n), tenant=n[0])) for n in ("A0", "A1", "A2", "A3")
    ]
    await settle()
    tasks.append(asyncio.create_task(sched.schedule(held("B0"), tenant="B")))
    await settle()
    assert order == ["A0", "A1"]
    events["A0"].set()
    await settle()
    assert order == ["A0", "A1", "B0"]
    for event in events.values():
        event.set()
    await asyncio.gather(*tasks)
    assert order == ["A0", "A1", "B0", "A2", "A3"]


async def test_fifo_scheduler_is_tenant_blind() -> None:
    sched = create_scheduler(1)
    gate = Gate()
    first = asyncio.create_task(sched.schedule(gate.task("A0", hold=True), tenant="A"))
    await settle()
    labels = [("A", f"A{i}") for i in range(1, 4)] + [("B", f"B{i}") for i in range(3)]
    rest = [asyncio.create_task(sched.schedule(gate.task(lb), tenant=t)) for t, lb in labels]
    await settle()
    gate.release.set()
    await asyncio.gather(first, *rest)
    assert gate.order == ["A0", "A1", "A2", "A3", "B0", "B1", "B2"]


# --- the specification's test 3: a higher-weight tenant finishes first ----------------------------


@pytest.mark.parametrize("policy", ["sfq", "rotation"])
async def test_higher_weight_tenant_finishes_first(policy: str) -> None:
    sched = create_fair_scheduler(1, weights={"gold": 3}, policy=policy)
    gate = Gate()
    first = asyncio.create_task(sched.schedule(gate.task("x", hold=True), tenant="x"))
    await settle()
    tasks = []
    for _ in range(12):
        for tenant in ("std", "gold"):
            tasks.append(asyncio.create_task(sched.schedule(gate.task(tenant), tenant=tenant)))
    await settle()
    gate.release.set()
    await asyncio.gather(first, *tasks)
    order = gate.order[1:]
    last_gold = len(order) - 1 - order[::-1].index("gold")
    last_std = len(order) - 1 - order[::-1].index("std")
    assert last_gold < last_std
    # Weights 3:1 mean gold got about three turns per standard turn while both were queued.
    assert order[: last_gold + 1].count("std") <= 12 // 3 + 1


# --- the specification's test 4: within a tenant, by priority -------------------------------------


@pytest.mark.parametrize("factory", [create_scheduler, create_fair_scheduler])
async def test_within_a_tenant_queued_tasks_come_out_by_priority(
    factory: Callable[[float], Scheduler],
) -> None:
    sched = factory(1)
    gate = Gate()
    first = asyncio.create_task(sched.schedule(gate.task("hold", hold=True), tenant="t"))
    await settle()
    prios = [0, 5, 1, 5, 3, 0]
    tasks = [
        asyncio.create_task(sched.schedule(gate.task(f"p{p}#{i}"), tenant="t", priority=p))
        for i, p in enumerate(prios)
    ]
    await settle()
    gate.release.set()
    await asyncio.gather(first, *tasks)
    assert gate.order == ["hold", "p5#1", "p5#3", "p3#4", "p1#2", "p0#0", "p0#5"]


# --- the specification's test 5: cancelled while queued never runs --------------------------------


@pytest.mark.parametrize("factory", [create_scheduler, create_fair_scheduler])
async def test_task_cancelled_while_queued_never_runs(
    factory: Callable[[float], Scheduler],
) -> None:
    sched = factory(1)
    gate = Gate()
    first = asyncio.create_task(sched.schedule(gate.task("hold", hold=True), tenant="a"))
    await settle()
    doomed = asyncio.create_task(sched.schedule(gate.task("doomed"), tenant="b"))
    kept = asyncio.create_task(sched.schedule(gate.task("kept"), tenant="b"))
    await settle()
    assert (sched.running, sched.queued) == (1, 2)
    doomed.cancel()
    await asyncio.sleep(0)
    assert (sched.running, sched.queued) == (1, 1)  # removed at once, no slot taken
    gate.release.set()
    await asyncio.gather(first, kept)
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert gate.order == ["hold", "kept"]
    assert (sched.running, sched.queued) == (0, 0)
    assert sched.stats().tenants["b"].started == 1


async def test_cancelled_after_being_chosen_passes_the_slot_on() -> None:
    sched = create_fair_scheduler(1)
    gate = Gate()
    first = asyncio.create_task(sched.schedule(gate.task("hold", hold=True), tenant="a"))
    await settle()
    chosen = asyncio.create_task(sched.schedule(gate.task("chosen"), tenant="b"))
    after = asyncio.create_task(sched.schedule(gate.task("after", hold=True), tenant="c"))
    await settle()
    sched.set_concurrency(2)  # picks `chosen` synchronously...
    chosen.cancel()  # ...and its caller is cancelled before it could start
    await settle()
    assert gate.order == ["hold", "after"]
    assert (sched.running, sched.queued) == (2, 0)
    gate.release.set()
    await asyncio.gather(first, after)
    with pytest.raises(asyncio.CancelledError):
        await chosen
    assert (sched.running, sched.queued) == (0, 0)


# --- exceptions, bad arguments ---------------------------------------------------------------


@pytest.mark.parametrize("factory", [create_scheduler, create_fair_scheduler])
async def test_an_exception_propagates_and_frees_the_slot(
    factory: Callable[[float], Scheduler],
) -> None:
    sched = factory(1)

    async def boom() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await sched.schedule(boom)
    assert (sched.running, sched.queued) == (0, 0)

    async def fine() -> str:
        return "ok"

    assert await asyncio.wait_for(sched.schedule(fine), 1) == "ok"


@pytest.mark.parametrize("concurrency", [0, -1, math.nan, 2.5])
def test_bad_concurrency_values_are_refused(concurrency: float) -> None:
    for factory in (create_scheduler, create_fair_scheduler):
        with pytest.raises(BadValue, match="concurrency"):
            factory(concurrency)


@pytest.mark.parametrize("concurrency", ["4", None, True])
def test_bad_concurrency_types_are_refused(concurrency: object) -> None:
    for factory in (create_scheduler, create_fair_scheduler):
        with pytest.raises(TypeError, match="concurrency"):
            factory(concurrency)  # type: ignore[arg-type]


def test_bad_factory_arguments_are_refused() -> None:
    with pytest.raises(BadValue, match="weight"):
        create_fair_scheduler(2, weights={"a": 0})
    with pytest.raises(BadType, match="weight"):
        create_fair_scheduler(2, weights={"a": "heavy"})  # type: ignore[dict-item]
    with pytest.raises(BadValue, match="policy"):
        create_fair_scheduler(2, policy="random")
    with pytest.raises(BadValue, match="credit"):
        create_fair_scheduler(2, credit=-1)


@pytest.mark.parametrize("concurrency", [math.inf, 2])
async def test_bad_schedule_arguments_are_refused_at_the_call(concurrency: float) -> None:
    sched = create_fair_scheduler(concurrency)

    async def work() -> None:
        return None

    async def call(**kwargs: object) -> None:
        await sched.schedule(work, **kwargs)  # type: ignore[call-overload]

    for priority in (1.5, "1", True, None):
        with pytest.raises(TypeError, match="priority must be an int"):
            await call(priority=priority)
    for weight, error in ((0, ValueError), (-2.0, ValueError), (math.inf, ValueError)):
        with pytest.raises(error, match="weight"):
            await call(weight=weight)
    with pytest.raises(TypeError, match="weight"):
        await call(weight="3")
    coro = work()
    with pytest.raises(TypeError, match="not a coroutine object"):
        await sched.schedule(coro)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="zero-argument callable"):
        await sched.schedule(42)  # type: ignore[call-overload]
    with pytest.raises(BadValue):
        sched.set_weight("t", 0)
    assert (sched.running, sched.queued) == (0, 0)
    assert all(issubclass(e, YokeError) for e in (BadType, BadValue))


# --- live changes ----------------------------------------------------------------------------


async def test_set_weight_takes_effect_while_running() -> None:
    sched = create_fair_scheduler(1, credit=0)
    gate = Gate()
    first = asyncio.create_task(sched.schedule(gate.task("x", hold=True), tenant="x"))
    await settle()
    tasks = [
        asyncio.create_task(sched.schedule(gate.task(t), tenant=t))
        for _ in range(20)
        for t in ("a", "b")
    ]
    await settle()
    sched.set_weight("a", 4)
    assert sched.stats().tenants["a"].weight == 4
    gate.release.set()
    await asyncio.gather(first, *tasks)
    window = gate.order[1:21]
    assert window.count("a") >= 14  # 4:1 over 20 turns is 16:4, within one turn of the bound


async def test_set_concurrency_takes_effect_while_running() -> None:
    sched = create_fair_scheduler(1)
    assert isinstance(sched, KernelScheduler)
    gate = Gate()
    tasks = [
        asyncio.create_task(sched.schedule(gate.task(f"t{i}", hold=True), tenant=f"t{i % 3}"))
        for i in range(6)
    ]
    await settle()
    assert (sched.running, sched.queued) == (1, 5)
    sched.set_concurrency(3)
    await settle()
    assert (sched.running, sched.queued) == (3, 3)
    sched.set_concurrency(1)  # never preempts: the three keep running, nothing new starts
    await settle()
    assert (sched.running, sched.queued) == (3, 3)
    assert len(gate.order) == 3
    gate.release.set()
    await asyncio.gather(*tasks)
    assert (sched.running, sched.queued) == (0, 0)
    assert sched.concurrency == 1


async def test_stats_are_frozen_and_per_tenant() -> None:
    sched = create_fair_scheduler(2, weights={"gold": 2})
    gate = Gate()
    tasks = [
        asyncio.create_task(sched.schedule(gate.task(t, hold=True), tenant=t))
        for t in ("gold", "gold", "std")
    ]
    await settle()
    stats = sched.stats()
    assert (stats.running, stats.queued) == (2, 1)
    assert stats.tenants["gold"].weight == 2
    assert sum(t.running for t in stats.tenants.values()) == 2
    assert sum(t.queued for t in stats.tenants.values()) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.running = 5  # type: ignore[misc]
    assert "running=2" in repr(sched) and "queued=1" in repr(sched)
    gate.release.set()
    await asyncio.gather(*tasks)
    after = sched.stats()
    assert after.tenants["gold"].started == 2 and after.tenants["std"].started == 1


# --- races that count ------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["sfq", "rotation", "least_running", "fifo"])
async def test_the_cap_holds_under_a_race_with_cancellations(policy: str) -> None:
    rng = random.Random(4)
    cap = 5
    sched = create_fair_scheduler(cap, policy=policy)
    in_flight = 0
    peak = 0
    ran: list[int] = []
    began: list[int] = []

    def job(i: int) -> Callable[[], Coroutine[Any, Any, int]]:
        async def run() -> int:
            nonlocal in_flight, peak
            began.append(i)
            in_flight += 1
            peak = max(peak, in_flight)
            try:
                assert sched.running <= cap
                for _ in range(rng.randrange(3)):
                    await asyncio.sleep(0)
            finally:
                in_flight -= 1
            ran.append(i)
            return i

        return run

    tenants: list[Hashable] = [f"t{i}" for i in range(17)]
    tasks = [
        asyncio.create_task(
            sched.schedule(job(i), tenant=rng.choice(tenants), priority=rng.randrange(3))
        )
        for i in range(600)
    ]
    cancelled = set()
    for _ in range(40):
        await asyncio.sleep(0)
        victim = rng.randrange(len(tasks))
        if tasks[victim].cancel():
            cancelled.add(victim)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert peak == cap
    finished = {r for r in results if isinstance(r, int)}
    assert finished == set(ran)
    assert len(finished) + sum(isinstance(r, asyncio.CancelledError) for r in results) == 600
    assert (sched.running, sched.queued) == (0, 0)
    assert sum(t.started for t in sched.stats().tenants.values()) == len(began)
