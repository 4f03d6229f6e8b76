"""Runtime changes by role (the admission specification's changes while running): limits need
ADMIN, a queued start's priority needs OPERATOR; both pass the reviewers, which may veto, and are
written to the control log with the principal, the time, before and after.

`Control` holds the executions' `Shared` by reference and tells the admission core what the
store recorded. This module must never grant or refuse a start; a raised limit only wakes the
dispatcher.
"""

from __future__ import annotations

import builtins
import inspect
import json
from typing import Any

from yoke.errors import (
    BadType,
    Vetoed,
)
from yoke.executions.model import (
    AuditEntry,
    Change,
    Limits,
    Principal,
    Start,
    check_priority,
)
from yoke.executions.policy import Act, need
from yoke.executions.state import Shared, check_id
from yoke.store import NewControl


class Control:
    def __init__(self, shared: Shared) -> None:
        self._s = shared

    async def limits(self) -> Limits:
        return self._s.core.limits

    async def set_limits(self, limits: Limits, *, principal: Principal) -> Limits:
        """Replace the limits (role ADMIN), after the reviewers; recorded in the control log."""
        need(principal, Act.SET_LIMITS)
        self._s.require_leader()
        if not isinstance(limits, Limits):
            raise BadType("limits must be a yoke.Limits")
        before = self._s.core.limits
        await self._review(
            Change(
                kind="limits",
                principal=principal,
                subject=None,
                before=before.to_json(),
                after=limits.to_json(),
            )
        )
        await self._audit("limits", principal, None, before.to_json(), limits.to_json())
        self.apply_limits(limits)
        return limits

    def apply_limits(self, limits: Limits) -> None:
        self._s.core.apply_limits(limits)
        self._s.wake()  # a raised cap may let queued starts in

    async def set_priority(self, start_id: str, priority: int, *, principal: Principal) -> Start:
        """Change a QUEUED start's priority (role OPERATOR or ADMIN), after the reviewers."""
        need(principal, Act.SET_PRIORITY)
        check_priority(priority)
        self._s.require_leader()
        store = self._s.require()
        row = self._s.core.may_change(
            start_id, await store.get_start(check_id(start_id, "start_id"))
        )
        before, after = {"priority": row.priority}, {"priority": priority}
        await self._review(
            Change(
                kind="priority", principal=principal, subject=start_id, before=before, after=after
            )
        )
        # The change and its audit entry are one transaction: neither lands without the other.
        audit = self._entry("priority", principal, start_id, before, after)
        new = await store.set_start_priority(start_id, priority, audit=audit)
        self._s.core.reprioritized(start_id, new)
        self._s.wake()  # the kernel's next picks go to the ledger through the dispatcher
        assert new is not None  # else `reprioritized` raised Conflict
        return self._s.answer(new)

    async def audit(self, *, limit: int = 100, offset: int = 0) -> builtins.list[AuditEntry]:
        rows = await self._s.require().control_log(limit=limit, offset=offset)
        return [
            AuditEntry(
                seq=r.seq,
                kind=r.kind,
                principal=r.principal,
                tenant=r.tenant,
                roles=r.roles,
                subject=r.subject,
                at=r.at,
                before=None if r.before is None else json.loads(r.before),
                after=None if r.after is None else json.loads(r.after),
            )
            for r in rows
        ]

    async def _review(self, change: Change) -> None:
        for reviewer in self._s.reviewers:
            verdict = reviewer(change)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if verdict is not None:
                raise Vetoed(str(verdict))

    async def _audit(
        self, kind: str, principal: Principal, subject: str | None, before: Any, after: Any
    ) -> None:
        await self._s.require().append_control(self._entry(kind, principal, subject, before, after))

    def _entry(
        self, kind: str, principal: Principal, subject: str | None, before: Any, after: Any
    ) -> NewControl:
        return NewControl(
            kind=kind,
            principal=principal.name,
            tenant=principal.tenant,
            roles=tuple(sorted(principal.roles)),
            subject=subject,
            before=json.dumps(before),
            after=json.dumps(after),
            at=self._s.clock.wall(),
        )
