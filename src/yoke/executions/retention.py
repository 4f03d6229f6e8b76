"""Retention: the finished past is deleted, by one process at a time.

Every `YOKE_PRUNE_INTERVAL_SECS` (60) the process holding the lease `yoke.executions.pruner`
(`leases.Elector`: one holder at a time, taken over when it dies) or, in a high-availability
pair, the leader (`only_while`: its admission lease already makes it one process at a time,
and a second lease would take a second connection of the lease pool) deletes what is older than
`YOKE_RETENTION_SECS` (30 days): finished executions with their steps and requests, decided
starts whose execution is gone, expired idempotency answers, and control-log entries older
than `YOKE_AUDIT_RETENTION_SECS` when that is set (unset: the audit log is kept; its newest
limits entry always is). It works in batches of `BATCH` rows, each its own short transaction,
and goes on while a batch comes back full, yielding between them so admission is not held
back. `pruned` counts the rows deleted, by table, for the `yoke_pruned_rows_total` metric.

This module must never choose what is old by itself: the cutoffs come from the settings and
the clock it is given.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict

from yoke.clock import Clock
from yoke.errors import StoreUnavailable
from yoke.leases import Elector, LeaseStore, holder_name
from yoke.store import Pruned, Store
from yoke.store.leaseverbs import Lease

log = logging.getLogger("yoke.executions")

LEASE = "yoke.executions.pruner"
BATCH = 1000
LEASE_TTL = 30.0


class Pruner:
    def __init__(
        self,
        store: Store,
        leases: LeaseStore | None,
        *,
        clock: Clock,
        holder: str,
        retention: float,
        interval: float,
        audit_retention: float | None = None,
        batch: int = BATCH,
        only_while: Callable[[], bool] | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self.retention = retention
        self.interval = interval
        self.audit_retention = audit_retention
        self.batch = batch
        self.pruned: Counter[str] = Counter()  # rows deleted by this process, by table
        self.rounds = 0
        # One process at a time: the holder of a lease of its own, or (no lease store given)
        # the process for which `only_while()` holds, such as an HA pair's leader.
        self._only_while = only_while
        self.elector = (
            None
            if leases is None
            else Elector(
                leases,
                name=LEASE,
                holder=holder_name(holder),
                ttl=LEASE_TTL,
                clock=clock,
                poll=min(interval, LEASE_TTL / 3),
            )
        )

    def __repr__(self) -> str:
        return (
            f"Pruner(retention={self.retention:g}s, every={self.interval:g}s, "
            f"rounds={self.rounds}, pruned={dict(self.pruned)})"
        )

    async def run(self) -> None:
        """Service: prune every `interval` while this process is the one that prunes."""
        if self.elector is not None:
            await self.elector.run(self._hold)
        else:
            await self._rounds(self._only_while or (lambda: True))

    async def _hold(self, _: Lease) -> None:
        await self._rounds(lambda: True)

    async def _rounds(self, mine: Callable[[], bool]) -> None:
        while True:
            if mine():
                try:
                    await self.prune()
                except StoreUnavailable as exc:  # the next round tries again
                    log.warning("pruning failed: %s", exc)
            await asyncio.sleep(self.interval)  # a period, not a synchronisation

    async def prune(self) -> Counter[str]:
        """One round: batches until none comes back full. Returns what it deleted."""
        now = self._clock.wall()
        before = now - self.retention
        audit = None if self.audit_retention is None else now - self.audit_retention
        got: Counter[str] = Counter()
        while True:
            batch: Pruned = await self._store.retention.prune(
                before=before, audit_before=audit, now=now, batch=self.batch
            )
            got.update({k: v for k, v in asdict(batch).items() if v})
            if not batch.full(self.batch):
                break
            await asyncio.sleep(0)  # let the writes waiting for the store go first
        self.pruned.update(got)
        self.rounds += 1
        if got:
            log.info("pruned %s", ", ".join(f"{n} {table}" for table, n in sorted(got.items())))
        return got
