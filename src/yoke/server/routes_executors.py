"""`GET /v1/executors`: the tenants' executor processes, as every worker recorded them.

One entry per (worker, tenant): its latest life, with `state` (STARTING, READY, DRAINING,
DYING, STOPPED, FAILED), pid, boot time, calls sent and running, crashes, the isolation in force and
why it stopped; `?tenant=` narrows it to one tenant. Which tenants run code where, and how
often it crashes, is the deployment's business, not a tenant's: OPERATOR or ADMIN only.

This module must never change the runtime or the store.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from yoke.server.models_actors import executor_json
from yoke.server.state import ServerState, json_response, query_int
from yoke.store.text import check_text


class ExecutorsRoutes:
    def __init__(self, state: ServerState) -> None:
        self.s = state

    async def executors(self, request: Request) -> Response:
        """OPERATOR or ADMIN: the route table checks the role (`routes.py`)."""
        asked = request.query_params.get("tenant")
        tenant = None if asked is None else check_text(asked, "tenant")
        limit = query_int(request, "limit", default=1000, low=1, high=10_000)
        views = await self.s.app.actors.inspect.executors(tenant=tenant, limit=limit)
        return json_response({"tenant": tenant, "items": [executor_json(v) for v in views]})
