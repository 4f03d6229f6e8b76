"""A worker process for the multi-process tests: `python -m tests.actors.worker_proc URL ID`.

Actors: `tick` (stream "ticks", one instance per `n`) and `job` (stream "jobs", key `k`); both
record each event they process in their instance state. With `YOKE_TEST_BLOCK=1`, `job` never
finishes an event whose data has `"block": true` (to be killed mid-process()). `slow` (stream
"slow", key `k`) takes 20 ms and counts the `process()` calls running in every worker process
at once in the file named by `YOKE_TEST_COUNTER` (`Running`); `shared` (stream "shared", key
`k`) writes a line "worker tenant monotonic-time" to the file named by `YOKE_TEST_STARTS` as it
starts, then takes `ms` milliseconds. Prints `ready` once running and `blocked <n>` when it
blocks; stops cleanly on SIGTERM.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import signal
import sys
import time
from pathlib import Path

from tests.actors.conftest import open_actor_store
from yoke.actors import ActorCtx, ActorRuntime, ActorSettings, Event, Queue


def record(n: int) -> object:
    return lambda s: {**s, "seen": [*s.get("seen", []), n]}


class Running:
    """Calls running now in every process, and the most ever, in one JSON file under a lock."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def _change(self, by: int) -> None:
        with self.path.open("a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            seen = json.loads(f.read() or '{"now": 0, "most": 0, "calls": 0}')
            seen["now"] += by
            seen["most"] = max(seen["most"], seen["now"])
            seen["calls"] += by > 0
            f.seek(0)
            f.truncate()
            f.write(json.dumps(seen))

    def read(self) -> dict[str, int]:
        data: dict[str, int] = json.loads(self.path.read_text())
        return data

    async def around(self, seconds: float) -> None:
        self._change(+1)
        try:
            await asyncio.sleep(seconds)
        finally:
            self._change(-1)


def log_start(line: str) -> None:
    with Path(os.environ["YOKE_TEST_STARTS"]).open("a") as f:  # one short write: atomic
        f.write(line)


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

    @rt.actor(subscribe=["slow"], key="k")
    async def slow(ctx: ActorCtx, event: Event) -> None:
        await Running(os.environ["YOKE_TEST_COUNTER"]).around(0.02)

    @rt.actor(subscribe=["shared"], key="k", queue=Queue(concurrency=1000))
    async def shared(ctx: ActorCtx, event: Event) -> None:
        log_start(f"{rt.worker_id} {ctx.tenant} {time.monotonic()}\n")
        await asyncio.sleep(event.data["ms"] / 1000)


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
