"""A worker that loses an instance and takes it back while it still holds its events.

w1 runs (or holds) an event of instance x; meanwhile another worker takes x over and gives it
up at once (it stops), so w1's heartbeat takes x back under a newer epoch and w1's drain claims
the same row again while its first run is still held. The run under the old epoch is fenced
(its `ctx.state` belongs to the old epoch); the event must still run under the new one, not
stay claimed by w1 for good.
"""

from __future__ import annotations

import asyncio
import json

from tests.actors.conftest import MakeRuntime, wait_for
from yoke.actors import ActorCtx, ActorRuntime, Event, Queue
from yoke.actors.protocol import ActorStore
from yoke.store.actor_records import InstanceInfo, InstanceRef

REF = InstanceRef(tenant="default", actor="a", instance_id="x")


async def _until(store: ActorStore, ok: object, seconds: float = 10.0) -> InstanceInfo:
    """Poll the instance until `ok(info)` holds."""
    async with asyncio.timeout(seconds):
        while True:
            info = await store.get_instance(REF)
            if info is not None and ok(info):  # type: ignore[operator]
                return info
            await asyncio.sleep(0.02)


async def _lose_and_take_back(store: ActorStore, wall: float, epoch: int) -> None:
    """w2 takes x over (w1 looks stale to it) and stops: x is ownerless, and w1's heartbeat
    takes it back; then w1's drain claims its rows again under the newest epoch."""
    await store.fleet.register_worker("w2", hostname="h", pid=2, now=wall)
    await store.fleet.claim_orphans("w2", stale_before=wall + 3600, now=wall)
    await store.fleet.stop_worker("w2", now=wall)
    await _until(store, lambda i: i.worker_id == "w1" and i.epoch >= epoch + 3 and i.pending == 0)


def _fifo_actor(
    rt: ActorRuntime, started: asyncio.Event, release: asyncio.Event
) -> tuple[list[int], list[int]]:
    """A cap-1 FIFO actor whose first call waits for `release`: the events' numbers as their
    calls began, and as they ended with their state written."""
    began: list[int] = []
    seen: list[int] = []

    @rt.actor(subscribe=["s"], key="k", queue=Queue(mode="fifo", concurrency=1))
    async def a(ctx: ActorCtx, event: Event) -> None:
        began.append(event.data["i"])
        if not started.is_set():
            started.set()
            await release.wait()
        await ctx.state.update(lambda s: {**s, "n": s.get("n", 0) + 1})
        seen.append(event.data["i"])

    return began, seen


async def test_a_running_event_claimed_again_under_a_new_epoch_still_runs(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    rt = make_runtime("w1")
    started, release = asyncio.Event(), asyncio.Event()

    @rt.actor(subscribe=["s"], key="k")
    async def a(ctx: ActorCtx, event: Event) -> None:
        if not started.is_set():
            started.set()
            await release.wait()
        await ctx.state.update(lambda s: {**s, "n": s.get("n", 0) + 1})

    async with rt.running(actor_store):
        await rt.append("s", {"k": "x"})
        await wait_for(started)
        first = await _until(actor_store, lambda i: i.in_flight == 1)
        await _lose_and_take_back(actor_store, rt.wall(), first.epoch)
        release.set()  # the old run's state update is fenced
        info = await _until(actor_store, lambda i: i.in_flight == 0 and i.pending == 0)
    assert json.loads(info.state) == {"n": 1}


async def test_a_queued_event_claimed_again_under_a_new_epoch_still_runs(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    """Same, for an event held here but not started (its group's slot is busy) when the batch
    that claims it again also brings a newer event of the instance."""
    rt = make_runtime("w1")
    started, release = asyncio.Event(), asyncio.Event()
    _, seen = _fifo_actor(rt, started, release)

    async with rt.running(actor_store):
        await rt.append_many("s", [{"k": "x", "i": 1}, {"k": "x", "i": 2}])
        await wait_for(started)
        first = await _until(actor_store, lambda i: i.in_flight == 2)
        await rt.append("s", {"k": "x", "i": 3})  # the claim that retakes 1 and 2 brings 3
        await _lose_and_take_back(actor_store, rt.wall(), first.epoch)
        release.set()
        info = await _until(actor_store, lambda i: i.in_flight == 0 and i.pending == 0)
    assert json.loads(info.state) == {"n": 3}
    assert {2, 3} <= set(seen)


async def test_fifo_holds_across_a_re_claim_while_the_oldest_event_runs(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    """The rows of a group claimed again under the newer epoch wait behind the row whose old
    run is still under way (its group slot is the new epoch's now); when that run ends fenced,
    the row runs again first: the group's events run 1, 2, 3, never 2 while 1 runs."""
    rt = make_runtime("w1")
    started, release = asyncio.Event(), asyncio.Event()
    began, seen = _fifo_actor(rt, started, release)

    async with rt.running(actor_store):
        await rt.append_many("s", [{"k": "x", "i": i} for i in (1, 2, 3)])
        await wait_for(started)
        first = await _until(actor_store, lambda i: i.in_flight == 3)
        await _lose_and_take_back(actor_store, rt.wall(), first.epoch)
        await asyncio.sleep(0.3)  # time for a wrong start of 2 beside the old run of 1
        assert began == [1], "an event of the group started while its oldest still ran"
        release.set()  # the old run's state update is fenced: 1 runs again, first
        info = await _until(actor_store, lambda i: i.in_flight == 0 and i.pending == 0)
    assert seen == [1, 2, 3]
    assert json.loads(info.state) == {"n": 3}
