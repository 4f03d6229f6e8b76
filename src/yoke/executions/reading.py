"""Reading starts and executions: `get`, `wait_granted`, `get_execution`, `wait`, `list`.

A start or execution of this process is answered from memory where that is fresher (its queue
position, the task to wait on, the end its finish recorded: `state.Ended`); one of another
process is read from the store, and waited for
by polling with back-off. `Reading` holds the executions' `Shared` by reference; waiting on a
ticket of this process is the shell's (`wait_decided`), passed in. This module must never
change a start or an execution.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from yoke.errors import (
    BadValue,
    NotFound,
)
from yoke.executions.model import (
    Execution,
    Page,
    Start,
    check_timeout,
)
from yoke.executions.state import Shared, T, check_id, execution_of
from yoke.executions.tickets import Ticket
from yoke.retry import Backoff, RetryPolicy
from yoke.store import (
    ExecutionStatus,
    StartStatus,
)

# A re-read of rows another process owns: soon at first, then at most every quarter second.
_REREAD = RetryPolicy(first=0.01, most=0.25)


class Reading:
    def __init__(
        self, shared: Shared, wait_decided: Callable[[Ticket, float | None], Awaitable[None]]
    ) -> None:
        self._s = shared
        self._wait_decided = wait_decided

    async def get(self, start_id: str) -> Start:
        s = self._s
        row = await s.require().get_start(check_id(start_id, "start_id"))
        if row is None:
            raise NotFound(f"no start {start_id}")
        t = s.core.tickets.get(row.start_id)
        return s.answer(t.row if t is not None and row.status is StartStatus.QUEUED else row)

    async def wait_granted(self, start_id: str, timeout: float | None = None) -> Start:
        """Wait until the start is no longer QUEUED (or `timeout`); return it as it is then."""
        timeout = check_timeout(timeout)
        t = self._s.core.tickets.get(check_id(start_id, "start_id"))
        if t is not None:
            await self._wait_decided(t, timeout)
            return await self.get(start_id)
        return await self._poll_until(
            lambda: self.get(start_id), lambda s: s.status not in _UNDECIDED, timeout
        )

    async def get_execution(self, execution_id: str) -> Execution:
        row = await self._s.require().get_execution(check_id(execution_id, "execution_id"))
        if row is None:
            raise NotFound(f"no execution {execution_id}")
        return execution_of(row)

    async def wait(self, execution_id: str, timeout: float | None = None) -> Execution:
        """Wait until the execution has finished (or `timeout`); return it as it is then."""
        timeout = check_timeout(timeout)
        s = self._s
        ended = s.ended.get(check_id(execution_id, "execution_id"))
        if ended is not None:  # it ran here: its end is known without the store
            return ended
        run = s.runs.get(execution_id)
        if run is not None and run.task is not None:
            loop = asyncio.get_running_loop()
            begun = loop.time()
            await asyncio.wait([run.task], timeout=timeout)
            ended = s.ended.get(execution_id)
            if ended is not None:  # it ran here to its end
                return ended
            ex = await self.get_execution(execution_id)
            if ex.status.finished or not run.task.done():
                return ex
            # Its run ended and it waits (asleep, or for a signal): poll until it ends.
            if timeout is not None:
                timeout = max(0.0, timeout - (loop.time() - begun))
        return await self._poll_until(
            lambda: self.get_execution(execution_id), lambda e: e.status.finished, timeout
        )

    async def list(
        self,
        *,
        status: ExecutionStatus | str | None = None,
        session: str | None = None,
        workflow: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        tenant: str | None = None,
    ) -> Page:
        if isinstance(status, str):
            try:
                status = ExecutionStatus(status.upper())
            except ValueError:
                raise BadValue(f"unknown execution status {status!r}") from None
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise BadValue("limit must be an int from 1 to 1000")
        before: int | None = None
        if cursor is not None:
            try:
                before = int(cursor)
            except (TypeError, ValueError):
                raise BadValue(f"bad cursor {cursor!r}") from None
        rows = await self._s.require().list_executions(
            status=status,
            session=session,
            workflow=workflow,
            before_seq=before,
            limit=limit + 1,
            tenant=tenant,
        )
        more = len(rows) > limit
        rows = rows[:limit]
        return Page(
            items=tuple(execution_of(r) for r in rows),
            next_cursor=str(rows[-1].seq) if more else None,
        )

    async def _poll_until(
        self, fetch: Callable[[], Awaitable[T]], done: Callable[[T], bool], timeout: float | None
    ) -> T:
        # For rows owned by another process: re-read with back-off until done or the deadline.
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        backoff = Backoff(_REREAD)
        while True:
            value = await fetch()
            if done(value):
                return value
            if deadline is not None and loop.time() >= deadline:
                return value
            delay = backoff.failed()
            wait = delay if deadline is None else min(delay, max(0.0, deadline - loop.time()))
            await asyncio.sleep(wait)


_UNDECIDED = (StartStatus.QUEUED, StartStatus.SCHEDULED)
