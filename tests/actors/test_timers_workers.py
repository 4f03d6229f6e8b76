"""Timing logic with a fake clock: timer dispatch, heartbeats, takeover and fencing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Sequence

import pytest

from tests.actors.conftest import MakeRuntime, wait_for
from yoke.actors import ActorCtx, ActorRegistry, Event, Fenced, TimerDispatch, WorkerHeartbeat
from yoke.actors.ctx import InstanceStateCell
from yoke.actors.protocol import ActorStore
from yoke.actors.timers import TimerStats, next_sleep
from yoke.clock import ManualClock, SystemClock
from yoke.errors import StoreUnavailable
from yoke.store.actor_records import Completion, InstanceRef, NewEvent, NewTimer, Owner, Target
from yoke.testing.memstore import MemoryActorStore


def test_next_sleep() -> None:
    assert next_sleep(100.0, None, 10.0) == 10.0
    assert next_sleep(100.0, 100_250, 10.0) == 0.25
    assert next_sleep(100.0, 99_000, 10.0) == 0.0
    assert next_sleep(100.0, 900_000, 10.0) == 10.0


async def _noop(ctx: ActorCtx, event: Event) -> None:
    return None


async def test_timers_fire_once_when_due(actor_store: ActorStore) -> None:
    clock = ManualClock(wall_offset=1_700_000_000.0 + 1e6)
    store = actor_store
    reg = ActorRegistry()
    reg.actor("remind", subscribe=["carts"], key="cart_id")(_noop)
    fired: list[int] = []
    t = TimerDispatch(
        store=store,
        registry=reg,
        clock=clock,
        owner=lambda: "w1",
        on_fired=lambda: fired.append(1),
        poll_interval=10.0,
    )
    now_ms = round(clock.wall() * 1000)
    await store.schedule(
        [
            NewTimer(tenant="t", stream="carts", data=json.dumps({"cart_id": c}), fire_at_ms=ms)
            for c, ms in ((1, now_ms + 5000), (2, now_ms + 2000))
        ],
        now=clock.wall(),
    )
    assert await t.fire_due() == 2.0  # sleeps until the earliest timer
    assert await store.list_instances("remind") == []
    clock.advance(2.0)
    assert await t.fire_due() == 3.0
    assert [i.instance_id for i in await store.list_instances("remind")] == ["2"]
    clock.advance(3.0)
    assert await t.fire_due() == 10.0  # nothing left: the backup poll
    infos = await store.list_instances("remind")
    assert [(i.instance_id, i.pending) for i in infos] == [("1", 1), ("2", 1)]
    clock.advance(100.0)
    await t.fire_due()
    assert t.fired == 2 and len(fired) == 2
    assert sum(i.pending for i in await store.list_instances("remind")) == 2
    # Fired events' new instances belong to the firing worker.
    assert {i.worker_id for i in infos} == {"w1"}


async def test_timers_are_read_ahead_and_fired_in_one_call_each() -> None:
    clock = ManualClock(wall_offset=1_700_000_000.0)
    store = MemoryActorStore()
    reg = ActorRegistry()
    reg.actor("remind", subscribe=["carts"], key="cart_id")(_noop)
    t = TimerDispatch(
        store=store,
        registry=reg,
        clock=clock,
        owner=lambda: "w1",
        on_fired=lambda: None,
        poll_interval=10.0,
    )
    now_ms = round(clock.wall() * 1000)
    await store.schedule(
        [
            NewTimer(tenant="t", stream="carts", data=json.dumps({"cart_id": c}), fire_at_ms=ms)
            for c, ms in ((1, now_ms + 125), (2, now_ms + 125), (3, now_ms + 375))
        ],
        now=clock.wall(),
    )
    # (Times in binary fractions of a second: exact in floats, as the clock's are not.)
    assert t.stats() == TimerStats(fired=0, held=0, reads=0, waiting=False)
    assert await t.fire_due() == 0.125
    assert store.calls == {"upcoming_timers": 1}
    assert t.stats() == TimerStats(fired=0, held=3, reads=1, waiting=False)
    clock.advance(0.125)
    assert await t.fire_due() == 0.25
    # The two timers due at the same ms went in one call; nothing was read again.
    assert store.calls == {"upcoming_timers": 1, "fire_timers": 1, "append_events": 1}
    # A timer scheduled meanwhile (it may come first) makes the next look read again.
    await store.schedule(
        [NewTimer(tenant="t", stream="carts", data='{"cart_id": 4}', fire_at_ms=now_ms + 250)],
        now=clock.wall(),
    )
    t.wake()
    assert await t.fire_due() == 0.125
    assert store.calls["upcoming_timers"] == 2
    clock.advance(0.25)
    assert await t.fire_due() == 10.0  # 4 and 3 fired, nothing left: the backup poll
    assert t.fired == 4 and await store.next_fire_at_ms() is None
    assert t.stats() == TimerStats(fired=4, held=0, reads=3, waiting=False)


async def test_a_timer_fired_elsewhere_is_skipped_and_a_failed_fire_read_again() -> None:
    clock = ManualClock(wall_offset=1_700_000_000.0)

    class Failing(MemoryActorStore):
        fail = 0

        async def fire_timers(
            self, fire: Sequence[tuple[int, NewEvent]], *, owner: Owner, now: float
        ) -> list[int]:
            if self.fail:
                self.fail -= 1
                raise StoreUnavailable("simulated")
            return await super().fire_timers(fire, owner=owner, now=now)

    store = Failing()
    reg = ActorRegistry()
    reg.actor("remind", subscribe=["carts"], key="cart_id")(_noop)
    t = TimerDispatch(
        store=store, registry=reg, clock=clock, owner=lambda: "w1", on_fired=lambda: None
    )
    at = round(clock.wall() * 1000) + 125

    def timer(cart: int) -> NewTimer:
        return NewTimer(
            tenant="t", stream="carts", data=json.dumps({"cart_id": cart}), fire_at_ms=at
        )

    first, _ = await store.schedule([timer(1), timer(2)], now=clock.wall())
    assert await t.fire_due() == 0.125  # both held here now
    # Before they are due, another worker fires the first one.
    route = (Target(actor="remind", instance_id="1", group_id=""),)
    event = NewEvent(tenant="t", stream="carts", data='{"cart_id": 1}', targets=route)
    assert await store.fire_timers([(first, event)], owner="w2", now=clock.wall()) == [first]
    clock.advance(0.125)
    await t.fire_due()
    assert t.fired == 1  # only the second: the first was skipped, not fired twice
    infos = await store.list_instances("remind")
    assert [(i.instance_id, i.pending, i.worker_id) for i in infos] == [
        ("1", 1, "w2"),
        ("2", 1, "w1"),
    ]
    # A failed fire leaves its timers in the table and the next look reads them again.
    await store.schedule([timer(3)], now=clock.wall())
    t.wake()
    store.fail = 1
    with pytest.raises(StoreUnavailable):
        await t.fire_due()
    reads = store.calls["upcoming_timers"]
    await t.fire_due()
    assert t.fired == 2 and store.calls["upcoming_timers"] == reads + 2  # again, then empty
    assert await store.next_fire_at_ms() is None


async def test_a_running_dispatch_reads_the_next_page_ahead() -> None:
    store = MemoryActorStore()
    reg = ActorRegistry()
    reg.actor("remind", subscribe=["carts"], key="cart_id")(_noop)
    all_fired = asyncio.Event()
    t: TimerDispatch | None = None

    def on_fired() -> None:
        assert t is not None
        if t.fired == 24:
            all_fired.set()

    t = TimerDispatch(
        store=store,
        registry=reg,
        clock=SystemClock(),
        owner=lambda: "w1",
        on_fired=on_fired,
        batch_size=4,
    )
    start = round(time.time() * 1000) + 50
    await store.schedule(
        [
            NewTimer(tenant="t", stream="carts", data=json.dumps({"cart_id": i}), fire_at_ms=ms)
            for i, ms in enumerate(start + 10 * (i // 2) for i in range(24))
        ],
        now=time.time(),
    )
    task = asyncio.create_task(t.run())
    try:
        await wait_for(all_fired)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    # Pages after the first were read ahead while timers fired, each fired once and in order.
    assert store.calls["upcoming_timers_after"] >= 1
    claims = await store.claim_next("w1", limit=100, now=time.time() + 1)
    assert [json.loads(c.data)["cart_id"] for c in claims] == list(range(24))
    assert await store.next_fire_at_ms() is None


async def test_heartbeat_takeover_and_fencing(actor_store: ActorStore) -> None:
    clock = ManualClock()
    store = actor_store
    woke: list[str] = []
    a = WorkerHeartbeat(
        store=store,
        worker_id="A",
        clock=clock,
        heartbeat_interval=15,
        stale_after=60,
        on_takeover=lambda: woke.append("A"),
    )
    b = WorkerHeartbeat(
        store=store,
        worker_id="B",
        clock=clock,
        heartbeat_interval=15,
        stale_after=60,
        on_takeover=lambda: woke.append("B"),
    )
    await a.boot()
    target = (Target(actor="x", instance_id="i1", group_id=""),)
    await store.append_events(
        [NewEvent(tenant="t", stream="s", data="{}", targets=target)], owner="A", now=clock.wall()
    )
    (claim,) = await store.claim_next("A", limit=10, now=clock.wall())
    await b.boot()
    assert (await b.tick()).instances == 0  # A is alive: nothing to take
    clock.advance(30)
    await a.tick()
    clock.advance(45)  # A last beat 45 s ago: not stale yet
    assert (await b.tick()).instances == 0
    clock.advance(16)  # now 61 s: stale
    got = await b.tick()
    assert got.instances == 1 and got.requeued == 1 and woke == ["B"]
    # A's late completion is refused; B claims the event again under the new epoch.
    done = Completion(queue_id=claim.queue_id, epoch=claim.epoch)
    assert await store.complete("A", [done]) == []
    assert not await store.requeue("A", done, available_at=0, error=None)
    (again,) = await store.claim_next("B", limit=10, now=clock.wall())
    assert again.queue_id == claim.queue_id and again.epoch == claim.epoch + 1
    assert await store.claim_next("A", limit=10, now=clock.wall()) == []
    # A's state writes are fenced too.
    cell = InstanceStateCell(
        store,
        InstanceRef(tenant="t", actor="x", instance_id="i1"),
        worker_id="A",
        epoch=claim.epoch,
    )
    try:
        await cell.update(lambda s: {**s, "n": 1})
        raise AssertionError("a fenced update went through")
    except Fenced:
        pass
    assert await store.complete("B", [Completion(queue_id=again.queue_id, epoch=again.epoch)]) == [
        again.queue_id
    ]


async def test_a_heartbeat_forgets_the_workers_long_gone_that_own_nothing(
    actor_store: ActorStore,
) -> None:
    from tests.actors.test_executor_verbs import _row, _spare

    clock, store = ManualClock(), actor_store

    def worker(worker_id: str) -> WorkerHeartbeat:
        return WorkerHeartbeat(
            store=store, worker_id=worker_id, clock=clock, heartbeat_interval=15,
            stale_after=60, forget_after=600, on_takeover=lambda: None,
        )  # fmt: skip

    live, quitter, crashed = worker("live"), worker("quitter"), worker("crashed")
    for w in (live, quitter, crashed):
        await w.boot()
    target = (Target(actor="x", instance_id="i1", group_id=""),)
    await store.append_events(
        [NewEvent(tenant="t", stream="s", data="{}", targets=target)],
        owner="crashed",
        now=clock.wall(),
    )
    await store.executors.record_executors([_row("t", "READY", worker_id="quitter")])
    await store.executors.record_spares([_spare(0, 8, worker_id="quitter")])
    assert await store.tenants.take_tenant_slot("t", "quitter", live_after=0)
    await quitter.stop()  # `crashed` just goes silent, still owning i1
    clock.advance(700)
    assert await store.fleet.worker_heartbeat("live", now=clock.wall())
    # Both gone for 700 s, but `crashed` still owns i1: only `quitter` goes, with its rows.
    assert await store.fleet.forget_workers(before=clock.wall() - 600) == 1
    assert {w.worker_id for w in await store.fleet.list_workers()} == {"live", "crashed"}
    assert await store.executors.list_executors(tenant=None, limit=10) == []
    # The live worker's next beat takes i1 over, then forgets `crashed`, which owns nothing.
    assert (await live.tick()).instances == 1
    assert [w.worker_id for w in await store.fleet.list_workers()] == ["live"]
    # A worker forgotten while it was only frozen registers again at its next beat.
    await crashed.tick()
    assert [w.worker_id for w in await store.fleet.list_workers()] == ["crashed", "live"]


async def test_stopping_a_worker_hands_its_instances_over(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    first = make_runtime("first", shutdown_timeout=0.05)  # don't wait for the stuck call
    second = make_runtime("second")
    seen: list[str] = []
    done = asyncio.Event()
    gate = asyncio.Event()
    stuck = asyncio.Event()

    for rt in (first, second):

        @rt.actor("a", subscribe=["s"], key="k")
        async def a(ctx: ActorCtx, event: Event, rt_id: str = rt.worker_id) -> None:
            if rt_id == "first":
                stuck.set()
                await gate.wait()  # never finishes in the first worker
            seen.append(rt_id)
            done.set()

    async with first.running(actor_store):
        await first.append("s", {"k": "one"})
        await wait_for(stuck)
    async with second.running(actor_store):
        await wait_for(done)
    assert seen == ["second"]


async def test_an_error_in_the_block_comes_back_as_itself(make_runtime: MakeRuntime) -> None:
    rt = make_runtime()

    class Boom(Exception):
        pass

    with pytest.raises(Boom, match="mine"):
        async with rt.running(MemoryActorStore()):
            raise Boom("mine")
    assert rt.drain is None
