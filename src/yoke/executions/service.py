"""`app.executions`: the async shell of the admission core, and the facade of its parts.

Life of a start: it is validated (a bad one changes nothing) and handed to the admission core
(`core.AdmissionCore`), which decides, synchronously, what must happen: log it (`tickets.Log`),
grant it through the store's ledger (`Grant`: the execution id is created in the transaction
that takes the slot), run what was granted (`Launch`), record a refusal (`Refuse`), answer
(`Answer`). This shell performs those actions and feeds their results back to the core; it
decides nothing itself. Logs and grants that arrive together share one transaction
(`batching.Batcher`: one commit for many starts, the ledger's hot rows locked once per batch),
and so do finishes and steps' records (`batching.GroupCommit`). The batches hand their results
to the core themselves, so a start that reached the core is decided (and, if granted, runs)
whether or not its caller still listens: a caller only waits for its ticket's answer. When an
execution here ends, its slot goes to the kernel's next picks at once and their grants ride in
its finish batch (`_riders`: one transaction writes the ends, then the grants that take their
slots; docs/decisions.md D24); when another process frees one (NOTIFY, or the backup poll), the
dispatcher sends the picks. Granted executions run as tasks of the app's TaskGroup; in the
ledger a slot frees when its execution's end is recorded.

Reading (`reading.Reading`) and runtime changes (`control.Control`) are parts held by reference
over the same `state.Shared`; their public verbs are this facade's too.

This module must never name a store backend, and never reads time but through its `Clock`.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import contextvars
import functools
import json
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import replace
from typing import Any

from yoke.clock import Clock
from yoke.errors import (
    TRANSIENT,
    BadType,
    BadValue,
    Conflict,
    IdempotencyConflict,
    NotFound,
    NotLeader,
    RateLimited,
    YokeError,
)
from yoke.executions import traces
from yoke.executions.batching import Batcher, GroupCommit, InLine
from yoke.executions.context import Context, Suspended, run_bounded, stopped_failure
from yoke.executions.control import Control
from yoke.executions.core import Role
from yoke.executions.failures import failure_of, log_failed
from yoke.executions.fingerprints import fingerprint
from yoke.executions.model import (
    AuditEntry,
    Execution,
    Failure,
    Limits,
    Page,
    Principal,
    Start,
    check_priority,
    due_time,
    encode_json,
    storable_text,
)
from yoke.executions.readback import read_back
from yoke.executions.reading import Reading
from yoke.executions.rescue import Rescue
from yoke.executions.signals import send_signal
from yoke.executions.state import (
    ExecutionsStats,
    Reviewer,
    Shared,
    Spawn,
    check_id,
    log,
)
from yoke.executions.tenant_book import Rates, TenantBook
from yoke.executions.tenant_settings import default_session, start_tenant
from yoke.executions.tickets import (
    Action,
    Answer,
    Cause,
    Grant,
    Launch,
    Log,
    Phase,
    Refuse,
    Ticket,
)
from yoke.executions.timers import FIRE_AHEAD, ExecutionTimers
from yoke.executions.workflows import Registry, Workflow
from yoke.kernel import GroupedKernel
from yoke.retry import RetryPolicy, no_answer, until_done, within
from yoke.store import (
    ExecutionRow,
    ExecutionStatus,
    Finish,
    GrantResult,
    NewStart,
    Recovery,
    StartKind,
    StartRow,
    StartStatus,
    StepCopy,
    StepRecord,
    Store,
)
from yoke.store.timeverbs import ScheduledStart
from yoke.timers import TimerDispatch
from yoke.tracing import NO_TRACING, Tracing

__all__ = ["Executions", "ExecutionsStats", "Reviewer", "Spawn"]

# Grants that rode with a finish batch, and their results or the batch's error.
_RidersDone = tuple[Sequence[Grant], Sequence[GrantResult] | None, BaseException | None]
DID_NOT_FINISH = Failure(type="Aborted", message="did not finish")  # replaced once it ends


class Executions:
    """`app.executions`: see the module header."""

    def __init__(
        self,
        *,
        registry: Registry,
        clock: Clock,
        limits: Limits,
        reviewers: list[Reviewer],
        slot_poll_interval: float = 1.0,
        retry: RetryPolicy | None = None,
        batch_overlap: int | None = None,
        recovery_max: int | None = None,
        request_poll: float = 0.5,
        store_timeout: float | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self._tracing = tracing or NO_TRACING
        self._s = s = Shared(
            registry=registry,
            clock=clock,
            limits=limits,
            reviewers=reviewers,
            slot_poll_interval=slot_poll_interval,
            retry=retry,
        )
        self.reading = Reading(s, self._wait_decided)
        self.control = Control(s)
        # Cancel from any server, requests to this process's runs, recovery of dead ones.
        self.rescue = Rescue(
            s, self.reading, max_recoveries=recovery_max, request_poll=request_poll
        )
        # How long a start, restart or resume waits for a store that answers nothing before
        # it is answered 503; when a log or grant batch last got an answer (monotonic).
        self._store_timeout = store_timeout
        self._in_store = 0  # log and grant batches sent and not answered yet
        self._silent_since: float | None = None  # monotonic: since the store last answered one
        self._waiting: set[Ticket] = set()  # starts waiting for their first answer
        self._watch: asyncio.TimerHandle | None = None  # `_watch_store`, while any waits
        self._spawn: Spawn | None = None
        self._app_context = contextvars.Context()
        self._rates: Rates | None = None
        self._aborting = False
        self._grant_listeners: list[Callable[[Start], None]] = []
        self._refusal_listeners: list[Callable[[str, Cause], None]] = []
        self._cleanups: set[asyncio.Future[None]] = set()
        # Logs go one batch at a time, so the store numbers queued starts in arrival order;
        # grants and finishes may overlap (`batching`: the next batch goes while one commits),
        # as many as `batch_overlap` or, unset, as the store finds worth it (`attach`).
        self._batch_overlap = batch_overlap
        self._logger: Batcher[Log, builtins.list[tuple[StartRow, bool]]] = Batcher(
            self._send_logs, self._logs_done
        )
        self._granter: Batcher[Grant, builtins.list[GrantResult]] = Batcher(
            self._send_grants, self._grants_done
        )
        self._finisher: GroupCommit[Finish, tuple[bool, float]] = GroupCommit(self._flush_finishes)
        # The grants of the slots that ending executions hand over (`AdmissionCore.finishing`):
        # they go in the next finish batch, whose transaction frees those slots first, so a
        # slot changes hands in one commit.
        self._riders: dict[str, builtins.list[Grant]] = {}  # by the end they ride with
        # Their outcomes reach the core in the order their batches formed, as a grant batch's.
        self._riders_line: InLine[_RidersDone] = InLine(lambda done: self._grants_done(*done))
        # Steps too: the records of every execution that recorded one in the same turn share
        # one commit, and each step goes on only once it is committed.
        self._stepper: GroupCommit[StepRecord, bool] = GroupCommit(self._flush_steps)
        # Delayed starts share their transactions as finishes do.
        self._scheduler: GroupCommit[tuple[NewStart, int], tuple[StartRow, bool]] = GroupCommit(
            lambda batch: self._s.require().time.schedule_starts(batch)
        )
        # Delayed starts and wake-ups: the one timer loop over this process's scheduled starts
        # (a new one for each run of the app: its events belong to that run's loop).
        self.timers: TimerDispatch[ScheduledStart] = self._timer_loop()

    def __repr__(self) -> str:
        s = self._s
        k = s.core.kernel
        state = "closing" if s.core.closing else ("running" if s.store else "stopped")
        return (
            f"Executions({state}, running={k.running}, queued={k.queued}, "
            f"executions={len(s.runs)}, limits={s.core.limits})"
        )

    # -- what others read ------------------------------------------------------------------------
    @property
    def closing(self) -> bool:
        """True once shutdown began: nothing new is admitted."""
        return self._s.core.closing

    @property
    def kernel(self) -> GroupedKernel:
        """This process's queue of starts and what it runs, for introspection (`why`, the
        scheduler view). Read it; never change it: the admission core keeps it in step with
        the store."""
        return self._s.core.kernel

    @property
    def batch_overlap(self) -> int:
        """How many grant (and finish) batches may be in the store at once."""
        return self._granter.overlap

    @property
    def tenants(self) -> TenantBook:
        """The tenants' settings as this process knows them (kept fresh by the app)."""
        return self._s.tenants

    def apply_tenant_settings(self) -> None:
        """The tenants' settings changed: caps, queue bounds and rates apply from now on (a
        raised cap may let queued starts go: the dispatcher looks)."""
        self._s.core.apply_tenant_settings()
        self._s.wake()

    @property
    def current_limits(self) -> Limits:
        """The limits in force in this process now (`limits()` reads the audited ones)."""
        return self._s.core.limits

    def add_grant_listener(self, listener: Callable[[Start], None]) -> Callable[[], None]:
        """Call `listener(start)` whenever this process grants a start (in the batch that
        granted it; it must be quick and must not raise). Returns the function that removes
        it. The server times each start's wait this way, without a task per queued start."""
        self._grant_listeners.append(listener)
        return lambda: self._grant_listeners.remove(listener)

    def add_refusal_listener(self, listener: Callable[[str, Cause], None]) -> Callable[[], None]:
        """Call `listener(tenant, cause)` whenever this process refuses a start (a rate, a
        queue bound, a limit, shutdown; quick, must not raise). Returns its remover."""
        self._refusal_listeners.append(listener)
        return lambda: self._refusal_listeners.remove(listener)

    def _refused(self, tenant: str, cause: Cause) -> None:
        for listener in self._refusal_listeners:
            listener(tenant, cause)

    def wake(self) -> None:
        """A slot may have freed (here or in another process): let the dispatcher look."""
        self._s.wake()

    def stats(self) -> ExecutionsStats:
        core = self._s.core
        busy = (Phase.LOGGING, Phase.GRANTING)
        return ExecutionsStats(
            running=core.kernel.running,
            queued=core.kernel.queued,
            executions=len(self._s.runs),
            in_flight=sum(t.phase in busy for t in core.tickets.values()) + len(self._cleanups),
        )

    # -- the parts' verbs ------------------------------------------------------------------------
    async def get(self, start_id: str) -> Start:
        return await self.reading.get(start_id)

    async def wait_granted(self, start_id: str, timeout: float | None = None) -> Start:
        """Wait until the start is no longer QUEUED (or `timeout`); return it as it is then."""
        return await self.reading.wait_granted(start_id, timeout)

    async def get_execution(self, execution_id: str) -> Execution:
        return await self.reading.get_execution(execution_id)

    async def wait(self, execution_id: str, timeout: float | None = None) -> Execution:
        """Wait until the execution has finished (or `timeout`); return it as it is then."""
        return await self.reading.wait(execution_id, timeout)

    async def list(
        self,
        *,
        status: ExecutionStatus | str | None = None,
        session: str | None = None,
        workflow: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        tenant: str | None = None,
    ) -> Page:
        """Newest first. `tenant`: only its sessions' (`acme` and `acme/...`)."""
        return await self.reading.list(
            status=status,
            session=session,
            workflow=workflow,
            limit=limit,
            cursor=cursor,
            tenant=tenant,
        )

    async def limits(self) -> Limits:
        return await self.control.limits()

    async def set_limits(self, limits: Limits, *, principal: Principal) -> Limits:
        """Replace the limits (role ADMIN), after the reviewers; recorded in the control log."""
        return await self.control.set_limits(limits, principal=principal)

    def apply_limits(self, limits: Limits) -> None:
        self.control.apply_limits(limits)

    async def set_priority(self, start_id: str, priority: int, *, principal: Principal) -> Start:
        """Change a QUEUED start's priority (role OPERATOR or ADMIN), after the reviewers."""
        return await self.control.set_priority(start_id, priority, principal=principal)

    async def audit(self, *, limit: int = 100, offset: int = 0) -> builtins.list[AuditEntry]:
        return await self.control.audit(limit=limit, offset=offset)

    # -- lifecycle (called by App) -------------------------------------------------------------
    def attach(
        self,
        store: Store,
        *,
        instance_id: str,
        spawn: Spawn,
        limits: Limits,
        rates: Rates | None = None,
    ) -> None:
        s = self._s
        s.store, s.instance_id, self._spawn = store, instance_id, spawn
        # Runs without a caller here (recovered, adopted, woken) start from the app's context.
        self._app_context = contextvars.copy_context()
        self._rates = rates  # the tenants' token buckets (`executions.rate`)
        overlap = self._batch_overlap or store.batch_overlap
        self._granter.overlap = self._finisher.overlap = self._stepper.overlap = overlap
        s.core = s.new_core(limits)
        self._in_store, self._silent_since = 0, None
        s.runs = {}
        s.wake_event = asyncio.Event()
        self._aborting = False
        self.timers = self._timer_loop()

    def _timer_loop(self) -> TimerDispatch[ScheduledStart]:
        return TimerDispatch(
            source=ExecutionTimers(self._s, self._admit_fired),
            clock=self._s.clock,
            on_fired=lambda: None,
            ahead=FIRE_AHEAD,
        )

    def detach(self) -> None:
        self._s.store = None
        self._spawn = None

    async def run_dispatcher(self) -> None:
        """Service: send the kernel's picks to the ledger when woken, and on the backup poll."""
        s = self._s
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(s.poll):
                    await s.wake_event.wait()
            s.wake_event.clear()
            self._dispatch()

    def _dispatch(self) -> None:
        """Send the kernel's picks to the ledger now."""
        s = self._s
        if s.core.kernel.queued:
            self._perform(s.core.next_grants(now=s.clock.wall()))

    # -- high availability (called by `leadership.Leadership`) ----------------------------------
    @property
    def role(self) -> Role:
        return self._s.core.role

    def step_down(self, leader: str | None = None) -> None:
        """Admit nothing from now on (a standby): queued starts leave this queue unwritten, for
        the leader to adopt; running executions go on to their end."""
        self._perform(self._s.core.step_down(leader))

    def not_leader(self) -> NotLeader:
        return self._s.core.not_leader()

    def know_leader(self, leader: str | None) -> None:
        """A standby's refusals name the leader it knows of."""
        if self._s.core.role is Role.STANDBY:
            self._s.core.leader = leader

    async def copies_of(self, rows: Sequence[StartRow]) -> builtins.list[StepCopy | None]:
        """The steps each queued restart or resume re-uses, as its first server found them."""
        store = self._s.require()
        out: builtins.list[StepCopy | None] = []
        for row in rows:
            copy = None
            src = row.source_execution_id
            if src is not None and row.kind is StartKind.RESUME:
                copy = StepCopy(from_execution_id=src, before_position=None)
            elif src is not None and row.kind is StartKind.RESTART and row.from_step is not None:
                steps = await store.steps_of(src)
                pos = next((st.position for st in steps if st.name == row.from_step), None)
                if pos is not None:
                    copy = StepCopy(from_execution_id=src, before_position=pos)
            out.append(copy)
        return out

    def lead(self, adopted: Sequence[tuple[StartRow, StepCopy | None]]) -> None:
        """This process holds the lease: it admits from now on, starting with `adopted` (the
        queued starts of a former leader, already moved to this instance in the store), which
        go first, in their order."""
        core = self._s.core
        core.lead()
        self._perform(core.adopt(adopted, now=self._s.clock.wall()))

    def _admit_fired(self, rows: Sequence[StartRow]) -> None:
        """Starts a timer fired here (QUEUED on this process in the store) join the queue, in
        the order they were due: the firing is their arrival."""
        self._perform(self._s.core.adopt([(r, None) for r in rows], now=self._s.clock.wall()))

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
        tenant: str | None = None,
        at: float | None = None,
        delay: float | None = None,
    ) -> Start:
        """Ask for a slot for `workflow`. The start's tenant is the principal's; for a trusted
        caller (no principal, or an OPERATOR or ADMIN without a tenant) `tenant`, else the
        session's first segment before `/`. With `at` (epoch seconds) or `delay` (seconds) it
        is SCHEDULED until then, and admitted at its time like any start."""
        s = self._s
        s.require()  # NotRunning before anything else
        name = s.registry.name_of(workflow)
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
        due = due_time(at, delay, now=s.clock.wall())
        if session is None:
            session = default_session(principal)
        owner = start_tenant(principal, session, tenant)
        # What a retry with the same key must match; without a key nothing is ever compared.
        request = (
            ""
            if idempotency_key is None
            else fingerprint(name, json.loads(payload), session, priority)
        )
        await self._spend(owner)
        new = NewStart(
            start_id=s.ids(),
            kind=StartKind.START,
            workflow=name,
            session=session,
            tenant=owner,
            priority=priority,
            input=payload,
            fingerprint=request,
            principal=principal.name if principal else None,
            idempotency_key=idempotency_key,
            source_execution_id=None,
            from_step=None,
            instance_id=s.instance_id,
            created_at=s.clock.wall(),
        )
        if due is not None:
            return await self._schedule(new, due)
        return await self._arrive(new, None)

    async def _schedule(self, new: NewStart, due: float) -> Start:
        """Log a delayed start SCHEDULED: the timer loop admits it at `due`."""
        s = self._s
        s.require_leader()
        s.require()
        write = _to_the_end(self._scheduler.submit((new, int(due * 1000))), self._scheduler)
        row, created = await within(self._store_timeout, "record the start", write)
        if not created and row.fingerprint != new.fingerprint:
            raise IdempotencyConflict(
                f"idempotency key {new.idempotency_key!r} was used for another start"
            )
        self.timers.wake()  # it may be due before every timer held here
        return s.answer(row)

    async def _spend(self, tenant: str) -> None:
        """A token of the tenant's starts (`executions.rate`), before anything is written, or
        `RateLimited` (429, with when a token will be there)."""
        core = self._s.core
        if self._rates is None or core.closing or core.role is Role.STANDBY:
            return  # no buckets; or the core refuses it, spending nothing
        try:
            await self._rates.take(tenant, "starts", self._s.tenants.executions(tenant).bucket)
        except RateLimited:
            self._refused(tenant, Cause.RATE)
            raise

    async def _arrive(self, new: NewStart, copy: StepCopy | None) -> Start:
        """Hand a start to the core and wait for its answer. Once here it is decided even if
        this caller is cancelled: the batches, not the caller, carry it on. A caller waits
        for the store at most `store_timeout` (then `StoreUnavailable`: its start may still
        be recorded, and a retry with the same idempotency key finds it)."""
        t, action = self._s.core.arrive(new, copy, now=self._s.clock.wall())
        # The run is a task made by whichever batch grants it; it runs in its own caller's
        # context (a copy), never in the context of the request that formed that batch.
        t.context = contextvars.copy_context()
        t.trace = traces.begin(self._tracing, new)
        self._perform((action,))
        if not t.answered:
            await self._wait_for_store(t)
        if t.error is not None:
            raise t.error
        row = t.row
        if row.start_id == new.start_id:
            return self._s.answer(row)
        # Its idempotency key was taken: by this very request's first try, or another.
        if row.fingerprint != new.fingerprint:
            raise IdempotencyConflict(
                f"idempotency key {new.idempotency_key!r} was used for another start"
            )
        return await self._replay(row)

    async def _wait_for_store(self, t: Ticket) -> None:
        """Wait for `t`'s first answer while the store answers: once a batch of logs or grants
        has been in the store for `store_timeout` with no batch answered (the store does not
        answer: an outage, a silent network), give up with `StoreUnavailable`. A long line of
        starts, answered batch after batch, or a process too busy to send its next batch, is
        waited out: only the store's silence counts. Every start takes this path, so it costs
        a set entry: one timer of the loop watches all the waiting starts (`_watch_store`)."""
        limit = self._store_timeout
        if limit is None:
            await self._wait(t, decided=False, timeout=None)
            return
        self._waiting.add(t)
        if self._watch is None:
            self._watch = asyncio.get_running_loop().call_later(limit, self._watch_store)
        try:
            await self._wait(t, decided=False, timeout=None)
        finally:
            self._waiting.discard(t)

    def _watch_store(self) -> None:
        """While starts wait for their first answer: once the store has been silent for
        `store_timeout`, each of them is answered `StoreUnavailable`; else look again when it
        could be."""
        self._watch = None
        limit = self._store_timeout
        if limit is None or not self._waiting:
            return
        now = self._s.clock.monotonic()
        since = self._silent_since
        if since is not None and now - since >= limit:
            error = no_answer(limit, "record the start")
            for t in self._waiting:
                for decided, fut in t.waiters or ():
                    if not decided and not fut.done():  # its caller's wait for a first answer
                        fut.set_exception(error)
            self._waiting.clear()
            return
        later = limit if since is None else since + limit - now
        self._watch = asyncio.get_running_loop().call_later(later, self._watch_store)

    def _sent(self) -> None:
        """A log or grant batch goes to the store: its silence is counted from now if no
        other batch was waiting for an answer."""
        if not self._in_store:
            self._silent_since = self._s.clock.monotonic()
        self._in_store += 1

    def _heard(self) -> None:
        """The store answered a batch (results or an error): any batch still in it is counted
        from now."""
        self._in_store -= 1
        self._silent_since = self._s.clock.monotonic() if self._in_store else None

    async def _replay(self, row: StartRow) -> Start:
        """A retry with a used idempotency key gets the first start's answer."""
        t = self._s.core.tickets.get(row.start_id)
        if t is not None:
            if not t.answered:
                await self._wait(t, decided=False, timeout=None)
            if t.error is not None:
                raise t.error
            return self._s.answer(t.row)
        fresh = await self._s.require().get_start(row.start_id)
        return self._s.answer(fresh or row)

    async def _wait_decided(self, t: Ticket, timeout: float | None) -> None:
        if not t.decided:
            await self._wait(t, decided=True, timeout=timeout)

    async def _wait(self, t: Ticket, *, decided: bool, timeout: float | None) -> None:
        """Wait until the shell has answered `t`'s caller (or, `decided`, until `t` left the
        queue), or `timeout`. The future is made only here, when someone waits."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if t.waiters is None:
            t.waiters = []
        t.waiters.append((decided, fut))
        if timeout is None:
            await fut
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await fut

    # -- performing the core's actions ---------------------------------------------------------
    def _perform(self, actions: Sequence[Action]) -> None:
        launches: builtins.list[Launch] = []
        for a in actions:
            if isinstance(a, Grant):
                self._granter.put(a)
            elif isinstance(a, Launch):
                # Its caller is told first (it runs only at the loop's next turn, by when its
                # execution's task exists): the callers' next starts then form the next grant
                # batch before the launched executions do their work (`_run`).
                self._answered(a.ticket)
                launches.append(a)
            elif isinstance(a, Answer):
                self._answered(a.ticket)
            elif isinstance(a, Log):
                self._logger.put(a)
            else:
                self._refused(a.ticket.row.tenant, a.cause)
                self._cleanup(self._record_refusal(a))
        for a in launches:
            self._launch(a.ticket, a.execution)

    def _answered(self, t: Ticket) -> None:
        """Tell whoever waits on `t` what the core decided."""
        if t.settled:
            t.answered = True
        if t.trace is not None:
            traces.answered(t, t.trace, self._s.core.order)
        waiters = t.waiters
        if waiters:
            decided = t.decided
            left = [
                (d, fut)
                for d, fut in waiters
                if not fut.done() and not (decided if d else t.answered)
            ]
            for d, fut in waiters:
                if not fut.done() and (decided if d else t.answered):
                    fut.set_result(None)
            t.waiters = left or None

    async def _record_refusal(self, a: Refuse) -> None:
        t = a.ticket
        try:
            row = await self._s.require().decide_start(
                t.start_id,
                a.status,
                reason=a.reason,
                now=self._s.clock.wall(),
                forget_key=a.forget_key,
            )
            if row is not None:
                t.row = row
        except YokeError as exc:
            log.warning("could not record %s of start %s: %s", a.status.name, t.start_id, exc)
        finally:
            self._answered(t)

    def _cleanup(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run `coro` (a store write that must land before the store closes) as a task that
        shutdown waits for."""
        task = asyncio.ensure_future(coro)
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    async def _send_logs(self, logs: Sequence[Log]) -> builtins.list[tuple[StartRow, bool]]:
        self._sent()  # first: `_logs_done` hears this batch whatever follows
        return await self._s.require().log_starts([a.start for a in logs])

    def _logs_done(
        self,
        logs: Sequence[Log],
        results: Sequence[tuple[StartRow, bool]] | None,
        error: BaseException | None,
    ) -> None:
        s = self._s
        self._heard()
        if error is not None:
            for a in logs:
                self._perform(s.core.log_failed(a.ticket, error))
            if isinstance(error, YokeError):
                log.warning("logging starts failed: %s", error)
            elif not isinstance(error, asyncio.CancelledError):
                log.error("logging starts failed", exc_info=error)
            return
        assert results is not None
        now = s.clock.wall()
        for a, (row, created) in zip(logs, results, strict=True):
            self._perform(s.core.logged(a.ticket, row, created, now=now))

    async def _send_grants(self, grants: Sequence[Grant]) -> builtins.list[GrantResult]:
        """One batch of grants to the store's ledger. A lost answer is not always a lost
        commit: what did commit is read back, and is the batch's answer."""
        self._sent()  # first: `_grants_done` hears this batch whatever follows
        s = self._s
        store = s.require()
        requests = [g.request for g in grants]
        try:
            return await store.grant_starts(requests, now=s.clock.wall())
        except TRANSIENT as exc:  # a permanent refusal committed nothing: no read-back
            found = await read_back(
                store, requests, policy=s.retry, stopping=lambda: s.core.closing
            )
            if found is None:
                raise
            log.warning("a grant batch's answer was lost after it committed: %s", exc)
            return found

    def _grants_done(
        self,
        grants: Sequence[Grant],
        results: Sequence[GrantResult] | None,
        error: BaseException | None,
    ) -> None:
        """A batch of grants answered (in the order the batches formed): the core says what
        follows. A failed batch committed nothing: its starts give their slots back."""
        s = self._s
        self._heard()
        if error is not None:
            self._perform(s.core.grants_failed(grants, error, now=s.clock.wall()))
            if isinstance(error, YokeError):  # the store is down: the next poll retries
                log.warning("granting starts failed: %s", error)
            elif not isinstance(error, asyncio.CancelledError):
                log.error("granting starts failed", exc_info=error)
            return
        assert results is not None
        self._perform(s.core.granted(grants, results, now=s.clock.wall()))

    # -- cancelling --------------------------------------------------------------------------
    async def cancel_start(self, start_id: str) -> Start:
        """Cancel a QUEUED start; `Conflict` once it was decided."""
        s = self._s
        store = s.require()
        start_id = check_id(start_id, "start_id")
        s.require_leader()
        before = await store.get_start(start_id)
        # A delayed start is cancelled while SCHEDULED (a wake-up is its execution's to cancel).
        if (
            before is not None
            and before.status is StartStatus.SCHEDULED
            and before.kind is not StartKind.WAKE
        ):
            cancelled = await store.time.cancel_scheduled(start_id, now=s.clock.wall())
            if cancelled is not None:
                return s.answer(cancelled)
            before = await store.get_start(start_id) or before  # fired meanwhile: QUEUED
        s.core.may_change(start_id, before)
        row = await store.decide_start(
            start_id, StartStatus.CANCELLED, reason="cancelled", now=s.clock.wall()
        )
        self._perform(s.core.cancelled(start_id, row))
        assert row is not None  # else `cancelled` raised Conflict
        return s.answer(row)

    async def signal(
        self,
        execution_id: str,
        name: str,
        payload: Any = None,
        *,
        principal: Principal | None = None,
    ) -> Execution:
        """Send the signal `name` (with a JSON `payload`) to an execution, whichever server
        runs it (`signals.send_signal`); a wait for it ends, or it is kept for the next."""
        sent = await send_signal(self._s, execution_id, name, payload, principal=principal)
        self.timers.wake()  # its wake-up may be due now
        return sent

    async def cancel(self, execution_id: str, *, principal: Principal | None = None) -> Execution:
        """Cancel a RUNNING execution, whichever process runs it (`rescue.Rescue.cancel`)."""
        return await self.rescue.cancel(execution_id, principal)

    async def recover(self, *, stale_before: float) -> Recovery:
        """Recover the processes silent since `stale_before` (`rescue.Rescue.recover`), and
        admit the starts that makes this process's, through the queue like any other. While
        shutting down they are left QUEUED in the store: this process is about to stop, and
        the next recovery takes them over."""
        found = await self.rescue.recover(stale_before=stale_before)
        if found.adopted and not self._s.core.closing:
            copies = await self.copies_of(found.adopted)
            adopted = list(zip(found.adopted, copies, strict=True))
            self._perform(self._s.core.adopt(adopted, now=self._s.clock.wall()))
        return found

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
        self._s.require_leader()
        old = await self._source(execution_id)
        copy = None
        if from_step is not None:
            if not isinstance(from_step, str):
                raise BadType("from_step must be a step name (str)")
            read = self._s.require().steps_of(old.execution_id)
            steps = await within(self._store_timeout, "read the steps", read)
            pos = next((s.position for s in steps if s.name == from_step), None)
            if pos is None:
                raise BadValue(f"execution {execution_id} recorded no step {from_step!r}")
            copy = StepCopy(from_execution_id=old.execution_id, before_position=pos)
        return await self._again(old, StartKind.RESTART, copy, from_step, priority, principal)

    async def resume(
        self, execution_id: str, *, priority: int = 0, principal: Principal | None = None
    ) -> Start:
        """Continue a FAILED, CANCELLED, ABORTED or TIMED_OUT execution: a new execution,
        admitted like a new start, that re-uses every step the old one finished and counts on
        the attempts of the others."""
        self._s.require_leader()
        old = await self._source(execution_id)
        if old.status in (
            ExecutionStatus.RUNNING,
            ExecutionStatus.WAITING,
            ExecutionStatus.SUCCEEDED,
        ):
            raise Conflict(
                f"execution {execution_id} is {old.status.name}; only a FAILED, "
                "CANCELLED, ABORTED or TIMED_OUT execution can be resumed"
            )
        copy = StepCopy(from_execution_id=old.execution_id, before_position=None)
        return await self._again(old, StartKind.RESUME, copy, None, priority, principal)

    async def _source(self, execution_id: str) -> ExecutionRow:
        store = self._s.require()
        read = store.get_execution(check_id(execution_id, "execution_id"))
        row = await within(self._store_timeout, "read the execution", read)
        if row is None:
            raise NotFound(f"no execution {execution_id}")
        if row.parent_id is not None:
            raise Conflict(f"execution {execution_id} is a child; restart its parent")
        self._s.registry.get(row.workflow)
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
        await self._spend(old.tenant)
        new = NewStart(
            start_id=self._s.ids(),
            kind=kind,
            workflow=old.workflow,
            session=old.session,
            tenant=old.tenant,
            priority=priority,
            input=old.input,
            fingerprint="",
            idempotency_key=None,
            principal=principal.name if principal else None,
            source_execution_id=old.execution_id,
            from_step=from_step,
            instance_id=self._s.instance_id,
            created_at=self._s.clock.wall(),
        )
        return await self._arrive(new, copy)

    # -- running -------------------------------------------------------------------------------
    def _launch(self, t: Ticket, ex: ExecutionRow) -> None:
        assert self._spawn is not None
        run = self._run(t, ex)
        context, t.context = t.context or self._app_context.copy(), None
        try:
            task = self._spawn(run, context=context)
        except RuntimeError as exc:  # the app's TaskGroup is stopping (a service failed)
            run.close()
            log.error("execution %s could not start: %s", ex.execution_id, exc)
            error = Failure(type="Aborted", message=f"could not start: {exc}")
            self._cleanup(self._finish(t, ex, ExecutionStatus.ABORTED, None, error))
        else:
            self._s.runs[ex.execution_id] = t
            t.task = task
        if self._grant_listeners:
            granted = self._s.answer(t.row)
            for listener in self._grant_listeners:
                try:
                    listener(granted)
                except Exception:  # a listener's bug must not undo a committed grant
                    log.exception("a grant listener failed")

    def _stop(self, t: Ticket) -> None:
        self._s.stop(t)

    async def _run(self, t: Ticket, ex: ExecutionRow) -> None:
        s = self._s
        go = s.core.begin(t)
        store = s.require()
        status, output = ExecutionStatus.FAILED, None
        error: Failure | None = DID_NOT_FINISH
        ctx: Context | None = None
        waits = False  # it gave its slot back to sleep or wait: no end to record
        try:
            if not go:
                status = self._cancel_status()
                error = Failure(type=status.value.title(), message="stopped before it began")
                return
            # Yield once before the body: the callers this grant batch answered (`_perform`)
            # run first, so their next starts form the next grant batch and go to the store
            # before these executions' work (and their finishes) can hold it back.
            await asyncio.sleep(0)
            woken = t.row.kind is StartKind.WAKE  # its own steps, replayed
            recorded = await store.steps_of(ex.execution_id) if t.copy or woken else []
            ctx = Context(
                store=store,
                registry=s.registry,
                clock=s.clock,
                instance_id=s.instance_id,
                execution_id=ex.execution_id,
                workflow=ex.workflow,
                session=ex.session,
                tenant=ex.tenant,
                recorded=recorded,
                retry=s.retry,
                stopping=lambda: s.core.closing,
                write_step=self._stepper.submit,
                priority=t.row.priority,
                on_wait=self.timers.wake,
            )
            ctx.cancel_status = self._cancel_status
            with traces.running(t):
                body = s.registry.get(ex.workflow)
                status, output, error = await run_bounded(body, ctx, ex.input)
        except Suspended:
            waits = True
        except asyncio.CancelledError:
            status = self._cancel_status()
            message = "aborted at shutdown" if self._aborting else "cancelled"
            kind = "Aborted" if self._aborting else "Cancelled"
            error = Failure(type=kind, message=message)
            if ctx is not None:
                error = stopped_failure(ctx, message, kind)
            raise
        except Exception as exc:
            status, error = ExecutionStatus.FAILED, failure_of(exc)
            log_failed(ex.workflow, ex.execution_id, status.value, error)
        finally:
            if waits:
                self._let_go(t, ex)
            else:
                await self._finish(t, ex, status, output, error)

    def _let_go(self, t: Ticket, ex: ExecutionRow) -> None:
        """A run that waits (WAITING in the store, its slot released there): it frees here."""
        s = self._s
        self._perform(s.core.finishing(t, now=s.clock.wall()))  # no end to ride with
        s.runs.pop(ex.execution_id, None)
        s.core.finished(t, now=s.clock.wall())
        self._dispatch()  # its slot goes to the next pick now, as a finish's does
        if t.trace is not None:  # this start's span ends here; its wake-up is a start of its own
            t.trace.ran(ExecutionStatus.WAITING.name, None)
            t.trace.ended(ExecutionStatus.WAITING.name, None)

    async def _flush_finishes(
        self, finishes: Sequence[Finish]
    ) -> builtins.list[tuple[bool, float]]:
        """Whether each end was recorded (False: a peer's recovery ended it first), and when.
        The grants waiting to ride (`_riders`) go in the same transaction, after the ends."""
        s = self._s
        now = s.clock.wall()
        store = s.require()
        riders = [g for f in finishes for g in self._riders.pop(f.execution_id, ())]
        if not riders:
            written = await store.finish_executions(finishes, now=now)
            return [(w, now) for w in written]
        self._sent()  # first: `_grants_done` hears this batch whatever follows
        place = self._riders_line.place()
        requests = [g.request for g in riders]
        try:
            written, results = await store.finish_and_grant(finishes, requests, now=now)
        except TRANSIENT as exc:
            # The ends are retried (`_finish`); the grants may have committed with them.
            found = None
            try:
                found = await read_back(
                    store, requests, policy=s.retry, stopping=lambda: s.core.closing
                )
            finally:
                self._riders_line.fill(place, (riders, found, None if found is not None else exc))
            raise
        except YokeError as exc:
            # Refused for good (a fence that no longer holds: this process leads no more):
            # the grants are refused with it, the ends are recorded alone (never fenced).
            self._riders_line.fill(place, (riders, None, exc))
            written = await store.finish_executions(finishes, now=now)
        except BaseException as exc:
            self._riders_line.fill(place, (riders, None, exc))
            raise
        else:
            self._riders_line.fill(place, (riders, results, None))
        return [(w, now) for w in written]

    async def _flush_steps(self, records: Sequence[StepRecord]) -> builtins.list[bool]:
        """One transaction for the steps of every execution in the batch. A step is recorded
        by one task at a time, so a key twice in a batch is a record whose writer was
        cancelled and one written after it: only the later is written, both answered by it."""
        latest = {(r.execution_id, r.position): r for r in records}
        written = await self._s.require().write_steps(
            list(latest.values()), now=self._s.clock.wall()
        )
        by_key = dict(zip(latest, written, strict=True))
        return [by_key[(r.execution_id, r.position)] for r in records]

    def _cancel_status(self) -> ExecutionStatus:
        return ExecutionStatus.ABORTED if self._aborting else ExecutionStatus.CANCELLED

    async def _finish(
        self,
        t: Ticket,
        ex: ExecutionRow,
        status: ExecutionStatus,
        output: str | None,
        error: Failure | None,
    ) -> None:
        s = self._s
        # Its slot goes to the next picks now: their grants ride with this end (`_riders`).
        for a in s.core.finishing(t, now=s.clock.wall()):
            if isinstance(a, Grant):
                self._riders.setdefault(ex.execution_id, []).append(a)
            else:
                self._perform((a,))
        if t.trace is not None:
            t.trace.ran(status.name, traces.failed(status, error))
        finish = Finish(
            execution_id=ex.execution_id,
            status=status,
            output=output,
            error=None if error is None else error.encoded(),
        )
        try:
            # Until the store takes it, the slot stays taken, here and in the ledger. Stopping,
            # it is given up after a few tries: once this instance has stopped, a peer's
            # recovery records the execution ABORTED and frees its slot.
            try:
                done = await until_done(
                    lambda: _to_the_end(self._finisher.submit(finish), self._finisher),
                    policy=s.retry,
                    what=f"recording the end of {ex.execution_id}",
                    stopping=lambda: s.core.closing,
                    log=log,
                )
            except YokeError as exc:  # refused for good: retried, it would be refused forever
                await self._finish_refused(finish, exc)
            else:
                if done is not None and done[0][0]:  # recorded as it is: `wait` needs no read
                    s.ended.add(ex, finish, done[0][1])
        finally:
            s.runs.pop(ex.execution_id, None)
            s.core.finished(t, now=s.clock.wall())
            # Picks its slot could not take when it was handed over (a start queued since,
            # a grant that rode with a failed batch) go now, not at the dispatcher's next
            # turn: the ends of one finish batch all resume in this turn, so their picks form
            # one grant batch.
            self._dispatch()
            if t.trace is not None:
                t.trace.ended(status.name, traces.failed(status, error))

    async def _finish_refused(self, finish: Finish, refusal: YokeError) -> None:
        """The store refused a batch of finishes for good. This one is written alone (another
        of its batch may have been the cause); refused alone, the execution ends FAILED with
        the refusal as its error, so its slot is freed; refused again, it is logged (a peer's
        recovery records it ABORTED once this instance is gone)."""
        s = self._s
        one = finish
        for attempt in ("alone", "as failed"):
            try:
                await until_done(
                    functools.partial(self._finish_alone, one),
                    policy=s.retry,
                    what=f"recording the end of {finish.execution_id} {attempt}",
                    stopping=lambda: s.core.closing,
                    log=log,
                )
                return
            except YokeError as exc:
                refusal = exc
                error = failure_of(exc).encoded()
                one = replace(finish, status=ExecutionStatus.FAILED, output=None, error=error)
        log.error("the store refused the end of %s: %s", finish.execution_id, refusal)

    async def _finish_alone(self, finish: Finish) -> None:
        await self._s.require().finish_executions([finish], now=self._s.clock.wall())

    async def shutdown(self, timeout: float) -> None:
        """Admit nothing new, refuse the queued starts, give running executions `timeout`
        seconds, then abort the rest (recorded ABORTED)."""
        s = self._s
        if s.store is None:
            return
        self._perform(s.core.shutdown())
        await self._logger.idle()  # a start being logged now is refused when it is
        await self._granter.idle()  # a grant in the store now still launches its execution
        while self._cleanups:  # refusals, and aborts decided by that last batch
            await asyncio.wait(set(self._cleanups))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while s.runs and loop.time() < deadline:
            await asyncio.wait(self._run_tasks(), timeout=deadline - loop.time())
        if s.runs:
            self._aborting = True
            for run in s.runs.values():
                self._stop(run)
            while s.runs:
                await asyncio.wait(self._run_tasks())

    def _run_tasks(self) -> builtins.list[asyncio.Task[None]]:
        return [t.task for t in self._s.runs.values() if t.task is not None]


async def _to_the_end(fut: asyncio.Future[Any], batches: GroupCommit[Any, Any]) -> Any:
    """Await `fut` (a request of `batches`) even through a cancel, which is re-raised once the
    batch that carries the request is done: what it records must be recorded before the caller
    lets go of its state. (A cancel cancels `fut` itself, not the request: a batch takes every
    request that was submitted.)"""
    try:
        return await fut
    except asyncio.CancelledError:
        while True:
            try:
                await batches.idle()
                break
            except asyncio.CancelledError:
                continue
        raise
