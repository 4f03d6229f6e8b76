"""The route table: every route of the server, one row each, with who may call it.

The Starlette routes, their role checks and `/openapi.json` are all built from these rows
(`routing.starlette_routes`, `openapi.spec`), so adding a route is adding a row here and its
handler in a `routes_*` module. Roles are checked by the row before the handler runs; a
handler checks only what depends on the object (another tenant's start is 404 as if absent).

This module must never hold a route's logic: it only lists the routes.
"""

from __future__ import annotations

from typing import Any

from yoke.executions import ADMIN, OPERATOR
from yoke.executions.policy import Act
from yoke.server import models as m
from yoke.server import models_actors as ma
from yoke.server.auth import METRICS
from yoke.server.routes_actors import ActorsRoutes
from yoke.server.routes_control import ControlRoutes
from yoke.server.routes_executions import ExecutionsRoutes
from yoke.server.routes_executors import ExecutorsRoutes
from yoke.server.routes_ops import OpsRoutes
from yoke.server.routes_schedules import SchedulesRoutes
from yoke.server.routes_starts import StartsRoutes
from yoke.server.routes_streams import StreamsRoutes
from yoke.server.routing import ANY, PUBLIC, Answer, Op, may, role
from yoke.store.text import MAX_TEXT

SCRAPERS = role(METRICS, OPERATOR, ADMIN)


def query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


PAGE = query("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "page size")

WAIT = query(
    "wait", {"type": "number", "minimum": 0, "maximum": 60}, "seconds to long-poll for the grant"
)
WAIT_END = query(
    "wait", {"type": "number", "minimum": 0, "maximum": 60}, "seconds to long-poll for the end"
)
IDEM = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x20-\\x7e]+$"},
    "description": "a retry with the same key and body replays the first answer",
}
TEXT = {"type": "string", "minLength": 1, "maxLength": MAX_TEXT}
TENANT = query(
    "tenant",
    TEXT,
    "one tenant; default: every tenant for OPERATOR or ADMIN, the caller's own for others "
    "(who are shown nothing of another tenant)",
)
INSTANCE_TENANT = query(
    "tenant",
    TEXT,
    "the instance's tenant (ids are unique per tenant); default: the caller's own; another "
    "tenant's instance is 404 without OPERATOR or ADMIN",
)
APPEND_TENANT = query(
    "tenant",
    TEXT,
    "the tenant to append for (an ingest gateway's): OPERATOR or ADMIN only, 403 for another "
    "tenant's name from anyone else; default: the caller's own tenant",
)
SCHEDULE_TENANT = query(
    "tenant",
    TEXT,
    "the schedule's tenant: OPERATOR or ADMIN name any (default: `default`; the list: every "
    "tenant); anyone else only its own (another tenant's name is 403)",
)
EXECUTION_STATUSES = sorted(
    ["RUNNING", "WAITING", "SUCCEEDED", "FAILED", "CANCELLED", "ABORTED", "TIMED_OUT"]
)

_START = {"operationId": "getStart", "parameters": {"start_id": "$response.body#/start_id"}}
_START_LINKS = {
    "GetStart": _START,
    "WhyStart": {**_START, "operationId": "whyStart"},
    "CancelStart": {**_START, "operationId": "cancelStart"},
}
_EXECUTION = {"parameters": {"execution_id": "$response.body#/execution_id"}}
_EXECUTION_LINKS = {
    "GetExecution": {"operationId": "getExecution", **_EXECUTION},
    "RestartExecution": {"operationId": "restartExecution", **_EXECUTION},
    "CancelExecution": {"operationId": "cancelExecution", **_EXECUTION},
}
# How every way to ask for a slot answers (a start, a restart, a resume).
STARTED = {
    201: Answer(
        schema=m.StartOut,
        description="Granted: the execution runs",
        links={**_START_LINKS, **_EXECUTION_LINKS},
    ),
    202: Answer(
        schema=m.StartOut,
        description="Queued, or SCHEDULED (a delayed start: `at` or `delay`)",
        headers={"Location": {"schema": {"type": "string"}}},
        links=_START_LINKS,
    ),
}
ACCEPTED = {202: Answer(schema=m.EventOut, description="Stored; actors process it later")}
START_ERRORS = (404, 409, 422, 429)
OBJECT = {"type": "object"}


def ok(schema: Any, description: str, media_type: str = "application/json") -> dict[int, Answer]:
    return {200: Answer(schema=schema, description=description, media_type=media_type)}


def table(
    starts: StartsRoutes,
    executions: ExecutionsRoutes,
    control: ControlRoutes,
    streams: StreamsRoutes,
    actors: ActorsRoutes,
    executors: ExecutorsRoutes,
    ops: OpsRoutes,
    schedules: SchedulesRoutes,
) -> list[Op]:
    status = query("status", {"type": "string", "enum": EXECUTION_STATUSES}, "status")
    cursor = query("cursor", {"type": "string", "pattern": "^[0-9]{1,18}$"}, "next_cursor")
    actor_cursor = query("cursor", {**TEXT, "maxLength": ma.MAX_CURSOR}, "next_cursor")
    offset = query("offset", {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}, "skip")
    # Rows read as a table: method, path, handler, who may call, operationId, summary; then
    # the body, parameters, success answers and the error answers the handler can give.
    # fmt: off
    return [
        # -- starts ----------------------------------------------------------------------------
        Op("POST", "/v1/starts", starts.create, ANY, "createStart",
           "Ask for a slot: granted, queued, or refused",
           body=m.StartIn, query=(WAIT, IDEM), answers=STARTED, errors=(*START_ERRORS, 403),
           lean=True),
        Op("GET", "/v1/starts/{start_id}", starts.show, ANY, "getStart",
           "A start, with its execution id once granted",
           query=(WAIT,), answers=ok(m.StartOut, "The start"), errors=(404, 422)),
        Op("PATCH", "/v1/starts/{start_id}", starts.reprioritize, may(Act.SET_PRIORITY),
           "setStartPriority",
           "Change a queued start's priority",
           body=m.PriorityIn, answers=ok(m.StartOut, "The start"), errors=(404, 409, 422)),
        Op("DELETE", "/v1/starts/{start_id}", starts.cancel, may(Act.CANCEL_START), "cancelStart",
           "Cancel a queued start",
           answers=ok(m.StartOut, "The cancelled start"), errors=(404, 409, 422)),
        Op("GET", "/v1/starts/{start_id}/why", starts.why, ANY, "whyStart",
           "Why a start waits: the limit that holds it, how many go first",
           answers=ok(m.WhyOut, "The explanation"), errors=(404, 422)),
        # -- executions ------------------------------------------------------------------------
        Op("GET", "/v1/executions", executions.list, ANY, "listExecutions",
           "Executions, newest first",
           query=(status, query("session", TEXT, "session"), query("workflow", TEXT, "workflow"),
                  PAGE, cursor),
           answers=ok(m.ExecutionPageOut, "A page"), errors=(422,)),
        Op("GET", "/v1/executions/{execution_id}", executions.show, ANY, "getExecution",
           "An execution: status, output or error, links",
           query=(WAIT_END,), answers=ok(m.ExecutionOut, "The execution"), errors=(404, 422)),
        Op("POST", "/v1/executions/{execution_id}/restart", executions.restart, may(Act.RESTART),
           "restartExecution", "Restart (whole, or from a step); answers like POST /v1/starts",
           body=m.RestartIn, body_required=False, query=(WAIT, IDEM), answers=STARTED,
           errors=(*START_ERRORS, 403)),
        Op("POST", "/v1/executions/{execution_id}/resume", executions.resume, may(Act.RESUME),
           "resumeExecution", "Resume, re-using the steps done; answers like POST /v1/starts",
           body=m.ResumeIn, body_required=False, query=(WAIT, IDEM), answers=STARTED,
           errors=(*START_ERRORS, 403)),
        Op("POST", "/v1/executions/{execution_id}/cancel", executions.cancel,
           may(Act.CANCEL_EXECUTION),
           "cancelExecution",
           "Cancel a running execution, whichever server runs it (its children with it)",
           answers={**ok(m.ExecutionOut, "Stopped: the cancelled execution"),
                    202: Answer(schema=m.ExecutionOut,
                                description="Asked: its server has not stopped it yet")},
           errors=(404, 409, 422)),
        Op("POST", "/v1/executions/{execution_id}/signals/{name}", executions.signal, ANY,
           "signalExecution",
           "Send a signal to an execution (kept in order until a wait takes it), whichever "
           "server runs it",
           body=m.SignalIn, body_required=False, query=(IDEM,),
           answers={202: Answer(schema=m.ExecutionOut, description="Kept for the execution")},
           errors=(404, 409, 422)),
        # -- control ---------------------------------------------------------------------------
        Op("GET", "/v1/limits", control.limits, ANY, "getLimits", "The limits",
           answers=ok(m.LimitsOut, "The limits")),
        Op("PUT", "/v1/limits", control.set_limits, may(Act.SET_LIMITS), "setLimits",
           "Replace the limits; a field left out is off",
           body=m.LimitsIn, answers=ok(m.LimitsOut, "The new limits"), errors=(422,)),
        Op("GET", "/v1/tenants", control.tenants, ANY, "listTenants",
           "Tenant settings: weight, executions' and actors' limits (a tenant sees its own "
           "and the defaults, `*`, that apply to it)",
           answers=ok(m.TenantListOut, "The tenants with stored settings")),
        Op("PUT", "/v1/tenants/{tenant}", control.set_tenant, may(Act.SET_TENANT), "setTenant",
           "Change a tenant's settings (`*`: the defaults); a field left out stays, null clears",
           body=m.TenantIn, answers=ok(m.TenantOut, "The tenant's settings"), errors=(409, 422)),
        Op("GET", "/v1/scheduler", control.scheduler, ANY, "getScheduler",
           "Slots in use, queued by session, the next picks (a tenant sees its own)",
           answers=ok(m.SchedulerOut, "The scheduler")),
        Op("GET", "/v1/audit", control.audit, may(Act.READ_AUDIT), "getAudit",
           "Control-log entries",
           query=(PAGE, offset), answers=ok(m.AuditPageOut, "Entries, oldest first"),
           errors=(422,)),
        # -- schedules -------------------------------------------------------------------------
        Op("GET", "/v1/schedules", schedules.list, ANY, "listSchedules",
           "Schedules, by tenant and name (a tenant sees its own), with next and last runs",
           query=(SCHEDULE_TENANT, PAGE),
           answers=ok(m.ScheduleListOut, "The schedules"), errors=(403, 422)),
        Op("GET", "/v1/schedules/{name}", schedules.show, ANY, "getSchedule",
           "A schedule, with its next and last runs",
           query=(SCHEDULE_TENANT,), answers=ok(m.ScheduleOut, "The schedule"),
           errors=(403, 404, 422)),
        Op("PUT", "/v1/schedules/{name}", schedules.put, ANY, "setSchedule",
           "Make or replace a schedule: a workflow started at each tick of a cron expression "
           "or every N seconds, through admission, once per tick across servers",
           body=m.ScheduleIn, query=(SCHEDULE_TENANT,),
           answers=ok(m.ScheduleOut, "The schedule"), errors=(403, 404, 409, 422)),
        Op("DELETE", "/v1/schedules/{name}", schedules.delete, ANY, "deleteSchedule",
           "Delete a schedule (ticks started stay started)",
           query=(SCHEDULE_TENANT,), answers=ok(m.ScheduleOut, "The deleted schedule"),
           errors=(403, 404, 422)),
        # -- actors ----------------------------------------------------------------------------
        Op("POST", "/v1/streams/{stream}/events", streams.append, ANY, "appendEvent",
           "Append an event to a stream (the built-in portal for actors)",
           body=OBJECT, query=(APPEND_TENANT, IDEM), answers=ACCEPTED, errors=(403, 422)),
        Op("GET", "/v1/actors", actors.actors, ANY, "listActors",
           "The app's actors: subscriptions, queue settings, counts",
           query=(TENANT,), answers=ok(ma.ActorListOut, "The actors"), errors=(422,)),
        Op("GET", "/v1/actors/{name}/instances", actors.instances, ANY, "listActorInstances",
           "Instances of an actor, by tenant and id",
           query=(TENANT, PAGE, actor_cursor), answers=ok(ma.InstancePageOut, "A page"),
           errors=(404, 422)),
        # `:path`: an instance id is an event's key value, which may hold a "/".
        Op("GET", "/v1/actors/{name}/instances/{instance_id:path}", actors.instance, ANY,
           "getActorInstance", "An instance: state, queue depth, in flight, dead letters, owner",
           query=(INSTANCE_TENANT,), answers=ok(ma.InstanceOut, "The instance"),
           errors=(404, 422)),
        Op("GET", "/v1/workers", actors.workers, may(Act.READ_FLEET), "listWorkers",
           "Actor workers: heartbeats, live or stale, instances owned",
           answers=ok(ma.WorkerListOut, "The workers")),
        Op("GET", "/v1/executors", executors.executors, may(Act.READ_FLEET), "listExecutors",
           "Per-tenant executor processes, as their workers recorded them",
           query=(query("tenant", TEXT, "only this tenant's executors"),
                  query("limit", {"type": "integer", "minimum": 1, "maximum": 10000}, "at most")),
           answers=ok(ma.ExecutorListOut, "The executors"), errors=(422,)),
        # -- operations ------------------------------------------------------------------------
        Op("GET", "/metrics", ops.metrics, SCRAPERS, "metrics",
           "Prometheus metrics (bounded labels)",
           answers=ok({"type": "string"}, "Prometheus text", "text/plain")),
        Op("GET", "/healthz", ops.healthz, PUBLIC, "healthz", "Liveness",
           answers=ok(OBJECT, "Alive")),
        Op("GET", "/readyz", ops.readyz, PUBLIC, "readyz",
           "Readiness: the store answers (503 while starting, stopping, on a standby or not "
           "ready)",
           answers=ok(OBJECT, "Ready")),
        Op("GET", "/v1/ha", ops.ha, ANY, "getHa",
           "High availability: this server's role (leader, standby; solo without --ha), its "
           "epoch, and the current leader", answers=ok(OBJECT, "The roles")),
        Op("GET", "/openapi.json", ops.openapi, PUBLIC, "openapi", "This document",
           answers=ok(OBJECT, "OpenAPI 3.1")),
        Op("GET", "/docs", ops.docs, PUBLIC, "docs",
           "Interactive API docs (served from the package, no CDN)",
           answers=ok({"type": "string"}, "The page", "text/html")),
        Op("GET", "/docs/{asset}", ops.docs_asset, PUBLIC, "docsAsset",
           "A file of the interactive docs",
           answers=ok({"type": "string"}, "The file", "application/octet-stream"),
           errors=(404,)),
    ]
    # fmt: on
