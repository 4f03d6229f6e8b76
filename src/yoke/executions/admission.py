"""Admission policy glue: the kernel that orders this process's queued starts, the ledger slots
a grant must take, and the retry-after estimate of a refusal.

Two layers decide a start, and this module keeps them in step:
- the kernel (`yoke.kernel.GroupedKernel`: priority, then the tenant furthest below its
  weighted share of running, then the session with the fewest running, then arrival) orders
  the starts queued in this process and counts what runs here; it is the fairness decision;
- the ledger rows in the store make every grant exact across processes; a kernel pick that the
  ledger refuses (another process took the slot) goes back to its place with `requeue`.

Lane = the session (`lane_of`), group = the start's tenant; caps: the global cap, the lane cap
(`max_running_per_session`, the same for every session), `("workflow", name)`, and each
tenant's group cap and weight (its `executions.max_running` and `weight`, from the
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
from yoke.kernel import GroupedKernel, Item, ItemState
from yoke.store import Slot

GLOBAL_KEY = "global"


def workflow_key(workflow: str) -> tuple[str, str]:
    return ("workflow", workflow)


def make_kernel(limits: Limits) -> GroupedKernel:
    return GroupedKernel(global_cap=limits.max_running, lane_cap=limits.max_running_per_session)


def lane_of(tenant: str, session: str) -> Hashable:
    """A start's lane in the kernel: its session, which names its tenant (`acme` or
    `acme/...`); a trusted caller may put a start of one tenant in a session named for
    another, and then the lane is (tenant, session), since a lane belongs to one group."""
    if session == tenant or session.startswith(tenant + "/"):
        return session
    return (tenant, session)


def session_of(lane: Hashable) -> str:
    """The session a kernel lane stands for (`lane_of` backwards)."""
    return str(lane[1]) if isinstance(lane, tuple) else str(lane)


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
    """Applies `Limits` to a kernel: the global and lane caps at once, a workflow's cap when
    the workflow is first seen (the kernel keeps a capped key, and forgets an idle uncapped
    one)."""

    def __init__(self, kernel: GroupedKernel, limits: Limits) -> None:
        self.kernel = kernel
        self.limits = limits
        self._workflows: set[str] = set()

    def apply(self, limits: Limits) -> None:
        self.limits = limits
        k = self.kernel
        k.set_global_cap(limits.max_running)
        k.set_lane_cap(limits.max_running_per_session)
        for wf in self._workflows:
            k.set_cap(workflow_key(wf), limits.workflow_cap(wf))

    def before_offer(self, workflow: str) -> None:
        if workflow not in self._workflows:
            self._workflows.add(workflow)
            self.kernel.set_cap(workflow_key(workflow), self.limits.workflow_cap(workflow))


class TenantGroups:
    """Each tenant's `executions.max_running` and `weight` as its group's cap and weight in the
    kernel, so that a tenant at its cap is skipped by the picks (never sent to the ledger to
    come back FULL) and tenants share the slots by weight. Only tenants with starts in this
    process are set (`arrived`/`left`, counted by ticket): a tenant whose last start left goes
    back to the kernel's defaults and is forgotten, so the kernel holds no group per tenant
    ever seen. `apply` sets them again after the book changed."""

    def __init__(self, kernel: GroupedKernel, book: TenantBook) -> None:
        self.kernel = kernel
        self.book = book
        self._live: dict[str, int] = {}  # tickets of each tenant with starts here

    def __repr__(self) -> str:
        return f"TenantGroups(tenants={len(self._live)})"

    def arrived(self, tenant: str) -> None:
        n = self._live.get(tenant, 0)
        self._live[tenant] = n + 1
        if not n:
            self._set(tenant)

    def left(self, tenant: str) -> None:
        n = self._live.get(tenant, 0) - 1
        if n > 0:
            self._live[tenant] = n
            return
        self._live.pop(tenant, None)
        self.kernel.set_group_cap(tenant, None)  # the group is forgotten once idle
        self.kernel.set_group_weight(tenant, None)

    def apply(self) -> None:
        for tenant in self._live:
            self._set(tenant)

    def _set(self, tenant: str) -> None:
        s = self.book.settings(tenant)
        self.kernel.set_group_cap(tenant, s.executions.max_running)
        weight = s.weight  # None: neither its own nor the defaults' (1)
        self.kernel.set_group_weight(tenant, None if weight in (None, 1.0) else weight)


class QueueOrder:
    """The queued starts of this process in answer order (higher priority first, then
    arrival), so that `position` costs O(log n), not a scan of the queue. Call `sync` after
    every kernel call that may change an item's state or priority."""

    def __init__(self) -> None:
        self._keys: SortedList[tuple[int, int]] = SortedList()
        self._key_of: dict[Hashable, tuple[int, int]] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def sync(self, item: Item) -> None:
        key = (-item.priority, item.seq)
        old = self._key_of.get(item.id)
        if item.state is ItemState.QUEUED:
            if old == key:
                return
            if old is not None:
                self._keys.remove(old)
            self._keys.add(key)
            self._key_of[item.id] = key
        elif old is not None:
            self._keys.remove(old)
            del self._key_of[item.id]

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
