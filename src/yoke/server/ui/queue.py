"""The queue as the dashboard shows it: the next picks, and each session's share, from the kernel.

Large queues: nothing here lists every queued start. `GroupedKernel.lane_heads` gives each session
with queued starts in one pass without sorting (O(sessions)); the views keep the top K of it with
`heapq.nsmallest` and look at the first K starts of those sessions only
(`GroupedKernel.first_pending`). Every number is read from memory: no store query, no count of rows.

Pick order is the executions' queue rule (priority first, then the session with the fewest
running per weight, then arrival), skipping what a full per-session or per-workflow limit holds
and counting each pick as running before the next; the global cap is left out (it says when a
start goes, not which goes next). Only the K sessions first in that order can supply the first K
picks: a session picked once only moves back, so one ranked below K is reached after K picks.

This module must never change the kernel.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

from yoke.executions import Limits
from yoke.kernel import GroupedKernel, Item

_ONE = 1 << 32  # the least_running key's fixed point, as the kernel scales running / weight


def _workflow(item: Item) -> str | None:
    for key in item.keys:
        if isinstance(key, tuple) and len(key) == 2 and key[0] == "workflow":
            return str(key[1])
    return None


def _rank(running: int, weight: float) -> int:
    return int(running * _ONE // weight)


@dataclass(frozen=True, kw_only=True, slots=True)
class Shares:
    """The fairness view's pass: the top K sessions (most under-served first) and, over every
    session with work, how many, the sum of their weights and Jain's index."""

    top: list[tuple[str, int, int, float]]  # (session, queued, running, weight)
    sessions: int
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

    def rows() -> Iterable[tuple[int, float, int, str, int, float]]:
        n, tw, sx, sxx = 0, 0.0, 0.0, 0.0
        for lane, queued, running, weight, _ in kernel.lane_heads():
            x = running / weight if running else 0.0
            n, tw, sx, sxx = n + 1, tw + weight, sx + x, sxx + x * x
            name = lane if type(lane) is str else str(lane)
            if (visible is None or visible(name)) and (q is None or q in name.lower()):
                flag = 0 if starved and name not in served else 1
                yield (flag, x, -queued, name, running, weight)
        for name in also:
            st = kernel.lane_stats(name)
            if st.running and not st.queued:  # with queued starts it was listed above
                x = st.running / st.weight
                n, tw, sx, sxx = n + 1, tw + st.weight, sx + x, sxx + x * x
                if (visible is None or visible(name)) and (q is None or q in name.lower()):
                    yield (1, x, 0, name, st.running, st.weight)
        totals[:] = [n, tw, sx, sxx]

    each = rows()
    top = heapq.nsmallest(k, each)
    for _ in each:  # nsmallest(0, ...) reads nothing; the totals need every row
        pass
    n, tw, sx, sxx = totals
    return Shares(
        top=[(name, -mq, r, w) for _, _, mq, name, r, w in top],
        sessions=int(n),
        total_weight=tw,
        jain=1.0 if sxx == 0 else sx * sx / (n * sxx),
    )


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
    every one), then what a full limit holds among the starts looked at."""
    q = query.lower() if query else None
    one = _ONE
    if visible is None and q is None:  # an operator's view of everything: the lean loop
        ranked: Iterable[tuple[int, int, int, int, Hashable, int, float]] = (
            (-head.priority, int(running * one // weight) if running else 0, head.seq, i, lane,
             running, weight)
            for i, (lane, _, running, weight, head) in enumerate(kernel.lane_heads())
        )  # fmt: skip
    else:
        see = visible or (lambda _: True)
        ranked = (
            (-head.priority, int(running * one // weight), head.seq, i, lane, running, weight)
            for i, (lane, _, running, weight, head) in enumerate(kernel.lane_heads())
            if see(str(lane)) and (q is None or q in str(lane).lower())
        )
    heads = heapq.nsmallest(k, ranked)
    lanes: dict[Hashable, list[Item]] = {h[4]: kernel.first_pending(h[4], k) for h in heads}
    running = {h[4]: h[5] for h in heads}
    weight = {h[4]: h[6] for h in heads}
    counts = dict(ledger)
    scap = limits.max_running_per_session
    picks: list[Pick] = []

    def held(item: Item) -> tuple[str, int, int] | None:
        if scap is not None and counts.get(f"session:{item.lane}", 0) >= scap:
            return ("max_running_per_session", scap, counts.get(f"session:{item.lane}", 0))
        wf = _workflow(item)
        wcap = limits.workflow_cap(wf) if wf else None
        if wcap is not None and counts.get(f"workflow:{wf}", 0) >= wcap:
            return ("max_running_per_workflow", wcap, counts.get(f"workflow:{wf}", 0))
        return None

    while len(picks) < k:
        best: tuple[tuple[int, int, int], Hashable, Item] | None = None
        for lane, items in lanes.items():
            for item in items:
                if held(item) is None:
                    key = (-item.priority, _rank(running[lane], weight[lane]), item.seq)
                    if best is None or key < best[0]:
                        best = (key, lane, item)
                    break  # a lane's first eligible start is its candidate
        if best is None:
            break
        _, lane, item = best
        lanes[lane].remove(item)
        running[lane] += 1
        wf = _workflow(item)
        for name in ("global", f"session:{item.lane}", f"workflow:{wf}"):
            counts[name] = counts.get(name, 0) + 1
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
        session=str(item.lane),
        workflow=_workflow(item) or "",
        priority=item.priority,
        blocked_by=held[0] if held else None,
        limit=held[1] if held else None,
        running=held[2] if held else None,
    )
