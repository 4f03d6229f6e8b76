"""A tenant's `max_running` holds across the fleet: two real worker processes on one
PostgreSQL, each owning half of a capped tenant's instances and each with slots to spare, never
run more of its `process()` calls at once than the cap (counted across the processes)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.actors.conftest import open_actor_store, truncate_actor_tables
from tests.actors.test_processes import until, workers
from tests.actors.worker_proc import Running, define
from yoke.actors import ActorRuntime, ActorSettings
from yoke.store import NewControl
from yoke.store.tenantverbs import TenantValues

CAP = 3
PER_WORKER = 60


@pytest.mark.postgres
@pytest.mark.slow
async def test_the_fleet_wide_tenant_cap_is_never_exceeded(pg_url: str, tmp_path: Path) -> None:
    truncate_actor_tables(pg_url)
    counter = tmp_path / "running.json"
    store = open_actor_store(pg_url)
    await store.open()
    try:
        audit = NewControl(
            kind="tenant", principal="test", tenant=None, roles=("ADMIN",), subject="acme",
            before="{}", after="{}", at=time.time(),
        )  # fmt: skip
        await store.actors.put_tenant_settings("acme", TenantValues(max_running=CAP), audit=audit)
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
