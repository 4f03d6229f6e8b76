"""The fleet of workers: who owns which instance, and moving ownership when workers come and go.

* `LiveWorkers`: the workers with a recent heartbeat, as last read (at most `max_age` old), for
  placement: an append names the owner of each instance it creates (`Placer.rule`), so a new
  instance lands on a live worker at once, without a round of asking.
* `Fleet`, one per worker, runs two loops:
  - the balancer, under a lease (`yoke.leases.Elector`, one holder in the fleet): every
    `rebalance_interval` it reads the counts per worker and marks at most
    `rebalance_max_moves` moves (`placement.plan_moves`). One balancer, so two workers never
    plan from different snapshots and move instances back and forth, and the bound on moves
    under way holds for the whole fleet; when its holder dies another takes the lease.
  - the giver: it looks for moves marked on its own instances (poked by NOTIFY, or every
    interval) and hands each over: the drain starts nothing more of the instance
    (`drain.pause`), its running calls end (at most `move_grace` seconds) and their
    completions are written, then one transaction moves the owner and epoch (`finish_move`),
    after which its claimed rows are pending for the taker. FIFO per group and the group cap
    hold across the move because nothing of the instance runs on the giver when the taker
    can first claim it; a call still running after `move_grace` is fenced by the new epoch
    (its completion and state writes are refused, the taker runs the event again).

The store does the writes; this module decides when, and never names a store backend. It
reads time only through its `Clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from yoke.actors.drain import QueueDrainScheduler
from yoke.actors.metrics import ActorMetrics
from yoke.actors.placement import Move, PlacementMode, place_rule, plan_moves, within
from yoke.actors.protocol import ActorStore
from yoke.actors.settings import ActorSettings
from yoke.clock import Clock
from yoke.errors import YokeError
from yoke.leases import Elector, holder_name
from yoke.retry import severity
from yoke.store.actor_records import InstanceRef, MoveOrder, MoveResult, Owner
from yoke.store.leaseverbs import Lease

log = logging.getLogger("yoke.actors.fleet")
BALANCER_LEASE = "yoke.fleet.balancer"
_SCAN_PER_MOVE = 4  # candidates read per move the balancer may still make
_GIVE_AT_ONCE = 4  # moves a giver finishes concurrently (each is one transaction)
_POKE_GAP = 0.25  # a giver looks for moves at most this often when NOTIFYs keep coming


class LiveWorkers:
    """Worker ids with a heartbeat within `stale_after` and not stopped, read at most every
    `max_age` seconds."""

    def __init__(
        self, store: ActorStore, *, clock: Clock, stale_after: float, max_age: float
    ) -> None:
        self._store = store
        self._clock = clock
        self._stale_after = stale_after
        self._max_age = max_age
        self._ids: tuple[str, ...] = ()
        self._read_at: float | None = None

    def __repr__(self) -> str:
        return f"LiveWorkers({list(self._ids)})"

    @property
    def last(self) -> tuple[str, ...]:
        return self._ids

    async def get(self, *, fresh: bool = False) -> tuple[str, ...]:
        now = self._clock.monotonic()
        # None live at the last read: read again each time, so the first worker up gets the
        # next new instances (rather than leaving them unowned until it looks for orphans).
        if fresh or not self._ids or self._read_at is None or now - self._read_at >= self._max_age:
            wall = self._clock.wall()
            rows = await self._store.fleet.list_workers()
            self._ids = tuple(
                sorted(
                    w.worker_id
                    for w in rows
                    if w.stopped_at is None and w.heartbeat_at >= wall - self._stale_after
                )
            )
            self._read_at = now
        return self._ids


class Placer:
    """The owner rule of new and orphaned instances (`YOKE_PLACEMENT`), over the live workers."""

    def __init__(self, *, mode: PlacementMode, live: LiveWorkers, creator: str | None) -> None:
        self.mode = mode
        self._live = live
        self._creator = creator  # this worker (None in a process that runs no worker)

    def __repr__(self) -> str:
        return f"Placer({self.mode.value}, creator={self._creator!r})"

    def rule_now(self) -> Owner:
        """`rule()` over the live workers as last read (for a caller that cannot wait)."""
        if self.mode is PlacementMode.CREATOR:
            return self._creator
        workers = self._live.last or ((self._creator,) if self._creator else ())
        return place_rule(self.mode, workers, creator=None) if workers else None

    async def rule(self, *, without: str | None = None, fresh: bool = False) -> Owner:
        """The owner of each new instance; `without`: a worker about to leave (its
        instances go elsewhere, or nowhere under `creator`: the first worker takes them)."""
        if self.mode is PlacementMode.CREATOR:
            return None if without is not None else self._creator
        workers = [w for w in await self._live.get(fresh=fresh) if w != without]
        if not workers:
            return None  # no live worker: unowned, the first worker up takes it
        return place_rule(self.mode, workers, creator=None)


class Fleet:
    def __init__(
        self,
        *,
        store: ActorStore,
        drain: QueueDrainScheduler,
        settings: ActorSettings,
        live: LiveWorkers,
        clock: Clock,
        metrics: ActorMetrics | None = None,
    ) -> None:
        self._store = store
        self._drain = drain
        self._s = settings
        self.worker_id = settings.worker_id
        self.mode = PlacementMode.parse(settings.placement)
        self._live = live
        self._clock = clock
        self._metrics = metrics or ActorMetrics(None)
        self._poke = asyncio.Event()
        self._cursor: InstanceRef | None = None  # `tenant` mode: where the next scan starts
        self.elector = Elector(
            store.leases,
            name=BALANCER_LEASE,
            holder=holder_name(self.worker_id),
            ttl=settings.stale_after,
            renew_every=settings.heartbeat_interval,
            poll=max(settings.rebalance_interval, settings.heartbeat_interval),
            clock=clock,
        )
        self.given = 0  # moves this worker finished as giver
        self.marked = 0  # moves this worker marked as balancer
        self.giving: set[InstanceRef] = set()

    def __repr__(self) -> str:
        return (
            f"Fleet({self.worker_id!r}, {self.mode.value}, giving={len(self.giving)}, "
            f"given={self.given}, marked={self.marked})"
        )

    def poke(self) -> None:
        """A NOTIFY: moves may be marked on our instances."""
        self._poke.set()

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._give_loop(), name="yoke-fleet-give")
            if self.mode is not PlacementMode.CREATOR:
                tg.create_task(self.elector.run(self._balance_loop), name="yoke-fleet-balance")

    # -- the giver -----------------------------------------------------------------------------
    async def _give_loop(self) -> None:
        while True:
            self._poke.clear()
            try:
                await self.give()
            except YokeError as exc:
                log.log(
                    severity(exc),
                    "worker %s: handing instances over failed: %s",
                    self.worker_id,
                    exc,
                )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._s.rebalance_interval):
                    await self._poke.wait()
            # A NOTIFY comes with every append: many of them, one look (moves are rare).
            await asyncio.sleep(_POKE_GAP)

    async def give(self) -> int:
        """Finish the moves marked on this worker's instances. Returns how many moved."""
        orders = await self._store.fleet.moves_from(
            self.worker_id, limit=self._s.rebalance_max_moves
        )
        if not orders:
            return 0
        for o in orders:
            self.giving.add(o.ref)
            self._drain.pause(o.ref)
        gate = asyncio.Semaphore(_GIVE_AT_ONCE)
        try:
            # Every move ends (moved, cancelled, or failed with the store) before any resumes.
            got = await asyncio.gather(
                *(self._give_one(o, gate) for o in orders), return_exceptions=True
            )
        finally:
            for o in orders:
                self.giving.discard(o.ref)
                self._drain.resume(o.ref, o.epoch)
        results = [r for r in got if isinstance(r, MoveResult)]
        failed = [r for r in got if not isinstance(r, MoveResult)]
        for exc in failed:
            if not isinstance(exc, YokeError):
                raise exc
        if failed:  # the store: those moves stay marked, the next look tries them again
            log.warning(
                "worker %s: %d moves not finished: %s", self.worker_id, len(failed), failed[0]
            )
        moved = results.count(MoveResult.MOVED)
        self.given += moved
        self._metrics.moved("rebalance", moved)
        self._metrics.moved("cancelled", results.count(MoveResult.CANCELLED))
        return moved

    async def _give_one(self, order: MoveOrder, gate: asyncio.Semaphore) -> MoveResult:
        if not await self._drain.settle(order.ref, self._s.move_grace):
            log.warning(
                "moving %s to %s: calls still run after %.1fs; they are fenced",
                order.ref,
                order.taker,
                self._s.move_grace,
            )
        async with gate:
            stale_before = self._clock.wall() - self._s.stale_after
            return await self._store.fleet.finish_move(
                self.worker_id, order, stale_before=stale_before
            )

    # -- the balancer ----------------------------------------------------------------------------
    async def _balance_loop(self, lease: Lease) -> None:
        log.info("worker %s balances the fleet (term %d)", self.worker_id, lease.epoch)
        while True:
            try:
                await self.balance()
            except YokeError as exc:
                log.log(severity(exc), "rebalancing failed: %s", exc)
            await asyncio.sleep(self._s.rebalance_interval)  # a period, not a synchronisation

    async def balance(self) -> list[Move]:
        """One step: mark the moves that bring every live worker within its share."""
        live = await self._live.get(fresh=True)
        counts = await self._store.fleet.fleet_counts(
            with_pending=self.mode is PlacementMode.BALANCED
        )
        budget = self._s.rebalance_max_moves - sum(c.moving_out for c in counts)
        if budget <= 0 or len(live) < 2:
            return []
        # A move under way counts at its taker already.
        owned = dict.fromkeys(live, 0)
        for c in counts:
            if c.worker_id in owned:
                owned[c.worker_id] += c.owned - c.moving_out + c.moving_in
        candidates = await self._candidates(live, owned, budget)
        pending = {c.worker_id: c.pending for c in counts if c.worker_id in owned}
        loads: dict[InstanceRef, int] | None = None
        if self.mode is PlacementMode.BALANCED and not candidates and any(pending.values()):
            # Counts are balanced: the busiest worker's heaviest instances, and any of the
            # idlest one's, for swaps that move backlog (`plan_moves` decides if any helps).
            giver = max(live, key=lambda w: (pending.get(w, 0), w))
            taker = min(live, key=lambda w: (pending.get(w, 0), w))
            heavy = await self._store.fleet.pending_heads(giver, limit=budget)
            light = await self._store.fleet.owned_page(worker_id=taker, after=None, limit=budget)
            loads = dict(heavy)
            candidates = [(ref, giver) for ref, _ in heavy] + light
        moves = plan_moves(
            mode=self.mode,
            live=live,
            owned=owned,
            candidates=candidates,
            tolerance=self._s.rebalance_tolerance,
            budget=budget,
            pending=pending,
            loads=loads,
        )
        if moves:
            n = await self._store.fleet.mark_moves(
                [(m.ref, m.giver, m.taker) for m in moves], now=self._clock.wall()
            )
            self.marked += n
            log.info("balancer: %d moves marked over %d live workers", n, len(live))
        return moves

    async def _candidates(
        self, live: Sequence[str], owned: dict[str, int], budget: int
    ) -> list[tuple[InstanceRef, str]]:
        limit = budget * _SCAN_PER_MOVE
        if self.mode is PlacementMode.TENANT:
            page = await self._store.fleet.owned_page(
                worker_id=None, after=self._cursor, limit=limit
            )
            self._cursor = page[-1][0] if len(page) == limit else None  # wrap around
            return page
        if within(owned, self._s.rebalance_tolerance):
            return []
        fair = sum(owned.values()) / len(owned)
        out: list[tuple[InstanceRef, str]] = []
        for w in live:
            if owned[w] > fair:
                out += await self._store.fleet.owned_page(worker_id=w, after=None, limit=limit)
        return out
