"""The store down: a start, restart or resume that cannot reach the store is answered 503 problem
JSON with Retry-After within `YOKE_READY_TIMEOUT`, never later, and nothing is lost once it is
back (a retry with the same Idempotency-Key finds the one start it made; a step done meanwhile
is recorded once the store answers; what ran meanwhile ends and frees its slot). PostgreSQL
behind a TCP proxy that goes silent (a blackhole, as a network partition) or resets every
connection; SQLite with its file locked by another writer."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

import yoke
from tests.actors.pgproxy import PgProxy
from tests.conftest import _truncate
from tests.executions.helpers import count_rows
from tests.server.test_errors import assert_problem
from yoke.config import Settings
from yoke.server import Server

READY = 1.0
SLACK = 0.75  # the answer's own way back through the event loop, on a loaded machine


def _app(url: str) -> yoke.App:
    settings = Settings(
        database_url=url,
        ready_timeout=READY,
        pg_connect_timeout=1.0,
        slot_poll_interval=0.1,
        heartbeat_interval=0.2,
        instance_stale_after=30.0,
        execution_shutdown_timeout=2.0,
    )
    app = yoke.App(settings=settings)
    gate = asyncio.Event()

    @app.workflow()
    async def echo(ctx: yoke.Context, input: Any) -> Any:
        return input

    @app.workflow()
    async def hold(ctx: yoke.Context, input: Any) -> Any:
        await ctx.step("held", gate.wait)
        return "released"

    @app.workflow()
    async def fails(ctx: yoke.Context, input: Any) -> Any:
        raise RuntimeError("resume me")

    app.gate = gate  # type: ignore[attr-defined]
    return app


@asynccontextmanager
async def _served(url: str) -> AsyncIterator[tuple[yoke.App, httpx.AsyncClient]]:
    app = _app(url)
    server = Server(app, tokens=None)
    async with (
        server.lifespan(),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=server), base_url="http://127.0.0.1", timeout=30
        ) as c,
    ):
        try:
            yield app, c
        finally:
            app.gate.set()  # type: ignore[attr-defined]


async def _ready(c: httpx.AsyncClient) -> tuple[str, str]:
    """A held execution (its end is recorded after the outage) and a failed one to resume."""
    held = (await c.post("/v1/starts", json={"workflow": "hold"})).json()
    failed = (await c.post("/v1/starts", json={"workflow": "fails"})).json()
    for _ in range(500):
        ex = (await c.get(f"/v1/executions/{failed['execution_id']}")).json()
        if ex["status"] == "FAILED":
            break
        await asyncio.sleep(0.01)
    return held["execution_id"], failed["execution_id"]


async def _all_answered_503_in_time(c: httpx.AsyncClient, failed: str) -> None:
    async def timed(call: Coroutine[Any, Any, httpx.Response]) -> tuple[httpx.Response, float]:
        t0 = time.monotonic()
        r = await call
        return r, time.monotonic() - t0

    calls = [
        c.post(
            "/v1/starts", json={"workflow": "echo", "input": 1}, headers={"Idempotency-Key": "k1"}
        ),
        c.post("/v1/starts", json={"workflow": "echo", "input": 2}),
        c.post(f"/v1/executions/{failed}/resume"),
        c.post(f"/v1/executions/{failed}/restart", headers={"Idempotency-Key": "k2"}),
    ]
    for r, took in await asyncio.gather(*(timed(call) for call in calls)):
        body = assert_problem(r, 503)
        assert r.headers["retry-after"] == "1", body
        assert took < READY + SLACK, (took, body)


async def _step_done_while_down(app: yoke.App) -> None:
    """The held execution's step ends while the store is down: its record waits for it."""
    app.gate.set()  # type: ignore[attr-defined]
    await asyncio.sleep(0.3)  # the record's first tries fail meanwhile


async def _nothing_lost(app: yoke.App, c: httpx.AsyncClient, url: str, held: str) -> None:
    """Once the store is back: the retried keyed start is the one start of its key, the held
    execution's end is recorded and every slot is free again."""
    deadline = time.monotonic() + 30
    while True:
        r = await c.post(
            "/v1/starts", json={"workflow": "echo", "input": 1}, headers={"Idempotency-Key": "k1"}
        )
        if r.status_code in (200, 201, 202):
            break
        assert r.status_code == 503 and time.monotonic() < deadline, r.text
        await asyncio.sleep(0.1)  # retrying as a client told 503 does
    assert count_rows(url, "yoke_starts", "idempotency_key = 'k1'") == 1
    for _ in range(1000):
        ex = (await c.get(f"/v1/executions/{held}")).json()
        if ex["status"] == "SUCCEEDED":
            break
        await asyncio.sleep(0.02)
    assert ex["status"] == "SUCCEEDED" and ex["output"] == "released"
    assert count_rows(url, "yoke_steps", f"execution_id = '{held}' AND status = 'SUCCEEDED'") == 1
    for _ in range(1000):
        if count_rows(url, "yoke_executions", "status = 'RUNNING'") == 0:
            break
        await asyncio.sleep(0.02)
    assert app.store is not None
    assert await app.store.ledger() == {}


@pytest.mark.postgres
@pytest.mark.parametrize("fault", ["blackhole", "cut"])
async def test_postgres_down_answers_503_in_time_and_loses_nothing(pg_url: str, fault: str) -> None:
    _truncate(pg_url)
    async with PgProxy(pg_url) as proxy, _served(proxy.url) as (app, c):
        held, failed = await _ready(c)
        getattr(proxy, fault)()
        await _all_answered_503_in_time(c, failed)
        await _step_done_while_down(app)
        proxy.restore()
        await _nothing_lost(app, c, pg_url, held)


async def test_sqlite_locked_answers_503_in_time_and_loses_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/down.db"
    async with _served(url) as (app, c):
        held, failed = await _ready(c)
        blocker = sqlite3.connect(tmp_path / "down.db", isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another writer holds the file's write lock
        try:
            await _all_answered_503_in_time(c, failed)
            await _step_done_while_down(app)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        await _nothing_lost(app, c, url, held)


async def test_a_busy_process_is_not_taken_for_a_silent_store(database_url: str) -> None:
    """Starts that wait longer than the bound because this process was busy (its loop blocked,
    no batch sent yet), not because the store was silent, are answered as usual."""
    app = _app(database_url)
    async with app.running():
        ex = app.executions

        def busy() -> None:
            time.sleep(2 * READY)  # blocks the loop: the starts' log batch is not sent yet

        starts = [asyncio.ensure_future(ex.start("echo", i)) for i in range(50)]
        await asyncio.sleep(0)  # they arrive and wait for their first answer
        busy()
        answered = await asyncio.gather(*starts)
        assert {s.status.value for s in answered} == {"GRANTED"}
