"""What a hostile tenant's `process()` tries, as actors the sandbox tests run in executors
(imported there by name: `tests.actors.hostile_app:app`). Each records what it saw in its
instance state, so the test reads the outcome from the store."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from typing import Any

import yoke
from yoke.actors import ActorCtx, Backoff, Event, Queue
from yoke.actors.definitions import MAX_DATA_BYTES

app = yoke.App()
registry = app.actor_registry
SPEC = "tests.actors.hostile_app:app"
ONCE = Backoff(initial=0.0, max_attempts=1)


async def _record(ctx: ActorCtx, **seen: Any) -> None:
    await ctx.state.update(lambda s: {**s, **seen})


@app.actor(subscribe=["spawn"], key="k", backoff=ONCE)
async def spawn(ctx: ActorCtx, event: Event) -> None:
    """Starts three children meant to outlive it: a plain one, one in a session of its own
    (`setsid`), and a daemon (`setsid`, forked again, its parent gone). Each is `sleep` with
    the event's marker in its argv, ignoring SIGTERM and SIGHUP (none without a marker).
    Then `then`: `exit` (the executor dies), `sleep` (past any deadline), or nothing."""
    marker = event.data.get("marker")
    for kind in ("plain", "setsid", "daemon") if marker else ():
        if os.fork() == 0:
            try:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                signal.signal(signal.SIGHUP, signal.SIG_IGN)
                if kind != "plain":
                    os.setsid()
                if kind == "daemon" and os.fork():
                    os._exit(0)
                os.execv("/bin/sleep", ["sleep", f"600.{marker}"])
            finally:
                os._exit(1)
    await _record(ctx, spawned=True)
    then = event.data.get("then")
    if then == "exit":
        os._exit(3)
    if then == "sleep":
        await asyncio.sleep(3600)


def _connect(family: socket.AddressFamily, address: Any) -> str:
    """`connected`, or the error's name."""
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(2.0)
        try:
            sock.connect(address)
        except OSError as exc:
            return type(exc).__name__
    return "connected"


@app.actor(subscribe=["reach"], key="k", backoff=ONCE)
async def reach(ctx: ActorCtx, event: Event) -> None:
    """Tries the database: its TCP port on the loopback and its unix socket."""
    tcp = _connect(socket.AF_INET, ("127.0.0.1", int(event.data["port"])))
    unix = _connect(socket.AF_UNIX, str(event.data["socket"]))
    await _record(ctx, tcp=tcp, unix=unix)


@app.actor(subscribe=["scan"], key="k", backoff=ONCE)
async def scan(ctx: ActorCtx, event: Event) -> None:
    """Reads every /proc/<pid>/cmdline and environ it can, and its own environment, for the
    `needle` (the database URL a worker was given)."""
    found, readable = _scan(str(event.data["needle"]).encode())
    await _record(ctx, found=found, readable=readable)


def _scan(needle: bytes) -> tuple[list[str], int]:
    found: list[str] = []
    readable = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        for name in ("cmdline", "environ"):
            with contextlib.suppress(OSError):
                with open(f"/proc/{pid}/{name}", "rb") as f:
                    data = f.read()
                readable += 1
                if needle in data:
                    found.append(f"{pid}/{name}")
    if needle.decode() in "\0".join(f"{k}={v}" for k, v in os.environ.items()):
        found.append("own environment")
    return found, readable


@app.actor(subscribe=["kill"], key="k", backoff=ONCE)
async def kill(ctx: ActorCtx, event: Event) -> None:
    """SIGKILLs its parent, and the process named in `pid` (its worker), as far as it can."""
    tried = {}
    for what, pid in (("parent", os.getppid()), ("worker", int(event.data.get("pid", 0)))):
        if not pid:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            tried[what] = "sent"
        except OSError as exc:
            tried[what] = type(exc).__name__
    await asyncio.sleep(0.5)  # had it killed the executor, it would be dead by now
    await _record(ctx, tried=tried, ppid=os.getppid())


WORKER_MARK = b"tests.actors.poison_worker"


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _the_worker() -> int | None:
    """This process, or its nearest ancestor, that is a `poison_worker` (as far as /proc
    shows: in a pid namespace, none)."""
    pid = os.getpid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if WORKER_MARK in f.read():
                    return pid
            pid = _parent_of(pid)
        except OSError:
            return None
    return None


@app.actor(subscribe=["poison"], key="k", queue=Queue(concurrency=8, group_by="g"))
async def poison(ctx: ActorCtx, event: Event) -> None:
    """`kill`: SIGKILLs the worker running it (itself inline; found among its ancestors from an
    executor), as often as it runs. Otherwise an innocent call that takes `sleep` seconds."""
    await asyncio.sleep(float(event.data.get("sleep", 0)))
    if event.data.get("kill"):
        target = _the_worker()
        if target is not None:
            os.kill(target, signal.SIGKILL)
            await asyncio.sleep(5)  # its death, or its executor's, ends this first
        await _record(ctx, **{f"survived:{event.data['n']}": target})
        return
    n = event.data["n"]
    await ctx.state.update(lambda s: {**s, "done": [*s.get("done", []), n]})


@app.actor(subscribe=["forge"], key="k", backoff=ONCE)
async def forge(ctx: ActorCtx, event: Event) -> None:
    """Prints, then raises, text made to look like lines of the worker's log."""
    print(event.data["text"], flush=True)
    raise ValueError(event.data["text"])


@app.actor(subscribe=["unstorable"], key="k", backoff=ONCE)
async def unstorable(ctx: ActorCtx, event: Event) -> None:
    """One ctx call with a value no store can hold (`what`), unless `what` is `ok`; a
    `catch`ing call records the error's class instead of raising it."""
    what = event.data["what"]
    try:
        if what == "at":
            await ctx.schedule("later", {}, at=float(event.data["at"]))
        elif what == "delay":
            await ctx.schedule("later", {}, delay=float(event.data["delay"]))
        elif what == "emit":
            await ctx.emit("later", {"blob": "x" * MAX_DATA_BYTES})
        elif what == "state":
            await ctx.state.update(lambda s: {**s, "blob": "x" * MAX_DATA_BYTES})
    except Exception as exc:
        if not event.data.get("catch"):
            raise
        await _record(ctx, **{f"{what}:{event.data.get('at', '')}": type(exc).__name__})
        return
    await ctx.state.update(lambda s: {**s, "ok": s.get("ok", 0) + 1})
