"""What the dashboard remembers of the recent past: grants, waits and refusals per second.

The scheduler knows its present (the kernel's queue, the ledger's slots); rates, waits and
shares over a window need a memory of the last minutes, kept here in one-second buckets fed by
the executions' grant listener (one call per granted start, no task per start) and by the
server's own answer counters, sampled once a second. Memory is bounded whatever the load: a
ring of `HISTORY` buckets, each naming at most `MAX_SESSIONS` sessions, with a uniform sample of
at most `WAIT_SAMPLES` waits per session.

Tenants are adversaries: one that opens thousands of sessions a second must not push another's
figures out of its view. So a second names at most `MAX_PER_TENANT` sessions of one tenant (the
part of a session's name before its first `/`, as the routes' ownership rule reads it), and a
session it cannot name is folded into its own tenant's aggregate, which only that tenant (and the
operators) see. Aggregates live apart from the named sessions, keyed by tenant, so no session
or tenant name can be taken for one (a session called `_other` is just a session). Beyond
`MAX_TENANTS` aggregates in one second (only a privileged principal can name that many tenants),
a grant is counted in the second's totals alone.

This module must never read the store or change the scheduler; it only counts.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from yoke.executions import Start

HISTORY = 600  # seconds kept: the charts show up to ten minutes
MAX_SESSIONS = 2000  # sessions named per second, all tenants together
MAX_PER_TENANT = 200  # sessions of one tenant named per second; the rest fold into its aggregate
MAX_TENANTS = 2000  # tenants' aggregates per second
WAIT_SAMPLES = 32  # waits kept per session per second (a uniform reservoir)


def tenant_of_session(session: str) -> str:
    """The tenant a session belongs to: `acme` for `acme` and `acme/cart-7`."""
    return session.partition("/")[0]


@dataclass(slots=True)
class _Lane:
    starts: int = 0
    seen: int = 0  # waits offered to the reservoir
    waits: list[float] = field(default_factory=list)


@dataclass(slots=True)
class _Second:
    at: int
    starts: int = 0
    refused: int = 0
    jain: float | None = None
    lanes: dict[str, _Lane] = field(default_factory=dict)  # by session
    named: dict[str, int] = field(default_factory=dict)  # sessions named per tenant
    folded: dict[str, _Lane] = field(default_factory=dict)  # by tenant: sessions not named
    # By tenant (at most MAX_TENANTS a second; past that a tenant's counts are in the totals
    # alone): its grants, and its refusals by cause (a rate, its queue bound, a limit...).
    tenant_starts: dict[str, int] = field(default_factory=dict)
    tenant_refused: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionWindow:
    """One session over a window: starts granted and a sample of their waits (seconds)."""

    session: str
    starts: int
    waits: tuple[float, ...]


def percentile(values: Iterable[float], q: float) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class Recorder:
    """Per-second memory of grants (with waits, by session), refusals and Jain's index."""

    def __init__(self, wall: Callable[[], float], *, seed: int = 0) -> None:
        self._wall = wall
        self._seconds: deque[_Second] = deque(maxlen=HISTORY)
        self._rng = random.Random(seed)  # the reservoir's draws; seeded, so tests repeat
        self.grants = 0  # every grant seen: a cheap change signal for the hub

    def __repr__(self) -> str:
        return f"Recorder(seconds={len(self._seconds)}, grants={self.grants})"

    def _now(self) -> _Second:
        at = int(self._wall())
        if not self._seconds or self._seconds[-1].at != at:
            self._seconds.append(_Second(at=at))
        return self._seconds[-1]

    # -- feeding --------------------------------------------------------------------------------
    def granted(self, start: Start) -> None:
        """A grant listener: quick, never raises."""
        self.grants += 1
        second = self._now()
        second.starts += 1
        by_tenant = second.tenant_starts
        n = by_tenant.get(start.tenant)
        if n is not None or len(by_tenant) < MAX_TENANTS:
            by_tenant[start.tenant] = (n or 0) + 1
        lane = second.lanes.get(start.session) or self._lane(second, start.session)
        if lane is None:
            return
        lane.starts += 1
        if start.decided_at is None:
            return
        wait = max(0.0, start.decided_at - start.created_at)
        lane.seen += 1
        if len(lane.waits) < WAIT_SAMPLES:
            lane.waits.append(wait)
        else:
            slot = self._rng.randrange(lane.seen)
            if slot < WAIT_SAMPLES:
                lane.waits[slot] = wait

    @staticmethod
    def _lane(second: _Second, session: str) -> _Lane | None:
        """A new lane for `session` in `second`: its own if the second may name it, else its
        tenant's aggregate; None when even aggregates are full."""
        tenant = tenant_of_session(session)
        named = second.named.get(tenant, 0)
        if len(second.lanes) < MAX_SESSIONS and named < MAX_PER_TENANT:
            second.named[tenant] = named + 1
            own = second.lanes[session] = _Lane()
            return own
        folded = second.folded.get(tenant)
        if folded is None and len(second.folded) < MAX_TENANTS:
            folded = second.folded[tenant] = _Lane()
        return folded

    def refused(self, count: int) -> None:
        if count > 0:
            self._now().refused += count

    def refused_by(self, tenant: str, cause: str) -> None:
        """A refusal listener: one of `tenant`'s starts was refused for `cause`."""
        by_tenant = self._now().tenant_refused
        causes = by_tenant.get(tenant)
        if causes is None:
            if len(by_tenant) >= MAX_TENANTS:
                return
            causes = by_tenant[tenant] = {}
        causes[cause] = causes.get(cause, 0) + 1

    def jain(self, value: float) -> None:
        self._now().jain = value

    # -- reading --------------------------------------------------------------------------------
    def _window(self, seconds: int) -> list[_Second]:
        since = int(self._wall()) - seconds
        return [s for s in self._seconds if s.at > since]

    def totals(self, seconds: int) -> tuple[int, int]:
        """(starts, refused) over the last `seconds`."""
        window = self._window(seconds)
        return sum(s.starts for s in window), sum(s.refused for s in window)

    def tenants(self, seconds: int) -> dict[str, tuple[int, dict[str, int]]]:
        """By tenant over the last `seconds`: (starts granted, refusals by cause)."""
        out: dict[str, tuple[int, dict[str, int]]] = {}
        for second in self._window(seconds):
            for tenant, n in second.tenant_starts.items():
                starts, causes = out.get(tenant, (0, {}))
                out[tenant] = (starts + n, causes)
            for tenant, by_cause in second.tenant_refused.items():
                starts, causes = out.get(tenant, (0, {}))
                for cause, n in by_cause.items():
                    causes[cause] = causes.get(cause, 0) + n
                out[tenant] = (starts, causes)
        return out

    def sessions(self, seconds: int) -> dict[str, SessionWindow]:
        """The named sessions over the last `seconds`."""
        return _summed(s.lanes for s in self._window(seconds))

    def folded(self, seconds: int) -> dict[str, SessionWindow]:
        """By tenant: the sessions it had beyond those named, summed (`session` is the tenant)."""
        return _summed(s.folded for s in self._window(seconds))

    def starts_where(self, seconds: int, keep: Callable[[str], bool]) -> list[float]:
        """Per second, oldest first: the starts of the sessions `keep` accepts, with those
        folded into the aggregates of the tenants it accepts (`keep(tenant)`)."""
        now = int(self._wall())
        by_at = {s.at: s for s in self._window(seconds)}
        out = []
        for at in range(now - seconds + 1, now + 1):
            s = by_at.get(at)
            if s is None:
                out.append(0.0)
                continue
            named = sum(v.starts for n, v in s.lanes.items() if keep(n))
            out.append(float(named + sum(v.starts for t, v in s.folded.items() if keep(t))))
        return out

    def series(self, seconds: int, sessions: Iterable[str]) -> dict[str, list[float | None]]:
        """Per second, oldest first: time, starts, refused, Jain's index, and the p50 wait of
        each session named (None where it had no grant that second)."""
        now = int(self._wall())
        by_at = {s.at: s for s in self._window(seconds)}
        names = list(sessions)
        out: dict[str, list[float | None]] = {"t": [], "starts": [], "refused": [], "jain": []}
        for name in names:
            out[f"wait:{name}"] = []
        for at in range(now - seconds + 1, now + 1):
            s = by_at.get(at)
            out["t"].append(float(at))
            out["starts"].append(float(s.starts) if s else 0.0)
            out["refused"].append(float(s.refused) if s else 0.0)
            out["jain"].append(s.jain if s else None)
            for name in names:
                lane = s.lanes.get(name) if s else None
                out[f"wait:{name}"].append(percentile(lane.waits, 0.5) if lane else None)
        return out


def _summed(seconds: Iterable[dict[str, _Lane]]) -> dict[str, SessionWindow]:
    starts: dict[str, int] = {}
    waits: dict[str, list[float]] = {}
    for lanes in seconds:
        for name, lane in lanes.items():
            starts[name] = starts.get(name, 0) + lane.starts
            waits.setdefault(name, []).extend(lane.waits)
    return {
        name: SessionWindow(session=name, starts=n, waits=tuple(waits.get(name, ())))
        for name, n in starts.items()
    }
