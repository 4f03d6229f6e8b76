"""The drain end to end on every `ActorStore`: fan-out, FIFO per group, the per-group cap,
custom select, requeue with backoff and dead letters, atomic state, fairness between tenants.

Synchronisation is by events set from `process()`, never by sleeping a fixed time.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import pytest

from tests.actors.conftest import MakeRuntime, wait_for
from yoke.actors import ActorCtx, Backoff, Event, Queue
from yoke.actors.protocol import ActorStore
from yoke.errors import BadValue


async def test_fan_out_reaches_the_right_instances(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    rt = make_runtime()
    seen: list[tuple[str, str, Any]] = []
    done = asyncio.Event()

    @rt.actor(subscribe=["carts"], key="cart_id")
    async def cart(ctx: ActorCtx, event: Event) -> None:
        seen.append(("cart", ctx.instance_id, event.data["n"]))
        if len(seen) == 7:
            done.set()

    @rt.actor(subscribe=["carts", "other"], key="user")
    async def user(ctx: ActorCtx, event: Event) -> None:
        seen.append(("user", ctx.instance_id, event.data["n"]))
        if len(seen) == 7:
            done.set()

    async with rt.running(actor_store):
        await rt.append("carts", {"cart_id": "c1", "user": "u1", "n": 1})
        with pytest.raises(BadValue):  # a subscriber's key (user) is missing: refused
            await rt.append("carts", {"cart_id": "c2", "n": 2})
        await rt.append("carts", {"cart_id": "c2", "user": 7, "n": 2})
        await rt.append("other", {"user": "u2", "n": 3})
        await rt.append("ignored", {"cart_id": "c1", "n": 4})  # no subscriber
        await rt.append_many("carts", [{"cart_id": "c1", "user": "u1", "n": 5}])
        await wait_for(done)
    assert sorted(seen) == [
        ("cart", "c1", 1),
        ("cart", "c1", 5),
        ("cart", "c2", 2),
        ("user", "7", 2),
        ("user", "u1", 1),
        ("user", "u1", 5),
        ("user", "u2", 3),
    ]
    view = await rt.instance("cart", "c1")
    assert view.queue_depth == 0 and view.worker_id is None  # released at shutdown


async def test_fifo_per_group_and_cap_never_exceeded(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    rt = make_runtime(concurrency=64)
    cap = 3
    running: dict[str, int] = defaultdict(int)
    peak: dict[str, int] = defaultdict(int)
    started: dict[str, list[int]] = defaultdict(list)
    n_events = 200
    done = asyncio.Event()
    count = 0
    gate = asyncio.Event()
    full = asyncio.Event()

    @rt.actor(subscribe=["orders"], key="shop", queue=Queue(concurrency=cap, group_by="line"))
    async def shop(ctx: ActorCtx, event: Event) -> None:
        nonlocal count
        g = event.group_id
        running[g] += 1
        peak[g] = max(peak[g], running[g])
        if sum(running.values()) == 4 * cap:
            full.set()
        started[g].append(event.data["seq"])
        await gate.wait()  # hold the slot so the cap is really tested
        for _ in range(3):
            await asyncio.sleep(0)
        running[g] -= 1
        count += 1
        if count == n_events:
            done.set()

    async with rt.running(actor_store):
        await rt.append_many(
            "orders", [{"shop": "s1", "line": i % 4, "seq": i} for i in range(n_events)]
        )
        await wait_for(full)  # every group at its cap, and no more
        gate.set()
        await wait_for(done)
    assert max(peak.values()) == cap
    for g, seqs in started.items():
        # With concurrency 3 the starts of a group are still in arrival order.
        assert seqs == sorted(seqs), g
    assert sum(len(s) for s in started.values()) == n_events


async def test_concurrency_one_is_strict_fifo(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    rt = make_runtime(concurrency=16)
    order: dict[str, list[int]] = defaultdict(list)
    done = asyncio.Event()

    @rt.actor(subscribe=["s"], key="k", queue=Queue(group_by="g"))
    async def a(ctx: ActorCtx, event: Event) -> None:
        order[event.group_id].append(event.data["i"])
        await asyncio.sleep(0)
        if sum(len(v) for v in order.values()) == 90:
            done.set()

    async with rt.running(actor_store):
        for chunk in range(3):
            await rt.append_many(
                "s", [{"k": "x", "g": i % 3, "i": chunk * 30 + i} for i in range(30)]
            )
        await wait_for(done)
    for g, seq in order.items():
        assert seq == sorted(seq), g


async def test_custom_select_picks_among_pending(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    rt = make_runtime()
    order: list[int] = []
    done = asyncio.Event()

    @rt.actor(
        subscribe=["jobs"],
        key="k",
        queue=Queue(mode="custom", select={"order_by": "data.prio", "desc": True}),
    )
    async def picky(ctx: ActorCtx, event: Event) -> None:
        order.append(event.data["prio"])
        if len(order) == 6:
            done.set()

    def smallest_odd_first(events: Sequence[Event]) -> Event | None:
        odd = [e for e in events if e.data["v"] % 2]
        return min(odd, key=lambda e: int(e.data["v"])) if odd else events[0]

    inline: list[int] = []
    done2 = asyncio.Event()

    @rt.actor(subscribe=["vals"], key="k", queue=Queue(mode="custom", select=smallest_odd_first))
    async def inline_select(ctx: ActorCtx, event: Event) -> None:
        inline.append(event.data["v"])
        if len(inline) == 5:
            done2.set()

    rt.attach(actor_store)
    # Appended before the worker runs: all pending at the first claim.
    await rt.append_many("jobs", [{"k": "a", "prio": p} for p in (1, 5, 3, 9, 2, 7)])
    await rt.append_many("vals", [{"k": "a", "v": v} for v in (4, 9, 3, 8, 5)])
    async with rt.running():
        await wait_for(done)
        await wait_for(done2)
    assert order == [9, 7, 5, 3, 2, 1]
    assert inline == [3, 5, 9, 4, 8]


async def test_custom_select_chooses_over_the_whole_backlog_not_just_the_prefetch(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    # The worker holds at most a few claimed rows (prefetch 2), far fewer than the backlog:
    # select must still see the group's pending events in the store (the actors specification:
    # list pending, select, claim the chosen one), so the order is the select's over all 60.
    rt = make_runtime(concurrency=1, prefetch=2, batch_size=4)
    prios = random.Random(5).sample(range(1000), 60)
    order: list[int] = []
    done = asyncio.Event()

    @rt.actor(
        subscribe=["jobs"],
        key="k",
        queue=Queue(mode="custom", select={"order_by": "data.prio", "desc": True}),
    )
    async def urgent_first(ctx: ActorCtx, event: Event) -> None:
        order.append(event.data["prio"])
        if len(order) == len(prios):
            done.set()

    rt.attach(actor_store)
    await rt.append_many("jobs", [{"k": "a", "prio": p} for p in prios])
    async with rt.running():
        await wait_for(done)
    assert order == sorted(prios, reverse=True)


async def test_requeue_with_backoff_then_dead_letter(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    rt = make_runtime()
    attempts: list[int] = []
    later: list[int] = []
    done = asyncio.Event()
    flaky_done = asyncio.Event()
    flaky_tries = 0

    @rt.actor(subscribe=["s"], key="k", backoff=Backoff(initial=0.01, max_attempts=3))
    async def boom(ctx: ActorCtx, event: Event) -> None:
        if event.data["bad"]:
            attempts.append(event.attempt)
            raise RuntimeError("nope")
        later.append(event.data["i"])
        done.set()

    @rt.actor(subscribe=["f"], key="k", backoff=Backoff(initial=0.01, factor=1))
    async def flaky(ctx: ActorCtx, event: Event) -> None:
        nonlocal flaky_tries
        flaky_tries += 1
        if flaky_tries < 3:
            raise ValueError("transient")
        flaky_done.set()

    async with rt.running(actor_store):
        await rt.append("s", {"k": "x", "bad": True, "i": 0})
        await rt.append("s", {"k": "x", "bad": False, "i": 1})
        await rt.append("f", {"k": "y"})
        await wait_for(done)
        await wait_for(flaky_done)
        stats = rt.drain_stats()
        assert stats is not None and stats.errors == 5 and stats.dead == 1
        await rt.drain.flush()  # type: ignore[union-attr]
        view = await rt.instance("boom", "x")
    # The failing event kept its place: the next one waited for its last attempt.
    assert attempts == [1, 2, 3] and later == [1]
    assert view.dead == 1 and view.queue_depth == 0
    (dl,) = view.dead_letters
    assert dl.attempts == 3 and dl.error is not None and "nope" in dl.error
    assert flaky_tries == 3
    assert (await rt.instance("flaky", "y")).queue_depth == 0


async def test_state_update_loses_nothing(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    rt = make_runtime(concurrency=32)
    done = asyncio.Event()
    finished = 0

    @rt.actor(subscribe=["hits"], key="page", queue=Queue(concurrency=10, group_by="g"))
    async def page(ctx: ActorCtx, event: Event) -> None:
        nonlocal finished
        await asyncio.gather(
            *(ctx.state.update(lambda s: {**s, "n": s.get("n", 0) + 1}) for _ in range(10))
        )
        finished += 1
        if finished == 10:
            done.set()

    async with rt.running(actor_store):
        await rt.append_many("hits", [{"page": "home", "g": i} for i in range(10)])
        await wait_for(done)
        view = await rt.instance("page", "home")
    assert view.state == {"n": 100}
    assert view.version == 100


async def test_tenants_share_the_worker_fairly(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    # A window (prefetch) far smaller than the flood: fairness must hold at the claim too.
    rt = make_runtime(concurrency=1, prefetch=4, batch_size=8)
    order: list[str] = []
    done = asyncio.Event()

    @rt.actor(subscribe=["s"], key="k", queue=Queue(concurrency=100))
    async def work(ctx: ActorCtx, event: Event) -> None:
        order.append(ctx.tenant)
        await asyncio.sleep(0)
        if len(order) == 50:
            done.set()

    rt.attach(actor_store)
    await rt.append_many("s", [{"k": "a"} for _ in range(40)], tenant="flood")
    await rt.append_many("s", [{"k": "b"} for _ in range(10)], tenant="light")
    async with rt.running():
        await wait_for(done)
    # The light tenant's ten events are not left behind the flood's forty.
    assert order[:24].count("light") == 10, order
