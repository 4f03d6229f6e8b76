"""The fault proxy's modes against a real PostgreSQL: blackhole holds (and later delivers),
reset aborts, drop_upstream ends the server's side only, upstream_ports names the sessions."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from tests.actors.pgproxy import PgProxy

pytestmark = pytest.mark.postgres


async def connect(url: str) -> psycopg.AsyncConnection[tuple[object, ...]]:
    return await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10)


async def one(conn: psycopg.AsyncConnection[tuple[object, ...]], sql: str) -> object:
    row = await (await conn.execute(sql.encode())).fetchone()
    assert row is not None
    return row[0]


async def test_a_blackhole_holds_queries_and_new_connections_until_restored(
    pg_server: str,
) -> None:
    async with PgProxy(pg_server) as proxy:
        conn = await connect(proxy.url)
        proxy.blackhole()
        query = asyncio.create_task(one(conn, "SELECT 41 + 1"))
        opening = asyncio.create_task(connect(proxy.url))
        done, _ = await asyncio.wait({query, opening}, timeout=0.5)
        assert done == set()  # silence, no error: the client cannot tell
        assert "blackholed" in repr(proxy)
        proxy.restore()
        assert await asyncio.wait_for(query, 10) == 42
        late = await asyncio.wait_for(opening, 10)
        assert await one(late, "SELECT 1") == 1
        await conn.close()
        await late.close()


async def test_reset_aborts_open_connections_and_lets_new_ones_through(pg_server: str) -> None:
    async with PgProxy(pg_server) as proxy:
        conn = await connect(proxy.url)
        assert await one(conn, "SELECT 1") == 1
        proxy.reset()
        with pytest.raises(psycopg.OperationalError):
            await one(conn, "SELECT 1")
        again = await connect(proxy.url)
        assert await one(again, "SELECT 2") == 2
        await again.close()


async def test_upstream_ports_name_the_sessions_and_drop_upstream_ends_them(
    pg_server: str,
) -> None:
    async with PgProxy(pg_server) as proxy:
        conn = await connect(proxy.url)
        pid = await one(conn, "SELECT pg_backend_pid()")
        port = await one(conn, "SELECT inet_client_port()")
        assert proxy.upstream_ports() == {port}
        async with await connect(pg_server) as direct:
            proxy.blackhole()
            proxy.drop_upstream()  # as the server's keepalive giving up on a silent client
            for _ in range(200):
                alive = await one(
                    direct, f"SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}"
                )
                if alive == 0:
                    break
                await asyncio.sleep(0.05)
            assert alive == 0  # the server ended the session
        query = asyncio.create_task(one(conn, "SELECT 1"))
        done, _ = await asyncio.wait({query}, timeout=0.3)
        assert done == set()  # the client is still told nothing
        proxy.restore()
        with pytest.raises(psycopg.OperationalError):
            await asyncio.wait_for(query, 10)
        await conn.close()
