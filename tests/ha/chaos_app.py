"""The app the chaos suite serves and works: `tests.ha.chaos_app:server_app` for `yoke serve`,
`tests.ha.chaos_app:worker_app` for `yoke worker`.

`work` holds its slot for `input["seconds"]` (the load's small run time) and carries the
load's Idempotency-Key in its input, so the checker can count executions per key even when a
refused start has given its key back. `counter` (stream "counts", key `k`) counts each event
it processes in its instance state and lists the event's `n`: an event lost leaves its `n`
missing, an event applied twice lists it twice. The servers run no actor worker, so faults of
a server do not also fault the drain; the two `yoke worker`s do.
"""

from __future__ import annotations

import asyncio
from typing import Any

import yoke
from yoke.actors import ActorCtx, Event


def define(app: yoke.App) -> yoke.App:
    @app.workflow()
    async def work(ctx: yoke.Context, input: Any) -> Any:
        seconds = float(input.get("seconds", 0.2)) if isinstance(input, dict) else 0.2
        await asyncio.sleep(seconds)  # the work a real workflow would do, holding its slot
        return {"slept": seconds}

    @app.actor(subscribe=["counts"], key="k")
    async def counter(ctx: ActorCtx, event: Event) -> None:
        n = event.data["n"]
        await ctx.state.update(
            lambda s: {**s, "count": s.get("count", 0) + 1, "seen": [*s.get("seen", []), n]}
        )

    return app


server_app = define(yoke.App(actor_worker=False))
worker_app = define(yoke.App())
