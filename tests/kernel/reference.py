"""Brute-force reference model of `yoke.kernel.Kernel`: the rule, written as an O(N) scan.

`pop_next` looks at every queued item, keeps the eligible ones (global cap, lane cap, every cap
key under its cap) and dispatches the one with the smallest policy key (docs/kernel.md). Running
counts are recounted from the items each time. Nothing is cached, nothing is lazy: if this file
and the kernel disagree, the kernel is wrong (or this file is, and then it should be obvious).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

K = 1 << 32


@dataclass
class RItem:
    id: Hashable
    lane: Hashable
    prio: int
    seq: int
    keys: tuple[Hashable, ...]
    state: str = "queued"  # queued | running; done and cancelled items are deleted


@dataclass
class RLane:
    w: float
    tb: int
    S: int = 0
    round: int = 0
    deficit: int = 0
    started: int = 0
    cap: int | None = None


@dataclass
class Reference:
    policy: str = "sfq"
    scope: str = "lane"
    gcap: int | None = None
    credit: int = 0
    default_weight: float = 1.0
    items: dict[Hashable, RItem] = field(default_factory=dict)  # live (queued or running) only
    lanes: dict[Hashable, RLane] = field(default_factory=dict)
    key_caps: dict[Hashable, int] = field(default_factory=dict)
    V: dict[int, int] = field(default_factory=dict)  # per band (-priority); lane scope uses band 0
    tbc: int = 0
    seq: int = 0
    rnow: int = 0

    # ---- derived counts, always recounted
    def live(self, state: str) -> list[RItem]:
        return [i for i in self.items.values() if i.state == state]

    def lane_count(self, lane: Hashable, state: str) -> int:
        return sum(1 for i in self.live(state) if i.lane == lane)

    def key_running(self, key: Hashable) -> int:
        return sum(1 for i in self.live("running") if key in i.keys)

    # ---- lanes
    def lane(self, name: Hashable) -> RLane:
        if name not in self.lanes:
            self.tbc += 1
            self.lanes[name] = RLane(w=self.default_weight, tb=self.tbc)
        return self.lanes[name]

    def forget_idle_lanes(self) -> None:
        for name in list(self.lanes):
            ln = self.lanes[name]
            idle = not any(i.lane == name for i in self.items.values())
            if idle and ln.cap is None and ln.w == self.default_weight:
                del self.lanes[name]

    # ---- the rule
    def counts(self) -> tuple[int, Counter[Hashable], Counter[Hashable]]:
        """Running items: in total, per lane, per cap key (recounted from scratch)."""
        running = self.live("running")
        return (
            len(running),
            Counter(i.lane for i in running),
            Counter(k for i in running for k in i.keys),
        )

    def blocker(self, it: RItem, counts: Any = None) -> Hashable | None:
        total, per_lane, per_key = counts or self.counts()
        if self.gcap is not None and total >= self.gcap:
            return "global"
        cap = self.lanes[it.lane].cap
        if cap is not None and per_lane[it.lane] >= cap:
            return ("lane", it.lane)
        for k in it.keys:
            if k in self.key_caps and per_key[k] >= self.key_caps[k]:
                return k
        return None

    def key(self, it: RItem, per_lane: Counter[Hashable]) -> tuple[int, ...]:
        ln, negp, glob = self.lanes[it.lane], -it.prio, self.scope == "global"
        if self.policy == "sfq":
            seff = max(ln.S, self.V.get(negp if glob else 0, 0) - self.credit * K)
            return (negp, seff, ln.tb, it.seq) if glob else (seff, ln.tb, negp, it.seq)
        if self.policy == "least_running":
            load = int(per_lane[it.lane] * K // ln.w)
            return (negp, load, it.seq) if glob else (load, negp, it.seq)
        if self.policy == "rotation":
            return (negp, ln.round, ln.tb, it.seq) if glob else (ln.round, ln.tb, negp, it.seq)
        return (negp, it.seq)

    def eligible(self) -> list[RItem]:
        counts = self.counts()
        return [i for i in self.live("queued") if self.blocker(i, counts) is None]

    def dispatch(self, it: RItem) -> None:
        ln = self.lanes[it.lane]
        it.state = "running"
        ln.started += 1
        if self.policy == "sfq":
            band = -it.prio if self.scope == "global" else 0
            s = max(ln.S, self.V.get(band, 0) - self.credit * K)
            self.V[band] = max(self.V.get(band, 0), s)
            ln.S = s + round(K / ln.w)
            self.tbc += 1
            ln.tb = self.tbc
        elif self.policy == "rotation":
            self.rnow = max(self.rnow, ln.round)
            if self.lane_count(it.lane, "queued"):
                ln.deficit -= 1
                if ln.deficit <= 0:
                    ln.round += 1
                    self.tbc += 1
                    ln.tb = self.tbc
                    ln.deficit = max(1, round(ln.w))

    def enqueue(self, it: RItem) -> None:
        ln = self.lane(it.lane)
        others = [i for i in self.live("queued") if i.lane == it.lane and i is not it]
        if self.policy == "rotation" and not others:
            ln.round = self.rnow + 1  # joins the tail of the ring with a full quantum
            self.tbc += 1
            ln.tb = self.tbc
            ln.deficit = max(1, round(ln.w))
        it.state = "queued"

    # ---- operations (same names and results as Kernel)
    def push(
        self, item_id: Hashable, lane: Hashable, prio: int = 0, keys: tuple[Hashable, ...] = ()
    ) -> None:
        assert item_id not in self.items
        it = RItem(item_id, lane, prio, self.seq, keys)
        self.seq += 1
        self.items[item_id] = it
        self.enqueue(it)

    def pop_next(self) -> Hashable | None:
        cands = self.eligible()
        if not cands:
            return None
        per_lane = self.counts()[1]
        best = min(cands, key=lambda i: self.key(i, per_lane))
        self.dispatch(best)
        return best.id

    def offer(
        self, item_id: Hashable, lane: Hashable, prio: int = 0, keys: tuple[Hashable, ...] = ()
    ) -> bool:
        empty = not self.live("queued")
        self.push(item_id, lane, prio, keys)
        if empty and self.blocker(self.items[item_id]) is None:
            assert self.pop_next() == item_id
            return True
        return False

    def release(self, item_id: Hashable) -> None:
        it = self.items.pop(item_id)
        assert it.state == "running"
        self.forget_idle_lanes()

    def cancel(self, item_id: Hashable) -> bool:
        it = self.items.get(item_id)
        if it is None or it.state != "queued":
            return False
        del self.items[item_id]
        self.forget_idle_lanes()
        return True

    def reprioritize(self, item_id: Hashable, prio: int) -> bool:
        it = self.items.get(item_id)
        if it is None or it.state != "queued":
            return False
        it.prio = prio
        return True

    def requeue(self, item_id: Hashable) -> None:
        it = self.items[item_id]
        assert it.state == "running"
        self.enqueue(it)

    def claim(self, item_id: Hashable) -> bool:
        it = self.items[item_id]
        if it.state != "queued" or self.blocker(it) is not None:
            return False
        self.dispatch(it)
        return True

    def drain(self) -> list[Hashable]:
        out = sorted(self.live("queued"), key=lambda i: (-i.prio, i.seq))
        for it in out:
            del self.items[it.id]
        self.forget_idle_lanes()
        return [i.id for i in out]

    def pending(self, lane: Hashable) -> list[Hashable]:
        q = [i for i in self.live("queued") if i.lane == lane]
        return [i.id for i in sorted(q, key=lambda i: (-i.prio, i.seq))]

    def set_weight(self, lane: Hashable, w: float) -> None:
        self.lane(lane).w = w
        self.forget_idle_lanes()

    def set_lane_cap(self, lane: Hashable, cap: int | None) -> None:
        self.lane(lane).cap = cap
        self.forget_idle_lanes()

    def set_cap(self, key: Hashable, cap: int | None) -> None:
        if cap is None:
            self.key_caps.pop(key, None)
        else:
            self.key_caps[key] = cap

    def lane_stats(self) -> dict[Hashable, tuple[int, int, int, float]]:
        return {
            n: (self.lane_count(n, "queued"), self.lane_count(n, "running"), ln.started, ln.w)
            for n, ln in self.lanes.items()
        }
