"""Steps are recorded in batches: the records of every execution that recorded a step in the
same turn share one transaction (one commit), and a step's answer comes only after its commit,
on both stores."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from yoke.errors import YokeError
from yoke.executions import Context, ExecutionStatus
from yoke.store import StepRecord

from .helpers import count_rows, make_app

N = 20


def _count_writes(app: Any) -> list[int]:
    """The size of each transaction of step records the app's store ran."""
    store = app.store
    real = store.write_steps
    sizes: list[int] = []

    async def counted(records: Sequence[StepRecord], *, now: float) -> list[bool]:
        sizes.append(len(records))
        written: list[bool] = await real(records, now=now)
        return written

    store.write_steps = counted
    return sizes


class AtTheStep:
    """Holds every body before its step until all N are there, then lets all go at once: they
    record their steps in the same turn."""

    def __init__(self) -> None:
        self.arrived = 0
        self.all_there = asyncio.Event()
        self.go = asyncio.Event()

    async def wait(self) -> None:
        self.arrived += 1
        if self.arrived == N:
            self.all_there.set()
        await self.go.wait()

    async def start_all(self, app: Any) -> list[str]:
        ids = []
        for k in range(N):
            s = await app.executions.start("wf", k)
            assert s.execution_id is not None
            ids.append(s.execution_id)
        await asyncio.wait_for(self.all_there.wait(), 10)
        self.go.set()
        return ids


async def test_steps_of_many_executions_share_a_commit(database_url: str) -> None:
    app = make_app(database_url)
    barrier = AtTheStep()

    @app.workflow()
    async def wf(ctx: Context, input: Any) -> Any:
        await barrier.wait()
        return await ctx.step("double", lambda: 2 * input)

    async with app.running():
        sizes = _count_writes(app)
        ids = await barrier.start_all(app)
        done = [await app.executions.wait(i, 10) for i in ids]
    assert [d.output for d in done] == [2 * k for k in range(N)]
    assert sum(sizes) == N  # every step recorded once
    assert len(sizes) <= 3, sizes  # in a few transactions, not one per execution
    assert count_rows(database_url, "yoke_steps", "status = 'SUCCEEDED'") == N


def _poison(database_url: str) -> None:
    """A step named `poison` makes its transaction fail: at COMMIT on PostgreSQL (a deferred
    constraint trigger), at its statement on SQLite (a trigger), rolling back the batch."""
    if database_url.startswith("sqlite:"):
        import sqlite3

        conn = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        conn.execute(
            "CREATE TRIGGER poison BEFORE INSERT ON yoke_steps WHEN NEW.name = 'poison' "
            "BEGIN SELECT RAISE(ABORT, 'poisoned'); END"
        )
        conn.commit()
        conn.close()
        return
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as pg:
        pg.execute(
            "CREATE OR REPLACE FUNCTION yoke_test_poison() RETURNS trigger AS $$ BEGIN "
            "IF NEW.name = 'poison' THEN RAISE EXCEPTION 'poisoned'; END IF; RETURN NEW; "
            "END $$ LANGUAGE plpgsql"
        )
        pg.execute("DROP TRIGGER IF EXISTS poison ON yoke_steps")
        pg.execute(
            "CREATE CONSTRAINT TRIGGER poison AFTER INSERT ON yoke_steps "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION yoke_test_poison()"
        )


async def test_a_step_is_answered_only_after_its_commit(database_url: str) -> None:
    app = make_app(database_url)
    barrier = AtTheStep()
    answered: dict[str, bool] = {}  # execution id -> whether its step returned

    @app.workflow()
    async def wf(ctx: Context, input: Any) -> Any:
        await barrier.wait()
        try:
            await ctx.step("poison" if input == 0 else "fine", lambda: input)
        except YokeError:  # the store refused the batch
            answered[ctx.execution_id] = False
            raise
        answered[ctx.execution_id] = True
        return input

    async with app.running():
        _poison(database_url)
        sizes = _count_writes(app)
        ids = await barrier.start_all(app)
        done = {i: await app.executions.wait(i, 10) for i in ids}
    try:
        assert len(sizes) < N  # batched, so the poison fails its batch-mates too
        assert answered[ids[0]] is False and done[ids[0]].status is ExecutionStatus.FAILED
        for i in ids:
            recorded = count_rows(database_url, "yoke_steps", f"execution_id = '{i}'")
            # Returned only once committed; raised, nothing of it written.
            assert recorded == (1 if answered[i] else 0), (i, answered[i])
            want = ExecutionStatus.SUCCEEDED if answered[i] else ExecutionStatus.FAILED
            assert done[i].status is want
    finally:
        if not database_url.startswith("sqlite:"):
            import psycopg

            with psycopg.connect(database_url, autocommit=True) as pg:
                pg.execute("DROP TRIGGER IF EXISTS poison ON yoke_steps")
