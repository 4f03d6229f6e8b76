"""The live regions of the dashboard's pages: which view feeds each, and with what parameters.

A region is one `<section>` of a page that htmx re-fetches (`/ui/f/<name>?...`) when the event
stream says the state changed; the page renders the same regions inline on first load. Its
figures come from the view function the matching `/v1` route serves, called with the same
parameters, so the page and its JSON twin show the same thing.

This module must never render or answer HTTP: it maps a region to its data.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import QueryParams

from yoke.errors import BadValue
from yoke.executions import ADMIN, OPERATOR, Principal
from yoke.server.auth import check_visible
from yoke.server.explain import explain
from yoke.server.routes_executions import visible_executions
from yoke.server.state import ServerState
from yoke.server.ui import stored, views
from yoke.store.text import check_text

Feed = Callable[[ServerState, Principal, dict[str, Any]], Awaitable[dict[str, Any]]]
MAX_PARAM = 256


@dataclass(frozen=True, kw_only=True, slots=True)
class Region:
    name: str
    template: str
    params: tuple[str, ...]  # the query parameters it takes (others are ignored)
    feed: Feed


def _int(raw: str | None, what: str, low: int, high: int, default: int) -> int:
    if raw is None or raw == "":
        return default
    if not raw.isascii() or not raw.isdigit() or len(raw) > 12:
        raise BadValue(f"{what} must be a whole number")
    return max(low, min(high, int(raw)))


def _text(raw: str | None, what: str) -> str | None:
    if not raw:
        return None
    return check_text(raw[:MAX_PARAM], what)


def params_of(region: Region, query: QueryParams) -> dict[str, str]:
    return {k: query[k][:MAX_PARAM] for k in region.params if query.get(k)}


async def _overview(s: ServerState, p: Principal, q: dict[str, Any]) -> dict[str, Any]:
    return await views.overview(s, p)


async def _queue(s: ServerState, p: Principal, q: dict[str, Any]) -> dict[str, Any]:
    return await views.admission(s, p, q=_text(q.get("q"), "q"), k=views.TOP_K)


async def _fairness(s: ServerState, p: Principal, q: dict[str, Any]) -> dict[str, Any]:
    window = _int(q.get("window"), "window", 5, 600, 60)
    return await views.fairness(s, p, window=window, q=_text(q.get("q"), "q"), k=views.TOP_K)


async def _why(s: ServerState, p: Principal, q: dict[str, Any]) -> dict[str, Any]:
    start_id = _text(q.get("id"), "start id")
    if start_id is None:
        raise BadValue("which start? (?id=)")
    start = await s.executions.get(start_id)
    check_visible(p, start.tenant, f"start {start_id}")
    ledger = await s.store().ledger()
    why = explain(s.executions, start, ledger, principal=p, grants_per_second=views.grant_rate(s))
    return {
        "start": {
            "start_id": start.start_id,
            "status": start.status.value,
            "workflow": start.workflow,
            "session": start.session,
            "priority": start.priority,
            "position": start.position,
            "execution_id": start.execution_id,
            "age_seconds": max(0.0, s.app.clock.wall() - start.created_at),
            "waited_seconds": None
            if start.decided_at is None
            else max(0.0, start.decided_at - start.created_at),
        },
        "why": why,
        "limits": s.executions.current_limits.to_json(),
    }


async def _executions(s: ServerState, p: Principal, q: dict[str, Any]) -> dict[str, Any]:
    return await visible_executions(  # the API's list, through its own filter
        s,
        p,
        status=_text(q.get("status"), "status"),
        session=_text(q.get("session"), "session"),
        workflow=_text(q.get("workflow"), "workflow"),
        cursor=_text(q.get("cursor"), "cursor"),
        limit=50,
    )


async def _execution(s: ServerState, p: Principal, q: dict[str, Any]) -> dict[str, Any]:
    execution_id = _text(q.get("id"), "execution id")
    if execution_id is None:
        raise BadValue("which execution? (?id=)")
    after = stored.step_cursor(_text(q.get("cursor"), "cursor"))
    return await stored.execution(s, p, execution_id, after=after)


async def _actors(s: ServerState, p: Principal, q: dict[str, Any]) -> dict[str, Any]:
    return await stored.actors(s, p)


async def _instances(s: ServerState, p: Principal, q: dict[str, Any]) -> dict[str, Any]:
    actor = _text(q.get("name"), "actor name")
    if actor is None:
        raise BadValue("which actor? (?name=)")
    return await stored.actor_instances(
        s,
        p,
        actor,
        tenant=_text(q.get("tenant"), "tenant"),
        cursor=_text(q.get("cursor"), "cursor"),
    )


async def _instance(s: ServerState, p: Principal, q: dict[str, Any]) -> dict[str, Any]:
    actor, instance_id = _text(q.get("name"), "actor name"), _text(q.get("id"), "instance id")
    if actor is None or instance_id is None:
        raise BadValue("which instance? (?name=&id=)")
    return await stored.actor_instance(
        s, p, actor, instance_id, tenant=_text(q.get("tenant"), "tenant")
    )


async def _workers(s: ServerState, p: Principal, q: dict[str, Any]) -> dict[str, Any]:
    return await stored.workers(s, p)


async def _timers(s: ServerState, p: Principal, q: dict[str, Any]) -> dict[str, Any]:
    return await stored.timers(s, p)


async def _schedules(s: ServerState, p: Principal, q: dict[str, Any]) -> dict[str, Any]:
    return await stored.schedules(s, p)


async def _audit(s: ServerState, p: Principal, q: dict[str, Any]) -> dict[str, Any]:
    before = q.get("before")
    return await stored.audit(
        s, p, before=None if not before else _int(before, "before", 1, 2**62, 1)
    )


REGIONS = {
    r.name: r
    for r in (
        Region(name="overview", template="r_overview.html", params=(), feed=_overview),
        Region(name="queue", template="r_queue.html", params=("q",), feed=_queue),
        Region(name="fairness", template="r_fairness.html", params=("q", "window"), feed=_fairness),
        Region(name="why", template="r_why.html", params=("id",), feed=_why),
        Region(
            name="executions",
            template="r_executions.html",
            params=("status", "session", "workflow", "cursor"),
            feed=_executions,
        ),
        Region(
            name="execution", template="r_execution.html", params=("id", "cursor"), feed=_execution
        ),
        Region(name="actors", template="r_actors.html", params=(), feed=_actors),
        Region(
            name="instances",
            template="r_instances.html",
            params=("name", "tenant", "cursor"),
            feed=_instances,
        ),
        Region(
            name="instance",
            template="r_instance.html",
            params=("name", "id", "tenant"),
            feed=_instance,
        ),
        Region(name="workers", template="r_workers.html", params=(), feed=_workers),
        Region(name="timers", template="r_timers.html", params=(), feed=_timers),
        Region(name="schedules", template="r_schedules.html", params=(), feed=_schedules),
        Region(name="audit", template="r_audit.html", params=("before",), feed=_audit),
    )
}

# page name -> (title, regions on it, the role it needs to be listed in the navigation)
PAGES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "overview": ("Overview", ("overview",), ()),
    "admission": ("Admission", ("queue",), ()),
    "fairness": ("Fairness", ("fairness",), ()),
    "why": ("Why is it waiting?", ("why",), ()),
    "executions": ("Executions", ("executions",), ()),
    "execution": ("Execution", ("execution",), ()),
    "actors": ("Actors", ("actors",), ()),
    "instances": ("Actor instances", ("instances",), ()),
    "instance": ("Actor instance", ("instance",), ()),
    "workers": ("Workers", ("workers",), (OPERATOR, ADMIN)),
    "timers": ("Timers", ("timers",), ()),
    "schedules": ("Schedules", ("schedules",), ()),
    "audit": ("Audit", ("audit",), (ADMIN,)),
}
NAV = (
    "overview",
    "admission",
    "fairness",
    "executions",
    "actors",
    "workers",
    "timers",
    "schedules",
    "audit",
)
