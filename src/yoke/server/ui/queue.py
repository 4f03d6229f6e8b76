"""Each session's share of the queue as the Fairness view shows it, from the kernel (the next
picks are `server/picks.py`).

Large queues: nothing here lists every queued start. `GroupedKernel.lane_heads` gives each session
with queued starts in one pass without sorting (O(sessions)); the view keeps the top K of it with
`heapq.nsmallest`. Every number is read from memory: no store query, no count of rows.

This module must never change the kernel.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

from yoke.executions.admission import session_of
from yoke.kernel import GroupedKernel


@dataclass(frozen=True, kw_only=True, slots=True)
class Shares:
    """The fairness view's pass: the top K sessions (most under-served first) and, over every
    session with work, how many, the sum of their weights and Jain's index."""

    top: list[tuple[str, int, int, float, Hashable]]  # (session, queued, running, weight, tenant)
    sessions: int
    per_tenant: dict[Hashable, int]  # sessions with work, by tenant
    total_weight: float
    jain: float


def shares(
    kernel: GroupedKernel,
    *,
    visible: Callable[[str], bool] | None,
    query: str | None,
    served: dict[str, int],
    also: Iterable[str],
    k: int,
) -> Shares:
    """One pass over the sessions with queued starts (then those of `also`, served lately,
    that run with nothing queued). Most under-served first: starving (queued, and no start in
    the window while `served` shows others had), then the fewest running per weight, then the
    longest queue. `visible` None: every session."""
    q = query.lower() if query else None
    starved = bool(served)
    totals = [0, 0.0, 0.0, 0.0]  # sessions, weights, sum of x, sum of x*x (x = running/weight)
    per_tenant: dict[Hashable, int] = {}
    group_of = kernel.lane_group

    def rows() -> Iterable[tuple[int, float, int, str, int, float, Hashable]]:
        n, tw, sx, sxx = 0, 0.0, 0.0, 0.0
        for lane, queued, running, weight, _ in kernel.lane_heads():
            x = running / weight if running else 0.0
            n, tw, sx, sxx = n + 1, tw + weight, sx + x, sxx + x * x
            group = group_of(lane)
            per_tenant[group] = per_tenant.get(group, 0) + 1
            name = lane if type(lane) is str else session_of(lane)
            if (visible is None or visible(name)) and (q is None or q in name.lower()):
                flag = 0 if starved and name not in served else 1
                yield (flag, x, -queued, name, running, weight, group)
        for name in also:
            st = kernel.lane_stats(name)
            if st.running and not st.queued:  # with queued starts it was listed above
                x = st.running / st.weight
                n, tw, sx, sxx = n + 1, tw + st.weight, sx + x, sxx + x * x
                group = group_of(name)
                per_tenant[group] = per_tenant.get(group, 0) + 1
                if (visible is None or visible(name)) and (q is None or q in name.lower()):
                    yield (1, x, 0, name, st.running, st.weight, group)
        totals[:] = [n, tw, sx, sxx]

    each = rows()
    top = heapq.nsmallest(k, each)
    for _ in each:  # nsmallest(0, ...) reads nothing; the totals need every row
        pass
    n, tw, sx, sxx = totals
    return Shares(
        top=[(name, -mq, r, w, g) for _, _, mq, name, r, w, g in top],
        sessions=int(n),
        per_tenant=per_tenant,
        total_weight=tw,
        jain=1.0 if sxx == 0 else sx * sx / (n * sxx),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantShares:
    """The fairness view's tenant pass: the top K tenants (most under-served first) and, over
    every tenant with work, the running count and the sum of weights their shares are of."""

    top: list[tuple[str, int, int, float]]  # (tenant, queued, running, weight)
    tenants: int
    running: int
    total_weight: float
    jain: float  # over the tenants with work, of running / weight


def tenant_shares(
    kernel: GroupedKernel, *, visible: Callable[[str], bool] | None, k: int
) -> TenantShares:
    """One pass over the tenants with work (the kernel's groups). Most under-served first:
    those with starts queued, then the fewest running per weight, then the longest queue.
    `visible`: which tenants may be named (None: every one)."""
    n, running, total_weight, sx, sxx = 0, 0, 0.0, 0.0, 0.0

    def rows() -> Iterable[tuple[int, float, int, str, int, float]]:
        nonlocal n, running, total_weight, sx, sxx
        for group, queued, run, weight in kernel.group_counts():
            if not (queued or run):
                continue
            x = run / weight
            n, running, total_weight = n + 1, running + run, total_weight + weight
            sx, sxx = sx + x, sxx + x * x
            name = str(group)
            if visible is None or visible(name):
                yield (0 if queued else 1, run / weight, -queued, name, run, weight)

    each = rows()
    top = heapq.nsmallest(k, each)
    for _ in each:  # the totals need every row
        pass
    return TenantShares(
        top=[(name, -mq, r, w) for _, _, mq, name, r, w in top],
        tenants=n,
        running=running,
        total_weight=total_weight,
        jain=1.0 if sxx == 0 else sx * sx / (n * sxx),
    )
