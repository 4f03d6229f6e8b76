"""A worker process for test_processes: N concurrent starts against one slot when told to go.

Mode `app`: N `app.executions.start` calls (the kernel queues what this process cannot run, so
each process sends one contender at a time to the ledger). Mode `store`: N raw `grant_start`
calls at once, so N x processes transactions race for the ledger row. Mode `overlap`: N short
starts under a global cap of 3, two grant batches in the store at once, each execution waiting
until it is seen running; it prints the most this process saw running and waits for all. Mode
`tenant`: N short starts of tenant acme, each in a session of its own, under the tenant's
executions.max_running (set by the test), two grant batches in the store at once; each
execution counts itself in the file YOKE_TEST_COUNTER (shared by every process, under a lock)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections import Counter
from typing import Any

from yoke.app import App, open_store
from yoke.executions import Context, Limits
from yoke.store import NewExecution, NewStart, Slot, StartKind

from .helpers import fast_settings


async def go() -> None:
    print("READY", flush=True)
    await asyncio.to_thread(sys.stdin.readline)


def done(counts: Counter[str]) -> None:
    print("DONE", json.dumps(counts, separators=(",", ":")), flush=True)


async def app_mode(url: str, n: int) -> None:
    app = App(settings=fast_settings(url, pg_pool_max=20), limits=Limits(max_running=1))

    @app.workflow("slot")
    async def slot(ctx: Context, input: Any) -> Any:
        await asyncio.Event().wait()

    async with app.running():
        await go()
        starts = await asyncio.gather(*[app.executions.start(slot, {"i": i}) for i in range(n)])
        done(Counter(s.status.name for s in starts))
        await asyncio.to_thread(sys.stdin.readline)
        await app.shutdown(timeout=0)


async def overlap_mode(url: str, n: int) -> None:
    app = App(
        settings=fast_settings(url, pg_pool_max=10, batch_overlap=2, slot_poll_interval=0.02),
        limits=Limits(max_running=3),
    )
    running = most = 0

    @app.workflow("short")
    async def short(ctx: Context, input: Any) -> Any:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.002 * (input % 4))
        running -= 1

    async with app.running():
        await go()
        starts = await asyncio.gather(*[app.executions.start(short, i) for i in range(n)])
        for s in starts:
            await app.executions.wait_granted(s.start_id, timeout=60)
        ended = [
            await app.executions.wait(
                (await app.executions.get(s.start_id)).execution_id or "", timeout=60
            )
            for s in starts
        ]
        print("MOST", most, flush=True)
        done(Counter(e.status.name for e in ended))
        await asyncio.to_thread(sys.stdin.readline)


async def tenant_mode(url: str, n: int) -> None:
    from tests.actors.worker_proc import Running

    counter = Running(os.environ["YOKE_TEST_COUNTER"])
    app = App(settings=fast_settings(url, pg_pool_max=10, batch_overlap=2, slot_poll_interval=0.02))
    me = uuid.uuid4().hex[:8]

    @app.workflow("short")
    async def short(ctx: Context, input: Any) -> Any:
        await counter.around(0.002 * (input % 4))

    async with app.running():
        await go()
        starts = await asyncio.gather(
            *[app.executions.start(short, i, session=f"acme/{me}-{i}") for i in range(n)]
        )
        ended = []
        for s in starts:
            granted = await app.executions.wait_granted(s.start_id, timeout=60)
            assert granted.execution_id is not None
            ended.append(await app.executions.wait(granted.execution_id, timeout=60))
        done(Counter(e.status.name for e in ended))
        await asyncio.to_thread(sys.stdin.readline)


async def store_mode(url: str, n: int) -> None:
    store = open_store(url, fast_settings(url, pg_pool_max=min(n, 15)))
    await store.open()
    try:
        me = f"racer-{uuid.uuid4().hex[:8]}"
        rows = [
            (
                await store.executions.log_start(
                    NewStart(
                        start_id=str(uuid.uuid4()),
                        kind=StartKind.START,
                        workflow="slot",
                        session=me,
                        tenant=me,
                        priority=0,
                        input="{}",
                        fingerprint="",
                        principal=None,
                        idempotency_key=None,
                        source_execution_id=None,
                        from_step=None,
                        instance_id=me,
                        created_at=0.0,
                    )
                )
            )[0]
            for _ in range(n)
        ]
        await go()
        results = await asyncio.gather(
            *[
                store.executions.grant_start(
                    r.start_id,
                    slots=[Slot(key="global", cap=1), Slot(key=f"session:{me}", cap=None)],
                    copy_steps=None,
                    now=1.0,
                    execution=NewExecution(
                        execution_id=str(uuid.uuid4()),
                        start_id=r.start_id,
                        workflow="slot",
                        session=me,
                        tenant=me,
                        input="{}",
                        parent_id=None,
                        restarted_from=None,
                        resumed_from=None,
                        instance_id=me,
                        created_at=1.0,
                    ),
                )
                for r in rows
            ]
        )
        done(Counter(res.outcome.name for res in results))
        await asyncio.to_thread(sys.stdin.readline)
    finally:
        await store.close()


if __name__ == "__main__":
    mode, url, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    modes = {"app": app_mode, "store": store_mode, "overlap": overlap_mode, "tenant": tenant_mode}
    asyncio.run(modes[mode](url, n))
