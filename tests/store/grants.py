"""Helpers of the tests that drive the slot ledger through the `Store` protocol only: log a
start and grant it on a given instance with the slots it must take, or build a grant request;
and a step's record as a workflow's step writes it."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from yoke.store import (
    ExecutionRow,
    GrantOutcome,
    GrantRequest,
    NewExecution,
    NewStart,
    Slot,
    StartKind,
    StepRecord,
    StepStatus,
    Store,
)


def done_step(execution_id: str, position: int, name: str, result: str) -> StepRecord:
    """A step that succeeded at its first attempt."""
    return StepRecord(
        execution_id=execution_id,
        position=position,
        name=name,
        status=StepStatus.SUCCEEDED,
        result=result,
        error=None,
        attempts=1,
        first_attempt=1,
        retry_at=None,
    )


def new_start(*, instance: str, session: str = "s", workflow: str = "w") -> NewStart:
    return NewStart(
        start_id=str(uuid.uuid4()),
        kind=StartKind.START,
        workflow=workflow,
        session=session,
        tenant=session,
        priority=0,
        input="{}",
        fingerprint="fp",
        principal=None,
        idempotency_key=None,
        source_execution_id=None,
        from_step=None,
        instance_id=instance,
        created_at=1.0,
    )


def grant_request(start: NewStart, slots: Sequence[Slot], *, log: bool = False) -> GrantRequest:
    """A request to grant `start` (logged by the grant itself if `log`)."""
    execution = NewExecution(
        execution_id=str(uuid.uuid4()),
        start_id=start.start_id,
        workflow=start.workflow,
        session=start.session,
        tenant=start.tenant,
        input=start.input,
        parent_id=None,
        restarted_from=None,
        resumed_from=None,
        instance_id=start.instance_id,
        created_at=1.0,
    )
    return GrantRequest(
        start_id=start.start_id,
        execution=execution,
        slots=tuple(slots),
        log=start if log else None,
    )


async def run_granted(
    store: Store, *, instance: str, slots: Sequence[Slot], now: float = 1.0
) -> ExecutionRow:
    """A start logged, then granted: an execution RUNNING on `instance`, holding `slots`."""
    start = new_start(instance=instance)
    _, created = await store.log_start(start)
    assert created
    req = grant_request(start, slots)
    res = await store.grant_start(
        req.start_id,
        execution=req.execution,
        slots=req.slots,
        copy_steps=None,
        now=now,
    )
    assert res.outcome is GrantOutcome.GRANTED and res.execution is not None, res
    return res.execution
