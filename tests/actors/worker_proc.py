"""A worker process for the multi-process tests: `python -m tests.actors.worker_proc URL ID`.

Actors: `tick` (stream "ticks", one instance per `n`) and `job` (stream "jobs", key `k`); both
record each event they process in their instance state. With `YOKE_TEST_BLOCK=1`, `job` never
finishes an event whose data has `"block": true` (to be killed mid-process()). Prints `ready`
once running and `blocked <n>` when it blocks; stops cleanly on SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from tests.actors.conftest import open_actor_store
from yoke.actors import ActorCtx, ActorRuntime, ActorSettings, Event, Queue


def record(n: int) -> object:
    return lambda s: {**s, "seen": [*s.get("seen", []), n]}


def define(rt: ActorRuntime, *, block: bool = False) -> None:
    """The actors of these tests (an appender needs them too: it computes the fan-out)."""

    @rt.actor(subscribe=["ticks"], key="n")
    async def tick(ctx: ActorCtx, event: Event) -> None:
        await ctx.state.update(record(event.data["n"]))  # type: ignore[arg-type]

    @rt.actor(subscribe=["jobs"], key="k", queue=Queue(concurrency=4, group_by="n"))
    async def job(ctx: ActorCtx, event: Event) -> None:
        if block and event.data.get("block"):
            print(f"blocked {event.data['n']}", flush=True)
            await asyncio.Event().wait()
        await ctx.state.update(record(event.data["n"]))  # type: ignore[arg-type]


async def main(url: str, worker_id: str) -> None:
    rt = ActorRuntime(settings=ActorSettings.from_env(worker_id=worker_id))
    define(rt, block=os.environ.get("YOKE_TEST_BLOCK") == "1")
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    store = open_actor_store(url)
    await store.open()
    try:
        async with rt.running(store.actors):
            print("ready", flush=True)
            await stop.wait()
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
