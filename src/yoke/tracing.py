"""The seam between yoke and a tracer: what yoke tells it about a start's life, a `process()`
call and an HTTP request, in plain values. `Tracing` itself traces nothing; `yoke.otel`
(the `yoke[otel]` extra) is the one implementation, and the only module of yoke that imports
OpenTelemetry (`tests/test_architecture.py`).

With tracing off (the default) the parts ask once and pay nothing more: `Tracing.start`
returns None, so a ticket carries no trace and every later hook is one `is not None`; the
actor runner is not wrapped; the HTTP app is not wrapped.

Whatever a tenant chose (a session, a workflow or actor name, a stream) is cut to
`MAX_ATTRIBUTE_CHARS` before it reaches a tracer, and every span has a fixed set of
attributes and at most `MAX_EVENTS` events: no tenant can blow up a trace backend.

This module must never import anything of yoke: every part may use it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, Protocol

MAX_ATTRIBUTE_CHARS = 128  # a tenant-chosen attribute value at most (a session, a stream...)
MAX_MESSAGE_CHARS = 512  # an error's message on a span at most
MAX_EVENTS = 16  # events on one span at most (a start sent back in line again and again)

ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]


class Failed(NamedTuple):
    """What a span says of a failure: the error's type and its message."""

    type: str
    message: str


def bounded(value: object, limit: int = MAX_ATTRIBUTE_CHARS) -> str:
    """`value` as text of at most `limit` characters (a cut one ends with `...`)."""
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class StartTrace(Protocol):
    """One start's trace, from its arrival to the record of its end. Each verb is called at
    most once, in this order, except `queued` (again each time it goes back in line)."""

    def queued(self, position: int | None) -> None:
        """It waits in the queue."""
        ...

    def granted(self, execution_id: str) -> None:
        """The store granted it a slot: its wait is over."""
        ...

    def running(self) -> contextlib.AbstractContextManager[None]:
        """Around the workflow's body: its run, the current span while it runs."""
        ...

    def ran(self, status: str, error: Failed | None) -> None:
        """The body ended with `status` (an `ExecutionStatus` value); `error` if that is a
        failure (FAILED, TIMED_OUT, ABORTED)."""
        ...

    def ended(self, status: str, error: Failed | None, *, refused: str | None = None) -> None:
        """Its end is recorded (its slot is free), or it left without a run (`status`:
        REFUSED, CANCELLED...; `refused`: why it was refused). `error`: it failed (a failed
        run, or a store that failed its start), not only ended."""
        ...


class CallTrace(Protocol):
    """One `process()` call."""

    def current(self) -> contextlib.AbstractContextManager[None]:
        """Make the call's span the current one (inside, the actor's own spans nest)."""
        ...

    def ended(self, error: BaseException | None) -> None: ...


class Tracing:
    """No tracing: what yoke uses unless tracing is turned on (`YOKE_TRACING=otel`, or
    `App(tracing=...)`)."""

    enabled = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def start(
        self,
        *,
        start_id: str,
        workflow: str,
        session: str,
        tenant: str,
        kind: str,
        priority: int,
    ) -> StartTrace | None:
        """A start arrives (in its caller's context: its trace continues the caller's)."""
        return None

    def call(
        self,
        *,
        actor: str,
        instance: str,
        tenant: str,
        stream: str,
        event_id: int,
        group: str,
        attempt: int,
        start_ns: int | None = None,
    ) -> CallTrace:
        """A `process()` call begins (or began at `start_ns`, ns since the epoch); asked only
        when `enabled`."""
        return _NO_CALL

    def appending(
        self, *, stream: str, tenant: str, count: int
    ) -> contextlib.AbstractContextManager[None]:
        """Around an append of `count` events (in its caller's context)."""
        return _NOTHING

    def asgi(self, app: ASGIApp) -> ASGIApp:
        """The HTTP app, taking each request's trace context (W3C `traceparent`)."""
        return app

    def export(self) -> None:
        """A yoke command (`serve`, `worker`) is starting: send the spans somewhere."""
        return


class _NoCall:
    def current(self) -> contextlib.AbstractContextManager[None]:
        return _NOTHING

    def ended(self, error: BaseException | None) -> None:
        return None


_NO_CALL = _NoCall()
_NOTHING = contextlib.nullcontext()
NO_TRACING = Tracing()
