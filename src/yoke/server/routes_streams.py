"""`POST /v1/streams/{stream}/events`: the built-in portal that appends an event for actors.

The body is the event (a JSON object); it is appended to the stream in the caller's tenant and
fanned out to the subscribed actor instances by `app.append`. It answers 202: the event is
stored, its processing happens later. Idempotency-Key works as on every creating POST. This
module must never route events itself.
"""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from yoke.errors import BadValue
from yoke.server.auth import home_tenant, principal_of
from yoke.server.models import check_text
from yoke.server.state import BadRequest, ServerState, json_response, read_body


class StreamsRoutes:
    def __init__(self, state: ServerState) -> None:
        self.s = state

    def routes(self) -> list[Route]:
        return [Route("/v1/streams/{stream}/events", self.append, methods=["POST"])]

    async def append(self, request: Request) -> Response:
        async def answer() -> Response:
            p = principal_of(request)
            stream = check_text(request.path_params["stream"], "stream")
            raw = await read_body(request)
            try:
                data = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                raise BadRequest("the body must be JSON (the event)") from None
            if not isinstance(data, dict):
                raise BadValue("an event must be a JSON object")
            tenant = home_tenant(p)
            event_id = await self.s.app.append(stream, data, tenant=tenant)
            return json_response({"stream": stream, "tenant": tenant, "event_id": event_id}, 202)

        response, _ = await self.s.idempotent(request, answer)
        return response
