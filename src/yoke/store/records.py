"""The plain records the store speaks in: statuses, rows, and the inputs of its write verbs.

These are values, not behaviour: keyword-only dataclasses and `Enum`s that both backends return
identically. Values are frozen, except the records built for every start on the admission path
(a start, its execution, a grant, a finish, a slot, a step's record): a frozen `__init__`
costs about twice a plain one there, and nobody changes them once built; they are made once
and only read. JSON
payloads travel as text encoded by the caller, so every backend keeps exactly the bytes it was
given. This module must never import a driver or any part of yoke
above the store (`executions`, `actors`, `server`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass


class StartStatus(enum.Enum):
    SCHEDULED = "SCHEDULED"  # waits for its time (`due_at_ms`), then is QUEUED where it fired
    QUEUED = "QUEUED"
    GRANTED = "GRANTED"
    REFUSED = "REFUSED"
    CANCELLED = "CANCELLED"
    # A start that was still QUEUED when its process died: the queue lived in that process.
    ABORTED = "ABORTED"


class ExecutionStatus(enum.Enum):
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    ABORTED = "ABORTED"
    TIMED_OUT = "TIMED_OUT"  # ran past its workflow's timeout
    # Asleep or waiting for a signal: it holds no slot; a wake start runs it again.
    WAITING = "WAITING"

    @property
    def finished(self) -> bool:
        return self is not ExecutionStatus.RUNNING and self is not ExecutionStatus.WAITING


class StepStatus(enum.Enum):
    SUCCEEDED = "SUCCEEDED"  # its result is recorded: a replay returns it
    RETRYING = "RETRYING"  # an attempt failed and another is due at `retry_at`
    FAILED = "FAILED"  # it gave up: its last attempt's error is recorded


class StartKind(enum.Enum):
    START = "start"
    RESTART = "restart"
    RESUME = "resume"
    WAKE = "wake"  # a WAITING execution's wake-up: its grant runs the same execution again


@dataclass(kw_only=True, slots=True)
class NewStart:
    start_id: str
    kind: StartKind
    workflow: str
    session: str
    tenant: str  # whose start it is (a plain tenant sees only its own)
    priority: int
    input: str  # JSON text
    fingerprint: str  # what an idempotent retry must match
    principal: str | None
    idempotency_key: str | None
    source_execution_id: str | None
    from_step: str | None
    instance_id: str
    created_at: float

    def logged(
        self, *, seq: int, execution_id: str | None = None, decided_at: float | None = None
    ) -> StartRow:
        """Its row once logged: QUEUED, or GRANTED at once with its execution."""
        return StartRow(
            seq=seq,
            start_id=self.start_id,
            kind=self.kind,
            workflow=self.workflow,
            session=self.session,
            tenant=self.tenant,
            priority=self.priority,
            input=self.input,
            fingerprint=self.fingerprint,
            principal=self.principal,
            idempotency_key=self.idempotency_key,
            source_execution_id=self.source_execution_id,
            from_step=self.from_step,
            status=StartStatus.QUEUED if execution_id is None else StartStatus.GRANTED,
            execution_id=execution_id,
            reason=None,
            instance_id=self.instance_id,
            created_at=self.created_at,
            decided_at=decided_at,
        )


@dataclass(kw_only=True, slots=True)
class StartRow:
    seq: int
    start_id: str
    kind: StartKind
    workflow: str
    session: str
    tenant: str
    priority: int
    input: str
    fingerprint: str
    principal: str | None
    idempotency_key: str | None
    source_execution_id: str | None
    from_step: str | None
    status: StartStatus
    execution_id: str | None
    reason: str | None
    instance_id: str
    created_at: float
    decided_at: float | None
    recovery: int = 0  # automatic recoveries in a row that made it (0: asked by a caller)
    due_at_ms: int | None = None  # a timer's start: when it was (or is) due


@dataclass(kw_only=True, slots=True)
class NewExecution:
    execution_id: str
    start_id: str | None
    workflow: str
    session: str
    tenant: str
    input: str
    parent_id: str | None
    restarted_from: str | None
    resumed_from: str | None
    instance_id: str
    created_at: float


@dataclass(kw_only=True, slots=True)
class ExecutionRow:
    seq: int
    execution_id: str
    start_id: str | None
    workflow: str
    session: str
    tenant: str
    input: str
    status: ExecutionStatus
    output: str | None
    error: str | None
    parent_id: str | None
    restarted_from: str | None
    resumed_from: str | None
    slot_keys: tuple[str, ...]  # ledger keys it took, held while RUNNING; () for children
    instance_id: str
    created_at: float
    finished_at: float | None
    waiting_for: str | None = None  # WAITING: the signal it waits for (None: a sleep)


@dataclass(kw_only=True, slots=True)
class StepRecord:
    """What a step's record says now (`Store.record_steps`): written when it succeeds, when an
    attempt fails before the pause (RETRYING, due again at `retry_at`) and when it gives up
    (FAILED). The same record replaces the step's earlier one, so a batch of records from
    many executions is one statement's worth of rows, whatever their statuses."""

    execution_id: str
    position: int
    name: str
    status: StepStatus
    result: str  # JSON text; "null" unless SUCCEEDED
    error: str | None  # JSON text of the last failed attempt's error
    attempts: int  # attempts made so far, counted across resumes and recoveries
    first_attempt: int  # the first attempt of the step's current budget
    retry_at: float | None  # RETRYING: when the next attempt is due


@dataclass(frozen=True, kw_only=True, slots=True)
class StepRow:
    execution_id: str
    position: int
    name: str
    result: str  # JSON text
    recorded_at: float
    status: StepStatus = StepStatus.SUCCEEDED
    error: str | None = None
    attempts: int = 1
    first_attempt: int = 1
    retry_at: float | None = None


@dataclass(kw_only=True, slots=True)
class Slot:
    """One ledger key a grant must take, with its cap (None: counted, not limited)."""

    key: str
    cap: int | None


@dataclass(frozen=True, kw_only=True, slots=True)
class StepCopy:
    """Steps of an earlier execution that a resumed or restarted one re-uses."""

    from_execution_id: str
    before_position: int | None  # None: all of them


class GrantOutcome(enum.Enum):
    GRANTED = "GRANTED"
    FULL = "FULL"  # a ledger key is at its cap; nothing changed
    GONE = "GONE"  # the start is no longer QUEUED (cancelled or aborted elsewhere)


@dataclass(kw_only=True, slots=True)
class GrantResult:
    outcome: GrantOutcome
    start: StartRow | None
    execution: ExecutionRow | None = None
    full_key: str | None = None


@dataclass(kw_only=True, slots=True)
class GrantRequest:
    """One start to grant in a batch (`Store.grant_starts`)."""

    start_id: str
    execution: NewExecution
    slots: tuple[Slot, ...]
    copy_steps: StepCopy | None = None
    # A start not logged yet (it fits at once): logged and granted in one transaction. If its
    # idempotency key is taken, the answer is GONE with the start that holds the key.
    log: NewStart | None = None


@dataclass(kw_only=True, slots=True)
class Finish:
    """One execution to finish in a batch (`Store.finish_executions`)."""

    execution_id: str
    status: ExecutionStatus
    output: str | None
    error: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class NewControl:
    """A control-log entry to write: who changed what, from what, to what (JSON text)."""

    kind: str
    principal: str
    tenant: str | None
    roles: tuple[str, ...]
    subject: str | None
    before: str | None
    after: str | None
    at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class ControlRow:
    seq: int
    kind: str
    principal: str
    tenant: str | None
    roles: tuple[str, ...]
    subject: str | None
    before: str | None  # JSON text
    after: str | None  # JSON text
    at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Recovery:
    """What `recover_dead` found: the dead instances, their executions it ended (ABORTED, or
    CANCELLED when a cancel was asked), the queued starts it ABORTED, and, with a `Resume`
    rule, the starts that are the recovering instance's to admit now (`adopted`: the dead
    instances' queued starts and a resume start per execution it recovers, in that order),
    with the executions those resumes recover (`recovered`)."""

    instances: tuple[str, ...]
    executions: tuple[str, ...]
    starts: tuple[str, ...]
    adopted: tuple[StartRow, ...] = ()
    recovered: tuple[str, ...] = ()
    cancelled: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Resume:
    """How `recover_dead` recovers a dead instance's executions: each top-level one whose start
    was made by fewer than `max_recoveries` automatic recoveries in a row is resumed by a
    QUEUED start of the recovering instance (ids from `new_id`); the others stay ABORTED with
    the reason. A dead instance's queued starts become the recovering instance's."""

    max_recoveries: int
    new_id: Callable[[], str]


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestRow:
    """A request to an execution (`kind` "cancel"), kept until its owner handled it."""

    seq: int
    execution_id: str
    kind: str
    instance_id: str
    principal: str | None
    payload: str | None
    created_at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Pruned:
    """Rows one `prune` batch deleted, by table (the pruner repeats while one is full)."""

    executions: int = 0
    steps: int = 0
    requests: int = 0
    starts: int = 0
    answers: int = 0
    controls: int = 0
    signals: int = 0

    def full(self, batch: int) -> bool:
        return max(self.executions, self.starts, self.answers, self.controls) >= batch


@dataclass(frozen=True, kw_only=True, slots=True)
class AnswerRow:
    """An answer the server keeps for Idempotency-Key replay (body: the JSON text answered;
    headers: a JSON list of [name, value] pairs)."""

    principal: str
    tenant: str  # whose answer it is: a tenant keeps a bounded number of them
    key: str
    fingerprint: str
    status: int
    body: str
    headers: str
    created_at: float
    expires_at: float
