"""The fair claim (claims.py) end to end, on both stores: one worker with a few slots, one
tenant's flood appended live, light tenants appended at delays from none to a few hundred ms
after it. Their events start within about their sfq share, whatever the timing.

Waits are counted in starts, not seconds, so a loaded machine does not change them: the wait of
an event, in task times, is the number of `process()` calls any tenant started between its
append and its own start, divided by the slots.
"""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from tests.actors.conftest import MakeRuntime, wait_for
from yoke.actors import ActorCtx, Event, Queue
from yoke.actors.protocol import ActorStore

SLOTS = 4
LIGHT = ("l1", "l2", "l3")
PER_LIGHT = 8
FLOOD = 100 * PER_LIGHT
TASK = 0.015  # seconds a process() call takes: one task time


def ideal_wait(tenants: int, events: int, slots: int) -> float:
    """SFQ alone: with `tenants` backlogged sharing `slots`, a tenant's k-th event starts
    after about k rounds of `tenants` starts; its last one waits this many task times."""
    return events * tenants / slots


async def flood_then_light(
    rt_make: MakeRuntime, store: ActorStore, delay: float, **s: object
) -> tuple[list[float], float]:
    # The first-come claim's window is made smaller than the flood (its default, 2,048, is
    # larger than this test's flood): it then holds 200 of the flood's rows ahead of the light.
    rt = rt_make(concurrency=SLOTS, prefetch=200, batch_size=100, **s)
    starts: list[tuple[float, str]] = []  # (monotonic time, tenant) of every process() start
    appended: dict[str, float] = {}  # a light event's key -> when its append began
    began: dict[str, float] = {}
    done = asyncio.Event()

    @rt.actor(subscribe=["s"], key="k", queue=Queue(concurrency=100))
    async def work(ctx: ActorCtx, event: Event) -> None:
        now = time.monotonic()
        starts.append((now, ctx.tenant))
        if ctx.tenant != "flood":
            began[event.data["k"]] = now
            if len(began) == len(LIGHT) * PER_LIGHT:
                done.set()
        await asyncio.sleep(TASK)

    async with rt.running(store):
        for chunk in range(5):  # live: the worker is claiming while the flood arrives
            rows = [{"k": f"f{i % 100}"} for i in range(FLOOD // 5)]
            await rt.append_many("s", rows, tenant="flood")
            if chunk == 0:
                await asyncio.sleep(0.02)
        if delay:
            await asyncio.sleep(delay)

        async def light(tenant: str) -> None:
            keys = [f"{tenant}-{i}" for i in range(PER_LIGHT)]
            await rt.append_many("s", [{"k": k} for k in keys], tenant=tenant)
            # From its commit on: no claim can see a row before, whatever the drain does.
            appended.update(dict.fromkeys(keys, time.monotonic()))

        await asyncio.gather(*(light(t) for t in LIGHT))
        await wait_for(done, 60)
    waits = sorted(
        sum(1 for t, _ in starts if appended[k] < t < began[k]) / SLOTS for k in appended
    )
    # The flood's share of the starts while every light tenant had started and none had
    # finished: all four tenants backlogged (their appends may commit apart on a loaded box).
    by = {t: [at for k, at in began.items() if k.startswith(f"{t}-")] for t in LIGHT}
    first, last = max(min(v) for v in by.values()), min(max(v) for v in by.values())
    during = [tenant for t, tenant in starts if first <= t <= last]
    return waits, during.count("flood") / len(during)


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.3])
async def test_light_tenants_start_within_their_share_of_a_live_flood(
    actor_store: ActorStore, make_runtime: MakeRuntime, delay: float
) -> None:
    waits, flood_share = await flood_then_light(make_runtime, actor_store, delay)
    ideal = ideal_wait(len(LIGHT) + 1, PER_LIGHT, SLOTS)
    p99 = waits[math.ceil(0.99 * len(waits)) - 1]
    # The first-come claim holds the flood's 500 rows: the light events wait ~100 task times.
    assert p99 <= 2 * ideal, (p99, ideal, waits)
    # While they wait the flood gets about its share (1 of 4 backlogged tenants), not the rest.
    assert flood_share <= 1 / (len(LIGHT) + 1) + 0.15, flood_share
