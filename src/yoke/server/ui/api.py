"""The dashboard's `/v1` twins: the JSON of every figure the pages show, from the same view
functions (`views`, `stored`), tenant-scoped like the rest of the API.

`GET /v1/overview`, `/v1/queue`, `/v1/fairness`, `/v1/series`, `/v1/timers`,
`/v1/executions/{id}/steps` and `/v1/audit/recent` (ADMIN), as rows the server adds to its
route table (`ops()`), so roles and `/openapi.json` come from the same rows. Query parameters
are bounded before use.
This module must never hold a figure's logic: it parses, calls a view and answers.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from yoke.executions.policy import Act
from yoke.server.auth import principal_of
from yoke.server.routes import ok, query
from yoke.server.routing import ANY, Op, may
from yoke.server.state import ServerState, json_response, query_int
from yoke.server.ui import models as m
from yoke.server.ui import stored, views
from yoke.store.text import check_text

MAX_QUERY = 100


def search_of(request: Request) -> str | None:
    q = request.query_params.get("q")
    if not q:
        return None
    return check_text(q[:MAX_QUERY], "q")


class DashboardApi:
    def __init__(self, state: ServerState) -> None:
        self.s = state

    def ops(self) -> list[Op]:
        """The rows of these routes, for the server's route table."""
        limit = query("limit", {"type": "integer", "minimum": 1, "maximum": 200}, "K")
        q = query("q", {"type": "string", "minLength": 1, "maxLength": MAX_QUERY}, "search")
        window = query("window", {"type": "integer", "minimum": 5, "maximum": 600}, "seconds")
        seconds = query("seconds", {"type": "integer", "minimum": 10, "maximum": 600}, "seconds")
        page = query("limit", {"type": "integer", "minimum": 1, "maximum": 500}, "page size")
        steps = query(
            "limit",
            {"type": "integer", "minimum": 1, "maximum": stored.MAX_STEPS_PAGE},
            "steps per page",
        )
        cursor = query("cursor", {"type": "string", "pattern": "^[0-9]{1,18}$"}, "next_cursor")
        before = query("before", {"type": "integer", "minimum": 1, "maximum": 2**62},
                       "next_before of the page before")  # fmt: skip
        # fmt: off
        return [
            Op("GET", "/v1/overview", self.overview, ANY, "overview",
               "Slots, queue, rates, workers: the dashboard's overview",
               answers=ok(m.OverviewOut, "The overview")),
            Op("GET", "/v1/queue", self.queue, ANY, "queue",
               "Queued starts in predicted pick order (top K), and the limits",
               query=(limit, q), answers=ok(m.AdmissionOut, "The queue"), errors=(422,)),
            Op("GET", "/v1/fairness", self.fairness, ANY, "fairness",
               "Per session: share of starts and of slots against weight, waits, Jain's index",
               query=(limit, window, q), answers=ok(m.FairnessOut, "Shares"), errors=(422,)),
            Op("GET", "/v1/series", self.series, ANY, "series",
               "Per second: starts, refusals, Jain's index, waits of the busiest sessions",
               query=(seconds,), answers=ok(m.SeriesOut, "The series"), errors=(422,)),
            Op("GET", "/v1/timers", self.timers, ANY, "timers", "The next timers due",
               query=(limit,), answers=ok(m.TimerListOut, "Timers"), errors=(422,)),
            Op("GET", "/v1/executions/{execution_id}/steps", self.steps, ANY, "executionSteps",
               "An execution with a page of its recorded steps and the executions it was "
               "restarted from", query=(steps, cursor),
               answers=ok(m.ExecutionDetailOut, "The execution"), errors=(404, 422)),
            Op("GET", "/v1/audit/recent", self.audit, may(Act.READ_AUDIT), "recentAudit",
               "Control-log entries, newest first", query=(page, before),
               answers=ok(m.AuditRecentOut, "A page"), errors=(422,)),
        ]
        # fmt: on

    async def overview(self, request: Request) -> Response:
        return json_response(await views.overview(self.s, principal_of(request)))

    async def queue(self, request: Request) -> Response:
        k = query_int(request, "limit", default=views.TOP_K, low=1, high=200)
        data = await views.admission(self.s, principal_of(request), q=search_of(request), k=k)
        return json_response(data)

    async def fairness(self, request: Request) -> Response:
        k = query_int(request, "limit", default=views.TOP_K, low=1, high=200)
        window = query_int(request, "window", default=60, low=5, high=600)
        p = principal_of(request)
        return json_response(
            await views.fairness(self.s, p, window=window, q=search_of(request), k=k)
        )

    async def series(self, request: Request) -> Response:
        seconds = query_int(request, "seconds", default=300, low=10, high=600)
        return json_response(views.series(self.s, principal_of(request), seconds=seconds))

    async def timers(self, request: Request) -> Response:
        limit = query_int(request, "limit", default=50, low=1, high=200)
        return json_response(await stored.timers(self.s, principal_of(request), limit=limit))

    async def steps(self, request: Request) -> Response:
        execution_id = check_text(request.path_params["execution_id"], "execution_id")
        limit = query_int(
            request, "limit", default=stored.STEPS_PAGE, low=1, high=stored.MAX_STEPS_PAGE
        )
        after = stored.step_cursor(request.query_params.get("cursor"))
        p = principal_of(request)
        data = await stored.execution(self.s, p, execution_id, after=after, limit=limit)
        return json_response(data)

    async def audit(self, request: Request) -> Response:
        limit = query_int(request, "limit", default=50, low=1, high=500)
        raw = request.query_params.get("before")
        before = None if raw is None else query_int(request, "before", default=0, low=1, high=2**62)
        data = await stored.audit(self.s, principal_of(request), before=before, limit=limit)
        return json_response(data)
