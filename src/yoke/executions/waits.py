"""Durable sleeps and signal waits: a workflow that waits gives its slot back.

`ctx.sleep` / `ctx.sleep_until` record a step `sleep` holding the wake time; `ctx.wait_for(name)`
records a step `wait_for:<name>` (RETRYING until it ends, `retry_at` its deadline, if any). Then
the run is suspended (`Store.time.suspend`, one transaction: the step, the execution WAITING,
its ledger slots released, its wake-up logged SCHEDULED) and unwinds with `Suspended`, which no
workflow code catches (a `BaseException`, like a cancel). At the wake time (or when the signal
comes) the timer loop fires the wake-up and it is admitted like any start; its grant runs the
same execution again from the top, replaying its recorded steps: a sleep whose time has come
returns; a wait takes the oldest kept signal of its name (recorded as its step's result in the
same transaction) or, past its deadline, is recorded FAILED and raises `yoke.WaitTimeout`.

A child workflow runs on its parent's slot and cannot give it back: it may not wait.
This module must never decide admission or name a store backend.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from yoke.errors import BadType, BadValue, Conflict, WaitTimeout
from yoke.executions.model import check_seconds, storable_text
from yoke.store.records import NewStart, StartKind, StepRecord, StepStatus

if TYPE_CHECKING:
    from yoke.executions.context import Context

SLEEP = "sleep"
EARLY = 0.0005  # a wake-up this close to its time counts as on time (ms timers, float clocks)


class Suspended(BaseException):
    """The run gave its slot back to wait; its end is not an end (nothing to record)."""


def _record(ctx: Context, position: int, name: str, **what: Any) -> StepRecord:
    fields: dict[str, Any] = {
        "status": StepStatus.SUCCEEDED,
        "result": "null",
        "error": None,
        "attempts": 1,
        "first_attempt": 1,
        "retry_at": None,
    }
    fields.update(what)
    return StepRecord(execution_id=ctx.execution_id, position=position, name=name, **fields)


async def _suspend(
    ctx: Context,
    step: StepRecord | None,
    due: float | None,
    waiting_for: str | None = None,
) -> str | None:
    """Give the slot back until `due` (or the signal): raises `Suspended`, or returns the
    payload of a signal that was there already."""
    if ctx._on_wait is None:
        raise Conflict("a child workflow runs on its parent's slot: it cannot sleep or wait")
    now = ctx._clock.wall()
    wake = NewStart(
        start_id=str(uuid.uuid4()),
        kind=StartKind.WAKE,
        workflow=ctx.workflow,
        session=ctx.session,
        tenant=ctx.tenant,
        priority=ctx._priority,
        input="null",
        fingerprint="",
        principal=None,
        idempotency_key=None,
        source_execution_id=ctx.execution_id,
        from_step=None,
        instance_id=ctx._instance_id,
        created_at=now,
    )
    got = await ctx._store.time.suspend(
        ctx.execution_id,
        instance_id=ctx._instance_id,
        step=step,
        wake=wake,
        due_at_ms=None if due is None else int(due * 1000),
        waiting_for=waiting_for,
        now=now,
    )
    if got is not None:
        return got
    ctx._on_wait()
    raise Suspended


async def sleep_until(ctx: Context, wake: float) -> None:
    position, done = ctx.next_position(SLEEP)
    step = None
    if done is not None:
        wake = float(json.loads(done.result))
    else:
        step = _record(ctx, position, SLEEP, result=json.dumps(wake))
    if ctx._clock.wall() + EARLY >= wake:
        if step is not None:  # recorded, so that a replay agrees on the time
            await ctx._store.record_steps([step], now=ctx._clock.wall())
        return
    await _suspend(ctx, step, wake)


async def wait_for(ctx: Context, name: str, timeout: float | None) -> Any:
    check_signal_name(name)
    step_name = f"wait_for:{name}"
    position, done = ctx.next_position(step_name)
    if done is not None and done.status is StepStatus.SUCCEEDED:
        return json.loads(done.result)
    if done is not None and done.status is StepStatus.FAILED:
        raise WaitTimeout(f"no signal {name!r} came within its timeout")
    now = ctx._clock.wall()
    if done is not None:
        deadline = done.retry_at
    else:
        deadline = None if timeout is None else now + check_seconds(timeout, "timeout")
    waiting = _record(ctx, position, step_name, status=StepStatus.RETRYING, retry_at=deadline)
    taken = replace(waiting, status=StepStatus.SUCCEEDED, retry_at=None)
    if deadline is not None and now + EARLY >= deadline:
        got = await ctx._store.time.take_signal(ctx.execution_id, name, taken, now=now)
        if got is not None:
            return json.loads(got)
        error = json.dumps({"type": "WaitTimeout", "message": f"no signal {name!r}"})
        failed = replace(waiting, status=StepStatus.FAILED, retry_at=None, error=error)
        await ctx._store.record_steps([failed], now=now)
        raise WaitTimeout(f"no signal {name!r} came within its timeout")
    got = await _suspend(ctx, waiting, deadline, waiting_for=name)
    assert got is not None  # else it was suspended
    return json.loads(got)


MAX_SIGNAL_NAME = 200


def check_signal_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise BadType("a signal name must be a non-empty str")
    if len(name) > MAX_SIGNAL_NAME:
        raise BadValue(f"a signal name must be at most {MAX_SIGNAL_NAME} characters")
    return storable_text(name, "signal name")
