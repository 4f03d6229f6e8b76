"""Plain unit tests: argument errors, pinned semantics, and the pitfalls of docs/kernel.md."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.kernel.harness import CONFIGS, KEYS, LANES
from yoke.errors import BadType, BadValue, InvalidArgument
from yoke.kernel import ItemState, Kernel, KernelStats, LaneStats, Policy, PriorityScope

# ---------------------------------------------------------------- argument errors


@pytest.mark.parametrize(
    ("kwargs", "exc", "words"),
    [
        ({"policy": "wfq"}, BadValue, "unknown policy"),
        ({"policy": 3}, BadType, "policy must be a str"),
        ({"priority_scope": "band"}, BadValue, "unknown priority_scope"),
        ({"global_cap": -1}, BadValue, "global_cap must be >= 0"),
        ({"global_cap": 1.5}, BadType, "global_cap must be an int"),
        ({"global_cap": True}, BadType, "global_cap must be an int"),
        ({"credit": -1}, BadValue, "credit must be >= 0"),
        ({"default_weight": 0}, BadValue, "default_weight must be a finite number >= 0.001"),
        ({"default_weight": "1"}, BadType, "default_weight must be a real number"),
    ],
)
def test_constructor_errors(kwargs: dict[str, Any], exc: type[Exception], words: str) -> None:
    with pytest.raises(exc, match=words):
        Kernel(**kwargs)


def test_argument_errors_are_typed_and_change_nothing() -> None:
    k: Any = Kernel()  # Any: these calls break the signatures on purpose
    k.push(1, "a")
    cases: list[tuple[Any, type[Exception], str]] = [
        (lambda: k.push(1, "a"), BadValue, "already queued or running"),
        (lambda: k.push(2, "a", priority=1.0), BadType, "priority must be an int"),
        (lambda: k.push(2, "a", priority=True), BadType, "priority must be an int"),
        (lambda: k.push(2, ["unhashable"]), BadType, "lane .* is not hashable"),
        (lambda: k.push(2, "a", keys=[["x"]]), BadType, "not hashable"),
        (lambda: k.push(2, "a", keys="k1"), BadType, "not a single str"),
        (lambda: k.push(2, "a", keys=[("lane", "b")]), BadValue, "another lane's cap"),
        (lambda: k.push(2, "a", seq="3"), BadType, "seq must be an int"),
        (lambda: k.set_weight("a", 0), BadValue, ">= 0.001"),
        (lambda: k.set_weight("a", -2.0), BadValue, ">= 0.001"),
        (lambda: k.set_weight("a", float("nan")), BadValue, "finite"),
        (lambda: k.set_weight("a", "2"), BadType, "real number"),
        (lambda: k.set_weight("a", True), BadType, "real number"),
        (lambda: k.set_cap("k", -1), BadValue, "cap must be >= 0"),
        (lambda: k.set_cap("k", 2.0), BadType, "cap must be an int"),
        (lambda: k.set_lane_cap("a", -3), BadValue, "lane cap must be >= 0"),
        (lambda: k.set_global_cap("4"), BadType, "global_cap must be an int"),
        (lambda: k.release(1), BadValue, "not RUNNING"),
        (lambda: k.release(99), BadValue, "no such queued or running item"),
        (lambda: k.requeue(1), BadValue, "not RUNNING"),
        (lambda: k.claim(99), BadValue, "no such"),
        (lambda: k.reprioritize(1, "high"), BadType, "priority must be an int"),
    ]
    for call, exc, words in cases:
        with pytest.raises(exc, match=words):
            call()
    with pytest.raises(InvalidArgument):  # the family root, and a ValueError as Python expects
        k.set_weight("a", 0)
    with pytest.raises(ValueError, match="weight"):
        k.set_weight("a", 0)
    assert (k.queued, k.running, k.weight("a")) == (1, 0, 1.0)


def test_cancel_and_reprioritize_of_unknown_or_running_return_false() -> None:
    k = Kernel()
    k.push(1, "a")
    assert k.cancel(42) is False
    assert k.reprioritize(42, 3) is False
    assert k.pop_next() is not None
    assert k.cancel(1) is False
    assert k.reprioritize(1, 3) is False
    assert k.claim(1) is None  # running: not claimable


# ---------------------------------------------------------------- semantics


def test_cap_zero_holds_everything_and_lowering_never_preempts() -> None:
    k = Kernel(global_cap=0)
    k.push(1, "a")
    assert k.pop_next() is None
    assert k.blocked_by(1) == "global"
    k.set_global_cap(None)
    k.push(2, "a")
    k.push(3, "a")
    assert [k.pop_next().id for _ in range(2)] == [1, 2]  # type: ignore[union-attr]
    k.set_lane_cap("a", 1)  # below running=2: nothing is preempted
    assert k.running == 2
    assert k.pop_next() is None
    assert k.blocked_by(3) == ("lane", "a")
    k.release(1)
    assert k.pop_next() is None  # still 1 running == cap
    k.release(2)
    assert k.pop_next().id == 3  # type: ignore[union-attr]


def test_no_head_of_line_blocking_across_keys() -> None:
    k = Kernel(policy="fifo")
    k.set_cap("w1", 1)
    k.push(1, "a", keys=["w1"])
    k.push(2, "a", keys=["w1"])
    k.push(3, "a", keys=["w2"])
    assert k.pop_next().id == 1  # type: ignore[union-attr]
    assert k.blocked_by(2) == "w1"
    assert k.pop_next().id == 3  # type: ignore[union-attr]  # 2 is blocked, 3 is not held back
    assert k.pop_next() is None
    k.release(1)
    assert k.pop_next().id == 2  # type: ignore[union-attr]


def test_offer_fast_path_and_counting_mode() -> None:
    k = Kernel(policy="least_running", priority_scope="global")
    a = k.offer("x", "s1", keys=["wf"])
    assert a.state is ItemState.RUNNING
    assert k._top == []  # the fast path never touched a heap
    k.offer("y", "s1", keys=["wf"])
    # a cap enabled later sees exact counts (I13): 2 running under "wf"
    k.set_cap("wf", 2)
    c = k.offer("z", "s2", keys=["wf"])
    assert c.state is ItemState.QUEUED
    assert k.blocked_by("z") == "wf"
    k.release("x")
    assert k.pop_next() is c


def test_requeue_keeps_place_and_started_counts() -> None:
    k = Kernel(policy="fifo")
    for i in range(3):
        k.push(i, "a")
    first = k.pop_next()
    assert first is not None and first.id == 0
    k.requeue(0)
    assert [i.id for i in k.pending("a")] == [0, 1, 2]
    assert k.pop_next() is first
    assert k.lane_stats("a") == LaneStats(queued=2, running=1, started=2, weight=1.0)


def test_lanes_are_forgotten_when_idle_and_default() -> None:
    k = Kernel()
    k.push(1, "a")
    k.set_weight("b", 2.0)
    k.set_lane_cap("c", 3)
    assert set(k.stats().lanes) == {"a", "b", "c"}
    k.cancel(1)
    k.set_weight("b", 1.0)
    k.set_lane_cap("c", None)
    assert k.stats() == KernelStats(queued=0, running=0, lanes={})
    assert k._lanes == {} and k._keys == {}
    assert k.lane_stats("a") == LaneStats(queued=0, running=0, started=0, weight=1.0)


def test_pending_claim_and_drain_order() -> None:
    k = Kernel(policy="fifo", global_cap=1)
    k.push(1, "a", priority=0)
    k.push(2, "a", priority=5)
    k.push(3, "b", priority=5)
    k.push(4, "a", priority=0)
    assert [i.id for i in k.pending("a")] == [2, 1, 4]
    assert k.claim(4) is not None
    assert k.claim(1) is None  # global cap reached
    drained = k.drain()
    assert [i.id for i in drained] == [2, 3, 1]
    assert all(i.state is ItemState.CANCELLED for i in drained)
    assert (k.queued, k.running) == (0, 1)


def test_repr_and_stats_show_counts() -> None:
    k = Kernel(policy=Policy.ROTATION, priority_scope=PriorityScope.GLOBAL, global_cap=3)
    k.push(1, "a")
    k.push(2, "b")
    k.pop_next()
    assert repr(k) == (
        "Kernel(policy=rotation, scope=global, queued=1, running=1, lanes=2, global_cap=3)"
    )
    assert repr(k.stats()) == "KernelStats(queued=1, running=1, lanes=2)"
    assert "state=QUEUED" in repr(k.get(2))
    assert k.get(99) is None


def test_rotation_rounds_fractional_weights() -> None:
    k = Kernel(policy="rotation")
    k.set_weight("a", 2.4)  # quantum round(2.4) = 2
    for i in range(6):
        k.push(f"a{i}", "a")
        k.push(f"b{i}", "b")
    order = [str(k.pop_next().lane) for _ in range(9)]  # type: ignore[union-attr]
    assert "".join(order) == "aabaabaab"


# ---------------------------------------------------------------- pitfalls (docs/kernel.md)


def test_pitfall_4_equal_keys_of_a_class_and_a_proxy_never_compare_nodes() -> None:
    # fifo keys are (-prio, seq): a class parked on "k" and the proxy of "k" carry the very same
    # key in the top heap; the unique node id must break the tie.
    k = Kernel(policy="fifo")
    k.set_cap("k", 1)
    k.push(1, "a", keys=["k"])
    k.push(2, "a", keys=["k"])
    k.push(3, "b", keys=["k"])
    assert k.pop_next().id == 1  # type: ignore[union-attr]
    assert k.pop_next() is None  # 2 and 3 parked on "k"
    k.release(1)
    k.reprioritize(2, 0)
    k.push(4, "a", keys=["k"])
    assert [k.pop_next().id] == [2]  # type: ignore[union-attr]
    nids = [e[1] for e in k._top]
    assert len({(e[0], e[1]) for e in k._top}) == len(nids)


def test_pitfall_1_least_running_lane_scope_keeps_in_lane_order() -> None:
    # Key (running, -prio, seq): parking a high-priority head must not let an older low one jump.
    k = Kernel(policy="least_running")
    k.set_cap("k", 0)
    k.push(1, "a", priority=0)
    k.push(2, "a", priority=5, keys=["k"])
    k.push(3, "b", priority=1)
    got = [k.pop_next().id for _ in range(2)]  # type: ignore[union-attr]
    assert got == [3, 1]  # equal running: b's head (-1) beats a's visible head (0)


def test_pitfall_2_release_wakes_one_proxy_not_a_crowd() -> None:
    k = Kernel()
    k.set_cap("hot", 1)
    for i in range(200):
        k.push(i, f"lane{i}", keys=["hot"])
    k.pop_next()
    assert k.pop_next() is None  # every other class is now parked on "hot"
    before = len(k._top)
    k.release(0)
    assert len(k._top) == before + 1


def test_pitfall_5_v_per_band_keeps_lower_band_fair() -> None:
    k = Kernel(priority_scope="global")
    for i in range(20):
        k.push(f"hi{i}", "a", priority=5)
    for i in range(4):
        k.push(f"b{i}", "b")
        k.push(f"c{i}", "c")
    got = [k.pop_next().lane for _ in range(28)]  # type: ignore[union-attr]
    assert got[:20] == ["a"] * 20
    assert got[20:] == ["b", "c"] * 4


def test_pitfall_6_no_credit_hoarding_after_idle() -> None:
    k = Kernel()
    k.push("b0", "b")
    k.set_weight("b", 1.0)
    for i in range(200):
        k.push(f"a{i}", "a")
    for _ in range(100):
        k.release(k.pop_next().id)  # type: ignore[union-attr]
    for i in range(10):
        k.push(f"b{i + 1}", "b")
    run = [str(k.pop_next().lane) for _ in range(10)]  # type: ignore[union-attr]
    assert max(len(s) for s in "".join(run).split("a")) <= 1  # b alternates, no burst


def test_compaction_bounds_garbage_under_cancel_churn() -> None:
    k = Kernel()
    k.set_cap("k", 0)
    for i in range(5000):
        k.push(i, "a", keys=["k"] if i % 2 else [])
    for i in range(0, 5000, 2):
        k.cancel(i)
    for name, size, live in k._heaps():
        assert size <= 2 * live + 64, name


def test_admit_starts_only_what_offer_would_start_at_once() -> None:
    k = Kernel(policy="sfq", global_cap=2)
    k.set_lane_cap("capped", 1)
    k.set_cap("wf", 1)
    first = k.admit("a", "s1")
    assert first is not None and first.state is ItemState.RUNNING
    assert k.admit("b", "capped") is not None
    assert k.admit("c", "s1") is None  # the global cap is full
    k.release("a")
    assert k.admit("d", "capped") is None  # the lane cap is full
    assert k.admit("e", "s2", keys=["wf"]) is not None
    assert k.admit("f", "s3", keys=["wf"]) is None  # a key cap is full
    # A refused admit left no lane behind, and no item: the ids are free for an offer.
    assert set(k.stats().lanes) == {"capped", "s2"}
    assert k.offer("f", "s3", keys=["wf"]).state is ItemState.QUEUED
    assert k.admit("g", "s4") is None  # something is queued: it goes first
    with pytest.raises(BadValue, match="already queued or running"):
        k.admit("f", "s3")


@settings(max_examples=150, deadline=None)
@given(
    config=st.sampled_from(CONFIGS),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["arrive", "release", "pop", "cap"]),
            st.sampled_from(LANES),
            st.lists(st.sampled_from(KEYS), max_size=2, unique=True),
            st.integers(0, 3),
        ),
        max_size=60,
    ),
)
def test_admit_then_offer_behaves_as_offer(
    config: tuple[str, str], ops: list[tuple[str, str, list[str], int]]
) -> None:
    """A kernel whose arrivals try `admit` first (and `offer` when it refuses) makes exactly
    the decisions, in the same order, of one that only offers."""
    policy, scope = config
    twins = [Kernel(policy=policy, priority_scope=scope, global_cap=3) for _ in range(2)]
    admitting, offering = twins
    for n, (op, lane, keys, x) in enumerate(ops):
        if op == "arrive":
            b = offering.offer(n, lane, priority=x, keys=keys)
            a = admitting.admit(n, lane, priority=x, keys=keys)
            assert (a is not None) == (b.state is ItemState.RUNNING)
            if a is None:
                admitting.offer(n, lane, priority=x, keys=keys)
        elif op == "release":
            running = [i for i, item in offering._items.items() if item.state.name == "RUNNING"]
            if running:
                for k in twins:
                    k.release(running[x % len(running)])
        elif op == "pop":
            picked = [k.pop_next() for k in twins]
            assert [p and p.id for p in picked] == [picked[1] and picked[1].id] * 2
        else:
            for k in twins:
                k.set_cap(keys[0] if keys else ("lane", lane), x)
        assert admitting.stats() == offering.stats()
