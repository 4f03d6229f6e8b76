"""What the client returns for the actor routes: actors, their instances, the workers and the
executors, as frozen dataclasses with the fields of the server's answers (a test keeps them
equal to the answer schemas). This module must never do I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueSettings:
    mode: str  # fifo or custom
    concurrency: int
    group_by: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class BackoffSettings:
    initial: float
    maximum: float
    factor: float
    max_attempts: int | None


@dataclass(frozen=True, kw_only=True, slots=True)
class ActorCounts:
    instances: int
    pending: int
    in_flight: int
    dead_letters: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Actor:
    name: str
    subscribe: tuple[str, ...]
    key: str | None
    queue: QueueSettings
    backoff: BackoffSettings
    counts: ActorCounts


@dataclass(frozen=True, kw_only=True, slots=True)
class ActorList:
    tenant: str | None  # the tenant counted; None: every tenant
    items: tuple[Actor, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class InstanceSummary:
    tenant: str
    actor: str
    instance_id: str
    worker_id: str | None
    epoch: int
    version: int
    queue_depth: int
    pending: int
    in_flight: int
    dead_letter_count: int
    created_at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class InstancePage:
    items: tuple[InstanceSummary, ...]
    next_cursor: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class DeadLetter:
    queue_id: int
    event_id: int
    stream: str
    group_id: str
    data: Any
    attempts: int
    crash_attempts: int
    error: str | None
    dead_at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Instance(InstanceSummary):
    """One instance: its summary, its state and its oldest dead letters."""

    state: Any
    dead_letters: tuple[DeadLetter, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Worker:
    worker_id: str
    hostname: str
    pid: int
    started_at: float
    heartbeat_at: float
    stopped_at: float | None
    status: str  # live, stale or stopped
    instances: int
    share: float
    moving_out: int
    moving_in: int
    pending: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Workers:
    stale_after: float
    forget_after: float
    placement: str
    moves: int
    items: tuple[Worker, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Executor:
    tenant: str | None  # None: a worker's warm spare
    worker_id: str
    pid: int | None
    state: str
    started_at: float
    boot_ms: float | None
    dispatches: int
    active_dispatch: int
    crashes: int
    isolation: str
    stop_reason: str | None
    updated_at: float
    worker_status: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Executors:
    tenant: str | None
    items: tuple[Executor, ...]
