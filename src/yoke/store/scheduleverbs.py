"""The schedule verbs of the SQL store: schedules as rows, and the ticker's claim of due ticks,
written once over named queries (section "schedules" of `queries.sql`).

A tick is decided once: `claim_ticks` is a compare-and-set on the row's `seq`, so of the servers
that read a schedule due, only one moves its `next_at` on and records the ticks it will start
(`firing`, with `firing_until`). Starting them is the caller's (through admission, each start
with an idempotency key of the schedule and the tick), and `finish_ticks` clears them; pending
ticks whose server died are due again at `firing_until` and are claimed and started again by
another server, whose starts the idempotency keys make the same starts. This module decides
nothing else: times, limits and the catch-up rule come from the caller.
"""

from __future__ import annotations

import builtins
import json
from dataclasses import dataclass

from yoke.store.tx import Row, Transactions


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleRow:
    tenant: str
    name: str
    schedule_id: str  # drawn when the schedule is made: names its ticks' idempotency keys
    workflow: str
    input: str  # JSON
    session: str
    cron: str | None
    every: float | None
    timezone: str
    catch_up: str
    updated_by: str
    updated_at: float
    seq: int  # raised by every change and claim: the compare-and-set token
    next_at: float  # the next tick due
    firing: tuple[float, ...] | None  # ticks decided and not yet all started
    firing_until: float | None
    last_tick_at: float | None
    last_fired_at: float | None
    last_start_id: str | None
    last_outcome: str | None
    fired: int
    missed: int


@dataclass(frozen=True, kw_only=True, slots=True)
class NewSchedule:
    tenant: str
    name: str
    schedule_id: str
    workflow: str
    input: str
    session: str
    cron: str | None
    every: float | None
    timezone: str
    catch_up: str
    updated_by: str
    now: float
    next_at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Fired:
    """What starting a schedule's pending ticks came to."""

    last_tick_at: float
    last_start_id: str | None
    last_outcome: str
    fired: int
    now: float


class ScheduleVerbs:
    """The schedule verbs over one backend's transactions."""

    def __init__(self, transactions: Transactions) -> None:
        self._t = transactions

    def __repr__(self) -> str:
        return f"ScheduleVerbs({self._t!r})"

    async def put(self, new: NewSchedule, *, most: int) -> ScheduleRow | None:
        """Write `new` (a change keeps the row's schedule id), unless the tenant would hold
        more than `most` schedules (None)."""
        params = {k: getattr(new, k) for k in NewSchedule.__dataclass_fields__}
        async with self._t.write() as tx:
            key = {"tenant": new.tenant, "name": new.name}
            if await tx.one("get_schedule", key) is None:
                held = await tx.one("count_schedules", key)
                if held is not None and int(held["n"]) >= most:
                    return None
            row = await tx.one("put_schedule", params)
            await tx.one("notify_schedules", {})
        assert row is not None
        return schedule_row(row)

    async def get(self, tenant: str, name: str) -> ScheduleRow | None:
        async with self._t.read() as tx:
            row = await tx.one("get_schedule", {"tenant": tenant, "name": name})
        return None if row is None else schedule_row(row)

    async def list(
        self, *, tenant: str | None, after: tuple[str, str] = ("", ""), limit: int
    ) -> list[ScheduleRow]:
        params = {
            "tenant": tenant or "",
            "after_tenant": after[0],
            "after_name": after[1],
            "limit": limit,
        }
        async with self._t.read() as tx:
            rows = await tx.all("list_schedules", params)
        return [schedule_row(r) for r in rows]

    async def delete(self, tenant: str, name: str) -> bool:
        async with self._t.write() as tx:
            gone = await tx.run("delete_schedule", {"tenant": tenant, "name": name})
            await tx.one("notify_schedules", {})
        return gone > 0

    async def due(self, *, now: float, limit: int) -> builtins.list[ScheduleRow]:
        async with self._t.read() as tx:
            rows = await tx.all("due_schedules", {"now": now, "limit": limit})
        return [schedule_row(r) for r in rows]

    async def next_due(self) -> float | None:
        """When the earliest tick (or pending ticks' deadline) is due; None: no schedule."""
        async with self._t.read() as tx:
            row = await tx.one("next_schedule_due", {})
        return None if row is None or row["due"] is None else float(row["due"])

    async def claim(
        self,
        row: ScheduleRow,
        *,
        next_at: float,
        firing: tuple[float, ...],
        until: float,
        missed: int,
    ) -> int | None:
        """Move `row` on to `next_at` with `firing` pending (none: nothing to start), if it is
        still at the `seq` it was read at; the new `seq`, or None when another server (or a
        change) came first."""
        params = {
            "tenant": row.tenant,
            "name": row.name,
            "seq": row.seq,
            "next_at": next_at,
            "firing": json.dumps(list(firing)) if firing else None,
            "until": until if firing else None,
            "missed": missed,
        }
        async with self._t.single() as tx:
            got = await tx.one("claim_ticks", params)
        return None if got is None else int(got["seq"])

    async def finish(self, tenant: str, name: str, *, seq: int, fired: Fired) -> bool:
        """Clear the pending ticks claimed at `seq` and record how they went (False: the
        schedule was changed or deleted meanwhile)."""
        params = {
            "tenant": tenant,
            "name": name,
            "seq": seq,
            "last_tick_at": fired.last_tick_at,
            "last_start_id": fired.last_start_id,
            "last_outcome": fired.last_outcome,
            "fired": fired.fired,
            "now": fired.now,
        }
        async with self._t.single() as tx:
            return await tx.run("finish_ticks", params) > 0


def _f(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def schedule_row(r: Row) -> ScheduleRow:
    firing = r["firing"]
    return ScheduleRow(
        tenant=str(r["tenant"]),
        name=str(r["name"]),
        schedule_id=str(r["schedule_id"]),
        workflow=str(r["workflow"]),
        input=str(r["input"]),
        session=str(r["session"]),
        cron=None if r["cron"] is None else str(r["cron"]),
        every=_f(r["every"]),
        timezone=str(r["timezone"]),
        catch_up=str(r["catch_up"]),
        updated_by=str(r["updated_by"]),
        updated_at=float(r["updated_at"]),
        seq=int(r["seq"]),
        next_at=float(r["next_at"]),
        firing=None if firing is None else tuple(float(x) for x in json.loads(firing)),
        firing_until=_f(r["firing_until"]),
        last_tick_at=_f(r["last_tick_at"]),
        last_fired_at=_f(r["last_fired_at"]),
        last_start_id=None if r["last_start_id"] is None else str(r["last_start_id"]),
        last_outcome=None if r["last_outcome"] is None else str(r["last_outcome"]),
        fired=int(r["fired"]),
        missed=int(r["missed"]),
    )
