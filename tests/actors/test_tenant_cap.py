"""A tenant's `max_running` holds across the fleet: two real worker processes on one
PostgreSQL, each owning half of a capped tenant's instances and each with slots to spare, never
run more of its `process()` calls at once than the cap (counted across the processes). The
counters of a worker that stopped or went stale lapse, and a call that raises gives its
counter back like one that returns (every store)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.actors.conftest import MakeRuntime, open_actor_store, truncate_actor_tables, wait_for
from tests.actors.test_processes import until, workers
from tests.actors.worker_proc import Running, define
from yoke.actors import ActorCtx, ActorRuntime, ActorSettings, Backoff, Event
from yoke.actors.protocol import ActorStore
from yoke.store import NewControl
from yoke.store.tenantverbs import TenantValues

CAP = 3
PER_WORKER = 60
STALE = 60.0  # a worker's heartbeat older than this: its counters lapse


def audit_of(tenant: str) -> NewControl:
    return NewControl(
        kind="tenant", principal="test", tenant=None, roles=("ADMIN",), subject=tenant,
        before="{}", after="{}", at=time.time(),
    )  # fmt: skip


async def test_a_stopped_or_stale_workers_counters_no_longer_hold_the_cap(
    actor_store: ActorStore,
) -> None:
    store, now = actor_store, time.time()
    live_after = now - STALE
    for tenant in ("acme", "globex"):
        await store.tenants.put_tenant_settings(
            tenant, TenantValues(max_running=2), audit=audit_of(tenant)
        )
    for worker in ("w1", "w2"):
        await store.fleet.register_worker(worker, hostname="h", pid=1, now=now)
    # A worker that went stale holding two of globex's slots (it was live when it took them).
    await store.fleet.register_worker("w3", hostname="h", pid=3, now=now - 2 * STALE)
    for _ in range(2):
        assert await store.tenants.take_tenant_slot("globex", "w3", live_after=now - 3 * STALE)
    # A live worker's counters hold the cap for the others.
    assert await store.tenants.take_tenant_slot("acme", "w1", live_after=live_after)
    assert await store.tenants.take_tenant_slot("acme", "w1", live_after=live_after)
    assert not await store.tenants.take_tenant_slot("acme", "w2", live_after=live_after)
    # w1 stops (its calls died with it, nothing freed them): its counters lapse at once.
    await store.fleet.stop_worker("w1", now=now)
    assert await store.tenants.take_tenant_slot("acme", "w2", live_after=live_after)
    assert await store.tenants.take_tenant_slot("acme", "w2", live_after=live_after)
    assert not await store.tenants.take_tenant_slot(
        "acme", "w2", live_after=live_after
    )  # its own two
    # w3's heartbeat is older than the staleness bound: its two count no more.
    assert await store.tenants.take_tenant_slot("globex", "w2", live_after=live_after)
    assert await store.tenants.take_tenant_slot("globex", "w2", live_after=live_after)
    assert not await store.tenants.take_tenant_slot("globex", "w2", live_after=live_after)


async def test_a_call_that_raises_gives_its_tenant_slot_back(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    await actor_store.tenants.put_tenant_settings(
        "acme", TenantValues(max_running=1), audit=audit_of("acme")
    )
    rt = make_runtime()
    succeeded: list[int] = []
    done = asyncio.Event()

    @rt.actor(subscribe=["s"], key="k", backoff=Backoff(max_attempts=1))
    async def flaky(ctx: ActorCtx, event: Event) -> None:
        if event.data["fail"]:
            raise RuntimeError("refused")  # a dead letter at once (one attempt)
        succeeded.append(event.data["n"])
        if len(succeeded) == 3:
            done.set()

    async with rt.running(actor_store):
        # One instance, FIFO: three calls that raise, then three that return, each taking the
        # tenant's only fleet-wide slot in turn.
        rows = [{"k": "x", "n": n, "fail": n < 3} for n in range(6)]
        await rt.append_many("s", rows, tenant="acme")
        await wait_for(done)
        view = await rt.instance("flaky", "x", tenant="acme")
    assert succeeded == [3, 4, 5] and view.dead == 3


@pytest.mark.postgres
@pytest.mark.slow
async def test_the_fleet_wide_tenant_cap_is_never_exceeded(pg_url: str, tmp_path: Path) -> None:
    truncate_actor_tables(pg_url)
    counter = tmp_path / "running.json"
    store = open_actor_store(pg_url)
    await store.open()
    try:
        await store.actors.tenants.put_tenant_settings(
            "acme", TenantValues(max_running=CAP), audit=audit_of("acme")
        )
        rt = ActorRuntime(settings=ActorSettings(worker_id="client"))
        define(rt)
        env = {"YOKE_TEST_COUNTER": str(counter), "YOKE_WORKER_CONCURRENCY": "8"}
        async with workers(pg_url, ["c1", "c2"], **env):
            for owner in ("c1", "c2"):  # each worker owns half of the instances
                items = [{"k": f"{owner}-{i % 20}"} for i in range(PER_WORKER)]
                events = rt.registry.new_events("slow", items, tenant="acme")
                await store.actors.append_events(events, owner=owner, now=time.time())

            async def drained() -> bool:
                return not await store.actors.queue_depths(limit=1)

            await until(drained)
        seen = Running(str(counter)).read()
        assert seen["calls"] == 2 * PER_WORKER
        # Each worker alone could run 8 (its slots) or 3 (the cap, locally): together 6.
        assert seen["most"] <= CAP, seen
        assert seen["most"] == CAP, seen  # the cap was used, not a serial run
    finally:
        await store.close()
