"""This process's copy of the tenants' settings (`TenantBook`), and the loop that keeps it
fresh (`follow`).

`take` spends a tenant's tokens (`Buckets`: the store's token buckets, on the database's clock,
shared by every process) before anything of a start or an append is written.

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
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

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
        self.version = 0  # raised by every change

    def __repr__(self) -> str:
        return f"TenantBook(tenants={len(self._own)}, version={self.version})"

    def load(self, rows: Sequence[TenantRow]) -> bool:
        """Hold `rows` (every stored row) from now on; True if anything changed."""
        own = {r.tenant: from_row(r) for r in rows}
        defaults = own.pop(DEFAULTS, TenantSettings(tenant=DEFAULTS))
        if own == self._own and defaults == self._defaults:
            return False
        self._own, self._defaults = own, defaults
        self._cache.clear()
        self.version += 1
        return True

    def put(self, row: TenantRow) -> None:
        """One row just written here: it applies in this process at once (the next read
        brings the others' changes)."""
        settings = from_row(row)
        if row.tenant == DEFAULTS:
            self._defaults = settings
        else:
            self._own[row.tenant] = settings
        self._cache.clear()
        self.version += 1

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


async def take(
    buckets: Buckets, tenant: str, kind: str, bucket: tuple[float, int] | None, n: int = 1
) -> None:
    """Spend `n` of the tenant's tokens of `kind` (`starts`, `appends`), or raise
    `RateLimited` with the seconds until they are there; no bucket (no rate): nothing to do."""
    if bucket is None:
        return
    rate, burst = bucket
    if n > burst:
        raise RateLimited(
            f"tenant {tenant!r} may send at most {burst} {kind} at once (its burst); "
            "send fewer at a time",
            retry_after=None,
        )
    got = await buckets.take_tokens(tenant, kind, n=n, rate=rate, burst=burst)
    if not got.granted:
        raise RateLimited(
            f"tenant {tenant!r} is over its rate of {rate:g} {kind} a second; "
            f"retry in about {got.retry_after:.2f}s",
            retry_after=got.retry_after,
        )
