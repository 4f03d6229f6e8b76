"""The one `Store` protocol: durable state of executions in domain verbs, never SQL strings.

Every backend (SQLite, PostgreSQL) exposes exactly this as its `executions` (`execverbs`, over
the backend's transactions) and passes one conformance suite (`tests/store/test_conformance.py`).
Callers pass `now` (from their injected clock) to every verb that writes a time, so no backend
reads the wall clock inside a transaction. Errors are `YokeError`s
only: a backend translates its driver's exceptions at this boundary.

The slot ledger: one row per limit key (`global`, `session:<s>`, `workflow:<w>`) holds how many
granted executions are running under that key. `grant_start` takes the rows of a start's keys
locked, in a fixed (sorted) key order, checks each against its cap and increments them in the same
transaction that creates the execution id, so two grants racing for the last slot can never both
succeed, whatever process or machine they run in. Finishing an execution (or recovering a dead
process) decrements the same rows exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from yoke.store.leaseverbs import Fence
from yoke.store.records import (
    AnswerRow,
    ControlRow,
    ExecutionRow,
    ExecutionStatus,
    Finish,
    GrantRequest,
    GrantResult,
    NewControl,
    NewExecution,
    NewStart,
    Pruned,
    Recovery,
    RequestRow,
    Resume,
    Slot,
    StartRow,
    StartStatus,
    StepCopy,
    StepRecord,
    StepRow,
)
from yoke.store.timeverbs import ScheduledStart


class Requests(Protocol):
    """Requests to executions (`store/requestverbs.py`)."""

    async def request_cancel(
        self, execution_id: str, *, principal: str | None, now: float
    ) -> tuple[ExecutionRow | None, bool]: ...

    async def pending_requests(self, instance_id: str, *, limit: int) -> list[RequestRow]: ...

    async def handle_requests(self, seqs: Sequence[int], *, now: float) -> None: ...

    async def listen(self, on_request: Callable[[str], None]) -> None: ...


class Retention(Protocol):
    """Deleting finished rows by age, a batch per call (`store/pruneverbs.py`)."""

    async def prune(
        self, *, before: float, audit_before: float | None, now: float, batch: int
    ) -> Pruned: ...


class Time(Protocol):
    """Scheduled starts, waits and signals (`store/timeverbs.py`)."""

    async def schedule_starts(
        self, starts: Sequence[tuple[NewStart, int]]
    ) -> list[tuple[StartRow, bool]]: ...

    async def upcoming(
        self, *, limit: int, after: tuple[int, int] | None
    ) -> list[ScheduledStart]: ...

    async def fire(
        self, seqs: Sequence[int], *, instance_id: str, now: float
    ) -> list[StartRow]: ...

    async def scheduled(self, *, tenant: str | None, limit: int) -> list[StartRow]: ...

    async def cancel_scheduled(self, start_id: str, *, now: float) -> StartRow | None: ...

    async def suspend(
        self,
        execution_id: str,
        *,
        instance_id: str,
        step: StepRecord | None,
        wake: NewStart,
        due_at_ms: int | None,
        waiting_for: str | None,
        now: float,
    ) -> str | None: ...

    async def take_signal(
        self, execution_id: str, name: str, step: StepRecord, *, now: float
    ) -> str | None: ...

    async def signal(
        self,
        execution_id: str,
        name: str,
        payload: str,
        *,
        principal: str | None,
        now: float,
        admit: Callable[[ExecutionRow, int], None],
    ) -> ExecutionRow | None: ...

    async def end_waiting(
        self, execution_id: str, *, status: str, error: str, now: float
    ) -> ExecutionRow | None: ...

    async def wake_of(self, execution_id: str) -> StartRow | None: ...

    async def listen(self, on_change: Callable[[], None]) -> None: ...


class Store(Protocol):
    """The execution verbs; a backend exposes them as its `executions` (and the actor verbs,
    `yoke.actors.ActorStore`, as its `actors`). `requests` and `retention` are parts over
    the same transactions."""

    @property
    def requests(self) -> Requests: ...

    @property
    def retention(self) -> Retention: ...

    @property
    def time(self) -> Time: ...

    @property
    def batch_overlap(self) -> int:
        """How many grant or finish batches are worth having in the store at once (the
        backend's dialect knows; `Transactions.batch_overlap`)."""
        ...

    # -- processes -------------------------------------------------------------------------
    async def register_instance(self, instance_id: str, *, now: float) -> None: ...

    async def heartbeat(self, instance_id: str, *, now: float) -> bool:
        """Refresh the heartbeat; False if this instance was already declared dead."""
        ...

    async def stop_instance(self, instance_id: str, *, now: float) -> None: ...

    async def recover_dead(
        self, *, stale_before: float, now: float, exclude: str, resume: Resume | None = None
    ) -> Recovery:
        """Declare dead every instance stopped or silent since `stale_before` (except `exclude`,
        the recovering instance); end their RUNNING executions (ABORTED, or CANCELLED if a
        cancel was asked) and free their ledger slots. Without `resume` their QUEUED starts
        are ABORTED; with it they become `exclude`'s, and each top-level execution the rule
        allows is resumed by a new QUEUED start of `exclude` (`Recovery.adopted`), all in the
        transaction that declared the instance dead (store/recovery.py)."""
        ...

    # -- high availability -------------------------------------------------------------------
    def set_fence(self, fence: Fence | None) -> None:
        """From now on, every write that decides for the queue commits only under `fence`'s
        term (else `NotLeader`, nothing written); None: unfenced (a server without HA)."""
        ...

    async def ha_peers(self, instance_id: str) -> int:
        """How many other servers of the HA pair are connected to the database now."""
        ...

    async def adopt_queued_starts(
        self, instance_id: str, *, requeue: bool, reason: str, now: float
    ) -> list[StartRow]:
        """A new leader's takeover (fenced): every start left QUEUED by another server becomes
        this instance's, returned in arrival order; with `requeue` false they are ABORTED
        instead (with `reason`) and none is returned."""
        ...

    # -- starts ------------------------------------------------------------------------------
    async def log_start(self, start: NewStart) -> tuple[StartRow, bool]:
        """Record a QUEUED start. With an idempotency key already used by the same principal,
        record nothing and return the first start and False."""
        ...

    async def log_starts(self, starts: Sequence[NewStart]) -> list[tuple[StartRow, bool]]:
        """`log_start` for many starts in one transaction, one answer each, in order."""
        ...

    async def get_start(self, start_id: str) -> StartRow | None: ...

    async def grant_start(
        self,
        start_id: str,
        *,
        execution: NewExecution,
        slots: Sequence[Slot],
        copy_steps: StepCopy | None,
        now: float,
    ) -> GrantResult:
        """Take every slot and create the execution, atomically, if the start is still QUEUED
        and no slot is at its cap; otherwise change nothing (FULL or GONE). NotFound if there
        is no such start."""
        ...

    async def grant_starts(
        self, requests: Sequence[GrantRequest], *, now: float
    ) -> list[GrantResult]:
        """`grant_start` for many starts in one transaction, one result per request in order.
        Requests are decided in order: one is GRANTED if, after those granted before it, every
        slot of it is below its cap, else FULL (and changes nothing); GONE if its start is no
        longer QUEUED (`start` is None if there is no such start). The ledger rows are taken
        once for the whole batch, so a hot row is locked once for many grants. A request with
        a `log` first logs its start in the same transaction (FULL then leaves it logged,
        QUEUED, and answers it as `start`); if its idempotency key is taken, it is GONE with
        the start that holds the key, and nothing is written for it."""
        ...

    async def finish_and_grant(
        self, finishes: Sequence[Finish], grants: Sequence[GrantRequest], *, now: float
    ) -> tuple[list[bool], list[GrantResult]]:
        """`finish_executions(finishes)` then `grant_starts(grants)` in one transaction (one
        commit): the slots the finishes free can be taken by the grants. Both answers, or
        nothing committed (a fence that refuses the grants refuses the finishes with them)."""
        ...

    async def decide_start(
        self,
        start_id: str,
        status: StartStatus,
        *,
        reason: str | None,
        now: float,
        forget_key: bool = False,
    ) -> StartRow | None:
        """Move a QUEUED start to REFUSED, CANCELLED or ABORTED (`forget_key`: free its
        idempotency key, so a retry after a 429 starts afresh). Returns the row as it is after
        the call (unchanged if it was no longer QUEUED); None if there is no such start."""
        ...

    async def set_start_priority(
        self, start_id: str, priority: int, *, audit: NewControl
    ) -> StartRow | None:
        """Change the priority of a QUEUED start and write `audit` to the control log, in one
        transaction (neither lands without the other); returns the row after (unchanged, and
        nothing logged, if not QUEUED); None if there is no such start."""
        ...

    # -- executions ------------------------------------------------------------------------
    async def create_child(self, execution: NewExecution) -> ExecutionRow:
        """A child execution: RUNNING on its parent's slot, no ledger change."""
        ...

    async def finish_execution(
        self,
        execution_id: str,
        status: ExecutionStatus,
        *,
        output: str | None,
        error: str | None,
        now: float,
    ) -> bool:
        """Finish a RUNNING execution and free its slots; False if it was not RUNNING."""
        ...

    async def finish_executions(self, finishes: Sequence[Finish], *, now: float) -> list[bool]:
        """`finish_execution` for many executions in one transaction, one answer each."""
        ...

    async def get_execution(self, execution_id: str) -> ExecutionRow | None: ...

    async def list_executions(
        self,
        *,
        status: ExecutionStatus | None = None,
        session: str | None = None,
        workflow: str | None = None,
        before_seq: int | None = None,
        limit: int = 100,
        tenant: str | None = None,
    ) -> list[ExecutionRow]:
        """Newest first; `before_seq` is the keyset cursor of the next page. With `tenant`, only
        the executions of its sessions (`acme`, `acme/...`), read from that tenant's rows."""
        ...

    async def record_steps(self, records: Sequence[StepRecord], *, now: float) -> None:
        """Record each step as it is now (one transaction; one statement on PostgreSQL): a
        record replaces its step's earlier record, unless that one SUCCEEDED or has another
        name (`Conflict`; the others are written)."""
        ...

    async def write_steps(self, records: Sequence[StepRecord], *, now: float) -> list[bool]:
        """Record the steps of many executions in one transaction (one commit): whether each
        was written (False: its step SUCCEEDED already with another result, or has another
        name)."""
        ...

    async def steps_of(self, execution_id: str) -> list[StepRow]: ...

    async def linked_executions(
        self, execution_id: str, *, limit: int
    ) -> tuple[list[ExecutionRow], list[ExecutionRow]]:
        """(its children, the executions restarted or resumed from it), oldest first."""
        ...

    async def steps_page(self, execution_id: str, *, after: int, limit: int) -> list[StepRow]: ...

    # -- control log -----------------------------------------------------------------------
    async def append_control(self, entry: NewControl) -> ControlRow: ...

    async def control_log(self, *, limit: int = 100, offset: int = 0) -> list[ControlRow]:
        """Oldest first."""
        ...

    async def recent_controls(
        self, *, kind: str | None = None, before_seq: int | None = None, limit: int = 100
    ) -> list[ControlRow]:
        """Newest first, of one `kind` or all; `before_seq` is the keyset cursor of the next
        page (an index on seq, and on (kind, seq), answers it without a scan)."""
        ...

    async def latest_limits(self) -> str | None:
        """The `after` of the newest `limits` entry of the control log, if any."""
        ...

    # -- idempotency answers -------------------------------------------------------------------
    async def find_answer(self, principal: str, key: str, *, now: float) -> AnswerRow | None:
        """The answer kept for (principal, key), unless it expired at or before `now`."""
        ...

    async def keep_answer(
        self, answer: AnswerRow, *, now: float, keep_at_most: int | None = None
    ) -> AnswerRow:
        """Keep `answer` unless a live answer is kept for its (principal, key); return the one
        kept, so of two racing requests both answer with the first. Its tenant keeps at most
        `keep_at_most` answers: past it, its oldest are forgotten."""
        ...

    async def forget_answers(self, *, now: float) -> int:
        """Delete the answers (and appended events' keys) expired at or before `now`; how many
        answers."""
        ...

    # -- inspection and wake-ups -------------------------------------------------------------
    async def ledger(self) -> dict[str, int]:
        """Running count per ledger key (keys with a count of zero may be left out)."""
        ...

    async def listen_slot_freed(self, on_freed: Callable[[], None]) -> None:
        """Run until cancelled, calling `on_freed` when another process frees a slot. A backend
        with no push notification returns at once; callers keep a backup poll either way."""
        ...
