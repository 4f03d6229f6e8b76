"""`Leadership`: the admission server's side of a high-availability pair (`yoke serve --ha`).

Two (or more) servers share one PostgreSQL; one leads and admits, the others stand by and
refuse every start and control change with `NotLeader` (503), serving reads. The lease is
the `admission` row of the store's leases, held through `yoke.leases.Elector` (renewed every
TTL/5, trusted locally only until a deadline measured before each renewal).

The life of a server: it starts as a standby, fenced at epoch 0 (which no term has), so even a
write that slipped past the core's refusal could not commit. When it takes the lease (term
`epoch`):
1. the store is fenced to `epoch`: from now on every write that decides for the queue commits
   only while this term is the lease's (the fence and the takeover share an advisory lock,
   so no write of the former leader can commit after this takeover did);
2. every QUEUED start in the store is adopted (moved to this instance, fenced like any other
   write) and its steps to re-use found, the newest limits in the control log are applied
   (read after that fenced write, so no change of the former leader is missed), then, in one
   turn of the loop, the core leads and queues them first, in their arrival order with their
   priorities; with `requeue` false they are recorded ABORTED instead, as a single server's
   crash leaves them;
3. instances whose heartbeat is stale are recovered: their RUNNING executions ABORTED, their
   slots freed. (A former leader that is alive keeps running what it granted; its slots stay
   taken until each end is recorded, which is not fenced.)
When the term ends (a renewal refused, the local deadline passed, or `resign`), the core steps
down before anything else: its queue empties without a write (the next leader adopts it) and
the fence keeps the old epoch, so any late write fails. `resign` (graceful stop) releases the
lease at once, with a NOTIFY that wakes the standby, before the running executions are awaited
(unless no other server of the pair is connected: then the leader shuts down as a lone server
does, refusing its queued starts, and releases the lease last).

A standby is woken by that NOTIFY, by its poll (about every second), and with a liveness lock
(`liveness`) as soon as the leader's session is gone, which lets it take the lease without
waiting for the expiry.

This module must never name a store backend or read time but through its `Clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from yoke.clock import Clock
from yoke.errors import YokeError
from yoke.executions.core import Role
from yoke.executions.model import Limits
from yoke.executions.service import Executions
from yoke.leases import Elector, LeaseStore
from yoke.store import Store
from yoke.store.leaseverbs import Fence, Lease

log = logging.getLogger("yoke.ha")

ADMISSION = "admission"  # the lease's name
STANDBY_EPOCH = 0  # no term has it: a standby's fence lets nothing through


class Liveness(Protocol):
    """The optional liveness lock: a session lock the leader holds on a connection of its own,
    released by the database as soon as that session ends (a killed process)."""

    held: bool

    async def hold(self) -> None:
        """Take the lock (wait while another session holds it)."""
        ...

    async def let_go(self) -> None: ...

    async def owner(self) -> str | None:
        """The name of the session that holds the lock now, if any."""
        ...

    def name_of(self, holder: str) -> str:
        """The name of the session of lease holder `holder` that holds the lock."""
        ...


class Leadership:
    def __init__(
        self,
        *,
        executions: Executions,
        store: Store,
        leases: LeaseStore,
        holder: str,
        clock: Clock,
        ttl: float,
        poll: float = 1.0,
        requeue: bool = True,
        recover: Callable[[], Awaitable[object]] | None = None,
        liveness: Liveness | None = None,
    ) -> None:
        self.executions = executions
        self.store = store
        self.holder = holder
        self.requeue = requeue
        self._leases = leases
        self._clock = clock
        self._poll = poll
        self._recover = recover
        self._liveness = liveness
        self._changed = asyncio.Event()  # set whenever the role changes
        self.elector = Elector(
            leases,
            name=ADMISSION,
            holder=holder,
            ttl=ttl,
            clock=clock,
            renew_every=ttl / 5,
            poll=poll,
            observe=self._observe,
        )
        self.epoch = STANDBY_EPOCH  # of the term held now, or of the last one
        self.leader: Lease | None = None  # the lease as last seen (held by us or another)
        self.terms = 0  # terms this process began (failovers to it)
        self.stepdowns = 0
        self._task: asyncio.Task[None] | None = None
        self._resigned = False

    def __repr__(self) -> str:
        return (
            f"Leadership({self.role.value}, holder={self.holder!r}, epoch={self.epoch}, "
            f"terms={self.terms})"
        )

    @property
    def role(self) -> Role:
        return self.executions.role

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    async def lease(self) -> Lease | None:
        """The admission lease as the store holds it now."""
        lease = await self._leases.get_lease(ADMISSION)
        self.leader = lease
        return lease

    def wake(self, *, force: bool = False) -> None:
        """The lease may be free (a NOTIFY of a release), or its holder is gone (`force`)."""
        self.elector.wake(force=force)

    def stand_by(self) -> None:
        """Before anything is served: a standby until a term is taken."""
        self.store.set_fence(Fence(name=ADMISSION, epoch=STANDBY_EPOCH))
        self.executions.step_down(None)

    async def run(self) -> None:
        """Service: stand by, lead whenever the lease is held, until cancelled or resigned."""
        self._task = asyncio.current_task()
        self.stand_by()
        if self._resigned:
            return
        try:
            if self._liveness is None:
                await self.elector.run(self._lead)
                return
            async with asyncio.TaskGroup() as tg:
                alive = tg.create_task(self._alive(self._liveness), name="yoke-ha-liveness")
                try:
                    await self.elector.run(self._lead)
                finally:
                    alive.cancel()
        finally:
            self._task = None
            if self._liveness is not None:
                await self._liveness.let_go()

    async def _alive(self, lock: Liveness) -> None:
        """The liveness lock: a leader holds it; a standby waits for it, and when it gets it
        from the session of the lease's holder, that holder is gone: it takes the lease at
        once (`force`). Got from anyone else (a leader that took over by expiry while a frozen
        one held it, or nobody), it lets go after a poll so that the leader can take it."""
        while True:
            try:
                if self.is_leader:
                    await lock.hold()  # waits while a frozen former leader still holds it
                    await self.until(lambda: not self.is_leader)
                    await lock.let_go()
                    continue
                owner = await lock.owner()
                await lock.hold()
                if self.is_leader:
                    continue  # took the lease by expiry meanwhile: keep the lock
                lease = await self.lease()
                if (
                    owner is not None
                    and lease is not None
                    and lease.holder is not None
                    and lease.holder != self.holder
                    and owner == lock.name_of(lease.holder)
                    and lease.expires_at > lease.now
                ):
                    log.warning("the leader %s is gone (its session ended): taking over", owner)
                    self.wake(force=True)
                    await self.until(lambda: self.is_leader, timeout=2 * self._poll)
                    if self.is_leader:
                        continue
                await lock.let_go()
                await asyncio.sleep(self._poll)  # a period: the leader may take the lock now
            except YokeError as exc:
                log.warning("liveness lock: %s", exc)
                await lock.let_go()
                await asyncio.sleep(self._poll)  # a pause before the next try

    async def until(self, done: Callable[[], bool], timeout: float | None = None) -> None:
        """Wait until `done()` (checked at each role change), or `timeout` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while not done():
                    self._changed.clear()
                    await self._changed.wait()

    async def resign(self) -> bool:
        """Graceful stop; never take the lease again. With another server of the pair
        connected, step down and release the lease now: it takes over (and adopts the queue)
        within its wake-up, and True is returned. A leader alone keeps its term through the
        shutdown, so its queued starts are refused as a lone server's are, and lets go of it
        at `release`."""
        self._resigned = True
        if self.is_leader:
            try:
                alone = await self.store.ha_peers(self.holder) == 0
            except YokeError:
                alone = False  # cannot tell: hand over (the queue stays in the store)
            if alone:
                log.warning("no standby connected: shutting down as a lone server")
                return False
        await self.release()
        return True

    async def release(self) -> None:
        """Step down and release the lease (a NOTIFY wakes the standby)."""
        self._resigned = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])
        if self.role is not Role.STANDBY:
            self.executions.step_down(None)

    def _observe(self, lease: Lease | None) -> None:
        self.leader = lease
        holder = None if lease is None else lease.holder
        self.executions.know_leader(holder)

    async def _lead(self, lease: Lease) -> None:
        """One term: the body the elector runs while it holds the lease."""
        self.epoch = lease.epoch
        self.leader = lease
        self.store.set_fence(Fence(name=ADMISSION, epoch=lease.epoch))
        try:
            await self._adopt(lease)
            self.terms += 1
            if self._recover is not None:
                try:
                    await self._recover()
                except YokeError as exc:  # the heartbeat tries again
                    log.warning("recovering dead instances failed: %s", exc)
            await asyncio.Event().wait()  # until the term ends (the elector cancels this)
        finally:
            # Before anything else can run: admit nothing more. The fence keeps this term's
            # epoch, which the next take makes stale.
            self.executions.step_down(None)
            self._changed.set()
            self.stepdowns += 1
            log.warning("stepped down from admission (epoch %d)", lease.epoch)

    async def _adopt(self, lease: Lease) -> None:
        """Take every QUEUED start into this queue (retried while the store fails; a term
        lost meanwhile cancels this)."""
        while True:
            try:
                rows = await self.store.adopt_queued_starts(
                    self.holder,
                    requeue=self.requeue,
                    reason=f"the leader changed (epoch {lease.epoch}) while it was queued",
                    now=self._clock.wall(),
                )
                copies = await self.executions.copies_of(rows)
                # Read after the fenced adoption committed: a limits change of the former
                # leader is fenced too, so it either committed before (and is read here) or
                # can never commit. A standby only follows the log at its heartbeat, so
                # without this a change made just before the failover would not be in force.
                recorded = await self.store.latest_limits()
                break
            except YokeError as exc:
                log.warning("adopting the queue failed (retrying): %s", exc)
                await asyncio.sleep(0.5)  # a pause between tries, not a synchronisation
        if recorded is not None:
            limits = Limits.from_json(json.loads(recorded))
            if limits != self.executions.current_limits:
                log.warning("applying the limits last recorded before the takeover: %s", limits)
                self.executions.apply_limits(limits)
        # One turn of the loop: no start arriving now can overtake the adopted ones.
        self.executions.lead(list(zip(rows, copies, strict=True)))
        self._changed.set()
        log.warning(
            "leading admission (epoch %d) as %s; adopted %d queued starts",
            lease.epoch,
            self.holder,
            len(rows),
        )
