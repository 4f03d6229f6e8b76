"""Differential harness: drive a `Kernel` and the `Reference` with the same operations.

Every operation is applied to both and their answers compared (I1, I3, I5); `check` asserts the
state invariants (I4 counters, I14 bounded garbage, the kernel's own bookkeeping); `replay`
re-runs the recorded operations on a fresh kernel (I12). Used by the Hypothesis state machine and
by the seeded long fuzz, so both test exactly the same things.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from tests.kernel.reference import Reference
from yoke.kernel import Item, ItemState, Kernel

LANES = ("a", "b", "c", "d")
KEYS = ("k1", "k2", "k3")
POLICIES = ("sfq", "rotation", "least_running", "fifo")
SCOPES = ("lane", "global")
CONFIGS = [(p, s) for p in POLICIES for s in SCOPES]
K = 1 << 32


def ident(x: object) -> object:
    if isinstance(x, Item):
        return x.id
    if isinstance(x, list):
        return [ident(i) for i in x]
    return x


class Pair:
    def __init__(self, policy: str, scope: str, gcap: int | None = None, credit: int = 0) -> None:
        self.config: dict[str, Any] = {
            "policy": policy,
            "priority_scope": scope,
            "global_cap": gcap,
            "credit": credit,
        }
        self.k = Kernel(policy=policy, priority_scope=scope, global_cap=gcap, credit=credit)
        self.r = Reference(policy=policy, scope=scope, gcap=gcap, credit=credit)
        self.log: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.out: list[object] = []
        self.next_id = 0
        self.pushed = self.done = self.cancelled = 0

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.k, name)(*args, **kwargs)
        self.log.append((name, args, kwargs))
        self.out.append(ident(result))
        return result

    # ---- helpers to pick ids
    def running_ids(self) -> list[Hashable]:
        return [i.id for i in self.r.live("running")]

    def live_ids(self) -> list[Hashable]:
        return list(self.r.items)

    # ---- operations
    def push(self, lane: str, prio: int, keys: tuple[str, ...]) -> None:
        iid = self.next_id
        self.next_id += 1
        item = self.call("push", iid, lane, priority=prio, keys=keys)
        self.r.push(iid, lane, prio, keys)
        assert item.state is ItemState.QUEUED
        self.pushed += 1

    def offer(self, lane: str, prio: int, keys: tuple[str, ...]) -> None:
        iid = self.next_id
        self.next_id += 1
        item = self.call("offer", iid, lane, priority=prio, keys=keys)
        started = self.r.offer(iid, lane, prio, keys)
        assert (item.state is ItemState.RUNNING) == started, (item, started)
        self.pushed += 1

    def pop(self) -> None:
        r = self.r
        elig = r.eligible()
        loads = {n: r.lane_count(n, "running") * K // ln.w for n, ln in r.lanes.items()}
        a = self.call("pop_next")
        b = r.pop_next()
        assert ident(a) == b, (a, b)
        if a is None:
            return
        assert a.state is ItemState.RUNNING
        # I2: caps hold after every dispatch (a dispatch needs running < cap before it).
        k = self.k
        if k.global_cap is not None:
            assert k.running <= k.global_cap
        lcap = r.lanes[a.lane].cap
        if lcap is not None:
            assert k.lane_stats(a.lane).running <= lcap
        for key in a.keys:
            if key in r.key_caps:
                assert r.key_running(key) <= r.key_caps[key]
        # I6: priority.
        if r.scope == "global":
            assert a.priority == max(i.prio for i in elig)
        else:
            mine = [i for i in elig if i.lane == a.lane]
            assert (-a.priority, a.seq) == min((-i.prio, i.seq) for i in mine)
        # I10: the admission order picks the fewest running per weight in the top band, oldest
        # on a tie.
        if r.policy == "least_running" and r.scope == "global":
            band = [i for i in elig if i.prio == a.priority]
            assert loads[a.lane] == min(loads[i.lane] for i in band)
            zero = [i for i in band if loads[i.lane] == 0]
            if loads[a.lane] == 0:
                assert a.seq == min(i.seq for i in zero)

    def release(self, pick: int) -> None:
        ids = self.running_ids()
        if not ids:
            return
        iid = ids[pick % len(ids)]
        self.call("release", iid)
        self.r.release(iid)
        self.done += 1

    def requeue(self, pick: int) -> None:
        ids = self.running_ids()
        if not ids:
            return
        iid = ids[pick % len(ids)]
        item = self.call("requeue", iid)
        self.r.requeue(iid)
        assert item.state is ItemState.QUEUED

    def cancel(self, pick: int) -> None:
        iid = pick % (self.next_id + 1)  # may be done, cancelled, running or never pushed
        got = self.call("cancel", iid)
        assert got == self.r.cancel(iid)
        assert self.call("cancel", iid) is False  # I3: idempotent
        self.cancelled += got

    def reprioritize(self, pick: int, prio: int) -> None:
        iid = pick % (self.next_id + 1)
        assert self.call("reprioritize", iid, prio) == self.r.reprioritize(iid, prio)

    def claim(self, pick: int) -> None:
        ids = self.live_ids()
        if not ids:
            return
        iid = ids[pick % len(ids)]
        assert self.call("blocked_by", iid) == (
            self.r.blocker(self.r.items[iid]) if self.r.items[iid].state == "queued" else None
        )
        got = self.call("claim", iid)
        assert (got is not None) == self.r.claim(iid)

    def drain(self) -> None:
        got = self.call("drain")
        assert ident(got) == self.r.drain()
        self.cancelled += len(got)

    def pending(self, lane: str) -> None:
        assert ident(self.call("pending", lane)) == self.r.pending(lane)

    def set_weight(self, lane: str, w: float) -> None:
        self.call("set_weight", lane, w)
        self.r.set_weight(lane, w)

    def set_cap(self, key: str, cap: int | None) -> None:
        self.call("set_cap", key, cap)
        self.r.set_cap(key, cap)

    def set_lane_cap(self, lane: str, cap: int | None) -> None:
        self.call("set_lane_cap", lane, cap)
        self.r.set_lane_cap(lane, cap)

    def set_global_cap(self, cap: int | None) -> None:
        self.call("set_global_cap", cap)
        self.r.gcap = cap

    # ---- invariants
    def check(self) -> None:
        k, r = self.k, self.r
        queued, running = len(r.live("queued")), len(r.live("running"))
        assert (k.queued, k.running) == (queued, running)
        assert self.pushed == queued + running + self.done + self.cancelled  # I4
        st = k.stats()
        assert {n: (s.queued, s.running, s.started, s.weight) for n, s in st.lanes.items()} == (
            r.lane_stats()
        )
        for key in KEYS:  # I13: counters exact whether or not a cap is set
            ks = k._keys.get(key)
            assert (ks.running if ks else 0) == r.key_running(key)
            assert (ks.cap if ks else None) == r.key_caps.get(key)
        for name, size, live in k._heaps():  # I14
            assert size <= 2 * live + 64, (name, size, live)
        top_live = sum(1 for e in k._top if e[2].entry is e)
        assert top_live == k._h.live
        for ln in k._lanes.values():
            for c in ln.classes.values():
                assert c.n == sum(1 for e in c.heap if e[2]._entry is e)
                assert (c.entry is None) == (c.n == 0)
        for ks in [*k._keys.values(), *k._lanes.values()]:
            assert ks.nparked == sum(1 for e in ks.heap if e[2].entry is e)

    def replay(self) -> None:
        """I12: the same operations on a fresh kernel give the same answers."""
        k2 = Kernel(**self.config)
        out = [ident(getattr(k2, name)(*a, **kw)) for name, a, kw in self.log]
        assert out == self.out
