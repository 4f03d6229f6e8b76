"""An actor app for `yoke serve` with `YOKE_EXECUTORS=process`: `pinger` records the pid of the
process that ran it."""

from __future__ import annotations

import os

import yoke
from yoke.actors import ActorCtx, Event

app = yoke.App()


@app.actor(subscribe=["pings"], key="id")
async def pinger(ctx: ActorCtx, event: Event) -> None:
    await ctx.state.update(lambda s: {**s, "pid": os.getpid()})
