"""The tenant verbs of the SQL store: the tenants' settings, the counters of the actors'
per-tenant cap, the tenants' token buckets and their usage counters, written once over named
queries (section "tenants" of `queries.sql`).

`put_tenant_settings` writes a tenant's row and its control-log entry in one transaction, so
neither lands without the other, and only if the row is still at the version the change was
decided on (a compare-and-set: two admins' changes never overwrite each other unseen). The row
of tenant `*` (`DEFAULTS`) holds the defaults of every tenant without a value of its own; it is
a row of limits and never counts anything.

`take_tenant_slot` is the actors' cap's exact check: under the tenant's lock (an advisory
transaction lock on PostgreSQL, keyed by the tenant, so that a tenant with no row of its own,
capped by `*`, is serialized too; SQLite's IMMEDIATE write serializes every taker), it counts the
calls running on live workers and takes one only below the cap (its own, else `*`'s), so
racing workers never pass it together. A worker's counter goes down when a call ends; a worker
that died stops counting once its heartbeat is stale, and its rows are cleared when it starts
again.

`take_tokens` is a token bucket in one statement on the database's clock (GCRA: the row holds
the bucket's theoretical arrival time), so servers whose clocks disagree share one bucket
exactly. This module decides nothing else: rates, caps and times come from the caller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from yoke.store.records import NewControl
from yoke.store.rows import control_params
from yoke.store.tx import Row, Transactions

DEFAULTS = "*"  # the tenant whose row holds every other tenant's defaults

# Columns of tenant_settings, as `TenantValues` names them.
_COLUMNS = (
    "weight",
    "max_running",
    "append_rate",
    "append_burst",
    "max_instances",
    "max_timers",
    "exec_max_running",
    "exec_max_queued",
    "exec_rate",
    "exec_burst",
)


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantValues:
    """The settable fields of a tenant's row; None: not set here (the defaults' value, if
    any, applies). `max_running` caps the tenant's concurrent actor `process()` calls;
    the `exec_*` fields are its executions' limits."""

    weight: float | None = None
    max_running: int | None = None
    append_rate: float | None = None
    append_burst: int | None = None
    max_instances: int | None = None
    max_timers: int | None = None
    exec_max_running: int | None = None
    exec_max_queued: int | None = None
    exec_rate: float | None = None
    exec_burst: int | None = None

    def or_defaults(self, defaults: TenantValues) -> TenantValues:
        """Each field not set here takes the defaults' value (field by field)."""
        mine = {f.name: getattr(self, f.name) for f in fields(self)}
        return TenantValues(
            **{k: getattr(defaults, k) if v is None else v for k, v in mine.items()}
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantRow:
    tenant: str
    values: TenantValues
    updated_by: str
    updated_at: float
    version: int  # raised by every change (a compare-and-set's token)

    @property
    def weight(self) -> float | None:
        return self.values.weight

    @property
    def max_running(self) -> int | None:
        return self.values.max_running


@dataclass(frozen=True, kw_only=True, slots=True)
class Tokens:
    """What a bucket answered: `granted`, or not, and then `retry_after` seconds until the
    tokens asked for are there (on the database's clock)."""

    granted: bool
    retry_after: float = 0.0


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
        values: TenantValues,
        *,
        audit: NewControl,
        expect: int = 0,
    ) -> TenantRow | None:
        params = {
            "tenant": tenant,
            **{c: getattr(values, c) for c in _COLUMNS},
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
            await tx.run("lock_tenant", params)
            cap = await tx.one("tenant_actor_cap", params)
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

    async def held(self, tenant: str) -> dict[str, int]:
        """What `tenant` is counted to hold, by kind (`store/usage.py`)."""
        async with self._t.read() as tx:
            rows = await tx.all("tenant_usage", {"tenant": tenant})
        return {str(r["kind"]): int(r["used"]) for r in rows}

    # -- token buckets -------------------------------------------------------------------------
    async def take_tokens(
        self, tenant: str, kind: str, *, n: int, rate: float, burst: int
    ) -> Tokens:
        """Take `n` tokens of `tenant`'s bucket `kind` (refilled at `rate` a second, holding at
        most `burst`), or none. One statement on the database's clock; a refusal reads the
        bucket once more (a second statement) to say when the tokens will be there."""
        params = {"tenant": tenant, "kind": kind, "n": n, "rate": rate, "burst": burst}
        async with self._t.single() as tx:
            row = await tx.one("take_tokens", params)
        if row is not None:
            return Tokens(granted=True)
        async with self._t.read() as tx:
            now = await tx.one("bucket_state", params)
        assert now is not None
        # GCRA: `n` tokens conform once now >= max(tat, now) + n/rate - burst/rate. A refused
        # bucket's tat only grows until then, so this is never shorter than the real wait.
        tat, at = float(now["tat"] or 0.0), float(now["now"])
        wait = max(tat, at) + n / rate - burst / rate - at
        return Tokens(granted=False, retry_after=max(wait, 0.001) if math.isfinite(wait) else 1.0)

    async def forget_full_buckets(self) -> int:
        """Remove the buckets that are full again (a full bucket and none are the same)."""
        async with self._t.single() as tx:
            return await tx.run("forget_full_buckets", {})


def _tenant(r: Row) -> TenantRow:
    values = {c: r[c] for c in _COLUMNS}
    for c in ("weight", "append_rate", "exec_rate"):
        values[c] = None if values[c] is None else float(values[c])
    for c in _COLUMNS:
        if c not in ("weight", "append_rate", "exec_rate") and values[c] is not None:
            values[c] = int(values[c])
    return TenantRow(
        tenant=str(r["tenant"]),
        values=TenantValues(**values),
        updated_by=str(r["updated_by"]),
        updated_at=float(r["updated_at"]),
        version=int(r["version"]),
    )
