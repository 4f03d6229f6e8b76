"""FIFO when a group's backlog is larger than one claim: each claim takes the oldest rows.

Inside a worker the drain runs a group's claimed events in arrival order, but it can only order
what it holds. When the backlog is longer than a claim (a small batch, no prefetch), the claim
itself must take the oldest pending rows, or later events run before earlier ones.
"""

from __future__ import annotations

import asyncio
import json

from tests.actors.conftest import MakeRuntime, wait_for
from yoke.actors import ActorCtx, Event, Queue
from yoke.actors.protocol import ActorStore
from yoke.store.actor_records import Completion, NewEvent, Target


def _group_events(n: int) -> list[NewEvent]:
    target = Target(actor="a", instance_id="x", group_id="g")
    return [
        NewEvent(tenant="t", stream="s", data=json.dumps({"i": i}), targets=(target,))
        for i in range(n)
    ]


async def test_a_claim_smaller_than_the_backlog_takes_the_oldest_rows(
    actor_store: ActorStore,
) -> None:
    await actor_store.append_events(_group_events(5), owner="w1", now=1.0)
    first = await actor_store.claim_next("w1", limit=2, now=2.0)
    assert [json.loads(c.data)["i"] for c in first] == [0, 1]
    done = [Completion(queue_id=c.queue_id, epoch=c.epoch) for c in first]
    assert len(await actor_store.complete("w1", done)) == 2
    second = await actor_store.claim_next("w1", limit=2, now=2.0)
    assert [json.loads(c.data)["i"] for c in second] == [2, 3]
    third = await actor_store.claim_next("w1", limit=2, now=2.0)
    assert [json.loads(c.data)["i"] for c in third] == [4]


async def test_a_fifo_group_longer_than_a_claim_is_processed_in_order(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    # Two rows per claim and none held ahead: the worker sees the backlog two rows at a time.
    rt = make_runtime(concurrency=2, batch_size=2, prefetch=0)
    order: list[int] = []
    done = asyncio.Event()

    @rt.actor(subscribe=["s"], key="k", queue=Queue(mode="fifo", concurrency=1))
    async def a(ctx: ActorCtx, event: Event) -> None:
        order.append(event.data["i"])
        if len(order) == 10:
            done.set()

    async with rt.running(actor_store):
        # One append: all ten rows are pending before the first claim can see any of them.
        await rt.append_many("s", [{"k": "x", "i": i} for i in range(10)])
        await wait_for(done)
    assert order == list(range(10))
