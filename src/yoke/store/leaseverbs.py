"""Named leases in the database: `acquire_lease`, `renew_lease`, `release_lease`, `get_lease`.

A lease is one row of `yoke_leases`: its holder, an epoch (the fencing token of the current
term: every take bumps it) and an expiry. Times are the database's own clock, never a
caller's, and every answer carries the database's `now` beside the expiry, so a caller can
measure what is left of its term on its own monotonic clock, whatever its wall clock says.
A lease is taken only when free or expired (or `force`d: its holder is known to be gone); a
renewal and a release name the term (holder and epoch), so a holder that lost its term can
neither extend nor end its successor's. A take first holds the lease's gate exclusively (on
PostgreSQL an advisory lock that every fenced write, `check_fence`, holds shared), so a take
never interleaves with a write fenced by the term it ends; a take that would fail (another term
runs) returns before the gate, so a standby's polls never wait for, nor hold back, the leader's
fenced writes. Before the gate, a take ends every
database session of a holder whose term is over (or `force`d), found by its name
(`ha_session_name`): such a holder may be frozen, or cut off, inside a fenced write, which then
holds the gate for as long as that process stays frozen; ending its sessions is the only way to
free the gate that does not wait on the process. A release announces itself (NOTIFY yoke_lease)
so a standby need not wait for its next poll. A take, a renewal and a release may run on
transactions of their own (`terms`; on PostgreSQL a pool of their own), so that they never wait
for a connection behind the store's other work; a read of the lease (`get_lease`, which any
client can cause through `GET /v1/ha`) uses the store's main transactions, so no flood of reads
can delay a renewal either.
`yoke.leases.Elector` is the loop built on these verbs. This module must never decide who
should hold a lease.
"""

from __future__ import annotations

import logging
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from yoke.store.tx import Row, Tx

log = logging.getLogger("yoke.leases")

HA_SESSION_PREFIX = "yoke-ha:"


@dataclass(frozen=True, kw_only=True, slots=True)
class Lease:
    name: str
    holder: str | None  # None: released
    epoch: int  # bumped by every take: the term's fencing token
    expires_at: float  # the database's clock, epoch seconds
    now: float  # the database's clock when this answer was made
    since: float = 0.0  # when this term began (the database's clock)

    @property
    def remaining(self) -> float:
        """Seconds of this term left when the answer was made (never negative)."""
        return max(0.0, self.expires_at - self.now)


def ha_session_name(instance_id: str) -> str:
    """The application_name of the database sessions of a server of an HA pair."""
    return f"{HA_SESSION_PREFIX}{instance_id}"[:63]


@dataclass(frozen=True, kw_only=True, slots=True)
class Fence:
    """The term a process writes under: its writes commit only while `epoch` is the lease's."""

    name: str
    epoch: int


class Link(Protocol):
    """What the lease verbs need of a backend: reads and write transactions."""

    def read(self) -> AbstractAsyncContextManager[Tx]: ...

    def write(self) -> AbstractAsyncContextManager[Tx]: ...


class LeaseVerbs:
    """The lease verbs over one backend's transactions (part of its `actors`)."""

    def __init__(self, transactions: Link, *, terms: Link | None = None) -> None:
        self._reads = transactions
        self._t = terms or transactions  # takes, renewals and releases

    def __repr__(self) -> str:
        return f"LeaseVerbs({self._t!r})"

    async def acquire_lease(
        self, name: str, *, holder: str, ttl: float, force: bool = False
    ) -> Lease | None:
        """Take `name` for `holder` for `ttl` seconds if it is free or expired, or with `force`
        whatever its state (a new term, a new epoch); None if another holder's term is
        running."""
        params = {
            "name": name,
            "holder": holder,
            "ttl": ttl,
            "force": force,
            "session_prefix": HA_SESSION_PREFIX,
        }
        async with self._t.write() as tx:
            if not force and await tx.one("lease_running", params) is not None:
                return None  # never waits at the gate for a term that runs
            ended = await tx.one("end_lapsed_holder", params)
            if ended is not None and ended["ended"]:
                log.warning(
                    "lease %r: ended %d database sessions of its former holder, whose term is over",
                    name,
                    ended["ended"],
                )
            await tx.one("gate_lease", params)
            row = await tx.one("acquire_lease", params)
        return None if row is None else _lease(row)

    async def renew_lease(self, lease: Lease, *, ttl: float) -> Lease | None:
        """Extend the term `lease` names to `ttl` seconds from now; None if it is over (the
        lease was released, or taken by someone else since)."""
        params = {"name": lease.name, "holder": lease.holder, "epoch": lease.epoch, "ttl": ttl}
        async with self._t.write() as tx:
            row = await tx.one("renew_lease", params)
        return None if row is None else _lease(row)

    async def release_lease(self, lease: Lease) -> bool:
        """End the term `lease` names at once, so another holder may take it now."""
        params = {"name": lease.name, "holder": lease.holder, "epoch": lease.epoch}
        async with self._t.write() as tx:
            released = await tx.run("release_lease", params) == 1
            if released:
                await tx.one("notify_lease", {"name": lease.name})
        return released

    async def get_lease(self, name: str) -> Lease | None:
        async with self._reads.read() as tx:
            row = await tx.one("get_lease", {"name": name})
        return None if row is None else _lease(row)


def _lease(r: Row) -> Lease:
    return Lease(
        name=str(r["name"]),
        holder=None if r["holder"] is None else str(r["holder"]),
        epoch=int(r["epoch"]),
        expires_at=float(r["expires_at"]),
        since=float(r["acquired_at"]),
        now=float(r["now"]),
    )
