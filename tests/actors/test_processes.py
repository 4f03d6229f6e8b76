"""Several worker processes on one database: timers fire exactly once, a SIGKILLed worker loses
no event. Waiting is on conditions (a process's output, the database's content) with
deadlines, never on fixed sleeps.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.actors.conftest import open_actor_store, truncate_actor_tables
from tests.actors.worker_proc import define
from yoke.actors import ActorRuntime, ActorSettings
from yoke.store.actor_records import InstanceRef

ROOT = Path(__file__).resolve().parents[2]
FAST_ENV = {
    "YOKE_WORKER_HEARTBEAT_SECS": "0.2",
    "YOKE_WORKER_STALE_SECS": "1.0",
    "YOKE_NOTIFY_POLL_BACKUP_SECS": "0.5",
    "YOKE_SCHEDULE_WAKE_POLL_SECS": "0.5",
    "YOKE_WORKER_SHUTDOWN_TIMEOUT": "2",
}


class Worker:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def expect(self, prefix: str, seconds: float = 30.0) -> str:
        assert self.proc.stdout is not None
        async with asyncio.timeout(seconds):
            while True:
                line = (await self.proc.stdout.readline()).decode()
                if not line:
                    raise AssertionError(f"worker exited before printing {prefix!r}")
                if line.startswith(prefix):
                    return line.strip()


@asynccontextmanager
async def workers(url: str, ids: list[str], **env: str) -> AsyncIterator[list[Worker]]:
    procs: list[Worker] = []
    try:
        for wid in ids:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.actors.worker_proc",
                url,
                wid,
                cwd=ROOT,
                env={**os.environ, **FAST_ENV, **env},
                stdout=asyncio.subprocess.PIPE,
            )
            procs.append(Worker(proc))
        for w in procs:
            await w.expect("ready")
        yield procs
    finally:
        for w in procs:
            if w.proc.returncode is None:
                w.proc.send_signal(signal.SIGTERM)
        for w in procs:
            async with asyncio.timeout(30):
                await w.proc.wait()


async def until(check: Callable[[], Awaitable[bool]], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)  # polling the database, not synchronising on time


@pytest.mark.postgres
@pytest.mark.slow
async def test_timers_fire_exactly_once_with_three_workers(pg_url: str) -> None:
    truncate_actor_tables(pg_url)
    store = open_actor_store(pg_url)
    await store.open()
    n = 300
    try:
        async with workers(pg_url, ["t1", "t2", "t3"]):
            rt = ActorRuntime(settings=ActorSettings(worker_id="scheduler"))
            define(rt)
            rt.attach(store.actors)
            start = rt.wall() + 0.5
            for i in range(n):
                await rt.schedule("ticks", {"n": i}, fire_at=start + i * 0.003)

            async def all_processed() -> bool:
                depths = await store.actors.queue_depths(limit=1)
                return (
                    await store.actors.next_fire_at_ms() is None
                    and not depths
                    and len(await store.actors.list_instances("tick", limit=n + 1)) == n
                )

            await until(all_processed)
        assert await store.actors.next_fire_at_ms() is None
        infos = await store.actors.list_instances("tick", limit=n + 1)
        seen = sorted(n for info in infos for n in json.loads(info.state)["seen"])
        assert seen == list(range(n))  # each timer fired once and was processed once
        stopped = {w.worker_id for w in await store.actors.fleet.list_workers() if w.stopped_at}
        owners = {info.worker_id for info in infos}
        assert owners <= stopped | {None}  # handed over on shutdown, the last ones to no one
    finally:
        await store.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_sigkilled_worker_loses_no_event(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path}/yoke.db"
    else:
        url = request.getfixturevalue("pg_url")
        truncate_actor_tables(url)
    store = open_actor_store(url)
    await store.open()
    n = 60
    try:
        rt = ActorRuntime(settings=ActorSettings(worker_id="client"))
        define(rt)
        rt.attach(store.actors)
        async with workers(url, ["doomed"], YOKE_TEST_BLOCK="1") as (doomed,):
            await rt.append_many(
                "jobs", [{"k": i % 3, "n": i, "block": i in (7, 8, 31)} for i in range(n)]
            )
            await doomed.expect("blocked")
            doomed.proc.send_signal(signal.SIGKILL)
            await doomed.proc.wait()
        async with workers(url, ["heir"]):

            async def drained() -> bool:
                return not await store.actors.queue_depths(limit=1)

            await until(drained)
        seen: list[int] = []
        for k in range(3):
            ref = InstanceRef(tenant="default", actor="job", instance_id=str(k))
            st = await store.actors.get_state(ref)
            assert st is not None
            seen += json.loads(st.state).get("seen", [])
        # Every event was processed (some possibly twice: at-least-once across a crash).
        assert sorted(set(seen)) == list(range(n))
    finally:
        await store.close()
