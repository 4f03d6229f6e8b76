"""`GET /v1/starts/{id}/why` in full: the kernel's explanation, an ETA and, for those who may
apply them, the fixes.

The explanation itself is `introspect.why` (the cap that holds the start, how many go first).
This adds what a person needs to act on it:
- `ahead_higher`: how many of those ahead have a higher priority (only sessions whose first
  queued start outranks this one are looked at);
- `eta_seconds`: when, at the recent grant rate, the starts ahead will have gone
  (`(ahead + 1) / rate`; None without a recent grant);
- `fixes`: the changes that would let it go sooner, each the same call the API makes, listed
  only for a principal holding the role: raise the limit that holds it (ADMIN,
  `PUT /v1/limits`) by enough for it and the starts ahead of it under that limit, only when
  that at most doubles the limit (a start with 841 ahead of it under `max_running=4` gets no
  raise to suggest: none in proportion would help); raise its priority above every queued
  start's (OPERATOR, `PATCH /v1/starts/{id}`) when starts ahead of it outrank it or, under
  `max_running` or no limit, merely came first.

This module must never change anything.
"""

from __future__ import annotations

from typing import Any

from yoke.executions import ADMIN, OPERATOR, Executions, Principal, Start, StartStatus
from yoke.server import introspect

RATE_WINDOW = 60  # seconds of grants the ETA's rate is measured over


def higher_ahead(ex: Executions, start: Start) -> int:
    k = ex.kernel
    total = 0
    for lane, queued, _, _, head in k.lane_heads():
        if head.priority > start.priority:
            ahead = k.first_pending(lane, queued)
            total += sum(1 for i in ahead if i.priority > start.priority)
    return total


LIMITS = ("max_running", "max_running_per_session", "max_running_per_workflow")  # PUT /v1/limits


def raise_to(ex: Executions, start: Start, why: dict[str, Any]) -> int | None:
    """The value of the limit that holds `start` at which it would run now (it and the starts
    ahead of it under that limit), or None when that more than doubles the limit."""
    limit, blocked = why["limit"], why["blocked_by"]
    if limit is None or blocked not in LIMITS:  # a tenant's cap is its settings', not these
        return None
    room = max(limit, 1)
    if blocked == "max_running_per_session":  # its own session's starts are the ones ahead
        item = ex.kernel.get(start.start_id)
        if item is None:
            return None
        first = [str(i.id) for i in ex.kernel.first_pending(item.lane, room)]
        if start.start_id not in first:
            return None
        needed = first.index(start.start_id) + 1
    else:  # every start ahead may take a slot of it first
        needed = (why["ahead"] or 0) + 1
    return limit + needed if needed <= room else None


def explain(
    ex: Executions,
    start: Start,
    ledger: dict[str, int],
    *,
    principal: Principal,
    grants_per_second: float | None,
) -> dict[str, Any]:
    out = introspect.why(ex, start, ledger)
    out["ahead_higher"] = None
    out["eta_seconds"] = None
    out["fixes"] = []
    if start.status is not StartStatus.QUEUED or ex.kernel.get(start.start_id) is None:
        return out
    ahead = out["ahead"] or 0
    out["ahead_higher"] = higher = higher_ahead(ex, start)
    if grants_per_second:
        out["eta_seconds"] = round((ahead + 1) / grants_per_second, 3)
    fixes: list[dict[str, Any]] = []
    to = raise_to(ex, start, out) if principal.has_any(ADMIN) else None
    if to is not None:
        fixes.append(
            {
                "action": "raise_limit",
                "limit": out["blocked_by"],
                "to": to,
                "call": "PUT /v1/limits",
                "role": ADMIN,
            }
        )
    first_come = ahead and out["blocked_by"] in (None, "max_running")
    if principal.has_any(OPERATOR, ADMIN) and (higher or first_come):
        top = max(head.priority for *_, head in ex.kernel.lane_heads())
        fixes.append(
            {
                "action": "set_priority",
                "priority": top + 1,
                "call": f"PATCH /v1/starts/{start.start_id}",
                "role": OPERATOR,
            }
        )
    out["fixes"] = fixes
    if higher:
        out["explanation"] += f" ({higher} of them of higher priority)"
    return out
