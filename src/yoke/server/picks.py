"""The predicted next picks of the executions' queue, for the scheduler's views (`GET
/v1/scheduler`, the dashboard's Admission view): the queue's own order replayed over the
tenants and sessions that can supply the first picks, counting each pick as running before the
next, skipping what a full tenant, per-session or per-workflow limit holds (the global cap says
when a start goes, not which goes next). `next_picks` says why its K tenants and their K
sessions suffice. Every number is read from memory: no store query.

This module must never change the kernel.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from yoke.executions import Limits
from yoke.executions.admission import session_of
from yoke.kernel import GroupedKernel, Item

_ONE = 1 << 32  # the kernel's fixed point for running / weight


def _workflow(item: Item) -> str | None:
    for key in item.keys:
        if isinstance(key, tuple) and len(key) == 2 and key[0] == "workflow":
            return str(key[1])
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class Pick:
    """One queued start in predicted pick order; `blocked_by` names the full limit holding it."""

    order: int | None  # 1 = next; None: held by a full limit within the K looked at
    start_id: str
    session: str
    workflow: str
    priority: int
    blocked_by: str | None
    limit: int | None
    running: int | None


class _Turns:
    """The tenants' places in the order while picks are replayed: a copy of each tenant's
    running count, weight, tag and tie-break, advanced by each replayed pick as the kernel
    advances its own (docs/kernel.md, the grouped kernel)."""

    def __init__(self, kernel: GroupedKernel) -> None:
        self._kernel = kernel
        self._of: dict[Hashable, list[Any]] = {}  # group -> [running, weight, S, tb, stride]
        self.v = kernel.virtual_time
        self._tb = kernel.tie_breaks

    def _get(self, group: Hashable) -> list[Any]:
        t = self._of.get(group)
        if t is None:
            gt = self._kernel.group_turn(group)
            t = self._of[group] = [gt.running, gt.weight, gt.S, gt.tb, gt.stride]
        return t

    def key(self, group: Hashable, negp: int, lane_running: int, seq: int) -> tuple[int, ...]:
        t = self._get(group)
        s = t[2] if t[2] > self.v else self.v
        return (negp, int(t[0] * _ONE // t[1]), s, t[3], lane_running, seq)

    def start(self, group: Hashable) -> None:
        t = self._get(group)
        s = t[2] if t[2] > self.v else self.v
        self.v = max(self.v, s)
        t[0] += 1
        t[2] = s + t[4]
        self._tb += 1
        t[3] = self._tb


def next_picks(
    kernel: GroupedKernel,
    limits: Limits,
    ledger: dict[str, int],
    *,
    visible: Callable[[str], bool] | None,
    query: str | None = None,
    k: int = 50,
) -> list[Pick]:
    """The first `k` picks among the starts `visible` lets the caller see (by session; None:
    every one), then what a full limit holds among the starts looked at.

    The picks replay the kernel's order over the `k` tenants first in it and, in each, its `k`
    sessions first in the tenant's own order: a session's place in its tenant changes only
    when it is picked, so a tenant's j-th pick comes from its first j sessions, and the first
    `k` picks come from at most `k` tenants. Each tenant keeps a heap of its sessions' first
    eligible starts, so a pick costs O(tenants + log sessions)."""
    q = query.lower() if query else None
    seen: list[tuple[tuple[int, ...], Hashable, Hashable]] = []
    first: dict[Hashable, tuple[int, ...]] = {}  # each tenant's best session's key
    for key, lane, group in kernel.lane_keys():
        name = session_of(lane)
        if (visible is None or visible(name)) and (q is None or q in name.lower()):
            seen.append((key, lane, group))
            b = first.get(group)
            if b is None or key < b:
                first[group] = key
    tenants = heapq.nsmallest(k, first, key=first.__getitem__)
    chosen = set(tenants)
    by_tenant: dict[Hashable, list[tuple[int, int, int, Hashable]]] = {g: [] for g in tenants}
    for key, lane, group in seen:
        if group in chosen:
            by_tenant[group].append((key[0], key[4], key[5], lane))
    turns = _Turns(kernel)
    lanes: dict[Hashable, list[Item]] = {}
    running: dict[Hashable, int] = {}
    groups: dict[Hashable, Hashable] = {}
    for group in tenants:
        for _, lane_running, _, lane in heapq.nsmallest(k, by_tenant[group]):
            lanes[lane] = kernel.first_pending(lane, k)
            running[lane] = lane_running
            groups[lane] = group
    counts = dict(ledger)
    scap = limits.max_running_per_session

    def held(item: Item) -> tuple[str, int, int] | None:
        tenant = groups[item.lane]
        tcap = kernel.group_stats(tenant).cap
        if tcap is not None and counts.get(f"tenant:{tenant}", 0) >= tcap:
            return ("executions.max_running of the tenant", tcap, counts[f"tenant:{tenant}"])
        session = f"session:{session_of(item.lane)}"
        if scap is not None and counts.get(session, 0) >= scap:
            return ("max_running_per_session", scap, counts[session])
        wf = _workflow(item)
        wcap = limits.workflow_cap(wf) if wf else None
        if wcap is not None and counts.get(f"workflow:{wf}", 0) >= wcap:
            return ("max_running_per_workflow", wcap, counts.get(f"workflow:{wf}", 0))
        return None

    def candidate(lane: Hashable) -> tuple[int, int, int, Hashable, Item] | None:
        """The lane's first start no full limit holds, keyed in its tenant's order."""
        for item in lanes[lane]:
            if held(item) is None:
                return (-item.priority, running[lane], item.seq, lane, item)
        return None

    heads: dict[Hashable, list[tuple[int, int, int, Hashable, Item]]] = {g: [] for g in tenants}
    for lane, group in groups.items():
        c = candidate(lane)
        if c is not None:
            heads[group].append(c)
    for h in heads.values():
        heapq.heapify(h)

    def best_of(group: Hashable) -> tuple[int, int, int, Hashable, Item] | None:
        """The tenant's best candidate, checked again: a pick elsewhere may have filled a
        limit that now holds it (then its lane offers its next start)."""
        h = heads[group]
        while h:
            top = h[0]
            if held(top[4]) is None:
                return top
            c = candidate(top[3])
            if c is None:
                heapq.heappop(h)
            else:
                heapq.heapreplace(h, c)
        return None

    picks: list[Pick] = []
    while len(picks) < k:
        best: tuple[tuple[int, ...], Hashable, tuple[int, int, int, Hashable, Item]] | None = None
        for group in tenants:
            top = best_of(group)
            if top is not None:
                key = turns.key(group, top[0], top[1], top[2])
                if best is None or key < best[0]:
                    best = (key, group, top)
        if best is None:
            break
        _, group, (_, _, _, lane, item) = best
        lanes[lane].remove(item)
        running[lane] += 1
        turns.start(group)
        wf = _workflow(item)
        session = session_of(item.lane)
        for name in ("global", f"tenant:{group}", f"session:{session}", f"workflow:{wf}"):
            counts[name] = counts.get(name, 0) + 1
        c = candidate(lane)
        if c is None:
            heapq.heappop(heads[group])
        else:
            heapq.heapreplace(heads[group], c)
        picks.append(_pick(len(picks) + 1, item, None))
    rest = [i for items in lanes.values() for i in items]
    rest.sort(key=lambda i: (-i.priority, i.seq))
    for item in rest[: max(0, k - len(picks))]:
        picks.append(_pick(None, item, held(item)))
    return picks


def _pick(order: int | None, item: Item, held: tuple[str, int, int] | None) -> Pick:
    return Pick(
        order=order,
        start_id=str(item.id),
        session=session_of(item.lane),
        workflow=_workflow(item) or "",
        priority=item.priority,
        blocked_by=held[0] if held else None,
        limit=held[1] if held else None,
        running=held[2] if held else None,
    )
