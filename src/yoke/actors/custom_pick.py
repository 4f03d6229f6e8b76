"""Custom mode's pick, for the drain: list pending, select, claim the chosen one (as the actors
specification has it).

For a group of a custom-mode instance with a free slot, `CustomPicker.pick` lists its pending
events in the store, lets the actor's `select` choose among them and the events the drain
holds here, and claims the chosen one specifically (`claim_event`; a lost race lists again).
`select` sees the first `window` (`DrainConfig.select_window`, default 100) of them in arrival
order: a bound on each pick's read and on the events decoded for it; later ones are seen as
earlier ones go. Groups are picked until none has both a free slot and something to choose.

The drain decides when a pick runs (one at a time per instance, in one of its runners) and does
what a pick asks of it through the callables it passes in: hold a claimed row, start a job. The
instance kernel's lane counts say whether a group has a free slot; the pick only claims an item
in it, between awaits, never across one.

This module must never name a store backend, touch the worker kernel or schedule anything on
the event loop (a failed pick returns its pause; the drain sets the timer), and reads time only
through its `Clock`. It is not named `select`: that is the actor's function (`Queue.select`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum
from typing import Generic, Protocol, TypeVar

from yoke.actors.ctx import InstanceStateCell
from yoke.actors.definitions import ActorDef, Event
from yoke.actors.protocol import ActorStore
from yoke.clock import Clock
from yoke.errors import YokeError
from yoke.kernel import Kernel
from yoke.retry import Backoff, RetryPolicy, severity
from yoke.store.actor_records import ClaimedEvent, InstanceRef, PendingEvent

log = logging.getLogger("yoke.actors.drain")  # the drain's logger: a pick is part of the drain


class CustomInstance(Protocol):
    """What a pick reads of a drain's instance, and the custom-mode fields it keeps there."""

    @property
    def actor(self) -> ActorDef: ...
    @property
    def ref(self) -> InstanceRef: ...
    @property
    def cell(self) -> InstanceStateCell: ...
    @property
    def cap(self) -> int: ...
    @property
    def kernel(self) -> Kernel: ...
    @property
    def groups(self) -> dict[str, int]: ...  # events held here per group
    @property
    def lost(self) -> bool: ...
    @property
    def backlog(self) -> set[str]: ...  # groups whose last listing left events in the store

    repick: bool  # set by the drain while a pick runs: look again when it ends
    backoff: Backoff | None  # the pauses after picks failed for want of the store


class HeldJob(Protocol):
    """What a pick reads of an event the drain holds (the kernel item's payload)."""

    @property
    def event(self) -> Event: ...


InstT = TypeVar("InstT", bound=CustomInstance)
JobT = TypeVar("JobT", bound=HeldJob)


class _Picked(Enum):
    """What one custom-mode pick did for a group."""

    STARTED = "started"  # claimed an event (or took one held here) and handed it on
    NOTHING = "nothing"  # nothing to choose, select chose none, or no free slot any more
    RACED = "raced"  # the chosen row was claimed first (by our own batch claim): list again


def pickable(inst: CustomInstance) -> list[str]:
    """Groups with a free slot and something to choose: events held here and not started,
    or events the last listing left pending in the store."""
    k = inst.kernel
    out = []
    for g in dict.fromkeys([*inst.groups, *inst.backlog]):
        running = k.lane_stats(g).running
        if running < inst.cap and (g in inst.backlog or inst.groups.get(g, 0) > running):
            out.append(g)
    return out


class CustomPicker(Generic[InstT, JobT]):
    """The custom-mode picks of one drain; `hold`, `start` and `decode` are the drain's."""

    def __init__(
        self,
        *,
        store: ActorStore,
        worker_id: str,
        clock: Clock,
        window: int,
        retry: RetryPolicy,
        stopping: Callable[[], bool],
        hold: Callable[[InstT, ClaimedEvent], JobT],
        start: Callable[[JobT], None],
        decode: Callable[[PendingEvent], Event],
    ) -> None:
        self._store = store
        self._worker_id = worker_id
        self._clock = clock
        self._window = window
        self._retry = retry
        self._stopping = stopping  # the drain stops: claim nothing more
        self._hold = hold  # a claimed row joins its group in the instance kernel (queued)
        self._start = start  # a job the instance kernel let start goes to the worker kernel
        self._decode = decode  # a listed row as select sees it (its next attempt)

    def __repr__(self) -> str:
        return f"CustomPicker(worker={self._worker_id!r}, window={self._window})"

    async def pick(self, inst: InstT) -> float | None:
        """Custom mode (the actors specification), for each group with a free slot: list its
        pending events, let `select` choose, claim the chosen one; until no slot or no choice is
        left. Returns None,
        or after a failure for want of the store the pause before the drain looks again."""
        try:
            while True:
                inst.repick = False
                for group in pickable(inst):
                    races = 0
                    while (got := await self._pick_one(inst, group)) is not _Picked.NOTHING:
                        races = races + 1 if got is _Picked.RACED else 0
                        if races == 3:  # our batch claims keep winning: the next change retries
                            break
                if not inst.repick:
                    break
            inst.backoff = None
        except YokeError as exc:  # look again after a pause (the longest if not an outage)
            if inst.backoff is None:
                inst.backoff = Backoff(self._retry)
            pause = inst.backoff.failed(exc)
            log.log(
                severity(exc),
                "picking events of %s failed (retrying in %.2fs): %s",
                inst.ref,
                pause,
                exc,
            )
            return pause
        return None

    async def _pick_one(self, inst: InstT, group: str) -> _Picked:
        k, window = inst.kernel, self._window
        if self._stopping() or inst.lost or k.lane_stats(group).running >= inst.cap:
            return _Picked.NOTHING
        listed = await self._store.list_pending(
            self._worker_id, inst.ref, group, limit=window, now=self._clock.wall()
        )
        if self._stopping() or inst.lost or k.lane_stats(group).running >= inst.cap:
            return _Picked.NOTHING
        # Events claimed here already (by the batch claims) are pending too, from select's
        # point of view: it sees the first `window` of both, in arrival order.
        held: dict[int, JobT] = {it.id: it.payload for it in k.pending(group)}  # type: ignore[misc]
        stored = {r.queue_id: r for r in listed if r.queue_id not in held}
        events = {qid: job.event for qid, job in held.items()}
        events.update({qid: self._decode(r) for qid, r in stored.items()})
        if stored:
            inst.backlog.add(group)
        else:
            inst.backlog.discard(group)
        qid = _choose(inst.actor, group, [events[i] for i in sorted(events)[:window]])
        if qid is None:
            return _Picked.NOTHING
        job = held.get(qid)
        if job is None:
            row = await self._store.claim_event(self._worker_id, qid, epoch=inst.cell.epoch)
            if row is None:
                return _Picked.RACED
            if self._stopping() or inst.lost:
                # The claim was made under an epoch now over, or we stop: stop_worker or the
                # takeover puts the row back to pending.
                return _Picked.NOTHING
            job = self._hold(inst, row)
        if k.claim(qid) is None:  # cannot happen: its group had a free slot, and no await since
            return _Picked.NOTHING
        self._start(job)
        return _Picked.STARTED


def _choose(actor: ActorDef, group: str, events: list[Event]) -> int | None:
    """Run the actor's select; the queue id it chose, or None for none now."""
    if not events:
        return None
    try:
        chosen = actor.queue.selector()(events)
    except Exception:
        log.exception("select of actor %r failed; taking the oldest event", actor.name)
        chosen = events[0]
    if chosen is None:
        return None
    qid = chosen.id if isinstance(chosen, Event) else chosen
    if not any(e.id == qid for e in events):
        log.warning(
            "select of actor %r chose %r, not a pending event of group %r",
            actor.name,
            chosen,
            group,
        )
        return None
    return qid
