"""The actor verbs of the store, written once over named queries.

`ActorVerbs` holds a backend's transactions (`tx.Transactions`) by reference; the backend
exposes it as its `actors`, and `yoke.actors.protocol.ActorStore` is its contract. They decide
which named queries (`queries.sql`, section "actors") run in which transaction and nothing
else: `now`, ids, owners and epochs come from the caller, and the fan-out of an event (which
instances it reaches) is computed by the caller too.

An append (and a timer firing, which is an append that deletes its timers) is one statement on
PostgreSQL (`append_events`: one round trip, its own transaction) and a few statements in one
IMMEDIATE transaction on SQLite, whose statements write one table each. PostgreSQL falls back
to SQLite's steps when its statement meets an instance created by a concurrent append (see the
guard in `append_events`); `Transactions.one_statement_batches` is the one place these
verbs look at the dialect.

Lock order (PostgreSQL): instance rows (in key order) before their queue rows. An append holds
its instances FOR SHARE while it copies their owner and epoch into the new queue rows; a
takeover locks instance rows FOR UPDATE, then rewrites their queue rows; claims (a batch, or the
one row a custom-mode select chose) and completions touch queue rows only (FOR UPDATE SKIP
LOCKED). No cycle, so no deadlock.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from yoke.errors import Conflict, IdempotencyConflict, QuotaExceeded
from yoke.store import usage
from yoke.store.actor_records import (
    ActorCounts,
    ClaimedEvent,
    Completion,
    DeadLetter,
    DueTimer,
    EventKey,
    InstanceInfo,
    InstanceRef,
    InstanceState,
    NewEvent,
    NewTimer,
    Owner,
    PendingEvent,
    QueueDepth,
    owner_of,
    ref_params,
)
from yoke.store.executorverbs import ExecutorVerbs
from yoke.store.fleetverbs import FleetVerbs
from yoke.store.leaseverbs import LeaseVerbs, Link
from yoke.store.tenantverbs import TenantVerbs
from yoke.store.tx import Row, Transactions, Tx


def _columns(
    events: Sequence[NewEvent], timer_ids: Sequence[int], owner: Owner, now: float
) -> dict[str, Any]:
    """The parameters of PostgreSQL's append_events: the batch as parallel arrays, targets
    naming their event and their instance by position."""
    tenants, streams, datas = [], [], []
    t_event: list[int] = []
    t_key: list[int] = []
    t_group: list[str] = []
    keys: dict[tuple[str, str, str], int] = {}
    for n, e in enumerate(events, 1):
        tenants.append(e.tenant)
        streams.append(e.stream)
        datas.append(e.data)
        for t in e.targets:
            key = (e.tenant, t.actor, t.instance_id)
            k = keys.get(key)
            if k is None:
                k = keys[key] = len(keys) + 1
            t_event.append(n)
            t_key.append(k)
            t_group.append(t.group_id)
    return {
        "tenants": tenants,
        "streams": streams,
        "datas": datas,
        "timers": list(timer_ids),
        "t_event": t_event,
        "t_key": t_key,
        "t_group": t_group,
        "k_tenant": [k[0] for k in keys],
        "k_actor": [k[1] for k in keys],
        "k_instance": [k[2] for k in keys],
        "k_owner": [owner_of(owner, *k) or "" for k in keys],
        "now": now,
    }


class ActorVerbs:
    """The `ActorStore` verbs over one backend's transactions."""

    def __init__(self, transactions: Transactions, *, leases: Link | None = None) -> None:
        self._t = transactions
        # Its parts by entity (`ActorStore.fleet`, `.executors`, `.tenants`, `.leases`), held by
        # reference and called directly by their consumers. Takes, renewals and releases of
        # leases may have transactions of their own (`leases`: on PostgreSQL a pool other work
        # never drains).
        self.executors = ExecutorVerbs(transactions)
        self.leases = LeaseVerbs(transactions, terms=leases)
        self.tenants = TenantVerbs(transactions)
        self.fleet = FleetVerbs(transactions)

    def __repr__(self) -> str:
        return f"ActorVerbs({self._t!r})"

    # -- stream and fan-out --------------------------------------------------------------------
    async def append_events(
        self, events: Sequence[NewEvent], *, owner: Owner, now: float
    ) -> list[int]:
        if not events:
            return []
        ids, _ = await self._append(events, (), owner=owner, now=now)
        return ids

    async def append_event_once(
        self, event: NewEvent, *, key: EventKey, owner: Owner, now: float
    ) -> tuple[int, bool]:
        """Append `event` unless `key` already appended one: (its event id, appended now).
        The key's row is claimed in the append's transaction, so a concurrent append with
        the same key (another server) waits for this one and then answers with its event."""
        params = {"principal": key.principal, "idem_key": key.key}
        async with self._t.write() as tx:
            claim = {**params, "fingerprint": key.fingerprint, "expires_at": key.expires_at}
            for r in await tx.all("drop_expired_event_key", {**params, "now": now}):
                await usage.count(tx, str(r["tenant"]), "event_keys", -1)
            if await tx.one("claim_event_key", {**claim, "tenant": event.tenant}) is None:
                kept = await tx.one("event_key", params)
                assert kept is not None  # a live row, or the claim would have taken it
                if kept["fingerprint"] != key.fingerprint or kept["event_id"] is None:
                    raise IdempotencyConflict(
                        f"Idempotency-Key {key.key!r} was used for another request"
                    )
                return int(kept["event_id"]), False
            await usage.bound(tx, event.tenant, "event_keys", key.keep_at_most)
            try:
                ids, _ = await self._append_steps(tx, [event], (), owner=owner, now=now)
            except QuotaExceeded:
                raise _quota("instances", {event.tenant}) from None
            await tx.run("set_event_key", {**params, "event_id": ids[0]})
        return ids[0], True

    async def _append(
        self,
        events: Sequence[NewEvent],
        timer_ids: Sequence[int],
        *,
        owner: Owner,
        now: float,
    ) -> tuple[list[int], list[int]]:
        """Append `events` in one transaction; with `timer_ids` (one per event) only the events
        whose timer this call deletes. Returns the event ids written and the timers fired."""
        try:
            if self._t.one_statement_batches:
                # One statement (append_events): one round trip, no BEGIN/COMMIT.
                try:
                    async with self._t.single() as tx:
                        params = _columns(events, timer_ids, owner, now)
                        row = await tx.one("append_events", params)
                except Conflict:
                    pass  # its guard: an instance was created concurrently; go step by step
                else:
                    assert row is not None
                    return list(row["event_ids"] or ()), list(row["fired"] or ())
            async with self._t.write() as tx:
                return await self._append_steps(tx, events, timer_ids, owner=owner, now=now)
        except QuotaExceeded:
            raise _quota("instances", {e.tenant for e in events}) from None

    async def _append_steps(
        self,
        tx: Tx,
        events: Sequence[NewEvent],
        timer_ids: Sequence[int],
        *,
        owner: Owner,
        now: float,
    ) -> tuple[list[int], list[int]]:
        fired: list[int] = []
        if timer_ids:
            taken = await tx.all(
                "take_timers", {"ids": json.dumps(list(timer_ids)), "id_list": list(timer_ids)}
            )
            fired = sorted(int(r["timer_id"]) for r in taken)
            gone = Counter(str(r["tenant"]) for r in taken)
            for tenant in sorted(gone):  # what the tenants hold: fewer timers
                await usage.count(tx, tenant, "timers", -gone[tenant])
            keep = set(fired)
            events = [e for e, t in zip(events, timer_ids, strict=True) if t in keep]
            if not events:
                return [], []
        ids = [int(r["id"]) for r in await tx.all("alloc_event_ids", {"n": len(events)})]
        # Compact JSON rows (arrays, not objects); a target names its instance by position.
        rows: list[list[Any]] = []
        targets: list[list[Any]] = []
        keys: dict[tuple[str, str, str], int] = {}
        for eid, e in zip(ids, events, strict=True):
            rows.append([eid, e.tenant, e.stream, e.data])
            for t in e.targets:
                key = (e.tenant, t.actor, t.instance_id)
                pos = keys.get(key)
                if pos is None:
                    pos = keys[key] = len(keys)
                targets.append([eid, pos, t.group_id])
        await tx.run("insert_events", {"rows": json.dumps(rows), "now": now})
        if targets:
            listed = json.dumps(list(keys))
            owned = json.dumps([[*k, owner_of(owner, *k)] for k in keys])
            # insert_instances waits for any concurrent creator of the same instances, so the
            # next statement (a new snapshot) reads every one of them.
            made = await tx.all("insert_instances", {"rows": owned, "now": now})
            # What the tenants hold: more instances, under their quota (a timer accepted is
            # fired whatever the quota: the rows it creates are counted, never refused).
            await _add_held(tx, "instances", made, capped=not timer_ids)
            # Copies each instance's owner and epoch into its rows (and NOTIFYs on PostgreSQL).
            await tx.all(
                "insert_queue_rows", {"rows": json.dumps(targets), "keys": listed, "now": now}
            )
        return ids, fired

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
        async with self._t.write() as tx:
            if tenants is None:
                scan = {"worker_id": worker_id, "limit": limit}
                found = [
                    str(r["tenant"])
                    for r in await tx.all("pending_tenants", {**scan, "after": after_tenant})
                ]
                if len(found) < limit and after_tenant:
                    seen = set(found)
                    more = await tx.all("pending_tenants", {**scan, "after": ""})
                    found += [str(r["tenant"]) for r in more if r["tenant"] not in seen]
            else:
                # Each of `tenants` is asked, pending rows or not: the claim's probe per tenant
                # finds none for a tenant without, at the cost of a first query that sorted
                # them out (PostgreSQL chose a hash join there that read every pending row of
                # this worker: 3 ms a claim late in a drain of 20,000 events, a third of the
                # database's CPU per event through an executor).
                names = sorted(set(tenants))
                found = [t for t in names if t > after_tenant] + [
                    t for t in names if t <= after_tenant
                ]
            chosen = found[:limit]
            if not chosen:
                return []
            if quota is None:  # first-come: an even split of `limit` among the chosen
                even = -(-limit // len(chosen))
                shares = dict.fromkeys(chosen, even)
            else:
                shares = {t: n for t in chosen if (n := quota(t)) > 0}
                if not shares:
                    return []
            params = {
                "worker_id": worker_id,
                "now": now,
                "most": max(shares.values()),
                "claim_id": claim_id,
                "quotas": json.dumps([{"tenant": t, "quota": n} for t, n in shares.items()]),
            }
            marked = [int(r["queue_id"]) for r in await tx.all("claim_quotas", params)]
            if not marked:
                return []
            # RETURNING cannot join the events on SQLite: read the claimed rows with them.
            rows = await tx.all("claimed_rows", {"ids": json.dumps(marked), "id_list": marked})
        return [_claimed(r) for r in rows]

    async def unclaim_lost(self, worker_id: str, claim_id: int) -> int:
        async with self._t.single() as tx:
            return await tx.run("unclaim_lost", {"worker_id": worker_id, "claim_id": claim_id})

    async def list_pending(
        self, worker_id: str, ref: InstanceRef, group_id: str, *, limit: int, now: float
    ) -> list[PendingEvent]:
        params = {**ref_params(ref), "group_id": group_id, "worker_id": worker_id}
        async with self._t.read() as tx:
            rows = await tx.all("list_pending", {**params, "limit": limit, "now": now})
        return [_pending(r) for r in rows]

    async def claim_event(
        self, worker_id: str, queue_id: int, *, epoch: int
    ) -> ClaimedEvent | None:
        async with self._t.write() as tx:
            got = await tx.one(
                "claim_event", {"worker_id": worker_id, "queue_id": queue_id, "epoch": epoch}
            )
            if got is None:
                return None
            ids = [queue_id]
            rows = await tx.all("claimed_rows", {"ids": json.dumps(ids), "id_list": ids})
        return _claimed(rows[0])

    async def complete(self, worker_id: str, done: Sequence[Completion]) -> list[int]:
        if not done:
            return []
        params = {
            "worker_id": worker_id,
            "ids": [c.queue_id for c in done],
            "epochs": [c.epoch for c in done],
            "done": json.dumps([[c.queue_id, c.epoch] for c in done]),
        }
        async with self._t.write() as tx:
            rows = await tx.all("complete", params)
        return sorted(int(r["queue_id"]) for r in rows)

    async def requeue(
        self, worker_id: str, done: Completion, *, available_at: float, error: str | None
    ) -> bool:
        async with self._t.write() as tx:
            return (
                await tx.run(
                    "requeue",
                    {
                        "worker_id": worker_id,
                        "queue_id": done.queue_id,
                        "epoch": done.epoch,
                        "available_at": available_at,
                        "error": error,
                    },
                )
                == 1
            )

    async def mark_solo(self, worker_id: str, done: Completion) -> bool:
        async with self._t.write() as tx:
            params = {"worker_id": worker_id, "queue_id": done.queue_id, "epoch": done.epoch}
            return await tx.run("mark_solo", params) == 1

    async def dead_letter(
        self, worker_id: str, done: Completion, *, error: str | None, now: float
    ) -> bool:
        async with self._t.write() as tx:
            return (
                await tx.run(
                    "dead_letter",
                    {
                        "worker_id": worker_id,
                        "queue_id": done.queue_id,
                        "epoch": done.epoch,
                        "error": error,
                        "now": now,
                    },
                )
                == 1
            )

    async def list_active_groups(self, ref: InstanceRef) -> list[str]:
        async with self._t.read() as tx:
            rows = await tx.all("list_active_groups", ref_params(ref))
        return [str(r["group_id"]) for r in rows]

    async def dead_letters(self, ref: InstanceRef, *, limit: int = 100) -> list[DeadLetter]:
        async with self._t.read() as tx:
            rows = await tx.all("dead_letters", {**ref_params(ref), "limit": limit})
        return [
            DeadLetter(
                queue_id=int(r["queue_id"]),
                event_id=int(r["event_id"]),
                stream=str(r["stream"]),
                group_id=str(r["group_id"]),
                data=str(r["data"]),
                attempts=int(r["attempts"]),
                crash_attempts=int(r["crash_attempts"]),
                error=None if r["error"] is None else str(r["error"]),
                dead_at=float(r["dead_at"]),
            )
            for r in rows
        ]

    async def queue_depths(self, *, limit: int) -> list[QueueDepth]:
        async with self._t.read() as tx:
            rows = await tx.all("queue_depths", {"limit": limit})
        return [
            QueueDepth(
                tenant=str(r["tenant"]),
                actor=str(r["actor"]),
                instance_id=str(r["instance_id"]),
                depth=int(r["depth"]),
            )
            for r in rows
        ]

    # -- instances and state -------------------------------------------------------------------
    async def get_state(self, ref: InstanceRef) -> InstanceState | None:
        async with self._t.read() as tx:
            r = await tx.one("get_state", ref_params(ref))
        if r is None:
            return None
        return InstanceState(
            state=str(r["state"]),
            version=int(r["version"]),
            worker_id=None if r["worker_id"] is None else str(r["worker_id"]),
            epoch=int(r["owner_epoch"]),
        )

    async def get_states(self, refs: Sequence[InstanceRef]) -> dict[InstanceRef, InstanceState]:
        if not refs:
            return {}
        rows = json.dumps([ref_params(ref) for ref in refs])
        async with self._t.read() as tx:
            got = await tx.all("get_states", {"rows": rows})
        return {
            InstanceRef(
                tenant=str(r["tenant"]), actor=str(r["actor"]), instance_id=str(r["instance_id"])
            ): InstanceState(
                state=str(r["state"]),
                version=int(r["version"]),
                worker_id=None if r["worker_id"] is None else str(r["worker_id"]),
                epoch=int(r["owner_epoch"]),
            )
            for r in got
        }

    async def update_state(
        self, ref: InstanceRef, *, state: str, expected_version: int, worker_id: str, epoch: int
    ) -> bool:
        async with self._t.write() as tx:
            return (
                await tx.run(
                    "update_state",
                    {
                        **ref_params(ref),
                        "state": state,
                        "expected_version": expected_version,
                        "worker_id": worker_id,
                        "epoch": epoch,
                    },
                )
                == 1
            )

    async def get_instance(self, ref: InstanceRef) -> InstanceInfo | None:
        async with self._t.read() as tx:
            r = await tx.one("get_instance", ref_params(ref))
        return None if r is None else _instance(r)

    async def list_instances(self, actor: str, *, limit: int = 100) -> list[InstanceInfo]:
        return await self.instances_page(actor, limit=limit)

    # -- timers --------------------------------------------------------------------------------
    async def schedule(self, timers: Sequence[NewTimer], *, now: float) -> list[int]:
        if not timers:
            return []
        rows = json.dumps(
            [
                {"tenant": t.tenant, "stream": t.stream, "data": t.data, "fire_at_ms": t.fire_at_ms}
                for t in timers
            ]
        )
        try:
            async with self._t.write() as tx:
                got = await tx.all("schedule_events", {"rows": rows, "now": now})
                await _add_held(tx, "timers", [{"tenant": t.tenant} for t in timers], capped=True)
                await tx.all("notify_schedule_change", {})
        except QuotaExceeded:
            raise _quota("timers", {t.tenant for t in timers}) from None
        return sorted(int(r["timer_id"]) for r in got)

    async def next_fire_at_ms(self) -> int | None:
        async with self._t.read() as tx:
            r = await tx.one("next_fire_at", {})
        return None if r is None or r["fire_at_ms"] is None else int(r["fire_at_ms"])

    async def upcoming_timers(
        self, *, limit: int, after: tuple[int, int] | None = None
    ) -> list[DueTimer]:
        after_ms, after_id = after or (-(2**63), 0)
        async with self._t.read() as tx:
            rows = await tx.all(
                "upcoming_timers", {"limit": limit, "after_ms": after_ms, "after_id": after_id}
            )
        return _due_timers(rows)

    async def tenant_timers(self, tenant: str, *, limit: int) -> list[DueTimer]:
        async with self._t.read() as tx:
            rows = await tx.all("tenant_timers", {"tenant": tenant, "limit": limit})
        return _due_timers(rows)

    async def fire_timers(
        self, fire: Sequence[tuple[int, NewEvent]], *, owner: Owner, now: float
    ) -> list[int]:
        if not fire:
            return []
        _, fired = await self._append(
            [e for _, e in fire], [t for t, _ in fire], owner=owner, now=now
        )
        return sorted(fired)

    async def listen_actor_wakeups(
        self,
        on_queue: Callable[[], None],
        on_schedule: Callable[[], None],
        on_tenants: Callable[[], None],
    ) -> None:
        await self._t.listen_actor_wakeups(on_queue, on_schedule, on_tenants)

    # -- inspection (the HTTP API) -------------------------------------------------------------
    async def actor_counts(self, *, tenant: str | None) -> list[ActorCounts]:
        async with self._t.read() as tx:
            per_actor = await tx.all("actor_instance_counts", {"tenant": tenant})
            per_status = await tx.all("actor_queue_counts", {"tenant": tenant})
        counts: dict[str, dict[str, int]] = {}
        for r in per_actor:
            counts.setdefault(str(r["actor"]), {})["instances"] = int(r["instances"])
        for r in per_status:
            counts.setdefault(str(r["actor"]), {})[str(r["status"])] = int(r["n"])
        return [
            ActorCounts(
                actor=actor,
                instances=c.get("instances", 0),
                pending=c.get("pending", 0),
                in_flight=c.get("claimed", 0),
                dead=c.get("dead", 0),
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
        params = {
            "actor": actor,
            "tenant": tenant,
            "after_tenant": None if after is None else after.tenant,
            "after_id": None if after is None else after.instance_id,
            "limit": limit,
        }
        async with self._t.read() as tx:
            rows = await tx.all("instances_page", params)
        return [_instance(r) for r in rows]


async def _add_held(tx: Tx, kind: str, rows: Sequence[Row], *, capped: bool) -> None:
    """Count what `rows` (each naming its tenant) add to what their tenants hold of `kind`;
    `capped`: refused (QuotaExceeded, by the database) past a tenant's quota."""
    counts = Counter(str(r["tenant"]) for r in rows)
    if counts:
        params = {
            "kind": kind,
            "counts": json.dumps(dict(sorted(counts.items()))),
            "capped": capped,
        }
        await tx.run("add_held", params)


def _quota(kind: str, tenants: set[str]) -> QuotaExceeded:
    names = ", ".join(repr(t) for t in sorted(tenants))
    return QuotaExceeded(
        f"this would pass the actors.max_{kind} of tenant {names}: nothing of it was written"
    )


def _pending_fields(r: Row) -> dict[str, Any]:
    return {
        "queue_id": int(r["queue_id"]),
        "event_id": int(r["event_id"]),
        "tenant": str(r["tenant"]),
        "actor": str(r["actor"]),
        "instance_id": str(r["instance_id"]),
        "group_id": str(r["group_id"]),
        "stream": str(r["stream"]),
        "data": str(r["data"]),
        "attempts": int(r["attempts"]),
        "appended_at": float(r["appended_at"]),
    }


def _due_timers(rows: list[Row]) -> list[DueTimer]:
    return [
        DueTimer(
            timer_id=int(r["timer_id"]),
            tenant=str(r["tenant"]),
            stream=str(r["stream"]),
            data=str(r["data"]),
            fire_at_ms=int(r["fire_at_ms"]),
        )
        for r in rows
    ]


def _claimed(r: Row) -> ClaimedEvent:
    return ClaimedEvent(**_pending_fields(r), epoch=int(r["epoch"]), suspect=bool(r["suspect"]))


def _pending(r: Row) -> PendingEvent:
    return PendingEvent(**_pending_fields(r))


def _instance(r: Row) -> InstanceInfo:
    return InstanceInfo(
        tenant=str(r["tenant"]),
        actor=str(r["actor"]),
        instance_id=str(r["instance_id"]),
        state=str(r["state"]),
        version=int(r["version"]),
        worker_id=None if r["worker_id"] is None else str(r["worker_id"]),
        epoch=int(r["owner_epoch"]),
        pending=int(r["pending"]),
        in_flight=int(r["in_flight"]),
        dead=int(r["dead"]),
        created_at=float(r["created_at"]),
    )
