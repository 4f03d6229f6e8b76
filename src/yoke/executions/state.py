"""The state that every part of `app.executions` shares, and the helpers that read it.

`Executions` is one object assembled from three modules so that each stays small: this one (its
fields, the answer to "what is this start now?", the checks every verb makes), `reading` (get,
wait, list), `control` (limits, priorities, reviewers, audit) and `service` (admission, grants,
running, shutdown). Only `service` changes the kernel's queue or grants a slot.

This module must never await the store itself; it only names what the others share.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from yoke.clock import Clock
from yoke.errors import (
    BadType,
    Forbidden,
    NotRunning,
    ShuttingDown,
    YokeError,
)
from yoke.executions.admission import Caps, DrainRate, QueueOrder, make_kernel
from yoke.executions.context import Registry
from yoke.executions.model import (
    Change,
    Execution,
    Limits,
    Principal,
    Start,
)
from yoke.kernel import Item, Kernel
from yoke.store import (
    ExecutionRow,
    StartRow,
    StartStatus,
    StepCopy,
    Store,
)

log = logging.getLogger("yoke.executions")
T = TypeVar("T")

Reviewer = Callable[[Change], "Awaitable[str | None] | str | None"]
Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutionsStats:
    """This process's scheduler: starts running and queued in its kernel, executions whose
    task lives here, and starts still being logged or decided."""

    running: int
    queued: int
    executions: int
    in_flight: int


@dataclass(eq=False)
class Local:
    """A start logged by this process, until its execution ends (or it is refused)."""

    row: StartRow
    copy: StepCopy | None
    item: Item | None = None
    decided: asyncio.Event = field(default_factory=asyncio.Event)
    tried: asyncio.Event | None = None  # set when its latest grant attempt has an answer
    answered: asyncio.Event = field(default_factory=asyncio.Event)
    error: YokeError | None = None
    task: asyncio.Task[None] | None = None
    orphaned: bool = False  # its grant outlived a cancelled caller and settles by itself
    started: bool = False
    cancel_requested: bool = False
    finishing: bool = False  # its end is being recorded: a cancel must not cut that short


class ExecutionsState:
    def __init__(
        self,
        *,
        registry: Registry,
        clock: Clock,
        limits: Limits,
        reviewers: list[Reviewer],
        slot_poll_interval: float = 1.0,
    ) -> None:
        self._registry = registry
        self._clock = clock
        self._limits = limits
        self._reviewers = reviewers
        self._poll = slot_poll_interval
        self._store: Store | None = None
        self._spawn: Spawn | None = None
        self._instance_id = ""
        self._kernel: Kernel = make_kernel(limits)
        self._caps = Caps(self._kernel, limits)
        self._order = QueueOrder()
        self._grant_listeners: list[Callable[[Start], None]] = []
        self._drain = DrainRate(clock)
        self._local: dict[str, Local] = {}
        self._runs: dict[str, Local] = {}  # by execution id, while its task lives
        self._in_flight: set[asyncio.Future[Any]] = set()  # starts being logged and decided
        self._logging = 0  # starts logged (or being logged) and not yet offered to the kernel
        self._wake = asyncio.Event()
        self._closing = False
        self._aborting = False

    def __repr__(self) -> str:
        k = self._kernel
        state = "closing" if self._closing else ("running" if self._store else "stopped")
        return (
            f"Executions({state}, running={k.running}, queued={k.queued}, "
            f"executions={len(self._runs)}, in_flight={len(self._in_flight)}, "
            f"limits={self._limits})"
        )

    @property
    def closing(self) -> bool:
        """True once shutdown began: nothing new is admitted."""
        return self._closing

    def add_grant_listener(self, listener: Callable[[Start], None]) -> Callable[[], None]:
        """Call `listener(start)` whenever this process grants a start (in the batch that
        granted it; it must be quick and must not raise). Returns the function that removes
        it. The server times each start's wait this way, without a task per queued start."""
        self._grant_listeners.append(listener)
        return lambda: self._grant_listeners.remove(listener)

    @property
    def kernel(self) -> Kernel:
        """This process's queue of starts and what it runs, for introspection (`why`, the
        scheduler view). Read it; never change it: admission keeps it in step with the store."""
        return self._kernel

    @property
    def current_limits(self) -> Limits:
        """The limits in force in this process now (`limits()` reads the audited ones)."""
        return self._limits

    def wake(self) -> None:
        """A slot may have freed (here or in another process): let the dispatcher look."""
        self._wake.set()

    # -- helpers -------------------------------------------------------------------------------
    def _require(self) -> Store:
        if self._store is None:
            raise NotRunning("executions need a running app: `async with app.running():`")
        return self._store

    def _check_open(self) -> None:
        if self._closing:
            raise ShuttingDown("shutting down: no new start is admitted")

    def _answer(self, row: StartRow) -> Start:
        position = None
        local = self._local.get(row.start_id)
        if row.status is StartStatus.QUEUED and local is not None and local.item is not None:
            position = self._position(local.item)
        return Start(
            start_id=row.start_id,
            status=row.status,
            workflow=row.workflow,
            session=row.session,
            priority=row.priority,
            kind=row.kind,
            execution_id=row.execution_id,
            position=position,
            reason=row.reason,
            source_execution_id=row.source_execution_id,
            created_at=row.created_at,
            decided_at=row.decided_at,
        )

    def _position(self, item: Item) -> int | None:
        return self._order.position(item)


def need(principal: Principal, *roles: str) -> None:
    if not isinstance(principal, Principal):
        raise Forbidden(f"this change needs a principal with role {' or '.join(roles)}")
    if not principal.has_any(*roles):
        raise Forbidden(f"{principal.name} lacks role {' or '.join(roles)}")


def check_id(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise BadType(f"{what} must be a non-empty str")
    return value


def execution_of(r: ExecutionRow) -> Execution:
    return Execution(
        execution_id=r.execution_id,
        status=r.status,
        workflow=r.workflow,
        session=r.session,
        input=json.loads(r.input),
        output=None if r.output is None else json.loads(r.output),
        error=r.error,
        start_id=r.start_id,
        parent_id=r.parent_id,
        restarted_from=r.restarted_from,
        resumed_from=r.resumed_from,
        created_at=r.created_at,
        finished_at=r.finished_at,
    )
