"""The OpenAPI 3.1 description of the v1 API, written by hand over the models' JSON schemas.

Paths are written out here, next to one another, so the description reads like the DESIGN.md
table it mirrors; bodies and answers take their schemas from `models`, so a field cannot be
described one way and served another. Every operation lists the error answers it can give as
problem JSON. The test suite checks real answers against this document (schemathesis).

This module must never serve anything; it only builds a dict.
"""

from __future__ import annotations

import copy
import functools
from importlib import metadata
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from yoke.server import models as m
from yoke.server import models_actors as ma
from yoke.store.text import MAX_TEXT

REF = "#/components/schemas/{model}"
PROBLEM = "application/problem+json"
_MODELS: list[type[BaseModel]] = [
    m.StartIn,
    m.PriorityIn,
    m.RestartIn,
    m.LimitsIn,
    m.StartOut,
    m.ExecutionOut,
    m.ExecutionPageOut,
    m.LimitsOut,
    m.AuditPageOut,
    m.WhyOut,
    m.SchedulerOut,
    m.EventOut,
    ma.ActorListOut,
    ma.InstancePageOut,
    ma.InstanceOut,
    ma.WorkerListOut,
    m.Problem,
]


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def _json(
    model: type[BaseModel],
    description: str,
    headers: dict[str, Any] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": _ref(model)}},
    }
    if headers:
        out["headers"] = headers
    return out


def _errors(*codes: int) -> dict[str, Any]:
    text = {
        400: "Malformed request (not JSON, or not an object)",
        401: "No valid token",
        403: "The principal lacks a role, or a reviewer vetoed the change",
        404: "No such object (or another tenant's)",
        409: "The state does not allow it",
        413: "Body too large",
        422: "Invalid body or parameter, or key reuse",
        429: "A limit is full and on_limit is reject",
        503: "Shutting down or standby",
    }
    out: dict[str, Any] = {}
    for code in (*codes, 401, 503):
        entry: dict[str, Any] = {
            "description": text[code],
            "content": {PROBLEM: {"schema": _ref(m.Problem)}},
        }
        if code in (429, 503):
            entry["headers"] = {
                "Retry-After": {"schema": {"type": "string"}, "description": "seconds"}
            }
        out[str(code)] = entry
    return out


def _path_param(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT},
    }


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


WAIT = _query(
    "wait", {"type": "number", "minimum": 0, "maximum": 60}, "seconds to long-poll for the grant"
)
IDEM = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x20-\\x7e]+$"},
    "description": "a retry with the same key and body replays the first answer",
}


_START_LINKS = {
    "GetStart": {"operationId": "getStart", "parameters": {"start_id": "$response.body#/start_id"}},
    "WhyStart": {"operationId": "whyStart", "parameters": {"start_id": "$response.body#/start_id"}},
    "CancelStart": {
        "operationId": "cancelStart",
        "parameters": {"start_id": "$response.body#/start_id"},
    },
}
_EXECUTION_LINKS = {
    "GetExecution": {
        "operationId": "getExecution",
        "parameters": {"execution_id": "$response.body#/execution_id"},
    },
    "RestartExecution": {
        "operationId": "restartExecution",
        "parameters": {"execution_id": "$response.body#/execution_id"},
    },
    "CancelExecution": {
        "operationId": "cancelExecution",
        "parameters": {"execution_id": "$response.body#/execution_id"},
    },
}


def _start_answers(*errors: int) -> dict[str, Any]:
    granted = _json(m.StartOut, "Granted: the execution runs")
    granted["links"] = {**_START_LINKS, **_EXECUTION_LINKS}
    queued = _json(m.StartOut, "Queued", {"Location": {"schema": {"type": "string"}}})
    queued["links"] = _START_LINKS
    return {"201": granted, "202": queued, **_errors(400, 404, 409, 413, 422, 429, *errors)}


def _body(model: type[BaseModel], required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": _ref(model)}}}


def _paths() -> dict[str, Any]:
    start_id, execution_id = _path_param("start_id"), _path_param("execution_id")
    return {
        "/v1/starts": {
            "post": {
                "summary": "Ask for a slot: granted, queued, or refused",
                "operationId": "createStart",
                "parameters": [WAIT, IDEM],
                "requestBody": _body(m.StartIn),
                "responses": _start_answers(403),
            }
        },
        "/v1/starts/{start_id}": {
            "get": {
                "summary": "A start, with its execution id once granted",
                "operationId": "getStart",
                "parameters": [start_id, WAIT],
                "responses": {"200": _json(m.StartOut, "The start"), **_errors(404, 422)},
            },
            "patch": {
                "summary": "Change a queued start's priority (OPERATOR)",
                "operationId": "setStartPriority",
                "parameters": [start_id],
                "requestBody": _body(m.PriorityIn),
                "responses": {
                    "200": _json(m.StartOut, "The start"),
                    **_errors(400, 403, 404, 409, 413, 422),
                },
            },
            "delete": {
                "summary": "Cancel a queued start",
                "operationId": "cancelStart",
                "parameters": [start_id],
                "responses": {
                    "200": _json(m.StartOut, "The cancelled start"),
                    **_errors(404, 409, 422),
                },
            },
        },
        "/v1/starts/{start_id}/why": {
            "get": {
                "summary": "Why a start waits: the limit that holds it, how many go first",
                "operationId": "whyStart",
                "parameters": [start_id],
                "responses": {"200": _json(m.WhyOut, "The explanation"), **_errors(404, 422)},
            }
        },
        "/v1/executions": {
            "get": {
                "summary": "Executions, newest first",
                "operationId": "listExecutions",
                "parameters": [
                    _query(
                        "status",
                        {
                            "type": "string",
                            "enum": sorted(
                                ["RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "ABORTED"]
                            ),
                        },
                        "status",
                    ),
                    _query("session", {"type": "string", "minLength": 1}, "session"),
                    _query("workflow", {"type": "string", "minLength": 1}, "workflow"),
                    _query(
                        "limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "page size"
                    ),
                    _query(
                        "cursor",
                        {"type": "string", "pattern": "^[0-9]{1,18}$"},
                        "next_cursor of the page before",
                    ),
                ],
                "responses": {"200": _json(m.ExecutionPageOut, "A page"), **_errors(422)},
            }
        },
        "/v1/executions/{execution_id}": {
            "get": {
                "summary": "An execution: status, output or error, links",
                "operationId": "getExecution",
                "parameters": [execution_id],
                "responses": {"200": _json(m.ExecutionOut, "The execution"), **_errors(404, 422)},
            }
        },
        "/v1/executions/{execution_id}/restart": {
            "post": {
                "summary": "Restart (whole, or from a step); answers like POST /v1/starts",
                "operationId": "restartExecution",
                "parameters": [execution_id, WAIT, IDEM],
                "requestBody": _body(m.RestartIn, required=False),
                "responses": _start_answers(),
            }
        },
        "/v1/executions/{execution_id}/resume": {
            "post": {
                "summary": "Resume, re-using the steps done; answers like POST /v1/starts",
                "operationId": "resumeExecution",
                "parameters": [execution_id, WAIT, IDEM],
                "responses": _start_answers(),
            }
        },
        "/v1/executions/{execution_id}/cancel": {
            "post": {
                "summary": "Cancel a running execution",
                "operationId": "cancelExecution",
                "parameters": [execution_id],
                "responses": {
                    "200": _json(m.ExecutionOut, "The cancelled execution"),
                    **_errors(404, 409, 422),
                },
            }
        },
        "/v1/limits": {
            "get": {
                "summary": "The limits",
                "operationId": "getLimits",
                "responses": {"200": _json(m.LimitsOut, "The limits"), **_errors()},
            },
            "put": {
                "summary": "Replace the limits (ADMIN); a field left out is off",
                "operationId": "setLimits",
                "requestBody": _body(m.LimitsIn),
                "responses": {
                    "200": _json(m.LimitsOut, "The new limits"),
                    **_errors(400, 403, 413, 422),
                },
            },
        },
        "/v1/scheduler": {
            "get": {
                "summary": "Slots in use, queued by session, the next picks",
                "operationId": "getScheduler",
                "responses": {"200": _json(m.SchedulerOut, "The scheduler"), **_errors()},
            }
        },
        "/v1/audit": {
            "get": {
                "summary": "Control-log entries (ADMIN)",
                "operationId": "getAudit",
                "parameters": [
                    _query(
                        "limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "page size"
                    ),
                    _query(
                        "offset",
                        {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
                        "entries to skip",
                    ),
                ],
                "responses": {
                    "200": _json(m.AuditPageOut, "Entries, oldest first"),
                    **_errors(403, 422),
                },
            }
        },
        "/v1/streams/{stream}/events": {
            "post": {
                "summary": "Append an event to a stream (the built-in portal for actors)",
                "operationId": "appendEvent",
                "parameters": [_path_param("stream"), IDEM],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                "responses": {
                    "202": _json(m.EventOut, "Stored; actors process it later"),
                    **_errors(400, 413, 422),
                },
            }
        },
        **_actor_paths(),
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "operationId": "metrics",
                "security": [],
                "responses": {
                    "200": {
                        "description": "Prometheus text",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        "/healthz": {
            "get": {
                "summary": "Liveness",
                "operationId": "healthz",
                "security": [],
                "responses": {
                    "200": {
                        "description": "Alive",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                },
            }
        },
        "/readyz": {
            "get": {
                "summary": "Readiness (503 while starting, stopping or standby)",
                "operationId": "readyz",
                "security": [],
                "responses": {
                    "200": {
                        "description": "Ready",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    "503": _errors()["503"],
                },
            }
        },
    }


def _actor_paths() -> dict[str, Any]:
    name, instance_id = _path_param("name"), _path_param("instance_id")
    text = {"type": "string", "minLength": 1, "maxLength": MAX_TEXT}
    tenant = _query(
        "tenant",
        text,
        "one tenant; default: every tenant for OPERATOR or ADMIN, the caller's own for others "
        "(who are shown nothing of another tenant)",
    )
    instance_tenant = _query(
        "tenant",
        text,
        "the instance's tenant (ids are unique per tenant); default: the caller's own; another "
        "tenant's instance is 404 without OPERATOR or ADMIN",
    )
    return {
        "/v1/actors": {
            "get": {
                "summary": "The app's actors: subscriptions, queue settings, counts",
                "operationId": "listActors",
                "parameters": [tenant],
                "responses": {"200": _json(ma.ActorListOut, "The actors"), **_errors(422)},
            }
        },
        "/v1/actors/{name}/instances": {
            "get": {
                "summary": "Instances of an actor, by tenant and id",
                "operationId": "listActorInstances",
                "parameters": [
                    name,
                    tenant,
                    _query(
                        "limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "page size"
                    ),
                    _query(
                        "cursor",
                        {"type": "string", "minLength": 1, "maxLength": ma.MAX_CURSOR},
                        "next_cursor of the page before",
                    ),
                ],
                "responses": {"200": _json(ma.InstancePageOut, "A page"), **_errors(404, 422)},
            }
        },
        "/v1/actors/{name}/instances/{instance_id}": {
            "get": {
                "summary": "An instance: state, queue depth, in flight, dead letters, owner",
                "operationId": "getActorInstance",
                "parameters": [name, instance_id, instance_tenant],
                "responses": {"200": _json(ma.InstanceOut, "The instance"), **_errors(404, 422)},
            }
        },
        "/v1/workers": {
            "get": {
                "summary": "Actor workers: heartbeats, live or stale, instances owned (OPERATOR)",
                "operationId": "listWorkers",
                "responses": {"200": _json(ma.WorkerListOut, "The workers"), **_errors(403)},
            }
        },
    }


def _version() -> str:
    try:
        return metadata.version("yoke")
    except metadata.PackageNotFoundError:  # run from a source tree without installing
        return "0+unknown"


@functools.cache
def spec(workflows: tuple[str, ...] = ()) -> dict[str, Any]:
    """The document; `workflows` (the app's registered names) become the examples of a start's
    `workflow`, so a reader (and a fuzzer) sees names that exist."""
    _, defs = models_json_schema([(model, "validation") for model in _MODELS], ref_template=REF)
    schemas = copy.deepcopy(defs.get("$defs", {}))
    if workflows:
        schemas["StartIn"]["properties"]["workflow"]["examples"] = list(workflows)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "yoke",
            "version": _version(),
            "description": "A fair, durable, multi-tenant scheduler: the v1 API.",
        },
        "paths": _paths(),
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
