"""Fleet-wide tenant settings (`app.tenants`): a tenant's weight, its share of every worker's
slots and claimed rows, and its cap on concurrent `process()` calls across the fleet.

A change needs role ADMIN, passes the app's reviewers (which may veto) like a change of limits,
and is written together with its control-log entry (kind "tenant"). Every worker's drain reads
the stored settings at once on PostgreSQL (NOTIFY yoke_tenant_settings), else within
`YOKE_TENANT_SETTINGS_POLL_SECS` (this process's at once). A plain
tenant's principal reads only its own row. This module decides no start and runs no event.
"""

from __future__ import annotations

import builtins
import inspect
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from yoke.clock import Clock
from yoke.errors import BadType, BadValue, Conflict, Forbidden, Vetoed
from yoke.executions.model import ADMIN, OPERATOR, Change, Principal
from yoke.executions.state import need
from yoke.store import NewControl
from yoke.store.tenantverbs import TenantRow
from yoke.store.text import check_text

MIN_WEIGHT, MAX_WEIGHT = 0.01, 1000.0
MAX_RUNNING = 1_000_000
MAX_LISTED = 1000


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantSettings:
    tenant: str
    weight: float = 1.0
    max_running: int | None = None  # None: no fleet-wide cap
    updated_by: str | None = None  # None: never set (the defaults)
    updated_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"weight": self.weight, "max_running": self.max_running}


class TenantStore(Protocol):
    async def tenant_settings(self, *, limit: int) -> list[TenantRow]: ...

    async def get_tenant_settings(self, tenant: str) -> TenantRow | None: ...

    async def put_tenant_settings(
        self,
        tenant: str,
        *,
        weight: float,
        max_running: int | None,
        audit: NewControl,
        expect: int = 0,
    ) -> TenantRow | None: ...


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


def check_weight(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadType(f"weight must be a number, got {type(value).__name__}")
    w = float(value)
    if not math.isfinite(w) or not MIN_WEIGHT <= w <= MAX_WEIGHT:
        raise BadValue(f"weight must be between {MIN_WEIGHT} and {MAX_WEIGHT}, got {value!r}")
    return w


def check_max_running(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadType(f"max_running must be an int or null, got {type(value).__name__}")
    if not 1 <= value <= MAX_RUNNING:
        raise BadValue(f"max_running must be between 1 and {MAX_RUNNING}, got {value}")
    return value


class Tenants:
    def __init__(
        self,
        *,
        store: Callable[[], TenantStore],
        reviewers: Sequence[Callable[[Change], Any]],
        clock: Clock,
        changed: Callable[[], None] = lambda: None,
    ) -> None:
        self._store = store
        self._reviewers = reviewers
        self._clock = clock
        self._changed = changed  # this process's drain reads the settings again at once

    def __repr__(self) -> str:
        return "Tenants()"

    async def get(self, tenant: str, *, principal: Principal | None = None) -> TenantSettings:
        """A tenant's settings (the defaults when never set); a plain tenant reads its own."""
        check_text(_name(tenant), "tenant")
        _may_read(principal, tenant)
        row = await self._store().get_tenant_settings(tenant)
        return TenantSettings(tenant=tenant) if row is None else _settings(row)

    async def list(
        self, *, principal: Principal | None = None, limit: int = MAX_LISTED
    ) -> builtins.list[TenantSettings]:
        """The tenants with stored settings, by name; a plain tenant sees only its own."""
        if principal is not None and not principal.has_any(OPERATOR, ADMIN):
            if principal.tenant is None:
                return []
            return [await self.get(principal.tenant, principal=principal)]
        rows = await self._store().tenant_settings(limit=max(1, min(limit, MAX_LISTED)))
        return [_settings(r) for r in rows]

    async def set_weight(
        self, tenant: str, weight: float, *, principal: Principal
    ) -> TenantSettings:
        return await self.set(tenant, weight=weight, principal=principal)

    async def set_max_running(
        self, tenant: str, max_running: int | None, *, principal: Principal
    ) -> TenantSettings:
        return await self.set(tenant, max_running=max_running, principal=principal)

    async def set(
        self,
        tenant: str,
        *,
        weight: float = UNSET,
        max_running: int | None = UNSET,
        principal: Principal,
    ) -> TenantSettings:
        """Change a tenant's weight and/or max_running (role ADMIN), after the reviewers;
        the row and its control-log entry are written in one transaction, only if no other
        change landed since this one read the row (else `Conflict`, nothing written)."""
        need(principal, ADMIN)
        check_text(_name(tenant), "tenant")
        if weight is UNSET and max_running is UNSET:
            raise BadValue("give weight and/or max_running")
        w = None if weight is UNSET else check_weight(weight)
        cap = None if max_running is UNSET else check_max_running(max_running)
        store = self._store()
        old = await store.get_tenant_settings(tenant)
        before = TenantSettings(tenant=tenant) if old is None else _settings(old)
        after = TenantSettings(
            tenant=tenant,
            weight=before.weight if w is None else w,
            max_running=before.max_running if max_running is UNSET else cap,
        )
        change = Change(
            kind="tenant",
            principal=principal,
            subject=tenant,
            before=before.to_json(),
            after=after.to_json(),
        )
        for reviewer in self._reviewers:
            verdict = reviewer(change)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if verdict is not None:
                raise Vetoed(str(verdict))
        audit = NewControl(
            kind="tenant",
            principal=principal.name,
            tenant=principal.tenant,
            roles=tuple(sorted(principal.roles)),
            subject=tenant,
            before=json.dumps(before.to_json()),
            after=json.dumps(after.to_json()),
            at=self._clock.wall(),
        )
        row = await store.put_tenant_settings(
            tenant,
            weight=after.weight,
            max_running=after.max_running,
            audit=audit,
            expect=0 if old is None else old.version,
        )
        if row is None:  # another change landed since `before` was read: it is not undone
            raise Conflict(f"the settings of tenant {tenant!r} changed meanwhile; try again")
        self._changed()
        return _settings(row)


def _name(tenant: object) -> str:
    if not isinstance(tenant, str):
        raise BadType(f"tenant must be a str, got {type(tenant).__name__}")
    return tenant


def _may_read(principal: Principal | None, tenant: str) -> None:
    if principal is None or principal.has_any(OPERATOR, ADMIN) or principal.tenant == tenant:
        return
    raise Forbidden(f"{principal.name} may read only its own tenant's settings")


def _settings(r: TenantRow) -> TenantSettings:
    return TenantSettings(
        tenant=r.tenant,
        weight=r.weight,
        max_running=r.max_running,
        updated_by=r.updated_by,
        updated_at=r.updated_at,
    )
