"""Every route of the route table answers its access rule before anything else, driven by the
table itself: without a token, 401 on every route that is not public; with a principal lacking
the row's role, 403, before the body is validated (an invalid body still gets 403, not 422)
and before anything is read or changed. Which routes need which role is the API's contract, so
it is pinned here too: a row that lost its roles (or a new row nobody decided about) fails."""

from __future__ import annotations

import re

import httpx
from starlette.routing import Route

from tests.server.conftest import Client, Serve
from tests.server.test_errors import assert_problem
from yoke.server import Server
from yoke.server.routing import Op

INVALID_BODY = b'{"no such field": [1, 2, 3], "priority": "very high"}'
OPS = ("ADMIN", "OPERATOR")
# Who may call what (the API's contract): roles, "any" principal, or "public" (no token).
ACCESS: dict[tuple[str, str], tuple[str, ...] | str] = {
    ("POST", "/v1/starts"): "any",
    ("GET", "/v1/starts/{start_id}"): "any",
    ("PATCH", "/v1/starts/{start_id}"): OPS,
    ("DELETE", "/v1/starts/{start_id}"): "any",
    ("GET", "/v1/starts/{start_id}/why"): "any",
    ("GET", "/v1/executions"): "any",
    ("GET", "/v1/executions/{execution_id}"): "any",
    ("POST", "/v1/executions/{execution_id}/restart"): "any",
    ("POST", "/v1/executions/{execution_id}/resume"): "any",
    ("POST", "/v1/executions/{execution_id}/cancel"): "any",
    ("POST", "/v1/executions/{execution_id}/signals/{name}"): "any",
    ("GET", "/v1/limits"): "any",
    ("PUT", "/v1/limits"): ("ADMIN",),
    ("GET", "/v1/tenants"): "any",
    ("PUT", "/v1/tenants/{tenant}"): ("ADMIN",),
    ("GET", "/v1/scheduler"): "any",
    ("GET", "/v1/audit"): ("ADMIN",),
    ("POST", "/v1/streams/{stream}/events"): "any",
    ("GET", "/v1/actors"): "any",
    ("GET", "/v1/actors/{name}/instances"): "any",
    ("GET", "/v1/actors/{name}/instances/{instance_id:path}"): "any",
    ("GET", "/v1/workers"): OPS,
    ("GET", "/v1/overview"): "any",
    ("GET", "/v1/queue"): "any",
    ("GET", "/v1/fairness"): "any",
    ("GET", "/v1/series"): "any",
    ("GET", "/v1/timers"): "any",
    ("GET", "/v1/executions/{execution_id}/steps"): "any",
    ("GET", "/v1/audit/recent"): ("ADMIN",),
    ("GET", "/v1/executors"): OPS,
    ("GET", "/v1/ha"): "any",
    ("GET", "/v1/schedules"): "any",
    ("GET", "/v1/schedules/{name}"): "any",
    ("PUT", "/v1/schedules/{name}"): "any",
    ("DELETE", "/v1/schedules/{name}"): "any",
    ("GET", "/metrics"): ("ADMIN", "METRICS", "OPERATOR"),
    ("GET", "/healthz"): "public",
    ("GET", "/readyz"): "public",
    ("GET", "/openapi.json"): "public",
    ("GET", "/docs"): "public",
    ("GET", "/docs/{asset}"): "public",
}


def _access(op: Op) -> tuple[str, ...] | str:
    if op.access.public:
        return "public"
    return tuple(sorted(op.access.roles)) or "any"


def _url(op: Op) -> str:
    return re.sub(r"{(\w+)(?::\w+)?}", r"no-such-\1", op.path)


async def _call(c: httpx.AsyncClient, op: Op) -> httpx.Response:
    content = INVALID_BODY if op.body is not None else None
    return await c.request(op.method, _url(op), content=content)


async def _ledger_and_limits(client: Client) -> tuple[object, object]:
    admin = client("admin")
    return (await admin.get("/v1/limits")).json(), (await admin.get("/v1/audit")).json()


def test_each_route_asks_the_roles_the_api_promises() -> None:
    import yoke

    server = Server(yoke.App("sqlite:///:memory:"), tokens=None)
    assert {(op.method, op.path): _access(op) for op in server.ops} == ACCESS


async def test_every_guarded_route_answers_its_role_before_validating(serve: Serve) -> None:
    server, client = await serve()
    guarded = [op for op in server.ops if op.access.roles]
    assert len(guarded) >= 4  # PATCH start, PUT limits, audit, workers, metrics
    before = await _ledger_and_limits(client)
    for who in ("acme", "globex"):
        for op in guarded:
            r = await _call(client(who), op)
            assert_problem(r, 403)
            assert "lacks role" in r.json()["detail"], (op.method, op.path, r.text)
    assert await _ledger_and_limits(client) == before


async def test_every_route_but_the_public_ones_needs_a_token(serve: Serve) -> None:
    server, client = await serve()
    anonymous = client("nobody")
    for op in server.ops:
        r = await _call(anonymous, op)
        if op.access.public:
            assert r.status_code != 401, (op.method, op.path)
        else:
            assert_problem(r, 401)
            assert r.headers["www-authenticate"].startswith("Bearer"), op.path


async def test_a_role_holder_gets_past_the_check_to_validation(serve: Serve) -> None:
    """The other side: the check is the role's, not a blanket refusal of the route."""
    server, client = await serve()
    for op in server.ops:
        if not op.access.roles:
            continue
        who = "admin"  # holds every role a row asks but METRICS, which admins pass too
        r = await _call(client(who), op)
        assert r.status_code != 403, (op.method, op.path, r.text)
        if op.body is not None:
            assert_problem(r, 400, 404, 422)


def test_the_table_has_one_row_per_method_and_path() -> None:
    import yoke

    server = Server(yoke.App("sqlite:///:memory:"), tokens=None)
    keys = [(op.method, op.path) for op in server.ops]
    assert len(keys) == len(set(keys))
    api = [r for r in server.asgi.routes if isinstance(r, Route)]  # the dashboard is a Mount
    assert {op.name for op in server.ops} == {r.name for r in api}
