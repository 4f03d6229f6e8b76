"""`Elector`: hold a named lease in the database whenever possible, and run a body while held.

Built on the store's lease verbs (`acquire_lease`, `renew_lease`, `release_lease`, see
`yoke.store.leaseverbs`): a lease row holds a holder, an epoch (bumped by every take, the
fencing token of a term) and an expiry on the database's clock. An elector tries to take its
lease every `poll` seconds; once it holds a term it runs `body(lease)` and renews the term
every `renew_every` seconds, naming the term (holder and epoch), so a renewal can never
revive a term that someone else took over.

Safety comes from the epoch, liveness from time. The elector trusts its term only until a
local deadline measured on its own monotonic clock from *before* each request: the time left
that the database reported, minus a margin. So even when a renewal is slow, lost, or the
process was paused, the body is cancelled before the database could let another holder in
(unless the monotonic clock runs faster than the database's by more than the margin). A
failed renewal is retried until that deadline; a refused one ends the term at once. When
`run` is cancelled (shutdown) the term is released, so a standby takes over at its next poll
instead of after the expiry. A holder is one process: two processes never share a holder name
(`holder_name` adds the pid and a random part).

A waiting elector can be woken (`wake`) when the lease is released (a NOTIFY) instead of at its
next poll, and told to take the lease even from a running term (`wake(force=True)`) when its
holder is known to be gone (its liveness lock was released). `observe` sees the lease each
time another holder's term kept it from taking it.

Used by singleton portals (`yoke.actors.portals`) and the admission HA pair
(`yoke.executions.leadership`). This
module must never know what the body does; it reads time only through its `Clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from yoke.clock import Clock
from yoke.errors import BadValue, YokeError
from yoke.retry import severity
from yoke.store.leaseverbs import Lease

log = logging.getLogger("yoke.leases")

Body = Callable[[Lease], Coroutine[Any, Any, None]]


class LeaseStore(Protocol):
    async def acquire_lease(
        self, name: str, *, holder: str, ttl: float, force: bool = False
    ) -> Lease | None: ...

    async def renew_lease(self, lease: Lease, *, ttl: float) -> Lease | None: ...

    async def release_lease(self, lease: Lease) -> bool: ...

    async def get_lease(self, name: str) -> Lease | None: ...


def holder_name(base: str) -> str:
    """A holder name for this process: `base`, its pid and a random part."""
    return f"{base}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Elector:
    def __init__(
        self,
        store: LeaseStore,
        *,
        name: str,
        holder: str,
        ttl: float,
        clock: Clock,
        renew_every: float | None = None,
        poll: float | None = None,
        observe: Callable[[Lease | None], None] | None = None,
    ) -> None:
        if not ttl > 0:
            raise BadValue(f"a lease's ttl must be > 0 seconds, got {ttl!r}")
        self._store = store
        self.name = name
        self.holder = holder
        self._ttl = ttl
        self._clock = clock
        self._renew_every = renew_every if renew_every is not None else ttl / 3
        if not 0 < self._renew_every < ttl:
            raise BadValue("renew_every must be > 0 and shorter than the ttl")
        self._poll = poll if poll is not None else self._renew_every
        self._margin = min(ttl / 5, ttl - self._renew_every)
        self.terms = 0  # terms held so far
        self.lease: Lease | None = None  # the term held now
        self.trust_until = 0.0  # this clock's monotonic time the term held now is trusted to
        self._observe = observe
        self._woken = asyncio.Event()
        self._force = False
        self._abandoned: set[asyncio.Future[Lease | None]] = set()  # renewals that timed out

    def __repr__(self) -> str:
        held = "none" if self.lease is None else f"epoch {self.lease.epoch}"
        return f"Elector({self.name!r}, holder={self.holder!r}, term={held}, terms={self.terms})"

    def wake(self, *, force: bool = False) -> None:
        """Try to take the lease now instead of at the next poll; with `force`, even from a
        running term (its holder is known to be gone). A holder ignores it."""
        self._force = self._force or force
        self._woken.set()

    def trusted(self) -> bool:
        """This process holds a term and may still act on it."""
        return self.lease is not None and self._clock.monotonic() < self.trust_until

    async def run(self, body: Body) -> None:
        """Until cancelled: take the lease, run `body` while it is held (cancelled as soon as
        the term is lost, started again in the next term); release the lease on the way out.
        Returns when `body` returns by itself (its term is released then too)."""
        while True:
            asked = self._clock.monotonic()
            force, self._force = self._force, False
            self._woken.clear()
            try:
                lease = await self._store.acquire_lease(
                    self.name, holder=self.holder, ttl=self._ttl, force=force
                )
                if lease is None and self._observe is not None:
                    self._observe(await self._store.get_lease(self.name))
            except YokeError as exc:
                log.log(severity(exc), "taking lease %r failed: %s", self.name, exc)
                lease = None
            if lease is None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._poll):  # a period, or a wake-up
                        await self._woken.wait()
                continue
            if await self._hold(lease, asked, body):
                return

    async def _renew(self, lease: Lease, trust_until: float) -> Lease | None:
        """The renewal, given up (TimeoutError) at the term's local deadline: a database that
        does not answer at all (a network cut) must not keep the body running past it. The
        request is left to end by itself, in its own task."""
        renewal = asyncio.ensure_future(self._store.renew_lease(lease, ttl=self._ttl))
        wait = max(0.0, trust_until - self._clock.monotonic())
        done, _ = await asyncio.wait([renewal], timeout=wait)
        if not done:
            renewal.cancel()
            self._abandoned.add(renewal)
            renewal.add_done_callback(self._abandoned.discard)
            raise TimeoutError
        return renewal.result()

    async def _hold(self, lease: Lease, asked: float, body: Body) -> bool:
        """One term. True if `body` returned by itself (the elector is done)."""
        self.lease, self.terms = lease, self.terms + 1
        trust_until = self.trust_until = asked + lease.remaining - self._margin
        log.info("holding lease %r (epoch %d) as %s", self.name, lease.epoch, self.holder)
        task = asyncio.create_task(body(lease), name=f"yoke-lease-{self.name}")
        try:
            while not task.done():
                wait = max(0.0, min(self._renew_every, trust_until - self._clock.monotonic()))
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await asyncio.shield(task)
                if task.done():
                    break
                asked = self._clock.monotonic()
                if asked >= trust_until:
                    log.warning("lease %r: term %d not renewed in time", self.name, lease.epoch)
                    return False
                try:
                    renewed = await self._renew(lease, trust_until)
                except YokeError as exc:
                    log.log(
                        severity(exc), "renewing lease %r failed (retrying): %s", self.name, exc
                    )
                    continue
                except TimeoutError:
                    log.warning(
                        "lease %r: no answer to the renewal of term %d in time",
                        self.name,
                        lease.epoch,
                    )
                    return False
                if renewed is None:
                    log.warning("lease %r: term %d was taken over", self.name, lease.epoch)
                    return False
                lease = self.lease = renewed
                trust_until = self.trust_until = asked + renewed.remaining - self._margin
            task.result()  # a body that raised raises here
            return True
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self.lease = None
            with contextlib.suppress(YokeError):
                await self._store.release_lease(lease)
