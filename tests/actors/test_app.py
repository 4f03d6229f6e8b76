"""`App` wiring: `@app.actor`, `app.append`, and the actor worker inside `app.running()`."""

from __future__ import annotations

import asyncio

import pytest

import yoke
from tests.actors.conftest import FAST, open_actor_store, wait_for
from yoke.actors import ActorSettings, Event
from yoke.config import Settings


async def test_app_runs_actors_and_their_timers(app_url: str) -> None:
    app = yoke.App(
        settings=Settings(database_url=app_url),
        actor_settings=ActorSettings(worker_id="app-worker", **FAST),
    )
    reminded = asyncio.Event()

    @app.actor(subscribe=["carts"], key="cart_id", queue=yoke.Queue(group_by="line"))
    async def cart(ctx: yoke.ActorCtx, event: Event) -> None:
        if event.data.get("kind") == "reminder":
            reminded.set()
            return
        new = await ctx.state.update(lambda s: {**s, "items": s.get("items", 0) + 1})
        if new["items"] == 3:
            reminder = {"cart_id": ctx.instance_id, "kind": "reminder"}
            await ctx.schedule("carts", reminder, delay=0.05)

    async with app.running():
        await app.append("carts", {"cart_id": "c1", "line": "a"}, tenant="acme")
        await app.append_many("carts", [{"cart_id": "c1", "line": "b"}] * 2, tenant="acme")
        await wait_for(reminded)
        view = await app.actors.instance("cart", "c1", tenant="acme")
        assert view.state == {"items": 3} and view.worker_id == "app-worker"
    with pytest.raises(yoke.NotRunning):
        await app.append("carts", {"cart_id": "c1"})


async def test_an_app_without_actors_runs_no_worker(app_url: str) -> None:
    app = yoke.App(settings=Settings(database_url=app_url))
    async with app.running():
        assert app.actors.drain is None
        assert await app.append("nobody-listens", {"x": 1}) >= 1


async def test_run_worker_runs_until_stopped(app_url: str) -> None:
    from yoke.app import run_worker

    app = yoke.App(
        settings=Settings(database_url=app_url),
        actor_settings=ActorSettings(worker_id="cli-worker", **FAST),
    )
    seen = asyncio.Event()

    @app.actor(subscribe=["s"], key="k")
    async def a(ctx: yoke.ActorCtx, event: Event) -> None:
        seen.set()

    # Appended by another process before the worker boots: ownerless, taken over at boot.
    client = open_actor_store(app_url)
    await client.open()
    try:
        event = app.actors.registry.new_event("s", {"k": 1}, tenant="default")
        await client.actors.append_events([event], owner=None, now=0.0)
    finally:
        await client.close()
    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(app, stop=stop))
    try:
        await wait_for(seen)
    finally:
        stop.set()
        await worker
    assert app.store is None  # shut down and closed
