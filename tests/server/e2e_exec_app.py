"""An actor app for `yoke serve` with `YOKE_EXECUTORS=process`: `pinger` records the pid (and pid
namespace) of the process that ran it."""

from __future__ import annotations

import os

import yoke
from yoke.actors import ActorCtx, Event

app = yoke.App()


@app.actor(subscribe=["pings"], key="id")
async def pinger(ctx: ActorCtx, event: Event) -> None:
    seen = {"pid": os.getpid(), "pidns": os.readlink("/proc/self/ns/pid")}
    await ctx.state.update(lambda s: {**s, **seen})
