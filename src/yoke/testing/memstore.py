"""An in-memory `ActorStore`: the reference semantics of the actor verbs, for unit tests.

It is what the SQL backends must do, written as plain Python over dicts, and it yields to the
event loop in every verb so interleavings resemble a real store's.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from yoke.errors import IdempotencyConflict
from yoke.store import NewControl
from yoke.store.actor_records import (
    CRASH_ATTEMPTS,
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
    QueueStatus,
    SpareRow,
    Takeover,
    WorkerRow,
    owner_of,
)
from yoke.store.fleetverbs import DIED
from yoke.store.leaseverbs import Lease
from yoke.store.tenantverbs import TenantRow, TenantValues, Tokens


@dataclass
class _Row:
    queue_id: int
    event_id: int
    ref: InstanceRef
    group_id: str
    stream: str
    data: str
    appended_at: float
    status: QueueStatus = QueueStatus.PENDING
    attempts: int = 0
    available_at: float = 0.0
    claimed_by: str | None = None
    claim_epoch: int = 0
    error: str | None = None
    dead_at: float | None = None
    crash_attempts: int = 0
    claim_id: int | None = None  # the claim that took it (`unclaim_lost`)
    suspect: bool = False  # claimed by a worker that died
    solo: bool = False  # running alone on its worker


@dataclass
class _Instance:
    ref: InstanceRef
    worker_id: str | None
    epoch: int = 1
    state: str = "{}"
    version: int = 0
    created_at: float = 0.0
    moving_to: str | None = None


@dataclass
class MemoryActorStore:
    rows: dict[int, _Row] = field(default_factory=dict)
    instances: dict[InstanceRef, _Instance] = field(default_factory=dict)
    timers: dict[int, NewTimer] = field(default_factory=dict)
    workers: dict[str, WorkerRow] = field(default_factory=dict)
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    calls: dict[str, int] = field(default_factory=dict)
    executor_rows: dict[tuple[str, str | None], ExecutorRow] = field(default_factory=dict)
    spares: dict[tuple[str, int], SpareRow] = field(default_factory=dict)
    lease_rows: dict[str, Lease] = field(default_factory=dict)
    clock: Callable[[], float] = time.time  # the "database's" clock of the leases
    tenant_rows: dict[str, TenantRow] = field(default_factory=dict)
    buckets: dict[tuple[str, str], float] = field(default_factory=dict)

    # Its parts by entity (`ActorStore.fleet`, ...): this one object holds every verb.
    @property
    def fleet(self) -> MemoryActorStore:
        return self

    @property
    def executors(self) -> MemoryActorStore:
        return self

    @property
    def tenants(self) -> MemoryActorStore:
        return self

    @property
    def leases(self) -> MemoryActorStore:
        return self

    tenant_running: dict[tuple[str, str], int] = field(default_factory=dict)
    event_keys: dict[tuple[str, str], tuple[EventKey, int]] = field(default_factory=dict)
    event_key_tenants: dict[tuple[str, str], str] = field(default_factory=dict)
    event_keys_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def _count(self, verb: str) -> None:
        self.calls[verb] = self.calls.get(verb, 0) + 1

    async def append_events(
        self, events: Sequence[NewEvent], *, owner: Owner, now: float
    ) -> list[int]:
        await asyncio.sleep(0)
        self._count("append_events")
        out = []
        for e in events:
            eid = next(self.ids)
            out.append(eid)
            for t in e.targets:
                ref = InstanceRef(tenant=e.tenant, actor=t.actor, instance_id=t.instance_id)
                if ref not in self.instances:
                    who = owner_of(owner, ref.tenant, ref.actor, ref.instance_id)
                    self.instances[ref] = _Instance(ref, who, created_at=now)
                qid = next(self.ids)
                self.rows[qid] = _Row(qid, eid, ref, t.group_id, e.stream, e.data, now)
        return out

    async def append_event_once(
        self, event: NewEvent, *, key: EventKey, owner: Owner, now: float
    ) -> tuple[int, bool]:
        slot = (key.principal, key.key)
        async with self.event_keys_lock:  # the claim and the append are one step
            kept = self.event_keys.get(slot)
            if kept is not None and kept[0].expires_at > now:
                if kept[0].fingerprint != key.fingerprint:
                    raise IdempotencyConflict(f"Idempotency-Key {key.key!r} was used before")
                return kept[1], False
            (eid,) = await self.append_events([event], owner=owner, now=now)
            self.event_keys.pop(slot, None)
            self.event_keys[slot] = (key, eid)
            self.event_key_tenants[slot] = event.tenant
            if key.keep_at_most is not None:  # the tenant's oldest keys go first
                mine = [s for s, t in self.event_key_tenants.items() if t == event.tenant]
                mine.sort(key=lambda s: self.event_keys[s][0].expires_at)
                for old in mine[: max(0, len(mine) - key.keep_at_most)]:
                    del self.event_keys[old], self.event_key_tenants[old]
            return eid, True

    def _ours(self, r: _Row, worker_id: str) -> _Instance | None:
        inst = self.instances[r.ref]
        return inst if inst.worker_id == worker_id else None

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
        await asyncio.sleep(0)
        self._count("claim_next")
        pending = [
            r
            for r in self.rows.values()
            if r.status is QueueStatus.PENDING
            and self._ours(r, worker_id) is not None
            and (tenants is None or r.ref.tenant in tenants)
        ]
        names = sorted({r.ref.tenant for r in pending})
        chosen = [t for t in names if t > after_tenant] + [t for t in names if t <= after_tenant]
        chosen = chosen[:limit]
        if not chosen:
            return []
        even = -(-limit // len(chosen))
        quotas = {t: even if quota is None else quota(t) for t in chosen}
        taken: dict[str, int] = {}
        out: list[ClaimedEvent] = []
        for qid in sorted(self.rows):
            r = self.rows[qid]
            inst = self._ours(r, worker_id)
            if inst is None or r.available_at > now or r.status is not QueueStatus.PENDING:
                continue
            if taken.get(r.ref.tenant, 0) >= quotas.get(r.ref.tenant, 0):
                continue
            if self._behind_backoff(r, now):
                continue
            taken[r.ref.tenant] = taken.get(r.ref.tenant, 0) + 1
            out.append(_claim(r, worker_id, inst.epoch, claim_id))
        return out

    async def unclaim_lost(self, worker_id: str, claim_id: int) -> int:
        await asyncio.sleep(0)
        self._count("unclaim_lost")
        lost = [
            r
            for r in self.rows.values()
            if r.claim_id == claim_id
            and r.status is QueueStatus.CLAIMED
            and r.claimed_by == worker_id
        ]
        for r in lost:
            r.status, r.claimed_by, r.claim_id = QueueStatus.PENDING, None, None
        return len(lost)

    def _behind_backoff(self, r: _Row, now: float) -> bool:
        """An earlier row of its group was put back during its backoff and is not due yet."""
        return any(
            h.queue_id < r.queue_id
            and h.status is QueueStatus.PENDING
            and h.attempts > 0
            and h.ref == r.ref
            and h.group_id == r.group_id
            and h.available_at > now
            for h in self.rows.values()
        )

    async def list_pending(
        self, worker_id: str, ref: InstanceRef, group_id: str, *, limit: int, now: float
    ) -> list[PendingEvent]:
        await asyncio.sleep(0)
        self._count("list_pending")
        inst = self.instances.get(ref)
        if inst is None or inst.worker_id != worker_id:
            return []
        rows = [
            self.rows[qid]
            for qid in sorted(self.rows)
            if self.rows[qid].ref == ref
            and self.rows[qid].group_id == group_id
            and self.rows[qid].status is QueueStatus.PENDING
            and self.rows[qid].available_at <= now
        ]
        return [
            PendingEvent(
                queue_id=r.queue_id,
                event_id=r.event_id,
                tenant=ref.tenant,
                actor=ref.actor,
                instance_id=ref.instance_id,
                group_id=r.group_id,
                stream=r.stream,
                data=r.data,
                attempts=r.attempts,
                appended_at=r.appended_at,
            )
            for r in rows[:limit]
        ]

    async def claim_event(
        self, worker_id: str, queue_id: int, *, epoch: int
    ) -> ClaimedEvent | None:
        await asyncio.sleep(0)
        self._count("claim_event")
        r = self.rows.get(queue_id)
        if r is None or r.status is not QueueStatus.PENDING:
            return None
        inst = self.instances[r.ref]
        if inst.worker_id != worker_id or inst.epoch != epoch:
            return None
        return _claim(r, worker_id, epoch)

    def _fenced_row(self, worker_id: str, c: Completion) -> _Row | None:
        r = self.rows.get(c.queue_id)
        if r is None or r.status is not QueueStatus.CLAIMED:
            return None
        inst = self.instances[r.ref]
        if (
            r.claimed_by != worker_id
            or r.claim_epoch != c.epoch
            or inst.epoch != c.epoch
            or inst.worker_id != worker_id
        ):
            return None
        return r

    async def complete(self, worker_id: str, done: Sequence[Completion]) -> list[int]:
        await asyncio.sleep(0)
        self._count("complete")
        out = []
        for c in done:
            if self._fenced_row(worker_id, c) is not None:
                del self.rows[c.queue_id]
                out.append(c.queue_id)
        return out

    async def requeue(
        self, worker_id: str, done: Completion, *, available_at: float, error: str | None
    ) -> bool:
        await asyncio.sleep(0)
        self._count("requeue")
        r = self._fenced_row(worker_id, done)
        if r is None:
            return False
        r.attempts += 1
        r.available_at = available_at
        r.error = error
        r.suspect = r.solo = False
        return True

    async def mark_solo(self, worker_id: str, done: Completion) -> bool:
        await asyncio.sleep(0)
        r = self._fenced_row(worker_id, done)
        if r is None:
            return False
        r.solo = True
        return True

    async def dead_letter(
        self, worker_id: str, done: Completion, *, error: str | None, now: float
    ) -> bool:
        await asyncio.sleep(0)
        r = self._fenced_row(worker_id, done)
        if r is None:
            return False
        r.attempts += 1
        r.status, r.error, r.dead_at = QueueStatus.DEAD, error, now
        r.solo = False
        return True

    async def release_claims(self, worker_id: str, done: Sequence[Completion]) -> list[int]:
        await asyncio.sleep(0)
        self._count("release_claims")
        out = []
        for c in done:
            r = self._fenced_row(worker_id, c)
            if r is not None:
                r.status, r.claimed_by, r.solo = QueueStatus.PENDING, None, False
                out.append(c.queue_id)
        return sorted(out)

    async def charge_crash(
        self, worker_id: str, done: Completion, *, error: str, dead_after: int, now: float
    ) -> CrashCharge:
        await asyncio.sleep(0)
        r = self._fenced_row(worker_id, done)
        if r is None:
            return CrashCharge.FENCED
        r.crash_attempts += 1
        r.error, r.claimed_by, r.solo = error, None, False
        if r.crash_attempts >= dead_after:
            r.status, r.dead_at = QueueStatus.DEAD, now
            return CrashCharge.DEAD
        r.status = QueueStatus.PENDING
        return CrashCharge.PENDING

    def _pending_of(self, worker_id: str) -> set[str]:
        return {
            r.ref.tenant
            for r in self.rows.values()
            if r.status is QueueStatus.PENDING and self._ours(r, worker_id) is not None
        }

    async def pending_tenants(self, worker_id: str, *, after: str = "", limit: int) -> list[str]:
        await asyncio.sleep(0)
        return sorted(t for t in self._pending_of(worker_id) if t > after)[:limit]

    async def tenants_with_pending(self, worker_id: str, tenants: Sequence[str]) -> list[str]:
        await asyncio.sleep(0)
        return sorted(self._pending_of(worker_id) & set(tenants))

    async def timer_tenants(
        self, worker_id: str, *, before_ms: int, limit: int
    ) -> list[tuple[str, int]]:
        await asyncio.sleep(0)
        here = {ref.tenant for ref, i in self.instances.items() if i.worker_id == worker_id}
        soonest: dict[str, int] = {}
        for t in self.timers.values():
            if t.fire_at_ms <= before_ms and t.tenant in here:
                soonest[t.tenant] = min(soonest.get(t.tenant, t.fire_at_ms), t.fire_at_ms)
        return sorted(soonest.items(), key=lambda kv: (kv[1], kv[0]))[:limit]

    async def record_executors(self, rows: Sequence[ExecutorRow]) -> None:
        await asyncio.sleep(0)
        for r in rows:
            self.executor_rows[(r.worker_id, r.tenant)] = r

    async def record_spares(self, rows: Sequence[SpareRow]) -> None:
        await asyncio.sleep(0)
        for r in rows:
            self.spares[(r.worker_id, r.slot)] = r

    async def list_executors(self, *, tenant: str | None, limit: int) -> list[ExecutorRow]:
        rows = [r for r in self.executor_rows.values() if tenant is None or r.tenant == tenant]
        rows.sort(key=lambda r: (r.tenant or "", r.worker_id))
        if tenant is None:
            spares = sorted(self.spares.values(), key=lambda r: (r.worker_id, r.pid or 0))
            rows += [
                ExecutorRow(
                    worker_id=s.worker_id,
                    tenant=None,
                    pid=s.pid,
                    state=s.state,
                    started_at=s.started_at,
                    boot_ms=s.boot_ms,
                    dispatches=0,
                    active_dispatch=0,
                    crashes=0,
                    isolation=s.isolation,
                    stop_reason=s.stop_reason,
                    updated_at=s.updated_at,
                )
                for s in spares
            ]
        return rows[:limit]

    # -- leases: the reference semantics of yoke.store.leaseverbs --------------------------------
    async def acquire_lease(
        self, name: str, *, holder: str, ttl: float, force: bool = False
    ) -> Lease | None:
        await asyncio.sleep(0)
        now = self.clock()
        old = self.lease_rows.get(name)
        if not force and old is not None and old.holder is not None and old.expires_at >= now:
            return None
        lease = Lease(
            name=name,
            holder=holder,
            epoch=1 if old is None else old.epoch + 1,
            expires_at=now + ttl,
            now=now,
        )
        self.lease_rows[name] = lease
        return lease

    async def renew_lease(self, lease: Lease, *, ttl: float) -> Lease | None:
        await asyncio.sleep(0)
        now = self.clock()
        cur = self.lease_rows.get(lease.name)
        if cur is None or cur.holder != lease.holder or cur.epoch != lease.epoch:
            return None
        cur = replace(cur, expires_at=now + ttl, now=now)
        self.lease_rows[lease.name] = cur
        return cur

    async def release_lease(self, lease: Lease) -> bool:
        await asyncio.sleep(0)
        cur = self.lease_rows.get(lease.name)
        if cur is None or cur.holder != lease.holder or cur.epoch != lease.epoch:
            return False
        self.lease_rows[lease.name] = replace(cur, holder=None, expires_at=0.0)
        return True

    async def get_lease(self, name: str) -> Lease | None:
        cur = self.lease_rows.get(name)
        return None if cur is None else replace(cur, now=self.clock())

    async def list_active_groups(self, ref: InstanceRef) -> list[str]:
        return sorted(
            {
                r.group_id
                for r in self.rows.values()
                if r.ref == ref and r.status is not QueueStatus.DEAD
            }
        )

    async def dead_letters(self, ref: InstanceRef, *, limit: int = 100) -> list[DeadLetter]:
        return [
            DeadLetter(
                queue_id=r.queue_id,
                event_id=r.event_id,
                stream=r.stream,
                group_id=r.group_id,
                data=r.data,
                attempts=r.attempts,
                crash_attempts=r.crash_attempts,
                error=r.error,
                dead_at=r.dead_at or 0.0,
            )
            for r in self.rows.values()
            if r.ref == ref and r.status is QueueStatus.DEAD
        ][:limit]

    async def queue_depths(self, *, limit: int) -> list[QueueDepth]:
        depth: dict[InstanceRef, int] = {}
        for r in self.rows.values():
            if r.status is not QueueStatus.DEAD:
                depth[r.ref] = depth.get(r.ref, 0) + 1
        top = sorted(depth.items(), key=lambda kv: -kv[1])[:limit]
        return [
            QueueDepth(tenant=k.tenant, actor=k.actor, instance_id=k.instance_id, depth=v)
            for k, v in top
        ]

    async def get_state(self, ref: InstanceRef) -> InstanceState | None:
        await asyncio.sleep(0)
        self._count("get_state")
        inst = self.instances.get(ref)
        if inst is None:
            return None
        return InstanceState(
            state=inst.state, version=inst.version, worker_id=inst.worker_id, epoch=inst.epoch
        )

    async def get_states(self, refs: Sequence[InstanceRef]) -> dict[InstanceRef, InstanceState]:
        await asyncio.sleep(0)
        self._count("get_states")
        return {
            ref: InstanceState(
                state=inst.state, version=inst.version, worker_id=inst.worker_id, epoch=inst.epoch
            )
            for ref in refs
            if (inst := self.instances.get(ref)) is not None
        }

    async def update_state(
        self, ref: InstanceRef, *, state: str, expected_version: int, worker_id: str, epoch: int
    ) -> bool:
        await asyncio.sleep(0)
        inst = self.instances.get(ref)
        if (
            inst is None
            or inst.version != expected_version
            or inst.worker_id != worker_id
            or inst.epoch != epoch
        ):
            return False
        inst.state, inst.version = state, inst.version + 1
        return True

    async def get_instance(self, ref: InstanceRef) -> InstanceInfo | None:
        inst = self.instances.get(ref)
        if inst is None:
            return None
        rows = [r for r in self.rows.values() if r.ref == ref]
        return InstanceInfo(
            tenant=ref.tenant,
            actor=ref.actor,
            instance_id=ref.instance_id,
            state=inst.state,
            version=inst.version,
            worker_id=inst.worker_id,
            epoch=inst.epoch,
            pending=sum(r.status is QueueStatus.PENDING for r in rows),
            in_flight=sum(r.status is QueueStatus.CLAIMED for r in rows),
            dead=sum(r.status is QueueStatus.DEAD for r in rows),
            created_at=inst.created_at,
        )

    async def list_instances(self, actor: str, *, limit: int = 100) -> list[InstanceInfo]:
        return await self.instances_page(actor, limit=limit)

    async def schedule(self, timers: Sequence[NewTimer], *, now: float) -> list[int]:
        await asyncio.sleep(0)
        out = []
        for timer in timers:
            tid = next(self.ids)
            self.timers[tid] = timer
            out.append(tid)
        return out

    async def next_fire_at_ms(self) -> int | None:
        return min((t.fire_at_ms for t in self.timers.values()), default=None)

    async def tenant_timers(self, tenant: str, *, limit: int) -> list[DueTimer]:
        await asyncio.sleep(0)
        self._count("tenant_timers")
        keys = sorted((t.fire_at_ms, tid) for tid, t in self.timers.items() if t.tenant == tenant)
        return [
            DueTimer(
                timer_id=tid,
                tenant=tenant,
                stream=self.timers[tid].stream,
                data=self.timers[tid].data,
                fire_at_ms=ms,
            )
            for ms, tid in keys[:limit]
        ]

    async def upcoming_timers(
        self, *, limit: int, after: tuple[int, int] | None = None
    ) -> list[DueTimer]:
        await asyncio.sleep(0)
        self._count("upcoming_timers" if after is None else "upcoming_timers_after")
        keys = sorted((t.fire_at_ms, tid) for tid, t in self.timers.items())
        first = [k for k in keys if after is None or k > after][:limit]
        return [
            DueTimer(
                timer_id=tid,
                tenant=self.timers[tid].tenant,
                stream=self.timers[tid].stream,
                data=self.timers[tid].data,
                fire_at_ms=ms,
            )
            for ms, tid in first
        ]

    async def fire_timers(
        self, fire: Sequence[tuple[int, NewEvent]], *, owner: Owner, now: float
    ) -> list[int]:
        await asyncio.sleep(0)
        self._count("fire_timers")
        fired = [tid for tid, _ in fire if self.timers.pop(tid, None) is not None]
        kept = set(fired)
        events = [e for tid, e in fire if tid in kept]
        if events:
            await self.append_events(events, owner=owner, now=now)
        return sorted(fired)

    async def register_worker(self, worker_id: str, *, hostname: str, pid: int, now: float) -> None:
        # A (re)start is a new incarnation: what an earlier one claimed is pending again.
        for inst in self.instances.values():
            if inst.worker_id == worker_id:
                self._release(inst, worker_id, died=now)
        self.workers[worker_id] = WorkerRow(
            worker_id=worker_id,
            hostname=hostname,
            pid=pid,
            started_at=now,
            heartbeat_at=now,
            stopped_at=None,
        )

    async def worker_heartbeat(self, worker_id: str, *, now: float) -> bool:
        w = self.workers.get(worker_id)
        if w is None or w.stopped_at is not None:
            return False
        self.workers[worker_id] = WorkerRow(
            worker_id=worker_id,
            hostname=w.hostname,
            pid=w.pid,
            started_at=w.started_at,
            heartbeat_at=now,
            stopped_at=None,
        )
        return True

    def _release(self, inst: _Instance, owner: str | None, *, died: float | None = None) -> int:
        """`unclaim`, or `unclaim_dead` when its worker `died` (then, at that time)."""
        inst.worker_id, inst.epoch, inst.moving_to = owner, inst.epoch + 1, None
        n = 0
        for r in self.rows.values():
            if r.ref == inst.ref and r.status is QueueStatus.CLAIMED:
                r.status, r.claimed_by = QueueStatus.PENDING, None
                if died is not None:
                    r.suspect = True
                    if r.solo:
                        r.crash_attempts += 1
                        r.error = DIED
                        if r.crash_attempts >= CRASH_ATTEMPTS:
                            r.status, r.dead_at = QueueStatus.DEAD, died
                r.solo = False
                n += 1
        return n

    async def stop_worker(self, worker_id: str, *, now: float, to: Owner = None) -> int:
        w = self.workers.get(worker_id)
        if w is not None:
            self.workers[worker_id] = WorkerRow(
                worker_id=worker_id,
                hostname=w.hostname,
                pid=w.pid,
                started_at=w.started_at,
                heartbeat_at=w.heartbeat_at,
                stopped_at=now,
            )
        n = 0
        for inst in self.instances.values():
            if inst.worker_id == worker_id:
                r = inst.ref
                self._release(inst, owner_of(to, r.tenant, r.actor, r.instance_id))
                n += 1
        return n

    async def claim_orphans(
        self, worker_id: str, *, stale_before: float, now: float, to: Owner | None = None
    ) -> Takeover:
        gone = {
            w.worker_id
            for w in self.workers.values()
            if w.stopped_at is not None or w.heartbeat_at < stale_before
        }
        n = requeued = 0
        for inst in self.instances.values():
            if inst.worker_id is not None and (
                inst.worker_id == worker_id or inst.worker_id not in gone
            ):
                continue
            r = inst.ref
            who = worker_id if to is None else owner_of(to, r.tenant, r.actor, r.instance_id)
            if who is None or who == inst.worker_id or who in gone:  # never to a gone worker
                who = worker_id
            requeued += self._release(inst, who, died=now)
            n += 1
        return Takeover(instances=n, requeued=requeued)

    # -- the fleet -------------------------------------------------------------------------
    async def fleet_counts(
        self, *, tenant: str | None = None, with_pending: bool = False
    ) -> list[FleetCounts]:
        c: dict[str, list[int]] = {}
        for inst in self.instances.values():
            if tenant is not None and inst.ref.tenant != tenant:
                continue
            if inst.worker_id is not None:
                row = c.setdefault(inst.worker_id, [0, 0, 0, 0])
                row[0] += 1
                row[1] += inst.moving_to is not None
            if inst.moving_to is not None:
                c.setdefault(inst.moving_to, [0, 0, 0, 0])[2] += 1
        if with_pending:
            for r in self.rows.values():
                owner = self.instances[r.ref].worker_id
                mine = tenant is None or r.ref.tenant == tenant
                if r.status is QueueStatus.PENDING and owner is not None and mine:
                    c.setdefault(owner, [0, 0, 0, 0])[3] += 1
        return [
            FleetCounts(worker_id=w, owned=o, moving_out=mo, moving_in=mi, pending=p)
            for w, (o, mo, mi, p) in sorted(c.items())
        ]

    async def owned_page(
        self, *, worker_id: str | None, after: InstanceRef | None, limit: int
    ) -> list[tuple[InstanceRef, str]]:
        def key(r: InstanceRef) -> tuple[str, str, str]:
            return (r.tenant, r.actor, r.instance_id)

        out = [
            (i.ref, i.worker_id)
            for i in sorted(self.instances.values(), key=lambda i: key(i.ref))
            if i.worker_id is not None
            and i.moving_to is None
            and (worker_id is None or i.worker_id == worker_id)
            and (after is None or key(i.ref) > key(after))
        ]
        return [(r, w) for r, w in out[:limit] if w is not None]

    async def pending_heads(self, worker_id: str, *, limit: int) -> list[tuple[InstanceRef, int]]:
        n: dict[InstanceRef, int] = {}
        for r in self.rows.values():
            inst = self.instances[r.ref]
            if (
                r.status is QueueStatus.PENDING
                and inst.worker_id == worker_id
                and inst.moving_to is None
            ):
                n[r.ref] = n.get(r.ref, 0) + 1
        key = sorted(n.items(), key=lambda p: (-p[1], p[0].tenant, p[0].actor, p[0].instance_id))
        return key[:limit]

    async def mark_moves(self, moves: Sequence[tuple[InstanceRef, str, str]], *, now: float) -> int:
        n = 0
        for ref, giver, taker in moves:
            inst = self.instances.get(ref)
            if inst is not None and inst.worker_id == giver and inst.moving_to is None:
                inst.moving_to = taker
                n += 1
        return n

    async def moves_from(self, worker_id: str, *, limit: int) -> list[MoveOrder]:
        return [
            MoveOrder(ref=i.ref, taker=i.moving_to, epoch=i.epoch)
            for i in self.instances.values()
            if i.worker_id == worker_id and i.moving_to is not None
        ][:limit]

    async def finish_move(
        self, worker_id: str, order: MoveOrder, *, stale_before: float
    ) -> MoveResult:
        inst = self.instances.get(order.ref)
        if (
            inst is None
            or inst.worker_id != worker_id
            or inst.epoch != order.epoch
            or inst.moving_to != order.taker
        ):
            return MoveResult.GONE
        w = self.workers.get(order.taker)
        live = w is not None and w.stopped_at is None and w.heartbeat_at >= stale_before
        self._release(inst, order.taker if live else worker_id)
        return MoveResult.MOVED if live else MoveResult.CANCELLED

    async def list_workers(self) -> list[WorkerRow]:
        return sorted(self.workers.values(), key=lambda w: w.worker_id)

    async def forget_workers(self, *, before: float) -> int:
        await asyncio.sleep(0)
        busy = {i.worker_id for i in self.instances.values()}
        busy |= {i.moving_to for i in self.instances.values()}
        gone = {
            w.worker_id
            for w in self.workers.values()
            if (w.heartbeat_at if w.stopped_at is None else w.stopped_at) < before
            and w.worker_id not in busy
        }
        for worker_id in gone:
            del self.workers[worker_id]
        known = self.workers
        self.executor_rows = {k: r for k, r in self.executor_rows.items() if k[0] in known}
        self.spares = {k: r for k, r in self.spares.items() if k[0] in known}
        self.tenant_running = {k: n for k, n in self.tenant_running.items() if k[1] in known}
        return len(gone)

    async def listen_actor_wakeups(
        self,
        on_queue: Callable[[], None],
        on_schedule: Callable[[], None],
        on_tenants: Callable[[], None],
    ) -> None:
        return None

    async def actor_counts(self, *, tenant: str | None) -> list[ActorCounts]:
        counts: dict[str, dict[str, int]] = {}
        for ref in self.instances:
            if tenant is None or ref.tenant == tenant:
                c = counts.setdefault(ref.actor, {})
                c["instances"] = c.get("instances", 0) + 1
        for r in self.rows.values():
            if tenant is None or r.ref.tenant == tenant:
                c = counts.setdefault(r.ref.actor, {})
                c[r.status.value] = c.get(r.status.value, 0) + 1
        return [
            ActorCounts(
                actor=actor,
                instances=c.get("instances", 0),
                pending=c.get(QueueStatus.PENDING.value, 0),
                in_flight=c.get(QueueStatus.CLAIMED.value, 0),
                dead=c.get(QueueStatus.DEAD.value, 0),
            )
            for actor, c in sorted(counts.items())
        ]

    async def instances_page(
        self,
        actor: str,
        *,
        tenant: str | None = None,
        after: InstanceRef | None = None,
        limit: int = 100,
    ) -> list[InstanceInfo]:
        start = None if after is None else (after.tenant, after.instance_id)
        out = []
        for ref in sorted(self.instances, key=lambda r: (r.tenant, r.instance_id)):
            if ref.actor != actor or (tenant is not None and ref.tenant != tenant):
                continue
            if start is not None and (ref.tenant, ref.instance_id) <= start:
                continue
            info = await self.get_instance(ref)
            assert info is not None
            out.append(info)
        return out[:limit]

    async def owned_instances(self) -> dict[str, int]:
        owned: dict[str, int] = {}
        for inst in self.instances.values():
            if inst.worker_id is not None:
                owned[inst.worker_id] = owned.get(inst.worker_id, 0) + 1
        return owned

    # -- tenants ---------------------------------------------------------------------------
    async def tenant_settings(self, *, limit: int) -> list[TenantRow]:
        return [self.tenant_rows[t] for t in sorted(self.tenant_rows)][:limit]

    async def get_tenant_settings(self, tenant: str) -> TenantRow | None:
        return self.tenant_rows.get(tenant)

    async def put_tenant_settings(
        self,
        tenant: str,
        values: TenantValues,
        *,
        audit: NewControl,
        expect: int = 0,
    ) -> TenantRow | None:
        old = self.tenant_rows.get(tenant)
        if (0 if old is None else old.version) != expect:
            return None
        row = TenantRow(
            tenant=tenant,
            values=values,
            updated_by=audit.principal,
            updated_at=audit.at,
            version=expect + 1,
        )
        self.tenant_rows[tenant] = row
        return row

    async def take_tenant_slot(self, tenant: str, worker_id: str, *, live_after: float) -> bool:
        row = self.tenant_rows.get(tenant)
        defaults = self.tenant_rows.get("*")
        cap = row.max_running if row is not None else None
        if cap is None and defaults is not None:
            cap = defaults.max_running
        if cap is not None:
            live = {
                w
                for w, r in self.workers.items()
                if r.stopped_at is None and r.heartbeat_at >= live_after
            }
            running = sum(
                n
                for (t, w), n in self.tenant_running.items()
                if t == tenant and (w in live or w == worker_id)
            )
            if running >= cap:
                return False
        key = (tenant, worker_id)
        self.tenant_running[key] = self.tenant_running.get(key, 0) + 1
        return True

    async def free_tenant_slot(self, tenant: str, worker_id: str) -> None:
        key = (tenant, worker_id)
        if self.tenant_running.get(key, 0) > 0:
            self.tenant_running[key] -= 1

    async def clear_tenant_slots(self, worker_id: str) -> None:
        for key in [k for k in self.tenant_running if k[1] == worker_id]:
            del self.tenant_running[key]

    async def take_tokens(
        self, tenant: str, kind: str, *, n: int, rate: float, burst: int
    ) -> Tokens:
        now = time.time()
        tat = max(self.buckets.get((tenant, kind), now), now)
        if tat + (n - burst) / rate > now:
            return Tokens(granted=False, retry_after=tat + (n - burst) / rate - now)
        self.buckets[(tenant, kind)] = tat + n / rate
        return Tokens(granted=True)

    async def forget_full_buckets(self) -> int:
        now = time.time()
        full = [k for k, tat in self.buckets.items() if tat < now]
        for k in full:
            del self.buckets[k]
        return len(full)


def _claim(r: _Row, worker_id: str, epoch: int, claim_id: int | None = None) -> ClaimedEvent:
    r.status, r.claimed_by, r.claim_epoch = QueueStatus.CLAIMED, worker_id, epoch
    r.claim_id = claim_id
    return ClaimedEvent(
        queue_id=r.queue_id,
        event_id=r.event_id,
        tenant=r.ref.tenant,
        actor=r.ref.actor,
        instance_id=r.ref.instance_id,
        group_id=r.group_id,
        stream=r.stream,
        data=r.data,
        attempts=r.attempts,
        epoch=epoch,
        appended_at=r.appended_at,
        suspect=r.suspect,
    )
