"""Edges of the drain: losing an instance mid-process(), a store that fails to load state,
the bound on instances kept in memory, and custom mode's window and lost races."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence

from tests.actors.conftest import MakeRuntime, wait_for
from yoke.actors import ActorCtx, DrainConfig, Event, Fenced, Queue, QueueDrainScheduler
from yoke.actors.runtime import ActorRuntime
from yoke.clock import SystemClock
from yoke.errors import StoreUnavailable
from yoke.store.actor_records import ClaimedEvent, InstanceRef, InstanceState, NewEvent, Target
from yoke.testing.memstore import MemoryActorStore


async def test_a_worker_that_lost_its_instance_changes_nothing(
    make_runtime: MakeRuntime,
) -> None:
    store = MemoryActorStore()
    rt = make_runtime()
    fenced = asyncio.Event()

    @rt.actor(subscribe=["s"], key="k")
    async def a(ctx: ActorCtx, event: Event) -> None:
        # Another worker takes the instance over while this call runs (w1 looks stale to it).
        await store.register_worker("w2", hostname="h", pid=2, now=rt.wall())
        await store.claim_orphans("w2", stale_before=rt.wall() + 3600, now=rt.wall())
        try:
            await ctx.state.update(lambda s: {**s, "n": 1})
        except Fenced:
            fenced.set()
            raise

    async with rt.running(store):
        await rt.append("s", {"k": "x"})
        await wait_for(fenced)
        drain = rt.drain
        assert drain is not None
        await drain.flush()
        assert drain.stats().fenced >= 1
    # The state was not written, and the event is the new owner's to process.
    st = await store.get_state(InstanceRef(tenant="default", actor="a", instance_id="x"))
    assert st is not None and st.state == "{}" and st.worker_id == "w2"
    (again,) = await store.claim_next("w2", limit=5, now=rt.wall())
    assert json.loads(again.data) == {"k": "x"} and again.attempts == 0


class SlowToLoad(MemoryActorStore):
    """The batched read of new instances' states fails, then get_state fails twice with
    StoreUnavailable, then works."""

    failures = 2
    batch_failures = 1

    async def get_states(self, refs: Sequence[InstanceRef]) -> dict[InstanceRef, InstanceState]:
        if self.batch_failures:
            self.batch_failures -= 1
            raise StoreUnavailable("simulated")
        return await super().get_states(refs)

    async def get_state(self, ref: InstanceRef) -> InstanceState | None:
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("simulated")
        return await super().get_state(ref)


async def test_state_that_cannot_load_is_retried_without_an_attempt(
    make_runtime: MakeRuntime,
) -> None:
    store = SlowToLoad()
    rt = make_runtime()
    seen: list[int] = []
    done = asyncio.Event()

    @rt.actor(subscribe=["s"], key="k")
    async def a(ctx: ActorCtx, event: Event) -> None:
        seen.append(event.attempt)
        done.set()

    async with rt.running(store):
        await rt.append("s", {"k": "x"})
        await wait_for(done)
        stats = rt.drain_stats()
        assert stats is not None and stats.errors == 0
    assert seen == [1] and store.failures == 0 and store.batch_failures == 0


async def test_the_states_of_new_instances_are_read_in_one_call(
    make_runtime: MakeRuntime,
) -> None:
    store = MemoryActorStore()
    rt = make_runtime()
    count = 0
    done = asyncio.Event()

    @rt.actor(subscribe=["s"], key="k")
    async def a(ctx: ActorCtx, event: Event) -> None:
        nonlocal count
        await ctx.state.update(lambda s: {**s, "n": s.get("n", 0) + 1})
        count += 1
        if count == 50:
            done.set()

    async with rt.running(store):
        await rt.append_many("s", [{"k": i} for i in range(50)])
        await wait_for(done)
    # One read for the 50 instances the claim met, none of their own (a burst of new
    # instances must not queue a read each in the store's pool).
    assert store.calls.get("get_state", 0) == 0 and store.calls["get_states"] >= 1
    for i in range(50):
        st = await store.get_state(InstanceRef(tenant="default", actor="a", instance_id=str(i)))
        assert st is not None and json.loads(st.state) == {"n": 1} and st.version == 1


async def test_resting_instances_are_bounded(make_runtime: MakeRuntime) -> None:
    store = MemoryActorStore()
    rt = make_runtime()
    count = 0
    done = asyncio.Event()

    @rt.actor(subscribe=["s"], key="k")
    async def a(ctx: ActorCtx, event: Event) -> None:
        nonlocal count
        count += 1
        if count == 6:
            done.set()

    rt.attach(store)
    drain = QueueDrainScheduler(
        store=store,
        registry=rt.registry,
        host=rt,
        worker_id="w1",
        clock=SystemClock(),
        config=DrainConfig(idle_instances=2, concurrency=1),
    )
    events = [
        NewEvent(
            tenant="t",
            stream="s",
            data="{}",
            targets=(Target(actor="a", instance_id=str(i), group_id=""),),
        )
        for i in range(6)
    ]
    await store.append_events(events, owner="w1", now=rt.wall())
    task = asyncio.create_task(drain.run())
    try:
        await wait_for(done)
        await drain.flush()
        assert drain.stats().instances <= 3  # two resting, at most one still finishing
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _drain_until(
    rt: ActorRuntime, store: MemoryActorStore, config: DrainConfig, done: asyncio.Event, n: int
) -> None:
    """Append `n` events {"i": 0..n-1} for instance x of actor "a" (owned by w1), then run a
    drain with `config` until `done`."""
    rt.attach(store)
    drain = QueueDrainScheduler(
        store=store,
        registry=rt.registry,
        host=rt,
        worker_id="w1",
        clock=SystemClock(),
        config=config,
    )
    target = (Target(actor="a", instance_id="x", group_id=""),)
    events = [
        NewEvent(tenant="t", stream="s", data=json.dumps({"i": i}), targets=target)
        for i in range(n)
    ]
    await store.append_events(events, owner="w1", now=rt.wall())
    task = asyncio.create_task(drain.run())
    try:
        await wait_for(done)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_custom_select_sees_the_first_events_of_its_window(
    make_runtime: MakeRuntime,
) -> None:
    rt = make_runtime()
    seen: list[list[int]] = []
    order: list[int] = []
    done = asyncio.Event()

    def newest(events: Sequence[Event]) -> Event:
        seen.append([e.data["i"] for e in events])
        return events[-1]

    @rt.actor(subscribe=["s"], key="k", queue=Queue(mode="custom", select=newest))
    async def a(ctx: ActorCtx, event: Event) -> None:
        order.append(event.data["i"])
        if len(order) == 30:
            done.set()

    config = DrainConfig(select_window=10, concurrency=1, prefetch=0, batch_size=4)
    await _drain_until(rt, MemoryActorStore(), config, done, 30)
    # Each pick sees the 10 oldest events left (held here or pending in the store), in
    # arrival order: the newest of those goes first, later ones come into view one by one.
    left = list(range(30))
    for view, chosen in zip(seen, order, strict=True):
        assert view == left[:10]
        left.remove(chosen)
    assert order == [*range(9, 30), *range(8, -1, -1)]


class LosesRaces(MemoryActorStore):
    """`claim_event` loses its first race: the row stays pending, the call claims nothing."""

    raced = 0

    async def claim_event(
        self, worker_id: str, queue_id: int, *, epoch: int
    ) -> ClaimedEvent | None:
        if not self.raced:
            self.raced += 1
            return None
        return await super().claim_event(worker_id, queue_id, epoch=epoch)


async def test_custom_mode_lists_again_after_losing_a_claim(make_runtime: MakeRuntime) -> None:
    rt = make_runtime()
    order: list[int] = []
    done = asyncio.Event()

    @rt.actor(
        subscribe=["s"],
        key="k",
        queue=Queue(mode="custom", select={"order_by": "data.i", "desc": True}),
    )
    async def a(ctx: ActorCtx, event: Event) -> None:
        order.append(event.data["i"])
        if len(order) == 8:
            done.set()

    store = LosesRaces()
    # The first-come claim with no prefetch leaves the rows pending, so the pick claims each
    # (`claim_event`, whose race is under test); the fair claim would hold them all here.
    cfg = DrainConfig(concurrency=1, prefetch=0, batch_size=4, claim="first-come")
    await _drain_until(rt, store, cfg, done, 8)
    assert store.raced == 1 and order == list(range(7, -1, -1))
    assert store.calls["list_pending"] >= 9  # one listing more, for the race lost
