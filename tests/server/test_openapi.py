"""`/openapi.json` describes what is served: every route is in it, every answer of the other
tests' kinds validates against its schema; `/docs` serves the interactive page."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import jsonschema_rs
import pytest
from starlette.routing import Route

from tests.server.conftest import Serve
from yoke.executions import Limits
from yoke.server import Server
from yoke.server.openapi import spec
from yoke.server.routing import Answer


def _validator(doc: dict[str, Any], path: str, method: str, status: int) -> Any:
    op = doc["paths"][path][method]
    content = op["responses"][str(status)]["content"]
    schema = next(iter(content.values()))["schema"]
    full = {**schema, "components": doc["components"]}
    return jsonschema_rs.validator_for(full)


def test_every_route_is_described_with_its_roles() -> None:
    import yoke

    server = Server(yoke.App("sqlite:///:memory:"), tokens=None)
    doc = spec(server.ops)
    served = {
        (re.sub(r":\w+}", "}", r.path), m.lower())  # `{id:path}` is described as `{id}`
        for r in server.asgi.routes
        if isinstance(r, Route)
        for m in (r.methods or ())
        if m != "HEAD"
    }
    described = {(p, m) for p, ops in doc["paths"].items() for m in ops}
    assert served == described
    limits = doc["paths"]["/v1/limits"]
    assert limits["put"]["x-roles"] == ["ADMIN"] and "403" in limits["put"]["responses"]
    assert "x-roles" not in limits["get"] and "403" not in limits["get"]["responses"]
    assert doc["paths"]["/metrics"]["get"]["x-roles"] == ["ADMIN", "METRICS", "OPERATOR"]
    assert doc["paths"]["/healthz"]["get"]["security"] == []


def test_every_reference_in_the_document_resolves() -> None:
    """A model referenced by a name the components do not hold (two models of one name) is
    a hole in the document that validators and fuzzers skip without a word."""
    import yoke

    doc = spec(Server(yoke.App("sqlite:///:memory:"), tokens=None).ops)
    text = json.dumps(doc)
    refs = set(re.findall(r'"#/components/schemas/([^"]+)"', text))
    assert refs and refs <= set(doc["components"]["schemas"]), refs - set(
        doc["components"]["schemas"]
    )


def test_two_models_of_one_name_are_refused() -> None:
    from pydantic import BaseModel

    import yoke

    class LimitsOut(BaseModel):  # the name of an answer model already in the table
        x: int

    server = Server(yoke.App("sqlite:///:memory:"), tokens=None)
    twin = replace(server.ops[0], answers={200: Answer(schema=LimitsOut, description="twin")})
    with pytest.raises(ValueError, match="two models named LimitsOut"):
        spec([*server.ops, twin])


async def test_answers_match_their_schemas(serve: Serve) -> None:
    server, client = await serve(Limits(max_running=1))
    c = client("admin")
    doc = (await c.get("/openapi.json")).json()
    assert doc["openapi"].startswith("3.1")
    workflow = doc["components"]["schemas"]["StartIn"]["properties"]["workflow"]
    assert workflow["examples"] == ["echo", "hold", "sleeper", "steps", "waiter"]
    bare = spec(server.ops)["components"]["schemas"]["StartIn"]["properties"]["workflow"]
    assert "examples" not in bare
    granted = await c.post("/v1/starts", json={"workflow": "hold"})
    queued = await c.post("/v1/starts", json={"workflow": "echo"})
    sid, eid = queued.json()["start_id"], granted.json()["execution_id"]
    checks = [
        ("/v1/starts", "post", granted),
        ("/v1/starts", "post", queued),
        ("/v1/starts/{start_id}", "get", await c.get(f"/v1/starts/{sid}")),
        ("/v1/starts/{start_id}/why", "get", await c.get(f"/v1/starts/{sid}/why")),
        (
            "/v1/starts/{start_id}",
            "patch",
            await c.patch(f"/v1/starts/{sid}", json={"priority": 2}),
        ),
        ("/v1/executions/{execution_id}", "get", await c.get(f"/v1/executions/{eid}")),
        ("/v1/executions", "get", await c.get("/v1/executions")),
        ("/v1/limits", "get", await c.get("/v1/limits")),
        ("/v1/scheduler", "get", await c.get("/v1/scheduler")),
        ("/v1/limits", "put", await c.put("/v1/limits", json={"max_running": 1})),
        ("/v1/audit", "get", await c.get("/v1/audit")),
        ("/v1/starts/{start_id}", "delete", await c.delete(f"/v1/starts/{sid}")),
        ("/v1/starts", "post", await c.post("/v1/starts", json={"workflow": "nope"})),
    ]
    for path, method, r in checks:
        v = _validator(doc, path, method, r.status_code)
        assert v.is_valid(r.json()), (path, method, r.status_code, r.text)
    docs = await c.get("/docs")
    assert docs.status_code == 200 and "/docs/init.js" in docs.text
