"""The admission core: a synchronous state machine that decides every start of this process.

What it is for. `AdmissionCore` owns the kernel (the order of queued starts and what runs here),
the caps it applies from the limits, the queue's answer order, and one `Ticket` per start. Its
methods are the events of a start's life (it arrives, its log or grant batch answers, it is
cancelled or re-prioritised, its execution ends, shutdown begins); each changes the tickets and
the kernel at once and returns the I/O that must follow as actions (`tickets.Log`, `Grant`,
`Launch`, `Refuse`, `Answer`), which the async shell (`service.Executions`) performs and whose
results it feeds back. Whether a start is granted, queued or refused is decided in one method,
`_decide`; a queued start's place is the kernel's.

Its `role` says whether it may admit: `SOLO` (no high availability: it always may), `LEADER`
(it holds the admission lease) or `STANDBY` (it admits nothing: a start is refused with
`NotLeader` at once, the dispatcher gives no picks). `step_down` empties the queue without a
write (the new leader adopts the starts from the store); `adopt` takes a former leader's queued
starts into this queue in their order.

The ledger in the store has the last word: a grant the kernel allows may come back FULL
(another process holds the slot) and goes back to its place in line, or GONE (cancelled or
aborted meanwhile) and leaves.

What it must never do: await, touch the store, read a clock or make a random number. Times
come in as `now` arguments and ids from the injected `new_id`; tests/executions/test_core.py
drives it against a brute-force model.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence

from yoke.errors import Conflict, LimitExceeded, NotFound, NotLeader, ShuttingDown
from yoke.executions.admission import (
    Caps,
    DrainRate,
    QueueOrder,
    TenantGroups,
    lane_of,
    make_kernel,
    slots_for,
    workflow_key,
)
from yoke.executions.model import Limits
from yoke.executions.tenant_book import TenantBook
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
from yoke.kernel import GroupedKernel, ItemState
from yoke.store import (
    GrantOutcome,
    GrantRequest,
    GrantResult,
    NewExecution,
    NewStart,
    Slot,
    StartKind,
    StartRow,
    StartStatus,
    StepCopy,
)

log = logging.getLogger("yoke.executions")

UNLOGGED = 0  # the `seq` of a row not logged yet; the stores number rows from 1
SHUTTING_DOWN = "shutting down"
_QUEUED = ItemState.QUEUED
_RUNNING = ItemState.RUNNING


class Role(enum.Enum):
    SOLO = "solo"  # no high availability: this process admits
    LEADER = "leader"  # holds the admission lease: admits
    STANDBY = "standby"  # another server leads (or none does yet): admits nothing


class AdmissionCore:
    def __init__(
        self,
        limits: Limits,
        *,
        instance_id: str,
        new_id: Callable[[], str],
        retry_default: float = 1.0,
        tenants: TenantBook | None = None,
    ) -> None:
        self.limits = limits
        self.kernel: GroupedKernel = make_kernel(limits)
        self.caps = Caps(self.kernel, limits)
        # -- tenants: what applies to each (`TenantBook`, kept fresh by the shell), and its
        # executions.max_running and weight as its group's in the kernel (`TenantGroups`).
        self.tenants = tenants if tenants is not None else TenantBook()
        self.tenant_groups = TenantGroups(self.kernel, self.tenants)
        self.order = QueueOrder()
        self.drain_rate = DrainRate()
        self.tickets: dict[str, Ticket] = {}
        self.instance_id = instance_id
        self.closing = False
        self.role = Role.SOLO
        self.leader: str | None = None  # the leader a standby knows of, for its refusals
        self._new_id = new_id
        self._retry_default = retry_default
        self._logging = 0  # tickets LOGGING: while any is, no start may be admitted at once
        self._slot_cache: dict[tuple[str, str, str], tuple[Slot, ...]] = {}

    def __repr__(self) -> str:
        k = self.kernel
        return (
            f"AdmissionCore({'closing' if self.closing else 'open'}, {self.role.value}, "
            f"running={k.running}, "
            f"queued={k.queued}, logging={self._logging}, tickets={len(self.tickets)})"
        )

    # -- a start arrives ---------------------------------------------------------------------
    def arrive(self, new: NewStart, copy: StepCopy | None, *, now: float) -> tuple[Ticket, Action]:
        """A validated start: granted at once with its log in the same transaction (nothing
        queued or being logged, every cap has room), or logged first so that it is durable
        before it waits. `ShuttingDown` once shutdown began."""
        if self.closing:
            raise ShuttingDown("shutting down: no new start is admitted")
        if self.role is Role.STANDBY:
            raise self.not_leader()
        row = new.logged(seq=UNLOGGED)
        t = Ticket(row, copy, Phase.LOGGING)
        self._remember(t)
        if not self._logging:
            self.caps.before_offer(row.workflow)
            item = self.kernel.admit(
                row.start_id,
                lane_of(row.tenant, row.session),
                group=row.tenant,
                priority=row.priority,
                keys=(workflow_key(row.workflow),),
            )
            if item is not None:
                t.item = item
                [grant] = self._decide(t, now=now, log=new)
                return t, grant
        # A start admitted at once meanwhile would overtake this one, which reaches the kernel
        # only once logged.
        self._logging += 1
        return t, Log(t, new)

    def logged(self, t: Ticket, row: StartRow, created: bool, *, now: float) -> list[Action]:
        """Its log batch answered: offer it to the kernel, or (its idempotency key was taken)
        answer with the start that holds the key."""
        self._logging -= 1
        if not created:
            return self._end(t, row)
        if t.row.status is not StartStatus.QUEUED:  # cancelled before its log answered
            return self._end(t)
        if self.role is Role.STANDBY:  # stepped down meanwhile: the new leader adopts it
            t.error = self.not_leader()
            return self._end(t, row)
        t.row = row
        self.caps.before_offer(row.workflow)
        t.item = self.kernel.offer(
            row.start_id,
            lane_of(row.tenant, row.session),
            group=row.tenant,
            priority=row.priority,
            keys=(workflow_key(row.workflow),),
        )
        return self._decide(t, now=now, pump=True)

    def log_failed(self, t: Ticket, error: BaseException) -> list[Action]:
        self._logging -= 1
        t.error = error
        return self._end(t)

    # -- the decision --------------------------------------------------------------------------
    def _decide(
        self, t: Ticket, *, now: float, log: NewStart | None = None, pump: bool = False
    ) -> list[Action]:
        """Grant, queue or refuse: the one place where a start's fate is decided, each time
        the kernel has placed it (offered, or back in line after the ledger said FULL).

        The kernel runs it: to the ledger. It waits: with `pump`, the kernel's picks go to the
        ledger first (a free session slot may take it now); then, if its caller has no answer
        yet, `reject` or a queue past `max_queued` refuses it, else it is QUEUED. Shutdown
        refuses it whatever the kernel said."""
        item = t.item
        assert item is not None
        if self.closing:
            if item.state is _QUEUED:
                self.kernel.cancel(item.id)
                self.order.sync(item)
            self._release(t)
            if _timed(t):
                return self._end(t)
            return self._refuse(t, SHUTTING_DOWN, _shutting_down(), cause=Cause.SHUTDOWN)
        if self.role is Role.STANDBY:  # stepped down: no write, the new leader adopts it
            if item.state is _QUEUED:
                self.kernel.cancel(item.id)
                self.order.sync(item)
            t.error = self.not_leader()
            return self._end(t)
        if item.state is _RUNNING:
            t.phase = Phase.GRANTING
            return [Grant(t, self._request(t, log, now), not t.settled)]
        self.order.sync(item)
        t.phase = Phase.QUEUED
        out = self.next_grants(now=now) if pump else []
        if t.phase is not Phase.QUEUED:  # picked meanwhile: its grant's answer is the answer
            return out
        limits = self.limits
        over = limits.max_queued is not None and self.kernel.queued > limits.max_queued
        if not t.settled and (limits.on_limit == "reject" or over):
            ahead = self.kernel.queued + 1
            return out + self._turn_away(t, ahead, "limit reached", Cause.LIMIT, now=now)
        # Its tenant's own queue bound: past it this tenant alone is refused, so no tenant
        # fills the queue that every tenant shares.
        tenant = t.row.tenant
        bound = self.tenants.executions(tenant).max_queued
        queued = self.kernel.group_queued(tenant)
        if not t.settled and bound is not None and queued > bound:
            why = f"tenant {tenant!r} has {bound} starts queued, its executions.max_queued"
            return out + self._turn_away(t, queued + 1, why, Cause.TENANT_QUEUE, now=now)
        t.settled = True
        out.append(Answer(t))
        return out

    def _turn_away(
        self, t: Ticket, ahead: int, why: str, cause: Cause, *, now: float
    ) -> list[Action]:
        """A new start that would wait past a bound leaves the queue, refused with an estimate
        of when `ahead` starts will have gone (its caller may try again then)."""
        assert t.item is not None
        self.kernel.cancel(t.item.id)
        self.order.sync(t.item)
        retry = self.drain_rate.retry_after(ahead, now=now, default=self._retry_default)
        reason = f"{why}; retry in about {retry:.2f}s"
        error = LimitExceeded(f"start of {t.row.workflow!r} refused: {reason}", retry_after=retry)
        return self._refuse(t, reason, error, cause=cause, forget_key=True)

    # -- grants ----------------------------------------------------------------------------------
    def next_grants(self, *, now: float) -> list[Action]:
        """The kernel's picks, until it has none left to give: each goes to the ledger."""
        out: list[Action] = []
        if self.closing or self.role is Role.STANDBY:
            return out
        k = self.kernel
        while (item := k.pop_next()) is not None:
            self.order.sync(item)
            t = self.tickets.get(str(item.id))
            if t is None or t.phase is not Phase.QUEUED:  # nobody waits for it: no slot
                log.warning("start %s was in the queue without its caller; dropped", item.id)
                k.release(item.id)
                continue
            t.phase = Phase.GRANTING
            out.append(Grant(t, self._request(t, None, now), False))
        return out

    def granted(
        self, grants: Sequence[Grant], results: Sequence[GrantResult], *, now: float
    ) -> list[Action]:
        """A grant batch answered, one result per grant."""
        out: list[Action] = []
        for g, res in zip(grants, results, strict=True):
            t = g.ticket
            if res.outcome is GrantOutcome.GRANTED:
                assert res.start is not None and res.execution is not None
                t.row = res.start
                t.phase = Phase.GRANTED
                t.settled = True
                out.append(Launch(t, res.execution))
            elif res.outcome is GrantOutcome.GONE:
                out += self._end(t, res.start)
            else:
                if res.start is not None and t.row.seq == UNLOGGED:
                    t.row = res.start  # logged by that batch, QUEUED (unless changed since)
                out += self._back_in_line(t, now=now)
        return out

    def grants_failed(
        self, grants: Sequence[Grant], error: BaseException, *, now: float
    ) -> list[Action]:
        """A grant batch failed and nothing of it committed: a start that fitted at once is
        refused to its caller with the store's error; the others go back in line."""
        out: list[Action] = []
        for g in grants:
            t = g.ticket
            if g.at_once and not t.settled:
                self._release(t)
                out += self._refuse(t, "the store failed", error, cause=Cause.STORE)
            else:
                out += self._back_in_line(t, now=now)
        return out

    def _back_in_line(self, t: Ticket, *, now: float) -> list[Action]:
        """A pick the ledger answered FULL (another process holds the slot) or could not
        answer gets its place back in the kernel, unless it was cancelled meanwhile (it just
        leaves); then it is decided again (shutdown refuses it; a caller still without an
        answer may be refused by the limits)."""
        item = t.item
        assert item is not None
        if item.state is not _RUNNING:
            return []
        if t.row.status is not StartStatus.QUEUED:  # cancelled while it was being granted
            return self._end(t)
        self.kernel.requeue(item.id)
        if item.priority != t.row.priority:  # changed while it was being granted
            self.kernel.reprioritize(item.id, t.row.priority)
        return self._decide(t, now=now)

    def _request(self, t: Ticket, new: NewStart | None, now: float) -> GrantRequest:
        row = t.row
        kind = row.kind
        return GrantRequest(
            start_id=row.start_id,
            execution=NewExecution(
                # A wake-up runs its own execution again.
                execution_id=(
                    row.source_execution_id
                    if kind is StartKind.WAKE and row.source_execution_id is not None
                    else self._new_id()
                ),
                start_id=row.start_id,
                workflow=row.workflow,
                session=row.session,
                tenant=row.tenant,
                input=row.input,
                parent_id=None,
                restarted_from=row.source_execution_id if kind is StartKind.RESTART else None,
                resumed_from=row.source_execution_id if kind is StartKind.RESUME else None,
                instance_id=self.instance_id,
                created_at=now,
            ),
            slots=self._slots(row.session, row.workflow, row.tenant),
            copy_steps=t.copy,
            log=new,
        )

    def _slots(self, session: str, workflow: str, tenant: str) -> tuple[Slot, ...]:
        """The ledger slots a grant takes under today's limits and the tenant's settings, made
        once per session, workflow and tenant (the cache is emptied when the limits or the
        tenants' settings change, and when it grows past a bound: sessions are the callers'
        to name)."""
        key = (session, workflow, tenant)
        slots = self._slot_cache.get(key)
        if slots is None:
            if len(self._slot_cache) >= 4096:
                self._slot_cache.clear()
            cap = self.tenants.executions(tenant).max_running
            slots = tuple(
                slots_for(
                    self.limits, session=session, workflow=workflow, tenant=tenant, tenant_cap=cap
                )
            )
            self._slot_cache[key] = slots
        return slots

    # -- changes from outside ----------------------------------------------------------------------
    def may_change(self, start_id: str, row: StartRow | None) -> StartRow:
        """Whether a cancel or a priority change may be written for the start whose stored row
        is `row`: only while it is QUEUED (`NotFound`, `Conflict`). The store's write checks
        it again under its lock; its answer comes back to `cancelled` or `reprioritized`."""
        if row is None:
            raise NotFound(f"no start {start_id}")
        if row.status is not StartStatus.QUEUED:
            raise Conflict(f"start {start_id} is {row.status.name}, not QUEUED")
        return row

    def cancelled(self, start_id: str, row: StartRow | None) -> list[Action]:
        """The store's answer to a cancel: `row` CANCELLED, or decided meanwhile (`Conflict`).
        A queued one leaves the kernel now; one being logged leaves when its log answers; a
        grant in flight finds it GONE (or FULL, and then it leaves instead of going back in
        line)."""
        if row is None or row.status is not StartStatus.CANCELLED:
            status = "gone" if row is None else row.status.name
            raise Conflict(f"start {start_id} is {status}, not QUEUED")
        t = self.tickets.get(row.start_id)
        if t is None:
            return []
        t.row = row
        if t.phase is Phase.QUEUED:
            assert t.item is not None
            self.kernel.cancel(t.item.id)
            self.order.sync(t.item)
            return self._end(t)
        return [Answer(t)]  # whoever waits for it to be decided learns it now

    def reprioritized(self, start_id: str, row: StartRow | None) -> None:
        """The store's answer to a priority change: `row` still QUEUED with its new priority,
        or decided meanwhile (`Conflict`). The kernel takes the new priority at once (a grant
        in flight applies it if it comes back); its next picks are `next_grants`'."""
        if row is None or row.status is not StartStatus.QUEUED:
            raise Conflict(f"start {start_id} was decided meanwhile")
        t = self.tickets.get(row.start_id)
        if t is None:
            return
        t.row = row
        if t.item is not None:
            self.kernel.reprioritize(t.item.id, row.priority)
            self.order.sync(t.item)

    def apply_limits(self, limits: Limits) -> None:
        self.limits = limits
        self.caps.apply(limits)
        self._slot_cache.clear()

    def apply_tenant_settings(self) -> None:
        """The tenants' settings changed (`self.tenants` holds the new ones): each tenant's
        executions.max_running applies to the next picks (the kernel) and grants (the ledger
        slots); a queue bound applies to the next start that would wait."""
        self.tenant_groups.apply()
        self._slot_cache.clear()

    # -- executions -------------------------------------------------------------------------------
    def begin(self, t: Ticket) -> bool:
        """Its execution's task begins; False if it was asked to stop before (it ends at once)."""
        t.phase = Phase.RUNNING
        return not t.stop_requested

    def stop(self, t: Ticket) -> bool:
        """Ask a run to stop; True if its task must be cancelled now. A task cancelled before
        it began would never record its end, so one not begun is only marked, and stops at
        its start; one whose end is being recorded is left to finish that."""
        if t.phase is Phase.RUNNING:
            return True
        if t.phase is Phase.GRANTED:
            t.stop_requested = True
        return False

    def finishing(self, t: Ticket, *, now: float) -> list[Action]:
        """Its end is about to be recorded: its slot is handed over now, to the kernel's next
        picks, whose grants the shell sends in the transaction that records the end (the store
        frees the ended execution's ledger slots first, then takes them for these grants), so
        that a slot changes hands in one commit. The ledger still decides: should that
        transaction fail, its grants fail with it (`grants_failed`: back in line) while the
        ledger holds the slot until the end, retried, is recorded; a pick made meanwhile is
        answered FULL if the ledger is at its cap."""
        t.phase = Phase.FINISHING
        self._release(t)
        return self.next_grants(now=now)

    def finished(self, t: Ticket, *, now: float) -> None:
        """Its end is recorded (or given up at shutdown): it leaves (its slot was handed over
        by `finishing`)."""
        self._release(t)
        self._forget(t)
        t.phase = Phase.ENDED
        self.drain_rate.freed(now)

    def shutdown(self) -> list[Action]:
        """Admit nothing new and refuse every queued start (but those timers fired)."""
        self.closing = True
        out: list[Action] = []
        for item in self.kernel.drain():
            self.order.sync(item)
            t = self.tickets.get(str(item.id))
            if t is not None and _timed(t):
                out += self._end(t)  # left QUEUED in the store: recovery takes it over
            elif t is not None:
                out += self._refuse(t, SHUTTING_DOWN, _shutting_down(), cause=Cause.SHUTDOWN)
        return out

    # -- high availability ------------------------------------------------------------------------
    def not_leader(self) -> NotLeader:
        where = f"; the leader is {self.leader}" if self.leader else "; no leader is known yet"
        return NotLeader(f"this server is a standby{where}", leader=self.leader)

    def lead(self) -> None:
        """This process holds the lease now: it admits (after `adopt`)."""
        self.role = Role.LEADER
        self.leader = None

    def step_down(self, leader: str | None = None) -> list[Action]:
        """Admit nothing from now on. The queued starts leave the queue without a write (they
        stay QUEUED in the store, where the next leader adopts them) and their callers learn
        `NotLeader`; starts in a log or grant batch are settled when it answers, granted runs
        go on to their end."""
        self.role = Role.STANDBY
        self.leader = leader
        out: list[Action] = []
        for item in self.kernel.drain():
            self.order.sync(item)
            t = self.tickets.get(str(item.id))
            if t is not None:
                t.error = self.not_leader()
                out += self._end(t)
        return out

    def adopt(
        self, rows: Sequence[tuple[StartRow, StepCopy | None]], *, now: float
    ) -> list[Action]:
        """Queued starts of a former leader join this queue with their priorities and in their
        arrival order (each as if it had just been logged here; nobody waits for them). They
        are offered highest priority first, so that those the kernel starts at once, while
        slots are free, are the ones it would have picked first."""
        out: list[Action] = []
        for row, copy in sorted(rows, key=lambda rc: (-rc[0].priority, rc[0].seq)):
            if row.start_id in self.tickets:
                continue
            t = Ticket(row, copy, Phase.QUEUED)
            t.settled = True  # its caller was answered by the server that logged it
            self._remember(t)
            self.caps.before_offer(row.workflow)
            t.item = self.kernel.offer(
                row.start_id,
                lane_of(row.tenant, row.session),
                group=row.tenant,
                priority=row.priority,
                keys=(workflow_key(row.workflow),),
            )
            out += self._decide(t, now=now)
        return out + self.next_grants(now=now)

    # -- endings ----------------------------------------------------------------------------------
    def _release(self, t: Ticket) -> None:
        item = t.item
        if item is not None and item.state is _RUNNING:
            self.kernel.release(item.id)
            self.order.sync(item)

    def _remember(self, t: Ticket) -> None:
        self.tickets[t.start_id] = t
        self.tenant_groups.arrived(t.row.tenant)

    def _forget(self, t: Ticket) -> None:
        if self.tickets.get(t.start_id) is t:
            del self.tickets[t.start_id]
            self.tenant_groups.left(t.row.tenant)

    def _end(self, t: Ticket, row: StartRow | None = None) -> list[Action]:
        """It leaves without a run: gone, cancelled, or its idempotency key belongs to another
        (then `row` is the start that holds the key)."""
        self._release(t)
        self._forget(t)
        if row is not None:
            t.row = row
        t.phase = Phase.ENDED
        t.settled = True
        return [Answer(t)]

    def _refuse(
        self,
        t: Ticket,
        reason: str,
        error: BaseException,
        *,
        cause: Cause,
        forget_key: bool = False,
    ) -> list[Action]:
        self._forget(t)
        t.phase = Phase.ENDED
        t.settled = True
        t.error = error
        return [Refuse(t, StartStatus.REFUSED, reason, forget_key, cause)]


def _timed(t: Ticket) -> bool:
    """A start a timer fired (a delayed start, a wake-up): nobody waits for its answer, and
    refusing it would lose it, so a stopping process leaves it QUEUED for the next one."""
    return t.row.kind is StartKind.WAKE or t.row.due_at_ms is not None


def _shutting_down() -> ShuttingDown:
    return ShuttingDown("shutting down: no new start is admitted")
