"""An app as a user writes one (`import yoke`, `yoke.App()`, a workflow, an actor and a portal
defined on it), imported by name: `tests.actors.user_app:app`. Defining it must load none of
yoke's engines, in any process; its `report` actor records, from inside the executor that runs
it, which of them that process has loaded."""

from __future__ import annotations

import os
import sys
from typing import Any

import yoke

SPEC = "tests.actors.user_app:app"
# What defining an app, and an executor running one, must not load: drivers and the server's
# and metrics' libraries, and yoke's engines (their modules and any below them).
ENGINES = (
    "psycopg",
    "psycopg_pool",
    "sqlite3",
    "pydantic",
    "prometheus_client",
    "starlette",
    "uvicorn",
    "yoke.kernel",
    "yoke.leases",
    "yoke.server",
    "yoke.store.protocol",
    "yoke.store.records",
    "yoke.store.actor_records",
    "yoke.store.sqlite",
    "yoke.store.postgres",
    "yoke.executions.service",
    "yoke.executions.context",
    "yoke.executions.model",
    "yoke.actors.runtime",
    "yoke.actors.drain",
    "yoke.actors.protocol",
    "yoke.actors.fleet",
    "yoke.actors.metrics",
    "yoke.actors.portal_runner",
)


def loaded_engines() -> list[str]:
    below = tuple(f"{e}." for e in ENGINES)
    return sorted(m for m in sys.modules if m in ENGINES or m.startswith(below))


app = yoke.App()


@app.workflow()
async def greet(ctx: yoke.Context, name: str) -> str:
    return f"hello {name}"


@app.actor(subscribe=["reports"], key="k")
async def report(ctx: yoke.ActorCtx, event: Any) -> None:
    seen = {
        "loaded": loaded_engines(),
        "pid": os.getpid(),
        "pidns": os.readlink("/proc/self/ns/pid"),
    }
    await ctx.state.update(lambda s: {**s, **seen})


@app.portal()
async def feed(ctx: yoke.PortalCtx) -> None:
    await ctx.stopping.wait()
