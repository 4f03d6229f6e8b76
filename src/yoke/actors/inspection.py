"""Read-only views of one app's actors: what `GET /v1/actors`, `/v1/actors/{name}/instances`,
`/v1/workers` and `/v1/executors` answer, and what the metrics scrape reads.

Each view joins the app's definitions (the registry) with what the store holds; a name the app
does not define is `NotFound`, even if the database knows it, because the API describes this
app's actors. Tenants are passed in by the caller (the server decides who may see which); `None`
means every tenant. This module must never write to the store or claim anything, and reads time
only through its `Clock`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from yoke.actors.definitions import ActorDef, ActorRegistry
from yoke.actors.protocol import ActorStore
from yoke.clock import Clock
from yoke.errors import NotFound
from yoke.store.actor_records import (
    ActorCounts,
    DeadLetter,
    DueTimer,
    ExecutorRow,
    FleetCounts,
    InstanceInfo,
    InstanceRef,
    WorkerRow,
)

DEAD_LETTERS_SHOWN = 20


class WorkerStatus(Enum):
    LIVE = "live"  # heartbeat within `stale_after`: owns and drains its instances
    STALE = "stale"  # silent for `stale_after`: its instances are taken over by live workers
    STOPPED = "stopped"  # left cleanly; its instances were released


def forgotten(w: WorkerRow, *, now: float, forget_after: float) -> bool:
    """Stopped, or silent, for `forget_after` seconds: once it owns nothing, the heartbeats of
    the live workers delete it (`forget_workers`), and the views no longer list it."""
    return (w.heartbeat_at if w.stopped_at is None else w.stopped_at) < now - forget_after


def worker_status(w: WorkerRow, *, now: float, stale_after: float) -> WorkerStatus:
    if w.stopped_at is not None:
        return WorkerStatus.STOPPED
    return WorkerStatus.LIVE if w.heartbeat_at >= now - stale_after else WorkerStatus.STALE


@dataclass(frozen=True, kw_only=True, slots=True)
class ActorView:
    definition: ActorDef
    counts: ActorCounts


@dataclass(frozen=True, kw_only=True, slots=True)
class InstancePage:
    items: tuple[InstanceInfo, ...]
    next_after: InstanceRef | None  # where the next page starts; None on the last page


@dataclass(frozen=True, kw_only=True, slots=True)
class InstanceView:
    """`GET /v1/actors/{name}/instances/{id}`: state, queue depth, in flight, dead letters."""

    tenant: str
    actor: str
    instance_id: str
    state: Any
    version: int
    worker_id: str | None
    epoch: int  # the owner epoch: bumped by every change of owner
    queue_depth: int  # pending + in flight
    pending: int
    in_flight: int  # claimed, not yet completed
    dead: int
    dead_letters: tuple[DeadLetter, ...]  # the oldest, at most the number asked for
    created_at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutorRowView:
    row: ExecutorRow
    worker: WorkerStatus | None  # None: no such worker row


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerView:
    row: WorkerRow
    status: WorkerStatus
    instances: int  # owned now
    share: float  # of all owned instances (0 when none is owned)
    moving_out: int  # hand-overs under way from it
    moving_in: int  # hand-overs under way to it
    pending: int  # pending rows of the instances it owns


class ActorInspector:
    def __init__(
        self,
        *,
        registry: ActorRegistry,
        store: Callable[[], ActorStore],
        clock: Clock,
        stale_after: float,
        forget_after: float = 3600.0,
    ) -> None:
        self._registry = registry
        self._store = store  # a getter: the store is attached only while the app runs
        self._clock = clock
        self.stale_after = stale_after
        self.forget_after = forget_after

    def __repr__(self) -> str:
        return f"ActorInspector(actors={self._registry.names()}, stale_after={self.stale_after})"

    def definition(self, actor: str) -> ActorDef:
        d = self._registry.get(actor)
        if d is None:
            raise NotFound(f"no actor {actor!r}")
        return d

    async def actors(self, *, tenant: str | None) -> list[ActorView]:
        counts = {c.actor: c for c in await self._store().actor_counts(tenant=tenant)}
        return [
            ActorView(definition=v.definition, counts=counts.get(v.definition.name, v.counts))
            for v in self.uncounted()
        ]

    def uncounted(self) -> list[ActorView]:
        """The definitions with every count zero (what a tenant with nothing stored has)."""
        return [
            ActorView(
                definition=self.definition(name),
                counts=ActorCounts(actor=name, instances=0, pending=0, in_flight=0, dead=0),
            )
            for name in self._registry.names()
        ]

    async def instances(
        self, actor: str, *, tenant: str | None, after: InstanceRef | None, limit: int
    ) -> InstancePage:
        self.definition(actor)
        rows = await self._store().instances_page(
            actor, tenant=tenant, after=after, limit=limit + 1
        )
        items = tuple(rows[:limit])
        more = len(rows) > limit
        return InstancePage(items=items, next_after=_ref(items[-1]) if more else None)

    async def instance(
        self,
        actor: str,
        instance_id: str,
        *,
        tenant: str,
        dead_letters: int = DEAD_LETTERS_SHOWN,
    ) -> InstanceView:
        self.definition(actor)
        store = self._store()
        ref = InstanceRef(tenant=tenant, actor=actor, instance_id=instance_id)
        info = await store.get_instance(ref)
        if info is None:
            raise no_instance(actor, instance_id)
        dead = await store.dead_letters(ref, limit=dead_letters) if info.dead else []
        return InstanceView(
            tenant=tenant,
            actor=actor,
            instance_id=instance_id,
            state=json.loads(info.state),
            version=info.version,
            worker_id=info.worker_id,
            epoch=info.epoch,
            queue_depth=info.pending + info.in_flight,
            pending=info.pending,
            in_flight=info.in_flight,
            dead=info.dead,
            dead_letters=tuple(dead),
            created_at=info.created_at,
        )

    async def timers(self, *, limit: int, tenant: str | None = None) -> list[DueTimer]:
        """The next `limit` timers not fired yet, of `tenant` or every tenant's, soonest
        first."""
        if tenant is not None:
            return await self._store().tenant_timers(tenant, limit=limit)
        return await self._store().upcoming_timers(limit=limit)

    async def workers(self) -> list[WorkerView]:
        store = self._store()
        rows = await store.fleet.list_workers()
        counts = {c.worker_id: c for c in await store.fleet.fleet_counts(with_pending=True)}
        total = sum(c.owned for c in counts.values())
        none = FleetCounts(worker_id="", owned=0, moving_out=0, moving_in=0, pending=0)
        now = self._clock.wall()
        views = []
        for w in rows:
            c = counts.get(w.worker_id, none)
            if forgotten(w, now=now, forget_after=self.forget_after) and not (
                c.owned or c.moving_in
            ):
                continue  # the next heartbeat of a live worker deletes it
            views.append(
                WorkerView(
                    row=w,
                    status=worker_status(w, now=now, stale_after=self.stale_after),
                    instances=c.owned,
                    share=c.owned / total if total else 0.0,
                    moving_out=c.moving_out,
                    moving_in=c.moving_in,
                    pending=c.pending,
                )
            )
        return views

    async def executors(self, *, tenant: str | None, limit: int) -> list[ExecutorRowView]:
        """Executor processes as their workers recorded them (of `tenant`, or of all), each
        with the status of its worker: a stale worker's rows are what it last wrote; a
        forgotten worker's are left out."""
        store = self._store()
        rows = await store.executors.list_executors(tenant=tenant, limit=limit)
        now = self._clock.wall()
        workers = await store.fleet.list_workers()
        gone = {
            w.worker_id for w in workers if forgotten(w, now=now, forget_after=self.forget_after)
        }
        status = {
            w.worker_id: worker_status(w, now=now, stale_after=self.stale_after) for w in workers
        }
        return [
            ExecutorRowView(row=r, worker=status.get(r.worker_id))
            for r in rows
            if r.worker_id not in gone
        ]


def no_instance(actor: str, instance_id: str) -> NotFound:
    return NotFound(f"no instance {instance_id!r} of actor {actor!r}")


def _ref(info: InstanceInfo) -> InstanceRef:
    return InstanceRef(tenant=info.tenant, actor=info.actor, instance_id=info.instance_id)
