"""`/v1/schedules[/{name}]`: workflows started on a cron expression or every N seconds.

Every caller may call them; `app.schedules` decides what it may see and change: a plain tenant
its own schedules, in its own sessions (another tenant's name in `?tenant=` is 403, and a
schedule of another tenant is never shown); OPERATOR and ADMIN every tenant's, `?tenant=`
naming one (default: `default` for one schedule, every tenant for the list). A bad cron
expression, time zone or value is a 422 problem, and nothing is stored. This module must never
decide a tick.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from yoke.executions.schedules import check_name
from yoke.server.auth import principal_of
from yoke.server.models import ScheduleIn
from yoke.server.state import ServerState, json_response, parse, query_int, read_body
from yoke.store.text import check_text


class SchedulesRoutes:
    def __init__(self, state: ServerState) -> None:
        self.s = state

    def _tenant(self, request: Request) -> str | None:
        raw = request.query_params.get("tenant")
        return None if raw is None else check_text(raw, "tenant")

    async def list(self, request: Request) -> Response:
        p = principal_of(request)
        limit = query_int(request, "limit", default=100, low=1, high=1000)
        rows = await self.s.app.schedules.list(
            tenant=self._tenant(request), principal=p, limit=limit
        )
        return json_response({"items": [s.to_json() for s in rows]})

    async def show(self, request: Request) -> Response:
        p = principal_of(request)
        name = check_name(request.path_params["name"])
        s = await self.s.app.schedules.get(name, tenant=self._tenant(request), principal=p)
        return json_response(s.to_json())

    async def put(self, request: Request) -> Response:
        p = principal_of(request)
        name = check_name(request.path_params["name"])
        body = parse(ScheduleIn, await read_body(request))
        s = await self.s.app.schedules.set(
            name,
            workflow=body.workflow,
            input=body.input,
            session=body.session,
            cron=body.cron,
            every=body.every,
            timezone=body.timezone,
            catch_up=body.catch_up,
            principal=p,
            tenant=self._tenant(request),
        )
        return json_response(s.to_json())

    async def delete(self, request: Request) -> Response:
        p = principal_of(request)
        name = check_name(request.path_params["name"])
        schedules, tenant = self.s.app.schedules, self._tenant(request)
        s = await schedules.get(name, tenant=tenant, principal=p)
        await schedules.delete(name, tenant=tenant, principal=p)
        return json_response(s.to_json())
