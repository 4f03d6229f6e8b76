"""The queue as the dashboard shows it: the next picks, and each session's share, from the kernel.

Large queues: nothing here lists every queued start. `Kernel.lane_heads` gives each session with
queued starts in one pass without sorting (O(sessions)); the views keep the top K of it with
`heapq.nsmallest` and look at the first K starts of those sessions only
(`Kernel.first_pending`). Every number is read from memory: no store query, no count of rows.

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
from yoke.kernel import Item, Kernel

_ONE = 1 << 32  # the least_running key's fixed point, as the kernel scales running / weight


def _workflow(item: Item) -> str | None:
    for key in item.keys:
        if isinstance(key, tuple) and len(key) == 2 and key[0] == "workflow":
            return str(key[1])
    return None


def _rank(running: int, weight: float) -> int:
    return int(running * _ONE // weight)


@dataclass(frozen=True, kw_only=True, slots=True)
class Sessions:
    """Every session with work now, from one pass over the kernel: (name, queued, running,
    weight) per session, how many, the sum of their weights and Jain's index of running per
    weight."""

    rows: list[tuple[str, int, int, float]]
    total_weight: float
    jain: float


def sessions(kernel: Kernel, also: Iterable[str] = ()) -> Sessions:
    """The sessions with queued starts, and those of `also` (served lately: they may run
    with nothing queued) that still have work."""
    rows = [(str(lane), q, r, w) for lane, q, r, w, _ in kernel.lane_heads()]
    for name in also:
        st = kernel.lane_stats(name)
        if st.running and not st.queued:  # one with queued starts is listed already
            rows.append((name, 0, st.running, st.weight))
    total_w = sx = sxx = 0.0
    for _, _, r, w in rows:
        if r:  # a session with nothing running adds 0 to both sums of x
            x = r / w
            sx += x
            sxx += x * x
        total_w += w
    j = 1.0 if sxx == 0 else sx * sx / (len(rows) * sxx)
    return Sessions(rows=rows, total_weight=total_w, jain=j)


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
    kernel: Kernel,
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


def jain(values: Iterable[float]) -> float:
    """Jain's fairness index, 1/n (one takes all) .. 1 (equal); 1 when nothing is shared."""
    xs = list(values)
    square_sum = sum(x * x for x in xs)
    if not xs or square_sum == 0:
        return 1.0
    return sum(xs) ** 2 / (len(xs) * square_sum)
