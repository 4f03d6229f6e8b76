"""A drain's view of the tenants' stored settings (`app.tenants`): it reads them every
`poll` seconds and at once when `refresh()` is called (a change made here, or announced by the
store: NOTIFY yoke_tenant_settings on PostgreSQL), hands the weights and the
`actors.max_running` caps to the drain when they change (`changed`: its core gives the weights
to the worker kernel, `sfq` shares of the slots, and to the claim windows, and the caps to the
kernel as lane caps, so this worker alone never starts more), and counts each call of a capped
tenant in the store (`take`/`free`) so that the cap holds across the fleet.

The row of `*` holds the defaults of every tenant without a value of its own. Weights are
relative, so the kernel is given each named tenant's weight over the default weight, and every
other tenant keeps the kernel's 1. A default cap applies to every tenant: those with a row get
it as a lane cap too; any other tenant is counted by `take` alone (a lane cap per tenant ever
seen would keep every such lane alive in the kernel).

The drain's first claim waits for `ready` (the first read), so no call of a capped tenant
starts uncounted. Counters left by an earlier life of this worker are cleared first. A read
that fails keeps the settings as they were; a `take` that fails counts as refused (the call
asks again), a `free` is retried until the store takes it (a lost one would shrink the cap).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from yoke.actors.protocol import ActorStore
from yoke.clock import Clock
from yoke.errors import YokeError
from yoke.retry import RetryPolicy, severity, until_done
from yoke.store.tenantverbs import DEFAULTS, TenantValues

log = logging.getLogger("yoke.actors.drain")

MAX_TENANT_SETTINGS = 100_000  # rows of tenant settings held in memory, at most


class TenantRules:
    def __init__(
        self,
        *,
        store: ActorStore,
        worker_id: str,
        clock: Clock,
        poll: float,
        stale_after: float,
        retry: RetryPolicy,
        stopping: Callable[[], bool],
        changed: Callable[[dict[str, float], dict[str, int]], None],
    ) -> None:
        self._store = store
        self._worker_id = worker_id
        self._clock = clock
        self._poll = poll
        self._stale_after = stale_after
        self._retry = retry
        self._stopping = stopping
        self._changed = changed  # the drain's core applies them: windows, kernel, a look again
        self.weights: dict[str, float] = {}  # weights other than the default's, over it
        self.caps: dict[str, int] = {}  # fleet-wide max_running of the tenants with a row
        self.default_cap: int | None = None  # `*`'s: every other tenant's
        self.ready = asyncio.Event()  # set after the first read (failed or not)
        self._wake = asyncio.Event()

    def __repr__(self) -> str:
        return f"TenantRules(weights={len(self.weights)}, caps={len(self.caps)})"

    def refresh(self) -> None:
        """Read the settings now (they were just changed here)."""
        self._wake.set()

    async def run(self) -> None:
        await self._write(
            lambda: self._store.tenants.clear_tenant_slots(self._worker_id),
            "clearing this worker's tenant counters",
        )
        while True:
            try:
                rows = await self._store.tenants.tenant_settings(limit=MAX_TENANT_SETTINGS)
            except YokeError as exc:
                log.log(severity(exc), "reading the tenants' settings failed: %s", exc)
            else:
                self._apply({r.tenant: r.values for r in rows})
            self.ready.set()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll):
                    await self._wake.wait()
            self._wake.clear()

    def _apply(self, rows: dict[str, TenantValues]) -> None:
        defaults = rows.pop(DEFAULTS, TenantValues())
        base = defaults.weight or 1.0
        weights: dict[str, float] = {}
        caps: dict[str, int] = {}
        for tenant, own in rows.items():
            values = own.or_defaults(defaults)
            if values.weight is not None and values.weight != base:
                weights[tenant] = values.weight / base
            if values.max_running is not None:
                caps[tenant] = values.max_running
        self.default_cap = defaults.max_running
        if (weights, caps) != (self.weights, self.caps):
            self.weights, self.caps = weights, caps
            self._changed(weights, caps)

    def capped(self, tenant: str) -> bool:
        """Whether the tenant's calls are counted fleet-wide (its cap, or `*`'s)."""
        return tenant in self.caps or self.default_cap is not None

    async def take(self, tenant: str) -> bool:
        """One of the tenant's fleet-wide slots, or False (full, or the store is down)."""
        live_after = self._clock.wall() - self._stale_after
        try:
            return await self._store.tenants.take_tenant_slot(
                tenant, self._worker_id, live_after=live_after
            )
        except YokeError as exc:
            log.warning("taking a slot of tenant %r failed: %s", tenant, exc)
            return False

    async def free(self, tenant: str) -> None:
        await self._write(
            lambda: self._store.tenants.free_tenant_slot(tenant, self._worker_id),
            f"freeing a slot of tenant {tenant!r}",
        )

    async def _write(self, write: Callable[[], Awaitable[None]], what: str) -> None:
        """A counter write, waited out while the store is down. One the store refuses for good
        is logged and dropped: this worker's counters are cleared at its next start, and a
        stale worker's are not counted (`live_after`), so a refusal never stops the drain."""
        try:
            await until_done(write, what=what, policy=self._retry, stopping=self._stopping, log=log)
        except YokeError as exc:
            log.error("%s was refused by the store: %s", what, exc)
