"""`app.executions`: starts, admission, running executions, restarts, runtime changes, shutdown.

Life of a start: it is validated (a bad one changes nothing), logged QUEUED in the store, offered
to the kernel, and granted through the store's ledger (`grant_starts`), which creates the
execution id in the same transaction that takes the slot. A start the kernel admits at once
(`Kernel.admit`: nothing queued, every cap has room) is logged by that same transaction; any
other is logged first, so that it is durable before it waits. Logs that arrive together share
one transaction, and so do grants and finishes (`batching.GroupCommit`): one commit for many
starts, and the ledger's hot rows locked once per batch, not once per start. A start that does not
fit waits in the kernel (QUEUED) or is refused (`reject`, `max_queued`, shutdown). When a slot
frees here, or another process frees one (NOTIFY, or the backup poll), `pump` grants the
kernel's next picks, all in one batch.
Granted executions run as tasks of the app's TaskGroup; their slot frees when they end.

State changes of the kernel happen between awaits, never across one: each `pop_next` is matched
by a grant, a `requeue` or a `release` whatever the store answers.

This module must never name a store backend, and never reads time but through its `Clock`.
Reading (`reading`) and runtime changes (`control`) are mixed in from their own modules; the
shared fields are in `state`.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import hashlib
import json
import uuid
from collections.abc import Coroutine, Sequence
from typing import Any, NamedTuple

from yoke.errors import (
    BadType,
    BadValue,
    Conflict,
    IdempotencyConflict,
    LimitExceeded,
    NotFound,
    ShuttingDown,
    YokeError,
)
from yoke.executions import admission
from yoke.executions.admission import Caps, QueueOrder, make_kernel, slots_for
from yoke.executions.batching import GroupCommit
from yoke.executions.context import Context, Workflow, run_workflow
from yoke.executions.control import Control
from yoke.executions.model import (
    Execution,
    Limits,
    Principal,
    Start,
    check_priority,
    encode_json,
    storable_text,
)
from yoke.executions.readback import read_back
from yoke.executions.reading import Reading
from yoke.executions.state import (
    ExecutionsStats,
    Local,
    Reviewer,
    Spawn,
    T,
    check_id,
    log,
)
from yoke.kernel import Item
from yoke.store import (
    ExecutionRow,
    ExecutionStatus,
    Finish,
    GrantOutcome,
    GrantRequest,
    GrantResult,
    NewExecution,
    NewStart,
    StartKind,
    StartRow,
    StartStatus,
    StepCopy,
    Store,
)

__all__ = ["Executions", "ExecutionsStats", "Reviewer", "Spawn"]


class Executions(Reading, Control):
    """`app.executions`: see the module header; reading and control live in their modules."""

    # -- lifecycle (called by App) -------------------------------------------------------------
    def attach(self, store: Store, *, instance_id: str, spawn: Spawn, limits: Limits) -> None:
        self._store, self._instance_id, self._spawn = store, instance_id, spawn
        self._closing = self._aborting = False
        self._kernel = make_kernel(limits)
        self._caps = Caps(self._kernel, limits)
        self._order = QueueOrder()
        self._limits = limits
        self._logging = 0
        self._wake = asyncio.Event()
        self._logger: GroupCommit[NewStart, tuple[StartRow, bool]] = GroupCommit(self._flush_logs)
        self._granter: GroupCommit[_Pick, GrantResult] = GroupCommit(self._flush_grants)
        self._finisher: GroupCommit[Finish, bool] = GroupCommit(self._flush_finishes)
        self._cleanups: set[asyncio.Future[None]] = set()

    def detach(self) -> None:
        self._store = None
        self._spawn = None

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
                except Exception:  # a bug must not stop every grant: log it, poll on
                    log.exception("granting queued starts failed")

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
        self._require()  # NotRunning before anything else
        name = self._registry.name_of(workflow)
        if session is not None and (not isinstance(session, str) or not session):
            raise BadType("session must be a non-empty str or None")
        check_priority(priority)
        if idempotency_key is not None and (
            not isinstance(idempotency_key, str) or not idempotency_key
        ):
            raise BadType("idempotency_key must be a non-empty str or None")
        if principal is not None and not isinstance(principal, Principal):
            raise BadType("principal must be a yoke.Principal or None")
        for text, what in ((session, "session"), (idempotency_key, "idempotency_key")):
            if text is not None:
                storable_text(text, what)
        if principal is not None:
            storable_text(principal.name, "principal name")
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
        return await self._shielded(self._log_and_admit(new, None))

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

    async def _log_and_admit(self, new: NewStart, copy: StepCopy | None) -> Start:
        item = self._admit_at_once(new)
        if item is not None:
            return await self._log_and_grant(new, copy, item)
        # While it is being logged no start may be admitted at once: it would overtake this
        # one, which reaches the kernel only once logged.
        self._logging += 1
        try:
            row, created = await asyncio.shield(self._logger.submit(new))
        finally:
            self._logging -= 1  # `_admit` offers it before any other task runs
        if not created:
            if row.fingerprint != new.fingerprint:
                raise IdempotencyConflict(
                    f"idempotency key {new.idempotency_key!r} was used for another start"
                )
            return await self._replay(row)
        return await self._admit(row, copy=copy)

    def _admit_at_once(self, new: NewStart) -> Item | None:
        """The kernel's yes to a start that fits now, before it is logged (nothing is queued
        or being logged, and every cap has room); None: log it first, then offer it."""
        if self._closing or self._logging:
            return None
        self._caps.before_offer(new.session, new.workflow)
        return self._kernel.admit(
            new.start_id,
            new.session,
            priority=new.priority,
            keys=(admission.workflow_key(new.workflow),),
        )

    async def _log_and_grant(self, new: NewStart, copy: StepCopy | None, item: Item) -> Start:
        """A start the kernel admitted at once: its log and its grant are one transaction
        (one batch, half the waiting of a log batch then a grant batch)."""
        local = Local(row=new.logged(seq=_UNLOGGED), copy=copy, item=item)
        self._local[new.start_id] = local
        self._order.sync(item)
        try:
            await self._settle(local, item, log=new)
        except YokeError as exc:
            local.error = exc
            raise
        finally:
            local.answered.set()
        row = local.row
        if row.start_id == new.start_id:
            return self._answer(row)
        # Its idempotency key was taken (GONE, with the start that holds the key).
        if row.fingerprint != new.fingerprint:
            raise IdempotencyConflict(
                f"idempotency key {new.idempotency_key!r} was used for another start"
            )
        return await self._replay(row)

    async def _flush_logs(self, starts: Sequence[NewStart]) -> list[tuple[StartRow, bool]]:
        return await self._require().log_starts(starts)

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
        local = Local(row=row, copy=copy)
        self._local[row.start_id] = local
        try:
            return await self._decide(local)
        except YokeError as exc:
            local.error = exc
            raise
        finally:
            local.answered.set()

    async def _decide(self, local: Local) -> Start:
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
        self._order.sync(item)
        local.item = item
        reject = self._limits.on_limit == "reject"
        if admission.is_running(item):
            await self._settle(local, item, log=None)
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
                    self._order.sync(item)
                    raise await self._refuse_limit(local)
            elif not local.decided.is_set() and local.tried is not None:
                await local.tried.wait()  # another task's pump is trying it: its answer
        return self._answer(local.row)

    async def _settle(self, local: Local, item: Item, *, log: NewStart | None) -> None:
        """Grant a start the kernel runs at once (logging it too, if `log`). GRANTED and GONE
        are applied by the batch; FULL (another process holds the slot) queues or refuses."""
        k = self._kernel
        try:
            outcome = await self._grant(item, log=log)
        except BaseException:
            if not local.orphaned:
                k.release(item.id)
                await self._give_up(local, StartStatus.REFUSED, "the store failed")
            raise
        if outcome.outcome is GrantOutcome.FULL:
            reject = self._limits.on_limit == "reject"
            if reject or self._closing:
                k.release(item.id)
                self._order.sync(item)
                if reject:
                    raise await self._refuse_limit(local)
                await self._give_up(local, StartStatus.REFUSED, "shutting down")
                raise ShuttingDown("shutting down: no new start is admitted")
            self._back_in_line(item, local)

    async def _refuse_limit(self, local: Local) -> LimitExceeded:
        retry = self._drain.retry_after(self._kernel.queued + 1, default=self._poll)
        reason = f"limit reached; retry in about {retry:.2f}s"
        await self._give_up(local, StartStatus.REFUSED, reason, forget_key=True)
        return LimitExceeded(
            f"start of {local.row.workflow!r} refused: {reason}", retry_after=retry
        )

    async def _give_up(
        self, local: Local, status: StartStatus, reason: str, *, forget_key: bool = False
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

    async def _grant(self, item: Item, *, log: NewStart | None = None) -> GrantResult:
        """Try the ledger for a kernel pick, in the next batch of grants. The batch applies
        GRANTED (the execution spawns) and GONE (released from the kernel); FULL is left to
        the caller, or put back in line by the batch if the caller went away meanwhile."""
        local = self._local[str(item.id)]
        pick = self._pick(item, local, from_pump=False, log=log)
        fut = self._granter.submit(pick)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            if fut.done():  # applied already; only a FULL or failed pick is still ours
                res = None if fut.cancelled() or fut.exception() is not None else fut.result()
                if res is None or res.outcome is GrantOutcome.FULL:
                    self._back_in_line(item, local)
            else:
                local.orphaned = True  # the batch puts it back in line if it must
            raise

    def _pick(
        self, item: Item, local: Local, *, from_pump: bool, log: NewStart | None = None
    ) -> _Pick:
        local.tried = asyncio.Event()
        row = local.row
        request = GrantRequest(
            start_id=row.start_id,
            execution=NewExecution(
                execution_id=str(uuid.uuid4()),
                start_id=row.start_id,
                workflow=row.workflow,
                session=row.session,
                input=row.input,
                parent_id=None,
                restarted_from=row.source_execution_id if row.kind is StartKind.RESTART else None,
                resumed_from=row.source_execution_id if row.kind is StartKind.RESUME else None,
                instance_id=self._instance_id,
                created_at=self._clock.wall(),
            ),
            slots=tuple(slots_for(self._limits, session=row.session, workflow=row.workflow)),
            copy_steps=local.copy,
            log=log,
        )
        return _Pick(item, local, request, from_pump)

    async def _flush_grants(self, picks: Sequence[_Pick]) -> list[GrantResult]:
        """One batch of grants. Everything a pick of the dispatcher's pump (or of a caller that
        went away) needs is done here, inside the batch, so `idle()` covers it at shutdown."""
        requests = [p.request for p in picks]
        store = self._require()
        try:
            results = await store.grant_starts(requests, now=self._clock.wall())
        except BaseException as exc:
            # A lost answer is not always a lost commit: what did commit is applied.
            found = (
                await read_back(store, requests, stopping=lambda: self._closing)
                if isinstance(exc, YokeError)
                else None
            )
            if found is None:
                for p in picks:
                    if p.from_pump or p.local.orphaned:
                        self._back_in_line(p.item, p.local)
                    _tried(p)
                raise
            log.warning("a grant batch's answer was lost after it committed: %s", exc)
            results = found
        for p, res in zip(picks, results, strict=True):
            self._apply(p.item, p.local, res)
            if res.outcome is GrantOutcome.FULL and (p.from_pump or p.local.orphaned):
                self._back_in_line(p.item, p.local)
            _tried(p)
        return results

    def _apply(self, item: Item, local: Local, res: GrantResult) -> None:
        if res.outcome is GrantOutcome.GRANTED:
            assert res.start is not None and res.execution is not None
            local.row = res.start
            self._launch(res.execution, local)
            local.decided.set()
            if self._grant_listeners:
                granted = self._answer(res.start)
                for listener in self._grant_listeners:
                    try:
                        listener(granted)
                    except Exception:  # a listener's bug must not undo a committed grant
                        log.exception("a grant listener failed")
        elif res.outcome is GrantOutcome.GONE:
            self._kernel.release(item.id)
            self._local.pop(local.row.start_id, None)
            if res.start is not None:
                local.row = res.start
            local.decided.set()
        elif res.start is not None and local.row.seq == _UNLOGGED:
            local.row = res.start  # FULL: logged by this batch, QUEUED (unless changed since)

    def _back_in_line(self, item: Item, local: Local) -> None:
        """A pick the ledger answered FULL (another process holds the slot) or could not
        answer gets its place back in the kernel, unless it was cancelled meanwhile (it just
        leaves) or shutdown began (it leaves and is refused, like every queued start)."""
        if not admission.is_running(item):
            return
        if self._local.get(local.row.start_id) is not local:
            self._kernel.release(item.id)
        elif self._closing:
            self._kernel.release(item.id)
            self._cleanup(self._give_up(local, StartStatus.REFUSED, "shutting down"))
        else:
            self._kernel.requeue(item.id)
            if item.priority != local.row.priority:  # changed while it was being granted
                self._kernel.reprioritize(item.id, local.row.priority)
        self._order.sync(item)

    def _cleanup(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run `coro` (a store write that must land before the store closes) as a task that
        shutdown waits for."""
        task = asyncio.ensure_future(coro)
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    async def _pump(self) -> None:
        """Grant the kernel's picks, all in one batch, until it has none left to give."""
        k = self._kernel
        picks: list[_Pick] = []
        while not self._closing:
            item = k.pop_next()
            if item is None:
                break
            self._order.sync(item)
            local = self._local.get(str(item.id))
            if local is None:  # nobody waits for it any more: it must not hold a slot
                log.warning("start %s was in the queue without its caller; dropped", item.id)
                k.release(item.id)
                continue
            picks.append(self._pick(item, local, from_pump=True))
        if not picks:
            return
        # The batch puts FULL and failed picks back in line itself (`_flush_grants`).
        futs = [self._granter.submit(p) for p in picks]
        results = await asyncio.shield(asyncio.gather(*futs, return_exceptions=True))
        for res in results:
            if isinstance(res, BaseException):
                raise res

    # -- cancelling --------------------------------------------------------------------------
    async def cancel_start(self, start_id: str) -> Start:
        """Cancel a QUEUED start; `Conflict` once it was decided."""
        store = self._require()
        start_id = check_id(start_id, "start_id")
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
            if local.item is not None:
                self._order.sync(local.item)
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
        row = await self._require().get_execution(check_id(execution_id, "execution_id"))
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
        check_priority(priority)
        if principal is not None:
            storable_text(principal.name, "principal name")
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
        return await self._shielded(self._log_and_admit(new, copy))

    # -- running -------------------------------------------------------------------------------
    async def stop_recovered(self) -> int:
        """This instance was declared dead and a peer recovered it: the executions the peer
        recorded ABORTED (it freed their slots, which may be granted again already) must not go
        on running here. Executions granted here since then stay. Queued starts the peer
        aborted are found GONE when picked. Returns how many runs were stopped."""
        store = self._require()
        stopped = 0
        for execution_id, run in list(self._runs.items()):
            row = await store.get_execution(execution_id)
            if row is None or row.status.finished:
                log.warning("stopping %s: a peer recorded it %s", execution_id, row and row.status)
                self._stop(run)
                stopped += 1
        return stopped

    def _launch(self, ex: ExecutionRow, local: Local) -> None:
        assert self._spawn is not None
        run = self._run(ex, local)
        try:
            task = self._spawn(run)
        except RuntimeError as exc:  # the app's TaskGroup is stopping (a service failed)
            run.close()
            log.error("execution %s could not start: %s", ex.execution_id, exc)
            status, error = ExecutionStatus.ABORTED, f"could not start: {exc}"
            self._cleanup(self._finish(ex, local, status, None, error))
            return
        self._runs[ex.execution_id] = local
        local.task = task

    def _stop(self, run: Local) -> None:
        # A task cancelled before its first step would never run its `finally`, leaving the
        # row RUNNING and the slot taken: ask it to stop at its first step instead.
        if run.finishing:
            return
        if run.started:
            assert run.task is not None
            run.task.cancel()
        else:
            run.cancel_requested = True

    async def _run(self, ex: ExecutionRow, local: Local) -> None:
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

    async def _flush_finishes(self, finishes: Sequence[Finish]) -> list[bool]:
        return await self._require().finish_executions(finishes, now=self._clock.wall())

    def _cancel_status(self) -> ExecutionStatus:
        return ExecutionStatus.ABORTED if self._aborting else ExecutionStatus.CANCELLED

    async def _finish(
        self,
        ex: ExecutionRow,
        local: Local,
        status: ExecutionStatus,
        output: str | None,
        error: str | None,
    ) -> None:
        local.finishing = True
        finish = Finish(execution_id=ex.execution_id, status=status, output=output, error=error)
        try:
            attempt = 0
            while True:
                try:
                    await _to_the_end(self._finisher.submit(finish))
                    break
                except YokeError as exc:
                    attempt += 1
                    # Until the store takes it, the slot stays taken, here and in the ledger.
                    # Stopping, give up after a few tries: once this instance has stopped, a
                    # peer's recovery records the execution ABORTED and frees its slot.
                    if self._closing and attempt >= 3:
                        log.error("the end of %s was not recorded: %s", ex.execution_id, exc)
                        break
                    log.warning(
                        "recording the end of %s failed (%s), attempt %d",
                        ex.execution_id,
                        exc,
                        attempt,
                    )
                    await asyncio.sleep(min(0.1 * 2**attempt, 5.0))  # back-off, then again
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
            self._order.sync(item)
            local = self._local.get(str(item.id))
            if local is not None:
                await self._give_up(local, StartStatus.REFUSED, "shutting down")
        await self._granter.idle()  # a grant in the store now still launches its execution
        while self._cleanups:  # refusals and aborts decided by that last batch
            await asyncio.wait(set(self._cleanups))
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


_UNLOGGED = 0  # the `seq` of a row not logged yet; the stores number rows from 1


class _Pick(NamedTuple):
    """A kernel pick on its way to the ledger."""

    item: Item
    local: Local
    request: GrantRequest
    from_pump: bool  # the dispatcher's: nobody waits to put it back in line


async def _to_the_end(fut: asyncio.Future[T]) -> T:
    """Await `fut` even through a cancel (re-raised once it is done): what it records must be
    recorded before the caller lets go of its state."""
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        await asyncio.wait([fut])
        raise


def _tried(pick: _Pick) -> None:
    if pick.local.tried is not None:
        pick.local.tried.set()


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.info("a start whose caller went away ended with %r", task.exception())
