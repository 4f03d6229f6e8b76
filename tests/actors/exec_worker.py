"""A worker process running the actors of `exec_app` in executor processes, for the tests that
kill a worker: `python -m tests.actors.exec_worker URL WORKER_ID`. Prints `ready` once running;
stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys

from tests.actors.conftest import open_actor_store
from tests.actors.executors import runtime


async def main(url: str, worker_id: str) -> None:
    rt = runtime(worker_id)
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
    asyncio.run(main(sys.argv[1], sys.argv[2]))
