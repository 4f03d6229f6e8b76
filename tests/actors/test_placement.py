"""The placement rule and the balancing decision (`yoke.actors.placement`), table-driven: pure
functions, no store."""

from __future__ import annotations

from collections import Counter

import pytest

from yoke.actors.placement import (
    Move,
    PlacementMode,
    place_rule,
    plan_moves,
    rendezvous,
    within,
)
from yoke.errors import BadValue
from yoke.store.actor_records import InstanceRef

B, T, C = PlacementMode.BALANCED, PlacementMode.TENANT, PlacementMode.CREATOR


def refs(n: int, tenant: str = "t") -> list[InstanceRef]:
    return [InstanceRef(tenant=tenant, actor="a", instance_id=f"i{k}") for k in range(n)]


def test_rendezvous_spreads_evenly_and_a_join_moves_only_what_the_newcomer_wins() -> None:
    three = ["w1", "w2", "w3"]
    place3 = place_rule(B, three, creator=None)
    before = {r: place3(r) for r in refs(300)}
    shares = Counter(before.values())
    assert set(shares) == set(three)
    assert all(abs(n / 300 - 1 / 3) <= 0.10 for n in shares.values()), shares
    after = {r: place_rule(B, [*three, "w4"], creator=None)(r) for r in refs(300)}
    moved = [r for r in before if before[r] != after[r]]
    assert all(after[r] == "w4" for r in moved)  # nothing moves between old workers
    assert 0.15 <= len(moved) / 300 <= 0.35, len(moved)
    # A worker that leaves: only its instances move, spread over the others.
    gone = {r: place_rule(B, ["w1", "w3"], creator=None)(r) for r in refs(300)}
    changed = [r for r in before if before[r] != gone[r]]
    assert all(before[r] == "w2" for r in changed)
    assert Counter(gone[r] for r in changed).keys() == {"w1", "w3"}


@pytest.mark.parametrize(
    ("mode", "live", "creator", "expect"),
    [
        (B, [], "w1", {None}),  # no live worker: unowned, the first worker up takes it
        (T, [], None, {None}),
        (C, ["w1", "w2"], "w9", {"w9"}),  # the creating worker, whatever is live
        (C, ["w1"], None, {None}),  # a process that runs no worker owns nothing
        (B, ["w1"], None, {"w1"}),
        (T, ["w1", "w2", "w3"], None, None),  # one worker per tenant (checked below)
    ],
)
def test_the_owner_of_a_new_instance(
    mode: PlacementMode, live: list[str], creator: str | None, expect: set[str | None] | None
) -> None:
    rule = place_rule(mode, live, creator=creator)
    owners = {rule(r) for r in refs(50)}
    if expect is not None:
        assert owners == expect
    else:
        for tenant in ("acme", "globex", "initech"):
            assert len({rule(r) for r in refs(40, tenant)}) == 1
        assert rule(refs(1, "acme")[0]) == rendezvous("acme", sorted(live))


def test_the_rule_does_not_depend_on_the_order_workers_are_listed_in() -> None:
    a = place_rule(B, ["w3", "w1", "w2"], creator=None)
    b = place_rule(B, ["w1", "w2", "w3", "w2"], creator=None)
    assert all(a(r) == b(r) for r in refs(100))


def test_placement_names_are_checked() -> None:
    assert PlacementMode.parse(" Tenant ") is T
    with pytest.raises(BadValue, match="balanced, tenant, creator"):
        PlacementMode.parse("random")


@pytest.mark.parametrize(
    ("counts", "tolerance", "ok"),
    [
        ({}, 0.1, True),
        ({"a": 100, "b": 100, "c": 100}, 0.0, True),
        ({"a": 110, "b": 95, "c": 95}, 0.1, True),  # fair 100, slack 10
        ({"a": 112, "b": 94, "c": 94}, 0.1, False),
        ({"a": 2, "b": 1, "c": 0}, 0.1, True),  # slack is at least one instance
        ({"a": 3, "b": 0}, 0.5, False),
    ],
)
def test_within_tolerance(counts: dict[str, int], tolerance: float, ok: bool) -> None:
    assert within(counts, tolerance) is ok


def _owned(rs: list[InstanceRef], owner: str) -> list[tuple[InstanceRef, str]]:
    return [(r, owner) for r in rs]


def _apply(counts: dict[str, int], moves: list[Move]) -> dict[str, int]:
    out = dict(counts)
    for m in moves:
        out[m.giver] -= 1
        out[m.taker] += 1
    return out


def test_a_join_moves_a_share_to_the_newcomer_from_every_other_worker() -> None:
    groups = {w: refs(100, tenant=w) for w in ("a", "b", "c")}
    counts = {"a": 100, "b": 100, "c": 100, "d": 0}
    cands = [p for w, rs in groups.items() for p in _owned(rs, w)]
    moves = plan_moves(
        mode=B, live=list(counts), owned=counts, candidates=cands, tolerance=0.1, budget=1000
    )
    after = _apply(counts, moves)
    assert within(after, 0.1), after
    assert {m.taker for m in moves} == {"d"}
    assert Counter(m.giver for m in moves).keys() == {"a", "b", "c"}
    assert len(moves) <= 75 + 8  # no churn beyond what the share needs
    assert len({m.ref for m in moves}) == len(moves)
    for m in moves:  # each moved instance was its giver's
        assert m.ref.tenant == m.giver


@pytest.mark.parametrize("budget", [0, 1, 10])
def test_a_step_moves_at_most_its_budget(budget: int) -> None:
    counts = {"a": 300, "b": 0}
    moves = plan_moves(
        mode=B,
        live=["a", "b"],
        owned=counts,
        candidates=_owned(refs(300), "a"),
        tolerance=0.1,
        budget=budget,
    )
    assert len(moves) == budget
    assert all(m == Move(ref=m.ref, giver="a", taker="b") for m in moves)


@pytest.mark.parametrize(
    ("mode", "live", "counts"),
    [
        (B, ["a", "b", "c"], {"a": 105, "b": 100, "c": 95}),  # within tolerance already
        (B, ["a"], {"a": 300}),  # nowhere to go
        (C, ["a", "b"], {"a": 300, "b": 0}),  # creator: nothing moves
        (B, ["a", "b"], {"a": 1, "b": 0}),  # one move would only swap who is over
    ],
)
def test_nothing_moves(mode: PlacementMode, live: list[str], counts: dict[str, int]) -> None:
    cands = [p for w in live for p in _owned(refs(counts[w], tenant=w), w)]
    assert (
        plan_moves(mode=mode, live=live, owned=counts, candidates=cands, tolerance=0.1, budget=50)
        == []
    )


def test_moves_go_where_the_hash_would_put_them_when_it_can() -> None:
    counts = {"a": 200, "b": 0}
    cands = _owned(refs(200), "a")
    moves = plan_moves(
        mode=B, live=["a", "b"], owned=counts, candidates=cands, tolerance=0.05, budget=50
    )
    rule = place_rule(B, ["a", "b"], creator=None)
    assert len(moves) == 50 and all(rule(m.ref) == "b" for m in moves)


def test_tenant_mode_gathers_each_tenant_on_its_worker() -> None:
    live = ["a", "b", "c"]
    cands = [(r, "a") for t in ("acme", "globex", "initech", "umbrella") for r in refs(5, t)]
    moves = plan_moves(
        mode=T, live=live, owned={"a": 20}, candidates=cands, tolerance=0.1, budget=100
    )
    home = {t: rendezvous(t, live) for t in ("acme", "globex", "initech", "umbrella")}
    assert {m.ref for m in moves} == {r for r, _ in cands if home[r.tenant] != "a"}
    assert all(m.taker == home[m.ref.tenant] for m in moves)
    capped = plan_moves(
        mode=T, live=live, owned={"a": 20}, candidates=cands, tolerance=0.1, budget=3
    )
    assert len(capped) == min(3, len(moves))


def test_balanced_counts_with_uneven_backlog_swap_heavy_for_light() -> None:
    a, b = refs(10, "a"), refs(10, "b")
    loads = {a[0]: 3000, a[1]: 2000, a[2]: 50}
    counts = {"a": 10, "b": 10}
    moves = plan_moves(
        mode=B,
        live=["a", "b"],
        owned=counts,
        candidates=[*_owned(a, "a"), *_owned(b, "b")],
        tolerance=0.1,
        budget=10,
        pending={"a": 5050, "b": 0},
        loads=loads,
    )
    # One swap: a's heaviest (3000) for one of b's empty instances; counts stay 10 and 10.
    assert len(moves) == 2, moves
    assert moves[0] == Move(ref=a[0], giver="a", taker="b")
    assert moves[1].giver == "b" and moves[1].taker == "a" and moves[1].ref in b
    assert _apply(counts, moves) == counts


@pytest.mark.parametrize(
    ("pending", "loads", "budget"),
    [
        ({"a": 5000, "b": 0}, {0: 5000}, 10),  # one instance holds it all: no swap narrows it
        ({"a": 90, "b": 0}, {0: 50, 1: 40}, 10),  # under the floor of 100 events
        ({"a": 3000, "b": 2800}, {0: 1000, 1: 1000}, 10),  # within tolerance
        ({"a": 5000, "b": 0}, {0: 2500, 1: 2500}, 1),  # a swap takes two moves
    ],
)
def test_no_swap(pending: dict[str, int], loads: dict[int, int], budget: int) -> None:
    a, b = refs(5, "a"), refs(5, "b")
    moves = plan_moves(
        mode=B,
        live=["a", "b"],
        owned={"a": 5, "b": 5},
        candidates=[*_owned(a, "a"), *_owned(b, "b")],
        tolerance=0.1,
        budget=budget,
        pending=pending,
        loads={a[k]: n for k, n in loads.items()},
    )
    assert moves == []
