"""Ready means the store answers: `/readyz` is 503 with the reason, within its timeout, while
PostgreSQL is unreachable (a real outage through a TCP proxy), and 200 again once it is back;
`/healthz` (alive) answers throughout."""

from __future__ import annotations

import time

import httpx
import pytest

import yoke
from tests.actors.pgproxy import PgProxy
from tests.server.test_errors import assert_problem
from yoke.config import Settings
from yoke.server import Server


@pytest.mark.postgres
async def test_readyz_follows_the_store(pg_url: str) -> None:
    async with PgProxy(pg_url) as proxy:
        settings = Settings(database_url=proxy.url, ready_timeout=1.0, pg_connect_timeout=1.0)
        server = Server(yoke.App(settings=settings), tokens=None)
        async with (
            server.lifespan(),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=server), base_url="http://127.0.0.1"
            ) as c,
        ):
            assert (await c.get("/readyz")).status_code == 200
            proxy.cut()
            t0 = time.monotonic()
            r = await c.get("/readyz")
            body = assert_problem(r, 503)
            assert "store" in body["detail"] and r.headers["retry-after"]
            assert time.monotonic() - t0 < 10  # the ready timeout, not the driver's own
            assert (await c.get("/healthz")).status_code == 200
            proxy.restore()
            deadline = time.monotonic() + 20
            while (await c.get("/readyz")).status_code != 200:
                assert time.monotonic() < deadline, "not ready again after the store came back"
                await _pause()


async def _pause() -> None:
    import asyncio

    await asyncio.sleep(0.1)  # polling a probe, as a load balancer does


async def test_readyz_is_200_on_a_working_sqlite_store(tmp_path: object) -> None:
    server = Server(yoke.App(f"sqlite:///{tmp_path}/r.db"), tokens=None)
    async with (
        server.lifespan(),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=server), base_url="http://127.0.0.1"
        ) as c,
    ):
        r = await c.get("/readyz")
        assert r.status_code == 200 and r.json()["status"] == "ready"
