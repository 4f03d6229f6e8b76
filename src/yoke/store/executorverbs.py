"""The executor verbs of the SQL store: what a worker running `process()` in per-tenant
executor processes records and asks, written once over named queries (section "executors" of
`queries.sql`).

`release_claims` and `charge_crash` are fenced like `complete`: they change a row only while
the caller still holds its claim under the epoch it was claimed with. A release counts no
attempt (the executor died, not the event); a crash charge counts one on `crash_attempts`,
apart from the actor's own failed attempts, and turns the row into a dead letter at the
limit. The rest are reads for the lifecycle's observations and the API, and the upsert of a
worker's executor rows. This module must never decide anything: limits, ids and times come
from the caller.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict

from yoke.store.actor_records import Completion, CrashCharge, ExecutorRow, SpareRow
from yoke.store.tx import Row, Transactions


class ExecutorVerbs:
    """The executor verbs over one backend's transactions (part of its `actors`)."""

    def __init__(self, transactions: Transactions) -> None:
        self._t = transactions

    def __repr__(self) -> str:
        return f"ExecutorVerbs({self._t!r})"

    async def tenants_with_pending(self, worker_id: str, tenants: Sequence[str]) -> list[str]:
        if not tenants:
            return []
        params = {"worker_id": worker_id, "tenants": json.dumps(sorted(set(tenants)))}
        async with self._t.read() as tx:
            rows = await tx.all("pending_tenants_among", params)
        return [str(r["tenant"]) for r in rows]

    async def pending_tenants(self, worker_id: str, *, after: str = "", limit: int) -> list[str]:
        params = {"worker_id": worker_id, "after": after, "limit": limit}
        async with self._t.read() as tx:
            rows = await tx.all("pending_tenants", params)
        return [str(r["tenant"]) for r in rows]

    async def release_claims(self, worker_id: str, done: Sequence[Completion]) -> list[int]:
        if not done:
            return []
        params = {
            "worker_id": worker_id,
            "ids": [c.queue_id for c in done],
            "epochs": [c.epoch for c in done],
            "done": json.dumps([[c.queue_id, c.epoch] for c in done]),
        }
        async with self._t.write() as tx:
            rows = await tx.all("release_claims", params)
        return sorted(int(r["queue_id"]) for r in rows)

    async def charge_crash(
        self, worker_id: str, done: Completion, *, error: str, dead_after: int, now: float
    ) -> CrashCharge:
        params = {
            "worker_id": worker_id,
            "queue_id": done.queue_id,
            "epoch": done.epoch,
            "error": error,
            "dead_after": dead_after,
            "now": now,
        }
        async with self._t.write() as tx:
            row = await tx.one("charge_crash", params)
        return CrashCharge.FENCED if row is None else CrashCharge(str(row["status"]))

    async def timer_tenants(
        self, worker_id: str, *, before_ms: int, limit: int
    ) -> list[tuple[str, int]]:
        params = {"worker_id": worker_id, "before_ms": before_ms, "limit": limit}
        async with self._t.read() as tx:
            rows = await tx.all("timer_tenants", params)
        return [(str(r["tenant"]), int(r["fire_at_ms"])) for r in rows]

    async def record_executors(self, rows: Sequence[ExecutorRow]) -> None:
        if not rows:
            return
        latest = {(r.worker_id, r.tenant): r for r in rows}  # one upsert per row and statement
        payload = json.dumps([asdict(r) for r in latest.values()])
        async with self._t.write() as tx:
            await tx.run("record_executors", {"rows": payload})

    async def record_spares(self, rows: Sequence[SpareRow]) -> None:
        if not rows:
            return
        latest = {(r.worker_id, r.slot): r for r in rows}  # one upsert per row and statement
        payload = json.dumps([asdict(r) for r in latest.values()])
        async with self._t.write() as tx:
            await tx.run("record_spares", {"rows": payload})

    async def list_executors(self, *, tenant: str | None, limit: int) -> list[ExecutorRow]:
        async with self._t.read() as tx:
            rows = await tx.all("list_executors", {"tenant": tenant, "limit": limit})
        return [_executor(r) for r in rows]


def _executor(r: Row) -> ExecutorRow:
    return ExecutorRow(
        worker_id=str(r["worker_id"]),
        tenant=None if r["tenant"] is None else str(r["tenant"]),
        pid=None if r["pid"] is None else int(r["pid"]),
        state=str(r["state"]),
        started_at=float(r["started_at"]),
        boot_ms=None if r["boot_ms"] is None else float(r["boot_ms"]),
        dispatches=int(r["dispatches"]),
        active_dispatch=int(r["active_dispatch"]),
        crashes=int(r["crashes"]),
        isolation=str(r["isolation"]),
        stop_reason=None if r["stop_reason"] is None else str(r["stop_reason"]),
        updated_at=float(r["updated_at"]),
    )
