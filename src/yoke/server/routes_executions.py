"""`/v1/executions`: list and show executions, and restart, resume, cancel or signal one.

Restart and resume ask for a slot like a new start and answer like `POST /v1/starts` (201, 202,
429, 503, `?wait=`, Idempotency-Key). `GET /v1/executions/{id}?wait=` long-polls until the
execution has ended (one of the tenant's long-polls, as a start's wait is). A principal
without OPERATOR or ADMIN sees only its tenant's executions: another tenant's are 404, and a
list without `session` shows its tenant's.
This module must never decide admission.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from yoke.errors import BadValue
from yoke.executions import Execution, ExecutionStatus, Principal
from yoke.server.auth import (
    check_priority,
    check_visible,
    owns,
    principal_of,
    privileged,
    tenant_of,
)
from yoke.server.models import RestartIn, ResumeIn, SignalIn, execution_json
from yoke.server.routes_starts import StartsRoutes
from yoke.server.state import ServerState, json_response, parse, query_int, read_body
from yoke.store.text import check_text

STATUSES = tuple(s.value for s in ExecutionStatus)


async def visible_executions(
    s: ServerState,
    p: Principal,
    *,
    status: str | None,
    session: str | None,
    workflow: str | None,
    cursor: str | None,
    limit: int,
) -> dict[str, Any]:
    """A page of the executions `p` may see, newest first: the one filter that the API's list
    and the dashboard's view both call. A principal without OPERATOR or ADMIN reads its own
    tenant's rows alone, whatever the filters, and a session outside its tenant is answered as
    empty (as if it had nothing: another tenant's sessions are not told)."""
    if status is not None and status.upper() not in STATUSES:
        raise BadValue(f"status must be one of {', '.join(STATUSES)}")
    tenant = None
    if not privileged(p):
        if session is not None and not owns(p, session):
            return {"items": [], "next_cursor": None}
        tenant = tenant_of(p)
    page = await s.executions.list(
        status=status, session=session, workflow=workflow, limit=limit, cursor=cursor, tenant=tenant
    )
    return {"items": [execution_json(e) for e in page.items], "next_cursor": page.next_cursor}


class ExecutionsRoutes:
    def __init__(self, state: ServerState, starts: StartsRoutes) -> None:
        self.s = state
        self.starts = starts

    async def _visible(self, request: Request) -> Execution:
        execution_id = check_text(request.path_params["execution_id"], "execution_id")
        ex = await self.s.executions.get_execution(execution_id)
        check_visible(principal_of(request), ex.tenant, f"execution {execution_id}")
        return ex

    async def list(self, request: Request) -> Response:
        p = principal_of(request)
        q = request.query_params
        status = q.get("status")
        session = check_text(q["session"], "session") if "session" in q else None
        workflow = check_text(q["workflow"], "workflow") if "workflow" in q else None
        cursor = q.get("cursor")
        if cursor is not None and not (cursor.isascii() and cursor.isdigit() and len(cursor) < 19):
            raise BadValue("cursor must be the next_cursor of an earlier page")
        limit = query_int(request, "limit", default=100, low=1, high=1000)
        page = await visible_executions(
            self.s, p, status=status, session=session, workflow=workflow, cursor=cursor, limit=limit
        )
        return json_response(page)

    async def show(self, request: Request) -> Response:
        wait = self.starts.wait_of(request)
        ex = await self._visible(request)
        if wait and not ex.status.finished:
            with self.starts.polling(request, wait):
                ex = await self.s.executions.wait(ex.execution_id, timeout=wait)
        return json_response(execution_json(ex))

    async def restart(self, request: Request) -> Response:
        async def answer() -> Response:
            wait = self.starts.wait_of(request)
            ex = await self.starts.bounded("read the execution", self._visible(request))
            body = parse(RestartIn, await read_body(request), empty_ok=True)
            check_priority(request, body.priority)
            with self.starts.polling(request, wait):
                start = await self.s.executions.restart(
                    ex.execution_id,
                    body.from_step,
                    priority=body.priority,
                    principal=principal_of(request),
                )
                return await self.starts.start_answer(start, wait)

        return await self.starts.counted(request, answer)

    async def resume(self, request: Request) -> Response:
        async def answer() -> Response:
            wait = self.starts.wait_of(request)
            ex = await self.starts.bounded("read the execution", self._visible(request))
            body = parse(ResumeIn, await read_body(request), empty_ok=True)
            check_priority(request, body.priority)
            with self.starts.polling(request, wait):
                start = await self.s.executions.resume(
                    ex.execution_id, priority=body.priority, principal=principal_of(request)
                )
                return await self.starts.start_answer(start, wait)

        return await self.starts.counted(request, answer)

    async def cancel(self, request: Request) -> Response:
        """200 once it has stopped (wherever it ran); 202 if its server has not stopped it
        within the wait (the request stays: it stops when its server acts, or its recovery
        ends it CANCELLED)."""
        ex = await self._visible(request)
        after = await self.s.executions.cancel(ex.execution_id, principal=principal_of(request))
        return json_response(execution_json(after), 200 if after.status.finished else 202)

    async def signal(self, request: Request) -> Response:
        """202: the signal is kept for the execution (a wait for it ends, or the next takes
        it). Idempotency-Key: a retry replays the first answer and sends nothing again."""

        async def answer() -> Response:
            ex = await self._visible(request)
            name = check_text(request.path_params["name"], "signal name")
            body = parse(SignalIn, await read_body(request), empty_ok=True)
            after = await self.s.executions.signal(
                ex.execution_id, name, body.payload, principal=principal_of(request)
            )
            return json_response(execution_json(after), 202)

        response, _ = await self.s.idempotent(request, answer)
        return response
