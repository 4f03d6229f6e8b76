"""Completions that end in bursts share a statement, on every `ActorStore`: while rows are still
held (calls running or queued), a small batch waits for more (`complete_gather` rows, at most
`complete_linger` seconds); the last call to end writes at once. This is how results that come
back from an executor one frame at a time are written in as few statements as a saturated
worker's. Statements are counted on the real store's `complete`."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

from tests.actors.conftest import MakeRuntime
from yoke.actors import ActorCtx, DrainConfig, Event, QueueDrainScheduler
from yoke.actors.protocol import ActorStore
from yoke.actors.runtime import ActorRuntime
from yoke.clock import SystemClock
from yoke.store.actor_records import Completion, NewEvent, Target


def count_statements(store: ActorStore) -> list[int]:
    """The size of each `complete` statement the store runs from now on."""
    sizes: list[int] = []
    complete = store.complete

    async def counted(worker_id: str, done: Sequence[Completion]) -> list[int]:
        sizes.append(len(done))
        return await complete(worker_id, done)

    store.complete = counted  # type: ignore[method-assign]
    return sizes


@asynccontextmanager
async def draining(
    store: ActorStore, rt: ActorRuntime, config: DrainConfig, bursts: list[int]
) -> AsyncIterator[QueueDrainScheduler]:
    """Append `bursts[i]` events of burst i (each to its own instance), then run a drain."""
    rt.attach(store)
    drain = QueueDrainScheduler(
        store=store,
        registry=rt.registry,
        host=rt,
        worker_id="w1",
        clock=SystemClock(),
        config=config,
    )
    events = [
        NewEvent(
            tenant="t",
            stream="s",
            data=f'{{"burst": {b}}}',
            targets=(Target(actor="a", instance_id=f"{b}-{i}", group_id=""),),
        )
        for b, n in enumerate(bursts)
        for i in range(n)
    ]
    await store.append_events(events, owner="w1", now=rt.wall())
    task = asyncio.create_task(drain.run())
    try:
        yield drain
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def until(check: Callable[[], bool], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the condition was not met in time"
        await asyncio.sleep(0.005)


def gated(rt: ActorRuntime) -> list[asyncio.Event]:
    """Actor `a`, whose call for an event of burst b ends once gate b is set."""
    gates = [asyncio.Event() for _ in range(4)]

    @rt.actor(subscribe=["s"], key="k")
    async def a(ctx: ActorCtx, event: Event) -> None:
        await gates[event.data["burst"]].wait()

    return gates


async def test_bursts_that_end_while_rows_are_held_share_one_statement(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    rt = make_runtime()
    gates = gated(rt)
    sizes = count_statements(actor_store)
    config = DrainConfig(complete_linger=30.0)  # only the end of the work writes here
    # Bursts 0-2 end one after another; burst 3 (one call) runs until the end.
    async with draining(actor_store, rt, config, [10, 10, 10, 1]) as drain:
        await until(lambda: drain.stats().running == 31)
        for b in range(3):
            gates[b].set()
            await until(lambda b=b: drain.stats().processed == 10 * (b + 1))  # type: ignore[misc]
            # The writer had turns of the loop to write this burst alone; it waited instead.
            await asyncio.sleep(0.05)
            assert drain.stats().completing == 10 * (b + 1)
            assert sizes == []
        gates[3].set()  # the last held row ends: everything is written, in one statement
        await until(lambda: drain.stats().completing == 0)
        assert sizes == [31]
    assert await actor_store.claim_next("w1", limit=100, now=rt.wall() + 60) == []


async def test_an_idle_drain_writes_its_completions_at_once(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    rt = make_runtime()
    gates = gated(rt)
    for gate in gates:
        gate.set()
    sizes = count_statements(actor_store)
    config = DrainConfig(complete_linger=30.0)
    async with draining(actor_store, rt, config, [3]) as drain:
        # Written well before the linger ends: nothing else is held.
        await until(lambda: sum(sizes) == 3, seconds=10.0)
        assert drain.stats().completing == 0


async def test_a_batch_waits_no_longer_than_the_linger(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    rt = make_runtime()
    gates = gated(rt)
    sizes = count_statements(actor_store)
    config = DrainConfig(complete_linger=0.05)
    async with draining(actor_store, rt, config, [5, 1]) as drain:
        gates[0].set()  # burst 1 keeps running: rows are held throughout
        await until(lambda: sum(sizes) == 5, seconds=10.0)
        assert drain.stats().running == 1
        gates[1].set()
        await until(lambda: sum(sizes) == 6)
