"""Wake-ups: new timers and new rows are acted on at once, not at the next backup poll.

Every other actor test polls every 0.5 s, so it would pass without any wake-up. Here the backup
polls and the heartbeat are 30 s and the deadlines 2 s: only a wake can meet them. The worker is
a `yoke.App`. On PostgreSQL the timers and events come from another runtime on a store of its
own (as from another process), so only `LISTEN yoke_schedule_change` / `yoke_actor_queue` can
wake the worker; on SQLite, which has no notifications, they come from the worker's own app
(the in-process wakes; another process's rows wait for the backup poll there, by design).
Each test first waits until the loop under test is asleep: the timer loop holding nothing (on
PostgreSQL, after a read that followed the listener's connection), the drain after an empty
claim that began once the previous event was done. Otherwise a read or a claim it was doing
anyway could find the new timer or row, and the test would pass without the wake.

Checked by hand: with the LISTEN in `PostgresStore.listen_actor_wakeups` removed, or the
`wake()` calls in `ActorRuntime.append_many` / `schedule_many` removed, these tests time out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest

import yoke
from tests.actors.conftest import open_actor_store, wait_for
from yoke.actors import ActorCtx, ActorRuntime, ActorSettings, Event
from yoke.config import Settings
from yoke.store.actorverbs import ActorVerbs
from yoke.store.postgres import PostgresStore

SLOW: dict[str, Any] = {
    "heartbeat_interval": 30.0,
    "stale_after": 90.0,
    "poll_interval": 30.0,
    "timer_poll_interval": 30.0,
    "shutdown_timeout": 5.0,
}
PROMPT = 2.0  # seconds: generous for a loaded machine, far below the 30 s polls


@pytest.fixture
def url(app_url: str) -> str:
    return app_url


Seen = list[tuple[float, Event]]


def define(rt: ActorRuntime | yoke.App, seen: Seen, arrived: asyncio.Event) -> None:
    """The one actor of these tests: records when each event reached `process()`."""

    @rt.actor("ring", subscribe=["ring"], key="k")
    async def ring(ctx: ActorCtx, event: Event) -> None:
        seen.append((time.time(), event))
        arrived.set()


@asynccontextmanager
async def client_of(url: str, worker: yoke.App) -> AsyncIterator[ActorRuntime]:
    """Who appends and schedules: on PostgreSQL a runtime of its own on another store, which
    runs no worker (so nothing in this process wakes the worker); on SQLite the worker's."""
    if not url.startswith("postgresql"):
        yield worker.actors
        return
    client = ActorRuntime(settings=ActorSettings(worker_id="client", **SLOW))
    define(client, [], asyncio.Event())  # for the fan-out of its appends only
    store = open_actor_store(url)
    await store.open()
    client.attach(store.actors)
    try:
        yield client
    finally:
        await store.close()


async def asleep(worker: yoke.App, url: str) -> None:
    """Until the timer loop sleeps holding nothing. On PostgreSQL, after a read that followed
    the listener's connection too (it wakes the loops on connecting): from then on, a NOTIFY
    is delivered."""
    reads = 2 if url.startswith("postgresql") else 1
    async with asyncio.timeout(10):
        while True:
            stats = worker.actors.timer_stats()
            if stats is not None and stats.waiting and not stats.held and stats.reads >= reads:
                return
            await asyncio.sleep(0.01)  # polling a condition, with a deadline


class Claims:
    """Every `claim_next` of the stores of a test (only the worker's drain claims): when each
    began, and how many rows it got."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.done: list[tuple[float, int]] = []
        self.running = 0
        self.changed = asyncio.Event()
        real = ActorVerbs.claim_next

        async def claim_next(store: ActorVerbs, *args: Any, **kwargs: Any) -> Any:
            began = time.monotonic()
            self.running += 1
            try:
                rows = await real(store, *args, **kwargs)
            finally:
                self.running -= 1
            self.done.append((began, len(rows)))
            self.changed.set()
            return rows

        monkeypatch.setattr(ActorVerbs, "claim_next", claim_next)

    async def asleep(self, since: float = 0.0) -> None:
        """Until the drain's last claim began after `since` and came back empty: it waits for
        a wake (or its 30 s poll) now."""
        async with asyncio.timeout(10):
            while not self._asleep(since):
                self.changed.clear()
                await self.changed.wait()

    def _asleep(self, since: float) -> bool:
        if self.running or not self.done:
            return False
        began, rows = self.done[-1]
        return began >= since and rows == 0


def worker_app(url: str) -> yoke.App:
    return yoke.App(
        settings=Settings(database_url=url),
        actor_settings=ActorSettings(worker_id="worker", **SLOW),
    )


async def test_a_timer_scheduled_elsewhere_fires_on_time(url: str) -> None:
    worker = worker_app(url)
    seen: Seen = []
    arrived = asyncio.Event()
    define(worker, seen, arrived)
    async with worker.running(), client_of(url, worker) as client:
        await asleep(worker, url)
        at = time.time() + 0.1
        await client.schedule("ring", {"k": "a"}, fire_at=at)
        await wait_for(arrived, 0.1 + PROMPT)
        (reached, event), *_ = seen
        assert event.data == {"k": "a"} and reached >= at


async def test_an_event_appended_elsewhere_is_processed_at_once(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    claims = Claims(monkeypatch)
    worker = worker_app(url)
    seen: Seen = []
    arrived = asyncio.Event()
    define(worker, seen, arrived)
    async with worker.running(), client_of(url, worker) as client:
        await asleep(worker, url)
        await claims.asleep()
        # A new instance: on PostgreSQL it has no owner until the worker, poked by the
        # NOTIFY, takes it over (the heartbeat would wait 30 s).
        await client.append("ring", {"k": "new"})
        await wait_for(arrived, PROMPT)
        # An instance the worker owns now: its rows wake the drain directly.
        await claims.asleep(since=time.monotonic())
        arrived.clear()
        await client.append("ring", {"k": "new", "n": 2})
        await wait_for(arrived, PROMPT)
    assert [e.data for _, e in seen] == [{"k": "new"}, {"k": "new", "n": 2}]


# -- the listener's outages -------------------------------------------------------------------


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def at(self, level: int) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno == level]


@asynccontextmanager
async def listening(store: PostgresStore, on_queue: Callable[[], None]) -> AsyncIterator[_Lines]:
    lines = _Lines()
    logger = logging.getLogger("yoke.store.postgres")
    logger.addHandler(lines)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    task = asyncio.create_task(store.listen_actor_wakeups(on_queue, lambda: None, lambda: None))
    try:
        yield lines
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        logger.removeHandler(lines)
        logger.setLevel(old_level)


@pytest.mark.postgres
async def test_the_listener_logs_an_outage_once_and_listens_again(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_connect = psycopg.AsyncConnection.connect
    attempts = 0

    async def connect(*args: Any, **kwargs: Any) -> psycopg.AsyncConnection[Any]:
        nonlocal attempts
        attempts += 1
        if attempts <= 3:  # three refused connections in a row: one outage
            raise psycopg.OperationalError("connection refused (simulated)")
        return await real_connect(*args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", connect)
    connected = asyncio.Event()
    async with listening(PostgresStore(pg_url), connected.set) as lines:
        await wait_for(connected, 10)
        assert attempts == 4
        (warning,) = lines.at(logging.WARNING)  # one line for the outage, not one per retry
        assert "actor wake-ups" in warning and "connection refused" in warning
        assert lines.at(logging.INFO) == ["listening for actor wake-ups again"]


@pytest.mark.postgres
async def test_the_listener_reconnects_after_its_connection_is_killed(pg_url: str) -> None:
    connects = 0
    connected = asyncio.Event()

    def on_queue() -> None:  # called on each (re)connection, and by NOTIFYs (none here)
        nonlocal connects
        connects += 1
        connected.set()

    async with listening(PostgresStore(pg_url), on_queue) as lines:
        await wait_for(connected, 10)
        connected.clear()
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as admin:
            cur = await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE 'LISTEN yoke%' "
                "AND pid <> pg_backend_pid()"
            )
            assert [r[0] for r in await cur.fetchall()] == [True]
        await wait_for(connected, 10)
        assert connects == 2
        (warning,) = lines.at(logging.WARNING)
        assert "actor wake-ups" in warning
        assert lines.at(logging.INFO) == ["listening for actor wake-ups again"]
