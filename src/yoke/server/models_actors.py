"""The answers of the actor routes (`/v1/actors...`, `/v1/workers`): dicts and their schemas.

As in `models`, answers are built as plain dicts by the `*_json` functions and the `*Out` models
describe them in `/openapi.json` (the tests check one against the other). Event data, state and
dead letters travel as the JSON they were stored as. A list's paging cursor is opaque to
clients: the (tenant, instance id) of the last item, as URL-safe base64 of a JSON pair.

This module must never call the store or the runtime: it only converts between JSON and values.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Literal, Protocol
from urllib.parse import quote, urlencode

from pydantic import BaseModel, Field

from yoke.actors.definitions import ActorDef, GroupBy
from yoke.actors.inspection import ActorView, ExecutorRowView, InstanceView, WorkerView
from yoke.errors import BadValue
from yoke.store.actor_records import DeadLetter, InstanceRef
from yoke.store.text import check_text

MAX_CURSOR = 2048


class QueueOut(BaseModel):
    mode: Literal["fifo", "custom"]
    concurrency: int = Field(description="concurrent process() calls per (instance, group)")
    group_by: str | None = Field(
        description="the data field that names the group, `<function name>` for a function, "
        "or null (one group per instance)"
    )


class BackoffOut(BaseModel):
    initial: float
    maximum: float
    factor: float
    max_attempts: int | None = Field(description="failed attempts before a dead letter")


class ActorCountsOut(BaseModel):
    instances: int
    pending: int
    in_flight: int = Field(description="claimed by a worker, not yet completed")
    dead_letters: int


class ActorOut(BaseModel):
    name: str
    subscribe: list[str]
    key: str | None = Field(description="the event field naming the instance; null: one")
    queue: QueueOut
    backoff: BackoffOut
    counts: ActorCountsOut


class ActorListOut(BaseModel):
    tenant: str | None = Field(description="the tenant counted; null: every tenant")
    items: list[ActorOut]


class InstanceLinks(BaseModel):
    self: str


class InstanceSummaryOut(BaseModel):
    tenant: str
    actor: str
    instance_id: str
    worker_id: str | None = Field(description="the owning worker; null while unowned")
    epoch: int = Field(description="owner epoch, bumped by every change of owner")
    version: int = Field(description="state version, bumped by every state update")
    queue_depth: int = Field(description="pending + in flight")
    pending: int
    in_flight: int
    dead_letter_count: int
    created_at: float
    links: InstanceLinks


class InstancePageOut(BaseModel):
    items: list[InstanceSummaryOut]
    next_cursor: str | None


class DeadLetterOut(BaseModel):
    queue_id: int
    event_id: int
    stream: str
    group_id: str
    data: Any
    attempts: int
    crash_attempts: int = Field(description="times its executor process died while running it")
    error: str | None
    dead_at: float


class InstanceOut(InstanceSummaryOut):
    state: Any
    dead_letters: list[DeadLetterOut] = Field(description="the oldest dead letters, bounded")


class WorkerOut(BaseModel):
    worker_id: str
    hostname: str
    pid: int
    started_at: float
    heartbeat_at: float
    stopped_at: float | None
    status: Literal["live", "stale", "stopped"]
    instances: int = Field(description="instances it owns now")
    share: float = Field(description="its part of all owned instances, 0..1")
    moving_out: int = Field(description="instances being handed over from it now")
    moving_in: int = Field(description="instances being handed over to it now")
    pending: int = Field(description="pending events of the instances it owns")


class ExecutorOut(BaseModel):
    tenant: str | None = Field(description="null for a worker's warm spare (bound to none)")
    worker_id: str
    pid: int | None
    state: Literal["SPARE", "STARTING", "READY", "DRAINING", "DYING", "STOPPED", "FAILED"]
    started_at: float
    boot_ms: float | None = Field(
        description="spawn to READY, in milliseconds (for an executor that was a warm spare: "
        "its bind to READY; for a spare: its own boot, spawn to ready to be bound)"
    )
    dispatches: int = Field(description="process() calls sent to it")
    active_dispatch: int = Field(description="calls running in it, as last recorded")
    crashes: int = Field(description="failed executor lives of this tenant on this worker")
    isolation: str = Field(description="the isolation tiers in force, e.g. process+rlimit-as")
    stop_reason: str | None
    updated_at: float
    worker_status: Literal["live", "stale", "stopped"] | None


class ExecutorListOut(BaseModel):
    tenant: str | None = Field(description="the tenant asked for, or null for all")
    items: list[ExecutorOut]


class WorkerListOut(BaseModel):
    stale_after: float = Field(description="seconds of silence after which a worker is stale")
    forget_after: float = Field(
        description="seconds stopped or silent after which a worker owning nothing is no longer "
        "listed (and its row is deleted)"
    )
    placement: Literal["balanced", "tenant", "creator"] = Field(
        description="where new instances go (YOKE_PLACEMENT)"
    )
    moves: int = Field(description="hand-overs under way in the fleet")
    items: list[WorkerOut]


def group_by_text(g: GroupBy) -> str | None:
    if g is None or isinstance(g, str):
        return g
    return f"<function {getattr(g, '__qualname__', type(g).__name__)}>"


def _definition_json(d: ActorDef) -> dict[str, Any]:
    b = d.backoff
    return {
        "name": d.name,
        "subscribe": list(d.subscribe),
        "key": d.key,
        "queue": {
            "mode": d.queue.mode,
            "concurrency": d.queue.concurrency,
            "group_by": group_by_text(d.queue.group_by),
        },
        "backoff": {
            "initial": b.initial,
            "maximum": b.maximum,
            "factor": b.factor,
            "max_attempts": b.max_attempts,
        },
    }


def actor_json(v: ActorView) -> dict[str, Any]:
    c = v.counts
    return {
        **_definition_json(v.definition),
        "counts": {
            "instances": c.instances,
            "pending": c.pending,
            "in_flight": c.in_flight,
            "dead_letters": c.dead,
        },
    }


def instance_href(actor: str, instance_id: str, tenant: str) -> str:
    path = f"/v1/actors/{quote(actor, safe='')}/instances/{quote(instance_id, safe='')}"
    return f"{path}?{urlencode({'tenant': tenant})}"


class _Instance(Protocol):
    """What an instance's summary reads: an `InstanceInfo` row or an `InstanceView`."""

    @property
    def tenant(self) -> str: ...
    @property
    def actor(self) -> str: ...
    @property
    def instance_id(self) -> str: ...
    @property
    def worker_id(self) -> str | None: ...
    @property
    def epoch(self) -> int: ...
    @property
    def version(self) -> int: ...
    @property
    def pending(self) -> int: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def dead(self) -> int: ...
    @property
    def created_at(self) -> float: ...


def instance_summary_json(i: _Instance) -> dict[str, Any]:
    return {
        "tenant": i.tenant,
        "actor": i.actor,
        "instance_id": i.instance_id,
        "worker_id": i.worker_id,
        "epoch": i.epoch,
        "version": i.version,
        "queue_depth": i.pending + i.in_flight,
        "pending": i.pending,
        "in_flight": i.in_flight,
        "dead_letter_count": i.dead,
        "created_at": i.created_at,
        "links": {"self": instance_href(i.actor, i.instance_id, i.tenant)},
    }


def dead_letter_json(d: DeadLetter) -> dict[str, Any]:
    return {
        "queue_id": d.queue_id,
        "event_id": d.event_id,
        "stream": d.stream,
        "group_id": d.group_id,
        "data": json.loads(d.data),
        "attempts": d.attempts,
        "crash_attempts": d.crash_attempts,
        "error": d.error,
        "dead_at": d.dead_at,
    }


def instance_json(v: InstanceView) -> dict[str, Any]:
    return {
        **instance_summary_json(v),
        "state": v.state,
        "dead_letters": [dead_letter_json(d) for d in v.dead_letters],
    }


def worker_json(w: WorkerView) -> dict[str, Any]:
    r = w.row
    return {
        "worker_id": r.worker_id,
        "hostname": r.hostname,
        "pid": r.pid,
        "started_at": r.started_at,
        "heartbeat_at": r.heartbeat_at,
        "stopped_at": r.stopped_at,
        "status": w.status.value,
        "instances": w.instances,
        "share": round(w.share, 4),
        "moving_out": w.moving_out,
        "moving_in": w.moving_in,
        "pending": w.pending,
    }


def encode_cursor(after: InstanceRef) -> str:
    pair = json.dumps([after.tenant, after.instance_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(pair.encode()).decode().rstrip("=")


def decode_cursor(text: str, actor: str) -> InstanceRef:
    """The position a `next_cursor` names; anything else is a `BadValue` (422)."""
    bad = BadValue("cursor must be the next_cursor of an earlier page")
    if not text or len(text) > MAX_CURSOR or not text.isascii():
        raise bad
    try:
        pair = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError):
        raise bad from None
    if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
        raise bad
    tenant, instance_id = (check_text(x, "cursor") for x in pair)
    return InstanceRef(tenant=tenant, actor=actor, instance_id=instance_id)


def executor_json(v: ExecutorRowView) -> dict[str, Any]:
    r = v.row
    return {
        "tenant": r.tenant,
        "worker_id": r.worker_id,
        "pid": r.pid,
        "state": r.state,
        "started_at": r.started_at,
        "boot_ms": r.boot_ms,
        "dispatches": r.dispatches,
        "active_dispatch": r.active_dispatch,
        "crashes": r.crashes,
        "isolation": r.isolation,
        "stop_reason": r.stop_reason,
        "updated_at": r.updated_at,
        "worker_status": None if v.worker is None else v.worker.value,
    }
