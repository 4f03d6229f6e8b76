"""The ASGI application of one yoke server: routes, middleware, and its one lifespan.

Layers, outermost first: `LastResort` (nothing escapes as a 500 or a traceback), `Guard` (the
body bound, the loopback-only rules without tokens, security headers), `Authenticate` (who is
calling), then Starlette's router over the routes of the route table (`routes.table`), each
checking its roles before its handler runs. A lean row's request (`routing.LeanRoutes`) is
taken aside before Starlette and passes the same three layers straight to its endpoint. The
lifespan enters `app.running()` (store, dispatcher, heartbeat) and a TaskGroup for the
server's own tasks; on exit it shuts the executions down in the admission specification's
order (refuse queued, let running finish within the timeout, abort the rest) before the store
closes.

This module must never hold a route's logic; it composes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Receive, Scope, Send

from yoke.app import App
from yoke.config import Settings
from yoke.errors import BadValue, YokeError
from yoke.server import openapi
from yoke.server.auth import Authenticate, TokenBook
from yoke.server.guards import Guard
from yoke.server.idempotency import AnswerStore, MemoryAnswers, Replayer, StoreAnswers
from yoke.server.longpolls import LongPolls
from yoke.server.metrics import Metrics
from yoke.server.problems import LastResort, http_error_handler, yoke_error_handler
from yoke.server.recorder import Recorder
from yoke.server.routes import table
from yoke.server.routes_actors import ActorsRoutes
from yoke.server.routes_control import ControlRoutes
from yoke.server.routes_executions import ExecutionsRoutes
from yoke.server.routes_executors import ExecutorsRoutes
from yoke.server.routes_ops import OpsRoutes
from yoke.server.routes_schedules import SchedulesRoutes
from yoke.server.routes_starts import StartsRoutes
from yoke.server.routes_streams import StreamsRoutes
from yoke.server.routing import LeanRoutes, Op, lean_routes, starlette_routes
from yoke.server.state import ServerState
from yoke.server.ui import Dashboard

log = logging.getLogger("yoke.server")
DEFAULT_RETENTION = 24 * 3600.0
PURGE_EVERY = 60.0


def _behind(middleware: list[Middleware], app: ASGIApp) -> ASGIApp:
    """`app` inside `middleware`, the first outermost (as Starlette stacks them)."""
    for cls, args, kwargs in reversed(middleware):
        app = cls(app, *args, **kwargs)
    return app


class Server:
    """An ASGI app serving one `yoke.App`. `lifespan()` is the one lifespan (tests enter it)."""

    def __init__(
        self,
        app: App,
        *,
        tokens: TokenBook | None,
        answers: AnswerStore | None = None,
        retention: float = DEFAULT_RETENTION,
        max_wait: float = 60.0,
    ) -> None:
        if retention <= 0:
            raise BadValue("the idempotency retention must be > 0 seconds")
        self.app = app
        self._answers = answers
        self._document: dict[str, Any] | None = None
        self.state = ServerState(
            app=app,
            tokens=tokens,
            metrics=Metrics(app.executions, app.actors, lambda: app.leadership, lambda: app.pruner),
            replayer=Replayer(
                answers or MemoryAnswers(),
                # An answer is kept at most as long as what it answered (`YOKE_RETENTION_SECS`).
                retention=min(retention, app.settings.retention_secs or retention),
                store_timeout=app.settings.ready_timeout,
            ),
            recorder=Recorder(app.clock.wall),
            long_polls=LongPolls(app.settings.max_long_polls_per_tenant),
            max_wait=max_wait,
        )
        app.add_tick_listener(self.state.metrics.ticks)  # the ticker's yoke_schedule_* counts
        self.dashboard = Dashboard(self.state)
        starts = StartsRoutes(self.state)
        self.ops: list[Op] = (
            table(
                starts=starts,
                executions=ExecutionsRoutes(self.state, starts),
                control=ControlRoutes(self.state),
                streams=StreamsRoutes(self.state),
                actors=ActorsRoutes(self.state),
                executors=ExecutorsRoutes(self.state),
                ops=OpsRoutes(self.state, self.document),
                schedules=SchedulesRoutes(self.state),
            )
            + self.dashboard.api.ops()
        )
        guards = [
            Middleware(LastResort),
            Middleware(Guard, max_body=app.settings.max_body_bytes, local_only=tokens is None),
            Middleware(Authenticate, tokens=tokens, browser=self.dashboard.browser),
        ]
        self.asgi = Starlette(
            routes=[*starlette_routes(self.ops), *self.dashboard.routes()],
            middleware=guards,
            exception_handlers={YokeError: yoke_error_handler, HTTPException: http_error_handler},
            lifespan=self._lifespan,
        )
        # A lean row's request passes the same guards but none of Starlette's own layers (its
        # error middleware: `LastResort` answers whatever it would have).
        self._dispatch: ASGIApp = LeanRoutes(
            self.asgi,
            routes={key: _behind(guards, lean) for key, lean in lean_routes(self.ops).items()},
        )
        # Each request's trace context (W3C traceparent), when tracing is on: a start's spans
        # continue its caller's trace.
        self._dispatch = app.tracing.asgi(self._dispatch)

    def __repr__(self) -> str:
        return f"Server({self.app!r}, tokens={self.state.tokens!r})"

    @classmethod
    def from_env(cls, app: App, env: Mapping[str, str] | None = None) -> Server:
        """Tokens from `YOKE_TOKENS_FILE`; `YOKE_IDEMPOTENCY_RETENTION` seconds (24 h); both
        from `env` when given, else from the app's settings."""
        settings = app.settings if env is None else Settings.from_env(env)
        path = (settings.tokens_file or "").strip()
        tokens = TokenBook.from_file(path) if path else None
        return cls(app, tokens=tokens, retention=settings.idempotency_retention)

    def document(self) -> dict[str, Any]:
        """`/openapi.json`, built at its first request (when every workflow is registered)."""
        if self._document is None:
            self._document = openapi.spec(self.ops, tuple(self.app.registry.names()))
        return self._document

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._dispatch(scope, receive, send)

    def lifespan(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self._lifespan(self.asgi)

    @contextlib.asynccontextmanager
    async def _lifespan(self, _: Any) -> AsyncIterator[None]:
        s = self.state
        async with self.app.running(), asyncio.TaskGroup() as tg:
            s.tasks = tg
            if self._answers is None:  # durable by default: replays survive a restart
                s.replayer.answers = StoreAnswers(
                    s.store(), keep_at_most=self.app.settings.idempotency_max_per_tenant
                )
            purge = tg.create_task(self._purge(), name="yoke-idempotency-purge")
            forget_listener = s.executions.add_grant_listener(s.metrics.granted)
            forget_recorder = s.executions.add_grant_listener(s.recorder.granted)
            forget_refusals = s.executions.add_refusal_listener(s.recorder.refused_by)
            forget_refusal_counts = s.executions.add_refusal_listener(s.metrics.refused)
            hub = tg.create_task(self.dashboard.hub.run(), name="yoke-dashboard-hub")
            try:
                yield
            finally:
                s.begin_shutdown()
                self.dashboard.hub.close()
                if s.shutdown_task is not None:
                    await s.shutdown_task
                purge.cancel()
                hub.cancel()
                forget_listener()
                forget_recorder()
                forget_refusals()
                forget_refusal_counts()
                s.tasks = None

    async def _purge(self) -> None:
        replayer = self.state.replayer
        while True:
            try:
                await replayer.answers.forget_answers(now=self.app.clock.wall())
                # Tenants' token buckets full again are as good as none: the table holds a
                # row per tenant sending now, not per tenant ever seen.
                await self.app.actors.store().tenants.forget_full_buckets()
            except YokeError as exc:
                log.warning("forgetting expired idempotency keys failed: %s", exc)
            await asyncio.sleep(PURGE_EVERY)  # a period, not a synchronisation
