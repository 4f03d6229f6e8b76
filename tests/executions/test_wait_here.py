"""`wait` on an execution that ran in this process answers from what the process knows (its end
as its finish recorded it), with no read of the store; one of another process is read from the
store. The answers are the store's own, field for field, on both stores."""

from __future__ import annotations

import asyncio
from typing import Any

from yoke.executions import Context, ExecutionStatus

from .helpers import make_app


def _count_reads(app: Any) -> list[str]:
    store = app.store
    real = store.get_execution
    reads: list[str] = []

    async def counted(execution_id: str) -> Any:
        reads.append(execution_id)
        return await real(execution_id)

    store.get_execution = counted
    return reads


def _app(database_url: str, go: asyncio.Event) -> Any:
    app = make_app(database_url)

    @app.workflow()
    async def wf(ctx: Context, input: Any) -> Any:
        if input["hold"]:
            await go.wait()
        doubled = await ctx.step("double", lambda: 2 * input["n"])
        if input["fail"]:
            raise ValueError(f"failed at {doubled}")
        return {"doubled": doubled, "text": "é\u2028"}

    return app


async def test_wait_answers_a_local_execution_as_the_store_would_without_reading_it(
    database_url: str,
) -> None:
    go = asyncio.Event()
    app = _app(database_url, go)
    inputs = [{"n": n, "fail": n % 2 == 1, "hold": n < 4} for n in range(8)]
    async with app.running():
        reads = _count_reads(app)
        ids = []
        for input in inputs:
            s = await app.executions.start("wf", input)
            assert s.execution_id is not None
            ids.append(s.execution_id)
        # Four wait while running (on the task), four after their end (from memory).
        waiting = [asyncio.create_task(app.executions.wait(i, 10)) for i in ids[:4]]
        await asyncio.sleep(0.05)
        go.set()
        answers = await asyncio.gather(*waiting)
        answers += [await app.executions.wait(i, 10) for i in ids[4:]]
        assert reads == []  # not one read of the store
        stored = [await app.executions.get_execution(i) for i in ids]
    assert answers == stored
    assert [a.status for a in answers] == [
        ExecutionStatus.FAILED if input["fail"] else ExecutionStatus.SUCCEEDED for input in inputs
    ]
    assert answers[1].error is not None and answers[1].error.step is None
    assert answers[2].output == {"doubled": 4, "text": "é\u2028"}
    assert all(a.finished_at is not None for a in answers)


async def test_wait_reads_the_store_for_an_execution_of_another_process(
    database_url: str,
) -> None:
    go = asyncio.Event()
    go.set()
    here, there = _app(database_url, go), _app(database_url, go)
    async with here.running(), there.running():
        s = await there.executions.start("wf", {"n": 3, "fail": False, "hold": False})
        assert s.execution_id is not None
        theirs = await there.executions.wait(s.execution_id, 10)
        reads = _count_reads(here)
        ours = await here.executions.wait(s.execution_id, 10)
    assert reads == [s.execution_id]
    assert ours == theirs and ours.output == {"doubled": 6, "text": "é\u2028"}


def test_the_memory_of_ended_executions_is_bounded() -> None:
    from yoke.executions.state import Ended
    from yoke.store import ExecutionRow, Finish

    def row(k: int, text: str = "null") -> ExecutionRow:
        return ExecutionRow(
            seq=k,
            execution_id=f"e{k}",
            start_id=None,
            workflow="wf",
            session="s",
            tenant="t",
            input=text,
            status=ExecutionStatus.RUNNING,
            output=None,
            error=None,
            parent_id=None,
            restarted_from=None,
            resumed_from=None,
            slot_keys=(),
            instance_id="i",
            created_at=1.0,
            finished_at=None,
        )

    ended = Ended(keep=2, max_bytes=100)
    done = Finish(execution_id="", status=ExecutionStatus.SUCCEEDED, output="1", error=None)
    for k in range(3):
        ended.add(row(k), done, 2.0)
    ended.add(row(3, '"' + "x" * 200 + '"'), done, 2.0)  # too large to keep
    assert len(ended) == 2 and ended.get("e0") is None and ended.get("e3") is None
    got = ended.get("e2")
    assert got is not None and (got.status, got.output, got.finished_at) == (
        ExecutionStatus.SUCCEEDED,
        1,
        2.0,
    )
