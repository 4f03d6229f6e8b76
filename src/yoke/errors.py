"""The one exception family of yoke.

Every error a caller of yoke can see is a `YokeError`. Drivers' exceptions (`sqlite3`, psycopg)
are translated at the storage boundary, so callers never import a driver to catch a failure.
Each class carries the HTTP status and RFC 9457 problem type the server answers with, so the
mapping lives beside the meaning and not in a table somewhere else.

Argument errors of the in-process API (`yoke.fair`, the kernel) are `InvalidArgument`, which is
also a `TypeError` or `ValueError` as Python convention asks (see `BadType` and `BadValue`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class YokeError(Exception):
    """Root of every error yoke raises on purpose."""

    status: int = 500
    title: str = "Internal error"
    # Set by `yoke.client` on an error it raises from a server's answer: the problem JSON as
    # received (type, title, status, detail and any extension such as `errors`).
    problem: Mapping[str, Any] | None = None

    @property
    def problem_type(self) -> str:
        return problem_type(type(self))


def problem_type(cls: type[YokeError]) -> str:
    """The RFC 9457 problem type the server answers an error of class `cls` with."""
    return f"https://yoke.dev/problems/{_kebab(cls.__name__)}"


class InvalidArgument(YokeError):
    """A caller passed something yoke cannot accept; nothing was changed."""

    status = 422
    title = "Invalid argument"


class BadType(InvalidArgument, TypeError):
    """An argument of the wrong type."""


class BadValue(InvalidArgument, ValueError):
    """An argument of the right type but an unacceptable value."""


class NotFound(YokeError):
    status = 404
    title = "Not found"


class Conflict(YokeError):
    """The request is valid but the state does not allow it (re-prioritising a granted start)."""

    status = 409
    title = "Conflict"


class IdempotencyConflict(Conflict):
    """The idempotency key was used before with a different request body."""

    status = 422
    title = "Idempotency key reused with another request"


class Forbidden(YokeError):
    status = 403
    title = "Forbidden"


class Unauthorized(YokeError):
    status = 401
    title = "Unauthorized"


class LimitExceeded(YokeError):
    """A limit is full and `on_limit` is `reject`. `retry_after` is an estimate in seconds."""

    status = 429
    title = "Limit exceeded"

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RateLimited(LimitExceeded):
    """A tenant's rate (a token bucket: `executions.rate`, `actors.append_rate`) has no token
    now; `retry_after`: seconds until one will be there. Nothing was written."""

    title = "Rate limited"


class QuotaExceeded(YokeError):
    """What a tenant holds (actor instances, pending timers) would pass its quota
    (`actors.max_instances`, `actors.max_timers`); nothing of the batch was written."""

    status = 409
    title = "Quota exceeded"


class ShuttingDown(YokeError):
    """Nothing new is admitted while the scheduler shuts down (or is a standby)."""

    status = 503
    title = "Shutting down"


class NotLeader(ShuttingDown):
    """This server is the standby of a high-availability pair, or its term as leader has
    ended: it admits and changes nothing, the leader does. `leader` names the leader when
    known; nothing was changed."""

    title = "Not the leader"

    def __init__(self, message: str, *, leader: str | None = None) -> None:
        super().__init__(message)
        self.leader = leader


class StoreUnavailable(YokeError):
    """The database cannot be reached; the operation did not happen."""

    status = 503
    title = "Store unavailable"


class StoreError(YokeError):
    """The database refused an operation for a reason that is not the caller's input."""

    status = 500
    title = "Store error"


# The errors a retry loop waits out: the store did not answer, and the operation did not happen
# (or its answer was lost), so the same call may succeed later. Every other `YokeError` is
# permanent (a constraint, a value the store refuses, a fence): asking again gets the same
# answer, so it is handled where it happens (a dead letter, a refusal, a failed write logged),
# never retried. The one list: `yoke.retry.until_done` and every loop with a `Backoff` read it.
TRANSIENT: tuple[type[YokeError], ...] = (StoreUnavailable,)


def _kebab(name: str) -> str:
    out: list[str] = []
    for i, ch in enumerate(name):
        if ch.isupper() and i:
            out.append("-")
        out.append(ch.lower())
    return "".join(out)


class Vetoed(Forbidden):
    """A reviewer refused a runtime change; `reason` says why. Nothing was changed."""

    title = "Vetoed by a reviewer"

    def __init__(self, reason: str) -> None:
        super().__init__(f"vetoed: {reason}")
        self.reason = reason


class NotRunning(ShuttingDown):
    """The call needs the scheduler to be running (`async with app.running():`)."""

    title = "Not running"


class ReplayMismatch(Conflict):
    """A replayed workflow asked for a different step than the one recorded at that position."""

    title = "Replay does not match the recorded steps"


class WaitTimeout(YokeError, TimeoutError):
    """`ctx.wait_for(name, timeout=)` ran past its timeout with no signal `name`."""

    status = 408
