"""The conformance suite of the actor store: what every `ActorStore` must do, for any backend.

Each check takes an empty store (a fresh database, or a new `MemoryActorStore`) and raises
`AssertionError` where the store departs from the contract; `CHECKS` lists them, and
`check_store` runs them all, each on a store of its own. yoke runs the suite against its
in-memory store, SQLite and PostgreSQL (`tests/actors/test_store_verbs.py`); a store of your
own (or a fork of a backend) runs it the same way (docs/TESTING.md, "Your own store"). Checks
are plain `assert`s: run them without `python -O`.

This module must never name a concrete backend: the store is given.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

from yoke.actors.protocol import ActorStore
from yoke.store.actor_records import Completion, InstanceRef, NewEvent, Target

Check = Callable[[ActorStore], Awaitable[None]]


def events(n: int, *, instances: int = 10) -> list[NewEvent]:
    return [
        NewEvent(
            tenant="t",
            stream="s",
            data=json.dumps({"i": i}),
            targets=(Target(actor="a", instance_id=str(i % instances), group_id=str(i % 3)),),
        )
        for i in range(n)
    ]


async def check_concurrent_claims_never_share_a_row(store: ActorStore) -> None:
    await store.append_events(events(400), owner="w1", now=1.0)
    batches = await asyncio.gather(*(store.claim_next("w1", limit=60, now=2.0) for _ in range(8)))
    ids = [c.queue_id for b in batches for c in b]
    assert len(ids) == len(set(ids)) == 400
    # Oldest first within each claim.
    for b in batches:
        assert [c.queue_id for c in b] == sorted(c.queue_id for c in b)
    assert await store.claim_next("w1", limit=10, now=2.0) == []
    assert await store.claim_next("w2", limit=10, now=2.0) == []


async def check_append_fans_out_in_order_and_keeps_the_bytes(store: ActorStore) -> None:
    evs = events(5, instances=2)
    ids = await store.append_events(evs, owner=None, now=1.0)
    assert ids == sorted(ids) and len(ids) == 5
    info = await store.get_instance(InstanceRef(tenant="t", actor="a", instance_id="0"))
    assert info is not None and info.pending == 3 and info.worker_id is None
    assert await store.claim_next("w1", limit=10, now=2.0) == []  # no owner: no claim
    got = await store.fleet.claim_orphans("w1", stale_before=0.0, now=2.0)
    assert got.instances == 2
    claims = await store.claim_next("w1", limit=10, now=2.0)
    assert [json.loads(c.data)["i"] for c in claims] == [0, 1, 2, 3, 4]
    assert [c.event_id for c in claims] == ids
    groups = await store.list_active_groups(InstanceRef(tenant="t", actor="a", instance_id="0"))
    assert groups == ["0", "1", "2"]


async def check_requeue_keeps_the_row_until_due_and_counts_attempts(store: ActorStore) -> None:
    await store.append_events(events(1), owner="w1", now=1.0)
    (c,) = await store.claim_next("w1", limit=1, now=1.0)
    done = Completion(queue_id=c.queue_id, epoch=c.epoch)
    assert await store.requeue("w1", done, available_at=100.0, error="boom")
    # After a takeover the row is pending again, and claimable only once due.
    await store.fleet.register_worker("w1", hostname="h", pid=1, now=2.0)
    assert await store.claim_next("w1", limit=1, now=50.0) == []
    (again,) = await store.claim_next("w1", limit=1, now=100.0)
    assert again.attempts == 1 and again.epoch == c.epoch + 1
    ok = Completion(queue_id=again.queue_id, epoch=again.epoch)
    assert await store.dead_letter("w1", ok, error="still boom", now=101.0)
    ref = InstanceRef(tenant="t", actor="a", instance_id="0")
    (dl,) = await store.dead_letters(ref)
    assert dl.attempts == 2 and dl.error == "still boom" and json.loads(dl.data) == {"i": 0}
    assert await store.complete("w1", [ok]) == []  # dead letters are not completed
    assert await store.queue_depths(limit=5) == []


async def check_state_is_compare_and_set_under_the_owner(store: ActorStore) -> None:
    await store.append_events(events(1), owner="w1", now=1.0)
    ref = InstanceRef(tenant="t", actor="a", instance_id="0")
    st = await store.get_state(ref)
    assert st is not None and st.state == "{}" and st.version == 0 and st.worker_id == "w1"
    e = st.epoch
    assert await store.update_state(
        ref, state='{"n":1}', expected_version=0, worker_id="w1", epoch=e
    )
    assert not await store.update_state(
        ref, state='{"n":9}', expected_version=0, worker_id="w1", epoch=e
    )
    assert not await store.update_state(
        ref, state='{"n":9}', expected_version=1, worker_id="w2", epoch=st.epoch
    )
    st2 = await store.get_state(ref)
    assert st2 is not None and st2.state == '{"n":1}' and st2.version == 1


async def check_stopped_worker_gives_its_instances_up(store: ActorStore) -> None:
    await store.fleet.register_worker("w1", hostname="h", pid=1, now=1.0)
    await store.append_events(events(4, instances=2), owner="w1", now=1.0)
    claims = await store.claim_next("w1", limit=2, now=1.0)
    assert await store.fleet.stop_worker("w1", now=2.0) == 2
    assert not await store.fleet.worker_heartbeat("w1", now=3.0)
    (w,) = await store.fleet.list_workers()
    assert w.stopped_at == 2.0
    taken = await store.fleet.claim_orphans("w2", stale_before=0.0, now=3.0)
    assert taken.instances == 2 and taken.requeued == 0  # stop_worker already put them back
    assert len(await store.claim_next("w2", limit=10, now=3.0)) == 4
    done = [Completion(queue_id=c.queue_id, epoch=c.epoch) for c in claims]
    assert await store.complete("w1", done) == []


async def check_a_claim_is_shared_between_tenants(store: ActorStore) -> None:
    flood = [
        NewEvent(
            tenant="flood",
            stream="s",
            data="{}",
            targets=(Target(actor="a", instance_id="x", group_id=""),),
        )
        for _ in range(300)
    ]
    light = [
        NewEvent(
            tenant="light",
            stream="s",
            data="{}",
            targets=(Target(actor="a", instance_id="y", group_id=""),),
        )
        for _ in range(5)
    ]
    await store.append_events(flood, owner="w1", now=1.0)
    await store.append_events(light, owner="w1", now=1.0)
    got = await store.claim_next("w1", limit=20, now=2.0)
    assert [c.tenant for c in got].count("light") == 5  # not behind the 300 older ones
    assert [c.tenant for c in got].count("flood") == 10  # its share: ceil(20 / 2)
    # The cursor moves past a tenant; a claim after the last tenant wraps around.
    got = await store.claim_next("w1", limit=20, now=2.0, after_tenant="light")
    assert {c.tenant for c in got} == {"flood"} and len(got) == 20


async def _epoch(store: ActorStore, ref: InstanceRef) -> int:
    st = await store.get_state(ref)
    assert st is not None
    return st.epoch


async def check_a_select_lists_a_groups_pending_rows_then_claims_the_chosen_one(
    store: ActorStore,
) -> None:
    # Instance "0" gets i = 0, 2, 4, ..., 10; group i % 3: "0" holds i = 0 and 6.
    await store.append_events(events(12, instances=2), owner="w1", now=1.0)
    ref = InstanceRef(tenant="t", actor="a", instance_id="0")
    listed = await store.list_pending("w1", ref, "0", limit=10, now=2.0)
    assert [json.loads(p.data)["i"] for p in listed] == [0, 6]
    assert [p.group_id for p in listed] == ["0", "0"] and listed[0].attempts == 0
    assert await store.list_pending("w1", ref, "0", limit=1, now=2.0) == listed[:1]
    assert await store.list_pending("w2", ref, "0", limit=10, now=2.0) == []  # not its
    epoch = await _epoch(store, ref)
    chosen = listed[1].queue_id
    got = await store.claim_event("w1", chosen, epoch=epoch)
    assert got is not None and got.queue_id == chosen and got.epoch == epoch
    assert json.loads(got.data) == {"i": 6} and got.event_id == listed[1].event_id
    assert await store.claim_event("w1", chosen, epoch=epoch) is None  # claimed already
    assert await store.claim_event("w2", listed[0].queue_id, epoch=epoch) is None
    assert await store.claim_event("w1", listed[0].queue_id, epoch=epoch + 1) is None
    again = await store.list_pending("w1", ref, "0", limit=10, now=2.0)
    assert [p.queue_id for p in again] == [listed[0].queue_id]
    # A claim like claim_next's: completed (or fenced) under its epoch.
    assert await store.complete("w1", [Completion(queue_id=chosen, epoch=epoch)]) == [chosen]


async def check_a_requeued_row_is_listed_for_a_select_only_once_due(store: ActorStore) -> None:
    await store.append_events(events(1), owner="w1", now=1.0)
    ref = InstanceRef(tenant="t", actor="a", instance_id="0")
    (p,) = await store.list_pending("w1", ref, "0", limit=10, now=1.0)
    c = await store.claim_event("w1", p.queue_id, epoch=await _epoch(store, ref))
    assert c is not None
    done = Completion(queue_id=c.queue_id, epoch=c.epoch)
    assert await store.requeue("w1", done, available_at=100.0, error="boom")
    await store.fleet.register_worker("w1", hostname="h", pid=1, now=2.0)  # pending again
    assert await store.list_pending("w1", ref, "0", limit=10, now=50.0) == []
    (due,) = await store.list_pending("w1", ref, "0", limit=10, now=100.0)
    assert due.queue_id == c.queue_id and due.attempts == 1
    # The old epoch claims nothing: the restart bumped it.
    assert await store.claim_event("w1", due.queue_id, epoch=c.epoch) is None


async def check_a_chosen_row_is_claimed_once_whoever_races_for_it(store: ActorStore) -> None:
    await store.append_events(events(30, instances=1), owner="w1", now=1.0)
    ref = InstanceRef(tenant="t", actor="a", instance_id="0")
    epoch = await _epoch(store, ref)
    listed = await store.list_pending("w1", ref, "1", limit=100, now=2.0)
    assert len(listed) == 10
    singles = [store.claim_event("w1", p.queue_id, epoch=epoch) for p in listed * 3]
    got, batch = await asyncio.gather(
        asyncio.gather(*singles), store.claim_next("w1", limit=30, now=2.0)
    )
    ids = [c.queue_id for c in got if c is not None] + [c.queue_id for c in batch]
    assert len(ids) == len(set(ids)) == 30  # every row claimed, none twice


async def check_a_lost_claim_is_undone_by_its_id_and_only_its_own_rows(store: ActorStore) -> None:
    # One instance, rows in order: claim 7 takes the first four, claim 8 the next two.
    await store.append_events(events(8, instances=1), owner="w1", now=1.0)
    lost = await store.claim_next("w1", limit=4, now=1.0, claim_id=7)
    kept = await store.claim_next("w1", limit=2, now=1.0, claim_id=8)
    assert len(lost) == 4 and len(kept) == 2
    assert await store.unclaim_lost("w2", 7) == 0  # not its claim
    # One of claim 7's rows ended meanwhile (a completion): three are still its claim.
    done = Completion(queue_id=lost[0].queue_id, epoch=lost[0].epoch)
    assert await store.complete("w1", [done]) == [lost[0].queue_id]
    assert await store.unclaim_lost("w1", 7) == 3
    assert await store.unclaim_lost("w1", 7) == 0  # once
    # Pending again with no attempt counted, first in line: the next claim takes them first.
    again = await store.claim_next("w1", limit=10, now=1.0, claim_id=9)
    assert [c.queue_id for c in again][:3] == [c.queue_id for c in lost[1:]]
    assert len(again) == 3 + 2  # and the two no claim had taken
    assert all(c.attempts == 0 for c in again)
    # A row taken by a select's claim is no claim's: undoing claim 9 leaves it claimed.
    ref = InstanceRef(tenant="t", actor="a", instance_id="0")
    assert await store.unclaim_lost("w1", 9) == len(again)
    (p, *_) = await store.list_pending("w1", ref, "0", limit=10, now=2.0)
    picked = await store.claim_event("w1", p.queue_id, epoch=await _epoch(store, ref))
    assert picked is not None
    assert await store.unclaim_lost("w1", 9) == 0
    info = await store.get_instance(ref)
    assert info is not None and info.in_flight == len(kept) + 1


CHECKS: tuple[Check, ...] = (
    check_concurrent_claims_never_share_a_row,
    check_append_fans_out_in_order_and_keeps_the_bytes,
    check_requeue_keeps_the_row_until_due_and_counts_attempts,
    check_state_is_compare_and_set_under_the_owner,
    check_stopped_worker_gives_its_instances_up,
    check_a_claim_is_shared_between_tenants,
    check_a_select_lists_a_groups_pending_rows_then_claims_the_chosen_one,
    check_a_requeued_row_is_listed_for_a_select_only_once_due,
    check_a_chosen_row_is_claimed_once_whoever_races_for_it,
    check_a_lost_claim_is_undone_by_its_id_and_only_its_own_rows,
)


async def check_store(
    make_store: Callable[[], AbstractAsyncContextManager[ActorStore]],
) -> None:
    """Run every check of `CHECKS`, each on the empty store `make_store()` enters (and leaves
    afterwards); the first check that fails raises `AssertionError` naming it."""
    for check in CHECKS:
        async with make_store() as store:
            try:
                await check(store)
            except Exception as exc:  # an assert, or an answer of the wrong shape
                raise AssertionError(f"{check.__name__}: {type(exc).__name__}: {exc}") from exc
