"""Answers to "why is my start waiting?" and "what is the scheduler doing?", from the kernel.

The queue comes from `Executions.kernel`, read-only, and the limits from
`Executions.current_limits`. Counts of what runs come from the store's ledger, which is exact
across processes; the queue and its order come from this process's kernel (the queue lives in
one process, as the admission specification says).

The "next picks" are a prediction of the order in which slots, as they free, go to the queued
starts: the queue rule (priority, then the session with the fewest running, then arrival),
skipping what a full per-session or per-workflow limit holds, counting each pick as running
before the next. The global cap is left out: it says when, not who.

This module must never change the scheduler's state.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from yoke.executions import Executions, Limits, Start, StartStatus
from yoke.executions.admission import session_of
from yoke.kernel import GroupedKernel, Item
from yoke.server import picks

GLOBAL = "global"


def _kernel(ex: Executions) -> GroupedKernel:
    return ex.kernel


def _limits(ex: Executions) -> Limits:
    return ex.current_limits


def closing(ex: Executions) -> bool:
    return ex.closing


def _workflow_of(item: Item) -> str | None:
    for key in item.keys:
        if isinstance(key, tuple) and len(key) == 2 and key[0] == "workflow":
            return str(key[1])
    return None


def _ledger_key(key: Hashable) -> str | None:
    if key == GLOBAL:
        return GLOBAL
    if isinstance(key, tuple) and len(key) == 2:
        kind, name = key
        if kind == "lane":
            return f"session:{session_of(name)}"
        return f"{'tenant' if kind == 'group' else kind}:{name}"
    return None


def why(ex: Executions, start: Start, ledger: dict[str, int]) -> dict[str, Any]:
    base: dict[str, Any] = {
        "start_id": start.start_id,
        "status": start.status.value,
        "waiting": start.status is StartStatus.QUEUED,
        "blocked_by": None,
        "limit": None,
        "running": None,
        "ahead": None,
    }
    if start.status is not StartStatus.QUEUED:
        text = {StartStatus.GRANTED: f"granted: execution {start.execution_id}"}.get(
            start.status, f"{start.status.value.lower()}: {start.reason or 'no reason given'}"
        )
        return base | {"explanation": text}
    k = _kernel(ex)
    item = k.get(start.start_id)
    if item is None:
        return base | {"explanation": "queued in another server process; ask that one"}
    lim = _limits(ex)
    ahead = (start.position - 1) if start.position is not None else None
    base["ahead"] = ahead
    key = k.blocked_by(start.start_id)
    if key is None:
        text = (
            (
                "eligible now: it goes next when the dispatcher grants it or a slot held by "
                "another process frees"
            )
            if not ahead
            else (f"{ahead} queued start(s) of higher priority or earlier turn go first")
        )
        return base | {"explanation": text}
    ledger_key = _ledger_key(key)
    running = ledger.get(ledger_key, 0) if ledger_key else None
    if key == GLOBAL:
        name, cap = "max_running", lim.max_running
    elif isinstance(key, tuple) and key[0] == "lane":
        name, cap = "max_running_per_session", lim.max_running_per_session
    elif isinstance(key, tuple) and key[0] == "group":
        # Its tenant's cap (PUT /v1/tenants/{tenant}), not one of the limits.
        name, cap = "executions.max_running", ex.tenants.executions(str(key[1])).max_running
    else:
        wf = key[1] if isinstance(key, tuple) else str(key)
        name, cap = "max_running_per_workflow", lim.workflow_cap(str(wf))
    what = f"{name}={cap}" if cap is not None else name
    text = f"held by {what}: {running} running"
    if ahead:
        text += f"; {ahead} queued start(s) go before it"
    return base | {"blocked_by": name, "limit": cap, "running": running, "explanation": text}


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionCount:
    session: str
    running: int
    queued: int


def sessions(ex: Executions) -> list[SessionCount]:
    stats = _kernel(ex).stats()
    return [
        SessionCount(session=session_of(name), running=s.running, queued=s.queued)
        for name, s in stats.lanes.items()
        if s.running or s.queued
    ]


def jain(values: Iterable[int]) -> float:
    """Jain's fairness index, 1/n (one takes all) .. 1 (equal); 1 when nothing runs."""
    xs = list(values)
    square_sum = sum(x * x for x in xs)
    if not xs or square_sum == 0:
        return 1.0
    return float(sum(xs)) ** 2 / (len(xs) * square_sum)


def next_picks(ex: Executions, ledger: dict[str, int], n: int = 5) -> list[dict[str, Any]]:
    """The next `n` picks by the queue's own order (`picks.next_picks`, as the dashboard's)."""
    found = picks.next_picks(_kernel(ex), _limits(ex), ledger, visible=None, k=n)
    return [
        {
            "start_id": p.start_id,
            "session": p.session,
            "workflow": p.workflow,
            "priority": p.priority,
        }
        for p in found
        if p.order is not None
    ]


def scheduler(
    ex: Executions, ledger: dict[str, int], visible: Callable[[str], bool] | None = None
) -> dict[str, Any]:
    """The scheduler's state; with `visible`, only the sessions it accepts are named (in the
    sessions, the ledger and the next picks) and all others are one nameless sum, `others`."""
    k, lim = _kernel(ex), _limits(ex)
    per = sessions(ex)
    running = ledger.get(GLOBAL, k.running)
    upcoming = next_picks(ex, ledger)
    shown, others = per, None
    if visible is not None:
        shown = [s for s in per if visible(s.session)]
        hidden = [s for s in per if not visible(s.session)]
        others = {
            "running": sum(s.running for s in hidden),
            "queued": sum(s.queued for s in hidden),
        }
        ledger = {
            key: v
            for key, v in ledger.items()
            if not key.startswith(("session:", "tenant:")) or visible(key.partition(":")[2])
        }
        upcoming = [p for p in upcoming if visible(p["session"])]
    return {
        "running": running,
        "queued": k.queued,
        "max_running": lim.max_running,
        "slots_free": None if lim.max_running is None else max(0, lim.max_running - running),
        "ledger": {key: v for key, v in sorted(ledger.items()) if v},
        "sessions": [
            {"session": s.session, "running": s.running, "queued": s.queued}
            for s in sorted(shown, key=lambda s: (-s.queued, -s.running, s.session))
        ],
        "others": others,
        "next_picks": upcoming,
        "fairness": jain(s.running for s in per),
        "shutting_down": closing(ex),
    }
