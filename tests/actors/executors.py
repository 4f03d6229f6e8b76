"""Helpers of the executor tests: a runtime whose `process()` runs in executor processes (the
actors of `tests/actors/exec_app.py`), waiting on conditions, and reading instance states."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from tests.actors import exec_app
from tests.actors.conftest import FAST, open_actor_store
from yoke.actors import ActorRegistry, ActorRuntime, ActorSettings
from yoke.actors.executor.settings import ExecutorSettings
from yoke.actors.protocol import ActorStore
from yoke.store.actor_records import InstanceRef

# Fast lifecycle loops and restarts, so a test takes seconds.
FAST_EXECUTORS: dict[str, Any] = {
    "mode": "process",
    "backoff": 0.1,
    "hot_interval": 0.1,
    "cold_interval": 0.5,
    "boot_timeout": 20.0,  # a loaded CI machine boots slowly; a boot that hangs is its own test
}


def runtime(
    worker_id: str = "w1",
    app_spec: str = exec_app.SPEC,
    registry: ActorRegistry = exec_app.registry,
    **executor: Any,
) -> ActorRuntime:
    return ActorRuntime(
        settings=ActorSettings(worker_id=worker_id, **FAST),
        executor_settings=ExecutorSettings(**{**FAST_EXECUTORS, **executor}),
        registry=registry,
        app_spec=app_spec,
    )


@asynccontextmanager
async def running(
    url: str,
    worker_id: str = "w1",
    app_spec: str = exec_app.SPEC,
    registry: ActorRegistry = exec_app.registry,
    **executor: Any,
) -> AsyncIterator[tuple[ActorRuntime, ActorStore]]:
    backend = open_actor_store(url)
    await backend.open()
    rt = runtime(worker_id, app_spec, registry, **executor)
    try:
        async with rt.running(backend.actors):
            yield rt, backend.actors
    finally:
        await backend.close()


async def until(check: Callable[[], Awaitable[bool] | bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        got = check()
        if not isinstance(got, bool):
            got = await got
        if got:
            return
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)  # polling a condition, not synchronising on time


async def state(store: ActorStore, tenant: str, actor: str, instance_id: str) -> dict[str, Any]:
    row = await store.get_state(InstanceRef(tenant=tenant, actor=actor, instance_id=instance_id))
    if row is None:
        return {}
    value: dict[str, Any] = json.loads(row.state)
    return value


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not reaped by its new parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        return os.path.exists(f"/proc/{pid}")


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (what an executor started, through its reaper or its
    namespace), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def identity(pid: int) -> tuple[str, int]:
    """(pid namespace, pid in it) of a host process: what it sees of itself from inside."""
    ns = os.readlink(f"/proc/{pid}/ns/pid")
    with open(f"/proc/{pid}/status") as f:
        nspid = next(line for line in f if line.startswith("NSpid:")).split()[-1]
    return ns, int(nspid)


def runs_below(top: int, seen: dict[str, Any]) -> bool:
    """Whether the process that reported `seen` (its `pidns` and `pid`) runs below `top`."""
    want = (seen["pidns"], seen["pid"])
    for pid in descendants(top):
        try:
            if identity(pid) == want:
                return True
        except (OSError, StopIteration):
            continue
    return False


def require_bwrap() -> None:
    """Skip without bubblewrap, unless `YOKE_REQUIRE_BWRAP=1` (CI) makes that a failure."""
    if shutil.which("bwrap") is None:
        message = "bubblewrap (bwrap) is not installed: the namespace tier cannot be tested"
        if os.environ.get("YOKE_REQUIRE_BWRAP") == "1":
            pytest.fail(message)
        pytest.skip(message)
