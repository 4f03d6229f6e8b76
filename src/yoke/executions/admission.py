"""Admission policy glue: the kernel that orders this process's queued starts, the ledger slots
a grant must take, and the retry-after estimate of a refusal.

Two layers decide a start, and this module keeps them in step:
- the kernel (`yoke.kernel`, `least_running` with global priority scope) orders the starts
  queued in this process and counts what runs here; it is the fairness decision;
- the ledger rows in the store make every grant exact across processes; a kernel pick that the
  ledger refuses (another process took the slot) goes back to its place with `requeue`.

Lane = session; cap keys: the global cap, the lane cap (`max_running_per_session`),
`("workflow", name)` and `("tenant", name)` (the tenant's `executions.max_running`, from the
`TenantBook`). Ledger keys: `global`, `session:<s>`, `workflow:<w>`, `tenant:<t>` with the same
caps. This module must never await or touch the store: it maps limits to caps and slots, and
measures.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable

from sortedcontainers import SortedList

from yoke.executions.model import Limits
from yoke.executions.tenant_book import TenantBook
from yoke.kernel import Item, ItemState, Kernel
from yoke.store import Slot

GLOBAL_KEY = "global"


def workflow_key(workflow: str) -> tuple[str, str]:
    return ("workflow", workflow)


def tenant_key(tenant: str) -> tuple[str, str]:
    return ("tenant", tenant)


def item_keys(workflow: str, tenant: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """The cap keys of a start's kernel item (its tenant's is the last)."""
    return (workflow_key(workflow), tenant_key(tenant))


def tenant_in(item: Item) -> str:
    """The tenant of a start's kernel item (`item_keys`)."""
    return str(item.keys[-1][1])  # type: ignore[index]


def make_kernel(limits: Limits) -> Kernel:
    return Kernel(policy="least_running", priority_scope="global", global_cap=limits.max_running)


def slots_for(
    limits: Limits, *, session: str, workflow: str, tenant: str, tenant_cap: int | None
) -> list[Slot]:
    """Every ledger key a grant takes. Keys without a cap are still counted, so a limit enabled
    at runtime sees exact running counts at once."""
    return [
        Slot(key=GLOBAL_KEY, cap=limits.max_running),
        Slot(key=f"session:{session}", cap=limits.max_running_per_session),
        Slot(key=f"workflow:{workflow}", cap=limits.workflow_cap(workflow)),
        Slot(key=f"tenant:{tenant}", cap=tenant_cap),
    ]


class Caps:
    """Applies `Limits` to a kernel, lane by lane as sessions appear (the kernel keeps a capped
    lane, and forgets an idle uncapped one)."""

    def __init__(self, kernel: Kernel, limits: Limits) -> None:
        self.kernel = kernel
        self.limits = limits
        self._lanes: set[Hashable] = set()
        self._workflows: set[str] = set()

    def apply(self, limits: Limits) -> None:
        self.limits = limits
        k = self.kernel
        k.set_global_cap(limits.max_running)
        cap = limits.max_running_per_session
        # Every lane the kernel holds now (a session with starts queued or running gets the
        # new cap at once, also one first seen while there was none), and the capped ones.
        lanes = set(k.stats().lanes) | self._lanes
        for lane in lanes:
            k.set_lane_cap(lane, cap)
        self._lanes = lanes if cap is not None else set()
        for wf in self._workflows:
            k.set_cap(workflow_key(wf), limits.workflow_cap(wf))

    def before_offer(self, session: str, workflow: str) -> None:
        cap = self.limits.max_running_per_session
        if cap is not None and session not in self._lanes:
            self.kernel.set_lane_cap(session, cap)
            self._lanes.add(session)
        if workflow not in self._workflows:
            self._workflows.add(workflow)
            self.kernel.set_cap(workflow_key(workflow), self.limits.workflow_cap(workflow))


class TenantCaps:
    """Each tenant's `executions.max_running` as the cap of its key in the kernel, so that a
    tenant at its cap is skipped by the picks (never sent to the ledger to come back FULL).
    Only tenants with starts in this process are held (`arrived`/`left`, counted by ticket):
    a tenant whose last start left is forgotten, cap and all, so the kernel holds no key per
    tenant ever seen. `apply` sets the caps again after the book changed.

    (The two-level kernel will hold tenants as groups with caps of their own; then this part
    sets the group cap instead of a cap key.)"""

    def __init__(self, kernel: Kernel, book: TenantBook) -> None:
        self.kernel = kernel
        self.book = book
        self._live: dict[str, int] = {}  # tickets of each tenant with starts here

    def __repr__(self) -> str:
        return f"TenantCaps(tenants={len(self._live)})"

    def arrived(self, tenant: str) -> None:
        n = self._live.get(tenant, 0)
        self._live[tenant] = n + 1
        if not n:
            cap = self.book.executions(tenant).max_running
            if cap is not None:
                self.kernel.set_cap(tenant_key(tenant), cap)

    def left(self, tenant: str) -> None:
        n = self._live.get(tenant, 0) - 1
        if n > 0:
            self._live[tenant] = n
            return
        self._live.pop(tenant, None)
        self.kernel.set_cap(tenant_key(tenant), None)  # the key is forgotten once unused

    def apply(self) -> None:
        for tenant in self._live:
            self.kernel.set_cap(tenant_key(tenant), self.book.executions(tenant).max_running)


class QueueOrder:
    """The queued starts of this process in answer order (higher priority first, then
    arrival), so that `position` costs O(log n), not a scan of the queue. Call `sync` after
    every kernel call that may change an item's state or priority."""

    def __init__(self) -> None:
        self._keys: SortedList[tuple[int, int]] = SortedList()
        self._key_of: dict[Hashable, tuple[int, int]] = {}
        self._by_tenant: dict[str, int] = {}  # queued starts per tenant (`executions.max_queued`)

    def __len__(self) -> int:
        return len(self._keys)

    def queued_of(self, tenant: str) -> int:
        return self._by_tenant.get(tenant, 0)

    def sync(self, item: Item) -> None:
        key = (-item.priority, item.seq)
        old = self._key_of.get(item.id)
        if item.state is ItemState.QUEUED:
            if old == key:
                return
            if old is not None:
                self._keys.remove(old)
            else:
                tenant = tenant_in(item)
                self._by_tenant[tenant] = self._by_tenant.get(tenant, 0) + 1
            self._keys.add(key)
            self._key_of[item.id] = key
        elif old is not None:
            self._keys.remove(old)
            del self._key_of[item.id]
            tenant = tenant_in(item)
            n = self._by_tenant[tenant] - 1
            if n:
                self._by_tenant[tenant] = n
            else:
                del self._by_tenant[tenant]

    def position(self, item: Item) -> int | None:
        """1 for the next in line; None if the item is not queued."""
        key = self._key_of.get(item.id)
        return None if key is None else self._keys.bisect_left(key) + 1


def is_queued(item: Item) -> bool:
    return item.state is ItemState.QUEUED


def is_running(item: Item) -> bool:
    return item.state is ItemState.RUNNING


class DrainRate:
    """Slots freed per second over the recent past, for a `Retry-After` estimate. Times are
    the caller's monotonic clock readings."""

    def __init__(self, *, window: int = 64) -> None:
        self._times: deque[float] = deque(maxlen=window)

    def freed(self, now: float) -> None:
        self._times.append(now)

    def rate(self, now: float) -> float | None:
        if len(self._times) < 2:
            return None
        span = now - self._times[0]
        return (len(self._times) - 1) / span if span > 0 else None

    def retry_after(self, ahead: int, *, now: float, default: float = 1.0) -> float:
        """Seconds until about `ahead` more slots have freed; `default` with no history."""
        rate = self.rate(now)
        if rate is None or rate <= 0:
            return default
        return min(3600.0, max(0.01, ahead / rate))
