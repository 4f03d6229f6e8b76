"""RFC 9457 problem answers, and the last-resort guard that keeps every error one of them.

Every error the server answers is `application/problem+json` with a 4xx status, or 503 when the
server cannot serve right now. A `YokeError` carries its own status and title (errors.py), so the
mapping lives beside the meaning. An exception nobody expected is logged with its traceback and
answered 503 "Unexpected failure" with no detail: a client must never see a traceback, and a
500 would tell it nothing it can act on, while 503 says "retry later".

This module must never decide what is an error: it only shapes answers to errors others raise.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from yoke.errors import LimitExceeded, NotLeader, YokeError
from yoke.server.calls import Incoming

log = logging.getLogger("yoke.server")

PROBLEM = "application/problem+json"
_TYPE_BASE = "https://yoke.dev/problems/"


class ProblemResponse(Response):
    media_type = PROBLEM


def problem(
    status: int,
    title: str,
    detail: str | None = None,
    *,
    type_: str | None = None,
    instance: str | None = None,
    headers: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> Response:
    # Statuses outside 4xx/503 are folded into 503: the API promises no 5xx but 503.
    if not 400 <= status < 500 and status != 503:
        status = 503
    body: dict[str, Any] = {"type": type_ or "about:blank", "title": title, "status": status}
    if detail:
        body["detail"] = detail
    if instance:
        body["instance"] = instance
    if extra:
        body.update(extra)
    return ProblemResponse(json.dumps(body), status_code=status, headers=headers)


def retry_after(seconds: float | None) -> str:
    """Whole seconds for `Retry-After` (RFC 9110 allows no fraction); at least 1."""
    if seconds is None or not math.isfinite(seconds):
        return "1"
    return str(max(1, math.ceil(seconds)))


def from_yoke_error(exc: YokeError, instance: str | None = None) -> Response:
    headers: dict[str, str] = {}
    extra: dict[str, Any] = {}
    if isinstance(exc, LimitExceeded):
        headers["Retry-After"] = retry_after(exc.retry_after)
        if exc.retry_after is not None:
            extra["retry_after"] = round(exc.retry_after, 3)
    elif exc.status == 503:
        headers["Retry-After"] = "1"
        if isinstance(exc, NotLeader):
            extra["leader"] = exc.leader
    elif exc.status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="yoke"'
    errors = getattr(exc, "errors", None)  # field by field, for a body that failed validation
    if isinstance(errors, list):
        extra["errors"] = errors
    return problem(
        exc.status,
        exc.title,
        str(exc) or None,
        type_=exc.problem_type,
        instance=instance,
        headers=headers or None,
        extra=extra or None,
    )


async def yoke_error_handler(request: Incoming, exc: Exception) -> Response:
    assert isinstance(exc, YokeError)
    if exc.status >= 500 and exc.status != 503:
        log.error("store or internal error on %s %s: %s", request.method, request.url.path, exc)
    return from_yoke_error(exc, request.url.path)


async def http_error_handler(request: Incoming, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    titles = {
        404: "Not found",
        405: "Method not allowed",
        400: "Bad request",
        413: "Request body too large",
    }
    title = titles.get(exc.status_code, "HTTP error")
    detail = exc.detail if exc.detail and exc.detail.lower() != title.lower() else None
    return problem(
        exc.status_code,
        title,
        detail,
        instance=request.url.path,
        headers=dict(exc.headers or {}) or None,
    )


class LastResort:
    """Pure ASGI: anything that escapes the app is logged and answered 503 problem JSON (or,
    if the answer had begun, the connection is closed without a second answer)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            log.exception("unexpected failure on %s %s", scope.get("method"), scope.get("path"))
            if started:
                return
            response = problem(
                503,
                "Unexpected failure",
                "the server failed unexpectedly; the failure was logged",
                headers={"Retry-After": "1"},
            )
            await response(scope, receive, send)
