"""Retention: deleting finished rows older than a cutoff, one bounded batch per call.

A batch is one transaction: up to `batch` executions finished before the cutoff (the oldest
first, found along the primary key: no index on a time, which every finish would pay for) with
their steps and requests, then up to `batch` decided starts whose execution is
gone, expired idempotency answers, and (when asked) control-log entries older than their own
cutoff, except the newest limits entry, which is the limits every process applies at boot.
The caller repeats while a batch came back full, so no transaction holds the store for long;
one process prunes at a time (the caller holds a lease). A running execution and a queued
start are never touched.

This module must never read a clock or choose a cutoff: they come from the caller.
"""

from __future__ import annotations

from yoke.store.records import Pruned
from yoke.store.tx import Transactions


class PruneVerbs:
    def __init__(self, transactions: Transactions) -> None:
        self._t = transactions

    def __repr__(self) -> str:
        return f"PruneVerbs({self._t!r})"

    async def prune(
        self, *, before: float, audit_before: float | None, now: float, batch: int
    ) -> Pruned:
        async with self._t.write() as tx:
            rows = await tx.all("prune_executions", {"before": before, "batch": batch})
            ids = [str(r["execution_id"]) for r in rows]
            steps = requests = signals = 0
            if ids:
                steps = await tx.run("prune_steps_of", {"ids": self._t.array(ids)})
                requests = await tx.run("prune_requests_of", {"ids": self._t.array(ids)})
                signals = await tx.run("prune_signals_of", {"ids": self._t.array(ids)})
            starts = await tx.run("prune_starts", {"before": before, "batch": batch})
            answers = await tx.run("prune_answers", {"now": now, "batch": batch})
            controls = 0
            if audit_before is not None:
                controls = await tx.run("prune_controls", {"before": audit_before, "batch": batch})
        return Pruned(
            executions=len(ids),
            steps=steps,
            requests=requests,
            starts=starts,
            answers=answers,
            controls=controls,
            signals=signals,
        )
