"""The read verbs behind the actor routes, alike on every backend (the in-memory reference,
SQLite, PostgreSQL): counts per actor and tenant, keyset pages of instances, instances owned per
worker; and the inspector's worker status by the stale interval, on a manual clock."""

from __future__ import annotations

import pytest

from yoke.actors import ActorInspector, ActorRegistry, Event, WorkerStatus
from yoke.actors.ctx import ActorCtx
from yoke.actors.protocol import ActorStore
from yoke.clock import ManualClock
from yoke.errors import NotFound
from yoke.store.actor_records import ActorCounts, Completion, InstanceRef, NewEvent, Target
from yoke.testing.memstore import MemoryActorStore


def event(tenant: str, actor: str, instance: str) -> NewEvent:
    target = Target(actor=actor, instance_id=instance, group_id="")
    return NewEvent(tenant=tenant, stream="s", data="{}", targets=(target,))


async def test_counts_by_actor_and_tenant(actor_store: ActorStore) -> None:
    await actor_store.append_events(
        [event("acme", "cart", "c1"), event("acme", "cart", "c1"), event("acme", "cart", "c2")],
        owner="w1",
        now=1.0,
    )
    await actor_store.append_events(
        [event("globex", "cart", "c1"), event("globex", "mail", "m1")], owner="w1", now=1.0
    )
    claimed = await actor_store.claim_next("w1", limit=100, now=2.0)
    # Leave one claimed (in flight), dead-letter one, complete one; the rest stay pending.
    acme = sorted((c for c in claimed if c.tenant == "acme"), key=lambda c: c.queue_id)
    await actor_store.dead_letter(
        "w1", Completion(queue_id=acme[0].queue_id, epoch=acme[0].epoch), error="x", now=3.0
    )
    await actor_store.complete("w1", [Completion(queue_id=acme[1].queue_id, epoch=acme[1].epoch)])
    by_actor = {c.actor: c for c in await actor_store.actor_counts(tenant="acme")}
    assert by_actor == {
        "cart": ActorCounts(actor="cart", instances=2, pending=0, in_flight=1, dead=1)
    }
    everyone = await actor_store.actor_counts(tenant=None)
    assert [(c.actor, c.instances, c.in_flight + c.pending) for c in everyone] == [
        ("cart", 3, 2),
        ("mail", 1, 1),
    ]
    assert await actor_store.actor_counts(tenant="nobody") == []


async def test_instances_come_in_keyset_pages(actor_store: ActorStore) -> None:
    events = [event(t, "cart", i) for t in ("b", "a") for i in ("y", "x", "z")]
    await actor_store.append_events([*events, event("a", "other", "q")], owner=None, now=1.0)
    first = await actor_store.instances_page("cart", limit=4)
    assert [(i.tenant, i.instance_id) for i in first] == [
        ("a", "x"),
        ("a", "y"),
        ("a", "z"),
        ("b", "x"),
    ]
    after = InstanceRef(tenant="b", actor="cart", instance_id="x")
    rest = await actor_store.instances_page("cart", after=after, limit=4)
    assert [(i.tenant, i.instance_id) for i in rest] == [("b", "y"), ("b", "z")]
    only_b = await actor_store.instances_page("cart", tenant="b", limit=10)
    assert [i.instance_id for i in only_b] == ["x", "y", "z"]
    assert [i.pending for i in only_b] == [1, 1, 1]
    assert await actor_store.instances_page("nothing", limit=10) == []


async def test_instances_owned_per_worker(actor_store: ActorStore) -> None:
    await actor_store.append_events([event("a", "cart", "1")], owner=None, now=1.0)
    await actor_store.fleet.register_worker("w1", hostname="h", pid=1, now=1.0)
    await actor_store.fleet.register_worker("w2", hostname="h", pid=2, now=1.0)
    await actor_store.append_events(
        [event("a", "cart", "2"), event("a", "cart", "3")], owner="w2", now=1.0
    )
    assert await actor_store.fleet.owned_instances() == {"w2": 2}  # the ownerless one is no one's
    await actor_store.fleet.claim_orphans("w1", stale_before=0.0, now=2.0)
    assert await actor_store.fleet.owned_instances() == {"w1": 1, "w2": 2}


async def test_worker_status_follows_the_stale_interval() -> None:
    store = MemoryActorStore()
    clock = ManualClock()
    registry = ActorRegistry()

    @registry.actor(subscribe=["s"], key="k")
    async def cart(ctx: ActorCtx, event: Event) -> None:
        return None

    inspector = ActorInspector(registry=registry, store=lambda: store, clock=clock, stale_after=60)
    await store.register_worker("early", hostname="h", pid=1, now=clock.wall())
    clock.advance(30)
    await store.register_worker("late", hostname="h", pid=2, now=clock.wall())
    await store.register_worker("gone", hostname="h", pid=3, now=clock.wall())
    await store.stop_worker("gone", now=clock.wall())
    status = {w.row.worker_id: w.status for w in await inspector.workers()}
    assert status == {
        "early": WorkerStatus.LIVE,
        "late": WorkerStatus.LIVE,
        "gone": WorkerStatus.STOPPED,
    }
    clock.advance(30.5)  # 60.5 s since early's only heartbeat, 30.5 s since late's
    status = {w.row.worker_id: w.status for w in await inspector.workers()}
    assert status["early"] is WorkerStatus.STALE and status["late"] is WorkerStatus.LIVE
    with pytest.raises(NotFound):
        await inspector.instance("nope", "1", tenant="t")
    assert [v.counts.instances for v in inspector.uncounted()] == [0]
