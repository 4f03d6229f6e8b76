"""One record per start of this process (`Ticket`), its named phases, and the actions the
admission core hands to its async shell.

A ticket lives from the moment a start reaches `app.executions` until its execution's end is
recorded (or it is refused, cancelled, or found gone). Its life, and nothing else, is its
`phase`:

    LOGGING ──> QUEUED <──> GRANTING ──> GRANTED ──> RUNNING ──> FINISHING ──> ENDED
       │          │  ^          │  └────────────────────────────────────────────^
       │          │  └── FULL ──┘                 (GONE, refused, cancelled)
       └──────────┴──> ENDED
    (a start that fits at once skips LOGGING and QUEUED: its log rides with its grant)

This module must never await, touch the store or read a clock: tickets and actions are plain
values that `core.AdmissionCore` changes and returns, and `service.Executions` acts on.
"""

from __future__ import annotations

import contextvars
import enum
from typing import Any, NamedTuple

from yoke.kernel import Item
from yoke.store import ExecutionRow, GrantRequest, NewStart, StartRow, StartStatus, StepCopy
from yoke.tracing import StartTrace


class Phase(enum.Enum):
    LOGGING = "logging"  # being written QUEUED to the store; not offered to the kernel yet
    QUEUED = "queued"  # waits in the kernel's queue
    GRANTING = "granting"  # picked by the kernel; its grant is in a batch in the store
    GRANTED = "granted"  # the store granted it; its execution's task has not begun
    RUNNING = "running"  # its execution's task runs
    FINISHING = "finishing"  # its execution's end is being recorded
    ENDED = "ended"  # its end is recorded, or it was refused, cancelled or found gone

    @property
    def decided(self) -> bool:
        """Past the queue: granted (or beyond) or ended."""
        return self in _DECIDED


_DECIDED = frozenset({Phase.GRANTED, Phase.RUNNING, Phase.FINISHING, Phase.ENDED})


class Ticket:
    """A start of this process, from the moment it arrives until its end is recorded.

    `row` is the start as the store holds it (as it will be, while its log rides with its
    grant). `settled`: the core has decided the caller's first answer. The last four fields
    belong to the async shell: whether it has answered the caller, the futures waiting for an
    answer or a decision, the execution's task, and its trace; the core never reads them.
    """

    __slots__ = (
        "answered",
        "context",
        "copy",
        "error",
        "item",
        "phase",
        "row",
        "settled",
        "stop_requested",
        "task",
        "trace",
        "waiters",
    )

    def __init__(self, row: StartRow, copy: StepCopy | None, phase: Phase) -> None:
        self.row = row
        self.copy = copy
        self.phase = phase
        self.item: Item | None = None
        self.settled = False
        self.error: BaseException | None = None  # why the caller is refused
        self.stop_requested = False  # asked to stop before its task began
        self.answered = False
        self.waiters: list[Any] | None = None
        self.task: Any = None
        self.trace: StartTrace | None = None  # `yoke.tracing`: None while tracing is off
        self.context: contextvars.Context | None = None  # its caller's, until its run begins

    @property
    def start_id(self) -> str:
        return self.row.start_id

    @property
    def decided(self) -> bool:
        """No longer waiting for a slot: granted, ended, or decided in the store (e.g. a
        cancel that the grant batch in flight will find)."""
        return self.phase.decided or self.row.status is not StartStatus.QUEUED

    def __repr__(self) -> str:
        return f"Ticket({self.row.start_id}, {self.phase.name}, session={self.row.session!r})"


class Log(NamedTuple):
    """Write this start QUEUED to the store (in the next batch of logs), then tell the core
    (`AdmissionCore.logged`)."""

    ticket: Ticket
    start: NewStart


class Grant(NamedTuple):
    """Send this grant to the store's ledger in the next batch, then tell the core how it went
    (`AdmissionCore.granted` / `grants_failed`). `at_once`: the caller's own start that fitted
    at once; if the store fails it, the caller is told so (the others go back in line)."""

    ticket: Ticket
    request: GrantRequest
    at_once: bool


class Launch(NamedTuple):
    """Run the execution the store just granted."""

    ticket: Ticket
    execution: ExecutionRow


class Cause(enum.StrEnum):
    """Why a start was refused, as the per-tenant counts of refusals name it."""

    RATE = "rate"  # its tenant's executions.rate had no token
    TENANT_QUEUE = "tenant_queue"  # its tenant's executions.max_queued
    LIMIT = "limit"  # on_limit="reject", or the queue's max_queued
    SHUTDOWN = "shutdown"
    STORE = "store"  # the store failed the start that fitted at once


class Refuse(NamedTuple):
    """Record the start `status` (REFUSED) with `reason` in the store, then answer its caller
    with the ticket's `error` (`forget_key`: its idempotency key is given back)."""

    ticket: Ticket
    status: StartStatus
    reason: str
    forget_key: bool
    cause: Cause


class Answer(NamedTuple):
    """The ticket's state changed: answer its caller (if it still waits) and whoever waits for
    it to be decided."""

    ticket: Ticket


Action = Log | Grant | Launch | Refuse | Answer
