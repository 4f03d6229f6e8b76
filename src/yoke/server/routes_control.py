"""`/v1/limits`, `/v1/scheduler`, `/v1/audit`: what operators read and change while it runs.

`PUT /v1/limits` replaces the whole limits object (a field left out is off) and needs ADMIN;
reviewers may veto it (403) and it is written to the control log by the executions service.
This module must never apply a limit itself.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from yoke.server import introspect
from yoke.server.auth import owns, principal_of, privileged
from yoke.server.models import LimitsIn, audit_json
from yoke.server.state import ServerState, json_response, parse, query_int, read_body


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
