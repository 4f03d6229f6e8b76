"""What a tenant holds, counted (`yoke_tenant_usage`): its actor instances, its pending timers,
its kept Idempotency-Key answers and its appended events' keys. Each count changes in the
transaction that changes what it counts, so it is exact however many processes write; the
`*` row of the tenants' settings holds limits, and no usage is ever counted under it.

Two uses: a quota refuses what would pass it (the increment carries the cap, and the table's
CHECK `yoke_tenant_quota` makes the database refuse the whole statement, so a batch writes
nothing), and a bound forgets a tenant's oldest past it (`bound`). This module must never
decide a cap or a bound: they come from the caller.
"""

from __future__ import annotations

from collections import Counter

from yoke.store.tx import Tx

KINDS = ("instances", "timers", "answers", "event_keys")


async def count(tx: Tx, tenant: str, kind: str, n: int) -> int:
    """Change what `tenant` is counted to hold of `kind` by `n`; returns the count now."""
    query = "add_usage" if n > 0 else "take_back_usage"
    row = await tx.one(query, {"tenant": tenant, "kind": kind, "n": n})
    return 0 if row is None else int(row["used"])


async def bound(tx: Tx, tenant: str, kind: str, keep_at_most: int | None) -> None:
    """One more of `kind` (`answers`, `event_keys`) for `tenant`; past `keep_at_most` its
    oldest are forgotten in the same transaction, so a tenant never holds more, however many
    keys it sends, and never makes another tenant's go."""
    used = await count(tx, tenant, kind, 1)
    if keep_at_most is not None and used > keep_at_most:
        gone = await tx.run(f"evict_oldest_{kind}", {"tenant": tenant, "n": used - keep_at_most})
        await count(tx, tenant, kind, -gone)


async def forget_expired(tx: Tx, kind: str, *, now: float) -> int:
    """Delete the expired rows of `kind` (`answers`, `event_keys`), each tenant's count by
    the rows this statement deleted; returns how many."""
    gone = Counter(str(r["tenant"]) for r in await tx.all(f"forget_{kind}", {"now": now}))
    for tenant in sorted(gone):
        await count(tx, tenant, kind, -gone[tenant])
    return sum(gone.values())
