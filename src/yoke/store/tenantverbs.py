"""The tenant verbs of the SQL store: fleet-wide tenant settings and the counters of the
per-tenant cap, written once over named queries (section "tenants" of `queries.sql`).

`put_tenant_settings` writes a tenant's row and its control-log entry in one transaction, so
neither lands without the other, and only if the row is still at the version the change was
decided on (a compare-and-set: two admins' changes never overwrite each other unseen).
`take_tenant_slot` is the cap's exact check: under the tenant's settings row (locked FOR
UPDATE on PostgreSQL; SQLite's IMMEDIATE write serializes every taker), it counts the calls
running on live workers and takes one only below the cap, so racing workers never pass it
together. A worker's counter goes down when a call ends; a worker that died stops counting
once its heartbeat is stale, and its rows are cleared when it starts again. This module
decides nothing else: caps, weights and times come from the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

from yoke.store.records import NewControl
from yoke.store.rows import control_params
from yoke.store.tx import Row, Transactions


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantRow:
    tenant: str
    weight: float
    max_running: int | None
    updated_by: str
    updated_at: float
    version: int  # raised by every change (a compare-and-set's token)


class TenantVerbs:
    """The tenant verbs over one backend's transactions (part of its `actors`)."""

    def __init__(self, transactions: Transactions) -> None:
        self._t = transactions

    def __repr__(self) -> str:
        return f"TenantVerbs({self._t!r})"

    async def tenant_settings(self, *, limit: int) -> list[TenantRow]:
        async with self._t.read() as tx:
            rows = await tx.all("tenant_settings", {"limit": limit})
        return [_tenant(r) for r in rows]

    async def get_tenant_settings(self, tenant: str) -> TenantRow | None:
        async with self._t.read() as tx:
            row = await tx.one("get_tenant_settings", {"tenant": tenant})
        return None if row is None else _tenant(row)

    async def put_tenant_settings(
        self,
        tenant: str,
        *,
        weight: float,
        max_running: int | None,
        audit: NewControl,
        expect: int = 0,
    ) -> TenantRow | None:
        params = {
            "tenant": tenant,
            "weight": weight,
            "max_running": max_running,
            "updated_by": audit.principal,
            "now": audit.at,
            "expect": expect,
        }
        async with self._t.write() as tx:
            row = await tx.one("put_tenant_settings", params)
            if row is None:  # changed since `expect`: nothing is written, no audit either
                return None
            await tx.one("append_control", control_params(audit))
            await tx.one("notify_tenant_settings", {})
        return _tenant(row)

    async def take_tenant_slot(self, tenant: str, worker_id: str, *, live_after: float) -> bool:
        params = {"tenant": tenant, "worker_id": worker_id, "live_after": live_after}
        async with self._t.write() as tx:
            cap = await tx.one("lock_tenant_cap", params)
            if cap is not None and cap["max_running"] is not None:
                row = await tx.one("tenant_running_now", params)
                if row is not None and int(row["running"]) >= int(cap["max_running"]):
                    return False
            await tx.run("take_tenant_slot", params)
        return True

    async def free_tenant_slot(self, tenant: str, worker_id: str) -> None:
        async with self._t.single() as tx:
            await tx.run("free_tenant_slot", {"tenant": tenant, "worker_id": worker_id})

    async def clear_tenant_slots(self, worker_id: str) -> None:
        async with self._t.single() as tx:
            await tx.run("clear_tenant_slots", {"worker_id": worker_id})


def _tenant(r: Row) -> TenantRow:
    cap = r["max_running"]
    return TenantRow(
        tenant=str(r["tenant"]),
        weight=float(r["weight"]),
        max_running=None if cap is None else int(cap),
        updated_by=str(r["updated_by"]),
        updated_at=float(r["updated_at"]),
        version=int(r["version"]),
    )
