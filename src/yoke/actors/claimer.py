"""`Claimer`: the drain's fetch loop, which claims `actor_queues` rows for this worker.

It owns when to claim and how much: woken by new rows (`wake`: an append, a NOTIFY, a
takeover, a freed window) or by the backup poll, it claims in batches (`claim_next`, `FOR
UPDATE SKIP LOCKED` on PostgreSQL) until a claim comes back short of what it may take, then
sleeps. With `claim="fair"` each tenant takes at most its weighted window of the hold budget
(`claims.ClaimWindows`, a quota per tenant in the statement); with `"first-come"` up to
`prefetch` rows beyond the running ones, tenants served in name order from a cursor. The
states of the instances a claim meets for the first time are read in one query before their
events start. A claim that failed may still have committed (the connection dropped as its
answer came back): its rows would be claimed here and held by no one, and as a worker claims
pending rows only, in flight until it stops. So each claim marks its rows with its own id, and
the rows of a failed one are put back to pending (`unclaim_lost`) before the next claim. The
rows are handed to the drain's core (`DrainCore.claimed`: held, per instance and group) and
the actions it returns performed by the drain (`perform`, then `pump`); the windows a claim
asks are the core's. This module decides nothing about what runs, and must never name a store
backend or read time but through its `Clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable

from yoke.actors.drain_core import Action, DrainCore, LoadStates
from yoke.actors.drain_parts import DrainConfig, HeldInstance
from yoke.actors.protocol import ActorStore
from yoke.actors.releases import Releases
from yoke.actors.runner import Runner
from yoke.clock import Clock
from yoke.errors import TRANSIENT, YokeError
from yoke.retry import Backoff, severity

log = logging.getLogger("yoke.actors.drain")


class Claimer:
    def __init__(
        self,
        *,
        store: ActorStore,
        worker_id: str,
        clock: Clock,
        config: DrainConfig,
        core: DrainCore,
        rules_ready: asyncio.Event,
        calls: Runner,
        releases: Releases,
        stopping: Callable[[], bool],
        perform: Callable[[list[Action]], None],
        pump: Callable[[], None],
    ) -> None:
        self._store = store
        self._worker_id = worker_id
        self._clock = clock
        self._cfg = config
        self._core = core
        self._windows = core.windows
        self._rules_ready = rules_ready  # set once the tenants' caps are known
        self._calls = calls
        self._releases = releases
        self._stopping = stopping
        self._perform = perform  # the drain does what the core asks
        self._pump = pump  # start what the claimed rows let start
        self._wake = asyncio.Event()
        self._fair = config.claim == "fair"
        self.more = False  # the last claim left rows behind: claim again when there is room
        self.claiming = False  # a claim statement is in flight
        self._tenant_cursor = ""  # claims serve tenants in name order from here (wrapping)
        self._claim_ids = itertools.count(1)  # each claim marks its rows with its own id
        # A claim that failed: the store may have committed it (its answer lost with the
        # connection), leaving rows claimed here that nothing holds. Undone before any claim.
        self._unsure: int | None = None

    def __repr__(self) -> str:
        return (
            f"Claimer(claim={self._cfg.claim!r}, claiming={self.claiming}, more={self.more}, "
            f"cursor={self._tenant_cursor!r}, unsure={self._unsure})"
        )

    def wake(self) -> None:
        """Claim soon: new rows may be waiting, or a window has room again."""
        self._wake.set()

    def room(self) -> int:
        if self._fair:  # each tenant's window bounds its own rows (`ClaimWindows.quota`)
            return self._cfg.batch_size
        return self._cfg.prefetch + self._cfg.concurrency - len(self._core.jobs)

    def refill(self) -> None:
        """A tenant's window wants more now (`Signal.REFILL`): claim."""
        if not self._fair:
            return
        # During a claim, the claim itself looks again when it ends (`hungry`): a wake per
        # release meanwhile would make the next claims as small as what ran during this one.
        if not self.claiming:
            self._wake.set()

    def freed(self) -> None:
        """Slots were freed: claim again if the last claim left rows behind and half a batch
        of room is free."""
        if self.more and self.room() >= self._cfg.batch_size // 2:
            self.more = False
            self._wake.set()

    async def run(self) -> None:
        backoff = Backoff(self._cfg.retry)
        await self._rules_ready.wait()  # no event of a capped tenant starts uncounted
        self._wake.set()  # boot: whatever is already waiting
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._cfg.poll_interval):
                    await self._wake.wait()
            self._wake.clear()
            try:
                while not self._stopping() and (room := self.room()) > 0:
                    if self._unsure is not None:
                        # Before any later claim, so the rows it took (the oldest due of their
                        # groups) are claimed again ahead of the rows behind them: FIFO holds.
                        await self._store.unclaim_lost(self._worker_id, self._unsure)
                        self._unsure = None
                    limit = min(room, self._cfg.batch_size)
                    tenants = self._claimable()
                    if tenants is not None and not tenants:
                        self.more = False  # no tenant can run now: a READY executor wakes us
                        break
                    claim_id = next(self._claim_ids)
                    self.claiming = True
                    try:
                        rows = await self._store.claim_next(
                            self._worker_id,
                            limit=limit,
                            now=self._clock.wall(),
                            after_tenant=self._tenant_cursor,
                            tenants=tenants,
                            quota=self._windows.quota if self._fair else None,
                            claim_id=claim_id,
                        )
                    except TRANSIENT:  # its answer may be lost: it may have committed
                        self._unsure = claim_id
                        raise
                    finally:
                        self.claiming = False
                    if self._fair:
                        # Each tenant took what its window has room for. A tenant that filled
                        # it is claimed again when a quarter is free (`released`, or
                        # here if that happened during this claim); otherwise claim until a
                        # claim is empty, so a wake ends asleep (a claim racing an append may
                        # have missed its rows).
                        met = self._windows.claimed(r.tenant for r in rows)
                        self.more = (bool(rows) and not self._windows.filled) or (
                            self._windows.hungry()
                        )
                        if len(met) >= limit:  # more tenants wait: the next claim goes on
                            self._tenant_cursor = met[-1]
                    else:
                        # A claim shares its rows between tenants, so a short one does not
                        # mean the queue is empty: only an empty claim does.
                        self.more = bool(rows)
                    if rows:
                        if not self._fair:
                            cursor = self._tenant_cursor
                            self._tenant_cursor = max(
                                (r.tenant for r in rows if r.tenant > cursor), default=""
                            )
                        for action in self._core.claimed(rows):
                            if isinstance(action, LoadStates):
                                await self._load_states(action.instances)
                            else:
                                self._perform([action])
                        self._pump()
                    if not self.more:
                        break
                backoff.ok()
            except YokeError as exc:
                pause = backoff.failed(exc)
                log.log(
                    severity(exc),
                    "claiming actor events failed (retrying in %.2fs): %s",
                    pause,
                    exc,
                )
                await asyncio.sleep(pause)
                self._wake.set()

    def _claimable(self) -> list[str] | None:
        """Tenants a claim may take now (None: all): runnable, none of their rows going back."""
        ready = self._calls.claimable()
        if ready is None:
            return None
        return [t for t in ready if not self._releases.busy(t)]

    async def _load_states(self, fresh: list[HeldInstance]) -> None:
        """One read for the states of the instances a claim met first, instead of one per
        instance from the runners: a burst of new instances would otherwise queue that many
        reads in the store's pool ahead of everything else (the timer loop's firings too)."""
        try:
            states = await self._store.get_states([inst.ref for inst in fresh])
        except YokeError as exc:  # each runner loads (and retries) its own instance instead
            log.warning("loading the states of %d instances failed: %s", len(fresh), exc)
            states = {}
        for inst in fresh:
            row = states.get(inst.ref)
            if row is not None:
                inst.cell.prime(row)
        self._core.loaded(fresh)
