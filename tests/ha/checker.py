"""The chaos checker: what the store holds after a run, against what the clients were told.

Pure: `check(history)` takes plain records (read from the store and the load's log by
tests/ha/harness.py) and counts each way a run can break a promise of yoke:

- `overshoot`: grants after which more executions held a slot than `max_running`, from the
  slot log's start and end times (a sweep; at one instant an end goes before a start, since
  a grant that waited for a finish is logged after it); `peak_running` is the most at once.
- `duplicates`: Idempotency-Keys with more than one execution (an automatic recovery of one,
  `YOKE_RECOVERY=resume`, continues it and is not counted), or acknowledged with two different
  start ids (a retry that was not recognised as one).
- `stuck`: executions still RUNNING and starts still QUEUED once the load has stopped and
  the run was given time to drain (a slot never freed, a queue never served).
- `lost_starts`: acknowledged starts whose start row is missing, or acknowledged 201 with an
  execution the store does not hold.
- `stale_epoch_commits`: grants committed under an epoch older than the lease's at their
  commit; None when the run could not measure it (no HA epochs written), never a 0 that
  could not have been anything else.
- `events_lost` / `events_twice`: acknowledged events that no counter state lists, and events
  listed more often than they were appended (processed and applied twice);
  `events_appended_twice`: events whose one Idempotency-Key made more than one stream event
  (a retry on the other server taken for a new append); `count_mismatches`: instances whose
  counter is not the length of their list (a lost update).

It also reports, without judging, what a client may find surprising but the design allows:
acknowledged starts that were later refused or aborted (queued on a server that stopped or
died), how many keys were acknowledged at all, and grants that committed while nobody held
the lease (begun under a term that was resigned before they committed: the takeover waits
for them, so they are not stale).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Answer:
    """One HTTP answer the load got (status 0: no answer: a reset or a timeout)."""

    server: int
    key: str
    status: int
    sent_at: float  # monotonic, the harness's clock
    answered_at: float
    replayed: bool = False  # the answer kept for its Idempotency-Key (Idempotent-Replayed)

    @property
    def is_start(self) -> bool:
        return self.key.startswith("start-")


@dataclass(frozen=True, slots=True)
class Ack:
    """A start a server acknowledged: 201 (granted) or 202 (queued)."""

    key: str
    server: int
    status: int
    start_id: str
    execution_id: str | None
    answered_at: float


@dataclass(frozen=True, slots=True)
class EventAck:
    instance: str
    n: int


@dataclass(frozen=True, slots=True)
class SlotChange:
    execution_id: str
    delta: int  # +1 granted (RUNNING), -1 out of RUNNING
    at: float  # database time at commit


@dataclass(frozen=True, slots=True)
class StartRow:
    start_id: str
    status: str
    execution_id: str | None


@dataclass(frozen=True)
class History:
    max_running: int
    slots: Sequence[SlotChange]
    starts: Mapping[str, StartRow]
    executions_by_key: Mapping[str, Sequence[str]]
    acks: Sequence[Ack]
    events: Sequence[EventAck]
    seen: Mapping[str, Sequence[int]]  # counter instance -> the n's its state lists
    appended: Mapping[int, int] | None = None  # n -> stream events holding it (None: not read)
    counts: Mapping[str, int] | None = None  # counter instance -> its count (None: not read)
    stale_epoch_commits: int | None = None
    grants_unheld: int | None = None  # grants committed while nobody held the lease


@dataclass(frozen=True)
class Report:
    overshoot: int
    peak_running: int
    stuck: int
    duplicates: int
    lost_starts: int
    stale_epoch_commits: int | None
    events_lost: int
    events_twice: int
    events_appended_twice: int
    count_mismatches: int
    acked_starts: int
    acked_then_not_run: int  # acknowledged, then refused or aborted before running
    acked_events: int
    grants_unheld: int | None = None  # after a resign, before a takeover: allowed

    @property
    def violations(self) -> dict[str, int]:
        """Every count that must be 0 (a stale-epoch count only when it was measured)."""
        found = {
            "overshoot": self.overshoot,
            "stuck": self.stuck,
            "duplicates": self.duplicates,
            "lost_starts": self.lost_starts,
            "events_lost": self.events_lost,
            "events_twice": self.events_twice,
            "events_appended_twice": self.events_appended_twice,
            "count_mismatches": self.count_mismatches,
        }
        if self.stale_epoch_commits is not None:
            found["stale_epoch_commits"] = self.stale_epoch_commits
        return {k: v for k, v in found.items() if v}


def overshoot(slots: Sequence[SlotChange], max_running: int) -> tuple[int, int]:
    """(grants that took the running count above `max_running`, the highest count)."""
    running = peak = over = 0
    for change in sorted(slots, key=lambda c: (c.at, c.delta)):  # ends first at a tie
        running += change.delta
        peak = max(peak, running)
        if change.delta > 0 and running > max_running:
            over += 1
    return over, peak


def duplicates(history: History) -> int:
    keys = {k for k, ids in history.executions_by_key.items() if len(set(ids)) > 1}
    start_ids: dict[str, set[str]] = {}
    for a in history.acks:
        start_ids.setdefault(a.key, set()).add(a.start_id)
    keys |= {k for k, ids in start_ids.items() if len(ids) > 1}
    return len(keys)


def lost_starts(history: History) -> int:
    executions = {e for ids in history.executions_by_key.values() for e in ids}
    lost = 0
    for a in history.acks:
        if a.start_id not in history.starts or (
            a.status == 201 and a.execution_id not in executions
        ):
            lost += 1
    return lost


def check(history: History) -> Report:
    over, peak = overshoot(history.slots, history.max_running)
    acked = {a.start_id for a in history.acks}
    not_run = sum(
        1
        for sid in acked
        if (row := history.starts.get(sid)) is not None
        and row.execution_id is None
        and row.status not in ("QUEUED", "GRANTED")
    )
    wanted: dict[str, set[int]] = {}
    for e in history.events:
        wanted.setdefault(e.instance, set()).add(e.n)
    lost = sum(len(ns - set(history.seen.get(k, ()))) for k, ns in wanted.items())
    appended = history.appended or {}
    twice = sum(
        sum(max(0, c - appended.get(n, 1)) for n, c in Counter(listed).items())
        for listed in history.seen.values()
    )
    mismatches = sum(
        1 for k, c in (history.counts or {}).items() if c != len(history.seen.get(k, ()))
    )
    running = {c.execution_id for c in history.slots if c.delta > 0}
    running -= {c.execution_id for c in history.slots if c.delta < 0}
    queued = sum(1 for row in history.starts.values() if row.status == "QUEUED")
    return Report(
        overshoot=over,
        peak_running=peak,
        stuck=len(running) + queued,
        duplicates=duplicates(history),
        lost_starts=lost_starts(history),
        stale_epoch_commits=history.stale_epoch_commits,
        events_lost=lost,
        events_twice=twice,
        events_appended_twice=sum(1 for c in appended.values() if c > 1),
        count_mismatches=mismatches,
        acked_starts=len(acked),
        acked_then_not_run=not_run,
        acked_events=len(history.events),
        grants_unheld=history.grants_unheld,
    )
