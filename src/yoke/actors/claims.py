"""The fair claim's windows: how many claimed rows each tenant may hold at one worker.

The worker kernel (`policy="sfq"`, lane = tenant) can only be fair among the rows the worker
holds. A first-come prefetch (claim up to 2,048 rows, claim again when 500 slots are free) fills
the worker with one tenant's flood, and a tenant that appears next waits behind all of it. Here
instead each tenant holds at most its *window*: a share of the worker's hold budget (about
`1 + depth` rounds of its slots) proportional to its weight among the tenants active here
(holding rows, or known to have rows waiting in the store). So:

* a tenant that appears always has room: the next claim (an append's wake or NOTIFY starts one)
  takes its rows, and the sfq kernel starts them at the next free slots;
* the worker holds about `budget` rows whatever the number of tenants (plus one row per tenant
  when more tenants than rows are active), never a first-come window;
* a tenant with rows waiting is claimed again as soon as a quarter of its window is free (the
  rest covers the claim's latency), not when some global number of slots is.

Pure bookkeeping, no I/O and no clock: `quota` is what a claim may take for a tenant now,
`claimed` tells what a claim brought, `held`/`released` follow the rows held here, and
`released` answers whether that tenant wants a claim now.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping


class ClaimWindows:
    __slots__ = ("_active_weight", "_asked", "_backlog", "_held", "_weights", "budget", "filled")

    def __init__(self, *, budget: int) -> None:
        self.budget = budget
        self._weights: dict[str, float] = {}
        self._held: Counter[str] = Counter()
        # Tenants whose last claim filled their quota (or had no room): rows of theirs are
        # likely waiting in the store.
        self._backlog: set[str] = set()
        self._active_weight = 0.0  # sum of the weights of the active tenants
        self._asked: dict[str, int] = {}  # the current claim's quotas, by tenant
        self.filled = False

    def __repr__(self) -> str:
        return (
            f"ClaimWindows(budget={self.budget}, held={sum(self._held.values())}, "
            f"tenants={len(self._held)}, backlogged={len(self._backlog)})"
        )

    # -- weights -------------------------------------------------------------------------------
    def weight(self, tenant: str) -> float:
        return self._weights.get(tenant, 1.0)

    def set_weights(self, weights: Mapping[str, float]) -> None:
        """Replace every weight (a tenant not named has weight 1)."""
        active = self._active()
        self._weights = {t: float(w) for t, w in weights.items() if w != 1}
        self._active_weight = sum(self.weight(t) for t in active)

    # -- windows -------------------------------------------------------------------------------
    def window(self, tenant: str) -> int:
        """Rows `tenant` may hold here: its weighted share of the budget, at least one."""
        w = self.weight(tenant)
        total = self._active_weight if self._is_active(tenant) else self._active_weight + w
        return max(1, math.ceil(self.budget * w / total))

    def quota(self, tenant: str) -> int:
        """Rows a claim may take for `tenant` now (asked once per tenant with rows waiting)."""
        n = max(0, self.window(tenant) - self._held[tenant])
        self._asked[tenant] = n
        return n

    def claimed(self, tenants: Iterable[str]) -> list[str]:
        """A claim brought rows of these tenants (one name per row). A tenant that got its
        whole quota (or had none) has rows left in the store; one that got less has none due.
        Returns the tenants the claim met, in its order; `filled` tells whether one of them
        took its whole (non-zero) quota."""
        got = Counter(tenants)
        met = list(self._asked)
        self.filled = any(got[t] >= q for t, q in self._asked.items() if q > 0)
        for tenant, quota in self._asked.items():
            was = self._is_active(tenant)
            if got[tenant] >= quota:
                self._backlog.add(tenant)
            else:
                self._backlog.discard(tenant)
            self._changed(tenant, was)
        self._asked.clear()
        return met

    def held(self, tenant: str) -> None:
        was = self._is_active(tenant)
        self._held[tenant] += 1
        self._changed(tenant, was)

    def released(self, tenant: str) -> bool:
        """One row of `tenant` is no longer held here. True when a claim should run now: the
        tenant has rows waiting and a quarter of its window is free."""
        was = self._is_active(tenant)
        n = self._held[tenant] - 1
        if n > 0:
            self._held[tenant] = n
        else:
            del self._held[tenant]
        self._changed(tenant, was)
        return tenant in self._backlog and n <= _refill_at(self.window(tenant))

    def hungry(self) -> bool:
        """Whether a backlogged tenant has a quarter of its window free (a claim should run)."""
        return any(self._held[t] <= _refill_at(self.window(t)) for t in self._backlog)

    def holding(self, tenant: str) -> int:
        return self._held[tenant]

    def backlogged(self) -> frozenset[str]:
        return frozenset(self._backlog)

    # -- the active set ----------------------------------------------------------------------
    def _is_active(self, tenant: str) -> bool:
        return tenant in self._backlog or tenant in self._held

    def _active(self) -> set[str]:
        return self._backlog | set(self._held)

    def _changed(self, tenant: str, was: bool) -> None:
        now = self._is_active(tenant)
        if now != was:
            self._active_weight += self.weight(tenant) if now else -self.weight(tenant)
            if not self._backlog and not self._held:
                self._active_weight = 0.0  # no float drift once nothing is active


def _refill_at(window: int) -> int:
    """A backlogged tenant is claimed again once it holds this few: a quarter of its window
    free, so the three quarters left cover the claim's own latency (a claim of a quarter)."""
    return window - max(1, window // 4)
