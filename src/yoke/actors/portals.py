"""Portals: an app's own ingress loops, `@app.portal` on `async def start(ctx)`.

The actors specification (docs/decisions.md): "Portals are not scheduled: start() loops run
independently." A portal is the app's
code (not a tenant's): it runs in the worker process, reads from wherever it likes (a socket,
a broker, a poll) and appends events with `ctx.append(stream, data, tenant=...)`, which wakes
the tenants they reach like any append. `ctx.stopping` is set when the worker shuts down (or
the portal must move): a well-behaved loop returns then; one that does not is cancelled after
the worker's shutdown timeout.

By default a portal runs on exactly one live worker at a time: each worker's `PortalRunner`
tries to take the lease `portal:<name>` (`yoke.leases.Elector`, expiry on the database's
clock); the holder runs the portal and renews the lease every heartbeat, the others try again
every heartbeat. The portal moves when its worker stops (the lease is released at once) or goes
stale (its lease expires after `YOKE_WORKER_STALE_SECS`). `per_worker=True` runs one on every
worker, with no lease. A `start` that raises is logged and restarted with backoff (0.1 s
doubling to 30 s, back to 0.1 s once a run lasted a minute); one that returns is done, and holds
its lease until the worker stops so that it does not run again elsewhere.

This module must never name a store backend; it reads time only through its `Clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from yoke.clock import Clock
from yoke.errors import BadType, BadValue
from yoke.leases import Elector, LeaseStore, holder_name
from yoke.store.leaseverbs import Lease
from yoke.store.text import check_text

log = logging.getLogger("yoke.portals")

FIRST_PAUSE = 0.1
MAX_PAUSE = 30.0
HEALTHY_RUN = 60.0  # a run this long resets the backoff


class Appender(Protocol):
    async def append(self, stream: str, data: Any, *, tenant: str = "default") -> int: ...

    async def append_many(
        self, stream: str, items: Iterable[Any], *, tenant: str = "default"
    ) -> list[int]: ...


class PortalCtx:
    """What `start(ctx)` gets: where to append, and a flag for when to stop."""

    __slots__ = ("_host", "name", "run", "stopping", "worker_id")

    def __init__(self, *, host: Appender, name: str, worker_id: str, run: int) -> None:
        self._host = host
        self.name = name
        self.worker_id = worker_id
        self.run = run  # 1 for the first start on this worker, then one more per restart
        self.stopping = asyncio.Event()  # set on shutdown, or when the portal must move

    def __repr__(self) -> str:
        return f"PortalCtx({self.name!r}, worker={self.worker_id!r}, run={self.run})"

    async def append(self, stream: str, data: Any, *, tenant: str = "default") -> int:
        """Append an event (fanned out, its tenants woken); returns its event id."""
        return await self._host.append(stream, data, tenant=tenant)

    async def append_many(
        self, stream: str, items: Iterable[Any], *, tenant: str = "default"
    ) -> list[int]:
        """Append many events to one stream of one tenant, in one transaction."""
        return await self._host.append_many(stream, items, tenant=tenant)


Start = Callable[[PortalCtx], Coroutine[Any, Any, None]]


@dataclass(frozen=True, kw_only=True, slots=True)
class PortalDef:
    name: str
    per_worker: bool
    start: Start = field(repr=False)


class PortalRegistry:
    def __init__(self) -> None:
        self._portals: dict[str, PortalDef] = {}

    def __len__(self) -> int:
        return len(self._portals)

    def __iter__(self) -> Any:
        return iter(self._portals.values())

    def __repr__(self) -> str:
        return f"PortalRegistry({sorted(self._portals)})"

    def portal(
        self, name: str | None = None, *, per_worker: bool = False
    ) -> Callable[[Start], Start]:
        if name is not None and not isinstance(name, str):
            raise BadType("a portal's name must be a str")
        if not isinstance(per_worker, bool):
            raise BadType("per_worker must be a bool")

        def register(fn: Start) -> Start:
            if not inspect.iscoroutinefunction(fn):
                raise BadType("a portal must be an `async def start(ctx)`")
            portal_name = check_text(name or fn.__name__, "portal name")
            if portal_name in self._portals:
                raise BadValue(f"portal {portal_name!r} is defined twice")
            self._portals[portal_name] = PortalDef(
                name=portal_name, per_worker=per_worker, start=fn
            )
            return fn

        return register


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
        pause, run = FIRST_PAUSE, 0
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
                    pause = FIRST_PAUSE
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
            pause = min(pause * 2, MAX_PAUSE)
