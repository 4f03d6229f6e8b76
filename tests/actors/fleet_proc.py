"""A worker process for the fleet tests: `python -m tests.actors.fleet_proc URL ID LOG`.

One actor, `work` (stream "work", key `k`, at most 2 concurrent calls per group `g`). Each call
appends `S <pid> <tenant>/<k> <g> <seq>` to LOG when it starts and `E ...` when it ends, each
line one `write` on a file opened with O_APPEND, so the file is one order of every start and
end across processes; its state keeps the seqs it processed per group. Prints `ready` once
running; stops (handing its instances over) on SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

from tests.actors.conftest import open_actor_store
from yoke.actors import ActorCtx, ActorRuntime, ActorSettings, Event, Queue

CAP = 2  # concurrent calls per (instance, group)


def define(rt: ActorRuntime, log_path: str | None = None, *, pause: float = 0.02) -> None:
    """The actor of these tests (an appender needs it too: it computes the fan-out)."""

    def note(kind: str, ctx: ActorCtx, event: Event) -> None:
        if log_path is None:
            return
        line = f"{kind} {os.getpid()} {event.tenant}/{ctx.instance_id} {event.group_id} "
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{line}{event.data['seq']}\n".encode())
        finally:
            os.close(fd)

    @rt.actor(subscribe=["work"], key="k", queue=Queue(concurrency=CAP, group_by="g"))
    async def work(ctx: ActorCtx, event: Event) -> None:
        note("S", ctx, event)
        await asyncio.sleep(pause)
        g, seq = event.group_id, event.data["seq"]

        def add(s: dict[str, Any]) -> dict[str, Any]:
            return {**s, g: [*s.get(g, []), seq]}

        await ctx.state.update(add)
        note("E", ctx, event)


async def main(url: str, worker_id: str, log_path: str) -> None:
    rt = ActorRuntime(settings=ActorSettings.from_env(worker_id=worker_id))
    define(rt, log_path, pause=float(os.environ.get("YOKE_TEST_PAUSE", "0.02")))
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
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
