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
from yoke.server import models as m
from yoke.server import models_actors as ma
from yoke.server.auth import METRICS
from yoke.server.routes_actors import ActorsRoutes
from yoke.server.routes_control import ControlRoutes
from yoke.server.routes_executions import ExecutionsRoutes
from yoke.server.routes_ops import OpsRoutes
from yoke.server.routes_starts import StartsRoutes
from yoke.server.routes_streams import StreamsRoutes
from yoke.server.routing import ANY, PUBLIC, Answer, Op, role
from yoke.store.text import MAX_TEXT

OPERATORS = role(OPERATOR, ADMIN)
ADMINS = role(ADMIN)
SCRAPERS = role(METRICS, OPERATOR, ADMIN)


def query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


def _page(maximum: int = 1000) -> dict[str, Any]:
    return query("limit", {"type": "integer", "minimum": 1, "maximum": maximum}, "page size")


WAIT = query(
    "wait", {"type": "number", "minimum": 0, "maximum": 60}, "seconds to long-poll for the grant"
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
        description="Queued",
        headers={"Location": {"schema": {"type": "string"}}},
        links=_START_LINKS,
    ),
}
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
    ops: OpsRoutes,
) -> list[Op]:
    status = query(
        "status",
        {
            "type": "string",
            "enum": sorted(["RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "ABORTED"]),
        },
        "status",
    )
    # fmt: off: a row per line-group reads as a table; the formatter would split every field
    return [
        # -- starts ----------------------------------------------------------------------------
        Op(
            method="POST",
            path="/v1/starts",
            handler=starts.create,
            access=ANY,
            name="createStart",
            summary="Ask for a slot: granted, queued, or refused",
            body=m.StartIn,
            query=(WAIT, IDEM),
            answers=STARTED,
            errors=(*START_ERRORS, 403),
        ),
        Op(
            method="GET",
            path="/v1/starts/{start_id}",
            handler=starts.show,
            access=ANY,
            name="getStart",
            summary="A start, with its execution id once granted",
            query=(WAIT,),
            answers=ok(m.StartOut, "The start"),
            errors=(404, 422),
        ),
        Op(
            method="PATCH",
            path="/v1/starts/{start_id}",
            handler=starts.reprioritize,
            access=OPERATORS,
            name="setStartPriority",
            summary="Change a queued start's priority",
            body=m.PriorityIn,
            answers=ok(m.StartOut, "The start"),
            errors=(404, 409, 422),
        ),
        Op(
            method="DELETE",
            path="/v1/starts/{start_id}",
            handler=starts.cancel,
            access=ANY,
            name="cancelStart",
            summary="Cancel a queued start",
            answers=ok(m.StartOut, "The cancelled start"),
            errors=(404, 409, 422),
        ),
        Op(
            method="GET",
            path="/v1/starts/{start_id}/why",
            handler=starts.why,
            access=ANY,
            name="whyStart",
            summary="Why a start waits: the limit that holds it, how many go first",
            answers=ok(m.WhyOut, "The explanation"),
            errors=(404, 422),
        ),
        # -- executions ------------------------------------------------------------------------
        Op(
            method="GET",
            path="/v1/executions",
            handler=executions.list,
            access=ANY,
            name="listExecutions",
            summary="Executions, newest first",
            query=(
                status,
                query("session", TEXT, "session"),
                query("workflow", TEXT, "workflow"),
                _page(),
                query(
                    "cursor",
                    {"type": "string", "pattern": "^[0-9]{1,18}$"},
                    "next_cursor of the page before",
                ),
            ),
            answers=ok(m.ExecutionPageOut, "A page"),
            errors=(422,),
        ),
        Op(
            method="GET",
            path="/v1/executions/{execution_id}",
            handler=executions.show,
            access=ANY,
            name="getExecution",
            summary="An execution: status, output or error, links",
            answers=ok(m.ExecutionOut, "The execution"),
            errors=(404, 422),
        ),
        Op(
            method="POST",
            path="/v1/executions/{execution_id}/restart",
            handler=executions.restart,
            access=ANY,
            name="restartExecution",
            summary="Restart (whole, or from a step); answers like POST /v1/starts",
            body=m.RestartIn,
            body_required=False,
            query=(WAIT, IDEM),
            answers=STARTED,
            errors=(*START_ERRORS, 403),
        ),
        Op(
            method="POST",
            path="/v1/executions/{execution_id}/resume",
            handler=executions.resume,
            access=ANY,
            name="resumeExecution",
            summary="Resume, re-using the steps done; answers like POST /v1/starts",
            body=m.ResumeIn,
            body_required=False,
            query=(WAIT, IDEM),
            answers=STARTED,
            errors=(*START_ERRORS, 403),
        ),
        Op(
            method="POST",
            path="/v1/executions/{execution_id}/cancel",
            handler=executions.cancel,
            access=ANY,
            name="cancelExecution",
            summary="Cancel a running execution",
            answers=ok(m.ExecutionOut, "The cancelled execution"),
            errors=(404, 409, 422),
        ),
        # -- control ---------------------------------------------------------------------------
        Op(
            method="GET",
            path="/v1/limits",
            handler=control.limits,
            access=ANY,
            name="getLimits",
            summary="The limits",
            answers=ok(m.LimitsOut, "The limits"),
        ),
        Op(
            method="PUT",
            path="/v1/limits",
            handler=control.set_limits,
            access=ADMINS,
            name="setLimits",
            summary="Replace the limits; a field left out is off",
            body=m.LimitsIn,
            answers=ok(m.LimitsOut, "The new limits"),
            errors=(422,),
        ),
        Op(
            method="GET",
            path="/v1/scheduler",
            handler=control.scheduler,
            access=ANY,
            name="getScheduler",
            summary="Slots in use, queued by session, the next picks (a tenant sees its own)",
            answers=ok(m.SchedulerOut, "The scheduler"),
        ),
        Op(
            method="GET",
            path="/v1/audit",
            handler=control.audit,
            access=ADMINS,
            name="getAudit",
            summary="Control-log entries",
            query=(
                _page(),
                query(
                    "offset",
                    {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
                    "entries to skip",
                ),
            ),
            answers=ok(m.AuditPageOut, "Entries, oldest first"),
            errors=(422,),
        ),
        # -- actors ----------------------------------------------------------------------------
        Op(
            method="POST",
            path="/v1/streams/{stream}/events",
            handler=streams.append,
            access=ANY,
            name="appendEvent",
            summary="Append an event to a stream (the built-in portal for actors)",
            body=OBJECT,
            query=(IDEM,),
            answers={202: Answer(schema=m.EventOut, description="Stored; actors process it later")},
            errors=(422,),
        ),
        Op(
            method="GET",
            path="/v1/actors",
            handler=actors.actors,
            access=ANY,
            name="listActors",
            summary="The app's actors: subscriptions, queue settings, counts",
            query=(TENANT,),
            answers=ok(ma.ActorListOut, "The actors"),
            errors=(422,),
        ),
        Op(
            method="GET",
            path="/v1/actors/{name}/instances",
            handler=actors.instances,
            access=ANY,
            name="listActorInstances",
            summary="Instances of an actor, by tenant and id",
            query=(
                TENANT,
                _page(),
                query(
                    "cursor", {**TEXT, "maxLength": ma.MAX_CURSOR}, "next_cursor of the page before"
                ),
            ),
            answers=ok(ma.InstancePageOut, "A page"),
            errors=(404, 422),
        ),
        # `:path`: an instance id is an event's key value, which may hold a "/".
        Op(
            method="GET",
            path="/v1/actors/{name}/instances/{instance_id:path}",
            handler=actors.instance,
            access=ANY,
            name="getActorInstance",
            summary="An instance: state, queue depth, in flight, dead letters, owner",
            query=(
                query(
                    "tenant",
                    TEXT,
                    "the instance's tenant (ids are unique per tenant); "
                    "default: the caller's own; another tenant's instance is 404 without "
                    "OPERATOR or ADMIN",
                ),
            ),
            answers=ok(ma.InstanceOut, "The instance"),
            errors=(404, 422),
        ),
        Op(
            method="GET",
            path="/v1/workers",
            handler=actors.workers,
            access=OPERATORS,
            name="listWorkers",
            summary="Actor workers: heartbeats, live or stale, instances owned",
            answers=ok(ma.WorkerListOut, "The workers"),
        ),
        # -- operations ------------------------------------------------------------------------
        Op(
            method="GET",
            path="/metrics",
            handler=ops.metrics,
            access=SCRAPERS,
            name="metrics",
            summary="Prometheus metrics (bounded labels)",
            answers=ok({"type": "string"}, "Prometheus text", "text/plain"),
        ),
        Op(
            method="GET",
            path="/healthz",
            handler=ops.healthz,
            access=PUBLIC,
            name="healthz",
            summary="Liveness",
            answers=ok(OBJECT, "Alive"),
        ),
        Op(
            method="GET",
            path="/readyz",
            handler=ops.readyz,
            access=PUBLIC,
            name="readyz",
            summary="Readiness: the store answers (503 while starting, stopping or not ready)",
            answers=ok(OBJECT, "Ready"),
        ),
        Op(
            method="GET",
            path="/openapi.json",
            handler=ops.openapi,
            access=PUBLIC,
            name="openapi",
            summary="This document",
            answers=ok(OBJECT, "OpenAPI 3.1"),
        ),
        Op(
            method="GET",
            path="/docs",
            handler=ops.docs,
            access=PUBLIC,
            name="docs",
            summary="Interactive API docs (served from the package, no CDN)",
            answers=ok({"type": "string"}, "The page", "text/html"),
        ),
        Op(
            method="GET",
            path="/docs/{asset}",
            handler=ops.docs_asset,
            access=PUBLIC,
            name="docsAsset",
            summary="A file of the interactive docs",
            answers=ok({"type": "string"}, "The file", "application/octet-stream"),
            errors=(404,),
        ),
    ]
    # fmt: on
