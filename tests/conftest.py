"""Shared fixtures: a throw-away PostgreSQL database per test session, and backend parameters.

PostgreSQL: `YOKE_TEST_DATABASE_URL` names the server (default postgres@127.0.0.1:5432); the
session creates a database with a random name there and drops it at the end. When the server is
unreachable, PostgreSQL-parametrised tests are skipped, unless `YOKE_REQUIRE_POSTGRES=1` (CI):
then they fail.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from yoke.app import open_store, upgrade
from yoke.store import Store

PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/postgres"
YOKE_TABLES = (
    "yoke_starts",
    "yoke_executions",
    "yoke_steps",
    "yoke_ledger",
    "yoke_control_log",
    "yoke_instances",
    "yoke_idempotency",
    "yoke_tenant_usage",
    "yoke_tenant_rates",
    "tenant_settings",
    "yoke_requests",
    "yoke_schedules",
    "yoke_signals",
)


def _with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


@pytest.fixture(scope="session")
def pg_server() -> str:
    url = os.environ.get("YOKE_TEST_DATABASE_URL", PG_DEFAULT)
    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        message = f"PostgreSQL unreachable at {url}: {exc}"
        if os.environ.get("YOKE_REQUIRE_POSTGRES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return url


@pytest.fixture(scope="session")
def pg_databases(pg_server: str) -> Iterator[Callable[[], str]]:
    """A factory of fresh, empty databases on the test server; all dropped at session end."""
    created: list[str] = []

    def make() -> str:
        name = f"yoke_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"'.encode())
        created.append(name)
        return _with_db(pg_server, name)

    yield make
    with psycopg.connect(pg_server, autocommit=True) as conn:
        for name in created:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


@pytest.fixture(scope="session")
def pg_url(pg_databases: Callable[[], str]) -> str:
    """The session's shared, migrated PostgreSQL database (emptied before each test using it)."""
    url = pg_databases()
    asyncio.run(upgrade(url))
    return url


def _truncate(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {', '.join(YOKE_TABLES)} RESTART IDENTITY".encode())


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of each backend, as a YOKE_DATABASE_URL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/yoke.db"
    url: str = request.getfixturevalue("pg_url")
    _truncate(url)
    return url


@pytest.fixture
async def pg_executions(pg_databases: Callable[[], str]) -> AsyncIterator[tuple[Store, str]]:
    """The execution verbs of a store on a fresh PostgreSQL database, and its URL (for a
    look at the rows themselves)."""
    url = pg_databases()
    s = open_store(url)
    await s.open()
    try:
        yield s.executions, url
    finally:
        await s.close()


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    s = open_store(database_url)
    await s.open()
    try:
        yield s.executions
    finally:
        await s.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Shortly before pytest-timeout fails a hung test, print where every asyncio task waits:
    the timeout's own traceback shows only the event loop's select()."""
    marker = item.get_closest_marker("timeout")
    configured = item.config.getini("timeout")
    limit = float(marker.args[0] if marker and marker.args else configured)
    timer = threading.Timer(max(limit - 5, limit * 0.9), _print_waiting_tasks)
    timer.daemon = True
    timer.start()
    try:
        return (yield)
    finally:
        timer.cancel()


def _print_waiting_tasks() -> None:
    loops = [o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop)]
    for loop in loops:
        if not loop.is_running():
            continue
        for task in list(asyncio.all_tasks(loop)):
            print(f"--- still waiting: {task!r}", file=sys.stderr)
            task.print_stack(file=sys.stderr)
