"""`@app.workflow(timeout=)`: past it the execution ends TIMED_OUT, its children are stopped
(CANCELLED), its slot is freed (the start queued behind it is granted) and its error names the
step it was in; a child workflow's own timeout fails the parent's child step. Both stores."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from yoke.executions import Context, ExecutionStatus, Limits, StartStatus

from .helpers import make_app, wait_until


async def test_a_workflow_past_its_timeout_ends_timed_out_with_its_children(
    database_url: str,
) -> None:
    app = make_app(database_url, limits=Limits(max_running=1))
    children: list[str] = []

    @app.workflow()
    async def child(ctx: Context, input: Any) -> Any:
        children.append(ctx.execution_id)
        await asyncio.sleep(60)

    @app.workflow(timeout=0.3)
    async def parent(ctx: Context, input: Any) -> Any:
        await ctx.step("quick", lambda: "done")
        return await ctx.child(child)

    @app.workflow()
    async def after(ctx: Context, input: Any) -> Any:
        return "ran"

    async with app.running():
        ex = app.executions
        s = await ex.start("parent")
        queued = await ex.start("after")
        assert s.execution_id is not None and queued.status is StartStatus.QUEUED
        t0 = time.monotonic()
        timed_out = await ex.wait(s.execution_id, 10)
        took = time.monotonic() - t0
        granted = await ex.wait_granted(queued.start_id, 10)
        assert granted.execution_id is not None
        assert (await ex.wait(granted.execution_id, 10)).output == "ran"
        [child_id] = children
        stopped = await ex.get_execution(child_id)
        assert app.store is not None
        await wait_until(lambda: _ledger_empty(app))
    assert timed_out.status is ExecutionStatus.TIMED_OUT and took < 5
    e = timed_out.error
    assert e is not None and (e.type, e.step, e.attempt) == ("TimedOut", "child:child", 1)
    assert "timeout of 0.3 s" in e.message
    assert stopped.status is ExecutionStatus.CANCELLED and stopped.parent_id == s.execution_id


async def _ledger_empty(app: Any) -> bool:
    ledger: dict[str, int] = await app.store.ledger()
    return ledger == {}


async def test_a_child_past_its_own_timeout_fails_its_parent_s_step(database_url: str) -> None:
    app = make_app(database_url)

    @app.workflow(timeout=0.1)
    async def slow(ctx: Context, input: Any) -> Any:
        await asyncio.sleep(30)

    @app.workflow()
    async def parent(ctx: Context, input: Any) -> Any:
        try:
            await ctx.child(slow)
        except Exception as exc:
            return type(exc).__name__
        return "no"

    async with app.running():
        s = await app.executions.start("parent")
        assert s.execution_id is not None
        done = await app.executions.wait(s.execution_id, 10)
        page = await app.executions.list(workflow="slow")
    assert done.status is ExecutionStatus.SUCCEEDED and done.output == "ChildFailed"
    [child] = page.items
    assert child.status is ExecutionStatus.TIMED_OUT and child.parent_id == s.execution_id


async def test_timed_out_executions_are_listed_and_resumable(database_url: str) -> None:
    app = make_app(database_url)
    runs: list[int] = []  # the step's runs
    bodies: list[int] = []  # the workflow body's runs

    @app.workflow(timeout=0.2)
    async def once_slow(ctx: Context, input: Any) -> Any:
        bodies.append(1)
        await ctx.step("mark", lambda: runs.append(1))
        if len(bodies) == 1:
            await asyncio.sleep(30)
        return len(runs)

    async with app.running():
        ex = app.executions
        s = await ex.start("once_slow")
        assert s.execution_id is not None
        assert (await ex.wait(s.execution_id, 10)).status is ExecutionStatus.TIMED_OUT
        listed = await ex.list(status="timed_out")
        assert [e.execution_id for e in listed.items] == [s.execution_id]
        again = await ex.resume(s.execution_id)
        assert again.execution_id is not None
        done = await ex.wait(again.execution_id, 10)
    assert done.status is ExecutionStatus.SUCCEEDED and done.output == 1  # "mark" not re-run
