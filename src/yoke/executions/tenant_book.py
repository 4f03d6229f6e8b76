"""This process's copy of the tenants' settings (`TenantBook`), and the loop that keeps it
fresh (`follow`).

`Rates` spends a tenant's tokens (`Buckets`: the store's token buckets, on the database's
clock, shared by every process) before anything of a start or an append is written.

The book is plain data that the admission core reads on its hot path: what applies to a tenant
(its own values, else those of `*`, field by field) in one dict lookup, computed once per
tenant and settings version, for at most `MAX_CACHED` tenants at a time (tenants are the
callers' to name). `follow` reads every row at start, at once when told (`refresh`: a change
made here, or NOTIFY yoke_tenant_settings on PostgreSQL) and every `poll` seconds besides, and
calls `changed` when what it read differs from what it held. A read that fails keeps the book
as it was. The book itself must never touch the store; `follow` only reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from yoke.clock import Clock
from yoke.errors import RateLimited, StoreUnavailable
from yoke.executions.tenant_settings import (
    ActorLimits,
    ExecutionLimits,
    TenantSettings,
    effective,
    from_row,
)
from yoke.store.tenantverbs import DEFAULTS, TenantRow, Tokens

log = logging.getLogger("yoke.executions")

MAX_ROWS = 100_000  # tenants' rows read and held, at most
MAX_CACHED = 10_000  # tenants whose effective settings are kept computed, at most


class TenantBook:
    def __init__(self) -> None:
        self._own: dict[str, TenantSettings] = {}
        self._defaults = TenantSettings(tenant=DEFAULTS)
        self._cache: dict[str, TenantSettings] = {}
        # Each held row's own version: a read that began before a row was written here (its
        # snapshot older than what `put` applied) must not undo it. Rows are never deleted.
        self._versions: dict[str, int] = {}
        self.version = 0  # raised by every change

    def __repr__(self) -> str:
        return f"TenantBook(tenants={len(self._own)}, version={self.version})"

    def load(self, rows: Sequence[TenantRow]) -> bool:
        """Hold what `rows` (every stored row) says that is newer than what is held; True if
        anything changed. A row held at a newer version stays: the read began before it was
        written here."""
        newer = [r for r in rows if r.version > self._versions.get(r.tenant, 0)]
        for row in newer:
            self._hold(row)
        if not newer:
            return False
        self._cache.clear()
        self.version += 1
        return True

    def put(self, row: TenantRow) -> None:
        """One row just written here: it applies in this process at once (the next read
        brings the others' changes)."""
        if row.version <= self._versions.get(row.tenant, 0):
            return  # a newer one is held already
        self._hold(row)
        self._cache.clear()
        self.version += 1

    def _hold(self, row: TenantRow) -> None:
        settings = from_row(row)
        if row.tenant == DEFAULTS:
            self._defaults = settings
        else:
            self._own[row.tenant] = settings
        self._versions[row.tenant] = row.version

    def settings(self, tenant: str) -> TenantSettings:
        """What applies to `tenant`: its own values, else those of `*`."""
        found = self._cache.get(tenant)
        if found is None:
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
            mine = self._own.get(tenant) or TenantSettings(tenant=tenant)
            found = self._cache[tenant] = effective(mine, self._defaults)
        return found

    def executions(self, tenant: str) -> ExecutionLimits:
        return self.settings(tenant).executions

    def actors(self, tenant: str) -> ActorLimits:
        return self.settings(tenant).actors


async def follow(
    book: TenantBook,
    read: Callable[[], Awaitable[Sequence[TenantRow]]],
    *,
    wake: asyncio.Event,
    poll: float,
    changed: Callable[[], None],
) -> None:
    """Keep `book` fresh until cancelled: read at once, when `wake` is set, and every `poll`
    seconds; `changed()` after a read that changed it."""
    while True:
        wake.clear()
        await read_into(book, read, changed=changed)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(poll):
                await wake.wait()


async def read_into(
    book: TenantBook,
    read: Callable[[], Awaitable[Sequence[TenantRow]]],
    *,
    changed: Callable[[], None],
) -> None:
    """One read of every row into `book` (a failed read keeps it as it was)."""
    try:
        rows = await read()
    except StoreUnavailable as exc:
        log.warning("reading the tenants' settings failed: %s", exc)
        return
    if book.load(rows):
        changed()


class Buckets(Protocol):
    async def take_tokens(
        self, tenant: str, kind: str, *, n: int, rate: float, burst: int
    ) -> Tokens: ...


MAX_HELD = 10_000  # buckets of which this process holds tokens or a refusal, at most
LEASE = 0.05  # seconds of a tenant's rate this process takes from its bucket at a time
LEASE_TTL = 1.0  # seconds a leased token may wait here for a request; then it lapses


class _Held:
    __slots__ = ("at", "lock", "refused_until", "tokens")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.tokens = 0  # leased from the store, not spent yet
        self.at = 0.0  # when they were leased
        self.refused_until = 0.0  # no token in the store before then

    def idle(self, now: float) -> bool:
        return not self.lock.locked() and not self.tokens and now >= self.refused_until


class Rates:
    """A tenant's token buckets as this process spends them. Every token comes from the
    store's bucket row (GCRA in one statement on the database's clock, shared by every
    server, so the servers together never pass the rate, whichever of them the requests
    reach), taken `LEASE` seconds' worth at a time (at most the burst) and spent here; a
    token left unspent for `LEASE_TTL` lapses (unused, it may be given to no later burst). A
    refusal is remembered until its tokens will be there: a tenant sending past its rate is
    refused again at once, with no statement, so its flood costs the store (and the pool
    every tenant shares) one statement per lease, not one per request. docs/decisions.md has
    the measurements behind this choice (`bench_rates`)."""

    def __init__(self, buckets: Buckets, clock: Clock, *, lease: float = LEASE) -> None:
        self._buckets = buckets
        self._clock = clock
        self._lease = lease
        self._held: dict[tuple[str, str], _Held] = {}

    def __repr__(self) -> str:
        return f"Rates(buckets={len(self._held)})"

    async def take(
        self, tenant: str, kind: str, bucket: tuple[float, int] | None, n: int = 1
    ) -> None:
        """Spend `n` of the tenant's tokens of `kind` (`starts`, `appends`), or raise
        `RateLimited` with the seconds until they are there; no bucket (no rate): nothing."""
        if bucket is None:
            return
        rate, burst = bucket
        if n > burst:
            raise RateLimited(
                f"tenant {tenant!r} may send at most {burst} {kind} at once (its burst); "
                "send fewer at a time",
                retry_after=None,
            )
        held = self._held_for((tenant, kind))
        async with held.lock:
            now = self._clock.monotonic()
            if held.tokens and now - held.at > LEASE_TTL:
                held.tokens = 0
            if held.tokens >= n:
                held.tokens -= n
                return
            if now < held.refused_until:
                raise _over(tenant, kind, rate, held.refused_until - now)
            need = n - held.tokens
            k = min(burst, max(need, math.ceil(rate * self._lease)))
            got = await self._buckets.take_tokens(tenant, kind, n=k, rate=rate, burst=burst)
            now = self._clock.monotonic()
            if not got.granted:
                held.refused_until = now + got.retry_after
                raise _over(tenant, kind, rate, got.retry_after)
            held.tokens += k - n
            held.at = now

    def _held_for(self, key: tuple[str, str]) -> _Held:
        held = self._held.get(key)
        if held is None:
            if len(self._held) >= MAX_HELD:  # tenants are the callers' to name: bounded
                now = self._clock.monotonic()
                self._held = {k: h for k, h in self._held.items() if not h.idle(now)}
            held = self._held[key] = _Held()
        return held


def _over(tenant: str, kind: str, rate: float, wait: float) -> RateLimited:
    return RateLimited(
        f"tenant {tenant!r} is over its rate of {rate:g} {kind} a second; "
        f"retry in about {wait:.2f}s",
        retry_after=wait,
    )
