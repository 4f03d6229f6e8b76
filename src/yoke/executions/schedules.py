"""`app.schedules`: workflows started on a cron expression or every N seconds, by name.

A schedule belongs to a tenant. A plain tenant's principal sets, reads and deletes its own
schedules only, in its own sessions (a session whose first segment is the tenant); a trusted
caller (the Python API without a principal, an OPERATOR or ADMIN without a tenant) manages
every tenant's, naming the tenant with `tenant=` or by the session's first segment, as a start
does (`tenant_settings.start_tenant`). What a schedule holds is bounded before it is stored
(its name, input, cron expression, and `MAX_PER_TENANT` schedules a tenant). Its ticks are
started by the ticker (`ticker.py`), through admission, as the schedule's tenant.

This module decides no start; it validates, checks who may, and stores.
"""

from __future__ import annotations

import builtins
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from yoke.clock import Clock
from yoke.errors import BadType, BadValue, Forbidden, NotFound, QuotaExceeded
from yoke.executions.cadence import CATCH_UPS, Cadence, CatchUp
from yoke.executions.model import ADMIN, OPERATOR, Principal, encode_json, storable_text
from yoke.executions.tenant_settings import check_tenant, start_tenant
from yoke.executions.workflows import Registry
from yoke.store.scheduleverbs import NewSchedule, ScheduleRow

MAX_PER_TENANT = 1000
MAX_INPUT = 64 * 1024  # bytes of a schedule's input as JSON
MAX_LISTED = 1000
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
DEFAULT_TENANT = "default"


class ScheduleStore(Protocol):
    async def put(self, new: NewSchedule, *, most: int) -> ScheduleRow | None: ...

    async def get(self, tenant: str, name: str) -> ScheduleRow | None: ...

    async def list(
        self, *, tenant: str | None, after: tuple[str, str] = ("", ""), limit: int
    ) -> builtins.list[ScheduleRow]: ...

    async def delete(self, tenant: str, name: str) -> bool: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class Schedule:
    """A schedule as stored, with its ticker's state: `next_at`, the next tick due; the last
    tick started (`last_tick_at`, when: `last_fired_at`, its start and outcome); how many
    ticks were started (`fired`) and missed or skipped while no server ran (`missed`)."""

    tenant: str
    name: str
    workflow: str
    input: Any
    session: str
    cron: str | None
    every: float | None
    timezone: str
    catch_up: str
    updated_by: str
    updated_at: float
    next_at: float
    last_tick_at: float | None
    last_fired_at: float | None
    last_start_id: str | None
    last_outcome: str | None
    fired: int
    missed: int

    def to_json(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def schedule_of(row: ScheduleRow) -> Schedule:
    return Schedule(
        tenant=row.tenant,
        name=row.name,
        workflow=row.workflow,
        input=json.loads(row.input),
        session=row.session,
        cron=row.cron,
        every=row.every,
        timezone=row.timezone,
        catch_up=row.catch_up,
        updated_by=row.updated_by,
        updated_at=row.updated_at,
        next_at=row.next_at,
        last_tick_at=row.last_tick_at,
        last_fired_at=row.last_fired_at,
        last_start_id=row.last_start_id,
        last_outcome=row.last_outcome,
        fired=row.fired,
        missed=row.missed,
    )


def cadence_of(row: ScheduleRow) -> Cadence:
    return Cadence(cron=row.cron, every=row.every, timezone=row.timezone)


def check_name(name: object) -> str:
    if not isinstance(name, str):
        raise BadType(f"a schedule's name must be a str, not {type(name).__name__}")
    if not NAME.fullmatch(name):
        raise BadValue(
            "a schedule's name is 1-128 characters of letters, digits and . _ : - (starting "
            f"with a letter or digit), got {name[:128]!r}"
        )
    return name


def _trusted(principal: Principal | None) -> bool:
    return principal is None or (principal.tenant is None and principal.has_any(OPERATOR, ADMIN))


def whose(principal: Principal | None, tenant: str | None) -> str:
    """The tenant whose schedules a caller names: a plain tenant's own, whatever it asks (it
    sees nothing else); a trusted caller's `tenant`, else "default"."""
    if principal is not None and not isinstance(principal, Principal):
        raise BadType("principal must be a yoke.Principal or None")
    if not _trusted(principal):
        assert principal is not None
        own = principal.tenant or principal.name
        if tenant is not None and tenant != own:
            raise Forbidden(f"{principal.name} manages the schedules of tenant {own!r} only")
        return check_tenant(own)
    return check_tenant(DEFAULT_TENANT if tenant is None else tenant)


class Schedules:
    def __init__(
        self,
        *,
        store: Callable[[], ScheduleStore],
        registry: Registry,
        clock: Clock,
        changed: Callable[[], None] = lambda: None,
    ) -> None:
        self._store = store
        self._registry = registry
        self._clock = clock
        self._changed = changed  # this process's ticker looks again at once

    def __repr__(self) -> str:
        return "Schedules()"

    async def set(
        self,
        name: str,
        *,
        workflow: Any,
        input: Any = None,
        session: str | None = None,
        cron: str | None = None,
        every: float | None = None,
        timezone: str = "UTC",
        catch_up: CatchUp = "one",
        principal: Principal | None = None,
        tenant: str | None = None,
    ) -> Schedule:
        """Make or change the schedule `name`: start `workflow` with `input` in `session` at
        each tick of `cron` (five fields, in `timezone`) or `every` seconds. Ticks missed while
        no server ran: `catch_up="one"` starts one for all of them, `"skip"` none. A change
        takes effect from the next tick after now."""
        check_name(name)
        wf = self._registry.name_of(workflow)
        cadence = Cadence(cron=cron, every=every, timezone=timezone)
        if catch_up not in CATCH_UPS:
            raise BadValue(f"catch_up must be one of {', '.join(CATCH_UPS)}, got {catch_up!r}")
        payload = encode_json(input, "input")
        if len(payload.encode()) > MAX_INPUT:
            raise BadValue(f"a schedule's input is at most {MAX_INPUT} bytes of JSON")
        if principal is not None and not isinstance(principal, Principal):
            raise BadType("principal must be a yoke.Principal or None")
        if session is not None and (not isinstance(session, str) or not session):
            raise BadType("session must be a non-empty str or None")
        if session is None:
            session = tenant or (DEFAULT_TENANT if _trusted(principal) else whose(principal, None))
        storable_text(session, "session")
        owner = start_tenant(principal, session, tenant)
        if not _trusted(principal) and session.split("/", 1)[0] != owner:
            raise Forbidden(f"tenant {owner!r} schedules starts in its own sessions only")
        now = self._clock.wall()
        new = NewSchedule(
            tenant=owner,
            name=name,
            schedule_id=os.urandom(12).hex(),
            workflow=wf,
            input=payload,
            session=session,
            cron=cadence.cron,
            every=None if cadence.every is None else float(cadence.every),
            timezone=cadence.timezone,
            catch_up=catch_up,
            updated_by=storable_text(principal.name, "principal name") if principal else "",
            now=now,
            next_at=cadence.next_after(now),
        )
        row = await self._store().put(new, most=MAX_PER_TENANT)
        if row is None:
            raise QuotaExceeded(f"tenant {owner!r} holds {MAX_PER_TENANT} schedules already")
        self._changed()
        return schedule_of(row)

    async def get(
        self, name: str, *, tenant: str | None = None, principal: Principal | None = None
    ) -> Schedule:
        check_name(name)
        row = await self._store().get(whose(principal, tenant), name)
        if row is None:
            raise NotFound(f"no schedule named {name!r}")
        return schedule_of(row)

    async def list(
        self,
        *,
        tenant: str | None = None,
        principal: Principal | None = None,
        after: tuple[str, str] | None = None,
        limit: int = 100,
    ) -> builtins.list[Schedule]:
        """Schedules by (tenant, name), after `after`: a plain tenant's own; a trusted
        caller's of `tenant`, or of every tenant."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise BadValue("limit must be a positive int")
        scope = whose(principal, tenant) if tenant is not None or not _trusted(principal) else None
        rows = await self._store().list(
            tenant=scope, after=after or ("", ""), limit=min(limit, MAX_LISTED)
        )
        return [schedule_of(r) for r in rows]

    async def delete(
        self, name: str, *, tenant: str | None = None, principal: Principal | None = None
    ) -> None:
        check_name(name)
        if not await self._store().delete(whose(principal, tenant), name):
            raise NotFound(f"no schedule named {name!r}")
        self._changed()
