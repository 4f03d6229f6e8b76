"""What one row of the route table says, and how a row becomes a Starlette route.

An `Op` names a method and path, the handler, who may call it (`Access`), its request body and
its answers. `starlette_routes` turns the rows into routes whose endpoint checks, in this order
and before the handler reads anything: the caller is known (401, unless the row is public; the
`Authenticate` middleware only says who the token belongs to), holds one of the row's roles
(403; a row open to any principal is still closed to a METRICS-only scraper), and sends a
JSON body as `application/json` (415). Only then does the handler parse the body (400/422),
so a caller without the role learns nothing about what a valid body is.
`server/openapi.py` describes the same rows, so the routes, their role checks and the API
description cannot disagree.

A row marked `lean` (the hot `POST /v1/starts`) is also reached by `LeanRoutes`, a pure ASGI
dispatch on its exact method and path in front of Starlette (`asgi.Server` puts the same
guards and authentication before each lean row): the same guarded endpoint and the same error
answers, without Starlette's router (which tries every route in turn) and its exception
layers, and given a `calls.Call` instead of a Starlette `Request` (a lean row's handler reads
only what `calls.Incoming` offers, which both provide). Every other request goes on to the
router.

This module must never hold a route's logic or know a particular route.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, TypeVar, cast

from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from yoke.errors import Forbidden, YokeError
from yoke.executions.policy import ROLES, Act
from yoke.server.auth import principal_of, scraper
from yoke.server.calls import Call, Incoming
from yoke.server.problems import http_error_handler, yoke_error_handler

Handler = Callable[[Request], Awaitable[Response]]
# The handler of a lean row: it reads only what both a `Request` and a `Call` offer.
LeanHandler = Callable[[Incoming], Awaitable[Response]]


@dataclass(frozen=True, kw_only=True, slots=True)
class Access:
    """Who may call a route: anyone without a token (`public`), any principal (no `roles`), or
    a principal holding one of `roles`."""

    public: bool = False
    roles: frozenset[str] = frozenset()

    def describe(self) -> str:
        if self.public:
            return "no token needed"
        return "any principal" if not self.roles else " or ".join(sorted(self.roles))


PUBLIC = Access(public=True)
ANY = Access()


def role(*names: str) -> Access:
    return Access(roles=frozenset(names))


def may(act: Act) -> Access:
    """Who may call a route that does `act`: the policy's entry (`executions/policy.py`), the
    one the dashboard's controls and the services check too."""
    return Access(roles=ROLES[act])


@dataclass(frozen=True, kw_only=True, slots=True)
class Answer:
    """A success answer: its schema (a model, or a JSON schema dict), and what it means."""

    schema: type[BaseModel] | dict[str, Any]
    description: str
    media_type: str = "application/json"
    headers: Mapping[str, Any] = field(default_factory=dict)
    links: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Op:
    """One row of the route table: `Op(method, path, handler, access, name, summary, ...)`."""

    method: str
    path: str  # Starlette syntax: `{name}` or `{name:path}`
    handler: Handler
    access: Access
    name: str  # the OpenAPI operationId
    summary: str
    _: KW_ONLY
    answers: Mapping[int, Answer]
    errors: tuple[int, ...] = ()  # besides those the row implies (401, 403, 413, 415...)
    body: type[BaseModel] | dict[str, Any] | None = None  # a JSON body: its model or schema
    body_required: bool = True
    query: tuple[dict[str, Any], ...] = ()  # OpenAPI parameter objects (query and header)
    lean: bool = False  # also dispatched by `LeanRoutes` (a static path only)

    @property
    def path_params(self) -> list[str]:
        return re.findall(r"{(\w+)(?::\w+)?}", self.path)

    @property
    def described_path(self) -> str:
        """The path as OpenAPI writes it (no Starlette converters)."""
        return re.sub(r"{(\w+):\w+}", r"{\1}", self.path)


class UnsupportedMediaType(YokeError):
    status = 415
    title = "Unsupported media type"


def is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def _has_body(request: Incoming) -> bool:
    length = request.headers.get("content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    return "transfer-encoding" in request.headers


def guarded(op: Op) -> Handler:
    """The row's handler behind its access check and, for a JSON body, its media type check."""
    return _guarded(op, op.handler)


R = TypeVar("R", bound=Incoming)


def _guarded(
    op: Op, handler: Callable[[R], Awaitable[Response]]
) -> Callable[[R], Awaitable[Response]]:
    roles = op.access.roles
    wants_json = op.body is not None

    async def endpoint(request: R) -> Response:
        if not op.access.public:
            p = principal_of(request)
            if roles and not p.has_any(*roles):
                raise Forbidden(f"{p.name} lacks role {' or '.join(sorted(roles))}")
            if not roles and scraper(p):
                raise Forbidden(f"{p.name} holds only METRICS: it may read /metrics alone")
        # A body that is not declared JSON is refused unread: a browser's cross-site form or
        # `text/plain` POST cannot pass for an API call.
        if (
            wants_json
            and _has_body(request)
            and not is_json(request.headers.get("content-type", ""))
        ):
            raise UnsupportedMediaType("the body must be sent as Content-Type: application/json")
        return await handler(request)

    endpoint.__name__ = op.name
    return endpoint


def lean_routes(ops: list[Op]) -> dict[tuple[str, str], ASGIApp]:
    """The rows marked `lean`, by (method, path), each as an ASGI app: its guarded endpoint,
    answering a `YokeError` (or an HTTP error) as the router's handlers would."""
    out: dict[tuple[str, str], ASGIApp] = {}
    for op in ops:
        if op.lean:
            if op.path_params:
                raise ValueError(f"a lean route needs a static path, not {op.path}")
            # A lean row's handler reads only what `Incoming` offers (tests/server/
            # test_lean_starts.py compares its answers with the router's).
            out[(op.method, op.path)] = _lean_app(_guarded(op, cast(LeanHandler, op.handler)))
    return out


def _lean_app(endpoint: LeanHandler) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        request = Call(scope, receive)
        try:
            response = await endpoint(request)
        except YokeError as exc:
            response = await yoke_error_handler(request, exc)
        except HTTPException as exc:
            response = await http_error_handler(request, exc)
        await response(scope, receive, send)

    return app


class LeanRoutes:
    """Pure ASGI: a request whose method and path are a lean row's goes straight to it."""

    def __init__(self, app: ASGIApp, *, routes: dict[tuple[str, str], ASGIApp]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            lean = self.routes.get((scope["method"], scope["path"]))
            if lean is not None:
                await lean(scope, receive, send)
                return
        await self.app(scope, receive, send)


def starlette_routes(ops: list[Op]) -> list[Route]:
    seen: set[tuple[str, str]] = set()
    routes: list[Route] = []
    for op in ops:
        if (op.method, op.path) in seen:
            raise ValueError(f"{op.method} {op.path} is in the route table twice")
        seen.add((op.method, op.path))
        routes.append(Route(op.path, guarded(op), methods=[op.method], name=op.name))
    return routes
