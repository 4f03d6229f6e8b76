"""Brute-force reference model of `yoke.kernel.GroupedKernel`: the two-level rule as an O(N) scan.

`pop_next` looks at every queued item, keeps the eligible ones (global cap, group cap, lane cap,
every cap key under its cap) and starts the one with the smallest key

    (-priority, group running * 2**32 // group weight, max(group S, V), group tb,
     lane running, seq)

Counts are recounted from the items each time; nothing is cached or lazy. A group is made when
an item or a setting first names it and forgotten when it has no items and no setting of its
own (its tag and tie-break go with it, as in the kernel).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

K = 1 << 32


@dataclass
class GItem:
    id: Hashable
    lane: Hashable
    group: Hashable
    prio: int
    seq: int
    keys: tuple[Hashable, ...]
    state: str = "queued"  # queued | running; done and cancelled items are deleted


@dataclass
class GGroup:
    tb: int
    S: int = 0
    started: int = 0
    own_cap: int | None = None  # None: no cap of its own
    own_weight: float | None = None


@dataclass
class GroupedReference:
    gcap: int | None = None
    lane_cap: int | None = None
    default_cap: int | None = None
    default_weight: float = 1.0
    items: dict[Hashable, GItem] = field(default_factory=dict)
    groups: dict[Hashable, GGroup] = field(default_factory=dict)
    lane_started: Counter[Hashable] = field(default_factory=Counter)
    key_caps: dict[Hashable, int] = field(default_factory=dict)
    V: int = 0
    tbc: int = 0
    seq: int = 0

    # ---- counts, always recounted
    def live(self, state: str) -> list[GItem]:
        return [i for i in self.items.values() if i.state == state]

    def running_in(self, attr: str, name: Hashable) -> int:
        return sum(1 for i in self.live("running") if getattr(i, attr) == name)

    def queued_in(self, attr: str, name: Hashable) -> int:
        return sum(1 for i in self.live("queued") if getattr(i, attr) == name)

    def key_running(self, key: Hashable) -> int:
        return sum(1 for i in self.live("running") if key in i.keys)

    # ---- groups
    def group(self, name: Hashable) -> GGroup:
        if name not in self.groups:
            self.tbc += 1
            self.groups[name] = GGroup(tb=self.tbc)
        return self.groups[name]

    def cap_of(self, name: Hashable) -> int | None:
        g = self.groups.get(name)
        return self.default_cap if g is None or g.own_cap is None else g.own_cap

    def weight_of(self, name: Hashable) -> float:
        g = self.groups.get(name)
        return self.default_weight if g is None or g.own_weight is None else g.own_weight

    def forget(self) -> None:
        for name in list(self.groups):
            g = self.groups[name]
            idle = not any(i.group == name for i in self.items.values())
            if idle and g.own_cap is None and g.own_weight is None:
                del self.groups[name]
        lanes = {i.lane for i in self.items.values()}
        for lane in list(self.lane_started):
            if lane not in lanes:
                del self.lane_started[lane]

    # ---- the rule
    def counts(self) -> tuple[int, Counter[Hashable], Counter[Hashable], Counter[Hashable]]:
        """Running items: in total, per group, per lane, per cap key (recounted)."""
        running = self.live("running")
        return (
            len(running),
            Counter(i.group for i in running),
            Counter(i.lane for i in running),
            Counter(k for i in running for k in i.keys),
        )

    def blocker(self, it: GItem, counts: Any = None) -> Hashable | None:
        total, per_group, per_lane, per_key = counts or self.counts()
        if self.gcap is not None and total >= self.gcap:
            return "global"
        cap = self.cap_of(it.group)
        if cap is not None and per_group[it.group] >= cap:
            return ("group", it.group)
        if self.lane_cap is not None and per_lane[it.lane] >= self.lane_cap:
            return ("lane", it.lane)
        for k in it.keys:
            if k in self.key_caps and per_key[k] >= self.key_caps[k]:
                return k
        return None

    def key(self, it: GItem, counts: Any = None) -> tuple[int, ...]:
        _, per_group, per_lane, _ = counts or self.counts()
        g = self.groups[it.group]
        load = int(per_group[it.group] * K // self.weight_of(it.group))
        return (-it.prio, load, max(g.S, self.V), g.tb, per_lane[it.lane], it.seq)

    def eligible(self) -> list[GItem]:
        counts = self.counts()
        return [i for i in self.live("queued") if self.blocker(i, counts) is None]

    def dispatch(self, it: GItem) -> None:
        g = self.groups[it.group]
        it.state = "running"
        g.started += 1
        self.lane_started[it.lane] += 1
        s = max(g.S, self.V)
        self.V = max(self.V, s)
        g.S = s + round(K / self.weight_of(it.group))
        self.tbc += 1
        g.tb = self.tbc

    # ---- operations (same names and results as GroupedKernel)
    def push(self, item_id: Hashable, lane: Hashable, group: Hashable, prio: int = 0,
             keys: tuple[Hashable, ...] = ()) -> None:  # fmt: skip
        assert item_id not in self.items
        self.group(group)
        self.items[item_id] = GItem(item_id, lane, group, prio, self.seq, keys)
        self.seq += 1

    def pop_next(self) -> Hashable | None:
        cands = self.eligible()
        if not cands:
            return None
        counts = self.counts()
        best = min(cands, key=lambda i: self.key(i, counts))
        self.dispatch(best)
        return best.id

    def offer(self, item_id: Hashable, lane: Hashable, group: Hashable, prio: int = 0,
              keys: tuple[Hashable, ...] = ()) -> bool:  # fmt: skip
        empty = not self.live("queued")
        self.push(item_id, lane, group, prio, keys)
        if empty and self.blocker(self.items[item_id]) is None:
            assert self.pop_next() == item_id
            return True
        return False

    def release(self, item_id: Hashable) -> None:
        it = self.items.pop(item_id)
        assert it.state == "running"
        self.forget()

    def cancel(self, item_id: Hashable) -> bool:
        it = self.items.get(item_id)
        if it is None or it.state != "queued":
            return False
        del self.items[item_id]
        self.forget()
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
        it.state = "queued"
        g = self.groups[it.group]
        g.S = max(0, g.S - round(K / self.weight_of(it.group)))

    def drain(self) -> list[Hashable]:
        out = sorted(self.live("queued"), key=lambda i: (-i.prio, i.seq))
        for it in out:
            del self.items[it.id]
        self.forget()
        return [i.id for i in out]

    def pending(self, lane: Hashable) -> list[Hashable]:
        q = [i for i in self.live("queued") if i.lane == lane]
        return [i.id for i in sorted(q, key=lambda i: (-i.prio, i.seq))]

    def set_group_cap(self, group: Hashable, cap: int | None) -> None:
        if cap is None and group not in self.groups:
            return
        self.group(group).own_cap = cap
        self.forget()

    def set_group_weight(self, group: Hashable, w: float | None) -> None:
        if w is None and group not in self.groups:
            return
        self.group(group).own_weight = w
        self.forget()

    def set_cap(self, key: Hashable, cap: int | None) -> None:
        if cap is None:
            self.key_caps.pop(key, None)
        else:
            self.key_caps[key] = cap

    def group_stats(self) -> dict[Hashable, tuple[int, int, int, float, int | None]]:
        return {
            n: (
                self.queued_in("group", n),
                self.running_in("group", n),
                g.started,
                self.weight_of(n),
                self.cap_of(n),
            )
            for n, g in self.groups.items()
        }

    def lane_stats(self) -> dict[Hashable, tuple[Hashable, int, int, int]]:
        out: dict[Hashable, Hashable] = {}
        for it in self.items.values():
            out.setdefault(it.lane, it.group)
        return {
            lane: (
                group,
                self.queued_in("lane", lane),
                self.running_in("lane", lane),
                self.lane_started[lane],
            )
            for lane, group in out.items()
        }
