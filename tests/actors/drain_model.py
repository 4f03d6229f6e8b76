"""A plain model of what one worker's drain may do with the rows it claims: the store's rows as
records, and every rule written as a scan of them.

It knows no kernel and no heap. A row is pending, claimed (under an owner epoch, by a claim id)
or gone (completed or a dead letter); a call is a record that runs, waits for its retry, or has
ended. The rules a drain must keep are recounted from those records each time:

* FIFO per group: a call starts only when every older row of its group (same instance, same
  epoch of the instance) that is not gone holds a group slot (runs or waits for its retry);
* the group cap: calls holding a slot of a group <= its actor's `queue.concurrency`;
* the worker's slots and the tenants' local caps: calls running <= the cap;
* no row run twice at once, none run after it is gone, none started after stop;
* the claim windows: a tenant's quota is `max(0, window - held)` where its window is
  `max(1, ceil(budget * w / W))`, W the weight of the tenants holding rows here or backlogged
  (its last claim took its whole quota), itself included;
* nothing left claimed: a row the store says this worker claimed (under the instance's current
  epoch) is held by the drain, waits for a move's end, or belongs to a claim whose answer was
  lost (put back before the next claim).

A row whose call is under way (or waits for its retry) when its instance is taken over and
claimed here again under the newer epoch keeps its group slot, now the newer epoch's (its
call's `key` moves there): the rows behind it wait, and if the call ends fenced the row is
held again, first of its group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

PENDING, CLAIMED, GONE = "pending", "claimed", "gone"


@dataclass
class MRow:
    qid: int
    tenant: str
    instance: str
    group: str
    status: str = PENDING
    epoch: int = 0  # the owner epoch it was claimed under
    claim: int = 0  # the claim that took it
    attempts: int = 0


@dataclass
class MCall:
    qid: int
    tenant: str
    key: tuple[str, int, str]  # (instance, epoch, group): whose group slot it holds
    state: str = "running"  # running | retrying | ended


@dataclass
class DrainModel:
    budget: int
    concurrency: int
    group_caps: dict[str, int]  # instance -> its actor's queue.concurrency
    rows: dict[int, MRow] = field(default_factory=dict)
    epochs: dict[str, int] = field(default_factory=dict)  # instance -> its current epoch
    calls: dict[int, MCall] = field(default_factory=dict)  # by qid: its latest call
    weights: dict[str, float] = field(default_factory=dict)
    caps: dict[str, int] = field(default_factory=dict)
    backlog: set[str] = field(default_factory=set)
    stopped: bool = False

    # -- counts, always recounted ------------------------------------------------------------
    def running(self, tenant: str | None = None) -> int:
        return sum(
            1
            for c in self.calls.values()
            if c.state == "running" and (tenant is None or c.tenant == tenant)
        )

    def slots(self, key: tuple[str, int, str]) -> int:
        return sum(
            1 for c in self.calls.values() if c.key == key and c.state in ("running", "retrying")
        )

    def window(self, tenant: str, held: dict[str, int]) -> int:
        active = {t for t, n in held.items() if n} | self.backlog | {tenant}
        total = sum(self.weights.get(t, 1.0) for t in active)
        return max(1, math.ceil(self.budget * self.weights.get(tenant, 1.0) / total))

    def quota(self, tenant: str, held: dict[str, int]) -> int:
        return max(0, self.window(tenant, held) - held.get(tenant, 0))

    # -- the rules a start must keep ------------------------------------------------------------
    def may_start(self, qid: int, epoch: int) -> str | None:
        """Why the start of `qid` (claimed under `epoch`) breaks a rule, or None."""
        row = self.rows[qid]
        if self.stopped:
            return "started after stop"
        if row.status == GONE:
            return f"row {qid} started after it was written off"
        call = self.calls.get(qid)
        if call is not None and call.state == "running":
            return f"row {qid} runs twice"
        if epoch < self.epochs[row.instance]:
            return None  # the instance was taken over meanwhile: the call is fenced, no effect
        if row.status != CLAIMED or row.epoch != epoch:
            return f"row {qid} is {row.status} (epoch {row.epoch}), started under {epoch}"
        key = (row.instance, epoch, row.group)
        retrying = call is not None and call.state == "retrying" and call.key == key
        for other in self.rows.values():
            if (
                other.qid < qid
                and other.status != GONE
                and (other.instance, other.group) == (row.instance, row.group)
            ):
                held = self.calls.get(other.qid)
                if held is None or held.state == "ended" or held.key != key:
                    return f"row {qid} overtook {other.qid} of its group"
        if not retrying and self.slots(key) >= self.group_caps[row.instance]:
            return f"group {key} is full"
        if self.running() >= self.concurrency:
            return "the worker's slots are full"
        cap = self.caps.get(row.tenant)
        if cap is not None and self.running(row.tenant) >= cap:
            return f"tenant {row.tenant} is at its cap"
        return None

    def start(self, qid: int, epoch: int) -> None:
        row = self.rows[qid]
        self.calls[qid] = MCall(qid, row.tenant, (row.instance, epoch, row.group))
