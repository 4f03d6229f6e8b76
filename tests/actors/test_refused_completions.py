"""A worker whose completions the store refuses (its instance was taken over) stops running what
it still holds of that instance: the new owner runs those events, and running them here too
would make their effects (emit, schedule, side effects) twice."""

from __future__ import annotations

import asyncio

from tests.actors.conftest import MakeRuntime, wait_for
from tests.executions.helpers import wait_until
from yoke.actors import ActorCtx, Event
from yoke.actors.protocol import ActorStore
from yoke.store.actor_records import InstanceRef

N = 30


async def test_refused_completions_stop_the_events_held_of_a_lost_instance(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    rt = make_runtime("w1", heartbeat_interval=3600.0, stale_after=7200.0)  # no beat: w1 learns
    ran: list[int] = []  # only from its refused completions
    first = asyncio.Event()
    go_on = asyncio.Event()

    @rt.actor(subscribe=["s"], key="k")  # no ctx.state: nothing else would fence the old owner
    async def a(ctx: ActorCtx, event: Event) -> None:
        ran.append(event.data["i"])
        if event.data["i"] == 0:
            first.set()
            await go_on.wait()
        await asyncio.sleep(0.02)

    async with rt.running(actor_store):
        await rt.append_many("s", [{"k": "x", "i": i} for i in range(N)])
        await wait_for(first)
        drain = rt.drain
        assert drain is not None
        assert drain.stats().held >= N - 1, drain.stats()  # the rest are held here, queued
        # w2 takes x over (w1 looks stale to it) while w1 runs event 0.
        now = rt.wall()
        await actor_store.fleet.register_worker("w2", hostname="h", pid=2, now=now)
        taken = await actor_store.fleet.claim_orphans("w2", stale_before=now + 3600, now=now)
        assert taken.instances == 1
        go_on.set()

        async def settled() -> bool:  # each held event ran here or was dropped
            return drain.stats().held == 0

        await wait_until(settled)
        await drain.flush()
        assert drain.stats().fenced >= 1
    # w1 ran event 0 and at most the few it started before its first refusal came back.
    assert ran[0] == 0 and len(ran) <= 5, ran
    info = await actor_store.get_instance(InstanceRef(tenant="default", actor="a", instance_id="x"))
    assert info is not None and info.worker_id == "w2"
    assert info.pending == N and info.in_flight == 0, info  # all of them are w2's to run
