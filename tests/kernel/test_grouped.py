"""The grouped kernel against its brute-force reference (tests/kernel/grouped_reference.py).

Every operation goes to both; each answer, each pick, each `blocked_by` and every count must
agree, and the kernel's heaps stay bounded. A Hypothesis state machine shrinks failures; a
seeded long fuzz runs long sequences. With one group the kernel must pick exactly as the flat
`least_running` kernel with global priority does (the seed's order, unchanged for one tenant).
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tests.kernel.grouped_reference import GroupedReference
from yoke.errors import BadValue
from yoke.kernel import GroupedKernel, Item, ItemState, Kernel

GROUPS = ("a", "b", "c")
LANES = {"a1": "a", "a2": "a", "a3": "a", "b1": "b", "b2": "b", "c1": "c"}
KEYS = ("k1", "k2")
K = 1 << 32


def ident(x: object) -> object:
    if isinstance(x, Item):
        return x.id
    if isinstance(x, list):
        return [ident(i) for i in x]
    return x


class GroupedPair:
    def __init__(self, gcap: int | None = None, lane_cap: int | None = None,
                 group_cap: int | None = None) -> None:  # fmt: skip
        self.config: dict[str, Any] = {
            "global_cap": gcap,
            "lane_cap": lane_cap,
            "group_cap": group_cap,
        }
        self.k = GroupedKernel(**self.config)
        self.r = GroupedReference(gcap=gcap, lane_cap=lane_cap, default_cap=group_cap)
        self.log: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.out: list[object] = []
        self.next_id = 0
        self.pushed = self.done = self.cancelled = 0

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.k, name)(*args, **kwargs)
        self.log.append((name, args, kwargs))
        self.out.append(ident(result))
        return result

    def running_ids(self) -> list[Hashable]:
        return [i.id for i in self.r.live("running")]

    def push(self, lane: str, prio: int, keys: tuple[str, ...]) -> None:
        iid = self.next_id
        self.next_id += 1
        item = self.call("push", iid, lane, group=LANES[lane], priority=prio, keys=keys)
        self.r.push(iid, lane, LANES[lane], prio, keys)
        assert item.state is ItemState.QUEUED
        self.pushed += 1

    def offer(self, lane: str, prio: int, keys: tuple[str, ...]) -> None:
        iid = self.next_id
        self.next_id += 1
        item = self.call("offer", iid, lane, group=LANES[lane], priority=prio, keys=keys)
        started = self.r.offer(iid, lane, LANES[lane], prio, keys)
        assert (item.state is ItemState.RUNNING) == started, (item, started)
        self.pushed += 1

    def admit(self, lane: str, prio: int, keys: tuple[str, ...]) -> None:
        iid = self.next_id
        self.next_id += 1
        fits = not self.r.live("queued")
        if fits:
            probe = self.r.items.copy()
            self.r.push(iid, lane, LANES[lane], prio, keys)
            fits = self.r.blocker(self.r.items[iid]) is None
            self.r.items = probe
            self.r.forget()
        item = self.call("admit", iid, lane, group=LANES[lane], priority=prio, keys=keys)
        assert (item is not None) == fits
        if fits:
            assert self.r.offer(iid, lane, LANES[lane], prio, keys)
            self.pushed += 1
        self.r.seq = max(self.r.seq, iid + 1)

    def pop(self) -> None:
        r = self.r
        elig = r.eligible()
        a = self.call("pop_next")
        b = r.pop_next()
        assert ident(a) == b, (a, b)
        if a is None:
            return
        k = self.k
        if k.global_cap is not None:
            assert k.running <= k.global_cap
        cap = r.cap_of(LANES[a.lane])
        if cap is not None:
            assert r.running_in("group", LANES[a.lane]) <= cap
        if r.lane_cap is not None:
            assert r.running_in("lane", a.lane) <= r.lane_cap
        for key in a.keys:
            if key in r.key_caps:
                assert r.key_running(key) <= r.key_caps[key]
        assert a.priority == max(i.prio for i in elig)  # priority first, across groups

    def release(self, pick: int) -> None:
        ids = self.running_ids()
        if ids:
            iid = ids[pick % len(ids)]
            self.call("release", iid)
            self.r.release(iid)
            self.done += 1

    def requeue(self, pick: int) -> None:
        ids = self.running_ids()
        if ids:
            iid = ids[pick % len(ids)]
            item = self.call("requeue", iid)
            self.r.requeue(iid)
            assert item.state is ItemState.QUEUED

    def cancel(self, pick: int) -> None:
        iid = pick % (self.next_id + 1)
        got = self.call("cancel", iid)
        assert got == self.r.cancel(iid)
        assert self.call("cancel", iid) is False
        self.cancelled += got

    def reprioritize(self, pick: int, prio: int) -> None:
        iid = pick % (self.next_id + 1)
        assert self.call("reprioritize", iid, prio) == self.r.reprioritize(iid, prio)

    def blocked(self, pick: int) -> None:
        ids = list(self.r.items)
        if ids:
            iid = ids[pick % len(ids)]
            it = self.r.items[iid]
            want = self.r.blocker(it) if it.state == "queued" else None
            assert self.call("blocked_by", iid) == want

    def drain(self) -> None:
        got = self.call("drain")
        assert ident(got) == self.r.drain()
        self.cancelled += len(got)

    def pending(self, lane: str) -> None:
        assert ident(self.call("pending", lane)) == self.r.pending(lane)

    def set_group_cap(self, group: str, cap: int | None) -> None:
        self.call("set_group_cap", group, cap)
        self.r.set_group_cap(group, cap)

    def set_default_group_cap(self, cap: int | None) -> None:
        self.call("set_default_group_cap", cap)
        self.r.default_cap = cap

    def set_group_weight(self, group: str, w: float | None) -> None:
        self.call("set_group_weight", group, w)
        self.r.set_group_weight(group, w)

    def set_default_group_weight(self, w: float) -> None:
        self.call("set_default_group_weight", w)
        self.r.default_weight = w

    def set_lane_cap(self, cap: int | None) -> None:
        self.call("set_lane_cap", cap)
        self.r.lane_cap = cap

    def set_cap(self, key: str, cap: int | None) -> None:
        self.call("set_cap", key, cap)
        self.r.set_cap(key, cap)

    def set_global_cap(self, cap: int | None) -> None:
        self.call("set_global_cap", cap)
        self.r.gcap = cap

    def check(self) -> None:
        k, r = self.k, self.r
        queued, running = len(r.live("queued")), len(r.live("running"))
        assert (k.queued, k.running) == (queued, running)
        assert self.pushed == queued + running + self.done + self.cancelled
        got = {n: (s.queued, s.running, s.started, s.weight, s.cap) for n, s in k.groups().items()}
        assert got == r.group_stats()
        lanes = {
            n: (k.lane_group(n), s.queued, s.running, s.started) for n, s in k.stats().lanes.items()
        }
        assert lanes == r.lane_stats()
        for key in KEYS:
            ks = k._keys.get(key)
            assert (ks.running if ks else 0) == r.key_running(key)
        for name, size, live in k._heaps():
            assert size <= 2 * live + 64, (name, size, live)
        assert k._live == sum(1 for e in k._top if e[2].entry is e)
        for g in k._groups.values():
            assert g.nparked == sum(1 for e in g.heap if e[2].entry is e), g
            for sub in g.subs.values():
                assert sub.nparked > 0 or sub.entry is None, sub
                assert sub.nparked == sum(1 for e in sub.heap if e[2].entry is e), sub
        for ln in k._lanes.values():
            assert ln.nparked == sum(1 for e in ln.heap if e[2].entry is e), ln
            for c in ln.classes.values():
                assert c.n == sum(1 for e in c.heap if e[2]._entry is e)
                assert (c.entry is None) == (c.n == 0), c
        for ks in k._keys.values():
            assert ks.nparked == sum(1 for e in ks.heap if e[2].entry is e), ks

    def replay(self) -> None:
        k2 = GroupedKernel(**self.config)
        out = [ident(getattr(k2, name)(*a, **kw)) for name, a, kw in self.log]
        assert out == self.out


CAPS = st.sampled_from([None, 0, 1, 2])
SOME_CAPS = st.sampled_from([None, None, 1, 2, 3])
WEIGHTS = st.sampled_from([None, 0.5, 1.0, 2.0, 3.0])
PRIO = st.integers(0, 2)
KEYSETS = st.lists(st.sampled_from(KEYS), max_size=2, unique=True).map(tuple)
PICK = st.integers(0, 1000)
LANE = st.sampled_from(sorted(LANES))
GROUP = st.sampled_from(GROUPS)


class GroupedMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.p = GroupedPair()

    @initialize(
        gcap=st.sampled_from([None, 2, 3, 5]),
        lane_cap=SOME_CAPS,
        group_cap=SOME_CAPS,
        caps=st.fixed_dictionaries(dict.fromkeys(KEYS, CAPS)),
    )
    def init(self, gcap: int | None, lane_cap: int | None, group_cap: int | None,
             caps: dict[str, int | None]) -> None:  # fmt: skip
        self.p = GroupedPair(gcap, lane_cap, group_cap)
        for key, cap in caps.items():
            self.p.set_cap(key, cap)

    @rule(lane=LANE, prio=PRIO, keys=KEYSETS)
    def push(self, lane: str, prio: int, keys: tuple[str, ...]) -> None:
        self.p.push(lane, prio, keys)

    @rule(lane=LANE, prio=PRIO, keys=KEYSETS)
    def offer(self, lane: str, prio: int, keys: tuple[str, ...]) -> None:
        self.p.offer(lane, prio, keys)

    @rule(lane=LANE, prio=PRIO, keys=KEYSETS)
    def admit(self, lane: str, prio: int, keys: tuple[str, ...]) -> None:
        self.p.admit(lane, prio, keys)

    @rule()
    def pop(self) -> None:
        self.p.pop()

    @rule()
    def pop_twice(self) -> None:
        self.p.pop()
        self.p.pop()

    @rule(pick=PICK)
    def release(self, pick: int) -> None:
        self.p.release(pick)

    @rule(pick=PICK)
    def requeue(self, pick: int) -> None:
        self.p.requeue(pick)

    @rule(pick=PICK)
    def cancel(self, pick: int) -> None:
        self.p.cancel(pick)

    @rule(pick=PICK, prio=PRIO)
    def reprioritize(self, pick: int, prio: int) -> None:
        self.p.reprioritize(pick, prio)

    @rule(pick=PICK)
    def blocked(self, pick: int) -> None:
        self.p.blocked(pick)

    @rule(lane=LANE)
    def pending(self, lane: str) -> None:
        self.p.pending(lane)

    @rule()
    def drain(self) -> None:
        self.p.drain()

    @rule(group=GROUP, cap=SOME_CAPS)
    def set_group_cap(self, group: str, cap: int | None) -> None:
        self.p.set_group_cap(group, cap)

    @rule(cap=SOME_CAPS)
    def set_default_group_cap(self, cap: int | None) -> None:
        self.p.set_default_group_cap(cap)

    @rule(group=GROUP, w=WEIGHTS)
    def set_group_weight(self, group: str, w: float | None) -> None:
        self.p.set_group_weight(group, w)

    @rule(w=st.sampled_from([0.5, 1.0, 2.0]))
    def set_default_group_weight(self, w: float) -> None:
        self.p.set_default_group_weight(w)

    @rule(cap=SOME_CAPS)
    def set_lane_cap(self, cap: int | None) -> None:
        self.p.set_lane_cap(cap)

    @rule(key=st.sampled_from(KEYS), cap=CAPS)
    def set_cap(self, key: str, cap: int | None) -> None:
        self.p.set_cap(key, cap)

    @rule(cap=st.sampled_from([None, 1, 2, 4]))
    def set_global_cap(self, cap: int | None) -> None:
        self.p.set_global_cap(cap)

    @invariant()
    def consistent(self) -> None:
        self.p.check()

    def teardown(self) -> None:
        self.p.replay()


GroupedMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestGroupedMachine = GroupedMachine.TestCase


@pytest.mark.parametrize("seed", range(6))
def test_a_long_random_run_matches_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    p = GroupedPair(rng.choice([None, 3, 6]), rng.choice([None, 1, 2]), rng.choice([None, 2, 4]))
    for key in KEYS:
        p.set_cap(key, rng.choice([None, 1, 2, 3]))
    lanes = sorted(LANES)
    for step in range(2000):
        op = rng.random()
        keys = tuple(k for k in KEYS if rng.random() < 0.3)
        if op < 0.30:
            p.push(rng.choice(lanes), rng.randrange(3), keys)
        elif op < 0.45:
            p.offer(rng.choice(lanes), rng.randrange(3), keys)
        elif op < 0.70:
            p.pop()
        elif op < 0.85:
            p.release(rng.randrange(1000))
        elif op < 0.88:
            p.requeue(rng.randrange(1000))
        elif op < 0.92:
            p.cancel(rng.randrange(1000))
        elif op < 0.95:
            p.reprioritize(rng.randrange(1000), rng.randrange(3))
        elif op < 0.97:
            p.set_group_weight(rng.choice(GROUPS), rng.choice([None, 0.5, 2.0, 3.0]))
        elif op < 0.99:
            p.set_group_cap(rng.choice(GROUPS), rng.choice([None, 1, 2, 3]))
        else:
            p.blocked(rng.randrange(1000))
        if step % 50 == 0:
            p.check()
    p.check()
    p.replay()


@pytest.mark.parametrize("seed", range(4))
def test_one_group_picks_exactly_as_the_seed_order(seed: int) -> None:
    """One tenant: the same picks as the flat admission kernel (least_running, global
    priority), through pushes, picks, releases, cancels and priority changes."""
    rng = random.Random(seed)
    flat = Kernel(policy="least_running", priority_scope="global", global_cap=4)
    grouped = GroupedKernel(global_cap=4, lane_cap=2)
    for lane in ("s1", "s2", "s3", "s4"):
        flat.set_lane_cap(lane, 2)
    running: list[Hashable] = []
    for iid in range(2000):
        op = rng.random()
        if op < 0.4:
            lane = rng.choice(("s1", "s2", "s3", "s4"))
            prio = rng.randrange(2)
            flat.push(iid, lane, priority=prio, keys=("w",))
            grouped.push(iid, lane, group="t", priority=prio, keys=("w",))
        elif op < 0.7:
            a, b = flat.pop_next(), grouped.pop_next()
            assert ident(a) == ident(b)
            if a is not None:
                running.append(a.id)
        elif op < 0.9 and running:
            done = running.pop(rng.randrange(len(running)))
            flat.release(done)
            grouped.release(done)
        else:
            pick = rng.randrange(iid + 1)
            assert flat.cancel(pick) == grouped.cancel(pick)


def test_a_group_spreading_its_work_over_many_lanes_gets_no_more_than_its_share() -> None:
    """The session-splitting flood: tenant evil queues 300 starts in 300 sessions, then acme
    queues 20 in one. With 4 slots, acme's starts are granted about one in every two grants
    (the groups alternate), not after all 300 of evil's."""
    k = GroupedKernel(global_cap=4)
    for i in range(300):
        k.push(f"evil-{i}", f"evil/s{i}", group="evil")
    for i in range(20):
        k.push(f"acme-{i}", "acme", group="acme")
    order: list[str] = []
    running: list[str] = []
    while len(order) < 320:
        while (item := k.pop_next()) is not None:
            order.append(str(item.id))
            running.append(str(item.id))
        k.release(running.pop(0))
    acme_at = [n for n, iid in enumerate(order) if iid.startswith("acme")]
    assert acme_at[-1] < 45, acme_at  # all 20 within the first 45 grants


def test_weights_share_the_grants_three_to_one() -> None:
    """Two backlogged groups weighted 3:1 share the slots 3:1 (within one grant per round)."""
    k = GroupedKernel(global_cap=8)
    k.set_group_weight("gold", 3.0)
    for i in range(2000):
        k.push(("g", i), f"gold/{i % 7}", group="gold")
        k.push(("b", i), f"bronze/{i % 5}", group="bronze")
    running: list[Hashable] = []
    for _ in range(8):
        item = k.pop_next()
        assert item is not None
        running.append(item.id)
    snapshots = []
    for _ in range(400):
        k.release(running.pop(0))
        item = k.pop_next()
        assert item is not None
        running.append(item.id)
        gold = sum(1 for r in running if isinstance(r, tuple) and r[0] == "g")
        snapshots.append(gold)
    assert all(5 <= s <= 7 for s in snapshots[10:]), snapshots


def test_ties_between_groups_go_to_the_one_served_least_recently() -> None:
    """One flooding group and five light ones, every start ending before the next pick (so
    every group sits at 0 running): the flood gets one grant in six, not one in two."""
    k = GroupedKernel(global_cap=1)
    for i in range(600):
        k.push(f"flood-{i}", "flood", group="flood")
    for t in range(5):
        for i in range(20):
            k.push(f"light{t}-{i}", f"light{t}", group=f"light{t}")
    picks = []
    for _ in range(60):
        item = k.pop_next()
        assert item is not None
        picks.append(str(item.id).split("-")[0])
        k.release(item.id)
    assert picks.count("flood") == 10, picks


def test_a_capped_group_does_not_hold_back_the_others() -> None:
    k = GroupedKernel(global_cap=10)
    k.set_group_cap("evil", 1)
    for i in range(50):
        k.push(("evil", i), f"evil/{i}", group="evil")
    for i in range(5):
        k.push(("acme", i), "acme", group="acme")
    picked = [k.pop_next() for _ in range(6)]
    assert [ident(p) for p in picked].count(("evil", 0)) == 1
    assert sum(1 for p in picked if p is not None and ident(p) != ("evil", 0)) == 5
    assert k.pop_next() is None
    assert k.blocked_by(("evil", 1)) == ("group", "evil")


def test_a_lane_belongs_to_one_group() -> None:
    k = GroupedKernel()
    k.push(1, "s", group="a")
    with pytest.raises(BadValue):
        k.push(2, "s", group="b")
    assert k.queued == 1


def test_a_start_at_once_into_a_class_with_stale_entries_starts_that_item() -> None:
    """A re-prioritised item leaves a stale entry in its class heap; once it runs, an item
    offered into the same class with nothing queued starts at once, and the class heap still
    holds the next item pushed into it."""
    k = GroupedKernel(global_cap=1)
    k.push("a", "s", group="t", priority=0)
    assert k.reprioritize("a", 5)
    assert ident(k.pop_next()) == "a"
    k.set_global_cap(None)
    b = k.offer("b", "s", group="t")
    assert b.state is ItemState.RUNNING
    k.set_global_cap(2)
    k.push("c", "s", group="t")
    assert k.pop_next() is None  # the cap of 2 is held by a and b
    k.release("a")
    assert ident(k.pop_next()) == "c"
