"""The app whose executors `bench_executors` boots: an app module as a user writes one
(`import yoke`, `app = yoke.App()`, actors defined on it), so that a boot pays what a real
executor pays to import its app, and no more (not the benchmark's own imports)."""

from __future__ import annotations

import time

import yoke

app = yoke.App()


@app.actor(subscribe=["bench"], key="k", queue=yoke.Queue(concurrency=1))
async def noop(ctx: yoke.ActorCtx, event: object) -> None:
    pass


@app.actor(subscribe=["wake"], key="k")
async def stamp(ctx: yoke.ActorCtx, event: object) -> None:
    """Records when process() started, on the host's wall clock (shared with the appender)."""
    started = time.time()
    await ctx.state.update(lambda s: {**s, "started": started})
