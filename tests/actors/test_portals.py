"""Portals (`@app.portal`): an app's own ingress loops. Their appends are processed (and wake
the tenants they reach, in executor mode); one that raises restarts with backoff; by default
one runs on exactly one live worker and moves when that worker stops; `per_worker=True` runs
on every worker."""

from __future__ import annotations

import asyncio
import contextlib

from tests.actors.conftest import MakeRuntime
from tests.actors.executors import runtime as exec_runtime
from tests.actors.executors import state, until
from yoke.actors import ActorCtx, ActorRuntime, Event, PortalCtx
from yoke.actors.portal_runner import RESTART
from yoke.actors.protocol import ActorStore


def define_sink(rt: ActorRuntime, seen: list[int]) -> None:
    @rt.actor(subscribe=["feed"], key="k")
    async def sink(ctx: ActorCtx, event: Event) -> None:
        seen.append(event.data["n"])


async def test_a_portals_appends_are_processed(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    rt = make_runtime("w1")
    seen: list[int] = []
    define_sink(rt, seen)

    @rt.portal()
    async def feeder(ctx: PortalCtx) -> None:
        for n in range(5):
            await ctx.append("feed", {"k": "x", "n": n}, tenant="acme")
        await ctx.append_many("feed", [{"k": "y", "n": n} for n in range(5, 10)], tenant="acme")
        await ctx.stopping.wait()

    async with rt.running(actor_store):
        await until(lambda: len(seen) == 10)
    assert sorted(seen) == list(range(10))


async def test_a_portal_that_raises_is_restarted_with_backoff(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    rt = make_runtime("w1")
    seen: list[int] = []
    define_sink(rt, seen)
    runs: list[int] = []

    @rt.portal("flaky", per_worker=True)
    async def flaky(ctx: PortalCtx) -> None:
        runs.append(ctx.run)
        if ctx.run < 3:
            raise RuntimeError(f"boom {ctx.run}")
        await ctx.append("feed", {"k": "x", "n": ctx.run}, tenant="acme")
        await ctx.stopping.wait()

    loop = asyncio.get_running_loop()
    began = loop.time()
    async with rt.running(actor_store):
        await until(lambda: seen == [3])
        took = loop.time() - began
    assert runs == [1, 2, 3]
    # Two pauses, doubling from 0.1 s, each drawn with jitter below its full length.
    assert took >= (0.1 + 0.2) * (1 - RESTART.jitter)


async def test_a_portal_runs_on_one_worker_at_a_time_and_moves_when_it_stops(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    running: dict[str, int] = {}
    most = 0
    everywhere: set[str] = set()

    def define(rt: ActorRuntime) -> None:
        @rt.portal("single")
        async def single(ctx: PortalCtx) -> None:
            nonlocal most
            running[ctx.worker_id] = running.get(ctx.worker_id, 0) + 1
            most = max(most, sum(running.values()))
            try:
                await ctx.stopping.wait()
            finally:
                running[ctx.worker_id] -= 1

        @rt.portal("each", per_worker=True)
        async def each(ctx: PortalCtx) -> None:
            everywhere.add(ctx.worker_id)
            await ctx.stopping.wait()

    w1, w2 = make_runtime("w1"), make_runtime("w2")
    define(w1)
    define(w2)
    async with w1.running(actor_store):
        await until(lambda: running.get("w1") == 1)
        async with w2.running(actor_store):
            await until(lambda: everywhere == {"w1", "w2"})
            await asyncio.sleep(0.6)  # a few of w2's tries at the lease: it must not run
            assert running.get("w2", 0) == 0
        await asyncio.sleep(0.1)
    assert most == 1
    # The holder stops while the other worker runs: the other takes the portal over.
    running.clear()
    w3, w4 = make_runtime("w3"), make_runtime("w4")
    define(w3)
    define(w4)
    async with contextlib.AsyncExitStack() as first, contextlib.AsyncExitStack() as second:
        await first.enter_async_context(w3.running(actor_store))
        await until(lambda: running.get("w3") == 1)
        await second.enter_async_context(w4.running(actor_store))
        await until(lambda: "w4" in everywhere)
        await first.aclose()  # w3 stops: its lease is released at once
        assert running.get("w3") == 0
        await until(lambda: running.get("w4") == 1, seconds=5)
    assert most == 1


async def test_a_portals_appends_wake_the_tenants_executor(app_url: str) -> None:
    from tests.actors.conftest import open_actor_store

    backend = open_actor_store(app_url)
    await backend.open()
    store = backend.actors
    rt = exec_runtime("w1")

    @rt.portal()
    async def counter(ctx: PortalCtx) -> None:
        await ctx.append_many("counts", [{"k": "p"}] * 10, tenant="portal-tenant")
        await ctx.stopping.wait()

    try:
        async with rt.running(store):

            async def counted() -> bool:
                return (await state(store, "portal-tenant", "count", "p")).get("n") == 10

            await until(counted)
            (view,) = rt.executor_views()
            assert view.tenant == "portal-tenant" and view.dispatches == 10
    finally:
        await backend.close()
