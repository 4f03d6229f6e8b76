"""The order in which a grant batch's outcome is acted on, on real stores: the callers it
answered form the next grant batch, which goes to the store before the executions it launched
do their work (and their finishes), so those never hold back the next grants.

The store's real verbs are wrapped only to note, in one list, when each is called; the
workflows note when their bodies begin."""

from __future__ import annotations

import asyncio
from typing import Any

import yoke
from yoke.executions import StartStatus

from .helpers import make_app

CALLERS = 8


async def test_the_next_grant_batch_goes_before_the_executions_of_the_last_one_run(
    database_url: str,
) -> None:
    events: list[tuple[str, Any]] = []
    app = make_app(database_url)

    @app.workflow("note")
    async def note(ctx: yoke.Context, input: Any) -> Any:
        events.append(("ran", input))
        return None

    async with app.running():
        store = app.store
        assert store is not None
        grant_starts, finish_executions = store.grant_starts, store.finish_executions

        async def granting(requests: Any, *, now: float) -> Any:
            events.append(("grant", len(requests)))
            return await grant_starts(requests, now=now)

        async def finishing(finishes: Any, *, now: float) -> Any:
            events.append(("finish", len(finishes)))
            return await finish_executions(finishes, now=now)

        store.grant_starts = granting  # type: ignore[method-assign]
        store.finish_executions = finishing  # type: ignore[method-assign]

        async def caller(i: int) -> None:
            for round_ in (1, 2):
                s = await app.executions.start("note", [round_, i])
                assert s.status is StartStatus.GRANTED

        await asyncio.gather(*(caller(i) for i in range(CALLERS)))
        await app.shutdown(10)

    grants = [i for i, (what, _) in enumerate(events) if what == "grant"]
    assert [events[i] for i in grants[:2]] == [("grant", CALLERS)] * 2  # one batch per round
    first_round = [i for i, (what, arg) in enumerate(events) if what == "ran" and arg[0] == 1]
    first_finish = next(i for i, (what, _) in enumerate(events) if what == "finish")
    assert len(first_round) == CALLERS
    # The second round's grant batch was sent before any execution of the first one began,
    # and so before any of their finishes.
    assert grants[1] < min(first_round) < first_finish, events
