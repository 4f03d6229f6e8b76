"""A server's error answer as the `YokeError` it stands for.

The server answers every error as RFC 9457 problem JSON whose `type` names the error's class
(`https://yoke.dev/problems/limit-exceeded`), so the class is found by its type first; a type
the client does not know (one of the server's own request checks, a proxy's answer, the
`about:blank` of a route that does not exist) falls back to the class of its status. The
raised error carries the problem as received (`exc.problem`), and what its class holds beside
the message: `LimitExceeded.retry_after`, `NotLeader.leader`, `Vetoed.reason`.

This module must never do I/O: it turns an answer (status, headers, body) into an error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import yoke.errors as errors
from yoke.errors import (
    Conflict,
    Forbidden,
    InvalidArgument,
    LimitExceeded,
    NotFound,
    NotLeader,
    ShuttingDown,
    Unauthorized,
    Vetoed,
    YokeError,
    problem_type,
)


class ApiError(YokeError):
    """An error answer of no status yoke gives a meaning to (a 405, a proxy's 502...)."""

    title = "HTTP error"

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class ServerUnreachable(YokeError):
    """No answer came from the server (refused, reset, timed out), after the client's retries."""

    status = 503
    title = "Cannot reach the server"


# Every error class of `yoke.errors`, by the problem type the server names it with.
BY_TYPE: dict[str, type[YokeError]] = {
    problem_type(cls): cls
    for cls in vars(errors).values()
    if isinstance(cls, type) and issubclass(cls, YokeError)
}
BY_STATUS: dict[int, type[YokeError]] = {
    400: InvalidArgument,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: InvalidArgument,
    414: InvalidArgument,
    415: InvalidArgument,
    422: InvalidArgument,
    429: LimitExceeded,
    431: InvalidArgument,
    503: ShuttingDown,
}
MAX_SHOWN = 200  # characters of a body that is not problem JSON, in the message


def retry_after(headers: Mapping[str, str]) -> float | None:
    """`Retry-After` in seconds (yoke sends whole seconds; an HTTP date is not waited for)."""
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def parse_problem(status: int, body: bytes) -> dict[str, Any]:
    """The problem JSON of an answer; a body that is not one becomes one, with the body's
    start as its detail (a proxy's HTML page)."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("title"), str):
        return data
    text = body[:MAX_SHOWN].decode("utf-8", "replace").strip()
    return {"type": "about:blank", "title": "HTTP error", "status": status, "detail": text}


def error_of(status: int, headers: Mapping[str, str], body: bytes) -> YokeError:
    """The error an answer of `status` (400 or more) stands for."""
    problem = parse_problem(status, body)
    cls = BY_TYPE.get(str(problem.get("type"))) or BY_STATUS.get(status)
    detail = problem.get("detail")
    message = str(detail) if detail else str(problem["title"])
    exc: YokeError
    if cls is None:
        exc = ApiError(f"{status} {message}", status=status)
    elif issubclass(cls, LimitExceeded):
        after = problem.get("retry_after")
        exc = cls(
            message,
            retry_after=float(after) if isinstance(after, int | float) else retry_after(headers),
        )
    elif issubclass(cls, NotLeader):
        leader = problem.get("leader")
        exc = cls(message, leader=leader if isinstance(leader, str) else None)
    elif issubclass(cls, Vetoed):
        exc = cls(message.removeprefix("vetoed: "))
    else:
        exc = cls(message)
    exc.problem = problem
    return exc
