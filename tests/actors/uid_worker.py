"""A worker whose executors run under a uid per tenant, for `test_executor_isolation.py`:
`python -m tests.actors.uid_worker URL PYTHON UID_BASE UID_COUNT`, started from a copy of yoke
and of the executor tests' app that every user can read (the checkout may be in a directory
other users cannot enter). It prints `isolation <tiers>`, then `ready`; SIGTERM stops it.

It imports only yoke and `tests.actors.exec_app`: what the copy holds.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from tests.actors import exec_app
from yoke.actors import ActorRuntime, ActorSettings
from yoke.actors.executor.settings import ExecutorSettings
from yoke.app import open_store

WORKER_ID = "uid-worker"


async def main(url: str, python: str, uid_base: int, uid_count: int) -> None:
    backend = open_store(url)
    await backend.open()
    rt = ActorRuntime(
        settings=ActorSettings(
            worker_id=WORKER_ID,
            heartbeat_interval=0.2,
            stale_after=1.0,
            poll_interval=0.2,  # SQLite has no NOTIFY: another process's appends are polled
            timer_poll_interval=0.5,
            shutdown_timeout=5.0,
        ),
        executor_settings=ExecutorSettings(
            mode="process",
            backoff=0.1,
            hot_interval=0.1,
            cold_interval=0.5,
            boot_timeout=20.0,
            python=python,
            uid_base=uid_base,
            uid_count=uid_count,
        ),
        registry=exec_app.registry,
        app_spec=exec_app.SPEC,
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        async with rt.running(backend.actors):
            pool = rt.pool
            print(f"isolation {'' if pool is None else pool.isolation}", flush=True)
            print("ready", flush=True)
            await stop.wait()
    finally:
        await backend.close()


if __name__ == "__main__":
    url, python, base, count = sys.argv[1:5]
    asyncio.run(main(url, python, int(base), int(count)))
