"""`process()` in per-tenant executor processes (`executors="process"`), on both stores, with
real processes: isolation from the worker, `ctx.state.update` through the socket, idle stop."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from tests.actors import user_app
from tests.actors.conftest import open_actor_store
from tests.actors.executors import alive, identity, running, runs_below, runtime, state, until
from yoke.actors.executor.process import ExecutorProcess, ExecutorState

ROOT = Path(__file__).resolve().parents[2]


async def test_each_tenant_runs_in_a_process_of_its_own_without_credentials(
    app_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("YOKE_DATABASE_URL", app_url)
    monkeypatch.setenv("YOKE_TOKEN", "s3cret")
    monkeypatch.setenv("PGPASSWORD", "s3cret")
    async with running(app_url, pass_env="PGPASSWORD,HOME_COLOR") as (rt, store):
        for tenant in ("acme", "zeta"):
            await rt.append("probes", {"k": "p"}, tenant=tenant)
        seen = {}
        for tenant in ("acme", "zeta"):

            async def probed(t: str = tenant) -> bool:
                return "seen" in await state(store, t, "probe", "p")

            await until(probed)
            seen[tenant] = (await state(store, tenant, "probe", "p"))["seen"]
        views = {v.tenant: v for v in rt.executor_views()}
        acme, zeta = seen["acme"], seen["zeta"]
        assert runs_below(views["acme"].pid or 0, acme)  # each in its own executor's tree
        assert runs_below(views["zeta"].pid or 0, zeta)
    assert acme["tenant"] == "acme" and zeta["tenant"] == "zeta"
    me = identity(os.getpid())
    assert len({(s["pidns"], s["pid"]) for s in (acme, zeta)} | {me}) == 3  # one per tenant
    assert views["acme"].pid != views["zeta"].pid
    for s in (acme, zeta):
        assert not {"YOKE_DATABASE_URL", "YOKE_TOKEN", "PGPASSWORD"} & set(s["env"])
        assert s["modules"] == []  # no store backend, no driver, no server
    assert acme["cwd"] != zeta["cwd"] and Path(acme["cwd"]).parent == Path(zeta["cwd"]).parent
    assert oct(os.stat(acme["cwd"]).st_mode & 0o777) == "0o700"
    # Shut down with the worker, their whole trees.
    assert not alive(views["acme"].pid or 0) and not alive(views["zeta"].pid or 0)


async def test_the_executor_of_a_yoke_app_loads_none_of_the_engines(app_url: str) -> None:
    """An app as users write it (`yoke.App()` with a workflow, an actor, a portal): its
    executor imports the app's module to find the actor, and with it none of the engines the
    worker runs (their import was most of a cold boot)."""
    async with running(app_url, app_spec=user_app.SPEC, registry=user_app.app.actor_registry) as (
        rt,
        store,
    ):
        await rt.append("reports", {"k": "r"}, tenant="acme")

        async def reported() -> bool:
            return "loaded" in await state(store, "acme", "report", "r")

        await until(reported)
        seen = await state(store, "acme", "report", "r")
        (view,) = rt.executor_views()
        assert runs_below(view.pid or 0, seen)  # in the executor, not in the worker
    assert seen["loaded"] == []


async def test_state_updates_of_100_concurrent_events_lose_nothing(app_url: str) -> None:
    async with running(app_url) as (rt, store):
        for tenant in ("acme", "zeta"):
            await rt.append_many("counts", [{"k": k} for k in ("a", "b") for _ in range(100)],
                                 tenant=tenant)  # fmt: skip

        drain = rt.drain
        assert drain is not None

        async def counted() -> bool:
            got = [await state(store, t, "count", k) for t in ("acme", "zeta") for k in "ab"]
            # A call's state write lands before its end is seen here: wait for both.
            return all(s.get("n") == 100 for s in got) and drain.stats().processed == 400

        await until(counted)
        views = rt.executor_views()
        assert {v.tenant for v in views} == {"acme", "zeta"}
        assert all(v.dispatches == 200 and v.crashes == 0 for v in views)


async def test_an_idle_executor_stops_and_the_next_event_boots_a_new_one(app_url: str) -> None:
    async with running(app_url, idle_secs=0.5) as (rt, store):
        await rt.append("jobs", {"k": "a", "g": 0, "n": 1}, tenant="acme")

        async def done(n: int) -> bool:
            return n in (await state(store, "acme", "job", "a")).get("done", [])

        await until(lambda: done(1))
        (first,) = rt.executor_views()
        assert first.pid is not None

        def stopped() -> bool:
            (v,) = rt.executor_views()
            return v.state.value == "STOPPED"

        await until(stopped, seconds=10)
        (idle,) = rt.executor_views()
        assert idle.stop_reason == "idle" and idle.pid == first.pid
        await until(lambda: not alive(first.pid or 0), seconds=5)
        await rt.append("jobs", {"k": "a", "g": 0, "n": 2}, tenant="acme")
        await until(lambda: done(2))
        (second,) = rt.executor_views()
        assert second.state.value == "READY" and second.pid != first.pid
        lifecycle = rt.lifecycle
        assert lifecycle is not None and lifecycle.stats().stops == 1


async def test_a_worker_killed_with_sigkill_leaves_no_executor_alive(app_url: str) -> None:
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
        tenants = ("a", "b", "c")
        for tenant in tenants:
            await rt.append_many(
                "jobs", [{"k": "0", "g": 0, "n": n, "sleep": 5} for n in range(4)], tenant=tenant
            )

        async def all_ready() -> bool:
            rows = await store.executors.list_executors(tenant=None, limit=10)
            return len([r for r in rows if r.state == "READY" and r.active_dispatch]) == 3

        await until(all_ready)
        rows = await store.executors.list_executors(tenant=None, limit=10)
        pids = [r.pid for r in rows if r.tenant is not None]
        assert len(pids) == 3 and all(pid is not None and alive(pid) for pid in pids)
        pids += [r.pid for r in rows if r.tenant is None and r.state == "SPARE"]  # warm spares
        proc.kill()
        await proc.wait()
        killed = time.monotonic()
        await until(lambda: not any(alive(pid or 0) for pid in pids), seconds=2)
        assert time.monotonic() - killed < 2.0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await backend.close()


async def test_a_stop_is_refused_while_the_tenant_has_work(app_url: str) -> None:
    """The lifecycle decides on an observation; the pool checks again, with no await between
    the check and the stop, that nothing came in since (held by the drain, or running)."""
    async with running(app_url) as (rt, store):
        pool = rt.pool
        assert pool is not None
        await rt.append("jobs", {"k": "0", "g": 0, "n": 0, "sleep": 1.0}, tenant="acme")

        def running_one() -> bool:
            ex = pool.executor("acme")
            return ex is not None and ex.active == 1

        await until(running_one)
        assert not pool.stop("acme", "idle", held=0)  # a call runs
        ex = pool.executor("acme")
        assert ex is not None and ex.state.value == "READY"

        async def done() -> bool:
            return (await state(store, "acme", "job", "0")).get("done") == [0]

        await until(done)
        await until(lambda: ex.active == 0)
        assert not pool.stop("acme", "idle", held=3)  # the drain holds some of its events
        assert ex.state is ExecutorState.READY
        assert pool.stop("acme", "idle", held=0)
        assert phase(ex) is ExecutorState.DRAINING and not pool.ready("acme")
        await until(lambda: ex.state.value == "STOPPED")
        assert ex.stop_reason == "idle"


def phase(ex: ExecutorProcess) -> ExecutorState:
    return ex.state  # read afresh (a state seen before an action says nothing of after)


async def test_a_cold_tenant_is_warm_before_its_timer_falls_due(app_url: str) -> None:
    """The schedule wake poll starts the executor of a tenant whose timer falls due within a
    poll and a boot, so the fired event does not wait for a boot."""
    async with running(app_url, idle_secs=0.3) as (rt, store):
        await rt.append("jobs", {"k": "0", "g": 0, "n": 0}, tenant="acme")  # its instance

        def stopped() -> bool:
            views = rt.executor_views()
            return bool(views) and views[0].state.value == "STOPPED"

        await until(stopped, seconds=20)
        (cold,) = rt.executor_views()
        fire_at = rt.wall() + 4.0  # past the pre-warm horizon: a poll (0.5 s) and a boot (2 s)
        await rt.schedule("jobs", {"k": "0", "g": 0, "n": 1}, tenant="acme", fire_at=fire_at)

        def warm() -> bool:
            views = rt.executor_views()
            return views[0].pid != cold.pid and views[0].state.value == "READY"

        await until(warm, seconds=20)
        warm_at = rt.wall()
        (view,) = rt.executor_views()

        async def fired() -> bool:
            return 1 in (await state(store, "acme", "job", "0")).get("done", [])

        await until(fired, seconds=20)
        lifecycle = rt.lifecycle
        assert lifecycle is not None and lifecycle.stats().starts == 2
    assert warm_at < fire_at  # READY before the timer fell due
    assert view.started_at < fire_at - 0.5  # started ahead of it, by the pre-warm
