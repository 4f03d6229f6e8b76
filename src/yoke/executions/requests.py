"""Cancel from any server: a durable request that the execution's owner hears and acts on.

`app.executions.cancel` works whichever process runs the execution. One that runs here is
stopped at once. Otherwise a cancel request is written (`store.requests.request_cancel`: only
while the execution runs, naming the instance that runs it) and announced: on PostgreSQL a
NOTIFY reaches the owner at the commit, elsewhere the owner finds it at its next poll
(`YOKE_REQUEST_POLL_SECS`). The owner stops the execution's task (its children, which run
inside it, stop with it), its end is recorded CANCELLED and its slot freed as for a cancel
made there; the asker waits for that end, a bounded while, and answers with the execution as
it is then. If the owner dies first, the recovery of its executions ends this one CANCELLED
(and does not resume it).

`Inbox` is the owner's side: which requests are for this process (`pending`), and, once the
shell acted on them, which are done with (`settle`). A request for an execution this process
does not run yet (its grant's answer is still on its way) stays pending for the next look.

This module must never stop a task itself: it says which; the shell (`service`) stops them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection

from yoke.store import RequestRow, Store

log = logging.getLogger("yoke.executions")

CANCEL = "cancel"
PAGE = 100  # requests read per look


class Inbox:
    def __init__(self, *, poll: float) -> None:
        self.poll = poll
        self._woken = asyncio.Event()

    def __repr__(self) -> str:
        return f"Inbox(poll={self.poll}, woken={self._woken.is_set()})"

    def wake(self) -> None:
        self._woken.set()

    def heard(self, instance_id: str, mine: str) -> None:
        """A NOTIFY: a request for `instance_id` (`""`: for anyone, after a reconnect)."""
        if not instance_id or instance_id == mine:
            self._woken.set()

    async def wait(self) -> None:
        """Until woken, or the poll's period."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.poll):
                await self._woken.wait()
        self._woken.clear()

    @staticmethod
    async def pending(store: Store, instance_id: str) -> list[RequestRow]:
        return await store.requests.pending_requests(instance_id, limit=PAGE)

    @staticmethod
    async def settle(
        store: Store, rows: list[RequestRow], acted: Collection[int], *, now: float
    ) -> None:
        """Mark handled the requests acted on, and those whose execution has ended anyway."""
        done = set(acted)
        for r in rows:
            if r.seq in done:
                continue
            row = await store.get_execution(r.execution_id)
            if row is None or row.status.finished:
                done.add(r.seq)
            elif r.kind != CANCEL:
                log.warning("request %d of unknown kind %r: dropped", r.seq, r.kind)
                done.add(r.seq)
        await store.requests.handle_requests(sorted(done), now=now)
