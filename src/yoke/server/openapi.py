"""The OpenAPI 3.1 description of the server, built from the route table.

Every row of `routes.table` becomes one operation: its summary, who may call it, its
parameters (path parameters from the path itself), its body and answers with schemas taken
from the pydantic models, so a field cannot be described one way and served another. The
error answers an operation can give are those its row lists plus those the row implies: 401
without a token (unless public), 403 for a role, 400/413/415 for a body, 503 always. The test
suite checks real answers against this document (schemathesis).

This module must never serve anything; it only builds a dict.
"""

from __future__ import annotations

import copy
from importlib import metadata
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from yoke.server import models as m
from yoke.server.routing import Answer, Op
from yoke.store.text import MAX_TEXT

REF = "#/components/schemas/{model}"
PROBLEM = "application/problem+json"
ERRORS = {
    400: "Malformed request (not JSON, or not an object)",
    401: "No valid token",
    403: "The principal lacks a role or may not ask this, or a reviewer vetoed the change",
    404: "No such object (or another tenant's)",
    409: "The state does not allow it",
    413: "Body too large",
    415: "The body is not sent as application/json",
    422: "Invalid body or parameter, or key reuse",
    429: "A limit is full and on_limit is reject",
    503: "Shutting down, standby, or the store does not answer",
}


def _schema(schema: type[BaseModel] | dict[str, Any]) -> dict[str, Any]:
    if isinstance(schema, dict):
        return schema
    return {"$ref": REF.format(model=schema.__name__)}


def _answer(a: Answer) -> dict[str, Any]:
    out: dict[str, Any] = {
        "description": a.description,
        "content": {a.media_type: {"schema": _schema(a.schema)}},
    }
    if a.headers:
        out["headers"] = dict(a.headers)
    if a.links:
        out["links"] = dict(a.links)
    return out


def error_codes(op: Op) -> list[int]:
    codes = set(op.errors) | {503}
    if not op.access.public:
        codes.add(401)
    if op.access.roles:
        codes.add(403)
    if op.body is not None:
        codes |= {400, 413, 415, 422}
    return sorted(codes)


def _errors(op: Op) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for code in error_codes(op):
        entry: dict[str, Any] = {
            "description": ERRORS[code],
            "content": {PROBLEM: {"schema": _schema(m.Problem)}},
        }
        if code in (429, 503):
            entry["headers"] = {
                "Retry-After": {"schema": {"type": "string"}, "description": "seconds"}
            }
        out[str(code)] = entry
    return out


def _path_param(name: str) -> dict[str, Any]:
    schema = {"type": "string", "minLength": 1, "maxLength": MAX_TEXT}
    return {"name": name, "in": "path", "required": True, "schema": schema}


def operation(op: Op) -> dict[str, Any]:
    out: dict[str, Any] = {
        "summary": op.summary,
        "description": f"Who may call it: {op.access.describe()}.",
        "operationId": op.name,
    }
    if op.access.roles:
        out["x-roles"] = sorted(op.access.roles)
    params = [_path_param(p) for p in op.path_params] + list(op.query)
    if params:
        out["parameters"] = params
    if op.body is not None:
        out["requestBody"] = {
            "required": op.body_required,
            "content": {"application/json": {"schema": _schema(op.body)}},
        }
    out["responses"] = {
        **{str(code): _answer(a) for code, a in sorted(op.answers.items())},
        **_errors(op),
    }
    if op.access.public:
        out["security"] = []
    return out


def _models(ops: list[Op]) -> list[type[BaseModel]]:
    found: dict[str, type[BaseModel]] = {"Problem": m.Problem}
    for op in ops:
        for schema in (op.body, *(a.schema for a in op.answers.values())):
            if isinstance(schema, type) and issubclass(schema, BaseModel):
                # A model is referenced by its class name: two models of one name would
                # leave one reference pointing nowhere.
                other = found.setdefault(schema.__name__, schema)
                if other is not schema:
                    raise ValueError(
                        f"two models named {schema.__name__}: {other.__module__} and "
                        f"{schema.__module__}; rename one"
                    )
    return list(found.values())


def _version() -> str:
    try:
        return metadata.version("yoke")
    except metadata.PackageNotFoundError:  # run from a source tree without installing
        return "0+unknown"


def spec(ops: list[Op], workflows: tuple[str, ...] = ()) -> dict[str, Any]:
    """The document; `workflows` (the app's registered names) become the examples of a start's
    `workflow`, so a reader (and a fuzzer) sees names that exist."""
    models = _models(ops)
    _, defs = models_json_schema([(model, "validation") for model in models], ref_template=REF)
    schemas = copy.deepcopy(defs.get("$defs", {}))
    if workflows and "StartIn" in schemas:
        schemas["StartIn"]["properties"]["workflow"]["examples"] = list(workflows)
    paths: dict[str, dict[str, Any]] = {}
    for op in ops:
        paths.setdefault(op.described_path, {})[op.method.lower()] = operation(op)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "yoke",
            "version": _version(),
            "description": "A fair, durable, multi-tenant scheduler: the v1 API.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
