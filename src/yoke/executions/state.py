"""What every part of `app.executions` shares, held by reference: the store, the admission core,
the runs of this process, and the helpers that read them.

`Executions` (`service`: the async shell that performs the core's actions) is the facade;
`Reading` (`reading`: get, wait, list) and `Control` (`control`: limits, priorities,
reviewers, audit) are parts it holds, each holding this same `Shared`. Only the shell changes
the core; the parts call the core's verbs for the changes they make in the store.

This module must never await the store itself; it only names what the parts share.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import os
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from yoke.clock import Clock
from yoke.errors import BadType, NotRunning
from yoke.executions.core import AdmissionCore, Role
from yoke.executions.model import Change, Execution, Failure, Limits, Start
from yoke.executions.tenant_book import TenantBook
from yoke.executions.tickets import Ticket
from yoke.executions.workflows import Registry
from yoke.retry import RetryPolicy
from yoke.store import ExecutionRow, Finish, StartRow, StartStatus, Store

log = logging.getLogger("yoke.executions")
T = TypeVar("T")

Reviewer = Callable[[Change], "Awaitable[str | None] | str | None"]


class Spawn(Protocol):
    """Make a task of an execution's run in the context given (the app's TaskGroup)."""

    def __call__(
        self, coro: Coroutine[Any, Any, None], *, context: contextvars.Context | None = ...
    ) -> asyncio.Task[None]: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutionsStats:
    """This process's scheduler: starts running and queued in its kernel, executions whose
    task lives here, and starts still being logged, granted or refused."""

    running: int
    queued: int
    executions: int
    in_flight: int


class Ids:
    """Random ids (uuid4 text) from a buffer refilled 4 KiB at a time: one `os.urandom` call
    (a system call, which hands the GIL to any other thread) per 256 ids, not one per id."""

    __slots__ = ("_buf", "_pos")

    def __init__(self) -> None:
        self._buf = b""
        self._pos = 0

    def __call__(self) -> str:
        pos = self._pos
        if pos >= len(self._buf):
            self._buf, pos = os.urandom(4096), 0
        self._pos = pos + 16
        # uuid4: version 4 in the high nibble of byte 6, variant 10 in the top bits of byte 8.
        b = bytearray(self._buf[pos : pos + 16])
        b[6] = (b[6] & 0x0F) | 0x40
        b[8] = (b[8] & 0x3F) | 0x80
        h = b.hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class Ended:
    """The executions that ended in this process lately, as their finish recorded them (the
    row it was granted with, and the final status, output, error and time), so that `wait` on
    one of them needs no read of the store. Bounded: the newest `keep` whose texts are at most
    `max_bytes` (a larger one is read back from the store)."""

    __slots__ = ("_ended", "keep", "max_bytes")

    def __init__(self, keep: int = 1024, max_bytes: int = 64 * 1024) -> None:
        self.keep = keep
        self.max_bytes = max_bytes
        self._ended: dict[str, tuple[ExecutionRow, Finish, float]] = {}

    def __repr__(self) -> str:
        return f"Ended(kept={len(self._ended)}, keep={self.keep})"

    def __len__(self) -> int:
        return len(self._ended)

    def add(self, row: ExecutionRow, finish: Finish, finished_at: float) -> None:
        size = len(row.input) + len(finish.output or "") + len(finish.error or "")
        if size > self.max_bytes:
            return
        ended = self._ended
        if len(ended) >= self.keep:
            del ended[next(iter(ended))]  # the oldest
        ended[row.execution_id] = (row, finish, finished_at)  # made an answer only if asked

    def get(self, execution_id: str) -> Execution | None:
        kept = self._ended.get(execution_id)
        if kept is None:
            return None
        row, finish, finished_at = kept
        error = finish.error
        return replace(
            execution_of(row),
            status=finish.status,
            output=None if finish.output is None else json.loads(finish.output),
            error=None if error is None else Failure.decoded(error),
            finished_at=finished_at,
        )


class Shared:
    def __init__(
        self,
        *,
        registry: Registry,
        clock: Clock,
        limits: Limits,
        reviewers: list[Reviewer],
        slot_poll_interval: float = 1.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.registry = registry
        self.retry = retry or RetryPolicy()  # how a finish and a read-back wait out the store
        self.clock = clock
        self.reviewers = reviewers
        self.poll = slot_poll_interval
        self.ids = Ids()
        self.tenants = TenantBook()  # the tenants' settings, kept fresh by the app
        self.store: Store | None = None
        self.instance_id = ""
        self.core = self.new_core(limits)
        self.runs: dict[str, Ticket] = {}  # by execution id, while its task lives
        self.ended = Ended()  # the latest that ended here, as recorded
        self.wake_event = asyncio.Event()

    def new_core(self, limits: Limits) -> AdmissionCore:
        return AdmissionCore(
            limits,
            instance_id=self.instance_id,
            new_id=self.ids,
            retry_default=self.poll,
            tenants=self.tenants,
        )

    def require(self) -> Store:
        if self.store is None:
            raise NotRunning("executions need a running app: `async with app.running():`")
        return self.store

    def require_leader(self) -> None:
        """`NotLeader` on the standby of a high-availability pair: it changes nothing."""
        if self.core.role is Role.STANDBY:
            raise self.core.not_leader()

    def admits(self) -> bool:
        """True while this process admits starts (not a standby, not shutting down)."""
        return (
            self.store is not None and not self.core.closing and self.core.role is not Role.STANDBY
        )

    def wake(self) -> None:
        """A slot may have freed (here or in another process): let the dispatcher look."""
        self.wake_event.set()

    def stop(self, t: Ticket) -> None:
        """Stop a run of this process: its task is cancelled now, or (not begun) as it begins."""
        if self.core.stop(t):
            t.task.cancel()

    def answer(self, row: StartRow) -> Start:
        """The start as its caller sees it, with its place in line while queued here."""
        position = None
        if row.status is StartStatus.QUEUED:
            t = self.core.tickets.get(row.start_id)
            if t is not None and t.item is not None:
                position = self.core.order.position(t.item)
        return Start(
            start_id=row.start_id,
            status=row.status,
            workflow=row.workflow,
            session=row.session,
            tenant=row.tenant,
            priority=row.priority,
            kind=row.kind,
            execution_id=row.execution_id,
            position=position,
            reason=row.reason,
            source_execution_id=row.source_execution_id,
            created_at=row.created_at,
            decided_at=row.decided_at,
            recovery=row.recovery,
            due_at=None if row.due_at_ms is None else row.due_at_ms / 1000,
        )


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
        tenant=r.tenant,
        input=json.loads(r.input),
        output=None if r.output is None else json.loads(r.output),
        error=None if r.error is None else Failure.decoded(r.error),
        start_id=r.start_id,
        parent_id=r.parent_id,
        restarted_from=r.restarted_from,
        resumed_from=r.resumed_from,
        created_at=r.created_at,
        finished_at=r.finished_at,
        waiting_for=r.waiting_for,
    )
