"""The figures of the dashboard's record views (executions, actors, workers, timers, schedules,
audit), as JSON-ready dicts: the same service calls and the same JSON shapes as the `/v1` routes
of each.

Paged and bounded: lists take a limit and a cursor, never a count of rows. A plain tenant sees
its own executions, instances, timers and schedules; workers and the audit log are the
deployment's, so they need OPERATOR (workers) or ADMIN (audit), as in the API.

This module must never write to the store.
"""

from __future__ import annotations

import json
from typing import Any

from yoke.actors.inspection import no_instance
from yoke.errors import BadValue, NotFound
from yoke.executions import Failure, Principal
from yoke.executions.policy import Act, need
from yoke.server.auth import check_visible, home_tenant, privileged, sees
from yoke.server.models import audit_json, execution_json
from yoke.server.models_actors import (
    actor_json,
    decode_cursor,
    encode_cursor,
    executor_json,
    instance_json,
    instance_summary_json,
    worker_json,
)
from yoke.server.state import ServerState
from yoke.store.records import ExecutionRow

INSTANCES_PAGE = 50
EXECUTORS_SHOWN = 200
TENANTS_SHOWN = 200  # tenants with stored settings listed on the actors page
LINKS_SHOWN = 50  # children, and restarts or resumes, shown of one execution
STEPS_PAGE = 100  # steps per page by default
MAX_STEPS_PAGE = 500  # an execution may record any number of steps: a page is bounded


def step_cursor(raw: str | None) -> int:
    """The position a page of steps starts after (-1: from the first)."""
    if raw is None:
        return -1
    if not (raw.isascii() and raw.isdigit() and len(raw) < 19):
        raise BadValue("cursor must be the next_cursor of an earlier page")
    return int(raw)


async def execution(
    s: ServerState,
    p: Principal,
    execution_id: str,
    *,
    after: int = -1,
    limit: int = STEPS_PAGE,
) -> dict[str, Any]:
    """One execution with a page of its recorded steps (a child workflow is a step named
    `child:...`) past position `after`, and the executions it was restarted or resumed from."""
    ex = await s.executions.get_execution(execution_id)
    check_visible(p, ex.tenant, f"execution {execution_id}")
    steps = await s.store().steps_page(execution_id, after=after, limit=limit + 1)
    more = len(steps) > limit
    steps = steps[:limit]
    lineage: list[dict[str, str]] = []
    source = ex.restarted_from or ex.resumed_from
    while source is not None and len(lineage) < 20:
        try:
            before = await s.executions.get_execution(source)
        except NotFound:
            break
        lineage.append({"execution_id": before.execution_id, "status": before.status.value})
        source = before.restarted_from or before.resumed_from
    children, reruns = await s.store().linked_executions(execution_id, limit=LINKS_SHOWN)
    return {
        **execution_json(ex),
        "children": [_link(c) for c in children if sees(p, c.tenant)],
        "reruns": [
            {**_link(r), "kind": "restart" if r.restarted_from == execution_id else "resume"}
            for r in reruns
            if sees(p, r.tenant)
        ],
        "steps": [
            {
                "position": st.position,
                "name": st.name,
                "status": st.status.value,
                "result": json.loads(st.result),
                "attempts": st.attempts,
                "error": None if st.error is None else Failure.decoded(st.error).to_json(),
                "retry_at": st.retry_at,
                "recorded_at": st.recorded_at,
            }
            for st in steps
        ],
        "next_cursor": str(steps[-1].position) if more else None,
        "lineage": lineage,
    }


def _link(row: ExecutionRow) -> dict[str, Any]:
    return {"execution_id": row.execution_id, "status": row.status.value, "workflow": row.workflow}


async def actors(s: ServerState, p: Principal) -> dict[str, Any]:
    tenant = None if privileged(p) else home_tenant(p)
    views = await s.app.actors.inspect.actors(tenant=tenant)
    # The fleet-wide weights and caps the fair claim drains by (PUT /v1/tenants): a plain
    # tenant sees its own row only, as on GET /v1/tenants.
    settings = await s.app.tenants.list(principal=p, limit=TENANTS_SHOWN)
    return {
        "tenant": tenant,
        "items": [actor_json(v) for v in views],
        "tenants": [
            {
                "tenant": t.tenant,
                "weight": t.weight,
                "max_running": t.max_running,
                "updated_by": t.updated_by,
                "updated_at": t.updated_at,
            }
            for t in settings
        ],
    }


async def actor_instances(
    s: ServerState, p: Principal, actor: str, *, tenant: str | None, cursor: str | None
) -> dict[str, Any]:
    """A page of one actor's instances, scoped as `GET /v1/actors/{name}/instances` is: a plain
    principal's home tenant (another tenant asked: nothing), a privileged one's `tenant` or
    all."""
    inspect = s.app.actors.inspect
    inspect.definition(actor)  # an unknown actor is 404
    home = home_tenant(p)
    if not privileged(p):
        if tenant is not None and tenant != home:
            return {"actor": actor, "tenant": tenant, "items": [], "next_cursor": None}
        tenant = home
    after = None if cursor is None else decode_cursor(cursor, actor)
    page = await inspect.instances(actor, tenant=tenant, after=after, limit=INSTANCES_PAGE)
    return {
        "actor": actor,
        "tenant": tenant,
        "items": [instance_summary_json(i) for i in page.items],
        "next_cursor": None if page.next_after is None else encode_cursor(page.next_after),
    }


async def actor_instance(
    s: ServerState, p: Principal, actor: str, instance_id: str, *, tenant: str | None
) -> dict[str, Any]:
    """One instance as `GET /v1/actors/{name}/instances/{id}` shows it: queue depth, in
    flight, dead letters, the worker that owns it, its state."""
    inspect = s.app.actors.inspect
    home = home_tenant(p)
    tenant = tenant or home
    if not privileged(p) and tenant != home:
        inspect.definition(actor)
        raise no_instance(actor, instance_id)  # as absent: ids of others are not told
    return instance_json(await inspect.instance(actor, instance_id, tenant=tenant))


async def workers(s: ServerState, p: Principal) -> dict[str, Any]:
    need(p, Act.READ_FLEET)  # called outside the route table: the same entry
    inspect = s.app.actors.inspect
    views = await inspect.workers()
    executors = await inspect.executors(tenant=None, limit=EXECUTORS_SHOWN)
    return {
        "stale_after": inspect.stale_after,
        "forget_after": inspect.forget_after,
        "items": [worker_json(w) for w in views],
        "executor_mode": executor_mode(s),
        "executors": [executor_json(e) for e in executors],
    }


def executor_mode(s: ServerState) -> str:
    """Where this server's app runs `process()`: `inline` (in each worker) or `process` (in a
    process per tenant); workers started apart choose their own, and their executors are
    listed whatever this says."""
    return str(s.app.actors.executor_settings.mode)


async def timers(s: ServerState, p: Principal, *, limit: int = 50) -> dict[str, Any]:
    mine = None if privileged(p) else home_tenant(p)
    rows = await s.app.actors.inspect.timers(limit=limit, tenant=mine)
    now_ms = int(s.app.clock.wall() * 1000)
    items = [
        {
            "timer_id": t.timer_id,
            "tenant": t.tenant,
            "stream": t.stream,
            "fire_at": t.fire_at_ms / 1000,
            "due_in_seconds": round((t.fire_at_ms - now_ms) / 1000, 3),
            "data": json.loads(t.data),
        }
        for t in rows
    ]
    return {"items": items}


async def schedules(s: ServerState, p: Principal, *, limit: int = 200) -> dict[str, Any]:
    """The schedules the caller may see (a plain tenant: its own), with next and last runs."""
    rows = await s.app.schedules.list(principal=p, limit=limit)
    now = s.app.clock.wall()
    items = [{**r.to_json(), "due_in_seconds": round(r.next_at - now, 3)} for r in rows]
    return {"items": items}


async def audit(
    s: ServerState, p: Principal, *, before: int | None, limit: int = 50
) -> dict[str, Any]:
    need(p, Act.READ_AUDIT)
    rows = await s.store().recent_controls(before_seq=before, limit=limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    items = [
        audit_json(
            _entry(
                r.seq, r.kind, r.principal, r.tenant, r.roles, r.subject, r.before, r.after, r.at
            )
        )
        for r in rows
    ]
    return {"items": items, "next_before": rows[-1].seq if more else None}


def _entry(
    seq: int,
    kind: str,
    principal: str,
    tenant: str | None,
    roles: tuple[str, ...],
    subject: str | None,
    before: str | None,
    after: str | None,
    at: float,
) -> Any:
    from yoke.executions import AuditEntry

    return AuditEntry(
        seq=seq,
        kind=kind,
        principal=principal,
        tenant=tenant,
        roles=roles,
        subject=subject,
        before=None if before is None else json.loads(before),
        after=None if after is None else json.loads(after),
        at=at,
    )
