"""A slot changes hands in one commit: the end of an execution and the grant of the start that
takes its slot are written in one transaction (`Store.finish_and_grant`), on real stores.

The store's real verbs are wrapped only to note each call (each is one transaction) and what
it carried."""

from __future__ import annotations

import asyncio
from typing import Any

import yoke
from yoke.executions import Limits, StartStatus

from .helpers import make_app

N = 6


async def test_an_end_and_the_grant_of_the_slot_it_frees_share_one_transaction(
    database_url: str,
) -> None:
    app = make_app(database_url, limits=Limits(max_running=1))
    calls: list[tuple[str, int, int]] = []  # (verb, ends, grants)
    first_may_end = asyncio.Event()
    running = top = 0

    @app.workflow("w")
    async def w(ctx: yoke.Context, input: Any) -> Any:
        nonlocal running, top
        running += 1
        top = max(top, running)
        if input == 0:
            await first_may_end.wait()  # until every start is queued behind it
        running -= 1
        return input

    async with app.running():
        store = app.store
        assert store is not None
        grant_starts, finish_executions = store.grant_starts, store.finish_executions
        finish_and_grant = store.finish_and_grant

        async def granting(requests: Any, *, now: float) -> Any:
            calls.append(("grant", 0, len(requests)))
            return await grant_starts(requests, now=now)

        async def finishing(finishes: Any, *, now: float) -> Any:
            calls.append(("finish", len(finishes), 0))
            return await finish_executions(finishes, now=now)

        async def handing_over(finishes: Any, grants: Any, *, now: float) -> Any:
            calls.append(("finish+grant", len(finishes), len(grants)))
            return await finish_and_grant(finishes, grants, now=now)

        store.grant_starts = granting  # type: ignore[method-assign]
        store.finish_executions = finishing  # type: ignore[method-assign]
        store.finish_and_grant = handing_over  # type: ignore[method-assign]

        starts = [await app.executions.start("w", i) for i in range(N)]
        assert [s.status for s in starts] == [StartStatus.GRANTED] + [StartStatus.QUEUED] * (N - 1)
        first_may_end.set()
        for s in starts:
            granted = await app.executions.wait_granted(s.start_id, timeout=10)
            assert granted.execution_id is not None
            done = await app.executions.wait(granted.execution_id, timeout=10)
            assert done.status is yoke.ExecutionStatus.SUCCEEDED
        assert await store.ledger() == {}

    # The first start fitted at once; every other was granted in the transaction of the end
    # that freed its slot, and the last end freed a slot nobody waited for.
    assert calls == [
        ("grant", 0, 1),
        *[("finish+grant", 1, 1)] * (N - 1),
        ("finish", 1, 0),
    ]
    assert top == 1
