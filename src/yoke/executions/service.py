"""`app.executions`: starts, admission, running executions, restarts, runtime changes, shutdown.

Life of a start: it is validated (a bad one changes nothing), logged QUEUED in the store, offered
to the kernel, and granted through the store's ledger (`grant_start`), which creates the
execution id in the same transaction that takes the slot. A start that does not fit waits in
the kernel (QUEUED) or is refused (`reject`, `max_queued`, shutdown). When a slot frees here,
or another process frees one (NOTIFY, or the backup poll), `pump` grants the kernel's next picks.
Granted executions run as tasks of the app's TaskGroup; their slot frees when they end.

State changes of the kernel happen between awaits, never across one: each `pop_next` is matched
by a grant, a `requeue` or a `release` whatever the store answers.

This module must never name a store backend, and never reads time but through its `Clock`.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import hashlib
import inspect
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from yoke.clock import Clock
from yoke.errors import (
    BadType,
    BadValue,
    Conflict,
    Forbidden,
    IdempotencyConflict,
    LimitExceeded,
    NotFound,
    NotRunning,
    ShuttingDown,
    Vetoed,
    YokeError,
)
from yoke.executions import admission
from yoke.executions.admission import Caps, DrainRate, make_kernel, slots_for
from yoke.executions.context import Context, Registry, Workflow, run_workflow
from yoke.executions.model import (
    ADMIN,
    OPERATOR,
    AuditEntry,
    Change,
    Execution,
    Limits,
    Page,
    Principal,
    Start,
    check_timeout,
    encode_json,
)
from yoke.kernel import Item
from yoke.store import (
    ExecutionRow,
    ExecutionStatus,
    GrantOutcome,
    GrantResult,
    NewExecution,
    NewStart,
    StartKind,
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
class _Local:
    """A start logged by this process, until its execution ends (or it is refused)."""

    row: StartRow
    copy: StepCopy | None
    item: Item | None = None
    decided: asyncio.Event = field(default_factory=asyncio.Event)
    answered: asyncio.Event = field(default_factory=asyncio.Event)
    error: YokeError | None = None
    task: asyncio.Task[None] | None = None
    orphaned: bool = False  # its grant outlived a cancelled caller and settles by itself
    started: bool = False
    cancel_requested: bool = False


class Executions:
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
        self._kernel = make_kernel(limits)
        self._caps = Caps(self._kernel, limits)
        self._drain = DrainRate(clock)
        self._local: dict[str, _Local] = {}
        self._runs: dict[str, _Local] = {}  # by execution id, while its task lives
        self._in_flight: set[asyncio.Future[Any]] = set()  # starts being logged and decided
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

    # -- lifecycle (called by App) -------------------------------------------------------------
    def attach(self, store: Store, *, instance_id: str, spawn: Spawn, limits: Limits) -> None:
        self._store, self._instance_id, self._spawn = store, instance_id, spawn
        self._closing = self._aborting = False
        self._kernel = make_kernel(limits)
        self._caps = Caps(self._kernel, limits)
        self._limits = limits
        self._wake = asyncio.Event()

    def detach(self) -> None:
        self._store = None
        self._spawn = None

    def wake(self) -> None:
        """A slot may have freed (here or in another process): let the dispatcher look."""
        self._wake.set()

    async def run_dispatcher(self) -> None:
        """Service: grant the kernel's picks when woken, and on the backup poll."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll):
                    await self._wake.wait()
            self._wake.clear()
            if self._closing:
                continue
            if self._kernel.queued:
                try:
                    await self._pump()
                except YokeError as exc:  # the store is down: the next poll retries
                    log.warning("granting queued starts failed: %s", exc)

    # -- starts ------------------------------------------------------------------------------
    async def start(
        self,
        workflow: str | Workflow,
        input: Any = None,
        *,
        session: str | None = None,
        priority: int = 0,
        idempotency_key: str | None = None,
        principal: Principal | None = None,
    ) -> Start:
        store = self._require()
        name = self._registry.name_of(workflow)
        if session is not None and (not isinstance(session, str) or not session):
            raise BadType("session must be a non-empty str or None")
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise BadType(f"priority must be an int, not {type(priority).__name__}")
        if idempotency_key is not None and (
            not isinstance(idempotency_key, str) or not idempotency_key
        ):
            raise BadType("idempotency_key must be a non-empty str or None")
        if principal is not None and not isinstance(principal, Principal):
            raise BadType("principal must be a yoke.Principal or None")
        payload = encode_json(input, "input")
        if session is None:
            session = principal.tenant if principal and principal.tenant else "default"
        fingerprint = hashlib.sha256(json.dumps([name, payload, session]).encode()).hexdigest()
        self._check_open()
        new = NewStart(
            start_id=str(uuid.uuid4()),
            kind=StartKind.START,
            workflow=name,
            session=session,
            priority=priority,
            input=payload,
            fingerprint=fingerprint,
            principal=principal.name if principal else None,
            idempotency_key=idempotency_key,
            source_execution_id=None,
            from_step=None,
            instance_id=self._instance_id,
            created_at=self._clock.wall(),
        )
        return await self._shielded(self._log_and_admit(store, new, None))

    async def _shielded(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` to its end even if the caller is cancelled: a start that reached us is
        logged and decided (and, if granted, runs) whether or not its caller still listens."""
        task = asyncio.ensure_future(coro)
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(_consume)
            raise

    def stats(self) -> ExecutionsStats:
        k = self._kernel
        return ExecutionsStats(
            running=k.running,
            queued=k.queued,
            executions=len(self._runs),
            in_flight=len(self._in_flight),
        )

    async def _log_and_admit(self, store: Store, new: NewStart, copy: StepCopy | None) -> Start:
        row, created = await store.log_start(new)
        if not created:
            if row.fingerprint != new.fingerprint:
                raise IdempotencyConflict(
                    f"idempotency key {new.idempotency_key!r} was used for another start"
                )
            return await self._replay(row)
        return await self._admit(row, copy=copy)

    async def _replay(self, row: StartRow) -> Start:
        """A retry with a used idempotency key gets the first start's answer."""
        local = self._local.get(row.start_id)
        if local is not None:
            await local.answered.wait()
            if local.error is not None:
                raise local.error
            return self._answer(local.row)
        fresh = await self._require().get_start(row.start_id)
        return self._answer(fresh or row)

    async def _admit(self, row: StartRow, *, copy: StepCopy | None) -> Start:
        local = _Local(row=row, copy=copy)
        self._local[row.start_id] = local
        try:
            return await self._decide(local)
        except YokeError as exc:
            local.error = exc
            raise
        finally:
            local.answered.set()

    async def _decide(self, local: _Local) -> Start:
        row, k = local.row, self._kernel
        if self._closing:  # shutdown began while the start was being logged
            await self._give_up(local, StartStatus.REFUSED, "shutting down")
            raise ShuttingDown("shutting down: no new start is admitted")
        self._caps.before_offer(row.session, row.workflow)
        item = k.offer(
            row.start_id,
            row.session,
            priority=row.priority,
            keys=(admission.workflow_key(row.workflow),),
        )
        local.item = item
        reject = self._limits.on_limit == "reject"
        if admission.is_running(item):
            try:
                outcome = await self._grant(item)
            except BaseException:
                if not local.orphaned:
                    k.release(item.id)
                    await self._give_up(local, StartStatus.REFUSED, "the store failed")
                raise
            if outcome.outcome is GrantOutcome.FULL:
                if reject:
                    k.release(item.id)
                    raise await self._refuse_limit(local)
                k.requeue(item.id)  # another process holds the slot; wait for it
        else:
            # Queued behind others; a pump may still grant it now (e.g. a free session slot).
            try:
                await self._pump()
            except YokeError as exc:  # it stays queued; the dispatcher retries
                log.warning("granting queued starts failed: %s", exc)
            if admission.is_queued(item):
                over = self._limits.max_queued is not None and k.queued > self._limits.max_queued
                if reject or over:
                    k.cancel(item.id)
                    raise await self._refuse_limit(local)
            elif not local.decided.is_set():
                await local.decided.wait()  # another task's pump is granting it
        return self._answer(local.row)

    async def _refuse_limit(self, local: _Local) -> LimitExceeded:
        retry = self._drain.retry_after(self._kernel.queued + 1, default=self._poll)
        reason = f"limit reached; retry in about {retry:.2f}s"
        await self._give_up(local, StartStatus.REFUSED, reason, forget_key=True)
        return LimitExceeded(
            f"start of {local.row.workflow!r} refused: {reason}", retry_after=retry
        )

    async def _give_up(
        self, local: _Local, status: StartStatus, reason: str, *, forget_key: bool = False
    ) -> None:
        self._local.pop(local.row.start_id, None)
        try:
            row = await self._require().decide_start(
                local.row.start_id,
                status,
                reason=reason,
                now=self._clock.wall(),
                forget_key=forget_key,
            )
            if row is not None:
                local.row = row
        except YokeError as exc:
            log.warning("could not record %s of start %s: %s", status.name, local.row.start_id, exc)
        finally:
            local.decided.set()

    async def _grant(self, item: Item) -> GrantResult:
        """Try the ledger for a kernel pick. GRANTED spawns the execution; GONE releases it
        from the kernel (cancelled or aborted elsewhere); FULL leaves it to the caller."""
        local = self._local[str(item.id)]
        row = local.row
        store = self._require()
        # Shielded: if our caller is cancelled (a client went away), the transaction may still
        # commit, and a committed grant must run, not leak its slot. The outcome is then
        # applied when the transaction ends (`_settle_orphan`); the future is never dropped.
        fut = asyncio.ensure_future(
            store.grant_start(
                row.start_id,
                execution=NewExecution(
                    execution_id=str(uuid.uuid4()),
                    start_id=row.start_id,
                    workflow=row.workflow,
                    session=row.session,
                    input=row.input,
                    parent_id=None,
                    restarted_from=row.source_execution_id
                    if row.kind is StartKind.RESTART
                    else None,
                    resumed_from=row.source_execution_id if row.kind is StartKind.RESUME else None,
                    instance_id=self._instance_id,
                    created_at=self._clock.wall(),
                ),
                slots=slots_for(self._limits, session=row.session, workflow=row.workflow),
                copy_steps=local.copy,
                now=self._clock.wall(),
            )
        )
        try:
            res = await asyncio.shield(fut)
        except asyncio.CancelledError:
            local.orphaned = True
            fut.add_done_callback(functools.partial(self._settle_orphan, item, local))
            raise
        return self._apply(item, local, res)

    def _apply(self, item: Item, local: _Local, res: GrantResult) -> GrantResult:
        if res.outcome is GrantOutcome.GRANTED:
            assert res.start is not None and res.execution is not None
            local.row = res.start
            self._launch(res.execution, local)
            local.decided.set()
        elif res.outcome is GrantOutcome.GONE:
            self._kernel.release(item.id)
            self._local.pop(local.row.start_id, None)
            if res.start is not None:
                local.row = res.start
            local.decided.set()
        return res

    def _settle_orphan(self, item: Item, local: _Local, fut: asyncio.Future[GrantResult]) -> None:
        res = None if fut.cancelled() or fut.exception() is not None else fut.result()
        if res is not None:
            self._apply(item, local, res)
        if admission.is_running(item) and (res is None or res.outcome is GrantOutcome.FULL):
            self._kernel.requeue(item.id)  # it keeps its place; the dispatcher retries
        self.wake()

    async def _pump(self) -> None:
        """Grant the kernel's picks until it has none or the ledger is full everywhere."""
        k = self._kernel
        failed: list[Item] = []
        try:
            while not self._closing:
                item = k.pop_next()
                if item is None:
                    break
                try:
                    res = await self._grant(item)
                except BaseException:
                    gone = self._local.get(str(item.id))
                    if gone is None or not gone.orphaned:
                        failed.append(item)
                    raise
                if res.outcome is GrantOutcome.FULL:
                    # Held by another process. Keep it out of this round so the picks behind
                    # it get their chance, then give it its place back; a full global key
                    # holds every pick, so stop there.
                    failed.append(item)
                    if res.full_key == admission.GLOBAL_KEY:
                        break
        finally:
            for item in failed:
                if admission.is_running(item):
                    k.requeue(item.id)

    # -- reading ----------------------------------------------------------------------------
    async def get(self, start_id: str) -> Start:
        row = await self._require().get_start(_id(start_id, "start_id"))
        if row is None:
            raise NotFound(f"no start {start_id}")
        local = self._local.get(row.start_id)
        return self._answer(local.row if local and row.status is StartStatus.QUEUED else row)

    async def wait_granted(self, start_id: str, timeout: float | None = None) -> Start:
        """Wait until the start is no longer QUEUED (or `timeout`); return it as it is then."""
        timeout = check_timeout(timeout)
        local = self._local.get(_id(start_id, "start_id"))
        if local is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await local.decided.wait()
            return await self.get(start_id)
        return await self._poll_until(
            lambda: self.get(start_id), lambda s: s.status is not StartStatus.QUEUED, timeout
        )

    async def get_execution(self, execution_id: str) -> Execution:
        row = await self._require().get_execution(_id(execution_id, "execution_id"))
        if row is None:
            raise NotFound(f"no execution {execution_id}")
        return _execution(row)

    async def wait(self, execution_id: str, timeout: float | None = None) -> Execution:
        """Wait until the execution has finished (or `timeout`); return it as it is then."""
        timeout = check_timeout(timeout)
        run = self._runs.get(_id(execution_id, "execution_id"))
        if run is not None and run.task is not None:
            await asyncio.wait([run.task], timeout=timeout)
            return await self.get_execution(execution_id)
        return await self._poll_until(
            lambda: self.get_execution(execution_id), lambda e: e.status.finished, timeout
        )

    async def list(
        self,
        *,
        status: ExecutionStatus | str | None = None,
        session: str | None = None,
        workflow: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page:
        if isinstance(status, str):
            try:
                status = ExecutionStatus(status.upper())
            except ValueError:
                raise BadValue(f"unknown execution status {status!r}") from None
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise BadValue("limit must be an int from 1 to 1000")
        before: int | None = None
        if cursor is not None:
            try:
                before = int(cursor)
            except (TypeError, ValueError):
                raise BadValue(f"bad cursor {cursor!r}") from None
        rows = await self._require().list_executions(
            status=status, session=session, workflow=workflow, before_seq=before, limit=limit + 1
        )
        more = len(rows) > limit
        rows = rows[:limit]
        return Page(
            items=tuple(_execution(r) for r in rows),
            next_cursor=str(rows[-1].seq) if more else None,
        )

    # -- cancelling --------------------------------------------------------------------------
    async def cancel_start(self, start_id: str) -> Start:
        """Cancel a QUEUED start; `Conflict` once it was decided."""
        store = self._require()
        start_id = _id(start_id, "start_id")
        before = await store.get_start(start_id)
        if before is None:
            raise NotFound(f"no start {start_id}")
        if before.status is not StartStatus.QUEUED:
            raise Conflict(f"start {start_id} is {before.status.name}, not QUEUED")
        row = await store.decide_start(
            start_id, StartStatus.CANCELLED, reason="cancelled", now=self._clock.wall()
        )
        if row is None or row.status is not StartStatus.CANCELLED:
            row = row or before
            raise Conflict(f"start {start_id} is {row.status.name}, not QUEUED")
        local = self._local.pop(start_id, None)
        if local is not None:
            self._kernel.cancel(start_id)  # False if mid-grant: that grant then finds it GONE
            local.row = row
            local.decided.set()
        return self._answer(row)

    async def cancel(self, execution_id: str) -> Execution:
        """Cancel a RUNNING execution of this process; its slot frees when it has stopped."""
        ex = await self.get_execution(execution_id)
        if ex.status.finished:
            raise Conflict(f"execution {execution_id} is already {ex.status.name}")
        run = self._runs.get(ex.execution_id)
        if run is None or run.task is None:
            raise Conflict(
                f"execution {execution_id} runs in another process or is a child; "
                "cancel it there (or cancel its parent)"
            )
        self._stop(run)
        await asyncio.wait([run.task])
        return await self.get_execution(execution_id)

    # -- restart and resume --------------------------------------------------------------------
    async def restart(
        self,
        execution_id: str,
        from_step: str | None = None,
        *,
        priority: int = 0,
        principal: Principal | None = None,
    ) -> Start:
        """A new execution of the same workflow and input, admitted like a new start. With
        `from_step`, the steps recorded before it are re-used. A running original keeps its
        slot until it ends."""
        old = await self._source(execution_id)
        copy = None
        if from_step is not None:
            if not isinstance(from_step, str):
                raise BadType("from_step must be a step name (str)")
            steps = await self._require().steps_of(old.execution_id)
            pos = next((s.position for s in steps if s.name == from_step), None)
            if pos is None:
                raise BadValue(f"execution {execution_id} recorded no step {from_step!r}")
            copy = StepCopy(from_execution_id=old.execution_id, before_position=pos)
        return await self._again(old, StartKind.RESTART, copy, from_step, priority, principal)

    async def resume(
        self, execution_id: str, *, priority: int = 0, principal: Principal | None = None
    ) -> Start:
        """Continue a FAILED, CANCELLED or ABORTED execution: a new execution, admitted like a
        new start, that re-uses every step the old one recorded."""
        old = await self._source(execution_id)
        if old.status in (ExecutionStatus.RUNNING, ExecutionStatus.SUCCEEDED):
            raise Conflict(
                f"execution {execution_id} is {old.status.name}; only a FAILED, "
                "CANCELLED or ABORTED execution can be resumed"
            )
        copy = StepCopy(from_execution_id=old.execution_id, before_position=None)
        return await self._again(old, StartKind.RESUME, copy, None, priority, principal)

    async def _source(self, execution_id: str) -> ExecutionRow:
        row = await self._require().get_execution(_id(execution_id, "execution_id"))
        if row is None:
            raise NotFound(f"no execution {execution_id}")
        if row.parent_id is not None:
            raise Conflict(f"execution {execution_id} is a child; restart its parent")
        self._registry.get(row.workflow)
        return row

    async def _again(
        self,
        old: ExecutionRow,
        kind: StartKind,
        copy: StepCopy | None,
        from_step: str | None,
        priority: int,
        principal: Principal | None,
    ) -> Start:
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise BadType("priority must be an int")
        self._check_open()
        new = NewStart(
            start_id=str(uuid.uuid4()),
            kind=kind,
            workflow=old.workflow,
            session=old.session,
            priority=priority,
            input=old.input,
            fingerprint="",
            idempotency_key=None,
            principal=principal.name if principal else None,
            source_execution_id=old.execution_id,
            from_step=from_step,
            instance_id=self._instance_id,
            created_at=self._clock.wall(),
        )
        return await self._shielded(self._log_and_admit(self._require(), new, copy))

    # -- runtime changes -------------------------------------------------------------------------
    async def limits(self) -> Limits:
        return self._limits

    async def set_limits(self, limits: Limits, *, principal: Principal) -> Limits:
        """Replace the limits (role ADMIN), after the reviewers; recorded in the control log."""
        _need(principal, ADMIN)
        if not isinstance(limits, Limits):
            raise BadType("limits must be a yoke.Limits")
        before = self._limits
        await self._review(
            Change(
                kind="limits",
                principal=principal,
                subject=None,
                before=before.to_json(),
                after=limits.to_json(),
            )
        )
        await self._audit("limits", principal, None, before.to_json(), limits.to_json())
        self.apply_limits(limits)
        return limits

    def apply_limits(self, limits: Limits) -> None:
        self._limits = limits
        self._caps.apply(limits)
        self.wake()  # a raised cap may let queued starts in

    async def set_priority(self, start_id: str, priority: int, *, principal: Principal) -> Start:
        """Change a QUEUED start's priority (role OPERATOR or ADMIN), after the reviewers."""
        _need(principal, OPERATOR, ADMIN)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise BadType("priority must be an int")
        store = self._require()
        row = await store.get_start(_id(start_id, "start_id"))
        if row is None:
            raise NotFound(f"no start {start_id}")
        if row.status is not StartStatus.QUEUED:
            raise Conflict(f"start {start_id} is {row.status.name}, not QUEUED")
        before, after = {"priority": row.priority}, {"priority": priority}
        await self._review(
            Change(
                kind="priority", principal=principal, subject=start_id, before=before, after=after
            )
        )
        new = await store.set_start_priority(start_id, priority)
        if new is None or new.status is not StartStatus.QUEUED:
            raise Conflict(f"start {start_id} was decided meanwhile")
        local = self._local.get(start_id)
        if local is not None:
            local.row = new
            self._kernel.reprioritize(start_id, priority)
        await self._audit("priority", principal, start_id, before, after)
        self.wake()
        return self._answer(new)

    async def audit(self, *, limit: int = 100, offset: int = 0) -> builtins.list[AuditEntry]:
        rows = await self._require().control_log(limit=limit, offset=offset)
        return [
            AuditEntry(
                seq=r.seq,
                kind=r.kind,
                principal=r.principal,
                tenant=r.tenant,
                roles=r.roles,
                subject=r.subject,
                at=r.at,
                before=None if r.before is None else json.loads(r.before),
                after=None if r.after is None else json.loads(r.after),
            )
            for r in rows
        ]

    async def _review(self, change: Change) -> None:
        for reviewer in self._reviewers:
            verdict = reviewer(change)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if verdict is not None:
                raise Vetoed(str(verdict))

    async def _audit(
        self, kind: str, principal: Principal, subject: str | None, before: Any, after: Any
    ) -> None:
        await self._require().append_control(
            kind=kind,
            principal=principal.name,
            tenant=principal.tenant,
            roles=sorted(principal.roles),
            subject=subject,
            before=json.dumps(before),
            after=json.dumps(after),
            now=self._clock.wall(),
        )

    # -- running -------------------------------------------------------------------------------
    def _launch(self, ex: ExecutionRow, local: _Local) -> None:
        assert self._spawn is not None
        self._runs[ex.execution_id] = local
        local.task = self._spawn(self._run(ex, local))

    def _stop(self, run: _Local) -> None:
        # A task cancelled before its first step would never run its `finally`, leaving the
        # row RUNNING and the slot taken: ask it to stop at its first step instead.
        if run.started:
            assert run.task is not None
            run.task.cancel()
        else:
            run.cancel_requested = True

    async def _run(self, ex: ExecutionRow, local: _Local) -> None:
        local.started = True
        store = self._require()
        status, output = ExecutionStatus.FAILED, None
        error: str | None = "did not finish"
        try:
            if local.cancel_requested:
                status, error = self._cancel_status(), "cancelled before it began"
                return
            recorded = await store.steps_of(ex.execution_id) if local.copy else []
            ctx = Context(
                store=store,
                registry=self._registry,
                clock=self._clock,
                instance_id=self._instance_id,
                execution_id=ex.execution_id,
                workflow=ex.workflow,
                session=ex.session,
                recorded=recorded,
            )
            ctx.cancel_status = self._cancel_status
            status, output, error = await run_workflow(
                self._registry.get(ex.workflow), ctx, ex.input
            )
        except asyncio.CancelledError:
            status, error = (
                self._cancel_status(),
                ("aborted at shutdown" if self._aborting else "cancelled"),
            )
            raise
        except Exception as exc:
            status, error = ExecutionStatus.FAILED, f"{type(exc).__name__}: {exc}"
        finally:
            await self._finish(ex, local, status, output, error)

    def _cancel_status(self) -> ExecutionStatus:
        return ExecutionStatus.ABORTED if self._aborting else ExecutionStatus.CANCELLED

    async def _finish(
        self,
        ex: ExecutionRow,
        local: _Local,
        status: ExecutionStatus,
        output: str | None,
        error: str | None,
    ) -> None:
        try:
            for attempt in range(3):
                try:
                    await self._require().finish_execution(
                        ex.execution_id, status, output=output, error=error, now=self._clock.wall()
                    )
                    break
                except YokeError as exc:
                    log.warning(
                        "recording the end of %s failed (%s), attempt %d",
                        ex.execution_id,
                        exc,
                        attempt + 1,
                    )
                    await asyncio.sleep(0.1 * 2**attempt)  # back-off before retrying
        finally:
            self._runs.pop(ex.execution_id, None)
            self._local.pop(local.row.start_id, None)
            item = self._kernel.get(local.row.start_id)
            if item is not None and admission.is_running(item):
                self._kernel.release(item.id)
            self._drain.freed()
            self.wake()

    async def shutdown(self, timeout: float) -> None:
        """Admit nothing new, refuse the queued starts, give running executions `timeout`
        seconds, then abort the rest (recorded ABORTED)."""
        if self._store is None:
            return
        self._closing = True
        for item in self._kernel.drain():
            local = self._local.get(str(item.id))
            if local is not None:
                await self._give_up(local, StartStatus.REFUSED, "shutting down")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._runs and loop.time() < deadline:
            await asyncio.wait(self._run_tasks(), timeout=deadline - loop.time())
        if self._runs:
            self._aborting = True
            for run in self._runs.values():
                self._stop(run)
            while self._runs:
                await asyncio.wait(self._run_tasks())

    def _run_tasks(self) -> builtins.list[asyncio.Task[None]]:
        return [r.task for r in self._runs.values() if r.task is not None]

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
        if not admission.is_queued(item):
            return None
        mine = (-item.priority, item.seq)
        ahead = sum(
            1
            for other in self._local.values()
            if other.item is not None
            and other.item is not item
            and admission.is_queued(other.item)
            and (-other.item.priority, other.item.seq) < mine
        )
        return ahead + 1

    async def _poll_until(
        self, fetch: Callable[[], Awaitable[T]], done: Callable[[T], bool], timeout: float | None
    ) -> T:
        # For rows owned by another process: re-read with back-off until done or the deadline.
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        delay = 0.01
        while True:
            value = await fetch()
            if done(value):
                return value
            if deadline is not None and loop.time() >= deadline:
                return value
            wait = delay if deadline is None else min(delay, max(0.0, deadline - loop.time()))
            await asyncio.sleep(wait)
            delay = min(delay * 2, 0.25)


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.info("a start whose caller went away ended with %r", task.exception())


def _need(principal: Principal, *roles: str) -> None:
    if not isinstance(principal, Principal):
        raise Forbidden(f"this change needs a principal with role {' or '.join(roles)}")
    if not principal.has_any(*roles):
        raise Forbidden(f"{principal.name} lacks role {' or '.join(roles)}")


def _id(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise BadType(f"{what} must be a non-empty str")
    return value


def _execution(r: ExecutionRow) -> Execution:
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
