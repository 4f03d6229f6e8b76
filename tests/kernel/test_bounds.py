"""I7-I9 (SFQ share, newcomer latency, no hoarding) and I11 (rotation = a materialized ring)."""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from yoke.kernel import Kernel

WEIGHT = st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0, 5.0])
EPS = 1e-9


def dispatch_sequence(k: Kernel, n: int) -> list[Any]:
    out = []
    for _ in range(n):
        item = k.pop_next()
        assert item is not None
        k.release(item.id)
        out.append(item.lane)
    return out


def backlog(k: Kernel, lane: Hashable, n: int) -> None:
    for i in range(n):
        k.push((lane, i, object()), lane)


def worst_pair_gap(seq: list[Any], w: dict[str, float], start: int = 0) -> float:
    """max over windows [a, b) with a >= start, over pairs, of |n_i/w_i - n_j/w_j| - bound."""
    lanes = list(w)
    prefix = {ln: [0] for ln in lanes}
    for x in seq:
        for ln in lanes:
            prefix[ln].append(prefix[ln][-1] + (x == ln))
    worst = float("-inf")
    for a in range(start, len(seq)):
        for b in range(a + 1, len(seq) + 1):
            for i in lanes:
                for j in lanes:
                    if i < j:
                        gap = abs(
                            (prefix[i][b] - prefix[i][a]) / w[i]
                            - (prefix[j][b] - prefix[j][a]) / w[j]
                        )
                        worst = max(worst, gap - (1 / w[i] + 1 / w[j]))
    return worst


@settings(max_examples=60, deadline=None)
@given(weights=st.lists(WEIGHT, min_size=2, max_size=4), n=st.integers(10, 60))
def test_i7_sfq_share_bound(weights: list[float], n: int) -> None:
    k = Kernel()
    w = {f"l{i}": x for i, x in enumerate(weights)}
    for ln, x in w.items():
        k.set_weight(ln, x)
        backlog(k, ln, n + 1)  # all lanes stay backlogged for the whole run
    seq = dispatch_sequence(k, n)
    assert worst_pair_gap(seq, w) <= EPS


@settings(max_examples=80, deadline=None)
@given(
    weights=st.lists(WEIGHT, min_size=1, max_size=4),
    w_new=WEIGHT,
    warmup=st.integers(0, 40),
)
def test_i8_sfq_newcomer_latency(weights: list[float], w_new: float, warmup: int) -> None:
    k = Kernel()
    w = {f"l{i}": x for i, x in enumerate(weights)}
    for ln, x in w.items():
        k.set_weight(ln, x)
        backlog(k, ln, warmup + 100)
    dispatch_sequence(k, warmup)
    k.set_weight("new", w_new)
    k.push("newcomer", "new")
    bound = sum(int(x / w_new) + 1 for x in w.values())
    waited = 0
    while True:
        item = k.pop_next()
        assert item is not None
        k.release(item.id)
        if item.id == "newcomer":
            break
        waited += 1
    assert waited <= bound


@settings(max_examples=60, deadline=None)
@given(
    weights=st.lists(WEIGHT, min_size=1, max_size=3),
    w_back=WEIGHT,
    idle=st.integers(0, 60),
    credit=st.integers(0, 2),
    n=st.integers(5, 40),
)
def test_i9_no_credit_hoarding(
    weights: list[float], w_back: float, idle: int, credit: int, n: int
) -> None:
    k = Kernel(credit=credit)
    w = {f"l{i}": x for i, x in enumerate(weights)}
    for ln, x in w.items():
        k.set_weight(ln, x)
        backlog(k, ln, idle + n + 10)
    k.set_weight("back", w_back)  # a weighted lane stays known while idle, with its old tag
    k.push("first", "back")
    dispatch_sequence(k, idle)  # "back" is served once early, then idles
    backlog(k, "back", n + 1)
    seq = dispatch_sequence(k, n)
    all_w = {**w, "back": w_back}
    prefix = dict.fromkeys(all_w, 0)
    for x in seq:  # windows that start at the return: prefixes of `seq`
        prefix[x] += 1
        for j in w:
            gap = prefix["back"] / w_back - prefix[j] / w[j]
            assert gap <= 1 / w_back + 1 / w[j] + credit + EPS


class Ring:
    """The literal weighted rotation of the fair-scheduler specification: a ring of non-empty
    tenants, each served `weight` times per turn; an emptied tenant leaves the ring and its
    remaining turn is dropped."""

    def __init__(self) -> None:
        self.ring: deque[str] = deque()
        self.turn: dict[str, int] = {}
        self.queues: dict[str, list[tuple[int, int, int]]] = {}
        self.weights: dict[str, int] = {}

    def push(self, iid: int, lane: str, prio: int, seq: int) -> None:
        q = self.queues.setdefault(lane, [])
        if not q:
            self.ring.append(lane)
            self.turn[lane] = self.weights.get(lane, 1)
        q.append((-prio, seq, iid))
        q.sort()

    def cancel(self, iid: int) -> None:
        for lane, q in self.queues.items():
            for e in q:
                if e[2] == iid:
                    q.remove(e)
                    if not q:
                        self.ring.remove(lane)
                    return

    def pop(self) -> int | None:
        if not self.ring:
            return None
        lane = self.ring[0]
        _, _, iid = self.queues[lane].pop(0)
        self.turn[lane] -= 1
        if not self.queues[lane]:
            self.ring.popleft()
        elif self.turn[lane] == 0:
            self.ring.rotate(-1)
            self.turn[lane] = self.weights.get(lane, 1)
        return iid


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("push"), st.sampled_from("abcd"), st.integers(0, 2)),
            st.tuples(st.just("pop"), st.just(""), st.just(0)),
            st.tuples(st.just("cancel"), st.just(""), st.integers(0, 200)),
            st.tuples(st.just("weight"), st.sampled_from("abcd"), st.integers(1, 4)),
        ),
        max_size=120,
    )
)
def test_i11_rotation_equals_the_materialized_ring(ops: list[tuple[str, str, int]]) -> None:
    k = Kernel(policy="rotation")
    ring = Ring()
    n = 0
    for op, lane, x in ops:
        if op == "push":
            item = k.push(n, lane, priority=x)
            ring.push(n, lane, x, item.seq)
            n += 1
        elif op == "pop":
            got = k.pop_next()
            assert (got.id if got else None) == ring.pop()
            if got is not None:
                k.release(got.id)
        elif op == "cancel":
            if k.cancel(x):
                ring.cancel(x)
        else:
            k.set_weight(lane, float(x))
            ring.weights[lane] = x
