"""The ASGI application of one yoke server: routes, middleware, and its one lifespan.

Layers, outermost first: `LastResort` (nothing escapes as a 500 or a traceback), `Authenticate`
(who is calling), then Starlette's router with the problem handlers. The lifespan enters
`app.running()` (store, dispatcher, heartbeat) and a TaskGroup for the server's own tasks; on
exit it shuts the executions down in the seed's order (refuse queued, let running finish within
the timeout, abort the rest) before the store closes.

This module must never hold a route's logic; it composes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from yoke.app import App
from yoke.errors import BadValue, NotRunning, YokeError
from yoke.server import introspect, openapi
from yoke.server.auth import Authenticate, TokenBook
from yoke.server.idempotency import AnswerStore, MemoryAnswers, Replayer, StoreAnswers
from yoke.server.metrics import Metrics
from yoke.server.problems import LastResort, http_error_handler, yoke_error_handler
from yoke.server.routes_actors import ActorsRoutes
from yoke.server.routes_control import ControlRoutes
from yoke.server.routes_executions import ExecutionsRoutes
from yoke.server.routes_starts import StartsRoutes
from yoke.server.routes_streams import StreamsRoutes
from yoke.server.state import ServerState, json_response

log = logging.getLogger("yoke.server")
DEFAULT_RETENTION = 24 * 3600.0
PURGE_EVERY = 60.0

DOCS_HTML = """<!doctype html>
<html><head><title>yoke API</title><meta charset="utf-8">
<link rel="stylesheet" href="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui.css">
</head><body><div id="ui"></div>
<script src="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js"></script>
<script>SwaggerUIBundle({url: "/openapi.json", dom_id: "#ui"});</script>
</body></html>"""


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
        self.state = ServerState(
            app=app,
            tokens=tokens,
            metrics=Metrics(app.executions, app.actors),
            replayer=Replayer(answers or MemoryAnswers(), retention=retention),
            max_wait=max_wait,
        )
        starts = StartsRoutes(self.state)
        routes = [
            *starts.routes(),
            *ActorsRoutes(self.state).routes(),
            *ExecutionsRoutes(self.state, starts).routes(),
            *ControlRoutes(self.state).routes(),
            *StreamsRoutes(self.state).routes(),
            Route("/metrics", self._metrics, methods=["GET"]),
            Route("/healthz", self._healthz, methods=["GET"]),
            Route("/readyz", self._readyz, methods=["GET"]),
            Route("/openapi.json", self._openapi, methods=["GET"]),
            Route("/docs", self._docs, methods=["GET"]),
        ]
        self.asgi = Starlette(
            routes=routes,
            middleware=[Middleware(LastResort), Middleware(Authenticate, tokens=tokens)],
            exception_handlers={YokeError: yoke_error_handler, HTTPException: http_error_handler},
            lifespan=self._lifespan,
        )

    def __repr__(self) -> str:
        return f"Server({self.app!r}, tokens={self.state.tokens!r})"

    @classmethod
    def from_env(cls, app: App, env: dict[str, str] | None = None) -> Server:
        """Tokens from `YOKE_TOKENS_FILE`; `YOKE_IDEMPOTENCY_RETENTION` seconds (24 h)."""
        source = os.environ if env is None else env
        path = source.get("YOKE_TOKENS_FILE", "").strip()
        tokens = TokenBook.from_file(path) if path else None
        raw = source.get("YOKE_IDEMPOTENCY_RETENTION", "").strip()
        try:
            retention = float(raw) if raw else DEFAULT_RETENTION
        except ValueError:
            raise BadValue(f"YOKE_IDEMPOTENCY_RETENTION must be seconds, got {raw!r}") from None
        return cls(app, tokens=tokens, retention=retention)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.asgi(scope, receive, send)

    def lifespan(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self._lifespan(self.asgi)

    @contextlib.asynccontextmanager
    async def _lifespan(self, _: Any) -> AsyncIterator[None]:
        s = self.state
        async with self.app.running(), asyncio.TaskGroup() as tg:
            s.tasks = tg
            if self._answers is None:  # durable by default: replays survive a restart
                s.replayer.answers = StoreAnswers(s.store())
            purge = tg.create_task(self._purge(), name="yoke-idempotency-purge")
            forget_listener = s.executions.add_grant_listener(s.metrics.granted)
            try:
                yield
            finally:
                s.begin_shutdown()
                if s.shutdown_task is not None:
                    await s.shutdown_task
                purge.cancel()
                forget_listener()
                s.tasks = None

    async def _purge(self) -> None:
        replayer = self.state.replayer
        while True:
            try:
                await replayer.answers.forget_answers(now=self.app.clock.wall())
            except YokeError as exc:
                log.warning("forgetting expired idempotency keys failed: %s", exc)
            await asyncio.sleep(PURGE_EVERY)  # a period, not a synchronisation

    # -- operational routes ---------------------------------------------------------------------
    async def _metrics(self, _: Request) -> Response:
        return Response(
            await self.state.metrics.scrape(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    async def _healthz(self, _: Request) -> Response:
        return json_response({"status": "ok"})

    async def _readyz(self, _: Request) -> Response:
        if self.app.store is None:
            raise NotRunning("not started yet")
        if introspect.closing(self.app.executions) or self.state.shutdown_task is not None:
            raise NotRunning("shutting down")
        return json_response({"status": "ready", "instance_id": self.app.instance_id})

    async def _openapi(self, _: Request) -> Response:
        return json_response(openapi.spec(tuple(self.app.registry.names())))

    async def _docs(self, _: Request) -> Response:
        return HTMLResponse(DOCS_HTML)
