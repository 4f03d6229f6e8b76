"""The two-level order's cost per start where a start pays it: the admission core's whole
decision of a start (it arrives, is logged, queued, picked, granted, and its execution ends),
with no store and no event loop, run with the two-level kernel and with the flat one it
replaced (an adapter that takes a group and ignores it), interleaved run by run.

Used by `bench_kernel` (its "cost per start in the admission core" table). No store: the
grants are answered as a store with room would answer them, so the time is the core's own.
"""

from __future__ import annotations

import gc
import itertools
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

from yoke.executions import Limits
from yoke.executions.core import AdmissionCore
from yoke.executions.tickets import Grant, Launch, Log, Ticket
from yoke.kernel import Kernel
from yoke.store import (
    ExecutionRow,
    ExecutionStatus,
    GrantOutcome,
    GrantResult,
    NewStart,
    StartKind,
    StartStatus,
)


class FlatKernel(Kernel):
    """The flat admission kernel (least_running, global priority) behind the grouped
    kernel's calls: a group is taken and ignored, group caps and weights are not kept."""

    def __init__(self, limits: Limits) -> None:
        super().__init__(
            policy="least_running", priority_scope="global", global_cap=limits.max_running
        )

    def admit(self, item_id: Hashable, lane: Hashable, *, group: Hashable = None,
              **kw: Any) -> Any:  # fmt: skip
        return super().admit(item_id, lane, **kw)

    def offer(self, item_id: Hashable, lane: Hashable, *, group: Hashable = None,
              **kw: Any) -> Any:  # fmt: skip
        return super().offer(item_id, lane, **kw)

    def set_lane_cap(self, *args: Any) -> None:
        if len(args) == 2:
            super().set_lane_cap(args[0], args[1])

    def set_group_cap(self, group: Hashable, cap: int | None) -> None:
        pass

    def set_group_weight(self, group: Hashable, weight: float | None) -> None:
        pass

    def group_queued(self, group: Hashable) -> int:
        return 0


def _new(i: int, tenant: str, session: str) -> NewStart:
    return NewStart(
        start_id=f"s{i}", kind=StartKind.START, workflow="w", session=session, tenant=tenant,
        priority=0, input="null", fingerprint="", principal=None, idempotency_key=None,
        source_execution_id=None, from_step=None, instance_id="here", created_at=0.0,
    )  # fmt: skip


def _granted(g: Grant) -> GrantResult:
    req = g.request
    row = req.log.logged(seq=1) if req.log is not None else g.ticket.row
    ex = ExecutionRow(
        seq=1, execution_id=req.execution.execution_id, start_id=row.start_id,
        workflow=row.workflow, session=row.session, tenant=row.tenant, input=row.input,
        status=ExecutionStatus.RUNNING, output=None, error=None, parent_id=None,
        restarted_from=None, resumed_from=None, slot_keys=(), instance_id="here",
        created_at=0.0, finished_at=None,
    )  # fmt: skip
    start = row.__class__(**{f: getattr(row, f) for f in row.__slots__} | {
        "status": StartStatus.GRANTED, "execution_id": ex.execution_id})  # fmt: skip
    return GrantResult(outcome=GrantOutcome.GRANTED, start=start, execution=ex)


def cycle_ns(
    *, grouped: bool, tenants: int, sessions: int, cycles: int, clock: Callable[[], int]
) -> float:
    """ns per start at steady state: 16 running, 2 queued per session."""
    ids = (f"e{i}" for i in itertools.count())
    limits = Limits(max_running=16)
    core = AdmissionCore(limits, instance_id="here", new_id=lambda: next(ids))
    if not grouped:  # the core's parts all hold the one kernel: give them the flat one
        flat: Any = FlatKernel(limits)
        core.kernel = core.caps.kernel = core.tenant_groups.kernel = flat
    running: deque[Ticket] = deque()
    seq = itertools.count(1)
    n = itertools.count()

    def take(actions: list[Any]) -> None:
        grants = [a for a in actions if isinstance(a, Grant)]
        if grants:
            for a in core.granted(grants, [_granted(g) for g in grants], now=0.0):
                if isinstance(a, Launch):
                    running.append(a.ticket)

    def arrive(tenant: str, session: str) -> None:
        t, action = core.arrive(_new(next(n), tenant, session), None, now=0.0)
        if isinstance(action, Log):
            take(core.logged(t, action.start.logged(seq=next(seq)), True, now=0.0))
        else:
            take([action])

    lanes = [(f"t{t}", f"t{t}/s{s}") for t in range(tenants) for s in range(sessions)]
    for tenant, session in lanes * 2:
        arrive(tenant, session)
    gc.collect()
    gc.disable()
    t0 = clock()
    for i in range(cycles):
        t = running.popleft()
        core.begin(t)
        take(core.finishing(t, now=0.0))
        core.finished(t, now=0.0)
        tenant, session = lanes[i % len(lanes)]
        arrive(tenant, session)
    dt = clock() - t0
    gc.enable()
    return dt / cycles


def measure(runs: int, cycles: int) -> dict[str, dict[str, Any]]:
    clock = time.thread_time_ns
    out: dict[str, dict[str, Any]] = {}
    for tenants, sessions in ((1, 10), (100, 10), (10_000, 10)):
        flat: list[float] = []
        grouped: list[float] = []
        for _ in range(runs):
            shape = {"tenants": tenants, "sessions": sessions, "cycles": cycles, "clock": clock}
            flat.append(cycle_ns(grouped=False, **shape))  # type: ignore[arg-type]
            grouped.append(cycle_ns(grouped=True, **shape))  # type: ignore[arg-type]
        out[f"{tenants}x{sessions}"] = {"flat": flat, "grouped": grouped}
    return out
