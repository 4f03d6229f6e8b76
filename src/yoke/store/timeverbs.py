"""Time in workflows, in the store: scheduled starts (the executions' timers), waits and signals.

A start may wait for its time: it is logged SCHEDULED with `due_at_ms` (`schedule_start`). The
scheduled starts are the executions' timers (a `yoke.timers.TimerSource` reads them with
`upcoming` and fires them with `fire`): firing moves a due start to QUEUED on the process that
fired it, skipping one another process is firing (SKIP LOCKED on PostgreSQL, one writer on
SQLite), so each fires exactly once; the firing process then admits it like any queued start.
A start that was fired and not admitted when its process stopped is QUEUED on a stopped
instance: recovery takes it over like any queued start.

An execution that sleeps or waits gives its slot back: `suspend` records the wait's step, marks
the execution WAITING (what it waits for in `waiting_for`), releases its ledger slots and logs
its wake-up, a start of kind `wake` SCHEDULED at the wake time (never, for a wait without a
timeout: `due_at_ms` NULL until a signal comes), in one transaction. A signal (`signal`) is kept
in `yoke_signals`; if the execution waits for it, its wake-up becomes due now. Both lock the
execution's row first, so a signal and a wait never miss each other. A replayed wait takes the
oldest kept signal of its name and records it as its step in one transaction (`take_signal`).

This module must never decide what a wait means: it keeps rows and moves them between states.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from yoke.errors import Conflict
from yoke.store.records import ExecutionRow, NewStart, StartRow, StepRecord
from yoke.store.rows import execution_row, keys_of, start_row, step_params
from yoke.store.tx import Transactions, Tx

KEPT_COUNTED = 1001  # kept signals counted at most: past any bound a caller sets on them


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduledStart:
    """A pending scheduled start, as the timer loop holds it."""

    timer_id: int  # the start's seq
    fire_at_ms: int


def _wake_params(s: NewStart, due_at_ms: int | None) -> dict[str, object]:
    return {
        "start_id": s.start_id,
        "workflow": s.workflow,
        "session": s.session,
        "tenant": s.tenant,
        "priority": s.priority,
        "source_execution_id": s.source_execution_id,
        "instance_id": s.instance_id,
        "created_at": s.created_at,
        "due_at_ms": due_at_ms,
    }


class TimeVerbs:
    def __init__(self, transactions: Transactions) -> None:
        self._t = transactions

    def __repr__(self) -> str:
        return f"TimeVerbs({self._t!r})"

    def _seqs(self, seqs: Sequence[int]) -> object:
        return list(seqs) if self._t.dialect == "postgres" else json.dumps(list(seqs))

    # -- scheduled starts ----------------------------------------------------------------------
    async def schedule_starts(
        self, starts: Sequence[tuple[NewStart, int]]
    ) -> list[tuple[StartRow, bool]]:
        """Log each start SCHEDULED until its `due_at_ms`, a batch in one transaction: (its
        row, True), or (the start holding its idempotency key, False)."""
        from yoke.store.execverbs import log_many  # the one way a start is logged

        async with self._t.write() as tx:
            logged = await log_many(tx, [s for s, _ in starts])
            made = [
                {"start_id": row.start_id, "due_at_ms": due}
                for (_, due), (row, created) in zip(starts, logged, strict=True)
                if created
            ]
            if self._t.one_statement_batches and len(made) > 1:
                rows = await tx.all("schedule_starts_many", {"batch": json.dumps(made)})
            else:
                rows = [r for m in made if (r := await tx.one("schedule_start", m)) is not None]
            if rows:
                await tx.run("notify_timers", {})
        scheduled = {str(r["start_id"]): start_row(r) for r in rows}
        return [(scheduled.get(row.start_id, row), created) for row, created in logged]

    async def upcoming(self, *, limit: int, after: tuple[int, int] | None) -> list[ScheduledStart]:
        after_ms, after_id = after if after is not None else (-(2**62), 0)
        params = {"limit": limit, "after_ms": after_ms, "after_id": after_id}
        async with self._t.read() as tx:
            rows = await tx.all("upcoming_starts", params)
        return [
            ScheduledStart(timer_id=int(r["seq"]), fire_at_ms=int(r["due_at_ms"])) for r in rows
        ]

    async def fire(self, seqs: Sequence[int], *, instance_id: str, now: float) -> list[StartRow]:
        """Move the due scheduled starts among `seqs` to QUEUED on `instance_id` (each once,
        whoever else fires them); returns those this call moved."""
        if not seqs:
            return []
        params = {"seqs": self._seqs(seqs), "instance_id": instance_id, "now_ms": int(now * 1000)}
        # One statement, its own transaction (one round trip on PostgreSQL): the due time
        # is on its critical path.
        async with self._t.single() as tx:
            rows = await tx.all("fire_starts", params)
        return sorted((start_row(r) for r in rows), key=lambda r: (r.due_at_ms or 0, r.seq))

    async def scheduled(self, *, tenant: str | None, limit: int) -> list[StartRow]:
        """The delayed starts not yet due, soonest first: `tenant`'s, or every tenant's."""
        async with self._t.read() as tx:
            if tenant is None:
                rows = await tx.all("scheduled_starts", {"limit": limit})
            else:
                rows = await tx.all("scheduled_starts_of", {"tenant": tenant, "limit": limit})
        return [start_row(r) for r in rows]

    async def cancel_scheduled(self, start_id: str, *, now: float) -> StartRow | None:
        """CANCELLED if still SCHEDULED; None if it was not (any more)."""
        params = {"start_id": start_id, "reason": "cancelled", "now": now}
        async with self._t.single() as tx:
            row = await tx.one("cancel_scheduled_start", params)
        return None if row is None else start_row(row)

    # -- waits and signals ---------------------------------------------------------------------
    async def suspend(
        self,
        execution_id: str,
        *,
        instance_id: str,
        step: StepRecord | None,
        wake: NewStart,
        due_at_ms: int | None,
        waiting_for: str | None,
        now: float,
    ) -> str | None:
        """Give the running execution's slot back until `due_at_ms` (or a signal
        `waiting_for`): its step recorded, WAITING, its wake-up logged. If it waits for a
        signal that is already kept, nothing is suspended: the signal is taken and recorded as
        `step`'s result instead, and its payload returned."""
        async with self._t.write() as tx:
            if waiting_for is not None:  # a signal kept already is taken instead
                assert step is not None
                ex = await tx.one("lock_execution", {"execution_id": execution_id})
                if ex is not None and ex["status"] == "RUNNING":
                    got = await _take(tx, execution_id, waiting_for, step, now)
                    if got is not None:
                        return got
            params = {
                "execution_id": execution_id,
                "instance_id": instance_id,
                "waiting_for": waiting_for,
            }
            ex = await tx.one("suspend_execution", params)  # its row locked from here
            if ex is None:
                raise Conflict(f"execution {execution_id} does not run here any more")
            if step is not None:
                await tx.run("record_step", step_params(step, now))
            # Its slots, as a finish frees them (key order; on PostgreSQL one statement that
            # drops a row back at zero and sends the NOTIFY).
            keys = sorted(keys_of(ex["slot_keys"]))
            if keys:
                counts = json.dumps(dict.fromkeys(keys, 1))
                await tx.run("release_slot_counts", {"counts": counts})
                if not self._t.one_statement_batches:
                    await tx.run("drop_idle_slots", {"counts": counts})
            await tx.run("insert_wake", _wake_params(wake, due_at_ms))
            await tx.run("notify_timers", {})
        return None

    async def take_signal(
        self, execution_id: str, name: str, step: StepRecord, *, now: float
    ) -> str | None:
        """Take the oldest kept signal `name` of the execution and record it as `step` (its
        payload the step's result): the payload, or None if none is kept."""
        async with self._t.write() as tx:
            return await _take(tx, execution_id, name, step, now)

    async def signal(
        self,
        execution_id: str,
        name: str,
        payload: str,
        *,
        principal: str | None,
        now: float,
        admit: Callable[[ExecutionRow, int], None],
    ) -> ExecutionRow | None:
        """Keep a signal for the execution (in order, until a wait takes it); if it waits for
        `name`, its wake-up is due now. None if there is no such execution. `admit(row, kept)`
        runs inside the transaction with the count of the execution's kept signals (up to
        `KEPT_COUNTED`); it may refuse, raising: nothing is kept."""
        async with self._t.write() as tx:
            found = await tx.one("lock_execution", {"execution_id": execution_id})
            if found is None:
                return None
            row = execution_row(found)
            counted = {"execution_id": execution_id, "limit": KEPT_COUNTED}
            kept = await tx.one("count_kept_signals", counted)
            admit(row, 0 if kept is None else int(kept["n"]))
            await tx.run(
                "insert_signal",
                {
                    "execution_id": execution_id,
                    "name": name,
                    "payload": payload,
                    "principal": principal,
                    "now": now,
                },
            )
            if found["status"] == "WAITING" and found["waiting_for"] == name:
                params = {"execution_id": execution_id, "now_ms": int(now * 1000)}
                if await tx.run("wake_now", params):
                    await tx.run("notify_timers", {})
        return row

    async def end_waiting(
        self, execution_id: str, *, status: str, error: str, now: float
    ) -> ExecutionRow | None:
        """End a WAITING execution (a cancel) and its wake-up; None if it was not WAITING."""
        async with self._t.write() as tx:
            params = {"execution_id": execution_id, "status": status, "error": error, "now": now}
            row = await tx.one("end_waiting_execution", params)
            if row is None:
                return None
            params = {"execution_id": execution_id, "reason": "its execution ended", "now": now}
            await tx.run("cancel_wake", params)
        return execution_row(row)

    async def wake_of(self, execution_id: str) -> StartRow | None:
        """A WAITING execution's scheduled wake-up."""
        async with self._t.read() as tx:
            row = await tx.one("wake_of", {"execution_id": execution_id})
        return None if row is None else start_row(row)

    async def listen(self, on_change: Callable[[], None]) -> None:
        """Until cancelled, call `on_change` when a scheduled start is logged or made due; a
        backend with no push notification returns at once."""
        await self._t.listen_timers(on_change)


async def _take(tx: Tx, execution_id: str, name: str, step: StepRecord, now: float) -> str | None:
    kept = await tx.one("oldest_signal", {"execution_id": execution_id, "name": name})
    if kept is None:
        return None
    await tx.run("take_signal", {"seq": int(kept["seq"]), "now": now})
    payload = str(kept["payload"])
    params = step_params(step, now)
    params |= {"result": payload, "status": "SUCCEEDED", "retry_at": None}
    await tx.run("record_step", params)
    return payload


__all__ = ["ScheduledStart", "TimeVerbs"]
