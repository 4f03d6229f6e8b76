"""The operational routes: `/metrics`, `/healthz`, `/readyz`, `/v1/ha`, `/openapi.json`, `/docs`.

Ready means this server admits (a standby of a high-availability pair is not ready: a load
balancer should send starts to the leader) and the store answers: `/readyz` reads the newest
recorded limits (one indexed row, a real round trip) within `YOKE_READY_TIMEOUT` seconds and
answers 503 with the reason when it does not (or while the server starts or stops), so a load
balancer stops sending starts that would all get 503.
`/docs` is Swagger UI from the files of the `swagger-ui-py` package, served from here: it
works offline and runs under the same Content-Security-Policy as every other answer (no
inline script, nothing from another origin).

This module must never change the scheduler's state.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response

from yoke.errors import NotFound, NotRunning, StoreUnavailable, YokeError
from yoke.server import introspect
from yoke.server.state import ServerState, json_response

DOCS_HTML = """<!doctype html>
<html><head><title>yoke API</title><meta charset="utf-8">
<link rel="stylesheet" href="/docs/swagger-ui.css">
<link rel="icon" type="image/png" href="/docs/favicon-32x32.png">
</head><body><div id="ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script>
<script src="/docs/init.js"></script>
</body></html>"""
DOCS_INIT = 'window.ui = SwaggerUIBundle({url: "/openapi.json", dom_id: "#ui"});\n'
# The files the page loads, and nothing else of the package's folder.
DOCS_ASSETS = {
    "swagger-ui.css": "text/css",
    "swagger-ui-bundle.js": "text/javascript",
    "favicon-32x32.png": "image/png",
    "favicon-16x16.png": "image/png",
}


def swagger_ui_dir() -> Path | None:
    """The folder of Swagger UI's files, found without importing the package (whose handlers
    pull in web frameworks yoke does not use)."""
    found = importlib.util.find_spec("swagger_ui")
    if found is None or not found.submodule_search_locations:
        return None
    return Path(next(iter(found.submodule_search_locations))) / "static"


class OpsRoutes:
    def __init__(self, state: ServerState, document: Callable[[], dict[str, Any]]) -> None:
        self.s = state
        self._document = document
        self._assets = swagger_ui_dir()

    async def metrics(self, _: Request) -> Response:
        return Response(
            await self.s.metrics.scrape(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    async def healthz(self, _: Request) -> Response:
        return json_response({"status": "ok"})

    async def readyz(self, _: Request) -> Response:
        app = self.s.app
        store = app.store
        if store is None:
            raise NotRunning("not started yet")
        if introspect.closing(app.executions) or self.s.shutdown_task is not None:
            raise NotRunning("shutting down")
        if app.leadership is not None and not app.leadership.is_leader:
            raise app.executions.not_leader()
        timeout = app.settings.ready_timeout
        try:
            async with asyncio.timeout(timeout):
                await store.latest_limits()
        except TimeoutError:
            raise StoreUnavailable(f"the store did not answer within {timeout:g} s") from None
        except YokeError as exc:
            raise StoreUnavailable(f"the store does not answer: {exc}") from None
        return json_response({"status": "ready", "instance_id": app.instance_id})

    async def ha(self, _: Request) -> Response:
        """This server's role in its high-availability pair, and the lease as the store has
        it now (the leader's holder, term, since and expiry, on the database's clock)."""
        app = self.s.app
        self.s.store()  # NotRunning before the lifespan
        lead = app.leadership
        if lead is None:
            return json_response(
                {
                    "enabled": False,
                    "role": "solo",
                    "holder": app.instance_id,
                    "epoch": None,
                    "leader": None,
                }
            )
        try:
            lease = await lead.lease()
        except YokeError as exc:
            raise StoreUnavailable(f"the store does not answer: {exc}") from None
        leader = None
        if lease is not None and lease.holder is not None and lease.expires_at > lease.now:
            leader = {
                "holder": lease.holder,
                "epoch": lease.epoch,
                "since": lease.since,
                "expires_at": lease.expires_at,
            }
        return json_response(
            {
                "enabled": True,
                "role": lead.role.value,
                "holder": lead.holder,
                "epoch": lead.epoch,
                "leader": leader,
            }
        )

    async def openapi(self, _: Request) -> Response:
        return json_response(self._document())

    async def docs(self, _: Request) -> Response:
        return HTMLResponse(DOCS_HTML)

    async def docs_asset(self, request: Request) -> Response:
        name = request.path_params["asset"]
        if name == "init.js":
            return Response(DOCS_INIT, media_type="text/javascript")
        media = DOCS_ASSETS.get(name)
        if media is None or self._assets is None:
            raise NotFound(f"no docs file {name!r}")
        return FileResponse(self._assets / name, media_type=media)
