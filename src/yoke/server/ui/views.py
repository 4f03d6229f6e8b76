"""The figures of the dashboard's scheduler views, as JSON-ready dicts: each is both the answer
of a `/v1` route and what the page's template renders, so the two cannot disagree.

Every function takes the caller's principal and shows it only what it owns: a plain tenant sees
its own sessions, starts and rates; totals of everyone (slots in use, the global rate, Jain's
index) are aggregates without names. Large queues cost one pass over the sessions with queued
starts (`Kernel.lane_heads`) and the top K of it; the store is read for a few rows (the ages of
the starts shown, the newest limits entry), never counted.

This module must never change the scheduler.
"""

from __future__ import annotations

import asyncio
import heapq
from typing import Any

from yoke.actors.fairness import bucket_quantile
from yoke.actors.inspection import WorkerStatus
from yoke.errors import YokeError
from yoke.executions import Principal, Start
from yoke.executions.admission import session_of
from yoke.server import picks
from yoke.server.auth import owns, privileged, tenant_of
from yoke.server.explain import RATE_WINDOW
from yoke.server.recorder import SessionWindow, percentile, tenant_of_session
from yoke.server.state import ServerState
from yoke.server.ui import queue

TOP_K = 50
LIVE_EXECUTOR = frozenset({"STARTING", "READY"})


def _visible(p: Principal) -> Any:
    if privileged(p):
        return lambda session: True
    return lambda session: owns(p, session)


async def _starts(s: ServerState, ids: list[str]) -> dict[str, Start]:
    """The starts shown, read by id (at most TOP_K; a start decided meanwhile is left out)."""

    async def one(start_id: str) -> Start | None:
        try:
            return await s.executions.get(start_id)
        except YokeError:
            return None

    found = await asyncio.gather(*(one(i) for i in ids))
    return {st.start_id: st for st in found if st is not None}


async def limits_set_by(s: ServerState) -> dict[str, Any]:
    newest = await s.store().recent_controls(kind="limits", limit=1)
    if not newest:
        return {"set_by": None, "set_at": None}
    return {"set_by": newest[0].principal, "set_at": newest[0].at}


def _rate(s: ServerState, p: Principal, seconds: int) -> float:
    if privileged(p):
        return s.recorder.totals(seconds)[0] / seconds
    return sum(s.recorder.starts_where(seconds, lambda name: owns(p, name))) / seconds


async def overview(s: ServerState, p: Principal) -> dict[str, Any]:
    ex, k = s.executions, s.executions.kernel
    ledger = await s.store().ledger()
    see = _visible(p)
    heads = [(head.seq, str(head.id), queued) for lane, queued, _, _, head in k.lane_heads()
             if see(session_of(lane))]  # fmt: skip
    oldest = min(heads, default=None)
    oldest_age = None
    if oldest is not None:
        found = await _starts(s, [oldest[1]])
        st = found.get(oldest[1])
        oldest_age = None if st is None else max(0.0, s.app.clock.wall() - st.created_at)
    mine_running = sum(
        v for key, v in ledger.items() if key.startswith("session:") and see(key[8:])
    )
    workers_live = executors = None
    if privileged(p) and s.app.store is not None:
        inspect = s.app.actors.inspect
        try:
            views = await inspect.workers()
            workers_live = sum(1 for w in views if w.status.value == "live")
            rows = await inspect.executors(tenant=None, limit=1000)
            executors = sum(
                1 for e in rows if e.row.state in LIVE_EXECUTOR and e.worker is WorkerStatus.LIVE
            )
        except YokeError:
            workers_live = None
    refused = s.recorder.totals(60)[1] if privileged(p) else None
    lead = s.app.leadership
    return {
        "principal": p.name,
        "tenant": p.tenant,
        "roles": sorted(p.roles),
        "slots_used": ledger.get("global", 0),
        "slots_total": ex.current_limits.max_running,
        "running": ledger.get("global", 0) if privileged(p) else mine_running,
        "queued": k.queued if privileged(p) else sum(h[2] for h in heads),
        "refused_last_minute": refused,
        "starts_per_second": round(_rate(s, p, 10), 2),
        "workers_live": workers_live,
        "executors_live": executors,
        "executor_mode": str(s.app.actors.executor_settings.mode),
        "oldest_wait_seconds": None if oldest_age is None else round(oldest_age, 3),
        "shutting_down": ex.closing,
        # This server's part in an HA pair ("solo" without one) and the term it leads under;
        # the lease's holder names a process, which only operators see (on /v1/ha).
        "ha_role": "solo" if lead is None else lead.role.value,
        "ha_epoch": None if lead is None or not lead.is_leader else lead.epoch,
    }


async def admission(s: ServerState, p: Principal, *, q: str | None, k: int) -> dict[str, Any]:
    ex = s.executions
    store = s.store()
    ledger = await store.ledger()
    limits = ex.current_limits
    see = None if privileged(p) else _visible(p)
    found = picks.next_picks(ex.kernel, limits, ledger, visible=see, query=q, k=k)
    starts = await _starts(s, [x.start_id for x in found])
    now = s.app.clock.wall()
    full = limits.max_running is not None and ledger.get("global", 0) >= limits.max_running
    rows = []
    for x in found:
        st = starts.get(x.start_id)
        if st is None:
            continue
        if x.blocked_by:
            why = f"held by {x.blocked_by}={x.limit}: {x.running} running"
        elif full:
            why = f"all {limits.max_running} slots in use: pick {x.order} when one frees"
        else:
            why = "next pick" if x.order == 1 else f"pick {x.order}"
        rows.append(
            {
                "pick": x.order,
                "position": st.position,
                "start_id": x.start_id,
                "session": x.session,
                "workflow": x.workflow,
                "priority": x.priority,
                "age_seconds": round(max(0.0, now - st.created_at), 3),
                "blocked_by": x.blocked_by,
                "why": why,
            }
        )
    # Delayed starts wait in the store, not in the queue, until they are due.
    later = await store.time.scheduled(tenant=None if privileged(p) else tenant_of(p), limit=k)
    scheduled = [
        {
            "start_id": r.start_id,
            "tenant": r.tenant,
            "session": r.session,
            "workflow": r.workflow,
            "priority": r.priority,
            "due_at": None if r.due_at_ms is None else r.due_at_ms / 1000,
        }
        for r in later
        if q is None or q.casefold() in r.session.casefold()
    ]
    return {
        "queued": ex.kernel.queued if privileged(p) else None,
        "shown": len(rows),
        "query": q,
        "items": rows,
        "scheduled": scheduled,
        "limits": {**limits.to_json(), **await limits_set_by(s)},
        "slots_used": ledger.get("global", 0),
    }


async def fairness(
    s: ServerState, p: Principal, *, window: int, q: str | None, k: int
) -> dict[str, Any]:
    ex = s.executions
    see = _visible(p)
    served = s.recorder.sessions(window)
    folded = {t: w for t, w in s.recorder.folded(window).items() if see(t)}
    total_starts = s.recorder.totals(window)[0]
    now = queue.shares(
        ex.kernel,
        visible=None if privileged(p) else _visible(p),
        query=q,
        served={n: w.starts for n, w in served.items() if w.starts},
        also=list(served),
        k=k,
    )
    see_all = privileged(p)
    mine = tenant_of(p)
    tenants = queue.tenant_shares(
        ex.kernel, visible=None if see_all else (lambda t: t == mine), k=k
    )
    # The same snapshot as the rows: the kernel, read with no await since `shares` (the
    # ledger, read from the store a moment apart, counted a different set of grants), so the
    # rows' running add up to at most this and their shares of it to at most 100%.
    total_running = ex.kernel.running
    none = SessionWindow(session="", starts=0, waits=())
    rows = []
    for name, queued, running, weight, tenant in now.top:
        won = served.get(name, none)
        # A session's target: its tenant's weighted share of the slots, split between the
        # tenant's sessions with work (the order inside a tenant gives each the same).
        sessions = now.per_tenant.get(tenant, 1)
        target = ex.kernel.group_stats(tenant).weight / (tenants.total_weight or 1.0) / sessions
        p50, p99 = percentile(won.waits, 0.5), percentile(won.waits, 0.99)
        rows.append(
            {
                "session": name,
                "weight": weight,
                "queued": queued,
                "running": running,
                "starts": won.starts,
                "share_starts": round(won.starts / total_starts, 4) if total_starts else 0.0,
                "share_running": (
                    (round(running / total_running, 4) if total_running else 0.0)
                    if see_all
                    else None
                ),
                "target_share": round(target, 4) if see_all else None,
                "wait_p50": None if p50 is None else round(p50, 4),
                "wait_p99": None if p99 is None else round(p99, 4),
                "starving": bool(
                    queued
                    and not won.starts
                    and total_starts
                    and tenant_of_session(name) not in folded  # its starts may be in there
                ),
            }
        )
    return {
        "window_seconds": window,
        "tenants": _tenant_rows(s, tenants, window, see_all=see_all),
        "jain": round(now.jain, 4),
        "jain_tenants": round(tenants.jain, 4) if see_all else None,
        "sessions_with_work": now.sessions if privileged(p) else None,
        "starts": total_starts,
        "running": total_running,
        "query": q,
        "items": rows,
        "folded": [
            {
                "tenant": t,
                "starts": w.starts,
                "wait_p50": _rounded(percentile(w.waits, 0.5)),
                "wait_p99": _rounded(percentile(w.waits, 0.99)),
            }
            for t, w in sorted(folded.items())
        ],
        "actors": _actor_fairness(s, p, k),
    }


def _tenant_rows(
    s: ServerState, now: queue.TenantShares, window: int, *, see_all: bool
) -> list[dict[str, Any]]:
    """The tenants first: each one's weight, queued and running starts here, its share of the
    running against its weighted target (an operator's view only: a tenant's target share
    would tell it how many others have work), and its starts and refusals in the window (a
    refusal by rate, by its queue bound, by a limit). A plain tenant sees its own row alone
    (`now` names only the tenants the caller may see; its totals are over every tenant)."""
    recent = s.recorder.tenants(window)
    minute = s.recorder.tenants(60)
    rows = []
    for tenant, queued, running, weight in now.top:
        starts, _ = recent.get(tenant, (0, {}))
        refused = minute.get(tenant, (0, {}))[1]
        rows.append(
            {
                "tenant": tenant,
                "weight": weight,
                "queued": queued,
                "running": running,
                "share_running": (
                    (round(running / now.running, 4) if now.running else 0.0) if see_all else None
                ),
                "target_share": (
                    round(weight / now.total_weight, 4) if see_all and now.total_weight else None
                ),
                "starts": starts,
                "refused_last_minute": {
                    "rate": refused.get("rate", 0),
                    "queue_bound": refused.get("tenant_queue", 0),
                    "limit": refused.get("limit", 0),
                },
            }
        )
    return rows


def _actor_fairness(s: ServerState, p: Principal, k: int) -> dict[str, Any] | None:
    """This process's actor worker, per tenant (`yoke.actors.fairness`); None without one."""
    drain = s.app.actors.drain
    if drain is None:
        return None
    see_all = privileged(p)
    view = drain.fairness(top=k, visible=None if see_all else tenant_of(p))
    return {
        "jain": round(view.jain, 4) if see_all else None,
        "items": [
            {
                "tenant": f.tenant,
                "weight": f.weight,
                "processed": f.processed,
                "backlog": f.backlog,
                "oldest_pending": f.oldest_pending,
                "recent_share": round(f.recent_share, 4),
                "wait_p50": bucket_quantile(f.wait_buckets, 0.5),
                "wait_p99": bucket_quantile(f.wait_buckets, 0.99),
            }
            for f in view.tenants
        ],
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def series(s: ServerState, p: Principal, *, seconds: int) -> dict[str, Any]:
    """Per second: starts (the caller's own for a tenant), refusals and Jain's index (the
    operators'), and the p50 wait of the five busiest sessions the caller may see."""
    see = _visible(p)
    served = s.recorder.sessions(seconds)
    top = heapq.nlargest(
        5,
        (w for n, w in served.items() if see(n)),
        key=lambda w: (w.starts, w.session),
    )
    names = [w.session for w in top]
    data = s.recorder.series(seconds, names)
    out: dict[str, Any] = {"seconds": seconds, "t": data["t"], "sessions": names}
    if privileged(p):
        out["starts"] = data["starts"]
        out["refused"] = data["refused"]
        out["jain"] = data["jain"]
    else:
        out["starts"] = s.recorder.starts_where(seconds, see)
        out["refused"] = None
        out["jain"] = None
    out["waits"] = {name: data[f"wait:{name}"] for name in names}
    return out


def grant_rate(s: ServerState) -> float | None:
    granted, _ = s.recorder.totals(RATE_WINDOW)
    return granted / RATE_WINDOW if granted else None
