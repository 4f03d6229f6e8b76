"""`/v1/limits`, `/v1/tenants`, `/v1/scheduler`, `/v1/audit`: what operators read and change
while it runs.

`PUT /v1/limits` replaces the whole limits object (a field left out is off) and needs ADMIN;
reviewers may veto it (403) and it is written to the control log by the executions service.
`PUT /v1/tenants/{tenant}` changes the fields given of a tenant's settings (its weight, its
executions' and its actors' limits; `*` holds the defaults), ADMIN, reviewed and audited the
same way, by `app.tenants`; `GET /v1/tenants` shows a plain tenant only its own row and the
defaults that apply to it. This module must never apply a limit itself.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from yoke.executions.tenant_settings import effective
from yoke.executions.tenants import DEFAULTS, UNSET, TenantSettings
from yoke.server import introspect
from yoke.server.auth import owns, principal_of, privileged
from yoke.server.models import LimitsIn, TenantIn, audit_json
from yoke.server.state import ServerState, json_response, parse, query_int, read_body
from yoke.store.text import check_text


class ControlRoutes:
    def __init__(self, state: ServerState) -> None:
        self.s = state

    async def limits(self, request: Request) -> Response:
        principal_of(request)
        return json_response((await self.s.executions.limits()).to_json())

    async def set_limits(self, request: Request) -> Response:
        p = principal_of(request)
        body = parse(LimitsIn, await read_body(request))
        done = await self.s.executions.set_limits(body.to_limits(), principal=p)
        return json_response(done.to_json())

    async def tenants(self, request: Request) -> Response:
        p = principal_of(request)
        rows = await self.s.app.tenants.list(principal=p)
        defaults = next((t for t in rows if t.tenant == DEFAULTS), None)
        return json_response({"items": [_tenant_json(t, defaults) for t in rows]})

    async def set_tenant(self, request: Request) -> Response:
        p = principal_of(request)
        tenant = check_text(request.path_params["tenant"], "tenant")
        body = parse(TenantIn, await read_body(request))
        given = body.model_fields_set
        tenants = self.s.app.tenants
        done = await tenants.set(
            tenant,
            weight=body.weight if "weight" in given else UNSET,
            executions=body.executions.given() if body.executions is not None else UNSET,
            actors=body.actors.given() if body.actors is not None else UNSET,
            principal=p,
        )
        defaults = None if tenant == DEFAULTS else await tenants.get(DEFAULTS, principal=p)
        return json_response(_tenant_json(done, defaults))

    async def scheduler(self, request: Request) -> Response:
        p = principal_of(request)
        ledger = await self.s.store().ledger()
        if privileged(p):
            return json_response(introspect.scheduler(self.s.executions, ledger))
        # A tenant sees its own sessions by name and everyone else's only as one sum.
        view = introspect.scheduler(self.s.executions, ledger, visible=lambda s: owns(p, s))
        return json_response(view)

    async def audit(self, request: Request) -> Response:
        limit = query_int(request, "limit", default=100, low=1, high=1000)
        offset = query_int(request, "offset", default=0, low=0, high=2**31 - 1)
        entries = await self.s.executions.audit(limit=limit, offset=offset)
        return json_response({"items": [audit_json(a) for a in entries]})


def _tenant_json(t: TenantSettings, defaults: TenantSettings | None) -> dict[str, object]:
    """A tenant's own values, who set them when, and (but for `*`) what applies to it."""
    applies = None if t.tenant == DEFAULTS else effective(t, defaults).to_json()
    return {"tenant": t.tenant, **t.to_json(), "updated_by": t.updated_by,
            "updated_at": t.updated_at, "effective": applies}  # fmt: skip
