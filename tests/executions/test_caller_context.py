"""A workflow runs in its own caller's context (a copy taken when its start arrived), never in
the context of whichever request formed the batch that granted it: starts of two tenants
logged and granted in one batch each see only what their own caller set. A run with no caller
here (a resume from the recovery loop, say) starts from the app's context."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

from yoke.executions import Context

from .helpers import make_app

CALLER: contextvars.ContextVar[str] = contextvars.ContextVar("caller", default="none")


async def test_each_run_sees_its_own_callers_context_in_a_shared_batch(
    database_url: str,
) -> None:
    app = make_app(database_url)
    seen: dict[str, str] = {}

    @app.workflow()
    async def wf(ctx: Context, input: Any) -> Any:
        seen[input["who"]] = CALLER.get()
        CALLER.set("changed by a run")  # a run's own change stays in its own copy
        return None

    async def caller(who: str) -> str:
        CALLER.set(who)
        start = await app.executions.start("wf", {"who": who}, session=f"{who}/s")
        assert start.execution_id is not None
        return start.execution_id

    async with app.running():
        # Started in one turn of the loop: their logs and grants form shared batches, whose
        # tasks the first caller's request made.
        ids = await asyncio.gather(*(caller(f"tenant{i}") for i in range(12)))
        for execution_id in ids:
            await app.executions.wait(execution_id, 10)
    assert seen == {f"tenant{i}": f"tenant{i}" for i in range(12)}
    assert CALLER.get() == "none"
