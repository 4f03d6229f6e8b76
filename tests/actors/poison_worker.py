"""A worker of the hostile app for the tests that kill workers: `python -m
tests.actors.poison_worker URL WORKER_ID MODE NAMESPACES` (MODE `inline` or `process`;
NAMESPACES `on`, or `off` with weak isolation accepted). Prints `ready` once running; stops
cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys

from tests.actors import hostile_app
from tests.actors.conftest import open_actor_store
from tests.actors.executors import runtime


async def main(url: str, worker_id: str, mode: str, namespaces: str) -> None:
    rt = runtime(
        worker_id,
        app_spec=hostile_app.SPEC,
        registry=hostile_app.registry,
        mode=mode,
        namespaces=namespaces,
        allow_weak_isolation=int(namespaces == "off"),
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    backend = open_actor_store(url)
    await backend.open()
    try:
        async with rt.running(backend.actors):
            print("ready", flush=True)
            await stop.wait()
    finally:
        await backend.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
