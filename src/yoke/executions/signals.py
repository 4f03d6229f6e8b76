"""Signals to executions: `app.executions.signal(execution_id, name, payload)`.

A signal is checked before anything is written (its name bounded and storable, its payload
plain JSON within `MAX_SIGNAL_BYTES`, like a start's input), then kept in the store in order
(`Store.time.signal`), whichever server runs the execution or none (a WAITING one has none):
if the execution waits for that name its wake-up is due at once, and the timer loop of any
server that admits fires it. Who may signal: the execution's own tenant, or a trusted caller
(no principal, or an OPERATOR or ADMIN without a tenant); to another tenant the execution is
not there (`NotFound`, as every route shows a tenant only its own). An execution that has
ended, or a child (it runs on its parent's slot and never waits), refuses signals (`Conflict`).

This module must never name a store backend.
"""

from __future__ import annotations

from typing import Any

from yoke.errors import BadType, BadValue, Conflict, NotFound, QuotaExceeded
from yoke.executions.model import Execution, Principal, encode_json, storable_text
from yoke.executions.state import Shared, check_id, execution_of
from yoke.executions.waits import check_signal_name
from yoke.store import ExecutionRow

MAX_SIGNAL_BYTES = 1 << 20  # a signal's payload, as JSON text
# Signals an execution keeps until its waits take them: what a tenant sends is bounded in
# number as in size, so its kept signals cannot grow the store without end.
MAX_KEPT_SIGNALS = 1000


def sees(principal: Principal | None, tenant: str) -> bool:
    """Whether `principal` may see (and signal) an execution of `tenant`."""
    return principal is None or principal.tenant is None or principal.tenant == tenant


async def send_signal(
    s: Shared,
    execution_id: str,
    name: str,
    payload: Any = None,
    *,
    principal: Principal | None = None,
) -> Execution:
    store = s.require()
    execution_id = check_id(execution_id, "execution_id")
    check_signal_name(name)
    if principal is not None and not isinstance(principal, Principal):
        raise BadType("principal must be a yoke.Principal or None")
    if principal is not None:
        storable_text(principal.name, "principal name")
    text = encode_json(payload, "signal payload")
    if len(text.encode()) > MAX_SIGNAL_BYTES:
        raise BadValue(f"a signal's payload must be at most {MAX_SIGNAL_BYTES} bytes of JSON")

    def admit(row: ExecutionRow, kept: int) -> None:
        if not sees(principal, row.tenant):
            raise NotFound(f"no execution {execution_id}")
        if row.parent_id is not None:
            raise Conflict(f"execution {execution_id} is a child workflow: it never waits")
        if row.status.finished:
            raise Conflict(f"execution {execution_id} is {row.status.name}: it takes no signal")
        if kept >= MAX_KEPT_SIGNALS:
            raise QuotaExceeded(
                f"execution {execution_id} keeps {MAX_KEPT_SIGNALS} signals no wait has taken; "
                "send more once it has taken some"
            )

    row = await store.time.signal(
        execution_id,
        name,
        text,
        principal=None if principal is None else principal.name,
        now=s.clock.wall(),
        admit=admit,
    )
    if row is None:
        raise NotFound(f"no execution {execution_id}")
    return execution_of(row)
