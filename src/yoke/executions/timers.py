"""The executions' timers: scheduled starts (delayed starts and wake-ups) on the one timer loop.

`ExecutionTimers` is the executions' `yoke.timers.TimerSource`. Its timers are the SCHEDULED
starts (`store/timeverbs.py`): a delayed start, and the wake-up of a WAITING execution (a
sleep's end, a signal wait's timeout, or now when the signal came). Firing moves the due ones to
QUEUED on this process in one statement (each exactly once across processes) and hands them to
`admit` at their due time (fired up to `FIRE_AHEAD` early and held until then, so the store's
round trip is off the due time), which puts them in this process's queue as their arrival: from
there they are admitted like any start (priority, tenant, session, arrival; the limits; the
ledger). One held when its process stops stays QUEUED on it, and recovery takes it over.

A process that does not admit (a standby, or one shutting down) fires nothing: the timers stay
SCHEDULED for a process that admits. This module must never name a store backend.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from yoke.executions.state import Shared
from yoke.store import StartRow
from yoke.store.timeverbs import ScheduledStart

FIRE_AHEAD = 0.05  # seconds: fired this early, admitted at the due time (held in between)


class ExecutionTimers:
    def __init__(self, shared: Shared, admit: Callable[[Sequence[StartRow]], None]) -> None:
        self._s = shared
        self._admit = admit

    def __repr__(self) -> str:
        return f"ExecutionTimers(instance={self._s.instance_id!r})"

    async def upcoming(self, *, limit: int, after: tuple[int, int] | None) -> list[ScheduledStart]:
        return await self._s.require().time.upcoming(limit=limit, after=after)

    async def fire(self, due: Sequence[ScheduledStart], *, now: float) -> int:
        s = self._s
        if not s.admits():
            return 0
        seqs = [t.timer_id for t in due]
        rows = await s.require().time.fire(seqs, instance_id=s.instance_id, now=now)
        # Fired up to `FIRE_AHEAD` early: each joins the queue at its due time, so the store's
        # round trip is not part of its lateness. Held here meanwhile, it is QUEUED on this
        # process in the store: if the process stops first, recovery takes it over.
        wall = s.clock.wall()
        ready = [r for r in rows if (r.due_at_ms or 0) <= wall * 1000]
        if ready:
            self._admit(ready)
        loop = asyncio.get_running_loop()
        later: dict[int, list[StartRow]] = {}
        for r in rows:
            if (r.due_at_ms or 0) > wall * 1000:
                later.setdefault(r.due_at_ms or 0, []).append(r)
        for due_ms, group in later.items():
            loop.call_later(due_ms / 1000 - wall, self._admit_held, group)
        return len(rows)

    def _admit_held(self, rows: list[StartRow]) -> None:
        if self._s.admits():  # else they stay QUEUED on this process for recovery
            self._admit(rows)
