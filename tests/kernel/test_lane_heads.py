"""`Kernel.lane_heads` and `Kernel.first_pending` (the reads a large-queue view uses) agree with
`stats()` and `pending()` after any mix of pushes, picks, releases, cancels and re-prioritises
(which leave stale heap entries behind), on every policy."""

from __future__ import annotations

import random

import pytest

from yoke.kernel import Kernel


@pytest.mark.parametrize("policy", ["sfq", "rotation", "least_running", "fifo"])
@pytest.mark.parametrize("seed", range(5))
def test_lane_heads_and_first_pending_match_stats_and_pending(policy: str, seed: int) -> None:
    rng = random.Random(seed)
    k = Kernel(policy=policy, priority_scope="global", global_cap=6)
    k.set_cap(("workflow", "w0"), 2)
    live: list[str] = []
    running: list[str] = []
    for n in range(600):
        op = rng.random()
        if op < 0.5 or not live:
            item_id = f"i{n}"
            k.push(
                item_id,
                lane=f"L{rng.randrange(12)}",
                priority=rng.randrange(3),
                keys=(("workflow", f"w{rng.randrange(3)}"),),
            )
            live.append(item_id)
        elif op < 0.65:
            got = k.pop_next()
            if got is not None:
                live.remove(str(got.id))
                running.append(str(got.id))
        elif op < 0.75 and running:
            k.release(running.pop(rng.randrange(len(running))))
        elif op < 0.87:
            k.cancel(live.pop(rng.randrange(len(live))))
        else:
            k.reprioritize(rng.choice(live), rng.randrange(5))
        if n % 50 == 0:
            stats = k.stats()
            expected = [
                (lane, s.queued, s.running, s.weight, k.pending(lane)[0].id)
                for lane, s in stats.lanes.items()
                if s.queued
            ]
            got_heads = [(lane, q, r, w, head.id) for lane, q, r, w, head in k.lane_heads()]
            assert got_heads == expected
            for lane in stats.lanes:
                for m in (0, 1, 3, 1000):
                    assert k.first_pending(lane, m) == k.pending(lane)[:m]
