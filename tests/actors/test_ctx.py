"""`ctx` inside real actors run by `yoke.App` (SQLite and PostgreSQL): `emit`, `state.get`,
`schedule(at=...)`; and the worker's settings read from the environment."""

from __future__ import annotations

import asyncio
import re
import socket
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import yoke
from tests.actors.conftest import FAST, wait_for
from yoke.actors import ActorCtx, ActorSettings, Event
from yoke.config import Settings
from yoke.errors import BadValue


def make_app(url: str) -> yoke.App:
    return yoke.App(
        settings=Settings(database_url=url),
        actor_settings=ActorSettings(worker_id="ctx-worker", **FAST),
    )


async def test_emit_reaches_the_subscribers_of_the_stream(app_url: str) -> None:
    app = make_app(app_url)
    emitted: list[int] = []
    audited: list[tuple[str, str, int, Any]] = []
    done = asyncio.Event()

    @app.actor(subscribe=["orders"], key="order_id")
    async def order(ctx: ActorCtx, event: Event) -> None:
        data = {"order_id": ctx.instance_id, "total": event.data["total"]}
        emitted.append(await ctx.emit("audit", data))

    @app.actor(subscribe=["audit"], key="order_id")
    async def audit(ctx: ActorCtx, event: Event) -> None:
        audited.append((ctx.tenant, event.stream, event.event_id, event.data))
        done.set()

    async with app.running():
        await app.append("orders", {"order_id": "o1", "total": 12}, tenant="acme")
        await wait_for(done)
        view = await app.actors.instance("audit", "o1", tenant="acme")
    # Same tenant as the emitting call; the id `emit` returned is the event's.
    assert audited == [("acme", "audit", emitted[0], {"order_id": "o1", "total": 12})]
    assert view.worker_id == "ctx-worker"


async def test_state_get_returns_the_state_after_each_update(app_url: str) -> None:
    seen: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = []

    def counter_app() -> tuple[yoke.App, asyncio.Event]:
        app = make_app(app_url)
        done = asyncio.Event()

        @app.actor(subscribe=["ticks"], key="k")
        async def counter(ctx: ActorCtx, event: Event) -> None:
            before = ctx.state.get()
            before["scribble"] = True  # a copy: changing it changes nothing
            after = await ctx.state.update(lambda s: {**s, "n": s.get("n", 0) + 1})
            seen.append((before, after, ctx.state.get()))
            if after["n"] == event.data["last"]:
                done.set()

        return app, done

    app, done = counter_app()
    async with app.running():
        await app.append_many("ticks", [{"k": "c", "last": 3}] * 3)
        await wait_for(done)
    assert seen == [
        ({"scribble": True}, {"n": 1}, {"n": 1}),
        ({"n": 1, "scribble": True}, {"n": 2}, {"n": 2}),
        ({"n": 2, "scribble": True}, {"n": 3}, {"n": 3}),
    ]
    # A new worker reads the stored state before its first update.
    seen.clear()
    app, done = counter_app()
    async with app.running():
        await app.append("ticks", {"k": "c", "last": 4})
        await wait_for(done)
    assert seen == [({"n": 3, "scribble": True}, {"n": 4}, {"n": 4})]


async def test_schedule_at_fires_at_that_time_not_before(app_url: str) -> None:
    app = make_app(app_url)
    rang: dict[str, tuple[float, float]] = {}  # how -> (due, when process() got it)
    done = asyncio.Event()

    @app.actor(subscribe=["set"], key="k")
    async def alarm(ctx: ActorCtx, event: Event) -> None:
        now = time.time()
        # `at` as epoch seconds, and as an aware datetime (in another zone than UTC's).
        number = now + 0.6
        await ctx.schedule("ring", {"k": "number", "due": number}, at=number)
        moment = datetime.fromtimestamp(now + 0.3, UTC).astimezone()
        await ctx.schedule("ring", {"k": "datetime", "due": moment.timestamp()}, at=moment)

    @app.actor(subscribe=["ring"], key="k")
    async def ring(ctx: ActorCtx, event: Event) -> None:
        rang[ctx.instance_id] = (event.data["due"], time.time())
        if len(rang) == 2:
            done.set()

    async with app.running():
        await app.append("set", {"k": "a"})
        await wait_for(done)
    for how, (due, got) in rang.items():
        # Not before its time; on time within bounds generous for a loaded machine.
        assert due <= got <= due + 2.0, how
    assert rang["datetime"][1] < rang["number"][1]  # in the order of their times


# -- settings from the environment ------------------------------------------------------------


def test_worker_id_and_concurrency_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("YOKE_WORKER_ID", "  box-7 ")
    monkeypatch.setenv("YOKE_WORKER_CONCURRENCY", "3")
    s = ActorSettings.from_env()
    assert (s.worker_id, s.concurrency) == ("box-7", 3)
    # An App given no actor settings reads them there.
    assert yoke.App("sqlite:///unused.db").actors.worker_id == "box-7"
    # Overrides win over the environment.
    assert ActorSettings.from_env(concurrency=5).concurrency == 5


def test_the_default_worker_id_is_hostname_and_a_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("YOKE_WORKER_ID", raising=False)
    monkeypatch.delenv("YOKE_WORKER_CONCURRENCY", raising=False)
    a, b = ActorSettings.from_env(), ActorSettings.from_env()
    host = socket.gethostname()
    for s in (a, b):
        assert s.worker_id.startswith(f"{host}-")
        uuid.UUID(s.worker_id.removeprefix(f"{host}-"))  # raises if it is not a uuid
    assert a.worker_id != b.worker_id  # drawn per settings value
    assert a.concurrency == 64
    # Empty counts as unset.
    assert ActorSettings.from_env({"YOKE_WORKER_ID": ""}).worker_id.startswith(f"{host}-")


@pytest.mark.parametrize("raw", ["many", "0", "-2", "1.5"])
def test_a_bad_worker_concurrency_is_refused(raw: str) -> None:
    with pytest.raises(BadValue, match=re.escape("concurrency") + "|YOKE_WORKER_CONCURRENCY"):
        ActorSettings.from_env({"YOKE_WORKER_CONCURRENCY": raw})


async def test_the_worker_concurrency_from_the_environment_caps_process_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("YOKE_WORKER_CONCURRENCY", "2")
    app = yoke.App(f"sqlite:///{tmp_path}/yoke.db")
    running = peak = finished = 0
    done = asyncio.Event()

    # Six instances, so only the worker-wide cap (not a per-group one) holds them back.
    @app.actor(subscribe=["s"], key="k")
    async def slow(ctx: ActorCtx, event: Event) -> None:
        nonlocal running, peak, finished
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)  # the work, long enough for the others to be ready
        running -= 1
        finished += 1
        if finished == 6:
            done.set()

    async with app.running():
        await app.append_many("s", [{"k": i} for i in range(6)])
        await wait_for(done)
    assert peak == 2
