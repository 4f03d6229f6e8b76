"""Helpers of the executions tests: gates that hold a workflow, condition waits, row counts."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from yoke.app import App
from yoke.config import Settings
from yoke.executions import Context


def fast_settings(database_url: str, **over: Any) -> Settings:
    base = Settings(
        database_url=database_url,
        slot_poll_interval=0.05,
        heartbeat_interval=0.2,
        instance_stale_after=5.0,
        execution_shutdown_timeout=5.0,
    )
    return base.with_(**over)


class Gates:
    """`hold` workflows wait on a named gate; tests see who started, in order."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.started: list[str] = []
        self.started_event: dict[str, asyncio.Event] = {}

    def gate(self, name: str) -> asyncio.Event:
        return self.gates.setdefault(name, asyncio.Event())

    def has_started(self, name: str) -> asyncio.Event:
        return self.started_event.setdefault(name, asyncio.Event())

    def open(self, name: str) -> None:
        self.gate(name).set()

    async def hold(self, ctx: Context, input: Any) -> Any:
        name = input["gate"]
        self.started.append(name)
        self.has_started(name).set()
        await self.gate(name).wait()
        return name

    async def started_one(self, name: str, timeout: float = 10.0) -> None:
        await asyncio.wait_for(self.has_started(name).wait(), timeout)


def make_app(database_url: str, gates: Gates | None = None, **over: Any) -> App:
    limits = over.pop("limits", None)
    app = App(settings=fast_settings(database_url, **over), limits=limits)
    if gates is not None:
        app.workflow("hold")(gates.hold)
    return app


def echo_app(database_url: str, **over: Any) -> App:
    """An app with one workflow, `echo`, that returns its input."""
    app = make_app(database_url, **over)

    @app.workflow()
    async def echo(ctx: Context, input: Any) -> Any:
        return input

    return app


async def wait_until(pred: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    """Poll an async condition until it holds; fail after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await pred():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


def count_rows(database_url: str, table: str, where: str = "TRUE") -> int:
    sql = f"SELECT count(*) FROM {table} WHERE {where}"
    if database_url.startswith("sqlite:"):
        path = database_url.removeprefix("sqlite:///")
        conn = sqlite3.connect(path)
        try:
            return int(conn.execute(sql.replace("TRUE", "1")).fetchone()[0])
        finally:
            conn.close()
    with psycopg.connect(database_url) as pg:
        row = pg.execute(sql.encode()).fetchone()
        assert row is not None
        return int(row[0])


class FastClock:
    """A clock whose wall time runs `speed` times faster than real time from its creation (its
    monotonic clock is the real one): a minute of a schedule's ticks in a few seconds."""

    def __init__(self, speed: float) -> None:
        self._speed = speed
        self._real0 = time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return self._real0 + (time.time() - self._real0) * self._speed

    def __repr__(self) -> str:
        return f"FastClock(speed={self._speed})"


async def ticker_idle(app: App) -> None:
    """Until the app's ticker sleeps with no wake pending: a test that moves a ManualClock and
    fires ticks itself then races no look of the ticker's own loop (a schedule's change wakes
    it)."""
    loop = app.tick_loop
    assert loop is not None

    async def idle() -> bool:
        return loop.idle

    await wait_until(idle, timeout=5)
