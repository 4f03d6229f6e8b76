"""The live dashboard at `/ui/`: server-rendered pages (Jinja2), live regions (htmx re-fetching
on Server-Sent Events signals), charts (uPlot), all served from files in this package.

`Dashboard` composes the parts: the change `Hub` (a service of the server's lifespan), the
browser `Sessions` (the seam `browser()` that the authentication layer calls), the HTML routes
(`pages`), the event stream (`sse`) and the `/v1` twins (`api`). Modules: `views` and `stored`
compute the figures, `queue` reads the kernel, `recorder` remembers the recent past, `regions`
maps each live region to its view, `render` holds the templates and the fragment cache.

This package must never change the scheduler except through the same `app.executions` calls
the API makes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from yoke.executions import Principal
from yoke.server.state import ServerState
from yoke.server.ui import queue
from yoke.server.ui.api import DashboardApi
from yoke.server.ui.hub import Hub
from yoke.server.ui.pages import Pages
from yoke.server.ui.sessions import MAX_SESSIONS, PER_PRINCIPAL, Sessions
from yoke.server.ui.sse import EventStream

STATIC = Path(__file__).parent / "static"
LARGE = 10_000  # queued starts past which Jain's index is not sampled every second
Endpoint = Callable[[Request], Awaitable[Response]]


class Dashboard:
    def __init__(self, state: ServerState, *, tick: float = 0.25) -> None:
        self.s = state
        # Without tokens there is one principal, the local admin: a bound per principal
        # would only let a script reading pages log the operator's browser out.
        self.sessions = Sessions(
            per_principal=PER_PRINCIPAL if state.tokens is not None else MAX_SESSIONS
        )
        self.hub = Hub(self._fingerprint, interval=tick, on_tick=self._sample)
        self.pages = Pages(state, self.hub, self.sessions)
        self.api = DashboardApi(state)
        self._refused_seen = 0.0
        self._sampled_at = 0
        state.on_shutdown.append(self.hub.close)

    def __repr__(self) -> str:
        return f"Dashboard({self.hub!r}, {self.sessions!r}, {self.pages.cache!r})"

    def browser(self, scope: Scope) -> tuple[Principal, int | None] | None:
        session = self.sessions.of_scope(scope)
        return None if session is None else (session.principal, session.max_priority)

    # -- the change signal ----------------------------------------------------------------------
    def _fingerprint(self) -> Hashable:
        ex = self.s.executions
        k = ex.kernel
        return (k.queued, k.running, self.s.recorder.grants, id(ex.current_limits), ex.closing)

    def _sample(self) -> None:
        """Once a second: refusals answered since the last sample, and Jain's index."""
        now = int(self.s.app.clock.wall())
        if now == self._sampled_at:
            return
        self._sampled_at = now
        refused = 0.0
        for metric in self.s.metrics.starts.collect():
            for sample in metric.samples:
                if sample.name.endswith("_total") and sample.labels.get("outcome") in (
                    "rejected",
                    "refused",
                ):
                    refused += sample.value
        self.s.recorder.refused(int(refused - self._refused_seen))
        self._refused_seen = refused
        k = self.s.executions.kernel
        if k.queued > LARGE:
            return  # a pass over every queued session each second costs too much: skip it
        served = list(self.s.recorder.sessions(10))
        whole = queue.shares(k, visible=None, query=None, served={}, also=served, k=0)
        self.s.recorder.jain(whole.jain)

    # -- routes -----------------------------------------------------------------------------------
    def routes(self) -> list[BaseRoute]:
        p = self.pages

        def page(view: str, /, *, param: str | None = None, **path: str) -> Endpoint:
            """`param`: the path parameter given to the region as `id`; `path`: more, as
            region parameter = path parameter."""
            if param is not None:
                path = {"id": param, **path}

            async def endpoint(request: Request) -> Response:
                params = dict(request.query_params)
                params.update({k: request.path_params[v] for k, v in path.items()})
                return await p.page(request, view, {k: v[:256] for k, v in params.items()})

            return endpoint

        ui: list[BaseRoute] = [
            Route("/", page("overview"), methods=["GET"]),
            *(
                Route(f"/{n}", page(n), methods=["GET"])
                for n in ("admission", "fairness", "executions", "actors")
            ),
            *(
                Route(f"/{n}", page(n), methods=["GET"])
                for n in ("workers", "timers", "schedules", "audit")
            ),
            Route("/starts/{start_id}", page("why", param="start_id"), methods=["GET"]),
            Route("/executions/{execution_id}", page("execution", param="execution_id")),
            Route("/actors/{actor}", page("instances", name="actor"), methods=["GET"]),
            Route(
                "/actors/{actor}/instances/{instance_id:path}",
                page("instance", param="instance_id", name="actor"),
                methods=["GET"],
            ),
            Route("/f/{region}", p.fragment, methods=["GET"]),
            Route("/events", EventStream(self.hub), methods=["GET"]),
            Route("/login", p.login_form, methods=["GET"]),
            Route("/login", p.login, methods=["POST"]),
            Route("/logout", p.logout, methods=["POST"]),
            Route("/actions/{action}", p.act, methods=["POST"]),
            Mount("/static", StaticFiles(directory=STATIC), name="ui-static"),
        ]
        return [Mount("/ui", routes=ui)]  # `/ui` is redirected to `/ui/` by the router
