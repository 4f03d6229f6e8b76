"""The store verbs of executor processes and leases, on every `ActorStore` (memory, SQLite,
PostgreSQL): a release counts no attempt, a crash charge counts its own, the claim can be
limited to tenants, and a lease is held by one term at a time."""

from __future__ import annotations

import asyncio
import json

from yoke.actors.protocol import ActorStore
from yoke.store.actor_records import (
    Completion,
    CrashCharge,
    ExecutorRow,
    InstanceRef,
    NewEvent,
    NewTimer,
    SpareRow,
    Target,
)
from yoke.store.leaseverbs import Lease
from yoke.testing.conformance import events
from yoke.testing.memstore import MemoryActorStore

REF0 = InstanceRef(tenant="t", actor="a", instance_id="0")


def tenant_events(tenant: str, n: int) -> list[NewEvent]:
    return [
        NewEvent(
            tenant=tenant,
            stream="s",
            data=json.dumps({"i": i}),
            targets=(Target(actor="a", instance_id="x", group_id=""),),
        )
        for i in range(n)
    ]


async def test_a_dead_workers_rows_are_suspects_and_only_the_one_run_alone_is_charged(
    actor_store: ActorStore,
) -> None:
    """Whoever recovers a dead worker's rows (its next life here, or a takeover) makes each a
    suspect; the one marked `solo` is charged a crash attempt, a dead letter at the limit; a
    graceful stop makes no suspect."""
    await actor_store.fleet.register_worker("w1", hostname="h", pid=1, now=1.0)
    await actor_store.append_events(events(2, instances=2), owner="w1", now=1.0)
    claims = await actor_store.claim_next("w1", limit=2, now=1.0)
    assert len(claims) == 2 and not any(c.suspect for c in claims)
    alone, beside = (Completion(queue_id=c.queue_id, epoch=c.epoch) for c in claims)
    assert not await actor_store.mark_solo("w2", alone)  # not its claim
    for life in (2, 3, 4):  # w1 dies while `alone` runs alone, and restarts
        assert await actor_store.mark_solo("w1", alone)
        await actor_store.fleet.register_worker("w1", hostname="h", pid=life, now=float(life))
        if life == 4:
            break
        again = {c.queue_id: c for c in await actor_store.claim_next("w1", limit=2, now=5.0)}
        assert all(c.suspect for c in again.values()) and len(again) == 2
        alone = Completion(queue_id=alone.queue_id, epoch=again[alone.queue_id].epoch)
    refs = [InstanceRef(tenant="t", actor="a", instance_id=str(i)) for i in range(2)]
    dead = [d for ref in refs for d in await actor_store.dead_letters(ref)]
    (dl,) = dead
    assert dl.queue_id == alone.queue_id and dl.crash_attempts == 3 and dl.attempts == 0
    assert "its worker died" in (dl.error or "") and dl.dead_at == 4.0
    (left,) = await actor_store.claim_next("w1", limit=2, now=5.0)
    assert left.queue_id == beside.queue_id and left.suspect  # never charged
    done = Completion(queue_id=left.queue_id, epoch=left.epoch)
    assert await actor_store.complete("w1", [done]) == [left.queue_id]
    # A graceful stop hands its claims over as they were: no suspect.
    await actor_store.append_events(events(1, instances=1), owner="w1", now=6.0)
    (fresh,) = await actor_store.claim_next("w1", limit=2, now=6.0)
    await actor_store.fleet.stop_worker("w1", now=6.0)
    await actor_store.fleet.register_worker("w2", hostname="h", pid=9, now=7.0)
    await actor_store.fleet.claim_orphans("w2", stale_before=7.0, now=7.0)
    (after,) = await actor_store.claim_next("w2", limit=2, now=8.0)
    assert after.queue_id == fresh.queue_id and not after.suspect


async def test_released_claims_are_pending_again_with_no_attempt(actor_store: ActorStore) -> None:
    await actor_store.append_events(events(3, instances=1), owner="w1", now=1.0)
    claims = await actor_store.claim_next("w1", limit=3, now=1.0)
    done = [Completion(queue_id=c.queue_id, epoch=c.epoch) for c in claims]
    assert await actor_store.executors.release_claims("w2", done) == []  # not its claims
    assert await actor_store.executors.release_claims("w1", done[:2]) == sorted(
        c.queue_id for c in done[:2]
    )
    assert await actor_store.executors.release_claims("w1", done[:2]) == []  # not claimed any more
    again = await actor_store.claim_next("w1", limit=5, now=1.0)
    assert [c.queue_id for c in again] == [c.queue_id for c in claims[:2]]
    assert all(c.attempts == 0 for c in again)
    # A stale epoch releases nothing: the instance was taken over meanwhile.
    await actor_store.fleet.register_worker("w1", hostname="h", pid=1, now=2.0)
    assert await actor_store.executors.release_claims("w1", done[2:]) == []


async def test_a_crash_charge_counts_apart_and_dead_letters_at_the_limit(
    actor_store: ActorStore,
) -> None:
    await actor_store.append_events(events(1), owner="w1", now=1.0)
    for n in (1, 2):
        (c,) = await actor_store.claim_next("w1", limit=1, now=1.0)
        done = Completion(queue_id=c.queue_id, epoch=c.epoch)
        got = await actor_store.executors.charge_crash(
            "w1", done, error="exit 3", dead_after=3, now=2.0
        )
        assert got is CrashCharge.PENDING
        assert c.attempts == 0  # a crash is not one of the actor's failed attempts
        info = await actor_store.get_instance(REF0)
        assert info is not None and info.pending == 1 and info.dead == 0, n
    (c,) = await actor_store.claim_next("w1", limit=1, now=1.0)
    done = Completion(queue_id=c.queue_id, epoch=c.epoch)
    assert await actor_store.executors.charge_crash(
        "w2", done, error="x", dead_after=3, now=3.0
    ) is (CrashCharge.FENCED)
    got = await actor_store.executors.charge_crash(
        "w1", done, error="executor crashed", dead_after=3, now=3.0
    )
    assert got is CrashCharge.DEAD
    (dl,) = await actor_store.dead_letters(REF0)
    assert dl.crash_attempts == 3 and dl.attempts == 0 and dl.error == "executor crashed"
    assert dl.dead_at == 3.0
    assert await actor_store.claim_next("w1", limit=1, now=4.0) == []


async def test_a_claim_limited_to_tenants_takes_only_theirs(actor_store: ActorStore) -> None:
    for tenant in ("a", "b", "c"):
        await actor_store.append_events(tenant_events(tenant, 4), owner="w1", now=1.0)
    got = await actor_store.claim_next("w1", limit=100, now=2.0, tenants=["c", "a", "zz"])
    assert sorted({c.tenant for c in got}) == ["a", "c"] and len(got) == 8
    assert await actor_store.claim_next("w1", limit=100, now=2.0, tenants=[]) == []
    assert await actor_store.executors.pending_tenants("w1", limit=10) == ["b"]
    assert await actor_store.executors.tenants_with_pending("w1", ["a", "b", "zz"]) == ["b"]
    assert await actor_store.executors.tenants_with_pending("w2", ["b"]) == []
    # The share between tenants and the cursor hold as without the limit.
    for tenant in ("a", "c"):
        await actor_store.append_events(tenant_events(tenant, 30), owner="w1", now=1.0)
    got = await actor_store.claim_next("w1", limit=10, now=2.0, tenants=["a", "c"])
    assert [c.tenant for c in got].count("a") == 5 and [c.tenant for c in got].count("c") == 5
    got = await actor_store.claim_next("w1", limit=4, now=2.0, after_tenant="a", tenants=["a", "c"])
    assert [c.tenant for c in got].count("c") >= 2


async def test_pending_tenants_page_in_name_order(actor_store: ActorStore) -> None:
    for tenant in ("d", "b", "a", "c"):
        await actor_store.append_events(tenant_events(tenant, 1), owner="w1", now=1.0)
    assert await actor_store.executors.pending_tenants("w1", limit=2) == ["a", "b"]
    assert await actor_store.executors.pending_tenants("w1", after="b", limit=10) == ["c", "d"]
    assert await actor_store.executors.pending_tenants("w9", limit=10) == []


async def test_timer_tenants_are_those_owning_an_instance_here(actor_store: ActorStore) -> None:
    await actor_store.append_events(tenant_events("mine", 1), owner="w1", now=1.0)
    await actor_store.append_events(tenant_events("theirs", 1), owner="w2", now=1.0)
    timers = [
        NewTimer(tenant=t, stream="s", data="{}", fire_at_ms=ms)
        for t, ms in (("mine", 5_000), ("mine", 3_000), ("theirs", 1_000), ("mine", 90_000))
    ]
    await actor_store.schedule(timers, now=1.0)
    assert await actor_store.executors.timer_tenants("w1", before_ms=10_000, limit=10) == [
        ("mine", 3_000)
    ]
    assert await actor_store.executors.timer_tenants("w1", before_ms=2_000, limit=10) == []
    assert await actor_store.executors.timer_tenants("w2", before_ms=10_000, limit=10) == [
        ("theirs", 1_000)
    ]


def _row(tenant: str, state: str, **kw: object) -> ExecutorRow:
    values: dict[str, object] = {
        "worker_id": "w1",
        "tenant": tenant,
        "pid": 42,
        "state": state,
        "started_at": 1.0,
        "boot_ms": 80.5,
        "dispatches": 3,
        "active_dispatch": 1,
        "crashes": 0,
        "isolation": "process",
        "stop_reason": None,
        "updated_at": 2.0,
    }
    values.update(kw)
    return ExecutorRow(**values)  # type: ignore[arg-type]


async def test_executor_rows_are_upserted_per_worker_and_tenant(actor_store: ActorStore) -> None:
    await actor_store.executors.record_executors(
        [_row("b", "STARTING", boot_ms=None), _row("a", "READY")]
    )
    stopped = _row("b", "STOPPED", pid=None, stop_reason="idle", dispatches=9)
    await actor_store.executors.record_executors([_row("b", "READY"), stopped])  # the last one wins
    await actor_store.executors.record_executors([_row("a", "READY", worker_id="w2")])
    rows = await actor_store.executors.list_executors(tenant=None, limit=10)
    assert [(r.tenant, r.worker_id, r.state) for r in rows] == [
        ("a", "w1", "READY"),
        ("a", "w2", "READY"),
        ("b", "w1", "STOPPED"),
    ]
    assert rows[2] == stopped
    assert [
        r.worker_id for r in await actor_store.executors.list_executors(tenant="a", limit=1)
    ] == ["w1"]
    assert await actor_store.executors.list_executors(tenant="zz", limit=10) == []


def _spare(slot: int, pid: int | None, state: str = "SPARE", **kw: object) -> SpareRow:
    values: dict[str, object] = {
        "worker_id": "w1",
        "slot": slot,
        "pid": pid,
        "state": state,
        "started_at": 1.0,
        "boot_ms": 150.0,
        "isolation": "process",
        "stop_reason": None,
        "updated_at": 2.0,
    }
    values.update(kw)
    return SpareRow(**values)  # type: ignore[arg-type]


async def test_spares_are_listed_after_the_tenants_executors_with_no_tenant(
    actor_store: ActorStore,
) -> None:
    await actor_store.executors.record_executors([_row("a", "READY", pid=7)])
    await actor_store.executors.record_spares([_spare(0, 8), _spare(1, 9, boot_ms=None)])
    # Slot 0's spare was bound to a tenant; the spare booted after it takes the slot.
    await actor_store.executors.record_spares(
        [_spare(0, 8, "STOPPED", stop_reason="bound to a tenant")]
    )
    await actor_store.executors.record_spares([_spare(0, 10)])
    rows = await actor_store.executors.list_executors(tenant=None, limit=10)
    assert [(r.tenant, r.pid, r.state, r.dispatches) for r in rows] == [
        ("a", 7, "READY", 3),
        (None, 9, "SPARE", 0),
        (None, 10, "SPARE", 0),
    ]
    assert rows[1].boot_ms is None and rows[2].boot_ms == 150.0
    assert [r.tenant for r in await actor_store.executors.list_executors(tenant="a", limit=10)] == [
        "a"
    ]
    assert len(await actor_store.executors.list_executors(tenant=None, limit=2)) == 2


async def test_a_lease_has_one_holder_per_term(actor_store: ActorStore) -> None:
    store = actor_store
    assert await store.leases.get_lease("p") is None
    a = await store.leases.acquire_lease("p", holder="a", ttl=30.0)
    assert a is not None and a.holder == "a" and a.epoch == 1
    assert 29.0 < a.remaining <= 30.0
    assert await store.leases.acquire_lease("p", holder="b", ttl=30.0) is None  # a's term runs
    renewed = await store.leases.renew_lease(a, ttl=60.0)
    assert renewed is not None and renewed.epoch == 1 and renewed.expires_at > a.expires_at
    assert await store.leases.release_lease(a)
    b = await store.leases.acquire_lease("p", holder="b", ttl=30.0)
    assert b is not None and b.epoch == 2
    # a's old term can neither extend nor end b's.
    assert await store.leases.renew_lease(a, ttl=60.0) is None
    assert not await store.leases.release_lease(a)
    cur = await store.leases.get_lease("p")
    assert cur is not None and cur.holder == "b" and cur.epoch == 2


async def test_a_holders_own_older_term_can_neither_renew_nor_release_its_newer_one(
    actor_store: ActorStore,
) -> None:
    store = actor_store
    first = await store.leases.acquire_lease("p", holder="a", ttl=30.0)
    assert first is not None and await store.leases.release_lease(first)
    second = await store.leases.acquire_lease(
        "p", holder="a", ttl=5.0
    )  # the same holder, a new term
    assert second is not None and second.epoch == first.epoch + 1
    # A renewal or release still in flight from the first term (a slow loop, a retry) names
    # the right holder but an ended term: it must change nothing of the second.
    assert await store.leases.renew_lease(first, ttl=600.0) is None
    assert not await store.leases.release_lease(first)
    cur = await store.leases.get_lease("p")
    assert cur is not None and (cur.holder, cur.epoch) == ("a", second.epoch)
    assert cur.expires_at == second.expires_at
    renewed = await store.leases.renew_lease(second, ttl=30.0)
    assert renewed is not None and renewed.epoch == second.epoch


async def test_an_expired_lease_is_taken_with_a_new_epoch(actor_store: ActorStore) -> None:
    store = actor_store
    a = await store.leases.acquire_lease("p", holder="a", ttl=0.05)
    assert a is not None
    await asyncio.sleep(0.1)  # the lease's own expiry on the database's clock
    b = await store.leases.acquire_lease("p", holder="b", ttl=30.0)
    assert b is not None and b.holder == "b" and b.epoch == a.epoch + 1
    assert await store.leases.renew_lease(a, ttl=30.0) is None


async def test_racing_takers_get_one_term(actor_store: ActorStore) -> None:
    got = await asyncio.gather(
        *(actor_store.leases.acquire_lease("p", holder=f"h{i}", ttl=30.0) for i in range(8))
    )
    held = [g for g in got if g is not None]
    assert len(held) == 1 and held[0].epoch == 1


def test_lease_remaining_is_never_negative() -> None:
    assert Lease(name="p", holder="a", epoch=1, expires_at=5.0, now=9.0).remaining == 0.0
    assert isinstance(MemoryActorStore().clock(), float)
