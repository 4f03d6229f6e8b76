"""The executions' timers: scheduled starts (delayed starts and wake-ups) on the one timer loop.

`ExecutionTimers` is the executions' `yoke.timers.TimerSource`. Its timers are the SCHEDULED
starts (`store/timeverbs.py`): a delayed start, and the wake-up of a WAITING execution (a
sleep's end, a signal wait's timeout, or now when the signal came). Firing moves the due ones to
QUEUED on this process in one statement (each exactly once across processes) and hands them to
`admit`, which puts them in this process's queue as their arrival: from there they are admitted
like any start (priority, tenant, session, arrival; the limits; the ledger).

A process that does not admit (a standby, or one shutting down) fires nothing: the timers stay
SCHEDULED for a process that admits. This module must never name a store backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from yoke.executions.state import Shared
from yoke.store import StartRow
from yoke.store.timeverbs import ScheduledStart


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
        if rows:
            self._admit(rows)
        return len(rows)
