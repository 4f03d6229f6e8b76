"""The fleet's verbs of the store: workers (register, heartbeat, stop), the takeover of a
stopped or silent worker's instances, and the moves of the rebalancer (`yoke.actors.fleet`).

`FleetVerbs` holds a backend's transactions by reference; `ActorVerbs` holds it as its
`fleet` and forwards the `ActorStore` verbs to it. Like every verb module it decides which
named queries run in which transaction and nothing else: owners, epochs and times come from the
caller. A hand-over (takeover, stop, move) re-owns instance rows before it unclaims their queue
rows: the lock order and why are in `actorverbs`' docstring and in `_hand_over` below. The
rows a worker held when it died (taken over, or taken back by its next life) go back as
suspects, and the one it ran alone is charged a crash attempt (`unclaim_dead`): whoever
recovers a call in flight counts it, so an event that kills its worker is a dead letter after
`CRASH_ATTEMPTS` charges instead of taking every worker down in turn.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from yoke.store.actor_records import (
    CRASH_ATTEMPTS,
    FleetCounts,
    InstanceRef,
    MoveOrder,
    MoveResult,
    Owner,
    Takeover,
    WorkerRow,
    owner_of,
    ref_params,
)
from yoke.store.tx import Row, Transactions, Tx

DIED = "its worker died while it ran alone there (it may be what killed it)"


@dataclass(frozen=True, kw_only=True, slots=True)
class Died:
    """A hand-over of a worker that died, at `now`."""

    now: float


class FleetVerbs:
    """Workers, takeovers and moves over one backend's transactions (part of its `actors`)."""

    def __init__(self, transactions: Transactions) -> None:
        self._t = transactions

    def __repr__(self) -> str:
        return f"FleetVerbs({self._t!r})"

    # -- workers -------------------------------------------------------------------------------
    async def register_worker(self, worker_id: str, *, hostname: str, pid: int, now: float) -> None:
        async with self._t.write() as tx:
            await tx.run(
                "register_worker",
                {"worker_id": worker_id, "hostname": hostname, "pid": pid, "now": now},
            )
            refs = await tx.all("lock_instances_of_worker", {"worker_id": worker_id})
            # What its previous life still held, it held when it died (a stop unclaims all).
            await self._hand_over(tx, refs, worker_id, died=Died(now=now))

    async def worker_heartbeat(self, worker_id: str, *, now: float) -> bool:
        async with self._t.write() as tx:
            return await tx.run("worker_heartbeat", {"worker_id": worker_id, "now": now}) == 1

    async def stop_worker(self, worker_id: str, *, now: float, to: Owner = None) -> int:
        async with self._t.write() as tx:
            await tx.run("mark_worker_stopped", {"worker_id": worker_id, "now": now})
            refs = await tx.all("lock_instances_of_worker", {"worker_id": worker_id})
            await self._hand_over_to(tx, refs, to)
        return len(refs)

    async def forget_workers(self, *, before: float) -> int:
        async with self._t.write() as tx:
            gone = await tx.all("forget_workers", {"before": before})
            if gone:
                for query in ("forget_executors", "forget_spares", "forget_tenant_counters"):
                    await tx.run(query, {})
        return len(gone)

    async def claim_orphans(
        self,
        worker_id: str,
        *,
        stale_before: float,
        now: float,
        to: Owner | None = None,
    ) -> Takeover:
        async with self._t.write() as tx:
            refs = await tx.all(
                "lock_orphans", {"worker_id": worker_id, "stale_before": stale_before}
            )
            gone: set[str] = set()
            if refs and to is not None:
                rows = await tx.all("gone_workers", {"stale_before": stale_before})
                gone = {str(r["worker_id"]) for r in rows}
            requeued = await self._hand_over_to(
                tx,
                refs,
                worker_id if to is None else to,
                fallback=worker_id,
                gone=gone,
                died=Died(now=now),
            )
        return Takeover(instances=len(refs), requeued=requeued)

    async def _hand_over_to(
        self,
        tx: Tx,
        refs: list[Row],
        to: Owner,
        *,
        fallback: str | None = None,
        gone: set[str] | None = None,
        died: Died | None = None,
    ) -> int:
        """`_hand_over` with each instance's owner named by `to` (grouped by owner). An orphan
        the rule would give to a worker that is `gone` or back to its own stale owner (the
        rule's view of the live workers is a moment old) goes to `fallback` instead."""
        if to is None or isinstance(to, str):
            return await self._hand_over(tx, refs, to, died=died)
        by_owner: dict[str | None, list[Row]] = {}
        for r in refs:
            owner = owner_of(to, str(r["tenant"]), str(r["actor"]), str(r["instance_id"]))
            if fallback is not None and (
                owner is None or owner == r["worker_id"] or owner in (gone or ())
            ):
                owner = fallback
            by_owner.setdefault(owner, []).append(r)
        n = 0
        for owner, group in by_owner.items():
            n += await self._hand_over(tx, group, owner, died=died)
        if by_owner:
            await tx.all("notify_actor_queue", {})  # the new owners drain at once
        return n

    async def _hand_over(
        self, tx: Tx, refs: list[Row], owner: str | None, *, died: Died | None = None
    ) -> int:
        """New owner and epoch for `refs`; their claimed rows are pending again (as suspects,
        the one run alone charged, if their worker `died`)."""
        if not refs:
            return 0
        rows = json.dumps(
            [
                {"tenant": r["tenant"], "actor": r["actor"], "instance_id": r["instance_id"]}
                for r in refs
            ]
        )
        await tx.run("set_owner", {"rows": rows, "owner": owner})
        # Re-own before unclaiming: the old owner's claims take no instance lock, so on
        # PostgreSQL one may commit between two of these statements. Once re-owned (and locked
        # by this transaction) a row is skipped by its claims; a claim that committed before
        # is undone by the unclaim after. The other order left such a row claimed by the old
        # owner under its old epoch but owned by the new one: in flight for good.
        await tx.run("reown_queue_rows", {"rows": rows})
        if died is None:
            n = await tx.run("unclaim", {"rows": rows})
        else:
            n = await tx.run(
                "unclaim_dead",
                {"rows": rows, "now": died.now, "dead_after": CRASH_ATTEMPTS, "error": DIED},
            )
        if n:
            await tx.all("notify_actor_queue", {})
        return n

    async def list_workers(self) -> list[WorkerRow]:
        async with self._t.read() as tx:
            rows = await tx.all("list_workers", {})
        return [
            WorkerRow(
                worker_id=str(r["worker_id"]),
                hostname=str(r["hostname"]),
                pid=int(r["pid"]),
                started_at=float(r["started_at"]),
                heartbeat_at=float(r["heartbeat_at"]),
                stopped_at=None if r["stopped_at"] is None else float(r["stopped_at"]),
            )
            for r in rows
        ]

    # -- the fleet: placement and rebalancing ------------------------------------------------
    async def fleet_counts(
        self, *, tenant: str | None = None, with_pending: bool = False
    ) -> list[FleetCounts]:
        async with self._t.read() as tx:
            rows = await tx.all("fleet_counts", {"tenant": tenant, "with_pending": with_pending})
        return [
            FleetCounts(
                worker_id=str(r["worker_id"]),
                owned=int(r["owned"]),
                moving_out=int(r["moving_out"]),
                moving_in=int(r["moving_in"]),
                pending=int(r["pending"]),
            )
            for r in rows
        ]

    async def owned_page(
        self, *, worker_id: str | None, after: InstanceRef | None, limit: int
    ) -> list[tuple[InstanceRef, str]]:
        params = {
            "worker_id": worker_id,
            "after_tenant": "" if after is None else after.tenant,
            "after_actor": "" if after is None else after.actor,
            "after_id": "" if after is None else after.instance_id,
            "limit": limit,
        }
        async with self._t.read() as tx:
            rows = await tx.all("owned_page", params)
        return [
            (
                InstanceRef(
                    tenant=str(r["tenant"]),
                    actor=str(r["actor"]),
                    instance_id=str(r["instance_id"]),
                ),
                str(r["worker_id"]),
            )
            for r in rows
        ]

    async def pending_heads(self, worker_id: str, *, limit: int) -> list[tuple[InstanceRef, int]]:
        async with self._t.read() as tx:
            rows = await tx.all("pending_heads", {"worker_id": worker_id, "limit": limit})
        return [
            (
                InstanceRef(
                    tenant=str(r["tenant"]),
                    actor=str(r["actor"]),
                    instance_id=str(r["instance_id"]),
                ),
                int(r["n"]),
            )
            for r in rows
        ]

    async def mark_moves(self, moves: Sequence[tuple[InstanceRef, str, str]], *, now: float) -> int:
        if not moves:
            return 0
        rows = json.dumps([{**ref_params(ref), "giver": g, "taker": t} for ref, g, t in moves])
        async with self._t.write() as tx:
            n = await tx.run("mark_moves", {"rows": rows, "now": now})
            if n:
                await tx.all("notify_actor_queue", {})  # givers look at once
        return n

    async def moves_from(self, worker_id: str, *, limit: int) -> list[MoveOrder]:
        async with self._t.read() as tx:
            rows = await tx.all("moves_from", {"worker_id": worker_id, "limit": limit})
        return [
            MoveOrder(
                ref=InstanceRef(
                    tenant=str(r["tenant"]),
                    actor=str(r["actor"]),
                    instance_id=str(r["instance_id"]),
                ),
                taker=str(r["moving_to"]),
                epoch=int(r["owner_epoch"]),
            )
            for r in rows
        ]

    async def finish_move(
        self, worker_id: str, order: MoveOrder, *, stale_before: float
    ) -> MoveResult:
        """The giver's half of a move, once nothing of the instance runs there: owner and
        epoch change, its claimed rows go back to pending for the taker (a takeover's steps). A
        taker that stopped or went silent since cancels the move: the giver keeps the
        instance under a new epoch (its rows claimed while it paused are pending again)."""
        params = {
            **ref_params(order.ref),
            "worker_id": worker_id,
            "epoch": order.epoch,
            "stale_before": stale_before,
        }
        async with self._t.write() as tx:
            row = await tx.one("lock_move", params)
            if row is None or str(row["moving_to"]) != order.taker:
                return MoveResult.GONE
            live = bool(row["taker_live"])
            await self._hand_over(tx, [row], order.taker if live else worker_id)
            await tx.all("notify_actor_queue", {})
        return MoveResult.MOVED if live else MoveResult.CANCELLED

    async def owned_instances(self) -> dict[str, int]:
        async with self._t.read() as tx:
            rows = await tx.all("owned_instances", {})
        return {str(r["worker_id"]): int(r["instances"]) for r in rows}
