"""`PortalRunner`: a worker runs the app's portals (`yoke.actors.portals`) under their leases.

A singleton portal runs where its lease `portal:<name>` is held (`yoke.leases.Elector`, expiry
on the database's clock); a `per_worker` one runs on every worker, with no lease. A `start` that
raises is logged and restarted with backoff (0.1 s doubling to 30 s, back to 0.1 s once a run
lasted a minute); one that returns is done, and holds its lease until the worker stops so that
it does not run again elsewhere.

This module must never name a store backend; it reads time only through its `Clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from yoke.actors.portals import Appender, PortalCtx, PortalDef, PortalRegistry
from yoke.clock import Clock
from yoke.leases import Elector, LeaseStore, holder_name
from yoke.retry import Backoff, RetryPolicy
from yoke.store.leaseverbs import Lease

log = logging.getLogger("yoke.portals")

# A raising portal restarts after 0.1 s, doubling to 30 s; a healthy run starts over.
RESTART = RetryPolicy(first=0.1, most=30.0)
HEALTHY_RUN = 60.0  # a run this long resets the backoff


@dataclass(frozen=True, kw_only=True, slots=True)
class PortalStats:
    running: tuple[str, ...]  # portals running on this worker now
    starts: int  # runs started here (first starts and restarts)
    failures: int  # runs that raised


class PortalRunner:
    def __init__(
        self,
        *,
        portals: PortalRegistry,
        host: Appender,
        store: LeaseStore,
        worker_id: str,
        clock: Clock,
        lease_ttl: float,
        renew_every: float,
    ) -> None:
        self._portals = portals
        self._host = host
        self._store = store
        self._worker_id = worker_id
        self._clock = clock
        self._ttl = lease_ttl
        self._renew = renew_every
        self._holder = holder_name(worker_id)
        self._live: dict[str, PortalCtx] = {}
        self._none_live = asyncio.Event()
        self._none_live.set()
        self._stopping = asyncio.Event()
        self._starts = 0
        self._failures = 0

    def __repr__(self) -> str:
        return f"PortalRunner(worker={self._worker_id!r}, running={sorted(self._live)})"

    def stats(self) -> PortalStats:
        return PortalStats(
            running=tuple(sorted(self._live)), starts=self._starts, failures=self._failures
        )

    async def run(self) -> None:
        """Run every portal (under its lease, unless per worker) until cancelled."""
        async with asyncio.TaskGroup() as tg:
            for p in self._portals:
                if p.per_worker:
                    tg.create_task(self._supervise(p), name=f"yoke-portal-{p.name}")
                else:
                    elector = Elector(
                        self._store,
                        name=f"portal:{p.name}",
                        holder=self._holder,
                        ttl=self._ttl,
                        clock=self._clock,
                        renew_every=self._renew,
                    )
                    tg.create_task(elector.run(self._under(p)), name=f"yoke-portal-{p.name}")

    def _under(self, p: PortalDef) -> Callable[[Lease], Coroutine[Any, Any, None]]:
        async def body(lease: Lease) -> None:
            log.info("portal %r runs on worker %s (lease epoch %d)", p.name, self._worker_id,
                     lease.epoch)  # fmt: skip
            await self._supervise(p)
            await self._stopping.wait()  # done: keep the lease, so it runs nowhere else

        return body

    async def stop(self, grace: float) -> None:
        """Ask every running portal to stop (`ctx.stopping`), and wait up to `grace`."""
        self._stopping.set()
        for ctx in self._live.values():
            ctx.stopping.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self._none_live.wait()

    async def _supervise(self, p: PortalDef) -> None:
        restarts, run = Backoff(RESTART), 0
        while not self._stopping.is_set():
            run += 1
            ctx = PortalCtx(host=self._host, name=p.name, worker_id=self._worker_id, run=run)
            self._live[p.name] = ctx
            self._none_live.clear()
            self._starts += 1
            began = self._clock.monotonic()
            try:
                await p.start(ctx)
            except asyncio.CancelledError:
                ctx.stopping.set()  # the lease moved on, or the worker stops
                raise
            except Exception:
                self._failures += 1
                if self._clock.monotonic() - began >= HEALTHY_RUN:
                    restarts.ok()
                pause = restarts.failed()
                log.exception("portal %r raised; restarting in %.1fs", p.name, pause)
            else:
                log.info("portal %r returned", p.name)
                return
            finally:
                self._live.pop(p.name, None)
                if not self._live:
                    self._none_live.set()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):
                    await self._stopping.wait()
