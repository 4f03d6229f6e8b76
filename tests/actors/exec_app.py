"""Actors that the executor tests run in executor processes (imported there by name:
`tests.actors.exec_app:registry`). Each records what it saw in its instance state."""

from __future__ import annotations

import asyncio
import os
import sys

from yoke.actors import ActorCtx, ActorRegistry, Backoff, Event, Queue

registry = ActorRegistry()
SPEC = "tests.actors.exec_app:registry"
# What an executor must never load: drivers and the server's and metrics' libraries (top-level
# packages), and the worker's side of yoke (the store's protocol and backends, leases, the
# server, executions).
HEAVY = frozenset(
    ("psycopg", "psycopg_pool", "sqlite3", "pydantic", "prometheus_client", "starlette", "uvicorn")
)
WORKER_ONLY = frozenset(
    (
        "yoke.store.protocol",
        "yoke.store.records",
        "yoke.store.sqlite",
        "yoke.store.postgres",
        "yoke.leases",
        "yoke.server",
        "yoke.executions",
        "yoke.actors.protocol",
        "yoke.actors.drain",
    )
)


@registry.actor(subscribe=["counts"], key="k", queue=Queue(concurrency=100))
async def count(ctx: ActorCtx, event: Event) -> None:
    await ctx.state.update(lambda s: {**s, "n": s.get("n", 0) + 1})


@registry.actor(subscribe=["probes"], key="k")
async def probe(ctx: ActorCtx, event: Event) -> None:
    """What the process running process() looks like, from inside."""
    leaked = sorted(m for m in sys.modules if m.partition(".")[0] in HEAVY or m in WORKER_ONLY)
    try:
        peek: object = os.listdir(os.path.dirname(os.getcwd()))  # the other tenants' dirs?
    except PermissionError:
        peek = "denied"
    seen = {
        "pid": os.getpid(),
        "pidns": os.readlink("/proc/self/ns/pid"),
        "uid": os.getuid(),
        "cwd": os.getcwd(),
        "peek": peek,
        "env": sorted(os.environ),
        "modules": leaked,
        "tenant": ctx.tenant,
    }
    await ctx.state.update(lambda s: {**s, "seen": seen})


@registry.actor(subscribe=["jobs"], key="k", queue=Queue(concurrency=4, group_by="g"))
async def job(ctx: ActorCtx, event: Event) -> None:
    """`exit`: the process dies under the call; `sleep`: seconds; `emit`: one more event."""
    data = event.data
    if data.get("exit"):
        os._exit(3)
    if data.get("sleep"):
        await asyncio.sleep(float(data["sleep"]))
    if data.get("emit"):
        await ctx.emit("jobs", {"k": data["k"], "n": data["n"] + 1000})
    n = data["n"]
    await ctx.state.update(lambda s: {**s, "done": [*s.get("done", []), n]})


@registry.actor(
    subscribe=["risky"],
    key="k",
    queue=Queue(concurrency=4, group_by="g"),
    backoff=Backoff(max_attempts=1),
)
async def risky(ctx: ActorCtx, event: Event) -> None:
    """After `sleep` seconds, `exit`: the process dies under the call; else it raises (one
    attempt: a dead letter at once, which shows its counts)."""
    data = event.data
    await asyncio.sleep(float(data["sleep"]))
    if data.get("exit"):
        os._exit(3)
    raise RuntimeError(f"refused {data['n']}")


@registry.actor(subscribe=["evil"], key="k", backoff=Backoff(initial=0.0))
async def evil(ctx: ActorCtx, event: Event) -> None:
    """Writes on its executor's own socket to the worker: `bytes` as given, hex-encoded."""
    import gc

    (writer,) = [o for o in gc.get_objects() if isinstance(o, asyncio.StreamWriter)]
    writer.write(bytes.fromhex(event.data["bytes"]))
    await writer.drain()
    await asyncio.sleep(3600)  # the worker kills this process first


@registry.actor(subscribe=["hogs"], key="k", backoff=Backoff(max_attempts=1))
async def hog(ctx: ActorCtx, event: Event) -> None:
    """Allocates `mb` MiB at once (the executor's RLIMIT_AS refuses it when it is lower)."""
    blob = bytearray(int(event.data["mb"]) * 1024 * 1024)
    await ctx.state.update(lambda s: {**s, "got": len(blob)})
