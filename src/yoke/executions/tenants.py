"""`app.tenants`: one set of settings per tenant, for its executions and its actors, and the
tenant `*` holding the defaults of every tenant without a value of its own
(`tenant_settings.py` says what each field means and bounds).

A change needs role ADMIN, passes the app's reviewers (which may veto) like a change of limits,
and is written together with its control-log entry (kind "tenant"). Every process reads the
stored settings at once on PostgreSQL (NOTIFY yoke_tenant_settings), else within
`YOKE_TENANT_SETTINGS_POLL_SECS` (this process's at once). A plain tenant's principal reads only
its own row and the defaults that apply to it. This module decides no start and runs no event.
"""

from __future__ import annotations

import builtins
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from yoke.clock import Clock
from yoke.errors import Conflict, Forbidden, Vetoed
from yoke.executions.model import ADMIN, OPERATOR, Change, Principal
from yoke.executions.policy import Act, need
from yoke.executions.tenant_settings import (
    SECTIONS,
    TenantSettings,
    check_tenant,
    effective,
    from_row,
    parse_change,
)
from yoke.store import NewControl
from yoke.store.tenantverbs import DEFAULTS, TenantRow, TenantValues

MAX_LISTED = 1000

__all__ = ["DEFAULTS", "UNSET", "TenantSettings", "TenantStore", "Tenants"]


class TenantStore(Protocol):
    async def tenant_settings(self, *, limit: int) -> list[TenantRow]: ...

    async def get_tenant_settings(self, tenant: str) -> TenantRow | None: ...

    async def put_tenant_settings(
        self,
        tenant: str,
        values: TenantValues,
        *,
        audit: NewControl,
        expect: int = 0,
    ) -> TenantRow | None: ...


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


class Tenants:
    def __init__(
        self,
        *,
        store: Callable[[], TenantStore],
        reviewers: Sequence[Callable[[Change], Any]],
        clock: Clock,
        changed: Callable[[TenantRow], None] = lambda row: None,
    ) -> None:
        self._store = store
        self._reviewers = reviewers
        self._clock = clock
        self._changed = changed  # this process applies the row written at once

    def __repr__(self) -> str:
        return "Tenants()"

    async def get(self, tenant: str, *, principal: Principal | None = None) -> TenantSettings:
        """A tenant's own settings (nothing set when never set); a plain tenant reads its own
        and `*`."""
        check_tenant(tenant, defaults_ok=True)
        _may_read(principal, tenant)
        row = await self._store().get_tenant_settings(tenant)
        return TenantSettings(tenant=tenant) if row is None else from_row(row)

    async def effective(self, tenant: str, *, principal: Principal | None = None) -> TenantSettings:
        """What applies to `tenant`: its own values, else those of `*`, field by field."""
        own = await self.get(tenant, principal=principal)
        if tenant == DEFAULTS:
            return own
        defaults = await self._store().get_tenant_settings(DEFAULTS)
        return effective(own, None if defaults is None else from_row(defaults))

    async def list(
        self, *, principal: Principal | None = None, limit: int = MAX_LISTED
    ) -> builtins.list[TenantSettings]:
        """The tenants with stored settings, by name (`*` first); a plain tenant sees its own
        row (stored or not) and `*` (when stored), nothing of any other tenant."""
        if principal is not None and not principal.has_any(OPERATOR, ADMIN):
            own = principal.tenant or principal.name
            store = self._store()
            defaults = await store.get_tenant_settings(DEFAULTS)
            mine = await store.get_tenant_settings(own)
            return [
                *([] if defaults is None else [from_row(defaults)]),
                TenantSettings(tenant=own) if mine is None else from_row(mine),
            ]
        rows = await self._store().tenant_settings(limit=max(1, min(limit, MAX_LISTED)))
        return [from_row(r) for r in rows]

    async def set_weight(
        self, tenant: str, weight: float | None, *, principal: Principal
    ) -> TenantSettings:
        return await self.set(tenant, weight=weight, principal=principal)

    async def set_max_running(
        self, tenant: str, max_running: int | None, *, principal: Principal
    ) -> TenantSettings:
        """The tenant's cap on concurrent actor `process()` calls (`actors.max_running`)."""
        return await self.set(tenant, actors={"max_running": max_running}, principal=principal)

    async def clear(self, tenant: str, *, principal: Principal) -> TenantSettings:
        """Every field of the tenant cleared: it follows `*` (or has no limit) from now on."""
        return await self.set(
            tenant,
            weight=None,
            executions=dict.fromkeys(SECTIONS["executions"]),
            actors=dict.fromkeys(SECTIONS["actors"]),
            principal=principal,
        )

    async def set(
        self,
        tenant: str,
        *,
        weight: float | None = UNSET,
        executions: Mapping[str, Any] | None = UNSET,
        actors: Mapping[str, Any] | None = UNSET,
        principal: Principal,
    ) -> TenantSettings:
        """Change the fields given (role ADMIN), after the reviewers: `weight`, and fields of
        `executions` ({"max_running", "max_queued", "rate", "burst"}) and `actors`
        ({"max_running", "append_rate", "append_burst", "max_instances", "max_timers"}); a
        field left out stays as it was, None clears it. The row and its control-log entry are
        written in one transaction, only if no other change landed since this one read the
        row (else `Conflict`, nothing written)."""
        need(principal, Act.SET_TENANT)
        check_tenant(tenant, defaults_ok=True)
        change = parse_change(
            **{
                k: v
                for k, v in (("weight", weight), ("executions", executions), ("actors", actors))
                if v is not UNSET
            }
        )
        store = self._store()
        old = await store.get_tenant_settings(tenant)
        before = TenantSettings(tenant=tenant) if old is None else from_row(old)
        after = change.applied_to(before)
        review = Change(
            kind="tenant",
            principal=principal,
            subject=tenant,
            before=before.to_json(),
            after=after.to_json(),
        )
        for reviewer in self._reviewers:
            verdict = reviewer(review)
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
            tenant, after.values(), audit=audit, expect=0 if old is None else old.version
        )
        if row is None:  # another change landed since `before` was read: it is not undone
            raise Conflict(f"the settings of tenant {tenant!r} changed meanwhile; try again")
        self._changed(row)
        return from_row(row)


def _may_read(principal: Principal | None, tenant: str) -> None:
    if principal is None or principal.has_any(OPERATOR, ADMIN) or tenant == DEFAULTS:
        return
    if tenant == (principal.tenant or principal.name):
        return
    raise Forbidden(f"{principal.name} may read only its own tenant's settings")
