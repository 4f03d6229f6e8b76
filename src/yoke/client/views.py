"""What the client returns for the scheduler's reads: `GET /v1/scheduler` and the dashboard's
`/v1` twins (overview, queue, fairness, series, timers), as frozen dataclasses with the fields
of the server's answers (a test keeps them equal to the answer schemas).

A tenant's token sees its own sessions by name and every other tenant's only as sums, as the
server answers it. This module must never do I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionLoad:
    session: str
    running: int
    queued: int


@dataclass(frozen=True, kw_only=True, slots=True)
class OthersLoad:
    """Every other tenant's sessions as one sum, without names (what a tenant is shown)."""

    running: int
    queued: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Pick:
    start_id: str
    session: str
    workflow: str
    priority: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Scheduler:
    """Slots in use, the queue by session and the next picks."""

    running: int
    queued: int
    max_running: int | None
    slots_free: int | None
    ledger: dict[str, int]
    sessions: tuple[SessionLoad, ...]
    others: OthersLoad | None
    next_picks: tuple[Pick, ...]
    fairness: float
    shutting_down: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class Overview:
    principal: str
    tenant: str | None
    roles: tuple[str, ...]
    slots_used: int
    slots_total: int | None
    running: int
    queued: int
    refused_last_minute: int | None
    starts_per_second: float
    workers_live: int | None
    executors_live: int | None
    executor_mode: str
    oldest_wait_seconds: float | None
    shutting_down: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueItem:
    pick: int | None  # predicted pick order, 1 = next; None when held by a limit
    position: int | None
    start_id: str
    session: str
    workflow: str
    priority: int
    age_seconds: float
    blocked_by: str | None
    why: str


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueLimits:
    max_running: int | None
    max_running_per_session: int | None
    max_running_per_workflow: int | dict[str, int] | None
    max_queued: int | None
    on_limit: str
    set_by: str | None
    set_at: float | None


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduledStart:
    """A delayed start not yet due: it joins the queue at `due_at`."""

    start_id: str
    tenant: str
    session: str
    workflow: str
    priority: int
    due_at: float | None  # epoch seconds


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueView:
    """Queued starts in predicted pick order (the first `shown`), the delayed starts not yet
    due (soonest first), and the limits."""

    queued: int | None
    shown: int
    query: str | None
    items: tuple[QueueItem, ...]
    scheduled: tuple[ScheduledStart, ...]
    limits: QueueLimits
    slots_used: int


@dataclass(frozen=True, kw_only=True, slots=True)
class FairnessItem:
    session: str
    weight: float
    queued: int
    running: int
    starts: int
    share_starts: float
    share_running: float | None  # OPERATOR or ADMIN
    target_share: float | None  # OPERATOR or ADMIN
    wait_p50: float | None
    wait_p99: float | None
    starving: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class Refused:
    rate: int
    queue_bound: int
    limit: int


@dataclass(frozen=True, kw_only=True, slots=True)
class FairnessTenant:
    tenant: str
    weight: float
    queued: int
    running: int
    share_running: float | None  # OPERATOR or ADMIN
    target_share: float | None  # OPERATOR or ADMIN
    starts: int
    refused_last_minute: Refused


@dataclass(frozen=True, kw_only=True, slots=True)
class Folded:
    tenant: str
    starts: int
    wait_p50: float | None
    wait_p99: float | None


@dataclass(frozen=True, kw_only=True, slots=True)
class ActorTenant:
    tenant: str
    weight: float
    processed: int
    backlog: int
    oldest_pending: float | None
    recent_share: float
    wait_p50: float | None
    wait_p99: float | None


@dataclass(frozen=True, kw_only=True, slots=True)
class ActorFairness:
    jain: float | None
    items: tuple[ActorTenant, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Fairness:
    """Tenants first, then sessions, over a window: shares of starts and slots against the
    weights, refusals, waits."""

    window_seconds: int
    tenants: tuple[FairnessTenant, ...]
    jain_tenants: float | None
    jain: float
    sessions_with_work: int | None
    starts: int
    running: int
    query: str | None
    items: tuple[FairnessItem, ...]
    folded: tuple[Folded, ...]
    actors: ActorFairness | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Series:
    """Per second over the last `seconds`: starts, refusals, Jain's index, waits."""

    seconds: int
    t: tuple[float, ...]
    sessions: tuple[str, ...]
    starts: tuple[float, ...]
    refused: tuple[float, ...] | None
    jain: tuple[float | None, ...] | None
    waits: dict[str, tuple[float | None, ...]]


@dataclass(frozen=True, kw_only=True, slots=True)
class Timer:
    timer_id: int
    tenant: str
    stream: str
    fire_at: float
    due_in_seconds: float
    data: Any = None
