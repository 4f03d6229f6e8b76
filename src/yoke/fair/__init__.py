"""`yoke.fair`: in-process async schedulers (the fair-scheduler specification).

```python
sched = create_scheduler(concurrency=4)                      # priority FIFO behind a counting gate
fair = create_fair_scheduler(concurrency=4, weights={"gold": 3})   # per-tenant lanes, SFQ
result = await fair.schedule(lambda: fetch(url), tenant="acme", priority=1)
```

With the default `concurrency=math.inf` both return the unlimited scheduler: no kernel, no
queue, no counts, no tenant state; `schedule` costs one function call over `await fn()`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

from yoke.errors import BadValue
from yoke.fair.checks import check_concurrency, check_weight
from yoke.fair.limited import KernelScheduler
from yoke.fair.protocol import Scheduler, SchedulerStats, TenantStats
from yoke.fair.unlimited import UnlimitedScheduler

__all__ = [
    "KernelScheduler",
    "Scheduler",
    "SchedulerStats",
    "TenantStats",
    "UnlimitedScheduler",
    "create_fair_scheduler",
    "create_scheduler",
]

POLICIES = ("sfq", "rotation", "least_running", "fifo")


def create_scheduler(concurrency: float = math.inf) -> Scheduler:
    """Priority FIFO behind a counting gate: tenant-blind, higher priority first, then arrival.

    Tenants are still counted in `stats()`, but they do not change the order.
    """
    if check_concurrency(concurrency) == math.inf:
        return UnlimitedScheduler()
    return KernelScheduler(concurrency, policy="fifo", priority_scope="global", name="Scheduler")


def create_fair_scheduler(
    concurrency: float = math.inf,
    *,
    weights: Mapping[Hashable, float] | None = None,
    policy: str = "sfq",
    credit: int = 1,
) -> Scheduler:
    """Per-tenant lanes: when a slot frees, the next tenant is chosen by `policy`.

    `sfq` (default): weighted start-time fair queueing, shares within one task of the weights.
    `credit` lets a tenant returning from idle go up to that many weight-1 turns early, which
    cuts light tenants' tail wait under a flood (KERNEL.md 4.6); 0 gives the strict bound.
    `rotation`: the literal weighted round robin; `least_running`: fewest running first;
    `fifo`: tenant-blind. Priority orders tasks inside a tenant's lane.
    """
    if policy not in POLICIES:
        raise BadValue(f"policy must be one of {', '.join(POLICIES)}; got {policy!r}")
    if isinstance(credit, bool) or not isinstance(credit, int) or credit < 0:
        raise BadValue(f"credit must be an int >= 0, got {credit!r}")
    checked = {tenant: check_weight(w) for tenant, w in (weights or {}).items()}
    if check_concurrency(concurrency) == math.inf:
        return UnlimitedScheduler(checked)
    return KernelScheduler(
        concurrency,
        policy=policy,
        priority_scope="lane",
        credit=credit,
        weights=checked,
        name="FairScheduler",
    )
