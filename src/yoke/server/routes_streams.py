"""`POST /v1/streams/{stream}/events`: the built-in portal that appends an event for actors.

The body is the event (a JSON object); it is appended to the stream in the caller's tenant and
fanned out to the subscribed actor instances by `app.append`. An OPERATOR or ADMIN may name
another tenant (`?tenant=`), as an ingest gateway appending for its tenants must; anyone else
naming a tenant not its own is refused (403) before the body is read, so a tenant can never
write into another's streams. It answers 202: the event is
stored, its processing happens later. Idempotency-Key works as on every creating POST, and is
also kept with the event in the append's transaction (`append_event_once`): the replayer keeps
answers after the fact, so without it two servers given the same key at once both appended.

Nesting is bounded as for a start's input, so no event is too deep to encode, store or decode
later. What the event routes by (its instance ids and groups) is checked by the runtime's
registry before anything is written (a `BadValue`: 422). This module must never route events
itself.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from yoke.errors import BadValue, Forbidden
from yoke.server.auth import home_tenant, principal_of, privileged
from yoke.server.idempotency import request_fingerprint
from yoke.server.state import BadRequest, ServerState, json_response, read_body
from yoke.store.actor_records import EventKey
from yoke.store.text import check_text

MAX_DEPTH = 200  # levels of arrays and objects, as pydantic allows in a start's input


class StreamsRoutes:
    def __init__(self, state: ServerState) -> None:
        self.s = state

    async def append(self, request: Request) -> Response:
        p = principal_of(request)
        asked = request.query_params.get("tenant")
        tenant = home_tenant(p) if asked is None else check_text(asked, "tenant")
        if not privileged(p) and tenant != home_tenant(p):
            raise Forbidden(
                f"{p.name} may append only in its own tenant: OPERATOR or ADMIN may name another"
            )
        # A key names the tenant too: one key sent for two tenants is another request (422),
        # never a replay of the first tenant's answer.
        target = request.url.path if asked is None else f"{request.url.path}?tenant={tenant}"

        async def answer() -> Response:
            stream = check_text(request.path_params["stream"], "stream")
            data = parse_event(await read_body(request))
            key = request.headers.get("idempotency-key")
            if key is None:
                event_id = await self.s.app.append(stream, data, tenant=tenant)
            else:  # kept with the event too: the replayer alone cannot stop a second append
                raw = await read_body(request)
                once = EventKey(
                    principal=p.name,
                    key=key,
                    fingerprint=request_fingerprint(request.method, target, raw),
                    expires_at=self.s.app.clock.wall() + self.s.replayer.retention,
                    keep_at_most=self.s.app.settings.idempotency_max_per_tenant,
                )
                event_id = await self.s.app.append_once(stream, data, tenant=tenant, key=once)
            return json_response({"stream": stream, "tenant": tenant, "event_id": event_id}, 202)

        response, _ = await self.s.idempotent(request, answer, target=target)
        return response


def parse_event(raw: bytes) -> dict[str, Any]:
    too_deep = BadRequest(f"the body must be JSON nested at most {MAX_DEPTH} levels deep")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("the body must be JSON (the event)") from None
    except RecursionError:
        raise too_deep from None
    if not isinstance(data, dict):
        raise BadValue("an event must be a JSON object")
    if _deeper_than(data, MAX_DEPTH):
        raise too_deep
    return data


def _deeper_than(value: Any, limit: int) -> bool:
    # Iterative: a recursive walk would fail on the very bodies it is meant to refuse.
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            children: Any = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children)
    return False
