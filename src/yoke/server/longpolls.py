"""Long-polls held at once, per tenant: `?wait=` answers are cheap to ask and hold a task, a
connection and a waiter each for up to a minute, so one tenant must not hold them all.

A request that may wait takes one of its tenant's places before it reads or writes anything and
gives it back when it answers; past `per_tenant` it is refused (429 with Retry-After) and has
changed nothing. A principal bound to no tenant (the local admin, an operator) counts under its
own name. The count is per server process, as the tasks and connections it guards are; taking
and giving back a place never awaits, so tasks cannot race past the cap.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from yoke.errors import LimitExceeded


class LongPolls:
    def __init__(self, per_tenant: int) -> None:
        if per_tenant < 1:
            raise ValueError("per_tenant must be at least 1")
        self.per_tenant = per_tenant
        self._held: dict[str, int] = {}  # only tenants holding some: bounded by the waits

    def __repr__(self) -> str:
        return f"LongPolls(per_tenant={self.per_tenant}, held={sum(self._held.values())})"

    def held(self, tenant: str) -> int:
        return self._held.get(tenant, 0)

    @contextlib.contextmanager
    def hold(self, tenant: str) -> Iterator[None]:
        n = self._held.get(tenant, 0)
        if n >= self.per_tenant:
            raise LimitExceeded(
                f"{n} long-polls (?wait=) of tenant {tenant!r} are open, the most one tenant "
                "may hold: ask again without ?wait=, or when one of them has answered",
                retry_after=1.0,
            )
        self._held[tenant] = n + 1
        try:
            yield
        finally:
            left = self._held[tenant] - 1
            if left:
                self._held[tenant] = left
            else:
                del self._held[tenant]
