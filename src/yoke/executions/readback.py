"""What a grant batch did when its answer was lost.

A batch of grants is one transaction, but the answer to its COMMIT can be lost (the connection
drops as it is sent): the store raises, yet the batch may have committed. Its grants then hold
slots and have executions that only this process would run; treated as failed, the slots
would stay taken until the process stops. So a failed batch is read back: if any of its
executions exists, the batch committed, and each request's outcome is rebuilt from what the
store holds. If none exists, nothing was granted and the failure stands. If the store cannot
tell yet (it is still down), it is asked again, with back-off: a batch that committed and is
taken as failed leaves executions nobody runs and slots nobody frees.

This module only reads the store (and logs again a start whose log is not found, to learn who
holds its idempotency key); it never touches the kernel.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from yoke.retry import RetryPolicy, until_done
from yoke.store import (
    ExecutionRow,
    GrantOutcome,
    GrantRequest,
    GrantResult,
    StartStatus,
    Store,
)

log = logging.getLogger("yoke.executions")


async def read_back(
    store: Store,
    requests: Sequence[GrantRequest],
    *,
    policy: RetryPolicy,
    stopping: Callable[[], bool],
) -> list[GrantResult] | None:
    """What a failed batch committed (None: nothing), asked until the store can tell. Once
    `stopping()`, given up by the policy's rule (None): a peer's recovery then frees the
    slots."""
    found = await until_done(
        lambda: committed_outcomes(store, requests),
        policy=policy,
        what="reading back a failed grant batch",
        stopping=stopping,
        log=log,
    )
    return None if found is None else found[0]


async def committed_outcomes(
    store: Store, requests: Sequence[GrantRequest]
) -> list[GrantResult] | None:
    """The outcomes of a batch of `requests` that committed though its answer was lost, or
    None if it granted nothing. Raises `YokeError` while the store cannot tell."""
    executions = [await store.get_execution(r.execution.execution_id) for r in requests]
    if all(e is None for e in executions):
        return None
    return [await _outcome(store, r, e) for r, e in zip(requests, executions, strict=True)]


async def _outcome(
    store: Store, request: GrantRequest, execution: ExecutionRow | None
) -> GrantResult:
    start = await store.get_start(request.start_id)
    if start is not None and execution is not None:
        return GrantResult(outcome=GrantOutcome.GRANTED, start=start, execution=execution)
    if start is not None and start.status is StartStatus.QUEUED:
        return GrantResult(
            outcome=GrantOutcome.FULL, start=start if request.log is not None else None
        )
    if start is None and request.log is not None:
        # Not logged: its idempotency key was taken. Logging it again names the holder (or,
        # if the key was given back since, logs it now, QUEUED).
        [(row, created)] = await store.log_starts([request.log])
        if created:
            return GrantResult(outcome=GrantOutcome.FULL, start=row)
        return GrantResult(outcome=GrantOutcome.GONE, start=row)
    return GrantResult(outcome=GrantOutcome.GONE, start=start)
