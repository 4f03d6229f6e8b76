"""Warm spares (`YOKE_EXECUTOR_WARM_SPARES`): executors a worker boots ahead of need, bound to
no tenant, and binds to a cold tenant when it needs one; on both stores, with real processes."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.actors.conftest import open_actor_store
from tests.actors.executors import alive, running, runs_below, runtime, state, until
from yoke.actors import ActorRuntime
from yoke.actors.executor.pool import ExecutorPool
from yoke.actors.executor.process import ExecutorProcess, ExecutorState
from yoke.actors.protocol import ActorStore

ROOT = Path(__file__).resolve().parents[2]


def warm(pool: ExecutorPool) -> list[ExecutorProcess]:
    return [ex for ex in pool.spares() if ex.bindable]


def children(pid: int) -> list[int]:
    """The live processes whose parent is `pid` (zombies, dead and unreaped, left out)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if stat[0] != "Z" and int(stat[1]) == pid:
            out.append(int(entry.name))
    return out


async def probe(rt: ActorRuntime, store: ActorStore, tenant: str) -> dict[str, Any]:
    """What `tenant`'s executor saw of itself (`exec_app.probe`)."""
    await rt.append("probes", {"k": "p"}, tenant=tenant)

    async def probed() -> bool:
        return "seen" in await state(store, tenant, "probe", "p")

    await until(probed)
    seen: dict[str, Any] = (await state(store, tenant, "probe", "p"))["seen"]
    return seen


async def test_a_spare_is_booted_at_start_unbound_in_a_directory_of_no_tenant(app_url: str) -> None:
    async with running(app_url) as (rt, _):
        pool = rt.pool
        assert pool is not None
        await until(lambda: len(warm(pool)) == 1)
        (spare,) = warm(pool)
        assert spare.state is ExecutorState.SPARE and spare.pid is not None and alive(spare.pid)
        assert spare.spare_ms is not None and spare.boot_ms is None  # booted, bound to none
        assert pool.counts()[ExecutorState.SPARE] == 1 and rt.executor_views() == []
        assert os.path.basename(os.readlink(f"/proc/{spare.pid}/cwd")) == ".spares"
    assert not alive(spare.pid)  # stopped with the worker


async def test_a_cold_tenant_is_served_by_the_spare_and_a_new_spare_is_booted(
    app_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("YOKE_DATABASE_URL", app_url)
    monkeypatch.setenv("YOKE_TOKEN", "s3cret")
    monkeypatch.setenv("PGPASSWORD", "s3cret")
    async with running(app_url, pass_env="PGPASSWORD") as (rt, store):
        pool = rt.pool
        assert pool is not None
        await until(lambda: len(warm(pool)) == 1)
        (spare,) = warm(pool)
        seen = await probe(rt, store, "acme")
        assert runs_below(spare.pid or 0, seen) and seen["tenant"] == "acme"
        ex = pool.executor("acme")
        assert ex is spare and ex.state is ExecutorState.READY
        # The bound boot is what the tenant waited: no spawn, no interpreter, no imports of
        # yoke's runtime; those were the spare's own, measured when it was warmed.
        assert set(ex.phases) == {"queue", "app", "handshake"}
        assert ex.boot_ms is not None and ex.spare_ms is not None
        # It became the tenant's executor: the tenant's directory, no credentials, no driver.
        assert not {"YOKE_DATABASE_URL", "YOKE_TOKEN", "PGPASSWORD"} & set(seen["env"])
        assert seen["modules"] == []
        cwd = str(seen["cwd"])
        assert os.path.basename(cwd).startswith("acme-")
        assert oct(os.stat(cwd).st_mode & 0o777) == "0o700"
        await until(lambda: len(warm(pool)) == 1)
        (fresh,) = warm(pool)
        assert fresh.pid not in (None, spare.pid)
        # The next cold tenant gets the new spare.
        seen = await probe(rt, store, "zeta")
        assert runs_below(fresh.pid or 0, seen) and not runs_below(spare.pid or 0, seen)


async def test_an_unbound_spare_killed_is_replaced_and_no_tenant_is_charged(app_url: str) -> None:
    async with running(app_url, backoff=0.2) as (rt, store):
        pool = rt.pool
        assert pool is not None
        await until(lambda: len(warm(pool)) == 1)
        (first,) = warm(pool)
        assert first.pid is not None
        os.kill(first.pid, signal.SIGKILL)
        await until(lambda: [ex.pid for ex in warm(pool)] not in ([], [first.pid]))
        (second,) = warm(pool)
        assert first.state is ExecutorState.FAILED and (first.stop_reason or "").startswith(
            "spare lost"
        )
        assert not alive(first.pid)
        # No tenant was charged: none has an executor or a crash, and the next cold tenant
        # gets the replacement at once.
        assert rt.executor_views() == []
        seen = await probe(rt, store, "acme")
        assert runs_below(second.pid or 0, seen)
        (view,) = rt.executor_views()
        assert view.crashes == 0 and view.tenant == "acme"


async def test_a_worker_killed_with_sigkill_leaves_no_executor_or_spare_alive(
    app_url: str,
) -> None:
    backend = open_actor_store(app_url)
    await backend.open()
    store = backend.actors
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.actors.exec_worker", app_url, "doomed",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert (await asyncio.wait_for(proc.stdout.readline(), 60)).startswith(b"ready")
        rt = runtime("appender")
        rt.attach(store)
        await rt.append("jobs", {"k": "0", "g": 0, "n": 0, "sleep": 30}, tenant="acme")

        async def busy() -> bool:
            rows = await store.executors.list_executors(tenant="acme", limit=10)
            return any(r.state == "READY" and r.active_dispatch for r in rows)

        await until(busy)
        (row,) = await store.executors.list_executors(tenant="acme", limit=10)
        # The tenant's executor (a bound spare) and the spare booted after it to replace it.
        await until(lambda: len(children(proc.pid)) == 2)
        pids = children(proc.pid)
        assert row.pid in pids
        proc.kill()
        await proc.wait()
        killed = time.monotonic()
        await until(lambda: not any(alive(pid) for pid in pids), seconds=2)
        assert time.monotonic() - killed < 2.0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await backend.close()


async def test_no_spares_boots_each_executor_when_needed(app_url: str) -> None:
    # Children of this test process from before (another test's, e.g. multiprocessing's
    # resource tracker, which lives as long as the process) are not this pool's.
    before = set(children(os.getpid()))
    async with running(app_url, warm_spares=0) as (rt, store):
        pool = rt.pool
        assert pool is not None
        seen = await probe(rt, store, "acme")
        ex = pool.executor("acme")
        assert ex is not None and runs_below(ex.pid or 0, seen) and ex.spare_ms is None
        assert {"spawn", "interpreter", "runtime", "app"} <= set(ex.phases)  # a cold boot
        assert pool.spares() == [] and set(children(os.getpid())) - before == {ex.pid}
