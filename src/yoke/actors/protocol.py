"""`ActorStore`: the store verbs the actor runtime needs, in domain words.

The runtime codes against this protocol only; the SQL backends implement it beside the `Store`
verbs. Contract of every verb:

* `now` is passed in by the caller (its injected clock); no backend reads the wall clock.
* Fencing: a claim (`claim_next`, `claim_event`) records the owner epoch of its instance.
  `complete`, `requeue`, `dead_letter` and `update_state` take that epoch and change nothing
  unless the caller still owns the instance under the same epoch; a worker that lost its
  instances can change nothing.
* Exactly once: `fire_timers` appends each timer's event and deletes the timer in one
  transaction, skipping timers already fired or locked by a concurrent caller (PostgreSQL) or
  with one writer at a time (SQLite).
* Errors are `YokeError`s only (`StoreUnavailable` when the database cannot be reached).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from yoke.leases import LeaseStore
from yoke.store import NewControl
from yoke.store.actor_records import (
    ActorCounts,
    ClaimedEvent,
    Completion,
    CrashCharge,
    DeadLetter,
    DueTimer,
    EventKey,
    ExecutorRow,
    FleetCounts,
    InstanceInfo,
    InstanceRef,
    InstanceState,
    MoveOrder,
    MoveResult,
    NewEvent,
    NewTimer,
    Owner,
    PendingEvent,
    QueueDepth,
    SpareRow,
    Takeover,
    WorkerRow,
)
from yoke.store.tenantverbs import TenantRow, TenantValues, Tokens


class FleetStore(Protocol):
    """Workers, takeovers and moves (`store/fleetverbs.py`): the heartbeat, the balancer and the
    giver's verbs."""

    async def register_worker(self, worker_id: str, *, hostname: str, pid: int, now: float) -> None:
        """Upsert the worker row. A (re)start is a new incarnation: instances it already owns
        get a new epoch, and what an earlier incarnation had claimed is pending again, as it
        is after a takeover (`claim_orphans`): each row a suspect, the one marked `solo`
        charged a crash attempt (a dead letter at `CRASH_ATTEMPTS`)."""
        ...

    async def worker_heartbeat(self, worker_id: str, *, now: float) -> bool:
        """False if the worker row is gone or stopped."""
        ...

    async def stop_worker(self, worker_id: str, *, now: float, to: Owner = None) -> int:
        """Mark stopped and give up every owned instance (their claims go back to pending) to
        `to`: none (the first worker to look takes them), or a rule naming each one's owner."""
        ...

    async def claim_orphans(
        self, worker_id: str, *, stale_before: float, now: float, to: Owner | None = None
    ) -> Takeover:
        """Take (for `worker_id`, or for the owner the rule `to` names) every instance
        with no owner, or whose owner's worker row is stopped or silent since `stale_before`;
        bump their epochs and put their claimed rows back to pending. An owner with no worker
        row yet keeps its instances: owners are named by registered workers, or by a direct
        caller for a worker about to start (rows are never deleted)."""
        ...

    async def list_workers(self) -> list[WorkerRow]: ...

    async def forget_workers(self, *, before: float) -> int:
        """Delete the workers stopped, or silent, since `before` that own no instance and are
        no move's taker, with the executors and tenant counters they recorded; how many."""
        ...

    # -- the fleet: placement and rebalancing (`yoke.actors.fleet`) ---------------------------
    async def fleet_counts(
        self, *, tenant: str | None = None, with_pending: bool = False
    ) -> list[FleetCounts]:
        """Per worker: instances owned (of `tenant`, or of all), moves under way out and in,
        and, with `with_pending` (a scan of the pending rows), pending rows."""
        ...

    async def owned_page(
        self, *, worker_id: str | None, after: InstanceRef | None, limit: int
    ) -> list[tuple[InstanceRef, str]]:
        """Instances owned by `worker_id` (None: by any worker) and not moving, with their
        owner, in key order after `after`."""
        ...

    async def pending_heads(self, worker_id: str, *, limit: int) -> list[tuple[InstanceRef, int]]:
        """The instances `worker_id` owns (not moving) with the most pending rows, and how
        many each holds, most first."""
        ...

    async def mark_moves(self, moves: Sequence[tuple[InstanceRef, str, str]], *, now: float) -> int:
        """Mark (instance, giver, taker) moves, each only if its giver still owns the instance
        and it is not moving already; NOTIFY so that givers look. Returns how many."""
        ...

    async def moves_from(self, worker_id: str, *, limit: int) -> list[MoveOrder]:
        """The moves marked on instances `worker_id` owns."""
        ...

    async def finish_move(
        self, worker_id: str, order: MoveOrder, *, stale_before: float
    ) -> MoveResult:
        """Hand the instance to its taker (new epoch, claimed rows pending again) if
        `worker_id` still owns it under `order.epoch`; keep it (new epoch) if the taker is no
        longer live."""
        ...

    async def owned_instances(self) -> dict[str, int]:
        """Worker id -> how many instances it owns (workers owning none are left out)."""
        ...


class ExecutorStore(Protocol):
    """The rows of executor processes and what their deaths write (`store/executorverbs.py`):
    the lifecycle's, the pool's and the drain's releases."""

    async def release_claims(self, worker_id: str, done: Sequence[Completion]) -> list[int]:
        """Put claimed rows back to pending without counting an attempt (their executor died,
        or they were claimed for a tenant whose executor is not running); returns the queue
        ids released (others: not this worker's claim any more)."""
        ...

    async def charge_crash(
        self, worker_id: str, done: Completion, *, error: str, dead_after: int, now: float
    ) -> CrashCharge:
        """The executor died running this claim alone: count a crash attempt and put the row
        back to pending, or make it a dead letter (with `error`) at `dead_after` crashes."""
        ...

    async def pending_tenants(self, worker_id: str, *, after: str = "", limit: int) -> list[str]:
        """Tenants with pending rows of instances `worker_id` owns, in name order after
        `after` (at most `limit`)."""
        ...

    async def tenants_with_pending(self, worker_id: str, tenants: Sequence[str]) -> list[str]:
        """Which of `tenants` have pending rows of instances `worker_id` owns."""
        ...

    async def timer_tenants(
        self, worker_id: str, *, before_ms: int, limit: int
    ) -> list[tuple[str, int]]:
        """(tenant, earliest fire_at_ms) of tenants with a timer due before `before_ms` and
        an instance `worker_id` owns, soonest first."""
        ...

    async def record_executors(self, rows: Sequence[ExecutorRow]) -> None:
        """Upsert the latest state of these (worker, tenant) executors."""
        ...

    async def record_spares(self, rows: Sequence[SpareRow]) -> None:
        """Upsert the latest state of these (worker, slot) warm spares."""
        ...

    async def list_executors(self, *, tenant: str | None, limit: int) -> list[ExecutorRow]:
        """Executor rows (of `tenant`, or of all), by tenant and worker; with no tenant asked
        for, the warm spares' too, after them (tenant None)."""
        ...


class TenantStore(Protocol):
    """Fleet-wide tenant settings, the per-tenant cap's counters and the rate buckets
    (`store/tenantverbs.py`)."""

    async def tenant_settings(self, *, limit: int) -> list[TenantRow]:
        """Every tenant's stored settings (`*` too), by tenant, at most `limit`."""
        ...

    async def get_tenant_settings(self, tenant: str) -> TenantRow | None: ...

    async def put_tenant_settings(
        self,
        tenant: str,
        values: TenantValues,
        *,
        audit: NewControl,
        expect: int = 0,
    ) -> TenantRow | None:
        """Write a tenant's settings and their control-log entry in one transaction, if its
        row is still at version `expect` (0: none); else None, and nothing is written."""
        ...

    async def take_tenant_slot(self, tenant: str, worker_id: str, *, live_after: float) -> bool:
        """Count one more `process()` call of `tenant` on `worker_id`, unless the calls running
        on live workers (heartbeat at or after `live_after`) already reach its max_running (its
        own, else `*`'s): then False. Exact under races between workers."""
        ...

    async def free_tenant_slot(self, tenant: str, worker_id: str) -> None:
        """One call of `tenant` taken by `take_tenant_slot` on `worker_id` has ended."""
        ...

    async def clear_tenant_slots(self, worker_id: str) -> None:
        """Forget `worker_id`'s counters (it starts: none of its calls runs)."""
        ...

    async def take_tokens(
        self, tenant: str, kind: str, *, n: int, rate: float, burst: int
    ) -> Tokens:
        """Take `n` tokens of the tenant's bucket `kind` (`rate` a second, at most `burst`
        held), or none, on the database's clock (a token bucket shared by every process)."""
        ...

    async def forget_full_buckets(self) -> int:
        """Remove the buckets that are full again (as good as none): how many."""
        ...


class ActorStore(Protocol):
    """The actor verbs (streams, queues, states, timers, inspection), and its parts by entity:
    `fleet`, `executors`, `tenants` and `leases` (a singleton portal runs under a lease), each a
    narrow protocol of its own, so a consumer is given only the part it uses."""

    @property
    def fleet(self) -> FleetStore: ...

    @property
    def executors(self) -> ExecutorStore: ...

    @property
    def tenants(self) -> TenantStore: ...

    @property
    def leases(self) -> LeaseStore: ...

    # -- stream and fan-out --------------------------------------------------------------------
    async def append_events(
        self, events: Sequence[NewEvent], *, owner: Owner, now: float
    ) -> list[int]:
        """Write the events and one `actor_queues` row per target, in one transaction; create
        missing instances owned by `owner` (a worker, none, or a rule naming one per
        instance). Returns the event ids, in order."""
        ...

    async def append_event_once(
        self, event: NewEvent, *, key: EventKey, owner: Owner, now: float
    ) -> tuple[int, bool]:
        """Append `event` unless `key` (live, same principal) appended one already, in one
        transaction with the key's claim: (the event id, whether it was appended now). The
        key used with another request (`fingerprint`) is `IdempotencyConflict`."""
        ...

    # -- queue drain ---------------------------------------------------------------------------
    async def claim_next(
        self,
        worker_id: str,
        *,
        limit: int,
        now: float,
        after_tenant: str = "",
        tenants: Sequence[str] | None = None,
        quota: Callable[[str], int] | None = None,
        claim_id: int | None = None,
    ) -> list[ClaimedEvent]:
        """Claim due pending rows of instances `worker_id` owns, each under its instance's
        current owner epoch, oldest first per tenant. Tenants share a claim: of the (at most
        `limit`) tenants with pending rows, taken in name order after `after_tenant` and
        wrapping around, each gets up to ceil(limit / tenants) rows, so a flood of one tenant
        never fills the claims while another waits. With `tenants`, only those are claimed
        (the ones whose executor can run their events now). With `quota`, each of those
        tenants gets up to `quota(tenant)` rows instead (the fair claim: what its window at
        the worker has room for); `quota` is asked once for each tenant with pending rows. The
        rows are marked with `claim_id`, for `unclaim_lost`."""
        ...

    async def unclaim_lost(self, worker_id: str, claim_id: int) -> int:
        """Put back to pending, no attempt counted, the rows that `worker_id`'s claim
        `claim_id` took and that are still its claim: that claim failed as far as the worker
        knows (its answer was lost: the store may have committed it), so no one holds them.
        Returns how many."""
        ...

    async def list_pending(
        self, worker_id: str, ref: InstanceRef, group_id: str, *, limit: int, now: float
    ) -> list[PendingEvent]:
        """The first (at most `limit`) due pending rows of one group of an instance that
        `worker_id` owns, in arrival order: what a custom-mode select chooses among."""
        ...

    async def claim_event(
        self, worker_id: str, queue_id: int, *, epoch: int
    ) -> ClaimedEvent | None:
        """Claim one pending row specifically (the one a select chose), under owner epoch
        `epoch`. None if it is claimed already (a concurrent claim won: PostgreSQL skips a row
        locked by one), gone, or its instance is not `worker_id`'s under `epoch` any more."""
        ...

    async def complete(self, worker_id: str, done: Sequence[Completion]) -> list[int]:
        """Delete the rows of finished claims; returns the queue ids deleted (others: fenced)."""
        ...

    async def requeue(
        self, worker_id: str, done: Completion, *, available_at: float, error: str | None
    ) -> bool:
        """Count a failed attempt and keep the row (and its place) until `available_at`."""
        ...

    async def dead_letter(
        self, worker_id: str, done: Completion, *, error: str | None, now: float
    ) -> bool: ...

    async def mark_solo(self, worker_id: str, done: Completion) -> bool:
        """A suspect (claimed by a worker that died) is about to run alone here: if this
        worker dies now, its recovery charges this row a crash attempt. False if the claim is
        not this worker's any more."""
        ...

    async def list_active_groups(self, ref: InstanceRef) -> list[str]:
        """Groups of an instance with pending or claimed rows."""
        ...

    async def dead_letters(self, ref: InstanceRef, *, limit: int = 100) -> list[DeadLetter]: ...

    async def queue_depths(self, *, limit: int) -> list[QueueDepth]:
        """The deepest instances first."""
        ...

    # -- instances and state -------------------------------------------------------------------
    async def get_state(self, ref: InstanceRef) -> InstanceState | None: ...

    async def get_states(self, refs: Sequence[InstanceRef]) -> dict[InstanceRef, InstanceState]:
        """The states of several instances in one read; unknown instances are left out."""
        ...

    async def update_state(
        self, ref: InstanceRef, *, state: str, expected_version: int, worker_id: str, epoch: int
    ) -> bool:
        """Compare-and-set: write only if the version and the ownership are unchanged."""
        ...

    async def get_instance(self, ref: InstanceRef) -> InstanceInfo | None: ...

    async def list_instances(self, actor: str, *, limit: int = 100) -> list[InstanceInfo]: ...

    # -- timers --------------------------------------------------------------------------------
    async def schedule(self, timers: Sequence[NewTimer], *, now: float) -> list[int]:
        """Record timers (one transaction) and wake the timer loops; returns their ids."""
        ...

    async def next_fire_at_ms(self) -> int | None: ...

    async def upcoming_timers(
        self, *, limit: int, after: tuple[int, int] | None = None
    ) -> list[DueTimer]:
        """The earliest `limit` timers not fired yet (due or not), by (fire_at_ms, timer_id);
        with `after`, only those that come after that (fire_at_ms, timer_id)."""
        ...

    async def tenant_timers(self, tenant: str, *, limit: int) -> list[DueTimer]:
        """One tenant's earliest `limit` timers not fired yet, by (fire_at_ms, timer_id)."""
        ...

    async def fire_timers(
        self, fire: Sequence[tuple[int, NewEvent]], *, owner: Owner, now: float
    ) -> list[int]:
        """Fire timers: for each (timer id, its routed event) whose timer is still pending,
        append the event (created instances owned by `owner`) and delete the timer, all in one
        transaction, in the order given. Timers fired already, or being fired by a concurrent
        caller, are skipped. Returns the ids of the timers this call fired."""
        ...

    async def listen_actor_wakeups(
        self,
        on_queue: Callable[[], None],
        on_schedule: Callable[[], None],
        on_tenants: Callable[[], None],
    ) -> None:
        """Run until cancelled, calling back on NOTIFY (PostgreSQL): rows for the drain, a
        timer scheduled, a tenant's settings changed. Returns at once on a backend without push
        notifications; callers keep a backup poll either way."""
        ...

    # -- inspection (the HTTP API; reads only) -------------------------------------------------
    async def actor_counts(self, *, tenant: str | None) -> list[ActorCounts]:
        """Per actor with instances (in `tenant`, or in all when None): how many instances,
        and their queue rows by state. Counts every queue row: an inspection, not a hot path."""
        ...

    async def instances_page(
        self,
        actor: str,
        *,
        tenant: str | None = None,
        after: InstanceRef | None = None,
        limit: int = 100,
    ) -> list[InstanceInfo]:
        """Instances of `actor` (in `tenant`, or in all) ordered by (tenant, instance_id),
        starting after `after` (its tenant and instance id; its actor is ignored)."""
        ...
