"""The plain records of the actor verbs: streams, queues, timers, workers.

Values only, no behaviour: frozen keyword-only dataclasses that every backend returns alike.
Event data travels as JSON text encoded by the caller, so a backend keeps exactly the bytes it
was given. `yoke.actors` builds on these; this module must never import a driver or any part
of yoke above the store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum


class QueueStatus(Enum):
    """The states of an `actor_queues` row. A completed row is deleted, not kept."""

    PENDING = "pending"  # waiting for its owner's claim (also: requeued, available_at later)
    CLAIMED = "claimed"  # taken by a worker (`claimed_by`, `claim_epoch`): in flight
    DEAD = "dead"  # dead letter: `max_attempts` reached; kept for inspection


@dataclass(frozen=True, kw_only=True, slots=True)
class InstanceRef:
    """One actor instance: named by the key field of its events, per tenant and actor."""

    tenant: str
    actor: str
    instance_id: str


def ref_params(ref: InstanceRef) -> dict[str, str]:
    """An instance's key as the parameters of the named queries that take one."""
    return {"tenant": ref.tenant, "actor": ref.actor, "instance_id": ref.instance_id}


@dataclass(frozen=True, kw_only=True, slots=True)
class Target:
    """One `actor_queues` row that an appended event fans out to."""

    actor: str
    instance_id: str
    group_id: str


@dataclass(frozen=True, kw_only=True, slots=True)
class NewEvent:
    """An event to append to `stream`, with the queue rows it fans out to (same transaction)."""

    tenant: str
    stream: str
    data: str  # JSON text
    targets: tuple[Target, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class EventKey:
    """The Idempotency-Key an event is appended under (`append_event_once`): one event per
    (principal, key) until `expires_at`; `fingerprint` tells a retry from another request."""

    principal: str
    key: str
    fingerprint: str
    expires_at: float
    keep_at_most: int | None = None  # keys kept per tenant (the event's), its oldest go first


@dataclass(frozen=True, kw_only=True, slots=True)
class PendingEvent:
    """A queue row waiting for its owner's claim: what a custom-mode `select` chooses among
    (list pending, select, claim the chosen one)."""

    queue_id: int
    event_id: int
    tenant: str
    actor: str
    instance_id: str
    group_id: str
    stream: str
    data: str  # JSON text
    attempts: int  # failed attempts so far (before this claim, once claimed)
    appended_at: float

    @property
    def ref(self) -> InstanceRef:
        return InstanceRef(tenant=self.tenant, actor=self.actor, instance_id=self.instance_id)


# Crash attempts that make a row a dead letter: its executor, or its worker, died while it
# ran alone (or past its deadline) this often.
CRASH_ATTEMPTS = 3


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimedEvent(PendingEvent):
    """A queue row claimed by a worker; `epoch` is the owner epoch the claim was made under.
    A `suspect` was claimed by a worker that died: it runs alone (`Dispatch`)."""

    epoch: int
    suspect: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Completion:
    """A claim to finish (delete its row) under the owner epoch it was claimed with."""

    queue_id: int
    epoch: int


@dataclass(frozen=True, kw_only=True, slots=True)
class InstanceState:
    state: str  # JSON text
    version: int
    worker_id: str | None
    epoch: int


@dataclass(frozen=True, kw_only=True, slots=True)
class InstanceInfo:
    tenant: str
    actor: str
    instance_id: str
    state: str  # JSON text
    version: int
    worker_id: str | None
    epoch: int
    pending: int
    in_flight: int
    dead: int
    created_at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class DeadLetter:
    queue_id: int
    event_id: int
    stream: str
    group_id: str
    data: str  # JSON text
    attempts: int
    crash_attempts: int  # times its executor died while running it alone
    error: str | None
    dead_at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueDepth:
    tenant: str
    actor: str
    instance_id: str
    depth: int  # pending + claimed rows


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerRow:
    worker_id: str
    hostname: str
    pid: int
    started_at: float
    heartbeat_at: float
    stopped_at: float | None


@dataclass(frozen=True, kw_only=True, slots=True)
class NewTimer:
    tenant: str
    stream: str
    data: str  # JSON text
    fire_at_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class DueTimer:
    timer_id: int
    tenant: str
    stream: str
    data: str  # JSON text
    fire_at_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Takeover:
    """What `claim_orphans` did: instances now owned by the caller, rows put back to pending."""

    instances: int
    requeued: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ActorCounts:
    """What one actor holds in the store (of one tenant, or of all): for `GET /v1/actors`."""

    actor: str
    instances: int
    pending: int
    in_flight: int  # claimed, not yet completed
    dead: int


class CrashCharge(Enum):
    """What `charge_crash` did to the row an executor died running."""

    PENDING = "pending"  # counted, and back to pending for another try
    DEAD = "dead"  # counted, and a dead letter now (crash_attempts reached the limit)
    FENCED = "fenced"  # not this worker's claim any more (taken over): nothing changed


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutorRow:
    """The latest life of one (worker, tenant) executor process, as its worker recorded it; or,
    with `tenant` None, of one of a worker's warm spares (`SpareRow`)."""

    worker_id: str
    tenant: str | None
    pid: int | None
    state: str  # SPARE, STARTING, READY, DRAINING, DYING, STOPPED, FAILED
    started_at: float
    boot_ms: float | None
    dispatches: int
    active_dispatch: int
    crashes: int
    isolation: str
    stop_reason: str | None
    updated_at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class SpareRow:
    """The latest warm spare in one of a worker's spare slots, as its worker recorded it: SPARE
    while it waits, STOPPED once bound to a tenant (then a tenant's `ExecutorRow`) or stopped,
    FAILED if it died unbound."""

    worker_id: str
    slot: int
    pid: int | None
    state: str
    started_at: float
    boot_ms: float | None  # its own boot: spawn -> ready to be bound
    isolation: str
    stop_reason: str | None
    updated_at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class FleetCounts:
    """One worker's part of the fleet (`fleet_counts`): instances it owns, moves under way at
    either end, and the pending rows of what it owns."""

    worker_id: str
    owned: int
    moving_out: int
    moving_in: int
    pending: int


@dataclass(frozen=True, kw_only=True, slots=True)
class MoveOrder:
    """A move its giver must finish: the instance, its taker, the epoch it was marked under."""

    ref: InstanceRef
    taker: str
    epoch: int


class MoveResult(Enum):
    MOVED = "moved"  # the taker owns it now, under a new epoch
    CANCELLED = "cancelled"  # the taker is gone: the giver keeps it, under a new epoch
    GONE = "gone"  # not the giver's any more (taken over, or finished already): nothing changed


# Who owns an instance an append creates (or a takeover re-owns): one worker (or none) for
# all, or a rule that names it per instance (placement, `yoke.actors.placement`).
Owner = str | None | Callable[[InstanceRef], str | None]


def owner_of(owner: Owner, tenant: str, actor: str, instance_id: str) -> str | None:
    if owner is None or isinstance(owner, str):
        return owner
    return owner(InstanceRef(tenant=tenant, actor=actor, instance_id=instance_id))
