"""What a start's trace is told, read off its ticket: the shell calls these at the points of a
start's life (it arrives, it is answered, its body runs, its end is recorded), only when the
ticket carries a trace (`yoke.tracing`: None while tracing is off).

This module must never import a tracer: it speaks `yoke.tracing`'s plain verbs.
"""

from __future__ import annotations

import contextlib

from yoke.errors import LimitExceeded, ShuttingDown
from yoke.executions.admission import QueueOrder
from yoke.executions.model import Failure
from yoke.executions.tickets import Phase, Ticket
from yoke.store import ExecutionStatus, NewStart
from yoke.tracing import Failed, StartTrace, Tracing

_NOTHING = contextlib.nullcontext()
_FAILURES = frozenset({ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT, ExecutionStatus.ABORTED})


def begin(tracing: Tracing, new: NewStart) -> StartTrace | None:
    """A start arrives: its trace, in its caller's context (None: tracing is off)."""
    if not tracing.enabled:
        return None
    return tracing.start(
        start_id=new.start_id,
        workflow=new.workflow,
        session=new.session,
        tenant=new.tenant,
        kind=new.kind.value,
        priority=new.priority,
    )


def answered(t: Ticket, trace: StartTrace, order: QueueOrder) -> None:
    """The shell answered `t` (or those who wait for its decision): queued, granted, or gone
    without a run (refused, cancelled, its idempotency key another's, the store failed it)."""
    phase = t.phase
    if phase is Phase.QUEUED:
        trace.queued(None if t.item is None else order.position(t.item))
    elif phase is Phase.GRANTED and t.row.execution_id is not None:
        trace.granted(t.row.execution_id)
    elif phase is Phase.ENDED and t.task is None:
        error = t.error
        if error is None:
            trace.ended(t.row.status.name, None)
            return
        # A limit or shutdown turning a start away is the scheduler at work; a store that
        # failed the start is a failure.
        refusal = isinstance(error, LimitExceeded | ShuttingDown)
        failed = None if refusal else Failed(type(error).__name__, str(error))
        trace.ended("REFUSED", failed, refused=str(error) if refusal else None)


def running(t: Ticket) -> contextlib.AbstractContextManager[None]:
    """Around the workflow's body: its span is the current one inside."""
    return _NOTHING if t.trace is None else t.trace.running()


def failed(status: ExecutionStatus, error: Failure | None) -> Failed | None:
    if status not in _FAILURES or error is None:
        return None
    return Failed(error.type or status.name, error.message)
