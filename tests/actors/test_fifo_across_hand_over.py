"""FIFO per group across a hand-over, while the group's head waits out its backoff.

Inside one worker a failed event keeps its group slot during its backoff, so nothing of its
group overtakes it. Its row carries the backoff (`available_at`) so that a new owner honours
it, and a claim leaves the later rows of the group waiting behind it until it is due
(`actor_queues_backoff`), so the new owner runs the head first.
"""

from __future__ import annotations

import asyncio

from tests.actors.conftest import MakeRuntime, wait_for
from yoke.actors import ActorCtx, Backoff, Event, Queue
from yoke.actors.protocol import ActorStore
from yoke.actors.runtime import ActorRuntime


async def test_fifo_holds_across_a_hand_over_while_the_head_backs_off(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    order: list[int] = []
    failed = asyncio.Event()
    both = asyncio.Event()

    def define(rt: ActorRuntime) -> None:
        @rt.actor(
            subscribe=["s"],
            key="k",
            queue=Queue(mode="fifo", concurrency=1),
            backoff=Backoff(initial=1.0, maximum=1.0),
        )
        async def a(ctx: ActorCtx, event: Event) -> None:
            if event.data["i"] == 1 and event.attempt == 1:
                failed.set()
                raise RuntimeError("the first attempt fails")
            order.append(event.data["i"])
            if len(order) == 2:
                both.set()

    w1 = make_runtime("w1")
    define(w1)
    async with w1.running(actor_store):
        await w1.append_many("s", [{"k": "x", "i": 1}, {"k": "x", "i": 2}])
        await wait_for(failed)
    # w1 left while event 1 waited for its retry (2 waited behind it); w2 takes x over.
    assert order == []
    w2 = make_runtime("w2")
    define(w2)
    async with w2.running(actor_store):
        await wait_for(both)
    assert order == [1, 2]
