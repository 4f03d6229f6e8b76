"""What every route of one server shares, and the small helpers routes use to read a request.

`ServerState` holds the `App`, its executions, the tokens, metrics and the idempotency replayer,
and the server's own tasks (the purge of expired idempotency keys), which live in the
lifespan's TaskGroup. Request helpers turn bodies, query
parameters and headers into values, raising `YokeError`s (400/422) that become problem JSON.

This module must never decide a route's answer.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.responses import Response

from yoke.app import App
from yoke.errors import BadValue, InvalidArgument, NotRunning, YokeError
from yoke.executions import Executions
from yoke.server.auth import TokenBook, principal_of, tenant_of
from yoke.server.calls import Incoming
from yoke.server.idempotency import Replayer, request_fingerprint
from yoke.server.longpolls import LongPolls
from yoke.server.metrics import Metrics
from yoke.server.recorder import Recorder
from yoke.store import Store

M = TypeVar("M", bound=BaseModel)


class BadRequest(YokeError):
    """The request is not even readable (malformed JSON, a body too large)."""

    status = 400
    title = "Bad request"


@dataclass(eq=False)
class ServerState:
    app: App
    tokens: TokenBook | None
    metrics: Metrics
    replayer: Replayer
    recorder: Recorder
    long_polls: LongPolls
    max_wait: float = 60.0
    tasks: asyncio.TaskGroup | None = None
    shutdown_task: asyncio.Task[None] | None = None
    # Called once when shutdown begins (the dashboard ends its event streams there).
    on_shutdown: list[Callable[[], None]] = field(default_factory=list)

    @property
    def executions(self) -> Executions:
        return self.app.executions

    def store(self) -> Store:
        store = self.app.store
        if store is None:
            raise NotRunning("the server is not running yet")
        return store

    async def idempotent(
        self,
        request: Incoming,
        answer: Callable[[], Awaitable[Response]],
        *,
        target: str | None = None,
    ) -> tuple[Response, bool]:
        """`answer()`, or with an Idempotency-Key the kept first answer: (response, replayed).
        `target` (default: the path) is what the key's request is taken to name, for a route
        whose query parameters change what it creates."""
        key = request.headers.get("idempotency-key")
        if key is None:
            return await answer(), False
        raw = await read_body(request)
        p = principal_of(request)
        return await self.replayer.run(
            principal=p.name,
            tenant=tenant_of(p),
            key=key,
            fp=request_fingerprint(request.method, target or request.url.path, raw),
            now=self.app.clock.wall,
            answer=answer,
        )

    def begin_shutdown(self) -> None:
        """Start refusing at once (SIGTERM), before the HTTP server has drained its requests:
        queued starts are refused and their long-polls answered now, not at the end."""
        if self.tasks is not None and self.shutdown_task is None:
            self.shutdown_task = self.tasks.create_task(self.app.shutdown())
            for callback in self.on_shutdown:
                callback()


async def read_body(request: Incoming) -> bytes:
    """The whole body; `guards.Guard` refuses it (413) as soon as it passes the bound."""
    return await request.body()


def parse(model: type[M], raw: bytes, *, empty_ok: bool = False) -> M:
    if not raw.strip() and empty_ok:
        raw = b"{}"
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        if any(e["type"] == "json_invalid" for e in errors) or not raw.strip():
            raise BadRequest("the body must be a JSON object") from None
        raise Invalid(
            [{"loc": [str(x) for x in e["loc"]], "msg": e["msg"]} for e in errors]
        ) from None


class Invalid(InvalidArgument):
    """A body that is JSON but not the expected shape; `errors` names each field."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        where = "; ".join(f"{'.'.join(e['loc']) or 'body'}: {e['msg']}" for e in errors[:5])
        super().__init__(f"invalid body: {where}")
        self.errors = errors


# Plain ASCII decimal numbers only: Python's int() and float() also take "1_000", " 5 ",
# full-width digits and "infinity", which no client means and no schema describes.
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


def query_float(request: Incoming, name: str, *, low: float, high: float) -> float | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if not _FLOAT.fullmatch(raw):
        raise BadValue(f"query parameter {name} must be a number")
    value = float(raw)
    if not math.isfinite(value) or not low <= value <= high:
        raise BadValue(f"query parameter {name} must be from {low:g} to {high:g}")
    return value


def query_int(request: Incoming, name: str, *, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not _INT.fullmatch(raw):
        raise BadValue(f"query parameter {name} must be an integer")
    # Past 20 digits it is out of any range here (and int() raises past 4300 digits).
    value = int(raw) if len(raw) <= 20 else high + 1
    if not low <= value <= high:
        raise BadValue(f"query parameter {name} must be from {low} to {high}")
    return value


# One encoder for every answer: `json.dumps` with options builds a new one each call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
_JSON_TYPE = (b"content-type", b"application/json")


class JsonResponse(Response):
    """A JSON answer whose head is built at once: the given headers (names in lower case),
    then its length and type, as Starlette's `Response` lays them out, without its general
    checks (this body is never absent, and its type never needs a charset)."""

    media_type = "application/json"

    def __init__(self, body: bytes, status: int, headers: dict[str, str] | None) -> None:
        self.status_code = status
        self.background = None
        self.body = body
        extra = [] if headers is None else [_head(n, v) for n, v in headers.items()]
        self.raw_headers = [*extra, (b"content-length", str(len(body)).encode()), _JSON_TYPE]


def _head(name: str, value: str) -> tuple[bytes, bytes]:
    return name.lower().encode("latin-1"), value.encode("latin-1")


def json_response(
    data: Any,
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> Response:
    return JsonResponse(_ENCODER.encode(data).encode(), status, headers)
