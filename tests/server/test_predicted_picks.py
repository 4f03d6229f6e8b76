"""The predicted picks (`server/picks.next_picks`) are the kernel's own picks.

A kernel is filled with random starts over tenants, sessions and priorities; the prediction of
the next k picks must equal what `pop_next` then gives, in order."""

from __future__ import annotations

import random

import pytest

from yoke.executions import Limits
from yoke.kernel import GroupedKernel
from yoke.server.picks import next_picks


def _fill(k: GroupedKernel, rng: random.Random, n: int) -> None:
    for i in range(n):
        tenant = f"t{rng.randrange(6)}"
        session = tenant if rng.random() < 0.3 else f"{tenant}/s{rng.randrange(8)}"
        k.push(f"x{i}", session, group=tenant, priority=rng.choice((0, 0, 0, 1)),
               keys=(("workflow", "w"),))  # fmt: skip


@pytest.mark.parametrize("seed", range(8))
def test_the_predicted_picks_are_the_kernels(seed: int) -> None:
    rng = random.Random(seed)
    k = GroupedKernel()
    _fill(k, rng, 300)
    for _ in range(rng.randrange(20)):  # some running, so loads and tags differ
        item = k.pop_next()
        assert item is not None
    predicted = [p.start_id for p in next_picks(k, Limits(), {}, visible=None, k=25)]
    actual = []
    for _ in range(25):
        item = k.pop_next()
        assert item is not None
        actual.append(str(item.id))
    assert predicted == actual


def test_a_tenant_below_the_first_k_sessions_is_predicted_when_its_turn_comes() -> None:
    """Tenant a has 100 sessions, each ahead of tenant b's one session by arrival; after a's
    first pick, b goes (a has one running), though b's session ranks 101st."""
    k = GroupedKernel()
    for i in range(100):
        k.push(f"a{i}", f"a/s{i}", group="a")
    k.push("b0", "b", group="b")
    predicted = [p.start_id for p in next_picks(k, Limits(), {}, visible=None, k=3)]
    assert predicted == ["a0", "b0", "a1"]
