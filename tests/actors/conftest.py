"""Fixtures of the actor tests: an `ActorStore` per backend, and a runtime factory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from yoke.actors import ActorRuntime, ActorSettings
from yoke.actors.protocol import ActorStore
from yoke.app import Backend, open_store
from yoke.testing.memstore import MemoryActorStore

ACTOR_TABLES = (
    "stream_events",
    "actor_instances",
    "actor_queues",
    "scheduled_events",
    "runtime_workers",
    "runtime_executors",
    "runtime_spares",
    "yoke_leases",
    "tenant_settings",
    "tenant_running",
    "yoke_event_keys",
    "yoke_tenant_usage",
    "yoke_tenant_rates",
)


def open_actor_store(url: str) -> Backend:
    """The app's store for `url` (not yet opened); its actor verbs are its `actors`."""
    return open_store(url)


def truncate_actor_tables(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {', '.join(ACTOR_TABLES)} RESTART IDENTITY".encode())


FAST: dict[str, Any] = {
    "heartbeat_interval": 0.2,
    "stale_after": 1.0,
    "poll_interval": 0.5,
    "timer_poll_interval": 0.5,
    "shutdown_timeout": 5.0,
}


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def actor_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database per backend ("memory": the in-memory reference store)."""
    if request.param == "memory":
        return "memory:"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/yoke.db"
    url: str = request.getfixturevalue("pg_url")
    truncate_actor_tables(url)
    return url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def app_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database per real backend, for an app (no in-memory store)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/yoke.db"
    url: str = request.getfixturevalue("pg_url")
    truncate_actor_tables(url)
    return url


@pytest.fixture
async def actor_store(actor_db_url: str) -> AsyncIterator[ActorStore]:
    """The store every runtime of a test shares."""
    if actor_db_url == "memory:":
        yield MemoryActorStore()
        return
    store = open_actor_store(actor_db_url)
    await store.open()
    try:
        yield store.actors
    finally:
        await store.close()


MakeRuntime = Callable[..., ActorRuntime]


@pytest.fixture
def make_runtime() -> MakeRuntime:
    def make(worker_id: str = "w1", **settings: Any) -> ActorRuntime:
        values = {**FAST, **settings}
        return ActorRuntime(settings=ActorSettings(worker_id=worker_id, **values))

    return make


async def wait_for(event: asyncio.Event, seconds: float = 20.0) -> None:
    async with asyncio.timeout(seconds):
        await event.wait()
