"""Step retries (`ctx.step(..., retry=yoke.Retry(...))`, `@app.workflow(retry=)`): a step is
tried again on the exceptions its rule names, up to its attempts, after pauses by yoke's one
retry rule; every failed attempt is recorded before the pause, so the count goes on across a
resume; a step that gives up fails the execution with its error, on both stores."""

from __future__ import annotations

import contextlib
import random
from dataclasses import replace
from typing import Any

import pytest

import yoke
from yoke.errors import BadType, BadValue
from yoke.executions import Context, ExecutionStatus, StepStatus
from yoke.executions.steps import Attempts
from yoke.retry import RetryPolicy
from yoke.store import StepRow

from .helpers import make_app

QUICK = yoke.Retry(max_attempts=3, backoff=0.01, max_backoff=0.02)


class Flaky:
    """A step function that fails its first `failures` calls, then returns how many calls."""

    def __init__(self, failures: int, exc: type[Exception] = ConnectionError) -> None:
        self.failures = failures
        self.exc = exc
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.exc(f"call {self.calls} failed")
        return self.calls


async def test_a_flaky_step_is_retried_and_its_attempts_recorded(database_url: str) -> None:
    app = make_app(database_url)
    flaky = Flaky(2)

    @app.workflow()
    async def wf(ctx: Context, input: Any) -> Any:
        return await ctx.step("call", flaky, retry=QUICK)

    async with app.running():
        s = await app.executions.start("wf")
        assert s.execution_id is not None
        done = await app.executions.wait(s.execution_id, 10)
        assert done.status is ExecutionStatus.SUCCEEDED and done.output == 3
        assert app.store is not None
        [step] = await app.store.steps_of(s.execution_id)
    assert flaky.calls == 3
    assert (step.status, step.attempts, step.first_attempt, step.result) == (
        StepStatus.SUCCEEDED,
        3,
        1,
        "3",
    )


async def test_a_step_that_gives_up_fails_the_execution_with_its_error(database_url: str) -> None:
    app = make_app(database_url)
    flaky = Flaky(10)

    @app.workflow()
    async def wf(ctx: Context, input: Any) -> Any:
        await ctx.step("first", lambda: 1)
        return await ctx.step("call", flaky, retry=QUICK)

    async with app.running():
        s = await app.executions.start("wf")
        assert s.execution_id is not None
        failed = await app.executions.wait(s.execution_id, 10)
        assert app.store is not None
        steps = await app.store.steps_of(s.execution_id)
    assert flaky.calls == 3
    assert failed.status is ExecutionStatus.FAILED and failed.error is not None
    e = failed.error
    assert (e.type, e.message, e.step, e.attempt) == ("ConnectionError", "call 3 failed", "call", 3)
    assert e.traceback is not None and "in __call__" in e.traceback
    assert [(st.name, st.status, st.attempts) for st in steps] == [
        ("first", StepStatus.SUCCEEDED, 1),
        ("call", StepStatus.FAILED, 3),
    ]
    assert steps[1].error is not None and "call 3 failed" in steps[1].error


async def test_only_the_exceptions_retry_on_names_are_retried(database_url: str) -> None:
    app = make_app(database_url)
    flaky = Flaky(1, exc=KeyError)

    @app.workflow()
    async def wf(ctx: Context, input: Any) -> Any:
        rule = yoke.Retry(max_attempts=5, backoff=0.01, retry_on=(ConnectionError,))
        return await ctx.step("call", flaky, retry=rule)

    async with app.running():
        s = await app.executions.start("wf")
        assert s.execution_id is not None
        failed = await app.executions.wait(s.execution_id, 10)
    assert flaky.calls == 1
    assert failed.status is ExecutionStatus.FAILED and failed.error is not None
    assert (failed.error.type, failed.error.attempt) == ("KeyError", 1)


async def test_a_workflow_s_retry_is_the_default_of_its_steps(database_url: str) -> None:
    app = make_app(database_url)
    flaky, once = Flaky(2), Flaky(1)

    @app.workflow(retry=QUICK)
    async def wf(ctx: Context, input: Any) -> Any:
        a = await ctx.step("default", flaky)
        with contextlib.suppress(ConnectionError):
            await ctx.step("own", once, retry=yoke.Retry(max_attempts=1))
        return a

    async with app.running():
        s = await app.executions.start("wf")
        assert s.execution_id is not None
        done = await app.executions.wait(s.execution_id, 10)
    assert done.status is ExecutionStatus.SUCCEEDED and done.output == 3
    assert (flaky.calls, once.calls) == (3, 1)


async def test_a_resume_counts_on_and_gives_a_step_that_gave_up_a_new_budget(
    database_url: str,
) -> None:
    app = make_app(database_url)
    flaky = Flaky(4)  # the first execution gives up after 3; the resume's second attempt wins

    @app.workflow()
    async def wf(ctx: Context, input: Any) -> Any:
        return await ctx.step("call", flaky, retry=QUICK)

    async with app.running():
        s = await app.executions.start("wf")
        assert s.execution_id is not None
        assert (await app.executions.wait(s.execution_id, 10)).status is ExecutionStatus.FAILED
        again = await app.executions.resume(s.execution_id)
        assert again.execution_id is not None
        done = await app.executions.wait(again.execution_id, 10)
        assert app.store is not None
        [step] = await app.store.steps_of(again.execution_id)
    assert done.status is ExecutionStatus.SUCCEEDED and done.output == 5
    assert (step.attempts, step.first_attempt, step.status) == (5, 4, StepStatus.SUCCEEDED)


async def test_a_step_timeout_raises_step_timeout_and_is_retried(database_url: str) -> None:
    import asyncio

    app = make_app(database_url)
    naps: list[float] = []

    async def nap(seconds: float) -> str:
        naps.append(seconds)
        await asyncio.sleep(seconds if len(naps) < 3 else 0)
        return "awake"

    @app.workflow()
    async def wf(ctx: Context, input: Any) -> Any:
        try:
            await ctx.step("stuck", nap, 30, timeout=0.05)
        except yoke.StepTimeout as exc:
            caught = str(exc)
        woke = await ctx.step("nap", nap, 30, timeout=0.05, retry=QUICK)
        return [caught, woke]

    async with app.running():
        s = await app.executions.start("wf")
        assert s.execution_id is not None
        done = await app.executions.wait(s.execution_id, 10)
        assert app.store is not None
        steps = await app.store.steps_of(s.execution_id)
    assert done.status is ExecutionStatus.SUCCEEDED
    assert done.output == ["step 'stuck' ran past its timeout of 0.05 s", "awake"]
    assert [(st.name, st.status, st.attempts) for st in steps] == [
        ("stuck", StepStatus.FAILED, 1),
        ("nap", StepStatus.SUCCEEDED, 2),
    ]
    assert steps[0].error is not None and "StepTimeout" in steps[0].error


def test_pauses_follow_the_one_retry_rule() -> None:
    rule = yoke.Retry(max_attempts=6, backoff=0.5, max_backoff=3, jitter=0.2)
    policy = RetryPolicy(first=0.5, most=3, jitter=0.2)
    for n in range(1, 7):
        assert rule.pause(n, random.Random(n)) == policy.pause(n, random.Random(n))
    attempts = Attempts(rule, None)
    pauses = []
    while True:
        attempts.begin()
        pause = attempts.failed(ConnectionError(), random.Random(0))
        if pause is None:
            break
        pauses.append(pause)
    assert attempts.made == 6 and len(pauses) == 5
    unjittered = [0.5, 1.0, 2.0, 3.0, 3.0]
    assert all(p * 0.8 - 1e-9 <= p <= u for p, u in zip(pauses, unjittered, strict=True))


def test_a_recorded_retry_goes_on_within_its_budget() -> None:
    rule = yoke.Retry(max_attempts=3, backoff=1)
    retrying = StepRow(
        execution_id="e",
        position=0,
        name="s",
        result="null",
        recorded_at=1.0,
        status=StepStatus.RETRYING,
        attempts=2,
        first_attempt=1,
        retry_at=9.0,
    )
    a = Attempts(rule, retrying)
    assert (a.made, a.first, a.due) == (2, 1, 9.0)
    assert a.begin() == 3 and a.failed(ConnectionError()) is None  # the budget's last
    gave_up = replace(retrying, status=StepStatus.FAILED, attempts=3, retry_at=None)
    b = Attempts(rule, gave_up)
    assert (b.made, b.first, b.due) == (3, 4, None)
    assert b.begin() == 4 and b.failed(ConnectionError()) is not None


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_attempts": 0}, BadValue),
        ({"max_attempts": 1.5}, BadType),
        ({"backoff": -1}, BadValue),
        ({"backoff": 5, "max_backoff": 1}, BadValue),
        ({"jitter": 2}, BadValue),
        ({"retry_on": ("ValueError",)}, BadType),
    ],
)
def test_a_bad_retry_rule_is_refused(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        yoke.Retry(**kwargs)


def test_a_bad_step_or_workflow_option_is_refused_where_it_is_given() -> None:
    app = yoke.App("sqlite:///:memory:")
    with pytest.raises(BadType):
        app.workflow(retry=3)(_noop)  # type: ignore[arg-type]
    with pytest.raises(BadValue):
        app.workflow(timeout=0)(_noop)
    assert yoke.Retry(retry_on=KeyError).retry_on == (KeyError,)  # type: ignore[arg-type]


async def _noop(ctx: Context, input: Any) -> None:
    return None
