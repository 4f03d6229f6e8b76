"""A move is a fenced hand-over (`yoke.actors.fleet`), on every store: the giver starts nothing
more of the instance, lets its running call end and writes its completion, then owner and
epoch move in one transaction; the taker runs the rest in order. And the balancer gives a
joining worker its share; `GET /v1/workers` shows shares and moves under way."""

from __future__ import annotations

import asyncio
import json

from prometheus_client import generate_latest

from tests.actors.conftest import MakeRuntime, wait_for
from tests.executions.helpers import wait_until
from yoke.actors import ActorCtx, ActorRuntime, Event, Queue
from yoke.actors.protocol import ActorStore
from yoke.store.actor_records import InstanceRef

X = InstanceRef(tenant="default", actor="a", instance_id="x")


def define(rt: ActorRuntime, calls: list[tuple[str, str, int]], release: asyncio.Event) -> None:
    @rt.actor(subscribe=["s"], key="k", queue=Queue(concurrency=1))
    async def a(ctx: ActorCtx, event: Event) -> None:
        seq = event.data["seq"]
        calls.append(("S", rt.worker_id, seq))
        if seq == 0:
            await release.wait()
        await ctx.state.update(lambda s: {"seen": [*s.get("seen", []), seq]})
        calls.append(("E", rt.worker_id, seq))


async def test_a_move_waits_for_the_running_call_and_keeps_fifo(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    calls: list[tuple[str, str, int]] = []
    release = asyncio.Event()
    # `creator`: no balancer; the move is marked by hand, the givers' loops finish it.
    rt1 = make_runtime("w1", placement="creator", rebalance_interval=0.05)
    rt2 = make_runtime("w2", placement="creator", rebalance_interval=0.05)
    define(rt1, calls, release)
    define(rt2, calls, release)
    async with rt1.running(actor_store):
        await rt1.append_many("s", [{"k": "x", "seq": n} for n in range(6)])

        async def blocked() -> bool:
            return ("S", "w1", 0) in calls

        await wait_until(blocked)
        async with rt2.running(actor_store):
            assert await actor_store.fleet.mark_moves([(X, "w1", "w2")], now=rt1.wall()) == 1
            fleet = rt1.fleet
            assert fleet is not None

            async def giving() -> bool:
                return X in fleet.giving

            await wait_until(giving)
            info = await actor_store.get_instance(X)
            assert info is not None and info.worker_id == "w1"  # its call still runs there
            assert calls == [("S", "w1", 0)]  # nothing more started, here or there
            release.set()

            async def all_done() -> bool:
                i = await actor_store.get_instance(X)
                return i is not None and i.pending == 0 and i.in_flight == 0

            await wait_until(all_done)
            info = await actor_store.get_instance(X)
            assert info is not None and info.worker_id == "w2" and info.epoch >= 2
            assert not fleet.giving and fleet.given == 1
            registry = rt1.metrics.registry
            assert registry is not None
            text = generate_latest(registry).decode()
            assert 'yoke_actor_moves_total{reason="rebalance"} 1.0' in text
            assert 'yoke_actor_moves_total{reason="takeover"} 0.0' in text
    # The running call ended (and was written) before the taker started anything of x; then
    # the taker ran the rest, in order, one at a time.
    assert calls[:2] == [("S", "w1", 0), ("E", "w1", 0)], calls
    assert calls[2:] == [(k, "w2", n) for n in range(1, 6) for k in ("S", "E")], calls
    state = await actor_store.get_state(X)
    assert state is not None and json.loads(state.state) == {"seen": [0, 1, 2, 3, 4, 5]}


async def test_a_move_to_a_worker_gone_since_is_cancelled(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    calls: list[tuple[str, str, int]] = []
    release = asyncio.Event()
    release.set()
    rt1 = make_runtime("w1", placement="creator", rebalance_interval=0.05)
    define(rt1, calls, release)
    async with rt1.running(actor_store):
        await rt1.append_many("s", [{"k": "x", "seq": 0}])
        await actor_store.fleet.register_worker("w9", hostname="h", pid=9, now=rt1.wall())
        await actor_store.fleet.stop_worker("w9", now=rt1.wall())
        assert await actor_store.fleet.mark_moves([(X, "w1", "w9")], now=rt1.wall()) == 1
        fleet = rt1.fleet
        assert fleet is not None

        async def cancelled() -> bool:
            i = await actor_store.get_instance(X)
            return i is not None and i.worker_id == "w1" and i.epoch >= 2

        await wait_until(cancelled)
        await rt1.append_many("s", [{"k": "x", "seq": 1}])  # still drained here

        async def done() -> bool:
            return ("E", "w1", 1) in calls

        await wait_until(done)
        assert fleet.given == 0
        counts = {c.worker_id: c for c in await actor_store.fleet.fleet_counts()}
        assert counts["w1"].moving_out == 0 and "w9" not in counts


async def test_rows_claimed_after_a_cancelled_move_while_others_settle_are_run_by_the_giver(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    # Two moves in one look to a worker gone since: x's ends at once (cancelled: x stays here
    # under a new epoch, pending again), y's waits for its running call. Meanwhile x gets an
    # event and the giver claims it; x is still paused (resumed with y, when the whole look
    # ends), so the row is not held. Left so, it is this worker's claim that nothing holds:
    # the giver claims pending rows only, so it would stay in flight until the worker stops.
    ran: list[tuple[str, int]] = []
    release = asyncio.Event()
    rt1 = make_runtime("w1", placement="creator", rebalance_interval=0.05, move_grace=30.0)

    @rt1.actor(subscribe=["s"], key="k")
    async def a(ctx: ActorCtx, event: Event) -> None:
        if event.data["block"]:
            await release.wait()
        ran.append((ctx.instance_id, event.data["seq"]))

    x, y = X, InstanceRef(tenant="default", actor="a", instance_id="y")
    async with rt1.running(actor_store):
        await rt1.append_many(
            "s", [{"k": "x", "seq": 0, "block": False}, {"k": "y", "seq": 0, "block": True}]
        )

        async def x_done() -> bool:
            return ("x", 0) in ran

        await wait_until(x_done)
        await actor_store.fleet.register_worker("w9", hostname="h", pid=9, now=rt1.wall())
        await actor_store.fleet.stop_worker("w9", now=rt1.wall())
        assert (
            await actor_store.fleet.mark_moves([(x, "w1", "w9"), (y, "w1", "w9")], now=rt1.wall())
            == 2
        )

        async def x_kept() -> bool:
            i = await actor_store.get_instance(x)
            return i is not None and i.worker_id == "w1" and i.epoch >= 2

        await wait_until(x_kept)  # cancelled; y's move still waits for its call
        fleet = rt1.fleet
        assert fleet is not None and y in fleet.giving
        await rt1.append_many("s", [{"k": "x", "seq": 1, "block": False}])

        async def x_claimed() -> bool:
            i = await actor_store.get_instance(x)
            return i is not None and i.in_flight == 1

        await wait_until(x_claimed)
        release.set()

        async def all_done() -> bool:
            i = await actor_store.get_instance(x)
            return ("x", 1) in ran and i is not None and i.pending == i.in_flight == 0

        await wait_until(all_done)
    assert sorted(ran) == [("x", 0), ("x", 1), ("y", 0)]


async def test_the_balancer_gives_a_joining_worker_its_share(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    calls: list[tuple[str, str, int]] = []
    release = asyncio.Event()
    release.set()
    fast = {"rebalance_interval": 0.05, "rebalance_max_moves": 7}
    rt1 = make_runtime("w1", **fast)
    rt2 = make_runtime("w2", **fast)
    define(rt1, calls, release)
    define(rt2, calls, release)
    async with rt1.running(actor_store):
        # 40 instances, all on w1: the only live worker.
        await rt1.append_many("s", [{"k": f"x{n}", "seq": 1} for n in range(40)])
        assert {c.worker_id: c.owned for c in await actor_store.fleet.fleet_counts()} == {"w1": 40}
        async with rt2.running(actor_store):
            seen_moving = 0

            async def shared() -> bool:
                nonlocal seen_moving
                counts = {c.worker_id: c for c in await actor_store.fleet.fleet_counts()}
                seen_moving = max(seen_moving, sum(c.moving_out for c in counts.values()))
                got = {w: c.owned for w, c in counts.items()}
                return got.get("w2", 0) >= 16 and got.get("w1", 0) >= 16

            await wait_until(shared, 30)
            assert seen_moving <= 7  # never more moves under way than the bound
            await rt1.append_many("s", [{"k": f"x{n}", "seq": 2} for n in range(40)])

            async def drained() -> bool:
                (c,) = await actor_store.actor_counts(tenant=None)
                return c.pending == 0 and c.in_flight == 0

            await wait_until(drained, 30)
    ran = {(w, s) for k, w, s in calls if k == "E"}
    assert {s for _, s in ran} == {1, 2} and {w for w, s in ran if s == 2} == {"w1", "w2"}
    assert len([c for c in calls if c[0] == "E"]) == 80  # each event once


async def test_no_live_worker_leaves_new_instances_unowned_for_the_first_one_up(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    calls: list[tuple[str, str, int]] = []
    release = asyncio.Event()
    release.set()
    ingest = make_runtime("ingest")  # as `yoke serve --no-worker`: attached, never running
    define(ingest, calls, release)
    ingest.attach(actor_store)
    await ingest.append_many("s", [{"k": "x", "seq": 0}])
    info = await actor_store.get_instance(X)
    assert info is not None and info.worker_id is None
    rt1 = make_runtime("w1", rebalance_interval=0.05)
    define(rt1, calls, release)
    done = asyncio.Event()
    async with rt1.running(actor_store):
        info = await actor_store.get_instance(X)
        assert info is not None and info.worker_id == "w1"  # taken at boot
        await ingest.append_many("s", [{"k": "y", "seq": 1}])  # placed on the live worker
        y = await actor_store.get_instance(
            InstanceRef(tenant="default", actor="a", instance_id="y")
        )
        assert y is not None and y.worker_id == "w1"

        async def both() -> bool:
            if {("E", "w1", 0), ("E", "w1", 1)} <= set(calls):
                done.set()
            return done.is_set()

        await wait_until(both)
        await wait_for(done)
    assert "ingest" not in {c.worker_id for c in await actor_store.fleet.fleet_counts()}


async def test_a_stopping_worker_hands_its_instances_to_the_live_ones(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    calls: list[tuple[str, str, int]] = []
    release = asyncio.Event()
    release.set()
    # No heartbeat, no balancing step during the test: what moves, moves at the stop.
    quiet = {"heartbeat_interval": 3600.0, "stale_after": 7200.0, "rebalance_interval": 3600.0}
    rt1, rt2, rt3 = (make_runtime(w, **quiet) for w in ("w1", "w2", "w3"))
    for rt in (rt1, rt2, rt3):
        define(rt, calls, release)
    async with rt2.running(actor_store), rt3.running(actor_store):
        async with rt1.running(actor_store):
            await rt1.append_many("s", [{"k": f"x{n}", "seq": n} for n in range(30)])
            before = {c.worker_id: c.owned for c in await actor_store.fleet.fleet_counts()}
            assert sum(before.values()) == 30 and set(before) <= {"w1", "w2", "w3"}
        after = {c.worker_id: c.owned for c in await actor_store.fleet.fleet_counts()}
        # At once (no heartbeat has run since), all on the two live workers, w1's spread.
        assert "w1" not in after and sum(after.values()) == 30, after
        assert after["w2"] >= before.get("w2", 0) and after["w3"] >= before.get("w3", 0)
        if before.get("w1", 0) >= 4:
            assert after["w2"] > before.get("w2", 0) and after["w3"] > before.get("w3", 0)


async def test_the_fleet_verbs_count_and_list_what_the_balancer_reads(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    rt = make_runtime("ingest")
    define(rt, [], asyncio.Event())
    rt.attach(actor_store)
    now = rt.wall()
    for w in ("w1", "w2"):
        await actor_store.fleet.register_worker(w, hostname="h", pid=1, now=now)
    owner = {"x0": "w1", "x1": "w1", "x2": "w1", "x3": "w2"}

    def place(ref: InstanceRef) -> str | None:
        return owner[ref.instance_id]

    events = rt.registry.new_events(
        "s", [{"k": f"x{i}", "seq": 0} for i in (0, 0, 0, 1, 1, 2, 3, 3)], tenant="default"
    )
    await actor_store.append_events(events, owner=place, now=now)
    ref = {k: InstanceRef(tenant="default", actor="a", instance_id=k) for k in owner}
    assert await actor_store.fleet.pending_heads("w1", limit=2) == [(ref["x0"], 3), (ref["x1"], 2)]
    assert (
        await actor_store.fleet.mark_moves(
            [(ref["x0"], "w1", "w2"), (ref["x3"], "w1", "w2")], now=now
        )
        == 1
    )
    assert (
        await actor_store.fleet.mark_moves([(ref["x0"], "w1", "w2")], now=now) == 0
    )  # moving already
    assert await actor_store.fleet.pending_heads("w1", limit=5) == [(ref["x1"], 2), (ref["x2"], 1)]
    counts = {c.worker_id: c for c in await actor_store.fleet.fleet_counts(with_pending=True)}
    assert (counts["w1"].owned, counts["w1"].moving_out, counts["w1"].pending) == (3, 1, 6)
    assert (counts["w2"].owned, counts["w2"].moving_in, counts["w2"].pending) == (1, 1, 2)
    page = await actor_store.fleet.owned_page(worker_id="w1", after=None, limit=10)
    assert page == [(ref["x1"], "w1"), (ref["x2"], "w1")]  # x0 is moving
    after = await actor_store.fleet.owned_page(worker_id=None, after=ref["x1"], limit=10)
    assert after == [(ref["x2"], "w1"), (ref["x3"], "w2")]
    (order,) = await actor_store.fleet.moves_from("w1", limit=10)
    assert (order.ref, order.taker) == (ref["x0"], "w2")
