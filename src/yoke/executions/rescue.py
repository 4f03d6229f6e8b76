"""`Rescue`: what `app.executions` does for executions in trouble, whichever process runs them:
cancel one from any server, act on the cancel requests addressed to this process, and recover
the executions of dead processes.

Cancel (see `requests`): an execution running here is stopped at once; one running elsewhere
gets a durable request its owner hears (NOTIFY, or its poll) and acts on, and the caller waits,
at most `cancel_wait` seconds, for its end.

Recovery (`YOKE_RECOVERY`): `recover` declares dead the processes whose heartbeat is stale and
ends what they ran, in one transaction of the store (`store/recovery.py`); with `resume`
(`max_recoveries` set) every top-level execution they ran is resumed, unless its chain of
automatic recoveries is at `YOKE_RECOVERY_MAX`, by a QUEUED start of this process, and their
queued starts become this process's. The shell admits those starts (`Executions.recover`)
through its queue like any other: a slot, the queue order, the limits. Which process
recovers a dead one is decided by the store's lock on its row: exactly one, however many race.
A process that was only paused past the staleness and finds itself declared dead stops the runs
its recoverer ended (`stop_recovered`).

`Rescue` holds the executions' `Shared` by reference; it stops a run through the core
(`Shared.stop`), never by itself deciding admission. This module must never name a backend.
"""

from __future__ import annotations

import asyncio
import logging

from yoke.errors import Conflict, NotFound, StoreUnavailable
from yoke.executions.model import Execution, Failure, Principal
from yoke.executions.reading import Reading
from yoke.executions.requests import CANCEL, Inbox
from yoke.executions.state import Shared, check_id, execution_of
from yoke.store import ExecutionStatus, Recovery, Resume

log = logging.getLogger("yoke.executions")

CANCEL_WAIT = 5.0  # seconds a cancel of another process's execution waits for its end


class Rescue:
    def __init__(
        self,
        shared: Shared,
        reading: Reading,
        *,
        max_recoveries: int | None,
        request_poll: float,
        cancel_wait: float = CANCEL_WAIT,
    ) -> None:
        self._s = shared
        self._reading = reading
        self.max_recoveries = max_recoveries  # None: YOKE_RECOVERY=abort
        self.inbox = Inbox(poll=request_poll)
        self.cancel_wait = cancel_wait

    def __repr__(self) -> str:
        mode = "abort" if self.max_recoveries is None else f"resume<={self.max_recoveries}"
        return f"Rescue(recovery={mode}, {self.inbox!r})"

    # -- cancel ----------------------------------------------------------------------------------
    async def cancel(self, execution_id: str, principal: Principal | None = None) -> Execution:
        """Stop a RUNNING execution, whichever process runs it; its slot frees once it has
        stopped. Returns the execution once it ended, or as it is after `cancel_wait` seconds
        (still RUNNING: its owner has not stopped it yet, or is dead and its recovery will end
        it CANCELLED). `Conflict` if it has ended, or is a child (cancel its parent)."""
        s = self._s
        store = s.require()
        row = await store.get_execution(check_id(execution_id, "execution_id"))
        if row is None:
            raise NotFound(f"no execution {execution_id}")
        if row.parent_id is not None:
            raise Conflict(
                f"execution {execution_id} is a child workflow; cancel its parent, and it "
                "stops with it"
            )
        if row.status.finished:
            raise Conflict(f"execution {execution_id} is already {row.status.name}")
        if row.status is ExecutionStatus.WAITING:  # no server runs it: it ends here
            error = Failure(type="Cancelled", message="cancelled while it waited")
            ended = await store.time.end_waiting(
                row.execution_id, status="CANCELLED", error=error.encoded(), now=s.clock.wall()
            )
            if ended is not None:
                return execution_of(ended)
            row = await store.get_execution(row.execution_id) or row  # woken meanwhile
        run = s.runs.get(row.execution_id)
        if run is not None and run.task is not None:
            s.stop(run)
            await asyncio.wait([run.task])
            return await self._reading.get_execution(row.execution_id)
        after, asked = await store.requests.request_cancel(
            row.execution_id,
            principal=None if principal is None else principal.name,
            now=s.clock.wall(),
        )
        if after is None:
            raise NotFound(f"no execution {execution_id}")
        if not asked:
            raise Conflict(f"execution {execution_id} is already {after.status.name}")
        if after.instance_id == s.instance_id:
            self.inbox.wake()  # this process's own, not launched yet: its next look stops it
        return await self._reading.wait(row.execution_id, timeout=self.cancel_wait)

    async def run_requests(self) -> None:
        """Service: act on the requests addressed to this process, when told (NOTIFY, a cancel
        made here) and at each poll; a failed look is tried again at the next."""
        s = self._s
        while True:
            await self.inbox.wait()
            store = s.store
            if store is None:
                continue
            try:
                rows = await self.inbox.pending(store, s.instance_id)
                if not rows:
                    continue
                acted: list[int] = []
                for r in rows:
                    run = s.runs.get(r.execution_id)
                    if r.kind == CANCEL and run is not None and run.task is not None:
                        log.info("cancelling %s, as asked by %s", r.execution_id, r.principal)
                        s.stop(run)
                        acted.append(r.seq)
                await self.inbox.settle(store, rows, acted, now=s.clock.wall())
            except StoreUnavailable as exc:  # the next look tries again
                log.warning("acting on requests to executions failed: %s", exc)

    def heard(self, instance_id: str) -> None:
        """A request was announced for the executions of `instance_id` (NOTIFY)."""
        self.inbox.heard(instance_id, self._s.instance_id)

    # -- recovery --------------------------------------------------------------------------------
    async def stop_recovered(self) -> int:
        """This instance was declared dead and a peer recovered it: the executions the peer
        ended (it freed their slots, which may be granted again already, and may have resumed
        them elsewhere) must not go on running here. Executions granted here since then stay.
        Queued starts the peer took over are found GONE when picked. Returns how many runs
        were stopped."""
        s = self._s
        store = s.require()
        stopped = 0
        for execution_id, run in list(s.runs.items()):
            row = await store.get_execution(execution_id)
            if row is None or row.status.finished:
                log.warning("stopping %s: a peer recorded it %s", execution_id, row and row.status)
                s.stop(run)
                stopped += 1
        return stopped

    async def recover(self, *, stale_before: float) -> Recovery:
        """Declare dead the processes silent since `stale_before` and end what they ran;
        with `resume`, the starts this process must now admit are `adopted`."""
        s = self._s
        resume = (
            None
            if self.max_recoveries is None
            else Resume(max_recoveries=self.max_recoveries, new_id=s.ids)
        )
        found = await s.require().recover_dead(
            stale_before=stale_before, now=s.clock.wall(), exclude=s.instance_id, resume=resume
        )
        if found.instances:
            log.warning(
                "instances %s died: ended %d executions (%d resumed here, %d cancelled as "
                "asked), %d of their queued starts %s",
                ", ".join(found.instances),
                len(found.executions),
                len(found.recovered),
                len(found.cancelled),
                len(found.starts) or len(found.adopted) - len(found.recovered),
                "aborted" if resume is None else "taken over",
            )
        return found
