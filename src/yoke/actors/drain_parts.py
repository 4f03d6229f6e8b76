"""The drain's records and small pure helpers: its settings and counts, an instance held by this
worker (its FIFO kernel, its groups), a claimed event on its way to `process()`, and the
conversions from a stored row to the `Event` that `process()` sees.

Shared by the drain's core (`drain_core.py`), its shell (`drain.py`) and the shell's parts
(`claimer.py`, `dispatch.py`, `outcomes.py`, `picks.py`). This module must never do I/O.
"""

from __future__ import annotations

import enum
import json
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from yoke.actors.ctx import InstanceStateCell
from yoke.actors.definitions import ActorDef, Event
from yoke.kernel import Item, ItemState, Kernel
from yoke.retry import Backoff, RetryPolicy
from yoke.store.actor_records import CRASH_ATTEMPTS, ClaimedEvent, Completion, PendingEvent


@dataclass(frozen=True, kw_only=True, slots=True)
class DrainConfig:
    concurrency: int = 64  # worker-wide cap on concurrent process() calls
    batch_size: int = 1000  # rows per claim and per completion statement, at most
    # While calls run, a completion statement waits for this many rows, at most this long
    # (completions.py): results that come back a frame at a time share a statement.
    complete_gather: int = 256
    complete_linger: float = 0.02
    prefetch: int = 2048  # claim="first-come": claimed rows held beyond the running ones
    # "fair": each tenant holds at most its weighted share of concurrency * (1 + claim_depth)
    # rows (claims.py); "first-come": up to `prefetch` rows, claimed again when half a batch of
    # room is free (the baseline the benchmark compares with).
    claim: str = "fair"
    claim_depth: int = 16
    # Tenant settings (weights, max_running) are read from the store this often; a worker's
    # counters of capped calls lapse when its heartbeat is older than `stale_after`.
    settings_poll: float = 2.0
    stale_after: float = 60.0
    cap_retry: float = 0.05  # a call refused by its tenant's fleet-wide cap asks again after
    poll_interval: float = 15.0  # backup poll for a missed NOTIFY (YOKE_NOTIFY_POLL_BACKUP_SECS)
    # How a write or a claim waits out an unavailable store.
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    idle_instances: int = 10_000  # instances holding nothing whose state stays cached here
    select_window: int = 100  # custom mode: a group's first events (by arrival) select sees
    crash_attempts: int = CRASH_ATTEMPTS  # an event whose executor died running it alone


@dataclass(frozen=True, kw_only=True, slots=True)
class DrainStats:
    held: int  # claimed rows held by this worker (queued here, running or waiting to retry)
    running: int  # process() calls in progress
    retrying: int  # failed events waiting for their backoff
    processed: int
    errors: int
    dead: int
    fenced: int
    completing: int  # completions not yet written
    given_up: int  # writes a stopping drain gave up (their rows stay claimed until stop_worker)
    instances: int  # instances known here (holding events, or resting with cached state)
    released: int  # rows put back to pending at no cost: their executor was not running
    crashed: int  # crash attempts counted: the executor died running the event alone


class HeldInstance:
    __slots__ = (
        "actor",
        "backlog",
        "backoff",
        "cap",
        "cell",
        "custom",
        "groups",
        "kernel",
        "lost",
        "picking",
        "ref",
        "repick",
    )

    def __init__(self, actor: ActorDef, cell: InstanceStateCell) -> None:
        self.actor = actor
        self.ref = cell.ref
        self.cell = cell
        self.cap = actor.queue.concurrency
        self.custom = actor.queue.mode == "custom"
        self.kernel = Kernel(policy="fifo")
        # Events held here per group; a group's lane cap is set while it holds any, so the
        # kernel forgets idle groups (memory stays O(live groups)).
        self.groups: dict[str, int] = {}
        self.lost = False
        # Custom mode (`custom_pick.CustomInstance`): one pick at a time per instance
        # (`repick`: look again when it ends); `backlog`: groups whose last listing left events
        # pending in the store.
        self.picking = False
        self.repick = False
        self.backlog: set[str] = set()
        self.backoff: Backoff | None = None  # made when a pick first fails for want of the store

    def __repr__(self) -> str:
        k = self.kernel
        return (
            f"HeldInstance({self.ref.actor}/{self.ref.instance_id}, epoch={self.cell.epoch}, "
            f"queued={k.queued}, running={k.running}, lost={self.lost}, picking={self.picking})"
        )


class Job:
    __slots__ = ("event", "failures", "heir", "inst", "row")

    def __init__(self, row: ClaimedEvent, inst: HeldInstance, event: Event) -> None:
        self.row = row
        self.inst = inst  # the instance (and state cell) its call runs under
        self.event = event
        self.failures = 0
        # The instance of a newer epoch that claimed the row here again while its call ran:
        # it holds the row's group slot there (so nothing of its group overtakes it), and
        # runs the row itself if the call ends fenced (`DrainCore.fenced`).
        self.heir: HeldInstance | None = None

    @property
    def completion(self) -> Completion:
        return Completion(queue_id=self.row.queue_id, epoch=self.row.epoch)


class Verdict(enum.Enum):
    """How a call ended, as the drain's core is told (`ended`, `retry` or `fenced`)."""

    DONE = "done"  # over here (done, a dead letter, released, charged, given up): both slots free
    RETRY = "retry"  # run again after a delay: its group slot kept, its worker slot given back
    FENCED = "fenced"  # its instance is another worker's: what it holds and has not started goes


class CallEnded:
    """A call's verdict, decided by `Outcomes` (or `Dispatch` before the call), applied by the
    drain's core: the parts that decide never touch the slots themselves."""

    __slots__ = ("delay", "job", "verdict")

    def __init__(self, job: Job, verdict: Verdict, delay: float = 0.0) -> None:
        self.job = job
        self.verdict = verdict
        self.delay = delay  # RETRY: seconds until it may run again

    def __repr__(self) -> str:
        return f"CallEnded({self.job.row.queue_id}, {self.verdict.value}, delay={self.delay})"


# A store chore of one of the drain's parts (`Chore.fn`), awaited by a runner; what it returns,
# if anything, is the verdict of the call it ended.
ChoreFn = Callable[[], Coroutine[Any, Any, "CallEnded | None"]]


class Chore:
    """A small store chore run by a runner, so it is awaited inside the drain's TaskGroup."""

    __slots__ = ("fn",)

    def __init__(self, fn: ChoreFn) -> None:
        self.fn = fn


def forget_one(inst: HeldInstance, group: str) -> None:
    """One event of `group` is gone from this instance; an idle group drops its lane cap."""
    held = inst.groups[group] - 1
    if held:
        inst.groups[group] = held
    else:
        del inst.groups[group]
        inst.kernel.set_lane_cap(group, None)  # lets the kernel forget the idle group


def event_of(row: ClaimedEvent | PendingEvent, *, attempt: int) -> Event:
    return Event(
        id=row.queue_id,
        event_id=row.event_id,
        stream=row.stream,
        tenant=row.tenant,
        data=json.loads(row.data),
        group_id=row.group_id,
        attempt=attempt,
        appended_at=row.appended_at,
    )


def next_attempt(row: PendingEvent) -> Event:
    """A row not yet run here, as its next attempt sees it."""
    return event_of(row, attempt=row.attempts + 1)


def queued_items(k: Kernel) -> list[Item]:
    out: list[Item] = []
    for lane in list(k.stats().lanes):
        out.extend(k.pending(lane))
    return out


def items_of(wk: Kernel, inst: HeldInstance) -> list[Item]:
    return [
        it
        for it in wk.pending(inst.ref.tenant)
        if isinstance(it.payload, Job) and it.payload.inst is inst
    ]


def waiting_by_tenant(
    jobs: Mapping[int, Job], wk: Kernel, now: float
) -> tuple[Counter[str], dict[str, float]]:
    """Per tenant, the rows held here that are not running, and the age of its oldest one."""
    backlog: Counter[str] = Counter()
    oldest: dict[str, float] = {}
    for qid, job in jobs.items():
        it = wk.get(qid)
        if it is not None and it.state is ItemState.RUNNING:
            continue
        t = job.row.tenant
        backlog[t] += 1
        age = now - job.row.appended_at
        if age > oldest.get(t, -1.0):
            oldest[t] = age
    return backlog, oldest
