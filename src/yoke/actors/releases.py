"""`Releases`: the drain's writes for calls whose executor is not running, and the rule they
keep, FIFO per group across an executor's death.

A call that never ran to an end because its tenant's executor died or was not running goes
back to pending at no cost (`release_claims`, in batches like completions). The call its
executor died running alone (or that ran past its deadline) is charged a crash attempt
instead (`charge_crash`: pending again, or a dead letter after `crash_attempts`). While any
of a tenant's writes are outstanding, that tenant is `busy`: the drain claims nothing of it
and starts nothing of it (what it holds is released in turn), so every event of a group is
pending again, in order, before any is claimed again.

This module must never touch the drain's kernels; it only writes and counts.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

from yoke.actors.completions import CompletionWriter
from yoke.actors.protocol import ActorStore
from yoke.actors.refusals import bury
from yoke.clock import Clock
from yoke.errors import YokeError
from yoke.retry import RetryPolicy, until_done
from yoke.store.actor_records import Completion, CrashCharge

log = logging.getLogger("yoke.actors.drain")  # part of the drain


class Releases:
    def __init__(
        self,
        store: ActorStore,
        worker_id: str,
        *,
        clock: Clock,
        batch_size: int,
        retry: RetryPolicy,
        crash_attempts: int,
        stopping: Callable[[], bool],
        on_free: Callable[[str], None],
    ) -> None:
        self._store = store
        self._worker_id = worker_id
        self._clock = clock
        self._retry = retry
        self.crash_attempts = crash_attempts
        self._stopping = stopping
        self._on_free = on_free  # a tenant has nothing outstanding any more
        self._busy: Counter[str] = Counter()
        # released: rows put back at no cost; crashed: crash attempts counted; dead: rows that
        # became dead letters by it; given_up: charges a stopping drain could not write.
        self.counts = dict.fromkeys(("released", "crashed", "dead", "given_up"), 0)
        self.writer: CompletionWriter[str] = CompletionWriter(
            store,
            worker_id,
            clock=clock,
            batch_size=batch_size,
            retry=retry,
            on_fenced=lambda tenants: None,  # taken over: the takeover put them back already
            verb=store.executors.release_claims,
            on_batch=self._written,
            what="released claims",
        )

    def __repr__(self) -> str:
        return f"Releases(busy={dict(self._busy)}, writing={len(self.writer)})"

    def totals(self) -> dict[str, int]:
        """The counts, with the releases a stopping drain could not write among `given_up`."""
        return {**self.counts, "given_up": self.counts["given_up"] + self.writer.given_up}

    def busy(self, tenant: str) -> bool:
        return self._busy[tenant] > 0

    def release(self, done: Completion, tenant: str) -> None:
        """Put the row back to pending, at no cost (written with the next batch)."""
        self._busy[tenant] += 1
        self.counts["released"] += 1
        self.writer.add(done, tenant)

    async def charge(self, done: Completion, tenant: str, reason: str, *, what: str) -> None:
        """Count a crash attempt on the row (`what` names its event)."""
        self._busy[tenant] += 1
        self.counts["crashed"] += 1
        text = f"executor crashed while running this event: {reason}"
        try:
            stored: tuple[CrashCharge, int] | None = await until_done(
                lambda: self._store.executors.charge_crash(
                    self._worker_id,
                    done,
                    error=text,
                    dead_after=self.crash_attempts,
                    now=self._clock.wall(),
                ),
                policy=self._retry,
                what=f"counting a crash of {what}",
                stopping=self._stopping,
                log=log,
            )
        except YokeError as exc:  # refused for good: a dead letter of the refusal instead
            buried = await bury(
                self._store,
                self._worker_id,
                done,
                refusal=exc,
                what="its crash charge",
                now=self._clock.wall(),
                policy=self._retry,
                stopping=self._stopping,
            )
            stored = (CrashCharge.DEAD, 1) if buried else None
        finally:
            self._written([tenant])
        if stored is None:
            self.counts["given_up"] += 1
        elif stored[0] is CrashCharge.DEAD:
            self.counts["dead"] += 1
            log.warning(
                "%s: its executor crashed %d times running it; now a dead letter: %s",
                what,
                self.crash_attempts,
                reason,
            )

    def _written(self, tenants: list[str]) -> None:
        for tenant in tenants:
            self._busy[tenant] -= 1
            if not self._busy[tenant]:
                del self._busy[tenant]
                self._on_free(tenant)
